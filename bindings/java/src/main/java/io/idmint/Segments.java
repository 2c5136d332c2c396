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
     * @param config the path of an {@code idmint serve} config file (TOML); the
     *     whole file is checked as the server checks it, {@code [segment]} is used
     * @return the allocator, its keys ready; {@link #close()} stops its thread
     * @throws IdmintException {@code invalid_config} for a config the server would
     *     refuse; {@code store_error} or {@code store_timeout} (with a retry hint)
     *     when the store can't be reached
     */
    public static Segments fromConfig(Path config) {
        return new Segments(Native.segmentsFromConfig(Objects.requireNonNull(config, "config").toString(), false));
    }

    /**
     * As {@link #fromConfig(Path)}, keeping the server's floor file in the config's
     * {@code server.data_dir} (one process per data directory): what this
     * directory's process issued is never issued again, even by a store that
     * forgot it.
     *
     * @param config the path of an {@code idmint serve} config file (TOML)
     * @return the allocator, its keys ready
     * @throws IdmintException as {@link #fromConfig(Path)}; {@code floor_file_error}
     *     when another process holds the directory, {@code store_reset} or
     *     {@code key_below_floor} when the store forgot what this directory's
     *     process issued
     */
    public static Segments fromConfigWithFloors(Path config) {
        return new Segments(Native.segmentsFromConfig(Objects.requireNonNull(config, "config").toString(), true));
    }

    /**
     * The next ID of {@code key}.
     *
     * @param key a key of the store (declared in {@code [segment.keys.<name>]} or
     *     made there before)
     * @return the key's next ID: greater than every ID of {@code key} this object
     *     issued before; consecutive within a segment (IDs buffered by another
     *     process, or left at a close, are skipped)
     * @throws IdmintException {@code key_not_found}, {@code invalid_key},
     *     {@code closed}; {@code unavailable} (store down and buffers empty, with a
     *     retry hint), {@code store_error}, {@code key_exhausted},
     *     {@code store_went_backwards}
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
     * @param key a key of the store
     * @param n how many IDs, 1 to {@link #maxCount()}
     * @return a new array of {@code n} IDs of {@code key}, strictly increasing,
     *     each greater than every ID of {@code key} issued here before
     * @throws IdmintException {@code invalid_count} unless {@code n} is 1 to
     *     {@link #maxCount()}; as {@link #nextId(String)}
     */
    public long[] nextIds(String key, int n) {
        Objects.requireNonNull(key, "key");
        try {
            return Native.segmentsNextIds(ref.handle, key, n);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The most IDs one {@link #nextIds(String, int)} call takes.
     *
     * @return the config's {@code server.max_count} (by default
     *     {@link #DEFAULT_MAX_COUNT}); also after {@link #close()}
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
