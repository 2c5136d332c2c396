//! Failures thrown into Java: an `idmint_embed::Error` as
//! `io.idmint.IdmintException`, with its code, message and retry hint, and a
//! panic as one with the code `internal`.

use std::panic::{AssertUnwindSafe, catch_unwind};

use jni::errors::ErrorPolicy;
use jni::objects::{JObject, JString, JThrowable, JValue};
use jni::{Env, EnvUnowned, jni_sig, jni_str};

/// What a native call can fail with.
pub(crate) enum Failure {
    /// idmint's own error, thrown as an `IdmintException`.
    Idmint(idmint_embed::Error),
    /// A JNI call failed; usually a Java exception is pending already (an
    /// `OutOfMemoryError` making an array), which then propagates as it is.
    Jni(jni::errors::Error),
    /// A value the Java side should have refused: a bug of this binding.
    Internal(String),
}

impl From<idmint_embed::Error> for Failure {
    fn from(e: idmint_embed::Error) -> Failure {
        Failure::Idmint(e)
    }
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Failure {
        Failure::Jni(e)
    }
}

/// Runs a native method's body with a JNI environment; its failure or panic
/// is thrown, and Java sees `T::default()` (which it never reads: the
/// exception is pending).
pub(crate) fn call<'local, T: Default>(
    env: &mut EnvUnowned<'local>,
    body: impl FnOnce(&mut Env<'local>) -> Result<T, Failure>,
) -> T {
    env.with_env(body).resolve::<ThrowIdmint>()
}

/// As [`call`], for a body that needs no JNI environment (the hot path):
/// the environment is only made to throw.
pub(crate) fn call_plain<T: Default>(
    env: &mut EnvUnowned<'_>,
    body: impl FnOnce() -> Result<T, idmint_embed::Error>,
) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(e)) => call(env, |_| Err(Failure::Idmint(e))),
        // Raised again inside `with_env`, whose catch hands it to `on_panic`.
        Err(panic) => call(env, |_| std::panic::resume_unwind(panic)),
    }
}

/// The error policy: throws `IdmintException`.
struct ThrowIdmint;

impl<T: Default> ErrorPolicy<T, Failure> for ThrowIdmint {
    type Captures<'unowned_env_local: 'native_method, 'native_method> = ();

    fn on_error<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _captures: &mut (),
        err: Failure,
    ) -> jni::errors::Result<T> {
        if env.exception_check() {
            return Ok(T::default()); // thrown already: it propagates
        }
        match err {
            Failure::Idmint(e) => {
                let retry_nanos = e
                    .retry_after()
                    .map_or(-1, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
                throw(env, e.code(), e.message(), retry_nanos)?;
            }
            Failure::Jni(e) => throw(env, "internal", &format!("a JNI call failed: {e}"), -1)?,
            Failure::Internal(message) => throw(env, "internal", &message, -1)?,
        }
        Ok(T::default())
    }

    fn on_panic<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _captures: &mut (),
        payload: Box<dyn std::any::Any + Send + 'static>,
    ) -> jni::errors::Result<T> {
        if !env.exception_check() {
            let e = idmint_embed::Error::panicked(payload.as_ref());
            throw(env, e.code(), e.message(), -1)?;
        }
        Ok(T::default())
    }
}

/// Makes `IdmintException(code, message, retryAfterNanos)` pending.
fn throw(
    env: &mut Env<'_>,
    code: &str,
    message: &str,
    retry_nanos: i64,
) -> jni::errors::Result<()> {
    let code = JString::from_str(env, code)?;
    let message = JString::from_str(env, message)?;
    let exception: JObject = env.new_object(
        jni_str!("io/idmint/IdmintException"),
        jni_sig!("(Ljava/lang/String;Ljava/lang/String;J)V"),
        &[(&code).into(), (&message).into(), JValue::Long(retry_nanos)],
    )?;
    let exception = env.cast_local::<JThrowable>(exception)?;
    match env.throw(exception) {
        // Throwing reports the now pending exception as an error: it is the
        // outcome wanted here.
        Ok(()) | Err(jni::errors::Error::JavaException) => Ok(()),
        Err(e) => Err(e),
    }
}
