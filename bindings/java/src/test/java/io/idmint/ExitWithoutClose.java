package io.idmint;

import java.nio.file.Path;

/**
 * A JVM that claims a worker ID from the config in {@code args[0]}, issues an
 * ID, prints the worker ID and leaves {@code main} without closing: the
 * shutdown hook must release the lease (GeneratorTest).
 */
public final class ExitWithoutClose {
    private ExitWithoutClose() {}

    public static void main(String[] args) {
        Generator g = Generator.fromConfig(Path.of(args[0]));
        g.nextId();
        System.out.println(g.worker());
    }
}
