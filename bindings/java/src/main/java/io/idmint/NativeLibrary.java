package io.idmint;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * Loads {@code libidmint_java} from the jar: the copy under
 * {@code /io/idmint/native/<os>-<arch>/} is written to a temporary file,
 * loaded with {@link System#load}, and the file deleted (the loaded library
 * stays mapped). The system property {@code idmint.native.library} names a
 * library file to load instead, for development.
 */
final class NativeLibrary {
    private NativeLibrary() {}

    static void load() {
        String override = System.getProperty("idmint.native.library");
        if (override != null) {
            System.load(Path.of(override).toAbsolutePath().toString());
            return;
        }
        String resource = "/io/idmint/native/" + platform() + "/" + System.mapLibraryName("idmint_java");
        try (InputStream in = NativeLibrary.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new UnsatisfiedLinkError(
                        "this idmint jar has no native library for " + platform() + " (no " + resource
                                + "): build the jar on this platform (bindings/java/README.md)");
            }
            Path file = Files.createTempFile("libidmint_java", ".so");
            try {
                Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
                System.load(file.toAbsolutePath().toString());
            } finally {
                Files.deleteIfExists(file);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("can't extract " + resource + " to a temporary file", e);
        }
    }

    /** {@code linux-x86_64}, {@code linux-aarch64}, ...: where the jar keeps this platform's library. */
    static String platform() {
        String os = System.getProperty("os.name").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch").toLowerCase(Locale.ROOT);
        if (os.startsWith("linux")) {
            os = "linux";
        } else if (os.startsWith("mac")) {
            os = "macos";
        }
        if (arch.equals("amd64") || arch.equals("x86_64")) {
            arch = "x86_64";
        } else if (arch.equals("arm64")) {
            arch = "aarch64";
        }
        return os + "-" + arch;
    }
}
