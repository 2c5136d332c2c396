package io.idmint;

import java.nio.file.Path;

/**
 * A second process on one registry (GeneratorTest): claims a worker ID from
 * the config in {@code args[0]}, prints it and 20,000 IDs on one line, then
 * holds the lease until its standard input closes.
 */
public final class ChildJvm {
    private ChildJvm() {}

    public static void main(String[] args) throws Exception {
        try (Generator g = Generator.fromConfig(Path.of(args[0]))) {
            long[] ids = g.nextIds(20_000);
            StringBuilder line = new StringBuilder().append(g.worker());
            for (long id : ids) {
                line.append(' ').append(id);
            }
            System.out.println(line);
            System.out.flush();
            System.in.readAllBytes(); // hold the lease until the parent has read every line
        }
    }
}
