//! `libidmint_java`: the JNI library under the `io.idmint` classes
//! (bindings/java/src/main/java), a thin layer over `idmint-embed`.
//!
//! What this layer decides, and nothing else:
//! - **Types.** IDs are Java `long`s (from `u64`, always below 2^63 except
//!   64-bit public IDs, which Java reads as unsigned); times are
//!   milliseconds since the Unix epoch, which the Java side turns into
//!   `Instant`s; a decoded ID comes back as a `long[]` the Java side names.
//! - **Handles.** Every native object is a `Box` handed to Java as a `long`
//!   (handle.rs). Java frees it once, from its `Cleaner`, when the object is
//!   unreachable; `close()` only closes (releases the lease, stops the
//!   runtime), so a call racing a close on another thread meets `closed`,
//!   never freed memory.
//! - **Errors.** An `idmint_embed::Error` is thrown as
//!   `io.idmint.IdmintException(code, message, retryAfterNanos)` (throw.rs);
//!   a panic as an `IdmintException` with code `internal`, never an unwind
//!   into the JVM.
//! - **The hot path.** `generatorNextId` upgrades to a full JNI environment
//!   only to throw: an ID costs the JNI transition and the core's
//!   compare-and-swap.
//!
//! Every exported function is declared with `jni_export!`, which names it
//! as JNI resolves native methods of `io.idmint.Native`
//! (`Java_io_idmint_Native_<method>`).

/// Declares `extern "system" fn Java_io_idmint_Native_<method>`, exported
/// under that name (unmangled: the JVM finds native methods by symbol name,
/// which is why `unsafe_code` is allowed on the item).
macro_rules! jni_export {
    ($(#[$attr:meta])* fn $name:ident $($rest:tt)*) => {
        $(#[$attr])*
        #[allow(unsafe_code, non_snake_case)]
        #[unsafe(no_mangle)]
        pub extern "system" fn $name $($rest)*
    };
}

mod generator;
mod handle;
mod layout;
mod public;
mod segments;
mod throw;
