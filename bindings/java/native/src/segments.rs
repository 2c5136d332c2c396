//! `io.idmint.Segments`' native methods: segment keys from a config's
//! `[segment]` store, preloaded on the object's own runtime.

use idmint_embed::Segments;
use jni::EnvUnowned;
use jni::objects::{JClass, JLongArray, JString};
use jni::sys::{jboolean, jint, jlong};

use crate::generator::long_array;
use crate::handle::{Handle, into_handle};
use crate::throw::{call, call_plain};

jni_export! {
    /// `Segments.fromConfig(path[, floors])`: opens the store, creates the
    /// declared keys, starts the preloader.
    fn Java_io_idmint_Native_segmentsFromConfig<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        path: JString<'local>,
        floors: jboolean,
    ) -> jlong {
        call(&mut env, |env| {
            let path = path.try_to_string(env)?;
            let segments = Segments::from_config_floors(path, floors)?;
            Ok(into_handle(segments))
        })
    }
}

jni_export! {
    /// The next ID of `key`.
    fn Java_io_idmint_Native_segmentsNextId<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        segments: Handle<Segments>,
        key: JString<'local>,
    ) -> jlong {
        call(&mut env, |env| {
            let key = key.try_to_string(env)?;
            Ok(segments.get().next_id(&key)? as jlong)
        })
    }
}

jni_export! {
    /// `n` IDs of `key` in increasing order (`n` checked positive).
    fn Java_io_idmint_Native_segmentsNextIds<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        segments: Handle<Segments>,
        key: JString<'local>,
        n: jint,
    ) -> JLongArray<'local> {
        call(&mut env, |env| {
            let key = key.try_to_string(env)?;
            let n = segments.get().check_count(n)?;
            let ids = segments.get().next_ids(&key, n as u64)?;
            long_array(env, &ids)
        })
    }
}

jni_export! {
    /// Stops the preloader and closes the store. Idempotent.
    fn Java_io_idmint_Native_segmentsClose<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        segments: Handle<Segments>,
    ) {
        call_plain(&mut env, || {
            segments.get().close();
            Ok(())
        });
    }
}

jni_export! {
    /// Frees the allocator (closing it first if it is still open).
    fn Java_io_idmint_Native_segmentsFree<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        segments: Handle<Segments>,
    ) {
        call_plain(&mut env, || {
            segments.free();
            Ok(())
        });
    }
}

jni_export! {
    /// `Segments#maxCount()`: the config's `server.max_count`.
    fn Java_io_idmint_Native_segmentsMaxCount<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        segments: Handle<Segments>,
    ) -> jlong {
        call_plain(&mut env, || Ok(segments.get().max_count() as jlong))
    }
}

jni_export! {
    /// `Segments.DEFAULT_MAX_COUNT`: `server.max_count` when a config
    /// doesn't set it, as the embedded layer decides it.
    fn Java_io_idmint_Native_defaultMaxCount<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
    ) -> jlong {
        call_plain(&mut env, || Ok(Segments::default_max_count() as jlong))
    }
}
