//! `idmint.node`: the Node.js addon, a thin napi-rs layer over
//! `idmint-embed`. The package's `index.js` (bindings/node) defines the
//! error class, hands it to [`set_error_class`], re-exports the classes and
//! closes what is still open when the process exits.
//!
//! What this layer decides, and nothing else:
//! - **Types.** IDs are JavaScript `bigint`s (from `u64`, always below
//!   2^63), batches `BigInt64Array`s. An ID argument is a `bigint`, or a
//!   `number` only when it is a safe integer: anything else is refused with
//!   `invalid_id`, never rounded. Times are `Date`s (exact to the
//!   millisecond); ticks are `bigint`s (a custom layout's may pass 2^53).
//! - **Errors.** Every failure is thrown as the package's `IdmintError`
//!   (made by its own constructor, per environment) with `.code`, the
//!   message and `.retryAfterMs` (a number, or `null`).
//! - **Sharing across `worker_threads`.** A JavaScript object belongs to one
//!   thread's environment, but the generator behind it is `Send + Sync`:
//!   each open generator (and segment allocator) is listed in a
//!   process-wide table under a small integer, its `handle`, which a thread
//!   sends to another (`workerData`, `postMessage`); there
//!   `Generator.fromHandle(handle)` gives an object on the same generator.
//!   The table holds weak references: a handle is good while some object on
//!   it is open; the generator closes when the last one is collected, or at
//!   once for all with `close()`.
//! - **Blocking.** `nextId` runs on the caller's thread: nanoseconds, or at
//!   worst a tick (or the clock policy's bound) and the keeper's 250 ms at
//!   the mark. A claim or a store that opens over the network is blocking
//!   in `fromConfig`, and runs on libuv's thread pool in `fromConfigAsync`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use idmint_embed::{GeneratorOptions, IdParts};
use napi::bindgen_prelude::{
    AsyncTask, BigInt, BigInt64Array, ClassInstance, Either, FnArgs, Function, FunctionRef, Object,
    Unknown,
};
use napi::bindgen_prelude::{FromNapiValue, JsObjectValue};
use napi::{Env, JsDate, JsValue, Task, ValueType};
use napi_derive::napi;

/// Largest integer a `number` holds exactly (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

// ---- Errors ----

/// The arguments of the package's `IdmintError` constructor: code, message,
/// retry hint in milliseconds (or null).
type ErrorArgs = FnArgs<(String, String, Option<f64>)>;

/// The `IdmintError` constructor of one environment (the main thread or a
/// worker thread), kept as its instance data.
struct ErrorClass(FunctionRef<ErrorArgs, Unknown<'static>>);

/// Keeps `IdmintError` (index.js calls it once per environment, on load).
#[napi]
pub fn set_error_class(env: Env, class: Function<ErrorArgs, Unknown<'static>>) -> napi::Result<()> {
    env.set_instance_data(ErrorClass(class.create_ref()?), (), |_| {})
}

/// An `IdmintError` to throw: `code`, `message`, the retry hint. Falls back
/// to a plain error with the code as its `.code` if the class is missing.
fn idmint_error(
    env: &Env,
    code: &str,
    message: &str,
    retry_after: Option<Duration>,
) -> napi::Error {
    let made = (|| -> napi::Result<Unknown<'_>> {
        let class = env
            .get_instance_data::<ErrorClass>()?
            .ok_or_else(|| napi::Error::from_reason("IdmintError is not set"))?;
        let ctor = class.0.borrow_back(env)?;
        ctor.new_instance(FnArgs::from((
            code.to_owned(),
            message.to_owned(),
            retry_after.map(|d| d.as_secs_f64() * 1000.0),
        )))
    })();
    match made {
        Ok(obj) => napi::Error::from(obj),
        Err(_) => napi::Error::new(napi::Status::GenericFailure, format!("{code}: {message}")),
    }
}

/// `e` as an `IdmintError`.
fn throw(env: &Env, e: &idmint_embed::Error) -> napi::Error {
    idmint_error(env, e.code(), e.message(), e.retry_after())
}

/// Converts an `idmint-embed` result, throwing its error.
trait OrThrow<T> {
    fn or_throw(self, env: &Env) -> napi::Result<T>;
}

impl<T> OrThrow<T> for Result<T, idmint_embed::Error> {
    #[inline]
    fn or_throw(self, env: &Env) -> napi::Result<T> {
        self.map_err(|e| throw(env, &e))
    }
}

// ---- Arguments ----

/// A `bigint` or a `number`, as the two cases `id_arg` and `count_arg`
/// read; anything else refused with `code`.
fn integer_arg(
    env: &Env,
    code: &str,
    what: &str,
    value: Unknown,
) -> napi::Result<Either<BigInt, f64>> {
    match value.get_type()? {
        ValueType::BigInt => Ok(Either::A(BigInt::from_unknown(value)?)),
        ValueType::Number => Ok(Either::B(value.coerce_to_number()?.get_double()?)),
        other => Err(idmint_error(
            env,
            code,
            &format!(
                "{what} must be a bigint (or a number that is a safe integer), not {}",
                other.to_string().to_lowercase()
            ),
            None,
        )),
    }
}

/// An ID (or a public ID) argument: a non-negative `bigint` below 2^64, or a
/// `number` that is a safe integer.
fn id_arg(env: &Env, what: &str, value: Unknown) -> napi::Result<u64> {
    match integer_arg(env, "invalid_id", what, value)? {
        Either::A(big) => {
            let (negative, v, lossless) = big.get_u64();
            if negative || !lossless {
                return Err(idmint_error(
                    env,
                    "invalid_id",
                    &format!(
                        "{what} {} is not a 64-bit unsigned integer",
                        describe_big(&big)
                    ),
                    None,
                ));
            }
            Ok(v)
        }
        Either::B(n) => safe_integer(n).ok_or_else(|| {
            idmint_error(
                env,
                "invalid_id",
                &format!(
                    "{what} {n} is not a safe integer: a number above 2^53 - 1 has lost digits \
                     already; pass IDs as bigint"
                ),
                None,
            )
        }),
    }
}

/// `n` when it is a whole number from 0 to 2^53 - 1.
fn safe_integer(n: f64) -> Option<u64> {
    if n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&n) {
        // Exact: a whole number within the safe range.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some(n as u64)
    } else {
        None
    }
}

fn describe_big(big: &BigInt) -> String {
    let (negative, v, lossless) = big.get_u64();
    match (negative, lossless) {
        (true, true) => format!("-{v}"),
        (_, false) => "(wider than 64 bits)".to_owned(),
        (false, true) => v.to_string(),
    }
}

/// A count (`nextIds(n)`): a `number` or a `bigint`, checked by
/// `idmint-embed` (`check`, against `max`), as every binding's count is.
/// What is no integer here (a fraction, a `bigint` wider than 64 bits) is
/// refused in embed's words too ([`idmint_embed::Error::invalid_count`]).
fn count_arg(
    env: &Env,
    value: Unknown,
    max: u64,
    check: impl FnOnce(i128) -> Result<usize, idmint_embed::Error>,
) -> napi::Result<u64> {
    let n: i128 = match integer_arg(env, "invalid_count", "count", value)? {
        Either::A(big) => match big.get_i128() {
            (v, true) => v,
            _ => {
                return Err(throw(
                    env,
                    &idmint_embed::Error::invalid_count(describe_big(&big), max),
                ));
            }
        },
        Either::B(n) => match whole_number(n) {
            Some(v) => i128::from(v),
            None => return Err(throw(env, &idmint_embed::Error::invalid_count(n, max))),
        },
    };
    let n = check(n).or_throw(env)?;
    // A usize below `max` (a u64).
    Ok(n as u64)
}

/// `n` when it is a whole number within the safe integers (either sign).
fn whole_number(n: f64) -> Option<i64> {
    if n.fract() == 0.0 && (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&n) {
        // Exact: a whole number within the safe range.
        #[allow(clippy::cast_possible_truncation)]
        Some(n as i64)
    } else {
        None
    }
}

/// A small non-negative integer option (`worker`, `sequence`, ...), refused
/// with `code` when it is not one.
fn u32_arg(env: &Env, code: &str, what: &str, n: f64) -> napi::Result<u32> {
    safe_integer(n)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            idmint_error(
                env,
                code,
                &format!("{what} {n} is not a whole number from 0 to 4294967295"),
                None,
            )
        })
}

/// The option names of `obj`, refusing any not in `known` (a typo would
/// otherwise be silently ignored).
fn check_keys(env: &Env, what: &str, obj: &Object, known: &[&str]) -> napi::Result<()> {
    for key in Object::keys(obj)? {
        if !known.contains(&key.as_str()) {
            return Err(idmint_error(
                env,
                "invalid_config",
                &format!(
                    "unknown {what} option {key:?} (known: {})",
                    known.join(", ")
                ),
                None,
            ));
        }
    }
    Ok(())
}

/// The property `name` of `obj`, `None` when missing or undefined.
fn get<'e>(obj: &Object<'e>, name: &str) -> napi::Result<Option<Unknown<'e>>> {
    let v: Unknown<'e> = obj.get_named_property(name)?;
    Ok(match v.get_type()? {
        ValueType::Undefined => None,
        _ => Some(v),
    })
}

fn get_u32(env: &Env, obj: &Object, name: &str, code: &str) -> napi::Result<u32> {
    match get(obj, name)? {
        None => Ok(0),
        Some(v) if v.get_type()? == ValueType::Number => {
            u32_arg(env, code, name, v.coerce_to_number()?.get_double()?)
        }
        Some(_) => Err(idmint_error(
            env,
            code,
            &format!("{name} must be a number"),
            None,
        )),
    }
}

fn get_string(env: &Env, obj: &Object, name: &str) -> napi::Result<Option<String>> {
    match get(obj, name)? {
        None => Ok(None),
        Some(v) if v.get_type()? == ValueType::String => {
            Ok(Some(v.coerce_to_string()?.into_utf8()?.into_owned()?))
        }
        Some(_) => Err(idmint_error(
            env,
            "invalid_config",
            &format!("{name} must be a string"),
            None,
        )),
    }
}

/// A `Date` for `ms` milliseconds since the Unix epoch.
fn date(env: &Env, ms: i64) -> napi::Result<JsDate<'_>> {
    // Exact: every millisecond count a layout reaches is far below 2^53.
    #[allow(clippy::cast_precision_loss)]
    env.create_date(ms as f64)
}

// ---- Layout ----

/// A layout, from the text form the CLI and config take: `new
/// Layout('twitter')`, `new Layout('baidu,epoch=2024-01-01')`, `new
/// Layout('time=41,unit=1ms,...')`.
#[napi]
pub struct Layout {
    inner: idmint_embed::Layout,
}

#[napi]
impl Layout {
    #[napi(constructor)]
    pub fn new(env: Env, text: String) -> napi::Result<Layout> {
        Ok(Layout {
            inner: idmint_embed::Layout::parse(&text).or_throw(&env)?,
        })
    }

    /// Takes an ID apart: `{ id, time, timestampMs, tick, datacenter, worker,
    /// rollback, sequence }`.
    #[napi(ts_args_type = "id: bigint | number", ts_return_type = "Decoded")]
    pub fn decode<'e>(&self, env: &'e Env, id: Unknown) -> napi::Result<Object<'e>> {
        let id = id_arg(env, "id", id)?;
        let d = self.inner.decode(id).or_throw(env)?;
        let ms = d.time.as_millisecond();
        let mut obj = Object::new(env)?;
        obj.set_named_property("id", d.id.get())?;
        obj.set_named_property("time", date(env, ms)?)?;
        // Exact: see `date`.
        #[allow(clippy::cast_precision_loss)]
        obj.set_named_property("timestampMs", ms as f64)?;
        obj.set_named_property("tick", d.tick)?;
        obj.set_named_property("datacenter", d.datacenter)?;
        obj.set_named_property("worker", d.worker)?;
        obj.set_named_property("rollback", d.rollback)?;
        obj.set_named_property("sequence", d.sequence)?;
        Ok(obj)
    }

    /// Puts an ID together from `{ time (a Date) or tick (a bigint), datacenter,
    /// worker, sequence, rollback }`.
    #[napi(ts_args_type = "parts: ComposeParts")]
    pub fn compose(&self, env: Env, parts: Object) -> napi::Result<u64> {
        let env = &env;
        check_keys(
            env,
            "compose",
            &parts,
            &[
                "time",
                "tick",
                "datacenter",
                "worker",
                "sequence",
                "rollback",
            ],
        )?;
        let tick = match (get(&parts, "time")?, get(&parts, "tick")?) {
            (Some(_), Some(_)) => {
                return Err(idmint_error(
                    env,
                    "invalid_config",
                    "give time or tick, not both",
                    None,
                ));
            }
            (Some(time), None) => {
                let ms = if time.is_date()? {
                    JsDate::from_unknown(time)?.value_of()?
                } else {
                    return Err(idmint_error(
                        env,
                        "invalid_config",
                        "time must be a Date",
                        None,
                    ));
                };
                if !ms.is_finite() {
                    return Err(idmint_error(
                        env,
                        "invalid_config",
                        "time is an invalid Date",
                        None,
                    ));
                }
                // A Date's milliseconds are whole numbers within ±8.64e15.
                #[allow(clippy::cast_possible_truncation)]
                let ts = idmint_embed::Timestamp::from_millisecond(ms as i64).map_err(|e| {
                    idmint_error(env, "invalid_config", &format!("time: {e}"), None)
                })?;
                self.inner.tick_at(ts).or_throw(env)?
            }
            (None, Some(tick)) => id_arg(env, "tick", tick)?,
            (None, None) => {
                return Err(idmint_error(
                    env,
                    "invalid_config",
                    "give time (a Date) or tick",
                    None,
                ));
            }
        };
        self.inner
            .compose(IdParts {
                tick,
                datacenter: get_u32(env, &parts, "datacenter", "node_out_of_range")?,
                worker: get_u32(env, &parts, "worker", "node_out_of_range")?,
                rollback: get_u32(env, &parts, "rollback", "node_out_of_range")?,
                sequence: get_u32(env, &parts, "sequence", "invalid_config")?,
            })
            .or_throw(env)
    }

    /// The first instant the layout can't hold, or `null` past the year 9999.
    #[napi(getter, ts_return_type = "Date | null")]
    pub fn runs_out_at<'e>(&self, env: &'e Env) -> napi::Result<Option<JsDate<'e>>> {
        self.inner
            .runs_out_at()
            .map(|t| date(env, t.as_millisecond()))
            .transpose()
    }

    /// The preset's name (`twitter`, ...), or `null` for a custom layout.
    #[napi(getter)]
    pub fn preset(&self) -> Option<&'static str> {
        self.inner.preset_name()
    }

    /// IDs per second one worker can make.
    #[napi(getter)]
    pub fn ids_per_second_per_worker(&self) -> f64 {
        self.inner.ids_per_second_per_worker()
    }

    /// Worker IDs the node field holds.
    #[napi(getter)]
    pub fn workers(&self) -> u64 {
        self.inner.workers()
    }

    /// Whether `other` is the same layout.
    #[napi]
    pub fn equals(&self, other: &Layout) -> bool {
        self.inner == other.inner
    }

    /// The text form, which `new Layout` reads back.
    #[napi]
    #[allow(clippy::inherent_to_string)] // JavaScript's toString
    pub fn to_string(&self) -> String {
        self.inner.to_string()
    }
}

// ---- Handles: one generator, many threads ----

/// The open objects of one kind, by handle, across every environment of the
/// process (see the module docs).
struct Table<T> {
    next: AtomicU32,
    open: Mutex<BTreeMap<u32, Weak<T>>>,
}

impl<T> Table<T> {
    const fn new() -> Table<T> {
        Table {
            next: AtomicU32::new(1),
            open: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u32, Weak<T>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists `value` under a new handle (forgetting the collected ones).
    fn insert(&self, value: &Arc<T>) -> u32 {
        let handle = self.next.fetch_add(1, Ordering::Relaxed);
        let mut open = self.lock();
        open.retain(|_, w| w.strong_count() > 0);
        open.insert(handle, Arc::downgrade(value));
        handle
    }

    fn get(&self, handle: u32) -> Option<Arc<T>> {
        self.lock().get(&handle).and_then(Weak::upgrade)
    }

    fn remove(&self, handle: u32) {
        self.lock().remove(&handle);
    }

    /// Takes every open object off the table.
    fn drain(&self) -> Vec<Arc<T>> {
        std::mem::take(&mut *self.lock())
            .into_values()
            .filter_map(|w| w.upgrade())
            .collect()
    }
}

static GENERATORS: Table<idmint_embed::Generator> = Table::new();
static SEGMENTS: Table<idmint_embed::Segments> = Table::new();

fn no_handle(env: &Env, what: &str, handle: f64) -> napi::Error {
    idmint_error(
        env,
        "closed",
        &format!(
            "no open {what} has handle {handle} in this process: it was closed or collected \
             (keep the object that made it open until every thread has its own), or the handle \
             is from another process"
        ),
        None,
    )
}

/// Closes every generator and segment allocator still open, in every
/// thread: their leases are released now rather than when they run out.
/// index.js calls it when the main thread's process exits.
#[napi]
pub fn close_all() {
    // Off the tables (a handle of a closed generator is no handle), then
    // closed by embed, which keeps what is open in the process.
    GENERATORS.drain();
    SEGMENTS.drain();
    idmint_embed::close_all();
}

// ---- Limits ----

/// The most IDs one `Generator#nextIds` call makes, as the embedded layer
/// decides it (index.js exports it as `MAX_BATCH`; the README states it).
#[napi]
pub fn max_batch() -> f64 {
    idmint_embed::MAX_BATCH as f64
}

/// `server.max_count` when a config doesn't set it: the most IDs one
/// `Segments#nextIds` call takes by default (index.js: `DEFAULT_MAX_COUNT`).
#[napi]
pub fn default_max_count() -> f64 {
    idmint_embed::Segments::default_max_count() as f64
}

// ---- Generator ----

/// Snowflake IDs in this process: `new Generator({ layout: 'twitter', worker:
/// 7 })` with a fixed worker ID, or `Generator.fromConfig(path)` with one
/// leased from the registry of an `idmint serve` config.
#[napi]
pub struct Generator {
    inner: Arc<idmint_embed::Generator>,
    handle: u32,
    /// Made by `fromHandle`: other objects, in other threads, issue from
    /// the same generator.
    from_handle: bool,
}

impl Generator {
    fn wrap(inner: idmint_embed::Generator) -> Generator {
        let inner = Arc::new(inner);
        let handle = GENERATORS.insert(&inner);
        Generator {
            inner,
            handle,
            from_handle: false,
        }
    }
}

#[napi]
impl Generator {
    #[napi(constructor, ts_args_type = "options?: GeneratorOptions")]
    pub fn new(env: Env, options: Option<Object>) -> napi::Result<Generator> {
        let env = &env;
        let mut o = GeneratorOptions::default();
        if let Some(options) = &options {
            check_keys(
                env,
                "Generator",
                options,
                &[
                    "layout",
                    "worker",
                    "datacenter",
                    "clockBehind",
                    "sequenceExhausted",
                    "sequenceStart",
                    "wallClock",
                ],
            )?;
            if let Some(l) = get(options, "layout")? {
                let layout = match l.get_type()? {
                    ValueType::String => {
                        let text = l.coerce_to_string()?.into_utf8()?.into_owned()?;
                        idmint_embed::Layout::parse(&text).or_throw(env)?
                    }
                    _ => match ClassInstance::<Layout>::from_unknown(l) {
                        Ok(l) => l.inner,
                        Err(_) => {
                            return Err(idmint_error(
                                env,
                                "invalid_config",
                                "layout must be a string or a Layout",
                                None,
                            ));
                        }
                    },
                };
                o = o.with_layout(layout);
            }
            if get(options, "worker")?.is_some() {
                o = o.with_worker(get_u32(env, options, "worker", "node_out_of_range")?);
            }
            o = o.with_datacenter(get_u32(env, options, "datacenter", "node_out_of_range")?);
            o = o
                .with_policies(
                    get_string(env, options, "clockBehind")?.as_deref(),
                    get_string(env, options, "sequenceExhausted")?.as_deref(),
                    get_string(env, options, "sequenceStart")?.as_deref(),
                )
                .or_throw(env)?;
            if let Some(w) = get(options, "wallClock")? {
                o = o.with_wall_clock(w.coerce_to_bool()?);
            }
        }
        Ok(Generator::wrap(
            idmint_embed::Generator::new(o).or_throw(env)?,
        ))
    }

    /// A generator from the `[snowflake]` section of an `idmint serve`
    /// config file (and the `IDMINT_…` environment variables): claims a
    /// worker ID from its registry, blocking until IDs can be issued.
    #[napi(factory)]
    pub fn from_config(env: Env, path: String) -> napi::Result<Generator> {
        Ok(Generator::wrap(
            idmint_embed::Generator::from_config(&path).or_throw(&env)?,
        ))
    }

    /// As `fromConfig`, claiming on libuv's thread pool: a promise.
    #[napi(ts_return_type = "Promise<Generator>")]
    pub fn from_config_async(path: String) -> AsyncTask<OpenGenerator> {
        AsyncTask::new(OpenGenerator {
            path: PathBuf::from(path),
            made: None,
        })
    }

    /// Another object on the generator whose `handle` this is (made in any
    /// thread of this process): how `worker_threads` share one generator.
    #[napi(factory)]
    pub fn from_handle(env: Env, handle: f64) -> napi::Result<Generator> {
        let found = safe_integer(handle)
            .and_then(|h| u32::try_from(h).ok())
            .and_then(|h| Some((h, GENERATORS.get(h)?)));
        match found {
            Some((handle, inner)) => Ok(Generator {
                inner,
                handle,
                from_handle: true,
            }),
            None => Err(no_handle(&env, "generator", handle)),
        }
    }

    /// The number that names this generator in every thread of this process
    /// (`Generator.fromHandle`).
    #[napi(getter)]
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// True for an object made by `Generator.fromHandle`: the generator
    /// behind it is shared with the object whose handle that was.
    #[napi(getter)]
    pub fn from_handle_made(&self) -> bool {
        self.from_handle
    }

    /// The next ID, a bigint.
    #[napi]
    pub fn next_id(&self, env: &Env) -> napi::Result<u64> {
        self.inner.next_id().or_throw(env)
    }

    /// `n` IDs in increasing order, a `BigInt64Array`.
    #[napi(ts_args_type = "n: number | bigint")]
    pub fn next_ids(&self, env: &Env, n: Unknown) -> napi::Result<BigInt64Array> {
        let n = count_arg(env, n, idmint_embed::MAX_BATCH, |n| {
            idmint_embed::Generator::check_count(n)
        })?;
        let ids = self.inner.next_ids(n).or_throw(env)?;
        Ok(BigInt64Array::new(as_i64s(ids)))
    }

    /// Releases the lease and stops the generator's thread, for every object
    /// on it (in every thread). Idempotent; later calls throw `closed`.
    #[napi]
    pub fn close(&self) {
        GENERATORS.remove(self.handle);
        self.inner.close();
    }

    /// The layout IDs are made with.
    #[napi(getter)]
    pub fn layout(&self) -> Layout {
        Layout {
            inner: self.inner.layout(),
        }
    }

    /// The worker ID issued with now.
    #[napi(getter)]
    pub fn worker(&self, env: &Env) -> napi::Result<u32> {
        Ok(self.inner.status().or_throw(env)?.worker)
    }

    /// `{ registry, worker, lease, notReady }`: the registry, the worker ID,
    /// the lease's state and why the generator would refuse now (or null).
    #[napi(ts_return_type = "GeneratorStatus")]
    pub fn status<'e>(&self, env: &'e Env) -> napi::Result<Object<'e>> {
        let s = self.inner.status().or_throw(env)?;
        let mut obj = Object::new(env)?;
        obj.set_named_property("registry", s.registry)?;
        obj.set_named_property("worker", s.worker)?;
        obj.set_named_property("lease", s.lease)?;
        obj.set_named_property("notReady", s.not_ready)?;
        Ok(obj)
    }
}

thread_local! {
    /// The generator this thread issued from last, by handle: the hot path's
    /// way around the table's lock.
    static LAST_GENERATOR: std::cell::RefCell<Option<(u32, Weak<idmint_embed::Generator>)>> =
        const { std::cell::RefCell::new(None) };
}

/// The next ID of the generator with `handle`: the hot path of
/// `Generator.prototype.nextId` (index.js). A plain function rather than a
/// method: napi-rs's glue for a method call (registering a borrow of the
/// receiver, checking its class) costs several times the ID itself.
#[napi]
pub fn generator_next_id(env: &Env, handle: u32) -> napi::Result<u64> {
    generator_of(env, handle)?.next_id().or_throw(env)
}

/// `n` IDs of the generator with `handle`, a `BigInt64Array`: how
/// `Generator.prototype.nextId` (index.js) refills the buffer of a generator
/// that one thread alone issues from. A plain function for the same reason
/// as [`generator_next_id`].
#[napi]
pub fn generator_next_ids(env: &Env, handle: u32, n: u32) -> napi::Result<BigInt64Array> {
    let ids = generator_of(env, handle)?
        .next_ids(u64::from(n))
        .or_throw(env)?;
    Ok(BigInt64Array::new(as_i64s(ids)))
}

/// The generator with `handle`, from this thread's one-entry cache when it
/// was the last one used here.
#[inline]
fn generator_of(env: &Env, handle: u32) -> napi::Result<Arc<idmint_embed::Generator>> {
    let cached = LAST_GENERATOR.with_borrow(|last| match last {
        Some((h, g)) if *h == handle => g.upgrade(),
        _ => None,
    });
    match cached {
        Some(g) => Ok(g),
        None => {
            let g = GENERATORS
                .get(handle)
                .ok_or_else(|| no_handle(env, "generator", f64::from(handle)))?;
            LAST_GENERATOR.set(Some((handle, Arc::downgrade(&g))));
            Ok(g)
        }
    }
}

/// `ids` as the `i64`s of a `BigInt64Array`: the same values (IDs are below
/// 2^63), in place.
fn as_i64s(ids: Vec<u64>) -> Vec<i64> {
    ids.into_iter()
        .map(|id| i64::try_from(id).unwrap_or(i64::MAX))
        .collect()
}

/// `Generator.fromConfigAsync`: the claim, on a thread of libuv's pool.
pub struct OpenGenerator {
    path: PathBuf,
    made: Option<Result<idmint_embed::Generator, idmint_embed::Error>>,
}

impl Task for OpenGenerator {
    type Output = ();
    type JsValue = Generator;

    fn compute(&mut self) -> napi::Result<()> {
        self.made = Some(idmint_embed::Generator::from_config(&self.path));
        Ok(())
    }

    fn resolve(&mut self, env: Env, (): ()) -> napi::Result<Generator> {
        match self.made.take() {
            Some(Ok(g)) => Ok(Generator::wrap(g)),
            Some(Err(e)) => Err(throw(&env, &e)),
            None => Err(napi::Error::from_reason("the claim did not run")),
        }
    }
}

// ---- Segments ----

/// Segment keys in this process, from the `[segment]` section of an `idmint
/// serve` config: `Segments.fromConfig(path).nextId('order')`.
#[napi]
pub struct Segments {
    inner: Arc<idmint_embed::Segments>,
    handle: u32,
}

impl Segments {
    fn wrap(inner: idmint_embed::Segments) -> Segments {
        let inner = Arc::new(inner);
        let handle = SEGMENTS.insert(&inner);
        Segments { inner, handle }
    }
}

#[napi]
impl Segments {
    /// Opens the store, creates the declared keys, starts the preloader
    /// (blocking). `{ floors: true }` keeps the server's floor file in
    /// `server.data_dir` (one process per data directory).
    #[napi(factory, ts_args_type = "path: string, options?: { floors?: boolean }")]
    pub fn from_config(env: Env, path: String, options: Option<Object>) -> napi::Result<Segments> {
        let floors = floors_option(&env, options.as_ref())?;
        Ok(Segments::wrap(
            idmint_embed::Segments::from_config_floors(&path, floors).or_throw(&env)?,
        ))
    }

    /// As `fromConfig`, opening the store on libuv's thread pool: a promise.
    #[napi(
        ts_args_type = "path: string, options?: { floors?: boolean }",
        ts_return_type = "Promise<Segments>"
    )]
    pub fn from_config_async(
        env: Env,
        path: String,
        options: Option<Object>,
    ) -> napi::Result<AsyncTask<OpenSegments>> {
        let floors = floors_option(&env, options.as_ref())?;
        Ok(AsyncTask::new(OpenSegments {
            path: PathBuf::from(path),
            floors,
            made: None,
        }))
    }

    /// Another object on the allocator whose `handle` this is (made in any
    /// thread of this process).
    #[napi(factory)]
    pub fn from_handle(env: Env, handle: f64) -> napi::Result<Segments> {
        let found = safe_integer(handle)
            .and_then(|h| u32::try_from(h).ok())
            .and_then(|h| Some((h, SEGMENTS.get(h)?)));
        match found {
            Some((handle, inner)) => Ok(Segments { inner, handle }),
            None => Err(no_handle(&env, "segment allocator", handle)),
        }
    }

    /// The number that names this allocator in every thread of this process.
    #[napi(getter)]
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The next ID of `key`, a bigint.
    #[napi]
    pub fn next_id(&self, env: &Env, key: String) -> napi::Result<u64> {
        self.inner.next_id(&key).or_throw(env)
    }

    /// `n` IDs of `key` in increasing order, a `BigInt64Array`.
    #[napi(ts_args_type = "key: string, n: number | bigint")]
    pub fn next_ids(&self, env: &Env, key: String, n: Unknown) -> napi::Result<BigInt64Array> {
        let n = count_arg(env, n, self.inner.max_count(), |n| {
            self.inner.check_count(n)
        })?;
        let ids = self.inner.next_ids(&key, n).or_throw(env)?;
        Ok(BigInt64Array::new(as_i64s(ids)))
    }

    /// The most IDs one `nextIds` call takes: the config's
    /// `server.max_count` (default `DEFAULT_MAX_COUNT`).
    #[napi(getter)]
    pub fn max_count(&self) -> f64 {
        self.inner.max_count() as f64
    }

    /// Stops the preloader and closes the store, for every object on it.
    /// Idempotent.
    #[napi]
    pub fn close(&self) {
        SEGMENTS.remove(self.handle);
        self.inner.close();
    }
}

fn floors_option(env: &Env, options: Option<&Object>) -> napi::Result<bool> {
    let Some(options) = options else {
        return Ok(false);
    };
    check_keys(env, "Segments", options, &["floors"])?;
    Ok(match get(options, "floors")? {
        Some(v) => v.coerce_to_bool()?,
        None => false,
    })
}

/// `Segments.fromConfigAsync`: opening the store, on a thread of libuv's
/// pool.
pub struct OpenSegments {
    path: PathBuf,
    floors: bool,
    made: Option<Result<idmint_embed::Segments, idmint_embed::Error>>,
}

impl Task for OpenSegments {
    type Output = ();
    type JsValue = Segments;

    fn compute(&mut self) -> napi::Result<()> {
        let path = self.path.to_string_lossy().into_owned();
        self.made = Some(idmint_embed::Segments::from_config_floors(
            &path,
            self.floors,
        ));
        Ok(())
    }

    fn resolve(&mut self, env: Env, (): ()) -> napi::Result<Segments> {
        match self.made.take() {
            Some(Ok(s)) => Ok(Segments::wrap(s)),
            Some(Err(e)) => Err(throw(&env, &e)),
            None => Err(napi::Error::from_reason("opening the store did not run")),
        }
    }
}

// ---- Public IDs ----

/// Keyed, reversible obfuscation of IDs for the public, and its text forms
/// (`dec`, `base32`, `sqids`), with the settings of `[obfuscation]`.
#[napi]
pub struct PublicIds {
    inner: idmint_embed::PublicIds,
}

#[napi]
impl PublicIds {
    /// `new PublicIds(key, { bits, keyIdBits, activeKey, format })`.
    #[napi(constructor, ts_args_type = "key: string, options?: PublicIdsOptions")]
    pub fn new(env: Env, key: String, options: Option<Object>) -> napi::Result<PublicIds> {
        let env = &env;
        // The defaults and the range of each number are embed's.
        let mut o = idmint_embed::PublicIdsOptions::new();
        if let Some(options) = &options {
            check_keys(
                env,
                "PublicIds",
                options,
                &["bits", "keyIdBits", "activeKey", "format"],
            )?;
            let setting = |name: &str| -> napi::Result<Option<i64>> {
                let Some(v) = get(options, name)? else {
                    return Ok(None);
                };
                let n = match v.get_type()? {
                    ValueType::Number => v.coerce_to_number()?.get_double()?,
                    _ => f64::NAN,
                };
                whole_number(n).map(Some).ok_or_else(|| {
                    idmint_error(
                        env,
                        "invalid_config",
                        &format!("{name} must be a whole number"),
                        None,
                    )
                })
            };
            if let Some(bits) = setting("bits")? {
                o = o.with_bits(bits);
            }
            if let Some(key_id_bits) = setting("keyIdBits")? {
                o = o.with_key_id_bits(key_id_bits);
            }
            o = o.with_active_key(setting("activeKey")?);
            if let Some(f) = get_string(env, options, "format")? {
                o = o.with_format(&f);
            }
        }
        Ok(PublicIds {
            inner: idmint_embed::PublicIds::with_options(&key, &o).or_throw(env)?,
        })
    }

    /// From the `[obfuscation]` section of a config (and `IDMINT_OBFUSCATION_KEY`).
    #[napi(factory)]
    pub fn from_config(env: Env, path: String) -> napi::Result<PublicIds> {
        Ok(PublicIds {
            inner: idmint_embed::PublicIds::from_config(&path).or_throw(&env)?,
        })
    }

    /// The public ID of `id`, a bigint.
    #[napi(ts_args_type = "id: bigint | number")]
    pub fn obfuscate(&self, env: &Env, id: Unknown) -> napi::Result<u64> {
        let id = id_arg(env, "id", id)?;
        self.inner.obfuscate(id).or_throw(env)
    }

    /// The ID behind a public ID, a bigint.
    #[napi(ts_args_type = "publicId: bigint | number")]
    pub fn reveal(&self, env: &Env, public_id: Unknown) -> napi::Result<u64> {
        let public = id_arg(env, "public ID", public_id)?;
        self.inner.reveal(public).or_throw(env)
    }

    /// A public ID in the text form.
    #[napi(ts_args_type = "publicId: bigint | number")]
    pub fn encode(&self, env: &Env, public_id: Unknown) -> napi::Result<String> {
        let public = id_arg(env, "public ID", public_id)?;
        self.inner.encode(public).or_throw(env)
    }

    /// The public ID a text reads as, a bigint.
    #[napi]
    pub fn decode(&self, env: &Env, text: String) -> napi::Result<u64> {
        self.inner.decode(&text).or_throw(env)
    }

    /// The public ID of `id`, as text.
    #[napi(ts_args_type = "id: bigint | number")]
    pub fn obfuscate_text(&self, env: &Env, id: Unknown) -> napi::Result<String> {
        let id = id_arg(env, "id", id)?;
        self.inner.obfuscate_text(id).or_throw(env)
    }

    /// The ID behind a public ID's text, a bigint.
    #[napi]
    pub fn reveal_text(&self, env: &Env, text: String) -> napi::Result<u64> {
        self.inner.reveal_text(&text).or_throw(env)
    }

    /// `dec`, `base32` or `sqids`.
    #[napi(getter, ts_return_type = "'dec' | 'base32' | 'sqids'")]
    pub fn format(&self) -> &'static str {
        self.inner.format()
    }

    /// The width of public IDs in bits.
    #[napi(getter)]
    pub fn bits(&self) -> u8 {
        self.inner.bits()
    }
}
