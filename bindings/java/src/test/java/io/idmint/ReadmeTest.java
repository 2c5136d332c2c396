package io.idmint;

import static io.idmint.Services.config;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * What the README states against what the library does: the limits of a
 * batch, each read from the embedded layer's one constant.
 */
class ReadmeTest {
    @TempDir
    Path tmp;

    /** The numbers the README gives beside {@code name}. */
    static Set<Long> stated(String name) throws Exception {
        String readme = Files.readString(Services.REPO.resolve("bindings/java/README.md"));
        Matcher m = Pattern.compile(Pattern.quote(name) + "`?\\}?[^(]*\\(([\\d,]+)\\)").matcher(readme);
        Set<Long> found = new HashSet<>();
        while (m.find()) {
            found.add(Long.parseLong(m.group(1).replace(",", "")));
        }
        assertFalse(found.isEmpty(), "the README names no " + name + " with its value");
        return found;
    }

    @Test
    void theReadmeStatesTheGeneratorBatchLimit() throws Exception {
        assertEquals(Set.of(Generator.MAX_BATCH), stated("Generator.MAX_BATCH"));
        try (Generator g = Generator.builder().layout("twitter,epoch=2022-02-02").worker(1).build()) {
            IdmintException e = assertThrows(IdmintException.class, () -> g.nextIds((int) Generator.MAX_BATCH + 1));
            assertEquals("invalid_count", e.code());
        }
    }

    @Test
    void theReadmeStatesTheSegmentBatchLimit() throws Exception {
        assertEquals(Set.of(Segments.DEFAULT_MAX_COUNT), stated("Segments.DEFAULT_MAX_COUNT"));
        try (Segments s = Segments.fromConfig(config(tmp, "[segment.keys.order]\nstep = 1000\n"))) {
            assertEquals(Segments.DEFAULT_MAX_COUNT, s.maxCount());
            assertEquals(s.maxCount(), s.nextIds("order", (int) s.maxCount()).length);
            IdmintException e = assertThrows(IdmintException.class, () -> s.nextIds("order", (int) s.maxCount() + 1));
            assertEquals("invalid_count", e.code());
        }
    }
}
