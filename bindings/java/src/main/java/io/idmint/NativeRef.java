package io.idmint;

import java.lang.ref.Cleaner;
import java.util.function.LongConsumer;

/**
 * One native object's handle, owned by one public object ({@link Generator},
 * {@link Segments}, {@link Layout}, {@link PublicIds}).
 *
 * <ul>
 *   <li><b>Freed once, by the Cleaner</b>, when the owner is unreachable
 *       (never on {@code close()}, which only closes: a call racing a close on
 *       another thread then meets the {@code closed} error, never freed
 *       memory). Every call keeps its owner reachable to its end with
 *       {@code Reference.reachabilityFence}.
 *   <li><b>Closed at exit</b>: what is still open when the JVM exits normally
 *       is closed by a shutdown hook, so leases are released then; which
 *       objects are open is idmint-embed's to know ({@code Native.closeAll}).
 *   <li>{@link #close} and the free hold this object's lock, so neither can
 *       see the other half done.
 * </ul>
 */
final class NativeRef implements Runnable {
    private static final Cleaner CLEANER = Cleaner.create();
    static {
        Runtime.getRuntime().addShutdownHook(new Thread(Native::closeAll, "idmint-close-at-exit"));
    }

    final long handle;
    private final LongConsumer close;
    private final LongConsumer free;
    private boolean freed; // guarded by this

    private NativeRef(long handle, LongConsumer close, LongConsumer free) {
        this.handle = handle;
        this.close = close;
        this.free = free;
    }

    /**
     * Takes ownership of {@code handle} for {@code owner}: {@code free} runs
     * once when {@code owner} is unreachable. {@code close} (may be null)
     * runs on {@link #close} and at exit; neither may capture {@code owner}.
     */
    static NativeRef own(Object owner, long handle, LongConsumer close, LongConsumer free) {
        NativeRef ref = new NativeRef(handle, close, free);
        CLEANER.register(owner, ref);
        return ref;
    }

    /** Closes the object (idempotent; nothing once freed). */
    synchronized void close() {
        if (!freed && close != null) {
            close.accept(handle);
        }
    }

    /** The Cleaner's action: frees the object, closing it first if open. */
    @Override
    public synchronized void run() {
        freed = true;
        free.accept(handle);
    }
}
