//! `io.idmint.Layout`'s native methods: parse, decode, compose, the run-out
//! instant. A layout is a `Copy` value behind its handle; times cross as
//! milliseconds since the Unix epoch.

use idmint_embed::{IdParts, Layout, Timestamp};
use jni::EnvUnowned;
use jni::objects::{JClass, JLongArray, JString};
use jni::sys::{jdouble, jint, jlong};

use crate::handle::{Handle, into_handle};
use crate::throw::{Failure, call, call_plain};

jni_export! {
    /// `Layout.parse(text)`: the handle of the layout `text` reads as.
    fn Java_io_idmint_Native_layoutParse<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        text: JString<'local>,
    ) -> jlong {
        call(&mut env, |env| {
            let text = text.try_to_string(env)?;
            Ok(into_handle(Layout::parse(&text)?))
        })
    }
}

jni_export! {
    fn Java_io_idmint_Native_layoutFree<'local>(
        _env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: Handle<Layout>,
    ) {
        layout.free();
    }
}

jni_export! {
    /// The full text form, which `layoutParse` reads back.
    fn Java_io_idmint_Native_layoutText<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: Handle<Layout>,
    ) -> JString<'local> {
        call(&mut env, |env| Ok(JString::from_str(env, layout.get().to_string())?))
    }
}

jni_export! {
    /// The preset's name, or null for a custom layout.
    fn Java_io_idmint_Native_layoutPreset<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: Handle<Layout>,
    ) -> JString<'local> {
        call(&mut env, |env| match layout.get().preset_name() {
            Some(name) => Ok(JString::from_str(env, name)?),
            None => Ok(JString::null()),
        })
    }
}

jni_export! {
    /// `id` taken apart: `[unixMillis, tick, datacenter, worker, rollback,
    /// sequence]`.
    fn Java_io_idmint_Native_layoutDecode<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: Handle<Layout>,
        id: jlong,
    ) -> JLongArray<'local> {
        call(&mut env, |env| {
            let d = layout.get().decode(id as u64)?;
            let parts = [
                d.time.as_millisecond(),
                d.tick as jlong,
                jlong::from(d.datacenter),
                jlong::from(d.worker),
                jlong::from(d.rollback),
                jlong::from(d.sequence),
            ];
            let array = JLongArray::new(env, parts.len())?;
            array.set_region(env, 0, &parts)?;
            Ok(array)
        })
    }
}

jni_export! {
    /// An ID from its parts (the Java side has checked they aren't negative).
    fn Java_io_idmint_Native_layoutCompose<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: Handle<Layout>,
        tick: jlong,
        datacenter: jint,
        worker: jint,
        rollback: jint,
        sequence: jint,
    ) -> jlong {
        call_plain(&mut env, || {
            let id = layout.get().compose(IdParts {
                tick: tick as u64,
                datacenter: datacenter as u32,
                worker: worker as u32,
                rollback: rollback as u32,
                sequence: sequence as u32,
            })?;
            Ok(id as jlong)
        })
    }
}

jni_export! {
    /// The tick the instant `unix_ms` falls in.
    fn Java_io_idmint_Native_layoutTickAt<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: Handle<Layout>,
        unix_ms: jlong,
    ) -> jlong {
        call(&mut env, |_| {
            // Layout.tickAt checked the range (years -9999 to 9999).
            let time = Timestamp::from_millisecond(unix_ms)
                .map_err(|e| Failure::Internal(format!("instant {unix_ms} ms: {e}")))?;
            Ok(layout.get().tick_at(time)? as jlong)
        })
    }
}

jni_export! {
    /// Milliseconds since the Unix epoch of the first instant the layout
    /// can't hold, or `Long.MIN_VALUE` when that is past the year 9999.
    fn Java_io_idmint_Native_layoutRunsOutAt<'local>(
        _env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: Handle<Layout>,
    ) -> jlong {
        layout
            .get()
            .runs_out_at()
            .map_or(jlong::MIN, |t| t.as_millisecond())
    }
}

jni_export! {
    fn Java_io_idmint_Native_layoutIdsPerSecondPerWorker<'local>(
        _env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: Handle<Layout>,
    ) -> jdouble {
        layout.get().ids_per_second_per_worker()
    }
}

jni_export! {
    fn Java_io_idmint_Native_layoutWorkers<'local>(
        _env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: Handle<Layout>,
    ) -> jlong {
        layout.get().workers() as jlong
    }
}
