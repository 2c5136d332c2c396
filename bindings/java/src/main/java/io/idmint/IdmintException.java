package io.idmint;

import java.time.Duration;
import java.util.Optional;

/**
 * An idmint failure, carrying idmint's stable error code: the same code the
 * server answers with for the same failure ({@code clock_behind},
 * {@code mark_reached}, {@code key_not_found}, {@code unavailable},
 * {@code invalid_layout_text}, ...), plus {@code closed} (a call after
 * {@code close()}) and {@code internal} (a bug in this binding).
 *
 * <p>Unchecked. {@link #getMessage()} reads {@code "code: what went wrong"};
 * {@link #detail()} is the part after the code. Match on {@link #code()},
 * never on the text, which may change between releases.
 */
public final class IdmintException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String code;
    private final String detail;
    private final long retryAfterNanos;

    /**
     * Made by the native library (and by the Java side for arguments the
     * library can't take, such as a negative count).
     *
     * @param code idmint's stable error code
     * @param detail what went wrong, naming the offending value
     * @param retryAfterNanos how long to wait before a retry may succeed, or
     *     a negative number when retrying can't help
     */
    IdmintException(String code, String detail, long retryAfterNanos) {
        super(code + ": " + detail);
        this.code = code;
        this.detail = detail;
        this.retryAfterNanos = retryAfterNanos;
    }

    /** The stable, machine-readable code, e.g. {@code "mark_reached"}. */
    public String code() {
        return code;
    }

    /** What went wrong, without the code. */
    public String detail() {
        return detail;
    }

    /**
     * How long to wait before the same call may succeed (the server's
     * {@code Retry-After}); empty when retrying can't help (bad input, a
     * closed generator).
     */
    public Optional<Duration> retryAfter() {
        return retryAfterNanos < 0 ? Optional.empty() : Optional.of(Duration.ofNanos(retryAfterNanos));
    }

    static IdmintException of(String code, String detail) {
        return new IdmintException(code, detail, -1);
    }
}
