package io.idmint.bench;

import io.idmint.Generator;
import io.idmint.Layout;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

/**
 * In-process figures of the Java binding, each beside a baseline or a peer
 * measured in the same run (BENCHMARKS.md, "Java binding, 2026-11-26").
 *
 * <pre>scripts/bench-java          # release build, 5 runs per figure</pre>
 *
 * <p>A plain main class (no JMH: no Maven here): each figure is warmed up
 * first (the JIT compiles the loop), then timed {@code IDMINT_BENCH_RUNS}
 * times; the median is printed. {@code IDMINT_BENCH_QUICK=1} shrinks every
 * size, to check the harness runs.
 *
 * <p>Rows:
 * <ul>
 *   <li><b>nextId at the cap</b>: IDs from {@code twitter}, worker 1 (the
 *       {@code wait} policy) in a 1 s window, one thread, over the layout's cap
 *       of 4,096,000 IDs/s; and beside it a plain {@code synchronized}
 *       Snowflake written as popular Java libraries write it. Every ID of every
 *       run is kept and duplicates are counted, the peer's too.
 *   <li><b>one nextId while borrowing</b>: a generator that may borrow the next
 *       ticks ({@code sequenceExhausted("borrow:1s")}), so the cap doesn't hold it
 *       back, per call, against a bare {@code AtomicLong.incrementAndGet()} and
 *       against a trivial JNI call ({@code Layout.workers()}): the floor any
 *       native call pays.
 *   <li><b>nextIds(100_000)</b>: one call into a {@code long[]}, on a borrowing
 *       generator, against filling a {@code new long[100_000]} in a loop.
 * </ul>
 */
public final class Bench {
    private static final double CAP = 4_096_000;
    private static final boolean QUICK = "1".equals(System.getenv("IDMINT_BENCH_QUICK"));
    private static final int RUNS = Integer.parseInt(System.getenv().getOrDefault("IDMINT_BENCH_RUNS", QUICK ? "2" : "5"));
    private static final double WINDOW_SECONDS = QUICK ? 0.05 : 1.0;
    private static final int CALLS = QUICK ? 100_000 : 2_000_000;
    /** Keeps results alive, so the JIT can't drop the work. */
    static volatile long sink;

    private Bench() {}

    /**
     * A Snowflake as popular Java libraries write it (Twitter's original
     * IdWorker, hutool's Snowflake, the countless "SnowflakeIdWorker" copies): one
     * {@code synchronized} method, the wall clock, a 12-bit sequence, and a spin
     * to the next millisecond when it runs out.
     */
    static final class SynchronizedSnowflake {
        private static final long EPOCH = 1288834974657L;
        private final long worker;
        private long sequence;
        private long lastTimestamp = -1L;

        SynchronizedSnowflake(long worker) {
            this.worker = worker;
        }

        synchronized long nextId() {
            long timestamp = System.currentTimeMillis();
            if (timestamp < lastTimestamp) {
                throw new IllegalStateException("clock moved backwards");
            }
            if (timestamp == lastTimestamp) {
                sequence = (sequence + 1) & 4095;
                if (sequence == 0) {
                    while (timestamp <= lastTimestamp) {
                        timestamp = System.currentTimeMillis();
                    }
                }
            } else {
                sequence = 0;
            }
            lastTimestamp = timestamp;
            return ((timestamp - EPOCH) << 22) | (worker << 12) | sequence;
        }
    }

    /** IDs one thread makes in the window; returns {rate, duplicates, count}. */
    static double[] window(LongSupplier next) {
        long[] ids = new long[(int) (CAP * WINDOW_SECONDS * 1.5)];
        int n = 0;
        long start = System.nanoTime();
        long deadline = start + (long) (WINDOW_SECONDS * 1e9);
        while (System.nanoTime() < deadline && n + 1000 <= ids.length) {
            for (int i = 0; i < 1000; i++) {
                ids[n++] = next.getAsLong();
            }
        }
        long took = System.nanoTime() - start;
        long[] sorted = Arrays.copyOf(ids, n);
        Arrays.sort(sorted);
        long dups = 0;
        for (int i = 1; i < n; i++) {
            if (sorted[i] == sorted[i - 1]) {
                dups++;
            }
        }
        return new double[] {n / (took / 1e9), dups, n};
    }

    /** IDs to time in a window, and what to release after it. */
    record Source(LongSupplier next, AutoCloseable release) {}

    /**
     * One window over a fresh source, released after it: the in-process worker table refuses a
     * second live generator on one worker.
     */
    static double[] timed(java.util.function.Supplier<Source> make) {
        Source s = make.get();
        try {
            return window(s.next());
        } finally {
            try {
                s.release().close();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }
    }

    static void atTheCap(String name, java.util.function.Supplier<Source> make) {
        timed(make); // warm-up
        double[] rates = new double[RUNS];
        long dups = 0;
        long total = 0;
        for (int r = 0; r < RUNS; r++) {
            double[] w = timed(make);
            rates[r] = w[0];
            dups += (long) w[1];
            total += (long) w[2];
        }
        double rate = median(rates);
        System.out.printf("| nextId at the cap, %s | %,.0f IDs/s | %.2f of the cap | %,d duplicates in %,d |%n",
                name, rate, rate / CAP, dups, total);
    }

    /** Nanoseconds per call of {@code call}, over {@code CALLS} calls. */
    static double perCall(LongSupplier call) {
        long acc = 0;
        long start = System.nanoTime();
        for (int i = 0; i < CALLS; i++) {
            acc += call.getAsLong();
        }
        long took = System.nanoTime() - start;
        sink = acc;
        return (double) took / CALLS;
    }

    static double median(double[] xs) {
        double[] s = xs.clone();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    static Generator borrowing(int worker) {
        return Generator.builder().layout("twitter").worker(worker).sequenceExhausted("borrow:1s").build();
    }

    public static void main(String[] args) {
        System.out.printf("Java %s (%s), %d runs per figure%s%n%n", System.getProperty("java.version"),
                System.getProperty("java.vm.name"), RUNS, QUICK ? ", QUICK sizes" : "");
        System.out.println("| what | figure | ratio | checked |");
        System.out.println("|---|---|---|---|");

        atTheCap("idmint", () -> {
            Generator g = Generator.builder().layout("twitter").worker(1).build();
            return new Source(g::nextId, g);
        });
        atTheCap("synchronized Snowflake (peer)", () -> new Source(new SynchronizedSnowflake(1)::nextId, () -> {}));

        Layout twitter = Layout.parse("twitter");
        // Warm-up: the JIT compiles each loop before it is timed.
        try (Generator g = borrowing(2)) {
            perCall(g::nextId);
        }
        perCall(new AtomicLong()::incrementAndGet);
        perCall(twitter::workers);
        double[] idm = new double[RUNS];
        double[] atomic = new double[RUNS];
        double[] jni = new double[RUNS];
        for (int r = 0; r < RUNS; r++) {
            try (Generator g = borrowing(2)) {
                idm[r] = perCall(g::nextId);
            }
            atomic[r] = perCall(new AtomicLong()::incrementAndGet);
            jni[r] = perCall(twitter::workers);
        }
        double a = median(idm);
        double b = median(atomic);
        double c = median(jni);
        System.out.printf("| one nextId while borrowing | %.1f ns | %.1f× `AtomicLong.incrementAndGet()` (%.1f ns) | |%n", a, a / b, b);
        System.out.printf("| a trivial JNI call, `Layout.workers()` | %.1f ns | %.2f of one nextId | |%n", c, c / a);

        int batches = RUNS * 20;
        double[] batch = new double[batches];
        double[] plain = new double[batches];
        for (int r = -5; r < batches; r++) { // five warm-up rounds
            long[] ids;
            try (Generator g = borrowing(3)) {
                long start = System.nanoTime();
                ids = g.nextIds(100_000);
                long took = System.nanoTime() - start;
                if (r >= 0) {
                    batch[r] = took;
                }
            }
            if (ids.length != 100_000 || Arrays.stream(ids).distinct().count() != 100_000) {
                throw new AssertionError("nextIds(100_000) did not give 100,000 distinct IDs");
            }
            long start = System.nanoTime();
            long[] filled = new long[100_000];
            for (int i = 0; i < filled.length; i++) {
                filled[i] = i;
            }
            long took = System.nanoTime() - start;
            sink = filled[99_999];
            if (r >= 0) {
                plain[r] = took;
            }
        }
        a = median(batch);
        b = median(plain);
        System.out.printf("| nextIds(100_000) into a long[] | %.0f µs | %.1f× filling a `new long[100_000]` (%.0f µs) | 100,000 distinct |%n",
                a / 1e3, a / b, b / 1e3);
    }
}
