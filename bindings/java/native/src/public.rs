//! `io.idmint.PublicIds`' native methods: keyed, reversible obfuscation of
//! IDs and its text forms. Public IDs of 64 bits fill the `long`: Java
//! reads them as unsigned.

use idmint_embed::{PublicIds, PublicIdsOptions};
use jni::EnvUnowned;
use jni::objects::{JClass, JString};
use jni::sys::{jboolean, jint, jlong};

use crate::handle::{Handle, into_handle};
use crate::throw::{Failure, call, call_plain};

jni_export! {
    /// `PublicIds.builder(key)...build()`: the settings the builder was
    /// given, as `jlong`s (`has_*` false for the ones left at embed's
    /// default), checked to be bytes by embed.
    fn Java_io_idmint_Native_publicIdsNew<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        key: JString<'local>,
        has_bits: jboolean,
        bits: jint,
        has_key_id_bits: jboolean,
        key_id_bits: jint,
        has_active_key: jboolean,
        active_key: jint,
        format: JString<'local>,
    ) -> jlong {
        call(&mut env, |env| {
            let key = key.try_to_string(env)?;
            let mut options = PublicIdsOptions::new()
                .with_active_key(has_active_key.then_some(i64::from(active_key)));
            if has_bits {
                options = options.with_bits(i64::from(bits));
            }
            if has_key_id_bits {
                options = options.with_key_id_bits(i64::from(key_id_bits));
            }
            if !format.is_null() {
                options = options.with_format(&format.try_to_string(env)?);
            }
            Ok(into_handle(PublicIds::with_options(&key, &options)?))
        })
    }
}

jni_export! {
    /// From the `[obfuscation]` section of a config file.
    fn Java_io_idmint_Native_publicIdsFromConfig<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        path: JString<'local>,
    ) -> jlong {
        call(&mut env, |env| {
            let path = path.try_to_string(env)?;
            Ok(into_handle(PublicIds::from_config(path)?))
        })
    }
}

jni_export! {
    fn Java_io_idmint_Native_publicIdsFree<'local>(
        _env: EnvUnowned<'local>,
        _class: JClass<'local>,
        ids: Handle<PublicIds>,
    ) {
        ids.free();
    }
}

jni_export! {
    /// The public ID of `id`.
    fn Java_io_idmint_Native_publicIdsObfuscate<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        ids: Handle<PublicIds>,
        id: jlong,
    ) -> jlong {
        call_plain(&mut env, || Ok(ids.get().obfuscate(id as u64)? as jlong))
    }
}

jni_export! {
    /// The ID behind a public ID.
    fn Java_io_idmint_Native_publicIdsReveal<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        ids: Handle<PublicIds>,
        public: jlong,
    ) -> jlong {
        call_plain(&mut env, || Ok(ids.get().reveal(public as u64)? as jlong))
    }
}

jni_export! {
    /// A public ID in the text form.
    fn Java_io_idmint_Native_publicIdsEncode<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        ids: Handle<PublicIds>,
        public: jlong,
    ) -> JString<'local> {
        call(&mut env, |env| {
            let text = ids.get().encode(public as u64)?;
            Ok(JString::from_str(env, text)?)
        })
    }
}

jni_export! {
    /// The public ID a text reads as.
    fn Java_io_idmint_Native_publicIdsDecode<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        ids: Handle<PublicIds>,
        text: JString<'local>,
    ) -> jlong {
        call(&mut env, |env| {
            let text = text.try_to_string(env)?;
            Ok(ids.get().decode(&text)? as jlong)
        })
    }
}

jni_export! {
    /// The public ID of `id`, as text.
    fn Java_io_idmint_Native_publicIdsObfuscateText<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        ids: Handle<PublicIds>,
        id: jlong,
    ) -> JString<'local> {
        call(&mut env, |env| {
            let text = ids.get().obfuscate_text(id as u64)?;
            Ok(JString::from_str(env, text)?)
        })
    }
}

jni_export! {
    /// The ID behind a public ID's text.
    fn Java_io_idmint_Native_publicIdsRevealText<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        ids: Handle<PublicIds>,
        text: JString<'local>,
    ) -> jlong {
        call(&mut env, |env| {
            let text = text.try_to_string(env)?;
            Ok(ids.get().reveal_text(&text)? as jlong)
        })
    }
}

jni_export! {
    /// `dec`, `base32` or `sqids`.
    fn Java_io_idmint_Native_publicIdsFormat<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        ids: Handle<PublicIds>,
    ) -> JString<'local> {
        call(&mut env, |env| -> Result<_, Failure> {
            Ok(JString::from_str(env, ids.get().format())?)
        })
    }
}

jni_export! {
    /// The width of public IDs in bits.
    fn Java_io_idmint_Native_publicIdsBits<'local>(
        _env: EnvUnowned<'local>,
        _class: JClass<'local>,
        ids: Handle<PublicIds>,
    ) -> jint {
        jint::from(ids.get().bits())
    }
}
