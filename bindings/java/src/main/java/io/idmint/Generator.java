package io.idmint;

import java.lang.ref.Reference;
import java.nio.file.Path;
import java.util.Objects;
import java.util.Optional;

/**
 * Snowflake IDs made in this process, on the same Rust core as
 * {@code idmint serve}.
 *
 * <p>Two kinds, one API:
 * <ul>
 *   <li><b>Fixed</b>: {@code Generator.builder().layout("twitter").worker(7).build()}.
 *       No registry, no I/O; you keep worker IDs unique across processes (a
 *       registry, below, does it for you).
 *   <li><b>Leased</b>: {@link #fromConfig(Path)}, the {@code [snowflake]} section of
 *       an {@code idmint serve} config. The worker ID is claimed from its registry
 *       (file, etcd, Redis, PostgreSQL/MySQL/SQLite including
 *       {@code mode = "uid-generator"}, ZooKeeper) and kept by a keeper on the
 *       generator's own native thread, which persists the high-water mark ahead
 *       of the IDs and renews the lease.
 * </ul>
 *
 * <p>Contract:
 * <ul>
 *   <li><b>Thread-safe.</b> Share one generator between threads; a call is the
 *       JNI transition and one compare-and-swap. One lease per generator.
 *   <li><b>One per worker in a process.</b> A second live generator whose IDs
 *       would overlap this one's (the same layout, by its bits, and the same
 *       datacenter and worker) throws {@code worker_taken}, fixed or leased,
 *       until this one is closed (or collected).
 *   <li><b>Monotonic.</b> IDs from one generator strictly increase (across a
 *       clock step back the {@code rollback-bits} and {@code history} policies
 *       keep them unique, not increasing).
 *   <li><b>Refuses rather than risks a duplicate.</b> A leased generator whose
 *       lease is lost, or whose mark can't be persisted in time, throws
 *       {@link IdmintException} ({@code mark_reached}, with a retry hint) and
 *       issues nothing, exactly as the server does.
 *   <li><b>Close.</b> {@link #close()} releases the lease and stops the thread;
 *       closing twice is harmless; any call after it throws code {@code closed}.
 *       What is still open at a normal JVM exit is closed then; an unreachable
 *       generator is closed and freed by a {@link java.lang.ref.Cleaner}.
 * </ul>
 */
public final class Generator implements AutoCloseable {
    /**
     * The most IDs one {@link #nextIds(int)} call makes, as the embedded layer
     * decides it.
     */
    public static final long MAX_BATCH = Native.maxBatch();

    private final NativeRef ref;
    private final Layout layout;

    private Generator(long handle) {
        this.ref = NativeRef.own(this, handle, Native::generatorClose, Native::generatorFree);
        this.layout = Layout.parse(Native.generatorLayout(handle));
    }

    /**
     * A builder of a fixed-worker generator: {@code twitter}, datacenter 0,
     * worker 0 and the default policies unless set.
     *
     * @return a new builder; nothing is checked until {@link Builder#build()}
     */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * A generator from the {@code [snowflake]} section of the {@code idmint serve}
     * config at {@code config} (and the {@code IDMINT_…} environment variables
     * over it): claims a worker ID from the registry, persists the first
     * high-water mark, and returns once an ID can be issued.
     *
     * @param config the path of an {@code idmint serve} config file (TOML); the
     *     whole file is checked as the server checks it
     * @return a leased generator, ready to issue; {@link #close()} releases its
     *     worker ID
     * @throws IdmintException {@code invalid_config} for a config the server would
     *     refuse (or that a JVM can't use: ZooKeeper's {@code forever} mode), the
     *     registry's code for a failed claim ({@code workers_exhausted},
     *     {@code registry_timeout}, {@code registry_backend},
     *     {@code clock_behind_mark}, ...), {@code worker_taken} when the worker ID
     *     claimed would make the IDs of a live generator in this JVM (the claim is
     *     released)
     */
    public static Generator fromConfig(Path config) {
        return new Generator(Native.generatorFromConfig(Objects.requireNonNull(config, "config").toString()));
    }

    /**
     * The next ID.
     *
     * @return an ID of this generator's layout: never negative, and greater than
     *     every ID this generator issued before (except after the clock stepped
     *     back under the {@code rollback-bits} or {@code history} policy, which
     *     keep IDs unique but not increasing)
     * @throws IdmintException {@code closed}; {@code clock_behind} (under the
     *     {@code fail} policy, or past a policy's limit), {@code rollback_exhausted},
     *     {@code clock_before_epoch},
     *     {@code layout_exhausted} (the time field is full: see
     *     {@link Layout#runsOutAt()}); {@code mark_reached} when the lease is gone
     *     or the mark can't be persisted in time (with a retry hint while the
     *     lease is held)
     */
    public long nextId() {
        try {
            return Native.generatorNextId(ref.handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * {@code n} IDs in increasing order.
     *
     * @param n how many IDs, 1 to {@link #MAX_BATCH}
     * @return a new array of {@code n} IDs, strictly increasing, each greater than
     *     every ID this generator issued before (with the exception
     *     {@link #nextId()} names); all {@code n} or an exception
     * @throws IdmintException {@code invalid_count} unless {@code n} is 1 to
     *     {@link #MAX_BATCH}; as {@link #nextId()}
     */
    public long[] nextIds(int n) {
        try {
            return Native.generatorNextIds(ref.handle, n);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The layout IDs are made with.
     *
     * @return the layout, the same for the generator's whole life (also after
     *     {@link #close()})
     */
    public Layout layout() {
        return layout;
    }

    /**
     * The worker ID issued with now.
     *
     * @return the worker part of the node field for a fixed generator; the whole
     *     node field (datacenter in its high bits) for a leased one, which may
     *     change when the registry makes it claim again
     * @throws IdmintException {@code closed}
     */
    public int worker() {
        return status().worker();
    }

    /**
     * The registry, worker ID, lease state and why the generator would refuse now.
     *
     * @return a snapshot, taken now (the keeper may change the lease a moment later)
     * @throws IdmintException {@code closed}
     */
    public Status status() {
        try {
            String[] s = Native.generatorStatus(ref.handle);
            return new Status(s[0], Integer.parseInt(s[1]), s[2], Optional.ofNullable(s[3]));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** Stops issuing, releases the lease, stops the generator's thread. Idempotent. */
    @Override
    public void close() {
        ref.close();
    }

    @Override
    public String toString() {
        String parts;
        try {
            Status s = status();
            parts = ", registry=" + s.registry() + ", worker=" + s.worker() + ", lease=" + s.lease();
        } catch (IdmintException e) {
            parts = ", " + e.code();
        }
        return "Generator(layout=" + layout.preset().orElse(layout.toString()) + parts + ")";
    }

    /**
     * A generator's state as seen from outside.
     *
     * @param registry the registry ({@code fixed} for a fixed worker)
     * @param worker the worker ID issued with
     * @param lease {@code held}, {@code renewing}, {@code expired}, {@code lost},
     *     {@code stopped} ({@code held} for a fixed worker)
     * @param notReady why the generator would refuse now, if it would
     */
    public record Status(String registry, int worker, String lease, Optional<String> notReady) {}

    /**
     * Options of a fixed-worker generator. The policies take the config's text
     * forms: {@code clockBehind} {@code "fail"}, {@code "wait:5ms"} (the default),
     * {@code "borrow:1s"}, {@code "rollback-bits"}, {@code "history:64"};
     * {@code sequenceExhausted} {@code "wait"} (the default) or {@code "borrow:1s"};
     * {@code sequenceStart} {@code "zero"} (the default) or {@code "random:100"}.
     */
    public static final class Builder {
        /** Null: idmint-embed's default layout ({@code twitter}). */
        private String layout;
        private int worker;
        private int datacenter;
        private String clockBehind;
        private String sequenceExhausted;
        private String sequenceStart;
        private boolean wallClock;

        private Builder() {}

        /**
         * The layout, by its text form (default {@code twitter}).
         *
         * @param layout what {@link Layout#parse(String)} reads: a preset, a preset
         *     with fields changed, or every field; checked by {@link #build()}
         *     ({@code invalid_layout_text}, {@code invalid_layout})
         * @return this builder
         */
        public Builder layout(String layout) {
            this.layout = Objects.requireNonNull(layout, "layout");
            return this;
        }

        /**
         * The layout (default {@code twitter}).
         *
         * @param layout a parsed layout
         * @return this builder
         */
        public Builder layout(Layout layout) {
            this.layout = layout.toString();
            return this;
        }

        /**
         * The worker ID (default 0).
         *
         * @param worker the worker part of the node field: 0 to 2^(worker bits) - 1
         *     (31 for {@code twitter}, 1023 for {@code leaf}); checked by
         *     {@link #build()} ({@code node_out_of_range})
         * @return this builder
         */
        public Builder worker(int worker) {
            this.worker = worker;
            return this;
        }

        /**
         * The datacenter (default 0).
         *
         * @param datacenter the datacenter part of the node field: 0 to
         *     2^(datacenter bits) - 1 (31 for {@code twitter}; only 0 for layouts
         *     without datacenter bits); checked by {@link #build()}
         *     ({@code node_out_of_range})
         * @return this builder
         */
        public Builder datacenter(int datacenter) {
            this.datacenter = datacenter;
            return this;
        }

        /**
         * What to do when the clock is behind the last ID.
         *
         * @param policy {@code "fail"} ({@code clock_behind} at once),
         *     {@code "wait:5ms"} (the default: wait for a clock at most that far
         *     behind, fail beyond), {@code "borrow:1s"} (keep issuing from the last
         *     ID's time while that is at most that far ahead of the clock),
         *     {@code "rollback-bits"} (count the step back in the layout's rollback
         *     bits) or {@code "history:64"} (reuse the unspent sequence numbers of
         *     the last 64 ticks); the last two keep IDs unique, not increasing.
         *     Checked by
         *     {@link #build()} ({@code invalid_text}, or {@code invalid_config}
         *     when the layout can't support it)
         * @return this builder
         */
        public Builder clockBehind(String policy) {
            this.clockBehind = Objects.requireNonNull(policy, "policy");
            return this;
        }

        /**
         * What to do when a tick's sequence runs out.
         *
         * @param policy {@code "wait"} (the default: wait for the next tick) or
         *     {@code "borrow:1s"} (move on to the next tick at once while that is at
         *     most that far ahead of the clock, wait beyond); checked by
         *     {@link #build()} ({@code invalid_text})
         * @return this builder
         */
        public Builder sequenceExhausted(String policy) {
            this.sequenceExhausted = Objects.requireNonNull(policy, "policy");
            return this;
        }

        /**
         * Where each tick's sequence starts.
         *
         * @param start {@code "zero"} (the default) or {@code "random:100"} (a
         *     pseudo-random start below 100, at most the sequence's capacity, so
         *     IDs don't show how many were issued in a tick); checked by
         *     {@link #build()} ({@code invalid_text})
         * @return this builder
         */
        public Builder sequenceStart(String start) {
            this.sequenceStart = Objects.requireNonNull(start, "start");
            return this;
        }

        /**
         * The raw wall clock instead of the default (the wall clock read once,
         * advanced by the monotonic clock, so a step back while running is invisible).
         *
         * @param wallClock {@code true} to read the raw wall clock on every tick
         *     (a step back then meets the {@link #clockBehind(String)} policy);
         *     {@code false}, the default, for the monotonic one
         * @return this builder
         */
        public Builder wallClock(boolean wallClock) {
            this.wallClock = wallClock;
            return this;
        }

        /**
         * The generator.
         *
         * @return a fixed-worker generator, ready to issue; no registry, no I/O
         * @throws IdmintException {@code invalid_layout_text}, {@code node_out_of_range}
         *     for a worker or datacenter outside the layout, {@code invalid_text} for a
         *     policy that doesn't read, {@code invalid_config} for one the layout can't
         *     support, {@code worker_taken} while a live generator of this JVM makes
         *     IDs that would overlap this one's
         */
        public Generator build() {
            Layout.notNegative("worker", worker);
            Layout.notNegative("datacenter", datacenter);
            return new Generator(Native.generatorNew(
                    layout, worker, datacenter, clockBehind, sequenceExhausted, sequenceStart, wallClock));
        }
    }
}
