//! `io.idmint.Generator`'s native methods: a fixed-worker generator from the
//! builder's options, one leased from a config file, IDs, status, close.

use idmint_embed::{Generator, GeneratorOptions, Layout};
use jni::objects::{JClass, JLongArray, JObjectArray, JString};
use jni::refs::Reference;
use jni::sys::{jboolean, jint, jlong};
use jni::{Env, EnvUnowned};

use crate::handle::{Handle, into_handle};
use crate::throw::{Failure, call, call_plain};

/// A Java string that may be null, as an `Option`.
pub(crate) fn optional_string(env: &Env<'_>, s: &JString<'_>) -> Result<Option<String>, Failure> {
    if s.is_null() {
        return Ok(None);
    }
    Ok(Some(s.try_to_string(env)?))
}

/// `ids` as a new Java `long[]` (every ID is below 2^63).
pub(crate) fn long_array<'local>(
    env: &mut Env<'local>,
    ids: &[u64],
) -> Result<JLongArray<'local>, Failure> {
    let longs: Vec<jlong> = ids.iter().map(|&id| id as jlong).collect();
    let array = JLongArray::new(env, longs.len())?;
    array.set_region(env, 0, &longs)?;
    Ok(array)
}

jni_export! {
    /// `Generator.builder()...build()`: a fixed worker's generator. Null
    /// policies keep the defaults; the Java side has checked that `worker`
    /// and `datacenter` aren't negative.
    #[allow(clippy::too_many_arguments)] // the builder's fields
    fn Java_io_idmint_Native_generatorNew<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        layout: JString<'local>,
        worker: jint,
        datacenter: jint,
        clock_behind: JString<'local>,
        sequence_exhausted: JString<'local>,
        sequence_start: JString<'local>,
        wall_clock: jboolean,
    ) -> jlong {
        call(&mut env, |env| {
            // A null layout is embed's default (`GeneratorOptions::default`).
            let mut options = GeneratorOptions::default();
            if let Some(layout) = optional_string(env, &layout)? {
                options = options.with_layout(Layout::parse(&layout)?);
            }
            let options = options
                .with_worker(worker as u32)
                .with_datacenter(datacenter as u32)
                .with_wall_clock(wall_clock)
                .with_policies(
                    optional_string(env, &clock_behind)?.as_deref(),
                    optional_string(env, &sequence_exhausted)?.as_deref(),
                    optional_string(env, &sequence_start)?.as_deref(),
                )?;
            Ok(into_handle(Generator::new(options)?))
        })
    }
}

jni_export! {
    /// `Generator.fromConfig(path)`: claims a worker ID from the config's
    /// registry; returns once IDs can be issued.
    fn Java_io_idmint_Native_generatorFromConfig<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        path: JString<'local>,
    ) -> jlong {
        call(&mut env, |env| {
            let path = path.try_to_string(env)?;
            Ok(into_handle(Generator::from_config(path)?))
        })
    }
}

jni_export! {
    /// The next ID: the hot path, with no JNI environment unless it throws.
    fn Java_io_idmint_Native_generatorNextId<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        generator: Handle<Generator>,
    ) -> jlong {
        call_plain(&mut env, || Ok(generator.get().next_id()? as jlong))
    }
}

jni_export! {
    /// `n` IDs in increasing order (`n` checked by embed, negative too).
    fn Java_io_idmint_Native_generatorNextIds<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        generator: Handle<Generator>,
        n: jint,
    ) -> JLongArray<'local> {
        call(&mut env, |env| {
            let n = Generator::check_count(n)?;
            let ids = generator.get().next_ids(n as u64)?;
            long_array(env, &ids)
        })
    }
}

jni_export! {
    /// The layout's full text form.
    fn Java_io_idmint_Native_generatorLayout<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        generator: Handle<Generator>,
    ) -> JString<'local> {
        call(&mut env, |env| {
            Ok(JString::from_str(env, generator.get().layout().to_string())?)
        })
    }
}

jni_export! {
    /// `[registry, worker, lease, notReady or null]`.
    fn Java_io_idmint_Native_generatorStatus<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        generator: Handle<Generator>,
    ) -> JObjectArray<'local, JString<'local>> {
        call(&mut env, |env| {
            let s = generator.get().status()?;
            let fields = [
                Some(s.registry.to_owned()),
                Some(s.worker.to_string()),
                Some(s.lease.to_owned()),
                s.not_ready,
            ];
            let array = JObjectArray::<JString>::new(env, fields.len(), JString::null())?;
            for (idx, field) in fields.iter().enumerate() {
                if let Some(text) = field {
                    let text = JString::from_str(env, text)?;
                    array.set_element(env, idx, &text)?;
                }
            }
            Ok(array)
        })
    }
}

jni_export! {
    /// Stops issuing, releases the lease, stops the runtime. Idempotent.
    fn Java_io_idmint_Native_generatorClose<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        generator: Handle<Generator>,
    ) {
        call_plain(&mut env, || {
            generator.get().close();
            Ok(())
        });
    }
}

jni_export! {
    /// Frees the generator (closing it first if it is still open).
    fn Java_io_idmint_Native_generatorFree<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        generator: Handle<Generator>,
    ) {
        call_plain(&mut env, || {
            generator.free();
            Ok(())
        });
    }
}

jni_export! {
    /// `Generator.MAX_BATCH`: the most IDs one `nextIds` call makes, as the
    /// embedded layer decides it.
    fn Java_io_idmint_Native_maxBatch<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
    ) -> jlong {
        call_plain(&mut env, || Ok(idmint_embed::MAX_BATCH as jlong))
    }
}

jni_export! {
    /// Closes every generator and allocator still open in this process
    /// (`idmint_embed::close_all`): the JVM's shutdown hook
    /// (`NativeRef`), so leases are released at exit.
    fn Java_io_idmint_Native_closeAll<'local>(mut env: EnvUnowned<'local>, _class: JClass<'local>) {
        call_plain(&mut env, || {
            idmint_embed::close_all();
            Ok(())
        })
    }
}
