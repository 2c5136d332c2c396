package io.idmint;

import java.lang.ref.Reference;
import java.nio.file.Path;
import java.util.Objects;

/**
 * Segment keys in this process, from the {@code [segment]} section of an
 * {@code idmint serve} config: idmint's own table, Leaf's {@code leaf_alloc},
 * Tinyid's {@code tiny_id_info} (PostgreSQL, MySQL/MariaDB, SQLite), or Redis.
 * Segments are preloaded in the background on the object's own native thread.
 *
 * <p>Thread-safe. {@link #close()} stops the preloader and closes the store;
 * closing twice is harmless; any call after it throws code {@code closed}.
 * IDs buffered but not issued at close are skipped, never reissued.
 */
public final class Segments implements AutoCloseable {
    /**
     * {@code server.max_count} when a config doesn't set it: the most IDs one
     * {@link #nextIds(String, int)} call takes by default, as the embedded
     * layer decides it.
     */
    public static final long DEFAULT_MAX_COUNT = Native.defaultMaxCount();

    private final NativeRef ref;

    private Segments(long handle) {
        this.ref = NativeRef.own(this, handle, Native::segmentsClose, Native::segmentsFree);
    }

    /**
     * Opens the config's store, creates the keys it declares, starts the preloader.
     *
     * @throws IdmintException {@code invalid_config}; {@code store_error} or
     *     {@code store_timeout} (with a retry hint) when the store can't be reached
     */
    public static Segments fromConfig(Path config) {
        return new Segments(Native.segmentsFromConfig(Objects.requireNonNull(config, "config").toString(), false));
    }

    /**
     * As {@link #fromConfig(Path)}, keeping the server's floor file in the config's
     * {@code server.data_dir} (one process per data directory).
     */
    public static Segments fromConfigWithFloors(Path config) {
        return new Segments(Native.segmentsFromConfig(Objects.requireNonNull(config, "config").toString(), true));
    }

    /**
     * The next ID of {@code key}.
     *
     * @throws IdmintException {@code key_not_found}, {@code invalid_key},
     *     {@code closed}, {@code unavailable} or {@code store_error} (with a retry hint)
     */
    public long nextId(String key) {
        Objects.requireNonNull(key, "key");
        try {
            return Native.segmentsNextId(ref.handle, key);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * {@code n} IDs of {@code key} in increasing order.
     *
     * @throws IdmintException {@code invalid_count} unless {@code n} is positive;
     *     as {@link #nextId(String)}
     */
    public long[] nextIds(String key, int n) {
        Objects.requireNonNull(key, "key");
        if (n < 0) {
            throw IdmintException.of("invalid_count", "count " + n + " is negative");
        }
        try {
            return Native.segmentsNextIds(ref.handle, key, n);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The most IDs one {@link #nextIds(String, int)} call takes: the config's
     * {@code server.max_count} (by default {@link #DEFAULT_MAX_COUNT}).
     */
    public long maxCount() {
        try {
            return Native.segmentsMaxCount(ref.handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** Stops the preloader and closes the store. Idempotent. */
    @Override
    public void close() {
        ref.close();
    }
}
