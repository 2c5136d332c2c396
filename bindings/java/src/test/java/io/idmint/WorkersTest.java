package io.idmint;

import static io.idmint.Services.config;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * One worker ID, one live generator per process: a second generator whose IDs
 * would overlap a live one's throws {@code worker_taken}, fixed or from a
 * config, whatever the preset is called; closing the first frees it.
 */
class WorkersTest {
    @TempDir
    Path tmp;

    static Generator fixed(String layout, int datacenter, int worker) {
        return Generator.builder().layout(layout).datacenter(datacenter).worker(worker).build();
    }

    @Test
    void aSecondLiveGeneratorOfOneWorkerIsRefused() {
        Generator first = fixed("twitter", 0, 1);
        long[] ids = first.nextIds(1000);
        IdmintException e = assertThrows(IdmintException.class, () -> fixed("twitter", 0, 1));
        assertEquals("worker_taken", e.code());
        assertTrue(e.getMessage().contains("worker ID 1"), e.getMessage());
        assertFalse(e.retryAfter().isPresent());
        // The same bits by another name: leaf's one 10-bit node field with
        // Twitter's epoch; its worker 1 is twitter's datacenter 0, worker 1.
        assertEquals("worker_taken", assertThrows(IdmintException.class, () -> fixed("leaf", 0, 1)).code());
        try (Generator other = fixed("twitter", 1, 1)) {
            Set<Long> theirs = new HashSet<>();
            Arrays.stream(other.nextIds(1000)).forEach(theirs::add);
            assertTrue(Arrays.stream(ids).noneMatch(theirs::contains));
        }
        first.close();
        try (Generator again = fixed("twitter", 0, 1)) {
            assertTrue(again.nextId() > ids[999]);
        }
    }

    @Test
    void aGeneratorFromAConfigJoinsTheCheck() throws Exception {
        Path path = config(tmp, "[snowflake]\nlayout = \"twitter\"\nregistry = \"file\"\nworker = 6\n");
        Generator held = fixed("twitter", 0, 6);
        assertEquals("worker_taken", assertThrows(IdmintException.class, () -> Generator.fromConfig(path)).code());
        held.close();
        try (Generator leased = Generator.fromConfig(path)) {
            leased.nextId();
            assertEquals("worker_taken", assertThrows(IdmintException.class, () -> fixed("twitter", 0, 6)).code());
        }
        fixed("twitter", 0, 6).close();
    }
}
