package io.idmint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Layouts: the text form, decode, compose and the run-out instant, checked
 * against the {@code idmint} binary's own decode for every preset.
 */
class LayoutTest {
    /**
     * The one file of layout test vectors every binding reads (generated
     * from the Rust core): each row an ID and the parts and time it decodes
     * into, as text fields.
     */
    static List<String[]> vectors() throws IOException {
        Path file = Path.of(System.getProperty("idmint.repo", "."), "bindings", "testdata", "layout-vectors.tsv");
        List<String[]> rows = new ArrayList<>();
        for (String line : Files.readAllLines(file)) {
            if (!line.isEmpty() && !line.startsWith("#")) {
                rows.add(line.split("\t"));
            }
        }
        return rows;
    }

    /**
     * Every preset, with an epoch moved where the preset has run out already,
     * and a custom layout: the layouts of the vectors.
     */
    static List<String> layouts() throws IOException {
        return vectors().stream().map(row -> row[0]).distinct().toList();
    }

    @Test
    void decodeAndComposeGiveTheLayoutVectors() throws IOException {
        List<String[]> rows = vectors();
        assertTrue(rows.size() >= 3 * layouts().size(), rows.size() + " vectors");
        for (String[] row : rows) {
            Layout layout = Layout.parse(row[0]);
            long id = Long.parseLong(row[1]);
            String what = row[0] + " " + row[1];
            Decoded d = layout.decode(id);
            assertEquals(id, d.id(), what);
            assertEquals(Long.parseLong(row[2]), d.time().toEpochMilli(), what);
            assertEquals(Long.parseLong(row[3]), d.tick(), what);
            assertEquals(Integer.parseInt(row[4]), d.datacenter(), what);
            assertEquals(Integer.parseInt(row[5]), d.worker(), what);
            assertEquals(Integer.parseInt(row[6]), d.rollback(), what);
            assertEquals(Integer.parseInt(row[7]), d.sequence(), what);
            assertEquals(id, layout.compose(d.tick(), d.datacenter(), d.worker(), d.rollback(), d.sequence()), what);
        }
    }

    @ParameterizedTest
    @MethodSource("layouts")
    void decodeAgreesWithIdmintDecode(String text) throws Exception {
        Layout layout = Layout.parse(text);
        int worker = layout.workers() == 1 ? 0 : 1; // tso has no node field
        List<Long> ids = new ArrayList<>();
        try (Generator g = Generator.builder().layout(layout).worker(worker).build()) {
            ids.add(g.nextId());
            for (long id : g.nextIds(3)) {
                ids.add(id);
            }
        }
        // One composed from parts of our own choosing too.
        ids.add(layout.compose(Instant.parse("2025-06-01T12:00:00Z"), 0, worker, 2));
        String bin = Services.idmintBin();
        for (long id : ids) {
            Decoded mine = layout.decode(id);
            String cli = Services.run(List.of(bin, "decode", "--json", "--layout", text, Long.toString(id)));
            assertEquals(Long.toString(id), jsonString(cli, "id"));
            assertEquals(mine.time().toEpochMilli(), jsonNumber(cli, "unix_ms"));
            assertEquals(mine.time(), Instant.parse(jsonString(cli, "time")));
            assertEquals(mine.tick(), jsonNumber(cli, "tick"));
            assertEquals(mine.datacenter(), jsonNumber(cli, "datacenter"));
            assertEquals(mine.worker(), jsonNumber(cli, "worker"));
            assertEquals(mine.rollback(), jsonNumber(cli, "rollback"));
            assertEquals(mine.sequence(), jsonNumber(cli, "sequence"));
            assertEquals(worker, mine.worker());
            assertEquals(id, mine.id());
        }
    }

    /** A string field of `idmint decode --json`'s flat object. */
    private static String jsonString(String json, String field) {
        Matcher m = Pattern.compile("\"" + field + "\"\\s*:\\s*\"([^\"]*)\"").matcher(json);
        assertTrue(m.find(), () -> "no string \"" + field + "\" in " + json);
        return m.group(1);
    }

    /** A number field of `idmint decode --json`'s flat object. */
    private static long jsonNumber(String json, String field) {
        Matcher m = Pattern.compile("\"" + field + "\"\\s*:\\s*(-?\\d+)").matcher(json);
        assertTrue(m.find(), () -> "no number \"" + field + "\" in " + json);
        return Long.parseLong(m.group(1));
    }

    @Test
    void composeRoundTripsAndNamesBadParts() {
        Layout twitter = Layout.parse("twitter");
        Instant at = Instant.parse("2026-01-02T03:04:05.678Z");
        long id = twitter.compose(at, 3, 7, 42);
        Decoded d = twitter.decode(id);
        assertEquals(List.of(at, 3, 7, 42), List.of(d.time(), d.datacenter(), d.worker(), d.sequence()));
        assertEquals(id, twitter.compose(d.tick(), 3, 7, 0, 42));
        assertEquals(d.tick(), twitter.tickAt(at));
        assertEquals("node_out_of_range", assertThrows(IdmintException.class, () -> twitter.compose(1, 0, 32, 0, 0)).code());
        assertEquals("node_out_of_range", assertThrows(IdmintException.class, () -> twitter.compose(1, 0, -1, 0, 0)).code());
        assertEquals("clock_before_epoch",
                assertThrows(IdmintException.class, () -> twitter.compose(Instant.parse("2001-01-01T00:00:00Z"), 0, 0, 0)).code());
        assertEquals("clock_before_epoch", assertThrows(IdmintException.class, () -> twitter.tickAt(Instant.MIN)).code());
        assertEquals("layout_exhausted", assertThrows(IdmintException.class, () -> twitter.tickAt(Instant.MAX)).code());
        assertThrows(NullPointerException.class, () -> twitter.tickAt(null));
    }

    @Test
    void runOutAndTextForm() {
        Layout baidu = Layout.parse("baidu");
        assertEquals(Optional.of(Instant.parse("2024-11-20T13:24:16Z")), baidu.runsOutAt());
        assertEquals(Optional.of("baidu"), baidu.preset());
        assertEquals(baidu, Layout.parse(baidu.toString()));
        assertEquals(baidu.hashCode(), Layout.parse(baidu.toString()).hashCode());
        assertEquals(Optional.empty(), Layout.parse("time=39,unit=10ms,epoch=2024-01-01,worker=16,sequence=8").preset());
        assertEquals(4_096_000.0, Layout.parse("twitter").idsPerSecondPerWorker());
        assertEquals(1024, Layout.parse("twitter").workers());
        try (Generator g = Generator.builder().layout("baidu").worker(1).build()) {
            assertEquals("layout_exhausted", assertThrows(IdmintException.class, g::nextId).code());
        }
        IdmintException e = assertThrows(IdmintException.class, () -> Layout.parse("twitter,sequence=twelve"));
        assertEquals("invalid_layout_text", e.code());
        assertTrue(e.detail().contains("twelve"), e.detail());
        assertEquals("invalid_id", assertThrows(IdmintException.class, () -> Layout.parse("twitter").decode(Long.MIN_VALUE)).code());
        assertEquals("invalid_id", assertThrows(IdmintException.class, () -> Layout.parse("js53").decode(1L << 60)).code());
    }
}
