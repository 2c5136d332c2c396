package io.idmint;

import static io.idmint.Services.config;
import static io.idmint.Services.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Segment keys on Leaf's own {@code leaf_alloc} table in MariaDB, on Redis, and on the default store. */
class SegmentsTest {
    @TempDir
    Path tmp;

    @Test
    void leafAllocOnMariadb() throws Exception {
        String url = Services.mariadb();
        String table = unique("leaf_alloc");
        // Leaf's DDL (scripts/leaf_alloc.sql) and a row Leaf has issued from.
        Services.mysql("CREATE TABLE `" + table + "` ("
                + " `biz_tag` varchar(128) NOT NULL DEFAULT '',"
                + " `max_id` bigint(20) NOT NULL DEFAULT '1',"
                + " `step` int(11) NOT NULL,"
                + " `description` varchar(256) DEFAULT NULL,"
                + " `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,"
                + " PRIMARY KEY (`biz_tag`)) ENGINE=InnoDB;"
                + " INSERT INTO `" + table + "` (biz_tag, max_id, step, description)"
                + " VALUES ('leaf-segment-test', 10001, 2000, 'from Leaf');");
        try {
            Path path = config(tmp, "[segment]\nurl = \"" + url + "\"\nschema = \"leaf\"\ntable = \"" + table + "\"\n");
            Segments a = Segments.fromConfig(path);
            Segments b = Segments.fromConfig(path);
            Set<Long> seen = new HashSet<>();
            long last = 0;
            for (int i = 0; i < 3000; i++) {
                long id = a.nextId("leaf-segment-test");
                assertTrue(id > last && id >= 10001, "above everything Leaf issued, increasing: " + id);
                last = id;
                seen.add(id);
                seen.add(b.nextId("leaf-segment-test"));
            }
            long[] batch = a.nextIds("leaf-segment-test", 5000);
            assertTrue(batch[0] > last);
            GeneratorTest.assertStrictlyIncreasing(batch);
            LongStream.of(batch).forEach(seen::add);
            assertEquals(3000 * 2 + 5000, seen.size());
            assertEquals("key_not_found", assertThrows(IdmintException.class, () -> a.nextId("no-such-key")).code());
            assertEquals("invalid_key", assertThrows(IdmintException.class, () -> a.nextId("bad key!")).code());
            assertEquals("invalid_count", assertThrows(IdmintException.class, () -> a.nextIds("leaf-segment-test", -1)).code());
            a.close();
            a.close();
            assertEquals("closed", assertThrows(IdmintException.class, () -> a.nextId("leaf-segment-test")).code());
            b.close();
        } finally {
            Services.mysql("DROP TABLE `" + table + "`");
        }
    }

    @Test
    void storeDownIsUnavailableWithARetryHint() throws Exception {
        // Nothing listens on port 1: the store can't be opened.
        Path path = config(tmp, "[segment]\nurl = \"mysql://root@127.0.0.1:1/test\"\n");
        IdmintException e = assertThrows(IdmintException.class, () -> Segments.fromConfig(path));
        assertTrue(List.of("store_error", "store_timeout").contains(e.code()), e.code());
        assertTrue(e.retryAfter().isPresent());
    }

    @Test
    void declaredKeysOnTheDefaultStore() throws Exception {
        Path path = config(tmp, "[segment.keys.order]\nstep = 100\nstart = 1000\n");
        try (Segments s = Segments.fromConfig(path)) {
            for (long want = 1000; want < 1250; want++) {
                assertEquals(want, s.nextId("order"));
            }
        }
    }

    @Test
    void redisStore() throws Exception {
        String url = Services.redis();
        String prefix = unique("java") + ":";
        Path path = config(tmp, "[segment]\nurl = \"" + url + "\"\nkey_prefix = \"" + prefix
                + "\"\n[segment.keys.invoice]\nstep = 50\nstart = 7\n");
        try (Segments s = Segments.fromConfig(path)) {
            long want = 7;
            for (int i = 0; i < 120; i++) {
                assertEquals(want++, s.nextId("invoice"));
            }
            for (long id : s.nextIds("invoice", 500)) {
                assertEquals(want++, id);
            }
        }
    }
}
