//! `io.idmint.PublicIds`' native methods: keyed, reversible obfuscation of
//! IDs and its text forms. Public IDs of 64 bits fill the `long`: Java
//! reads them as unsigned.

use idmint_embed::PublicIds;
use jni::EnvUnowned;
use jni::objects::{JClass, JString};
use jni::sys::{jint, jlong};

use crate::handle::{Handle, into_handle};
use crate::throw::{Failure, call, call_plain};

jni_export! {
    /// `PublicIds.builder(key)...build()`; `active_key` is -1 for the last
    /// key listed.
    fn Java_io_idmint_Native_publicIdsNew<'local>(
        mut env: EnvUnowned<'local>,
        _class: JClass<'local>,
        key: JString<'local>,
        bits: jint,
        key_id_bits: jint,
        active_key: jint,
        format: JString<'local>,
    ) -> jlong {
        call(&mut env, |env| {
            let key = key.try_to_string(env)?;
            let format = format.try_to_string(env)?;
            // The Java builder keeps each in 0..=255 (-1 for no active key).
            let byte = |name: &str, value: jint| {
                u8::try_from(value).map_err(|_| Failure::Internal(format!("{name} {value}")))
            };
            let bits = byte("bits", bits)?;
            let key_id_bits = byte("key_id_bits", key_id_bits)?;
            let active_key = if active_key < 0 { None } else { Some(byte("active_key", active_key)?) };
            let ids = PublicIds::new(&key, bits, key_id_bits, active_key, &format)?;
            Ok(into_handle(ids))
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
