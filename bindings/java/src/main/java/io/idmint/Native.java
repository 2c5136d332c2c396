package io.idmint;

/**
 * The native methods of {@code libidmint_java} (bindings/java/native). Handles
 * are Rust objects on the heap; each public class passes only its own, keeps
 * its owner reachable across the call, and frees it once from its
 * {@link NativeRef}'s Cleaner. The public classes refuse nulls; every other
 * check (counts, the range of settings) and every default is idmint-embed's.
 */
final class Native {
    private Native() {}

    static {
        NativeLibrary.load();
    }

    // Layout
    static native long layoutParse(String text);
    static native void layoutFree(long layout);
    static native String layoutText(long layout);
    static native String layoutPreset(long layout);
    /** {@code [unixMillis, tick, datacenter, worker, rollback, sequence]}. */
    static native long[] layoutDecode(long layout, long id);
    static native long layoutCompose(long layout, long tick, int datacenter, int worker, int rollback, int sequence);
    static native long layoutTickAt(long layout, long unixMillis);
    /** Unix milliseconds, or {@code Long.MIN_VALUE} past the year 9999. */
    static native long layoutRunsOutAt(long layout);
    static native double layoutIdsPerSecondPerWorker(long layout);
    static native long layoutWorkers(long layout);

    // Generator
    static native long generatorNew(
            String layout,
            int worker,
            int datacenter,
            String clockBehind,
            String sequenceExhausted,
            String sequenceStart,
            boolean wallClock);
    static native long generatorFromConfig(String path);
    static native long generatorNextId(long generator);
    static native long[] generatorNextIds(long generator, int n);
    static native String generatorLayout(long generator);
    /** {@code [registry, worker, lease, notReady or null]}. */
    static native String[] generatorStatus(long generator);
    static native void generatorClose(long generator);
    static native long maxBatch();
    /** Closes every generator and allocator still open (the shutdown hook). */
    static native void closeAll();
    static native void generatorFree(long generator);

    // Segments
    static native long segmentsFromConfig(String path, boolean floors);
    static native long segmentsNextId(long segments, String key);
    static native long[] segmentsNextIds(long segments, String key, int n);
    static native void segmentsClose(long segments);
    static native long segmentsMaxCount(long segments);
    static native long defaultMaxCount();
    static native void segmentsFree(long segments);

    // PublicIds
    /** Each setting with whether it was set; a null format is the default. */
    static native long publicIdsNew(
            String key,
            boolean hasBits,
            int bits,
            boolean hasKeyIdBits,
            int keyIdBits,
            boolean hasActiveKey,
            int activeKey,
            String format);
    static native long publicIdsFromConfig(String path);
    static native void publicIdsFree(long ids);
    static native long publicIdsObfuscate(long ids, long id);
    static native long publicIdsReveal(long ids, long publicId);
    static native String publicIdsEncode(long ids, long publicId);
    static native long publicIdsDecode(long ids, String text);
    static native String publicIdsObfuscateText(long ids, long id);
    static native long publicIdsRevealText(long ids, String text);
    static native String publicIdsFormat(long ids);
    static native int publicIdsBits(long ids);
}
