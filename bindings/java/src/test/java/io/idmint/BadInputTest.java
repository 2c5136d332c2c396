package io.idmint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * The shared bad-input vectors ({@code bindings/testdata/bad-input.tsv},
 * rendered from idmint-embed): a count or a public-ID setting every language
 * checks in idmint-embed alone, so each answers with the same code and the
 * same words.
 */
class BadInputTest {
    private static final String KEY = "000102030405060708090a0b0c0d0e0f";

    @Test
    void badInputIsAnsweredAsInEveryLanguage() throws IOException {
        Path file = Path.of(System.getProperty("idmint.repo", "."), "bindings", "testdata", "bad-input.tsv");
        List<String[]> rows = new ArrayList<>();
        for (String line : Files.readAllLines(file)) {
            if (!line.isEmpty() && !line.startsWith("#")) {
                rows.add(line.split("\t"));
            }
        }
        assertTrue(rows.size() >= 6, "vectors: " + rows.size());
        try (Generator g = Generator.builder().build()) {
            for (String[] row : rows) {
                String kase = row[0];
                int n = Integer.parseInt(row[1]);
                Executable call = switch (kase) {
                    case "next_ids" -> () -> g.nextIds(n);
                    case "public_ids.bits" -> () -> PublicIds.builder(KEY).bits(n).build();
                    case "public_ids.key_id_bits" -> () -> PublicIds.builder(KEY).keyIdBits(n).build();
                    case "public_ids.active_key" -> () -> PublicIds.builder(KEY).activeKey(n).build();
                    default -> throw new AssertionError("unknown case " + kase);
                };
                IdmintException e = assertThrows(IdmintException.class, call, kase + " " + n);
                assertEquals(row[2], e.code(), kase + " " + n);
                assertEquals(row[3], e.detail(), kase + " " + n);
            }
        }
    }
}
