package io.idmint;

import java.lang.ref.Reference;
import java.time.Instant;
import java.util.Objects;
import java.util.Optional;

/**
 * A layout: how an ID's 63 (or fewer) bits split into time, node and
 * sequence. Read from the text form the CLI and config take:
 * {@code Layout.parse("twitter")}, {@code Layout.parse("baidu,epoch=2024-01-01")},
 * {@code Layout.parse("time=41,unit=1ms,epoch=2020-01-01,worker=10,sequence=12")}.
 *
 * <p>Immutable and thread-safe; equal when their full text forms are.
 */
public final class Layout {
    /** The earliest and latest instants idmint's clock types hold. */
    private static final Instant EARLIEST = Instant.parse("-9999-01-01T00:00:00Z");
    private static final Instant LATEST = Instant.parse("9999-12-31T23:59:59.999Z");

    private final NativeRef ref;
    private final String text;

    private Layout(long handle) {
        this.ref = NativeRef.own(this, handle, null, Native::layoutFree);
        this.text = Native.layoutText(handle);
    }

    /**
     * The layout {@code text} reads as: a preset ({@code twitter}, {@code leaf},
     * {@code baidu}, {@code sonyflake}, {@code discord}, {@code instagram},
     * {@code js53}, {@code tso}), a preset with fields changed, or every field.
     *
     * @param text the text form, as the CLI's {@code --layout} and the config's
     *     {@code snowflake.layout} take it
     * @return the layout
     * @throws IdmintException {@code invalid_layout_text} or {@code invalid_layout},
     *     naming the part at fault
     */
    public static Layout parse(String text) {
        return new Layout(Native.layoutParse(Objects.requireNonNull(text, "text")));
    }

    /**
     * Takes {@code id} apart (what {@code idmint decode} prints).
     *
     * @param id an ID of this layout
     * @return its parts: the start of its tick (to the millisecond), the tick,
     *     datacenter, worker, rollback counter and sequence (0 for a field the
     *     layout lacks)
     * @throws IdmintException {@code invalid_id} when {@code id} has bits set
     *     above the layout's fields
     */
    public Decoded decode(long id) {
        try {
            long[] p = Native.layoutDecode(ref.handle, id);
            return new Decoded(id, Instant.ofEpochMilli(p[0]), p[1], (int) p[2], (int) p[3], (int) p[4], (int) p[5]);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Puts an ID together from the tick {@code time} falls in and the parts,
     * with rollback counter 0.
     *
     * @param time any instant in the tick (see {@link #tickAt(Instant)})
     * @param datacenter the datacenter part of the node field (0 for a layout
     *     without one)
     * @param worker the worker part of the node field
     * @param sequence the sequence within the tick
     * @return the ID, never negative
     * @throws IdmintException {@code node_out_of_range} for a part that does
     *     not fit its field, {@code clock_before_epoch} or
     *     {@code layout_exhausted} for a time the layout can't hold
     */
    public long compose(Instant time, int datacenter, int worker, int sequence) {
        return compose(tickAt(time), datacenter, worker, 0, sequence);
    }

    /**
     * Puts an ID together from its parts.
     *
     * @param tick time units since the layout's epoch
     * @param datacenter the datacenter part of the node field (0 for a layout
     *     without one)
     * @param worker the worker part of the node field
     * @param rollback the rollback counter (0 for a layout without rollback bits)
     * @param sequence the sequence within the tick
     * @return the ID, never negative
     * @throws IdmintException {@code node_out_of_range} for a part that does
     *     not fit its field, {@code layout_exhausted} for a tick past the time field
     */
    public long compose(long tick, int datacenter, int worker, int rollback, int sequence) {
        if (tick < 0) {
            throw IdmintException.of("layout_exhausted", "tick " + tick + " is negative");
        }
        notNegative("datacenter", datacenter);
        notNegative("worker", worker);
        notNegative("rollback", rollback);
        notNegative("sequence", sequence);
        try {
            return Native.layoutCompose(ref.handle, tick, datacenter, worker, rollback, sequence);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The tick {@code time} falls in (for {@link #compose(long, int, int, int, int)}).
     *
     * @param time an instant at or after the layout's epoch
     * @return time units since the epoch, rounded down
     * @throws IdmintException {@code clock_before_epoch} before the epoch,
     *     {@code layout_exhausted} at or after {@link #runsOutAt()}
     */
    public long tickAt(Instant time) {
        Objects.requireNonNull(time, "time");
        if (time.isBefore(EARLIEST)) {
            throw IdmintException.of("clock_before_epoch", time + " is before the layout's epoch");
        }
        if (time.isAfter(LATEST)) {
            throw IdmintException.of("layout_exhausted", "the layout can't hold " + time + " (past the year 9999)");
        }
        try {
            return Native.layoutTickAt(ref.handle, time.toEpochMilli());
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * When the layout's time field runs out: a generator on it throws
     * {@code layout_exhausted} from then on.
     *
     * @return the first instant the layout can't hold (2024-11-20 for uid-generator's
     *     default {@code baidu}); empty when that is past the year 9999
     */
    public Optional<Instant> runsOutAt() {
        try {
            long ms = Native.layoutRunsOutAt(ref.handle);
            return ms == Long.MIN_VALUE ? Optional.empty() : Optional.of(Instant.ofEpochMilli(ms));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The preset this layout is.
     *
     * @return the preset's name ({@code twitter}, ...) when every field is the
     *     preset's; empty for a custom layout or a preset with fields changed
     */
    public Optional<String> preset() {
        try {
            return Optional.ofNullable(Native.layoutPreset(ref.handle));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The layout's cap on one worker.
     *
     * @return IDs per second one worker can make: sequence values per tick times
     *     ticks per second (4,096,000 for {@code twitter})
     */
    public double idsPerSecondPerWorker() {
        try {
            return Native.layoutIdsPerSecondPerWorker(ref.handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * How many worker IDs the layout has.
     *
     * @return the number of values of the whole node field, datacenter and worker
     *     bits together (1,024 for {@code twitter})
     */
    public long workers() {
        try {
            return Native.layoutWorkers(ref.handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The full text form.
     *
     * @return every field spelled out, which {@link #parse} reads back as an
     *     equal layout
     */
    @Override
    public String toString() {
        return text;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Layout other && other.text.equals(text);
    }

    @Override
    public int hashCode() {
        return text.hashCode();
    }

    static void notNegative(String what, int value) {
        if (value < 0) {
            throw IdmintException.of("node_out_of_range", what + " " + value + " is negative");
        }
    }
}
