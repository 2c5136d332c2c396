package io.idmint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Public IDs: round trips in every text form, and agreement with {@code idmint obfuscate} for the same key. */
class PublicIdsTest {
    static final String KEY = "000102030405060708090a0b0c0d0e0f";

    @TempDir
    Path tmp;

    @ParameterizedTest
    @ValueSource(strings = {"dec", "base32", "sqids"})
    void roundTrips(String format) {
        PublicIds p = PublicIds.builder(KEY).format(format).build();
        try (Generator g = Generator.builder().worker(3).build()) {
            for (long id : g.nextIds(1000)) {
                long pub = p.obfuscate(id);
                assertNotEquals(id, pub);
                assertTrue(pub >= 0, "63-bit public IDs fit a signed long");
                assertEquals(id, p.reveal(pub));
                String text = p.obfuscateText(id);
                assertEquals(pub, p.decode(text));
                assertEquals(text, p.encode(pub));
                assertEquals(id, p.revealText(text));
            }
        }
        assertEquals(format, p.format());
        assertEquals(63, p.bits());
    }

    @Test
    void agreesWithIdmintObfuscate() throws Exception {
        PublicIds p = PublicIds.builder(KEY).format("base32").build();
        long[] ids = {1, 42, 1_050_118_621_198_921_728L, Long.MAX_VALUE};
        List<String> command = new ArrayList<>(List.of(Services.idmintBin(), "obfuscate", "--format", "base32"));
        for (long id : ids) {
            command.add(Long.toString(id));
        }
        ProcessBuilder pb = new ProcessBuilder(command);
        pb.environment().clear();
        pb.environment().putAll(Map.of("IDMINT_OBFUSCATION_KEY", KEY, "PATH", "/usr/bin:/bin"));
        Process proc = pb.start();
        String out = new String(proc.getInputStream().readAllBytes());
        assertEquals(0, proc.waitFor(), () -> "idmint obfuscate failed");
        List<String> mine = new ArrayList<>();
        for (long id : ids) {
            mine.add(p.obfuscateText(id));
        }
        assertEquals(List.of(out.strip().split("\\s+")), mine);
    }

    @Test
    void rotationAndErrors() throws Exception {
        String ring = "0:" + KEY + " 1:8d8f7cbb4e0bd3ab4dd7a5a4b3c2d1e0";
        PublicIds old = PublicIds.builder("0:" + KEY).bits(64).keyIdBits(1).build();
        PublicIds now = PublicIds.builder(ring).bits(64).keyIdBits(1).build();
        assertEquals(12345, now.reveal(old.obfuscate(12345)));
        assertEquals(12345, now.reveal(now.obfuscate(12345)));
        // 64-bit public IDs fill the long: unsigned, never lossy.
        boolean sawHighBit = false;
        for (long id = 1; id < 200; id++) {
            long pub = now.obfuscate(id);
            sawHighBit |= pub < 0;
            assertEquals(id, now.reveal(pub));
            assertEquals(id, now.revealText(now.obfuscateText(id)));
        }
        assertTrue(sawHighBit, "no 64-bit public ID with the top bit set in 199");
        assertEquals("unknown_key_id", assertThrows(IdmintException.class, () -> old.reveal(now.obfuscate(12345))).code());
        // A malformed key: invalid_key, as docs/api.md says of the library.
        IdmintException e = assertThrows(IdmintException.class, () -> PublicIds.builder("abc").build());
        assertEquals("invalid_key", e.code());
        assertFalse(e.getMessage().contains("abc"), "a key never shows in errors");
        for (String bad : new String[] {"zz", "0:zz", "x:" + KEY, ""}) {
            assertEquals("invalid_key", assertThrows(IdmintException.class, () -> PublicIds.builder(bad).build()).code(), bad);
        }
        assertEquals("invalid_obfuscator", assertThrows(IdmintException.class, () -> PublicIds.builder(KEY).format("hex").build()).code());
        // Checked by idmint-embed at build(), as in every language (BadInputTest).
        e = assertThrows(IdmintException.class, () -> PublicIds.builder(KEY).bits(300).build());
        assertEquals("invalid_config", e.code());
        assertTrue(e.detail().contains("300"), e.detail());
        assertEquals("invalid_public_id",
                assertThrows(IdmintException.class, () -> PublicIds.builder(KEY).format("sqids").build().decode("not!sqids")).code());
        Path path = Services.config(tmp, "[obfuscation]\nkey = \"" + KEY + "\"\nformat = \"sqids\"\n");
        assertEquals(PublicIds.builder(KEY).format("sqids").build().obfuscateText(77), PublicIds.fromConfig(path).obfuscateText(77));
    }
}
