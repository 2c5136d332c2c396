package io.idmint;

import static io.idmint.Services.config;
import static io.idmint.Services.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Generators: fixed, leased from the file registry, PostgreSQL (idmint's
 * table and uid-generator's WORKER_NODE) and etcd, two JVMs on one registry,
 * a lease lost with its registry, many threads, close, and the Cleaner.
 */
class GeneratorTest {
    @TempDir
    Path tmp;

    @Test
    void fixedGeneratorAndItsErrors() {
        Generator g = Generator.builder().layout("twitter").worker(7).build();
        long a = g.nextId();
        long[] batch = g.nextIds(10_000);
        assertTrue(a < batch[0]);
        assertStrictlyIncreasing(batch);
        assertEquals(7, Layout.parse("twitter").decode(a).worker());
        assertEquals(7, g.worker());
        assertEquals(new Generator.Status("fixed", 7, "held", Optional.empty()), g.status());
        assertEquals(Layout.parse("twitter"), g.layout());

        IdmintException e = assertThrows(IdmintException.class, () -> g.nextIds(0));
        assertEquals("invalid_count", e.code());
        assertEquals(Optional.empty(), e.retryAfter());
        assertEquals("invalid_count", assertThrows(IdmintException.class, () -> g.nextIds(-5)).code());
        e = assertThrows(IdmintException.class, () -> Generator.builder().worker(32).build());
        assertEquals("node_out_of_range", e.code());
        assertTrue(e.getMessage().contains("32"), e.getMessage());
        e = assertThrows(IdmintException.class, () -> Generator.builder().worker(-1).build());
        assertEquals("node_out_of_range", e.code());
        e = assertThrows(IdmintException.class, () -> Generator.builder().clockBehind("sometimes").build());
        assertEquals("invalid_text", e.code());
        e = assertThrows(IdmintException.class, () -> Generator.builder().layout("twitter,sequence=twelve").build());
        assertEquals("invalid_layout_text", e.code());
        assertTrue(e instanceof RuntimeException);
        g.close();
    }

    @Test
    void closeTwiceIsHarmlessAndACallAfterCloseIsClosed() {
        Generator s;
        try (Generator g = Generator.builder().layout("sonyflake").worker(9).sequenceExhausted("wait").build()) {
            assertEquals(9, Layout.parse("sonyflake").decode(g.nextId()).worker());
            s = g;
        }
        s.close();
        s.close();
        for (Runnable call : List.<Runnable>of(s::nextId, () -> s.nextIds(3), s::status, s::worker)) {
            IdmintException e = assertThrows(IdmintException.class, call::run);
            assertEquals(IdmintException.CLOSED, e.code());
            assertEquals(Optional.empty(), e.retryAfter());
        }
        assertTrue(s.toString().contains("closed"), s.toString());
    }

    @Test
    void fromConfigFileRegistry() throws Exception {
        Path path = config(tmp, "[snowflake]\nlayout = \"twitter\"\nregistry = \"file\"\n");
        long last;
        try (Generator g = Generator.fromConfig(path)) {
            long[] ids = new long[6000];
            for (int i = 0; i < 1000; i++) {
                ids[i] = g.nextId();
            }
            System.arraycopy(g.nextIds(5000), 0, ids, 1000, 5000);
            assertStrictlyIncreasing(ids);
            assertEquals("held", g.status().lease());
            assertEquals("file", g.status().registry());
            // The data directory is this generator's alone while it is open.
            IdmintException e = assertThrows(IdmintException.class, () -> Generator.fromConfig(path));
            assertEquals("registry_config", e.code());
            last = ids[ids.length - 1];
        }
        Generator again = Generator.fromConfig(path);
        assertTrue(again.nextId() > last, "the mark persisted ahead: above every earlier ID");
        again.close();
        assertEquals("closed", assertThrows(IdmintException.class, () -> again.nextIds(2)).code());
    }

    @Test
    void manyThreadsShareOneGeneratorAndNoIdComesTwice() throws Exception {
        Path path = config(tmp, "[snowflake]\nlayout = \"twitter\"\nregistry = \"file\"\n");
        try (Generator fixed = Generator.builder().worker(3).build();
                Generator leased = Generator.fromConfig(path)) {
            for (Generator g : List.of(fixed, leased)) {
                ExecutorService pool = Executors.newFixedThreadPool(8);
                List<Future<long[]>> parts = new ArrayList<>();
                for (int t = 0; t < 8; t++) {
                    boolean batches = t % 2 == 0;
                    parts.add(pool.submit(() -> {
                        long[] ids = new long[25_000];
                        for (int i = 0; i < ids.length; ) {
                            if (batches) {
                                long[] b = g.nextIds(500);
                                System.arraycopy(b, 0, ids, i, b.length);
                                i += b.length;
                            } else {
                                ids[i++] = g.nextId();
                            }
                        }
                        assertStrictlyIncreasing(ids); // each thread's IDs increase
                        return ids;
                    }));
                }
                Set<Long> seen = new HashSet<>();
                for (Future<long[]> part : parts) {
                    for (long id : part.get(60, TimeUnit.SECONDS)) {
                        assertTrue(seen.add(id), "ID " + id + " came twice");
                    }
                }
                pool.shutdown();
                assertEquals(8 * 25_000, seen.size());
            }
        }
    }

    @Test
    void closeRacingCallsOnOtherThreadsOnlyEverSaysClosed() throws Exception {
        for (int round = 0; round < 20; round++) {
            Generator g = Generator.builder().worker(4).build();
            ExecutorService pool = Executors.newFixedThreadPool(4);
            List<Future<Long>> callers = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                callers.add(pool.submit(() -> {
                    long n = 0;
                    while (true) {
                        try {
                            g.nextId();
                            n++;
                        } catch (IdmintException e) {
                            assertEquals("closed", e.code());
                            return n;
                        }
                    }
                }));
            }
            Thread.sleep(2);
            g.close();
            for (Future<Long> c : callers) {
                c.get(10, TimeUnit.SECONDS);
            }
            pool.shutdown();
        }
    }

    @Test
    void anUnreachableGeneratorIsClosedByTheCleaner() throws Exception {
        Path path = config(tmp, "[snowflake]\nlayout = \"twitter\"\nregistry = \"file\"\n");
        Generator.fromConfig(path).nextId(); // never closed, dropped at once
        // The data directory stays locked until the Cleaner frees (and so
        // closes) the dropped generator.
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (true) {
            System.gc();
            try {
                Generator.fromConfig(path).close();
                return;
            } catch (IdmintException e) {
                assertEquals("registry_config", e.code());
            }
            if (System.nanoTime() > deadline) {
                fail("the dropped generator still holds the data directory after 20 s of GCs");
            }
            Thread.sleep(50);
        }
    }

    /** Two JVMs on one registry: distinct worker IDs, no ID twice. */
    static void twoJvmsNeverShareAWorker(Path path) throws Exception {
        List<Process> procs = List.of(Services.jvm(ChildJvm.class, path.toString()), Services.jvm(ChildJvm.class, path.toString()));
        List<String[]> lines = new ArrayList<>();
        for (Process p : procs) {
            BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
            String line = out.readLine();
            if (line == null) {
                fail("the child JVM printed nothing: " + new String(p.getErrorStream().readAllBytes(), StandardCharsets.UTF_8));
            }
            lines.add(line.split(" "));
        }
        for (Process p : procs) {
            p.getOutputStream().close();
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "a child JVM did not exit");
            assertEquals(0, p.exitValue(), () -> new String(readErr(p), StandardCharsets.UTF_8));
        }
        assertNotEquals(lines.get(0)[0], lines.get(1)[0], "two JVMs claimed one worker ID");
        Set<Long> ids = new HashSet<>();
        for (String[] line : lines) {
            assertEquals(20_001, line.length);
            for (String id : Arrays.copyOfRange(line, 1, line.length)) {
                assertTrue(ids.add(Long.parseLong(id)), "ID " + id + " came twice");
            }
        }
    }

    private static byte[] readErr(Process p) {
        try {
            return p.getErrorStream().readAllBytes();
        } catch (java.io.IOException e) {
            return new byte[0];
        }
    }

    @Test
    void leasedOnPostgres() throws Exception {
        String url = Services.postgres();
        Path path = config(tmp, "[snowflake]\nregistry = \"sql\"\n[snowflake.sql]\nurl = \"" + url
                + "\"\ncluster = \"" + unique("java") + "\"\n");
        twoJvmsNeverShareAWorker(path);
        try (Generator g = Generator.fromConfig(path)) {
            assertEquals("sql", g.status().registry());
            assertEquals("held", g.status().lease());
        }
    }

    @Test
    void leasedOnPostgresUidGeneratorTable() throws Exception {
        String url = Services.postgres();
        String table = unique("worker_node");
        Services.psql("CREATE TABLE " + table + " (ID BIGSERIAL NOT NULL, HOST_NAME VARCHAR(64) NOT NULL, "
                + "PORT VARCHAR(64) NOT NULL, TYPE INT NOT NULL, LAUNCH_DATE DATE NOT NULL, "
                + "MODIFIED TIMESTAMP NOT NULL, CREATED TIMESTAMP NOT NULL, PRIMARY KEY(ID))");
        try {
            Path path = config(tmp, "[snowflake]\nlayout = \"baidu,epoch=2024-01-01\"\nregistry = \"sql\"\n"
                    + "[snowflake.sql]\nurl = \"" + url + "\"\nmode = \"uid-generator\"\ntable = \"" + table + "\"\n");
            twoJvmsNeverShareAWorker(path);
        } finally {
            Services.psql("DROP TABLE " + table);
        }
    }

    @Test
    void leasedOnEtcd() throws Exception {
        String endpoint = Services.etcd();
        Path path = config(tmp, "[snowflake]\nregistry = \"etcd\"\n[snowflake.etcd]\nendpoints = [\"" + endpoint
                + "\"]\ncluster = \"" + unique("java") + "\"\n");
        twoJvmsNeverShareAWorker(path);
        try (Generator g = Generator.fromConfig(path)) {
            assertEquals("etcd", g.status().registry());
            assertStrictlyIncreasing(g.nextIds(1000));
        }
    }

    @Test
    void aNormalJvmExitReleasesTheLease() throws Exception {
        String endpoint = Services.etcd();
        String cluster = unique("java");
        Path path = config(tmp, "[snowflake]\nregistry = \"etcd\"\n[snowflake.etcd]\nendpoints = [\"" + endpoint
                + "\"]\ncluster = \"" + cluster + "\"\nlease_ttl = \"60s\"\n");
        String workers = "/idmint/" + cluster + "/workers/";
        List<String> keys = List.of("etcdctl", "--endpoints=" + endpoint, "get", "--prefix", "--keys-only", workers);
        try (Generator held = Generator.fromConfig(path)) {
            assertTrue(Services.run(keys).contains(workers), "a held lease shows as a worker key");
            Process child = Services.jvm(ExitWithoutClose.class, path.toString());
            assertTrue(child.waitFor(60, TimeUnit.SECONDS), "the child JVM did not exit");
            assertEquals(0, child.exitValue(), () -> new String(readErr(child), StandardCharsets.UTF_8));
            String worker = new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
            // Released by the shutdown hook, not expired: the lease had 60 s to run.
            Set<String> left = new HashSet<>(Arrays.asList(Services.run(keys).split("\\s+")));
            assertTrue(left.contains(workers + held.worker()), left::toString);
            assertFalse(left.contains(workers + worker), () -> "worker " + worker + " still leased: " + left);
        }
    }

    @Test
    void aLostLeaseThrowsAndIssuesNothing() throws Exception {
        try (Services.PrivateRedis redis = Services.PrivateRedis.start(tmp)) {
            Path path = config(tmp, "[snowflake]\nregistry = \"redis\"\nwindow = \"1s\"\n[snowflake.redis]\nurl = \""
                    + redis.url + "\"\nlease_ttl = \"2s\"\n");
            try (Generator g = Generator.fromConfig(path)) {
                g.nextId();
                redis.stop();
                long stopped = System.nanoTime();
                IdmintException refused;
                while (true) {
                    try {
                        g.nextId();
                    } catch (IdmintException e) {
                        refused = e;
                        break;
                    }
                    assertTrue(System.nanoTime() - stopped < Duration.ofSeconds(5).toNanos(),
                            "still issuing 5 s after the registry stopped (lease 2 s)");
                    Thread.sleep(20);
                }
                assertEquals("mark_reached", refused.code());
                assertEquals(Optional.of(Duration.ofSeconds(1)), refused.retryAfter());
                Thread.sleep(2000); // past the lease's end: nothing, by any call
                IdmintException e = null;
                for (int i = 0; i < 20; i++) {
                    assertEquals("mark_reached", assertThrows(IdmintException.class, g::nextId).code());
                    e = assertThrows(IdmintException.class, () -> g.nextIds(100));
                    assertEquals("mark_reached", e.code());
                }
                assertTrue(e.detail().contains("expired") || e.detail().contains("lost"), e.detail());
                assertTrue(List.of("expired", "lost").contains(g.status().lease()), g.status().lease());
            }
        }
    }

    @Test
    void configsAnEmbeddedProcessCannotUseAreRefused() throws Exception {
        Path forever = config(tmp, "[snowflake]\nregistry = \"zookeeper\"\n[snowflake.zookeeper]\nmode = \"forever\"\n");
        IdmintException e = assertThrows(IdmintException.class, () -> Generator.fromConfig(forever));
        assertEquals("invalid_config", e.code());
        assertTrue(e.detail().contains("ephemeral"), e.detail());
        Path typo = config(tmp, "[snowflake]\nregistery = \"file\"\n", "typo.toml");
        e = assertThrows(IdmintException.class, () -> Generator.fromConfig(typo));
        assertEquals("invalid_config", e.code());
        assertTrue(e.detail().contains("registery"), e.detail());
        Path expired = config(tmp, "[snowflake]\nlayout = \"baidu\"\n", "baidu.toml");
        e = assertThrows(IdmintException.class, () -> Generator.fromConfig(expired));
        assertEquals("invalid_config", e.code());
        assertTrue(e.detail().contains("ran out"), e.detail());
        e = assertThrows(IdmintException.class, () -> Generator.fromConfig(tmp.resolve("missing.toml")));
        assertEquals("invalid_config", e.code());
    }

    static void assertStrictlyIncreasing(long[] ids) {
        for (int i = 1; i < ids.length; i++) {
            if (ids[i] <= ids[i - 1]) {
                fail("IDs not increasing at " + i + ": " + ids[i - 1] + " then " + ids[i]);
            }
        }
    }
}
