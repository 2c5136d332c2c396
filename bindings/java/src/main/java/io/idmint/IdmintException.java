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

    // BEGIN error codes. Generated from idmint's one list of error codes by crates/idmint-embed/tests/it/error_codes.rs (IDMINT_BLESS=1 writes it); don't edit.
    /** The code {@code not_found}. */
    public static final String NOT_FOUND = "not_found";
    /** The code {@code method_not_allowed}. */
    public static final String METHOD_NOT_ALLOWED = "method_not_allowed";
    /** The code {@code invalid_path}. */
    public static final String INVALID_PATH = "invalid_path";
    /** The code {@code invalid_query}. */
    public static final String INVALID_QUERY = "invalid_query";
    /** The code {@code invalid_count}. */
    public static final String INVALID_COUNT = "invalid_count";
    /** The code {@code invalid_key}. */
    public static final String INVALID_KEY = "invalid_key";
    /** The code {@code invalid_id}. */
    public static final String INVALID_ID = "invalid_id";
    /** The code {@code invalid_version}. */
    public static final String INVALID_VERSION = "invalid_version";
    /** The code {@code invalid_json}. */
    public static final String INVALID_JSON = "invalid_json";
    /** The code {@code invalid_body}. */
    public static final String INVALID_BODY = "invalid_body";
    /** The code {@code body_too_large}. */
    public static final String BODY_TOO_LARGE = "body_too_large";
    /** The code {@code unauthorized}. */
    public static final String UNAUTHORIZED = "unauthorized";
    /** The code {@code admin_disabled}. */
    public static final String ADMIN_DISABLED = "admin_disabled";
    /** The code {@code noauth}. */
    public static final String NOAUTH = "noauth";
    /** The code {@code not_contiguous}. */
    public static final String NOT_CONTIGUOUS = "not_contiguous";
    /** The code {@code not_ready}. */
    public static final String NOT_READY = "not_ready";
    /** The code {@code internal}. */
    public static final String INTERNAL = "internal";
    /** The code {@code unknown_key}. */
    public static final String UNKNOWN_KEY = "unknown_key";
    /** The code {@code wrong_strategy}. */
    public static final String WRONG_STRATEGY = "wrong_strategy";
    /** The code {@code obfuscation_disabled}. */
    public static final String OBFUSCATION_DISABLED = "obfuscation_disabled";
    /** The code {@code mark_reached}. */
    public static final String MARK_REACHED = "mark_reached";
    /** The code {@code clock_behind}. */
    public static final String CLOCK_BEHIND = "clock_behind";
    /** The code {@code rollback_exhausted}. */
    public static final String ROLLBACK_EXHAUSTED = "rollback_exhausted";
    /** The code {@code layout_exhausted}. */
    public static final String LAYOUT_EXHAUSTED = "layout_exhausted";
    /** The code {@code clock_before_epoch}. */
    public static final String CLOCK_BEFORE_EPOCH = "clock_before_epoch";
    /** The code {@code ring_empty}. */
    public static final String RING_EMPTY = "ring_empty";
    /** The code {@code invalid_run}. */
    public static final String INVALID_RUN = "invalid_run";
    /** The code {@code key_not_found}. */
    public static final String KEY_NOT_FOUND = "key_not_found";
    /** The code {@code key_exists}. */
    public static final String KEY_EXISTS = "key_exists";
    /** The code {@code key_forgotten}. */
    public static final String KEY_FORGOTTEN = "key_forgotten";
    /** The code {@code invalid_spec}. */
    public static final String INVALID_SPEC = "invalid_spec";
    /** The code {@code unavailable}. */
    public static final String UNAVAILABLE = "unavailable";
    /** The code {@code key_below_floor}. */
    public static final String KEY_BELOW_FLOOR = "key_below_floor";
    /** The code {@code store_reset}. */
    public static final String STORE_RESET = "store_reset";
    /** The code {@code key_exhausted}. */
    public static final String KEY_EXHAUSTED = "key_exhausted";
    /** The code {@code store_went_backwards}. */
    public static final String STORE_WENT_BACKWARDS = "store_went_backwards";
    /** The code {@code floor_file_error}. */
    public static final String FLOOR_FILE_ERROR = "floor_file_error";
    /** The code {@code store_timeout}. */
    public static final String STORE_TIMEOUT = "store_timeout";
    /** The code {@code store_error}. */
    public static final String STORE_ERROR = "store_error";
    /** The code {@code timeout}. */
    public static final String TIMEOUT = "timeout";
    /** The code {@code serial_overflow}. */
    public static final String SERIAL_OVERFLOW = "serial_overflow";
    /** The code {@code invalid_config}. */
    public static final String INVALID_CONFIG = "invalid_config";
    /** The code {@code no_leader}. */
    public static final String NO_LEADER = "no_leader";
    /** The code {@code not_leader}. */
    public static final String NOT_LEADER = "not_leader";
    /** The code {@code no_oracle}. */
    public static final String NO_ORACLE = "no_oracle";
    /** The code {@code shutting_down}. */
    public static final String SHUTTING_DOWN = "shutting_down";
    /** The code {@code workers_exhausted}. */
    public static final String WORKERS_EXHAUSTED = "workers_exhausted";
    /** The code {@code registry_held}. */
    public static final String REGISTRY_HELD = "registry_held";
    /** The code {@code registry_timeout}. */
    public static final String REGISTRY_TIMEOUT = "registry_timeout";
    /** The code {@code registry_backend}. */
    public static final String REGISTRY_BACKEND = "registry_backend";
    /** The code {@code registry_unavailable}. */
    public static final String REGISTRY_UNAVAILABLE = "registry_unavailable";
    /** The code {@code registry_unsupported}. */
    public static final String REGISTRY_UNSUPPORTED = "registry_unsupported";
    /** The code {@code registry_config}. */
    public static final String REGISTRY_CONFIG = "registry_config";
    /** The code {@code lease_lost}. */
    public static final String LEASE_LOST = "lease_lost";
    /** The code {@code worker_taken}. */
    public static final String WORKER_TAKEN = "worker_taken";
    /** The code {@code clock_behind_mark}. */
    public static final String CLOCK_BEHIND_MARK = "clock_behind_mark";
    /** The code {@code clock_skew}. */
    public static final String CLOCK_SKEW = "clock_skew";
    /** The code {@code invalid_layout}. */
    public static final String INVALID_LAYOUT = "invalid_layout";
    /** The code {@code invalid_layout_text}. */
    public static final String INVALID_LAYOUT_TEXT = "invalid_layout_text";
    /** The code {@code invalid_text}. */
    public static final String INVALID_TEXT = "invalid_text";
    /** The code {@code node_out_of_range}. */
    public static final String NODE_OUT_OF_RANGE = "node_out_of_range";
    /** The code {@code invalid_obfuscator}. */
    public static final String INVALID_OBFUSCATOR = "invalid_obfuscator";
    /** The code {@code invalid_public_id}. */
    public static final String INVALID_PUBLIC_ID = "invalid_public_id";
    /** The code {@code unknown_key_id}. */
    public static final String UNKNOWN_KEY_ID = "unknown_key_id";
    /** The code {@code encode_failed}. */
    public static final String ENCODE_FAILED = "encode_failed";
    /** The code {@code closed}. */
    public static final String CLOSED = "closed";
    /** The code {@code forked}. */
    public static final String FORKED = "forked";
    // END error codes

    /** idmint's stable error code, one of the constants above. */
    private final String code;
    /** What went wrong, naming the offending value; the message after the code. */
    private final String detail;
    /** Nanoseconds before a retry may succeed; negative when retrying can't help. */
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

    /**
     * The stable, machine-readable code.
     *
     * @return one of the constants of this class, e.g. {@link #MARK_REACHED}
     *     ({@code "mark_reached"}): the code the server sends for the same failure
     */
    public String code() {
        return code;
    }

    /**
     * What went wrong, without the code.
     *
     * @return a short text naming the offending value (never key material); for
     *     people and logs, not to match on: it may change between releases
     */
    public String detail() {
        return detail;
    }

    /**
     * How long to wait before the same call may succeed (the server's
     * {@code Retry-After}); empty when retrying can't help (bad input, a
     * closed generator).
     *
     * @return the wait the failure names, e.g. for {@code mark_reached} while the
     *     lease is held, {@code unavailable}, {@code store_timeout}; empty for the
     *     rest
     */
    public Optional<Duration> retryAfter() {
        return retryAfterNanos < 0 ? Optional.empty() : Optional.of(Duration.ofNanos(retryAfterNanos));
    }

    static IdmintException of(String code, String detail) {
        return new IdmintException(code, detail, -1);
    }
}
