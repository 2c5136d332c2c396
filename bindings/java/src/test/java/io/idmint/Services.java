package io.idmint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;

/**
 * What the binding's tests share: config files, the real services, the
 * {@code idmint} binary to compare with, private services a test may stop,
 * and a second JVM.
 *
 * <p>Services (as the Rust and Python tests use them): PostgreSQL on
 * 127.0.0.1:5432, MariaDB on 127.0.0.1:3306, Redis on 127.0.0.1:6379, etcd at
 * {@code IDMINT_TEST_ETCD_ENDPOINT}. A missing service fails the test under
 * {@code CI=true} and skips it elsewhere, loudly.
 */
final class Services {
    static final Path REPO = Path.of(System.getProperty("idmint.repo", "../..")).toAbsolutePath().normalize();
    static final String POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test";
    static final String MYSQL_URL = "mysql://root@127.0.0.1:3306/test";
    static final String REDIS_URL = "redis://127.0.0.1:6379/";

    private Services() {}

    /** Fails under CI=true when the service is missing, else skips. */
    static void require(String name, boolean reachable) {
        if (reachable) {
            return;
        }
        if ("true".equals(System.getenv("CI"))) {
            fail(name + " is not reachable and CI=true: start it before the tests");
        }
        System.err.println("SKIPPED: " + name + " is not reachable");
        Assumptions.abort("SKIPPED: " + name + " is not reachable");
    }

    static boolean listens(int port) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    static String postgres() {
        require("PostgreSQL on 127.0.0.1:5432", listens(5432));
        return POSTGRES_URL;
    }

    static String mariadb() {
        require("MariaDB on 127.0.0.1:3306", listens(3306));
        return MYSQL_URL;
    }

    static String redis() {
        require("Redis on 127.0.0.1:6379", listens(6379));
        return REDIS_URL;
    }

    static String etcd() {
        String endpoint = System.getenv("IDMINT_TEST_ETCD_ENDPOINT");
        require("etcd (IDMINT_TEST_ETCD_ENDPOINT)", endpoint != null && !endpoint.isEmpty());
        return endpoint;
    }

    /** A name no other test or run uses. */
    static String unique(String prefix) {
        return prefix + "_" + ProcessHandle.current().pid() + "_" + (System.nanoTime() % 1_000_000_000L);
    }

    /** Writes {@code dir/name}: {@code [server] data_dir} in {@code dir}, then {@code body}. */
    static Path config(Path dir, String body, String name) throws IOException {
        Path path = dir.resolve(name);
        String text = "[server]\ndata_dir = \"" + dir.resolve("data") + "\"\n\n" + body + "\n";
        Files.writeString(path, text);
        return path;
    }

    static Path config(Path dir, String body) throws IOException {
        return config(dir, body, "idmint.toml");
    }

    /** Runs a command, failing the test unless it exits 0; returns its standard output. */
    static String run(List<String> command) throws IOException, InterruptedException {
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(false);
        Process p = pb.start();
        p.getOutputStream().close();
        byte[] out = p.getInputStream().readAllBytes();
        byte[] err = p.getErrorStream().readAllBytes();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            fail(command + " did not finish in 60 s");
        }
        assertEquals(0, p.exitValue(), () -> command + " failed: " + new String(err, StandardCharsets.UTF_8));
        return new String(out, StandardCharsets.UTF_8);
    }

    /** Runs SQL on MariaDB's {@code test} database with the mysql client. */
    static void mysql(String sql) throws IOException, InterruptedException {
        run(List.of("mysql", "-h", "127.0.0.1", "-P", "3306", "-u", "root", "test", "-e", sql));
    }

    /** Runs SQL on PostgreSQL's {@code test} database with psql. */
    static void psql(String sql) throws IOException, InterruptedException {
        run(List.of("psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-v", "ON_ERROR_STOP=1", "-c", sql));
    }

    /**
     * The {@code idmint} binary to compare with: IDMINT_BIN, else the
     * workspace's debug build, else one on PATH.
     */
    static String idmintBin() {
        List<Path> candidates = new ArrayList<>();
        String env = System.getenv("IDMINT_BIN");
        if (env != null && !env.isEmpty()) {
            candidates.add(Path.of(env));
        }
        candidates.add(REPO.resolve("target/debug/idmint"));
        for (String dir : System.getenv().getOrDefault("PATH", "").split(":")) {
            if (!dir.isEmpty()) {
                candidates.add(Path.of(dir, "idmint"));
            }
        }
        for (Path p : candidates) {
            if (Files.isRegularFile(p) && Files.isExecutable(p)) {
                return p.toString();
            }
        }
        require("the idmint binary (cargo build -p idmint)", false);
        throw new AssertionError("unreachable");
    }

    /** A throwaway redis-server (scripts/redis) a test may stop. */
    static final class PrivateRedis implements AutoCloseable {
        private final Path dir;
        final String url;

        private PrivateRedis(Path dir, String url) {
            this.dir = dir;
            this.url = url;
        }

        static PrivateRedis start(Path tmp) throws IOException, InterruptedException {
            String script = REPO.resolve("scripts/redis").toString();
            Process check = new ProcessBuilder(script, "check", tmp.toString()).redirectErrorStream(true).start();
            check.getInputStream().readAllBytes();
            require("redis-server (scripts/redis check)", check.waitFor() == 0);
            Path dir = tmp.resolve("redis");
            return new PrivateRedis(dir, run(List.of(script, "start", dir.toString())).strip());
        }

        void stop() throws IOException, InterruptedException {
            run(List.of(REPO.resolve("scripts/redis").toString(), "stop", dir.toString()));
        }

        @Override
        public void close() throws IOException {
            Process p = new ProcessBuilder(REPO.resolve("scripts/redis").toString(), "stop", dir.toString())
                    .redirectErrorStream(true)
                    .start();
            p.getInputStream().readAllBytes();
            try {
                p.waitFor();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * A second JVM running {@code mainClass} with {@code args}, on this JVM's
     * class path (the idmint jar and the test classes).
     */
    static Process jvm(Class<?> mainClass, String... args) throws IOException {
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(mainClass.getName());
        command.addAll(List.of(args));
        return new ProcessBuilder(command).start();
    }
}
