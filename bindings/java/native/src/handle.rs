//! Native objects handed to Java as `long` handles.
//!
//! A handle is a `Box<T>` leaked into a raw pointer ([`into_handle`]). The
//! JVM passes it back as a [`Handle<T>`] argument, which lends `&T` for the
//! length of the call, and to the free function once ([`Handle::free`]).
//!
//! The contract the Java side keeps (io.idmint.NativeRef):
//! - a handle passed to a function taking `Handle<T>` came from
//!   `into_handle::<T>`, for the same `T` (each Java class calls only its
//!   own functions with its own handle);
//! - it is freed exactly once, by the owner's `Cleaner` action, which runs
//!   only when the owning Java object is unreachable; every call keeps the
//!   owner reachable to its end (`Reference.reachabilityFence`), so no call
//!   is running with a handle being freed.
//!
//! This module and the exported symbols are the crate's only `unsafe`.

#![allow(unsafe_code)]

use std::marker::PhantomData;

use jni::sys::jlong;

/// A `T` the Java side holds as a `long`. Never built in Rust: only the JVM
/// passes one, with a value [`into_handle`] made.
#[repr(transparent)]
pub(crate) struct Handle<T> {
    raw: jlong,
    _owns: PhantomData<*const T>,
}

/// Moves `value` to the heap and returns its handle for Java.
pub(crate) fn into_handle<T>(value: T) -> jlong {
    Box::into_raw(Box::new(value)) as jlong
}

impl<T> Handle<T> {
    /// The object, for the length of the native call.
    pub(crate) fn get(&self) -> &T {
        // SAFETY: by the module's contract the handle came from
        // `into_handle::<T>` and is not freed while a call holds it.
        unsafe { &*(self.raw as *const T) }
    }

    /// Drops the object (closing it, for what closes on drop).
    pub(crate) fn free(self) {
        // SAFETY: by the module's contract the handle came from
        // `into_handle::<T>`, and this is its one free, with no call running.
        drop(unsafe { Box::from_raw(self.raw as *mut T) });
    }
}
