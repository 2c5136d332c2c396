//! `idmint-ffi`: idmint's C ABI, a thin layer over `idmint-embed` for C and
//! for Go (bindings/go, through cgo). `include/idmint.h` is generated from
//! this file by cbindgen (a test keeps it in sync).
//!
//! What this layer decides, and nothing else:
//! - **Handles.** Every object is an opaque pointer the caller frees with its
//!   `_free` function: `IdmintLayout`, `IdmintGenerator`, `IdmintSegments`,
//!   `IdmintPublicIds`, `IdmintError`. Handles other than errors are
//!   thread-safe: any number of threads may call a generator at once, and
//!   `idmint_generator_close` may race with them (later calls fail with
//!   `closed`). Only `_free` needs the caller to know no other call is in
//!   flight.
//! - **Results.** A call that can fail returns `IdmintError *`: NULL on
//!   success, else an error handle with idmint's stable code, a message and
//!   the retry hint, which the caller frees with `idmint_error_free`. Results
//!   go to out-parameters, written only on success.
//! - **No panic crosses the boundary.** Each call runs inside
//!   `catch_unwind`; a panic becomes an error with the code `internal`.
//! - **Input the C side got wrong** (a NULL pointer, text that isn't UTF-8,
//!   a time out of range) is an error with the code `invalid_argument`,
//!   naming the parameter.
//! - **Strings.** Strings passed in are NUL-terminated UTF-8, borrowed for the
//!   call. Strings returned through `char **` are the caller's, freed with
//!   `idmint_string_free`; `const char *` results are borrowed from the
//!   handle they came from and live as long as it does.

use std::any::Any;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::time::Duration;

use idmint_embed::{Generator, GeneratorOptions, IdParts, Layout, PublicIds, Segments, Timestamp};

/// The largest count `idmint_generator_next_ids` takes in one call, as the
/// embedded layer decides it (the core's `Snowflake::MAX_BATCH`). A function,
/// not a `#define`: the number lives in one place, below this crate.
#[unsafe(no_mangle)]
pub extern "C" fn idmint_max_batch() -> u64 {
    idmint_embed::MAX_BATCH
}

/// `server.max_count` when a config doesn't set it: the largest count
/// `idmint_segments_next_ids` takes by default.
#[unsafe(no_mangle)]
pub extern "C" fn idmint_default_max_count() -> u64 {
    Segments::default_max_count()
}

/// Closes every generator and segment allocator still open in this process,
/// as their `_close` functions do: leases are released now rather than when
/// they run out (`idmint-embed` keeps the table). For a program's normal
/// exit (`atexit(idmint_close_all)`); the handles must still be freed.
/// Safe from any thread, more than once, while other calls run (they then
/// fail with `closed`).
#[unsafe(no_mangle)]
pub extern "C" fn idmint_close_all() {
    // No panic crosses the boundary; at exit there is no one to tell.
    let _ = catch_unwind(idmint_embed::close_all);
}

// ---- Errors ----

/// A failure: idmint's stable code (`clock_behind`, `mark_reached`,
/// `key_not_found`, `unavailable`, `closed`, ... as the server sends them,
/// plus this layer's `invalid_argument` and `internal`), a message naming
/// what was wrong, and how long to wait before a retry may succeed.
#[derive(Debug)]
pub struct IdmintError {
    code: CString,
    message: CString,
    retry_after: Option<Duration>,
}

impl IdmintError {
    fn new(code: &str, message: String, retry_after: Option<Duration>) -> IdmintError {
        IdmintError {
            code: c_string(code.to_owned()),
            message: c_string(message),
            retry_after,
        }
    }

    /// Input the C side got wrong, naming the parameter.
    fn argument(message: String) -> IdmintError {
        IdmintError::new("invalid_argument", message, None)
    }

    /// A panic caught at the boundary (`idmint_embed::Error::panicked`).
    fn panicked(payload: &(dyn Any + Send)) -> IdmintError {
        idmint_embed::Error::panicked(payload).into()
    }
}

impl From<idmint_embed::Error> for IdmintError {
    fn from(e: idmint_embed::Error) -> IdmintError {
        IdmintError::new(e.code(), e.message().to_owned(), e.retry_after())
    }
}

/// A `CString` of `s`, with any NUL byte in it (never in idmint's own
/// messages) shown as `\0` rather than cutting the text short.
fn c_string(s: String) -> CString {
    CString::new(s).unwrap_or_else(|e| {
        let s = String::from_utf8_lossy(&e.into_vec()).replace('\0', "\\0");
        CString::new(s).unwrap_or_default()
    })
}

/// Runs one call of the ABI: its error as a handle, a panic as `internal`.
fn call(f: impl FnOnce() -> Result<(), IdmintError>) -> *mut IdmintError {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => ptr::null_mut(),
        Ok(Err(e)) => Box::into_raw(Box::new(e)),
        Err(payload) => Box::into_raw(Box::new(IdmintError::panicked(payload.as_ref()))),
    }
}

/// The error's stable code, borrowed from `error` (an empty string for NULL).
///
/// # Safety
/// `error` is NULL or a live handle from this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_error_code(error: *const IdmintError) -> *const c_char {
    // SAFETY: the caller passes NULL or a live handle.
    match unsafe { error.as_ref() } {
        Some(e) => e.code.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// What went wrong, naming the offending value; borrowed from `error` (an
/// empty string for NULL).
///
/// # Safety
/// `error` is NULL or a live handle from this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_error_message(error: *const IdmintError) -> *const c_char {
    // SAFETY: the caller passes NULL or a live handle.
    match unsafe { error.as_ref() } {
        Some(e) => e.message.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// Whether a retry may succeed after a wait, and if so how long
/// (nanoseconds, in `*nanos`). False when retrying the same call can't help
/// (bad input, a closed generator); `*nanos` is then left as it was.
///
/// # Safety
/// `error` is NULL or a live handle; `nanos` is NULL or points to a
/// `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_error_retry_after(
    error: *const IdmintError,
    nanos: *mut u64,
) -> bool {
    // SAFETY: the caller passes NULL or a live handle.
    let Some(retry_after) = unsafe { error.as_ref() }.and_then(|e| e.retry_after) else {
        return false;
    };
    // SAFETY: the caller passes NULL or a writable `uint64_t`.
    if let Some(out) = unsafe { nanos.as_mut() } {
        *out = u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX);
    }
    true
}

/// Frees an error. NULL is ignored.
///
/// # Safety
/// `error` is NULL or a handle from this library not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_error_free(error: *mut IdmintError) {
    if !error.is_null() {
        // SAFETY: made by `Box::into_raw` in `call`, freed once (the caller's
        // promise).
        drop(unsafe { Box::from_raw(error) });
    }
}

/// Frees a string this library returned through a `char **`. NULL is
/// ignored.
///
/// # Safety
/// `s` is NULL or a string from this library not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: made by `CString::into_raw` here, freed once.
        drop(unsafe { CString::from_raw(s) });
    }
}

// ---- Arguments ----

/// A string argument as `&str`.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
unsafe fn text<'a>(p: *const c_char, name: &str) -> Result<&'a str, IdmintError> {
    if p.is_null() {
        return Err(IdmintError::argument(format!("{name} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated (the caller's promise).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|e| IdmintError::argument(format!("{name} is not UTF-8: {e}")))
}

/// An optional string argument: NULL is `None`.
///
/// # Safety
/// As [`text`].
unsafe fn optional_text<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>, IdmintError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: as the caller promised.
    unsafe { text(p, name) }.map(Some)
}

/// A handle argument.
///
/// # Safety
/// `p` is NULL or a live handle that outlives `'a`.
unsafe fn handle<'a, T>(p: *const T, name: &str) -> Result<&'a T, IdmintError> {
    // SAFETY: NULL or live (the caller's promise).
    unsafe { p.as_ref() }.ok_or_else(|| IdmintError::argument(format!("{name} is NULL")))
}

/// Where a result goes: checked before any work is done, so a NULL
/// out-parameter never costs an ID.
///
/// # Safety
/// `p` is NULL or valid for writing a `T`.
unsafe fn out<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T, IdmintError> {
    // SAFETY: NULL or writable (the caller's promise).
    unsafe { p.as_mut() }.ok_or_else(|| IdmintError::argument(format!("{name} is NULL")))
}

/// Hands a new object to the caller.
fn give<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// Frees what [`give`] handed out.
///
/// # Safety
/// `p` is NULL or from [`give`] and not freed before.
unsafe fn take<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: from `Box::into_raw`, freed once (the caller's promise).
        drop(unsafe { Box::from_raw(p) });
    }
}

// ---- Time ----

/// An instant: whole seconds since the Unix epoch (1970-01-01T00:00:00Z) and
/// the nanoseconds past that second (0 to 999,999,999).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IdmintTime {
    /// Seconds since the Unix epoch, negative before it.
    pub seconds: i64,
    /// Nanoseconds past `seconds`, 0 to 999,999,999.
    pub nanos: u32,
}

impl From<Timestamp> for IdmintTime {
    fn from(t: Timestamp) -> IdmintTime {
        // Floored, so the nanoseconds are never negative: 0.5 s before 1970
        // is -1 s and 500,000,000 ns (as Go's `time.Unix` takes it).
        let nanos = t.as_nanosecond();
        IdmintTime {
            seconds: i64::try_from(nanos.div_euclid(1_000_000_000)).unwrap_or(i64::MIN),
            nanos: u32::try_from(nanos.rem_euclid(1_000_000_000)).unwrap_or(0),
        }
    }
}

impl IdmintTime {
    fn timestamp(self) -> Result<Timestamp, IdmintError> {
        let nanos = i128::from(self.seconds) * 1_000_000_000 + i128::from(self.nanos);
        if self.nanos >= 1_000_000_000 {
            return Err(IdmintError::argument(format!(
                "time.nanos is {}: it must be below 1,000,000,000",
                self.nanos
            )));
        }
        Timestamp::from_nanosecond(nanos).map_err(|e| {
            IdmintError::argument(format!("time {}s is out of range: {e}", self.seconds))
        })
    }
}

// ---- Layout ----

/// A validated layout, read from the text form the CLI and config take
/// (`twitter`, `baidu,epoch=2024-01-01`, `time=41,unit=1ms,...`). Immutable
/// and thread-safe.
pub struct IdmintLayout {
    inner: Layout,
    /// The full text form, which `idmint_layout_parse` reads back.
    text: CString,
    /// The preset's name, if it is one.
    preset: Option<CString>,
}

impl From<Layout> for IdmintLayout {
    fn from(inner: Layout) -> IdmintLayout {
        IdmintLayout {
            inner,
            text: c_string(inner.to_string()),
            preset: inner.preset_name().map(|p| c_string(p.to_owned())),
        }
    }
}

/// What a layout is: its text form, preset, capacity and run-out instant.
/// The strings are borrowed from the layout handle.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IdmintLayoutInfo {
    /// The full text form (every field), which `idmint_layout_parse` reads
    /// back to the same layout.
    pub text: *const c_char,
    /// The preset's name (`twitter`, `baidu`, ...), or NULL for a custom
    /// layout.
    pub preset: *const c_char,
    /// How long a tick lasts, in nanoseconds (1 ms for `twitter`).
    pub unit_nanos: u64,
    /// IDs one worker can make per second: the layout's cap.
    pub ids_per_second_per_worker: f64,
    /// How many worker IDs the node field holds.
    pub workers: u64,
    /// Whether the layout runs out before the year 10000.
    pub runs_out: bool,
    /// The first instant the layout can't hold (when `runs_out`).
    pub runs_out_at: IdmintTime,
}

/// An ID taken apart by `idmint_layout_decode`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IdmintDecoded {
    /// The ID.
    pub id: u64,
    /// The start of the tick the ID was made in.
    pub time: IdmintTime,
    /// Time units since the layout's epoch.
    pub tick: u64,
    /// The datacenter part of the node field (0 when the layout has none).
    pub datacenter: u32,
    /// The worker part of the node field.
    pub worker: u32,
    /// The rollback counter (0 when the layout has no rollback bits).
    pub rollback: u32,
    /// The sequence number within the tick.
    pub sequence: u32,
}

/// The parts `idmint_layout_compose` puts an ID together from.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IdmintIdParts {
    /// Time units since the layout's epoch (`idmint_layout_tick_at`).
    pub tick: u64,
    /// The datacenter part of the node field.
    pub datacenter: u32,
    /// The worker part of the node field.
    pub worker: u32,
    /// The rollback counter part of the node field.
    pub rollback: u32,
    /// The sequence number within the tick.
    pub sequence: u32,
}

/// Reads a layout's text form into `*out` (free it with
/// `idmint_layout_free`).
///
/// Errors: `invalid_layout_text` or `invalid_layout`, naming the part at
/// fault.
///
/// # Safety
/// `text` is a NUL-terminated string; `out` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_layout_parse(
    text: *const c_char,
    out: *mut *mut IdmintLayout,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (text, out) = unsafe { (self::text(text, "text")?, self::out(out, "out")?) };
        *out = give(IdmintLayout::from(Layout::parse(text)?));
        Ok(())
    })
}

/// Frees a layout. NULL is ignored.
///
/// # Safety
/// `layout` is NULL or a handle not freed before, with no call on it in
/// flight.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_layout_free(layout: *mut IdmintLayout) {
    // SAFETY: as the caller promised.
    unsafe { take(layout) }
}

/// What the layout is (see `IdmintLayoutInfo`).
///
/// # Safety
/// `layout` is a live handle; `out` points to a writable `IdmintLayoutInfo`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_layout_info(
    layout: *const IdmintLayout,
    out: *mut IdmintLayoutInfo,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (l, out) = unsafe { (handle(layout, "layout")?, self::out(out, "out")?) };
        let runs_out_at = l.inner.runs_out_at();
        *out = IdmintLayoutInfo {
            text: l.text.as_ptr(),
            preset: l.preset.as_ref().map_or(ptr::null(), |p| p.as_ptr()),
            unit_nanos: u64::try_from(l.inner.unit().as_nanos()).unwrap_or(u64::MAX),
            ids_per_second_per_worker: l.inner.ids_per_second_per_worker(),
            workers: l.inner.workers(),
            runs_out: runs_out_at.is_some(),
            runs_out_at: runs_out_at.map(IdmintTime::from).unwrap_or_default(),
        };
        Ok(())
    })
}

/// Takes `id` apart.
///
/// Errors: `invalid_id` when `id` has bits set above the layout's fields.
///
/// # Safety
/// `layout` is a live handle; `out` points to a writable `IdmintDecoded`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_layout_decode(
    layout: *const IdmintLayout,
    id: u64,
    out: *mut IdmintDecoded,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (l, out) = unsafe { (handle(layout, "layout")?, self::out(out, "out")?) };
        let d = l.inner.decode(id)?;
        *out = IdmintDecoded {
            id: d.id.get(),
            time: d.time.into(),
            tick: d.tick,
            datacenter: d.datacenter,
            worker: d.worker,
            rollback: d.rollback,
            sequence: d.sequence,
        };
        Ok(())
    })
}

/// Puts an ID together from its parts.
///
/// Errors: `node_out_of_range` when a part does not fit its field,
/// `layout_exhausted` when the tick is past the time field.
///
/// # Safety
/// `layout` is a live handle; `parts` points to an `IdmintIdParts`; `out`
/// points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_layout_compose(
    layout: *const IdmintLayout,
    parts: *const IdmintIdParts,
    out: *mut u64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (l, p, out) = unsafe {
            (
                handle(layout, "layout")?,
                handle(parts, "parts")?,
                self::out(out, "out")?,
            )
        };
        *out = l.inner.compose(IdParts {
            tick: p.tick,
            datacenter: p.datacenter,
            worker: p.worker,
            rollback: p.rollback,
            sequence: p.sequence,
        })?;
        Ok(())
    })
}

/// The tick `time` falls in, for `idmint_layout_compose`.
///
/// Errors: `clock_before_epoch` before the layout's epoch,
/// `layout_exhausted` at or after its run-out instant, `invalid_argument`
/// for a time out of range.
///
/// # Safety
/// `layout` is a live handle; `out` points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_layout_tick_at(
    layout: *const IdmintLayout,
    time: IdmintTime,
    out: *mut u64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (l, out) = unsafe { (handle(layout, "layout")?, self::out(out, "out")?) };
        *out = l.inner.tick_at(time.timestamp()?)?;
        Ok(())
    })
}

// ---- Generator ----

/// Snowflake IDs made in this process, with a fixed worker ID or one leased
/// from the registry of an `idmint serve` config. Thread-safe; IDs from one
/// generator strictly increase.
pub struct IdmintGenerator {
    inner: Generator,
}

/// How `idmint_generator_new` makes IDs. NULL strings take the core's
/// defaults (`wait:5ms` when the clock is behind, `wait` when a tick's
/// sequence runs out, sequences from `zero`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IdmintGeneratorOptions {
    /// The layout's text form (`twitter`, `baidu,epoch=2024-01-01`, ...);
    /// NULL for the default (`twitter`, `idmint-embed`'s).
    pub layout: *const c_char,
    /// The worker part of the node field.
    pub worker: u32,
    /// The datacenter part of the node field.
    pub datacenter: u32,
    /// When the clock is behind the last ID: `fail`, `wait:5ms`,
    /// `borrow:1s`, `rollback-bits`, `history:64`; NULL for the default.
    pub clock_behind: *const c_char,
    /// When a tick's sequence runs out: `wait`, `borrow:1s`; NULL for the
    /// default.
    pub sequence_exhausted: *const c_char,
    /// Where each tick's sequence starts: `zero`, `random:100`; NULL for the
    /// default.
    pub sequence_start: *const c_char,
    /// The raw wall clock instead of the default (the wall clock read once,
    /// advanced by the monotonic clock).
    pub wall_clock: bool,
}

/// The worker ID a generator issues with and the state of its lease. The
/// strings are the caller's: free them with `idmint_generator_status_free`.
#[repr(C)]
#[derive(Debug)]
pub struct IdmintGeneratorStatus {
    /// The registry (`fixed` for a fixed worker, `etcd`, `sql`, ...).
    pub registry: *mut c_char,
    /// The worker ID issued with (the whole node field for a claimed one).
    pub worker: u32,
    /// The lease's state: `held`, `renewing`, `expired`, `lost`, `stopped`.
    pub lease: *mut c_char,
    /// Why the generator would refuse now, or NULL when it would not.
    pub not_ready: *mut c_char,
}

/// A generator with a fixed worker ID: no registry, no I/O, nothing in the
/// background. Free it with `idmint_generator_free`.
///
/// Errors: `invalid_layout_text`, `invalid_text` (a policy),
/// `node_out_of_range`, `invalid_config`.
///
/// # Safety
/// `options` points to an `IdmintGeneratorOptions` whose strings are NULL or
/// NUL-terminated; `out` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_new(
    options: *const IdmintGeneratorOptions,
    out: *mut *mut IdmintGenerator,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (o, out) = unsafe { (handle(options, "options")?, self::out(out, "out")?) };
        // SAFETY: the strings are NULL or NUL-terminated (as promised).
        let (layout, clock_behind, exhausted, start) = unsafe {
            (
                optional_text(o.layout, "options.layout")?,
                optional_text(o.clock_behind, "options.clock_behind")?,
                optional_text(o.sequence_exhausted, "options.sequence_exhausted")?,
                optional_text(o.sequence_start, "options.sequence_start")?,
            )
        };
        let mut options = GeneratorOptions::default();
        if let Some(layout) = layout {
            options = options.with_layout(Layout::parse(layout)?);
        }
        let options = options
            .with_worker(o.worker)
            .with_datacenter(o.datacenter)
            .with_wall_clock(o.wall_clock)
            .with_policies(clock_behind, exhausted, start)?;
        *out = give(IdmintGenerator {
            inner: Generator::new(options)?,
        });
        Ok(())
    })
}

/// A generator from the `[snowflake]` section of the `idmint serve` config
/// file at `path` (and the `IDMINT_…` environment variables): claims a worker
/// ID from its registry and returns once IDs can be issued. Free it with
/// `idmint_generator_free`.
///
/// Errors: `invalid_config`, and the registry's codes for a failed claim
/// (`workers_exhausted`, `registry_timeout`, `registry_backend`, ...).
///
/// # Safety
/// `path` is a NUL-terminated string; `out` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_from_config(
    path: *const c_char,
    out: *mut *mut IdmintGenerator,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (path, out) = unsafe { (text(path, "path")?, self::out(out, "out")?) };
        *out = give(IdmintGenerator {
            inner: Generator::from_config(path)?,
        });
        Ok(())
    })
}

/// The next ID, into `*out`.
///
/// Errors: `closed`; `clock_behind`, `layout_exhausted`,
/// `clock_before_epoch`; `mark_reached` when the high-water mark can't be
/// persisted in time or the lease is gone (no ID is issued then).
///
/// # Safety
/// `generator` is a live handle; `out` points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_next_id(
    generator: *const IdmintGenerator,
    out: *mut u64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (g, out) = unsafe { (handle(generator, "generator")?, self::out(out, "out")?) };
        *out = g.inner.next_id()?;
        Ok(())
    })
}

/// An ID or the error that stopped it: what `idmint_generator_next`
/// returns by value.
#[repr(C)]
#[derive(Debug)]
pub struct IdmintIdResult {
    /// The ID, when `error` is NULL (else 0).
    pub id: u64,
    /// NULL on success, else the error (free it with `idmint_error_free`).
    pub error: *mut IdmintError,
}

/// As `idmint_generator_next_id`, with the ID returned by value instead of
/// through a pointer: the hot path for callers where an out-pointer costs
/// (Go's cgo moves a variable whose address is passed to C onto the heap, an
/// allocation per ID).
///
/// # Safety
/// `generator` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_next(
    generator: *const IdmintGenerator,
) -> IdmintIdResult {
    let mut id = 0;
    // SAFETY: as the caller promised; `id` is a local.
    let error = unsafe { idmint_generator_next_id(generator, &mut id) };
    IdmintIdResult { id, error }
}

/// `n` IDs in increasing order, written to `out[0..n]`. Up to a tick's
/// worth come at once; more wait for the ticks they need.
///
/// Errors: `invalid_count` for a count below 1 or above `idmint_max_batch()`
/// (`out` may then be NULL: nothing is written); else as
/// `idmint_generator_next_id`.
///
/// # Safety
/// `generator` is a live handle; `out` is valid for writing `n` `uint64_t`s
/// (or NULL when `n` is out of range).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_next_ids(
    generator: *const IdmintGenerator,
    n: i64,
    out: *mut u64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let g = unsafe { handle(generator, "generator")? };
        // Checked before `out` is touched: embed's one check of a count.
        let len = Generator::check_count(n)?;
        if out.is_null() {
            return Err(IdmintError::argument("out is NULL".to_owned()));
        }
        // SAFETY: non-NULL and valid for `n` writes (the caller's promise);
        // `len` is at most `idmint_embed::MAX_BATCH`, so the slice fits in memory.
        let out = unsafe { std::slice::from_raw_parts_mut(out, len) };
        g.inner.fill_ids(out)?;
        Ok(())
    })
}

/// Whether `idmint_generator_next_ids` takes the count `n`, before the
/// caller sets memory aside for it (Go checks its `int` here). NULL when it
/// does.
///
/// Errors: `invalid_count` for a count below 1 or above `idmint_max_batch()`,
/// in the words every binding reports it in.
#[unsafe(no_mangle)]
pub extern "C" fn idmint_generator_check_count(n: i64) -> *mut IdmintError {
    call(|| {
        Generator::check_count(n)?;
        Ok(())
    })
}

/// The worker ID and the state of its lease, into `*out` (free its strings
/// with `idmint_generator_status_free`).
///
/// Errors: `closed`.
///
/// # Safety
/// `generator` is a live handle; `out` points to a writable
/// `IdmintGeneratorStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_status(
    generator: *const IdmintGenerator,
    out: *mut IdmintGeneratorStatus,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (g, out) = unsafe { (handle(generator, "generator")?, self::out(out, "out")?) };
        let s = g.inner.status()?;
        *out = IdmintGeneratorStatus {
            registry: c_string(s.registry.to_owned()).into_raw(),
            worker: s.worker,
            lease: c_string(s.lease.to_owned()).into_raw(),
            not_ready: s
                .not_ready
                .map_or(ptr::null_mut(), |r| c_string(r).into_raw()),
        };
        Ok(())
    })
}

/// Frees the strings of a status `idmint_generator_status` filled, and sets
/// them to NULL.
///
/// # Safety
/// `status` is NULL or points to a status filled by
/// `idmint_generator_status` whose strings were not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_status_free(status: *mut IdmintGeneratorStatus) {
    // SAFETY: as the caller promised.
    if let Some(s) = unsafe { status.as_mut() } {
        for p in [&mut s.registry, &mut s.lease, &mut s.not_ready] {
            // SAFETY: each from `CString::into_raw` here, or NULL.
            unsafe { idmint_string_free(std::mem::replace(p, ptr::null_mut())) };
        }
    }
}

/// The layout IDs are made with, as a new handle in `*out` (free it with
/// `idmint_layout_free`).
///
/// # Safety
/// `generator` is a live handle; `out` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_layout(
    generator: *const IdmintGenerator,
    out: *mut *mut IdmintLayout,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (g, out) = unsafe { (handle(generator, "generator")?, self::out(out, "out")?) };
        *out = give(IdmintLayout::from(g.inner.layout()));
        Ok(())
    })
}

/// Stops issuing, releases the lease (waiting up to a few seconds for the
/// registry) and stops the generator's thread. Idempotent, and safe while
/// other threads call the generator: every later call fails with `closed`.
/// NULL is ignored.
///
/// # Safety
/// `generator` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_close(generator: *const IdmintGenerator) {
    // A panic can't cross: a failed close leaves the lease to expire.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as the caller promised.
        if let Some(g) = unsafe { generator.as_ref() } {
            g.inner.close();
        }
    }));
}

/// Closes (as `idmint_generator_close`) and frees a generator. NULL is
/// ignored.
///
/// # Safety
/// `generator` is NULL or a handle not freed before, with no call on it in
/// flight.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_generator_free(generator: *mut IdmintGenerator) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as the caller promised.
        unsafe { take(generator) }
    }));
}

// ---- Segments ----

/// Segment keys in this process, from the `[segment]` section of an `idmint
/// serve` config; preloaded in the background. Thread-safe.
pub struct IdmintSegments {
    inner: Segments,
}

/// Opens the config's segment store, creates the keys declared in
/// `[segment.keys]` that it lacks, and starts the preloader. With `floors`,
/// keeps the server's floor file in `server.data_dir` (one process per data
/// directory). Free it with `idmint_segments_free`.
///
/// Errors: `invalid_config`; the store's codes (`store_error`,
/// `store_timeout`, ...); with `floors`, `floor_file_error`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_segments_from_config(
    path: *const c_char,
    floors: bool,
    out: *mut *mut IdmintSegments,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (path, out) = unsafe { (text(path, "path")?, self::out(out, "out")?) };
        let inner = Segments::from_config_floors(path, floors)?;
        *out = give(IdmintSegments { inner });
        Ok(())
    })
}

/// The next ID of `key`, into `*out`.
///
/// Errors: `invalid_key`, `key_not_found`, `unavailable` (store down, buffers
/// empty, with a retry hint), `key_exhausted`, `store_went_backwards`,
/// `closed`.
///
/// # Safety
/// `segments` is a live handle; `key` a NUL-terminated string; `out` points
/// to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_segments_next_id(
    segments: *const IdmintSegments,
    key: *const c_char,
    out: *mut u64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (s, key, out) = unsafe {
            (
                handle(segments, "segments")?,
                text(key, "key")?,
                self::out(out, "out")?,
            )
        };
        *out = s.inner.next_id(key)?;
        Ok(())
    })
}

/// `n` IDs of `key` in increasing order, written to `out[0..n]`.
///
/// Errors: `invalid_count` for a count below 1 or above the config's
/// `server.max_count` (`out` may then be NULL: nothing is written); else as
/// `idmint_segments_next_id`.
///
/// # Safety
/// `segments` is a live handle; `key` a NUL-terminated string; `out` is
/// valid for writing `n` `uint64_t`s (or NULL when `n` is out of range).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_segments_next_ids(
    segments: *const IdmintSegments,
    key: *const c_char,
    n: i64,
    out: *mut u64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (s, key) = unsafe { (handle(segments, "segments")?, text(key, "key")?) };
        // Checked before `out` is touched: embed's one check of a count.
        let n = s.inner.check_count(n)?;
        if out.is_null() {
            return Err(IdmintError::argument("out is NULL".to_owned()));
        }
        let ids = s.inner.next_ids(key, n as u64)?;
        // SAFETY: valid for `n` writes (the caller's promise), and the
        // allocator returned exactly `n` IDs.
        let out = unsafe { std::slice::from_raw_parts_mut(out, ids.len()) };
        out.copy_from_slice(&ids);
        Ok(())
    })
}

/// Whether `idmint_segments_next_ids` takes the count `n`, before the
/// caller sets memory aside for it (Go checks its `int` here). NULL when it
/// does.
///
/// Errors: `invalid_count` for a count below 1 or above the config's
/// `server.max_count`, in the words every binding reports it in.
///
/// # Safety
/// `segments` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_segments_check_count(
    segments: *const IdmintSegments,
    n: i64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let s = unsafe { handle(segments, "segments")? };
        s.inner.check_count(n)?;
        Ok(())
    })
}

/// The largest count `idmint_segments_next_ids` takes: the config's
/// `server.max_count` (0 for NULL).
///
/// # Safety
/// `segments` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_segments_max_count(segments: *const IdmintSegments) -> u64 {
    // SAFETY: as the caller promised.
    unsafe { segments.as_ref() }.map_or(0, |s| s.inner.max_count())
}

/// Stops the preloader and closes the store. Idempotent, and safe while
/// other threads call: later calls fail with `closed`. NULL is ignored.
///
/// # Safety
/// `segments` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_segments_close(segments: *const IdmintSegments) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as the caller promised.
        if let Some(s) = unsafe { segments.as_ref() } {
            s.inner.close();
        }
    }));
}

/// Closes and frees a segment allocator. NULL is ignored.
///
/// # Safety
/// `segments` is NULL or a handle not freed before, with no call on it in
/// flight.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_segments_free(segments: *mut IdmintSegments) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as the caller promised.
        unsafe { take(segments) }
    }));
}

// ---- Public IDs ----

/// Obfuscates IDs into public IDs and reveals them, and writes and reads
/// their text form (`dec`, `base32`, `sqids`), with the server's
/// `[obfuscation]` settings. Pure and thread-safe.
pub struct IdmintPublicIds {
    inner: PublicIds,
    format: CString,
}

impl From<PublicIds> for IdmintPublicIds {
    fn from(inner: PublicIds) -> IdmintPublicIds {
        IdmintPublicIds {
            format: c_string(inner.format().to_owned()),
            inner,
        }
    }
}

/// The settings of `idmint_public_ids_new`, as `[obfuscation]` takes them.
/// Start from `idmint_public_ids_options_default()`, which holds the
/// defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IdmintPublicIdsOptions {
    /// The key ring: `HEX` or `KEY_ID:HEX` entries, space-separated.
    pub key: *const c_char,
    /// The width of public IDs in bits (32 to 64; default 63).
    pub bits: i64,
    /// The key-ID bits (0 to 8; default 0).
    pub key_id_bits: i64,
    /// Whether `active_key` is set; else the last key listed is active.
    pub has_active_key: bool,
    /// The key ID new public IDs are made with.
    pub active_key: i64,
    /// `dec` (the default), `base32` or `sqids`; NULL for the default.
    pub format: *const c_char,
}

/// The default settings of public IDs, `[obfuscation]`'s as `idmint-embed`
/// decides them (63 bits, no key-ID bits, the last key listed active,
/// `dec`), with `key` NULL: set the key, then what differs.
#[unsafe(no_mangle)]
pub extern "C" fn idmint_public_ids_options_default() -> IdmintPublicIdsOptions {
    static FORMAT: std::sync::OnceLock<CString> = std::sync::OnceLock::new();
    let o = idmint_embed::PublicIdsOptions::new();
    IdmintPublicIdsOptions {
        key: ptr::null(),
        bits: o.bits(),
        key_id_bits: o.key_id_bits(),
        has_active_key: o.active_key().is_some(),
        active_key: o.active_key().unwrap_or(0),
        format: FORMAT
            .get_or_init(|| c_string(o.format().to_owned()))
            .as_ptr(),
    }
}

/// Public IDs from explicit settings. Free with `idmint_public_ids_free`.
///
/// Errors: `invalid_config` naming the setting (a number that is no byte,
/// `obfuscation.bits = 300 is out of range: 0 to 255`), `invalid_key`,
/// `invalid_obfuscator` (never quoting a key).
///
/// # Safety
/// `options` points to an `IdmintPublicIdsOptions` whose strings are
/// NUL-terminated (`format` may be NULL); `out` points to a writable
/// pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_public_ids_new(
    options: *const IdmintPublicIdsOptions,
    out: *mut *mut IdmintPublicIds,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (o, out) = unsafe { (handle(options, "options")?, self::out(out, "out")?) };
        // SAFETY: NUL-terminated (as promised).
        let (key, format) = unsafe {
            (
                text(o.key, "options.key")?,
                optional_text(o.format, "options.format")?,
            )
        };
        let mut options = idmint_embed::PublicIdsOptions::new()
            .with_bits(o.bits)
            .with_key_id_bits(o.key_id_bits)
            .with_active_key(o.has_active_key.then_some(o.active_key));
        if let Some(format) = format {
            options = options.with_format(format);
        }
        *out = give(IdmintPublicIds::from(PublicIds::with_options(
            key, &options,
        )?));
        Ok(())
    })
}

/// Public IDs from the `[obfuscation]` section of the config file at `path`
/// (and `IDMINT_OBFUSCATION_KEY`). Free with `idmint_public_ids_free`.
///
/// Errors: `invalid_config`, also for a config with no key.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_public_ids_from_config(
    path: *const c_char,
    out: *mut *mut IdmintPublicIds,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (path, out) = unsafe { (text(path, "path")?, self::out(out, "out")?) };
        *out = give(IdmintPublicIds::from(PublicIds::from_config(path)?));
        Ok(())
    })
}

/// Frees public IDs. NULL is ignored.
///
/// # Safety
/// `public_ids` is NULL or a handle not freed before, with no call on it in
/// flight.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_public_ids_free(public_ids: *mut IdmintPublicIds) {
    // SAFETY: as the caller promised.
    unsafe { take(public_ids) }
}

/// The text form's name (`dec`, `base32`, `sqids`), borrowed from the
/// handle; an empty string for NULL.
///
/// # Safety
/// `public_ids` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_public_ids_format(
    public_ids: *const IdmintPublicIds,
) -> *const c_char {
    // SAFETY: as the caller promised.
    match unsafe { public_ids.as_ref() } {
        Some(p) => p.format.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// The width of public IDs in bits (0 for NULL).
///
/// # Safety
/// `public_ids` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_public_ids_bits(public_ids: *const IdmintPublicIds) -> u8 {
    // SAFETY: as the caller promised.
    unsafe { public_ids.as_ref() }.map_or(0, |p| p.inner.bits())
}

/// The public ID of `id`, into `*out`.
///
/// Errors: `invalid_id` for an ID above 2^63 − 1 or wider than the public
/// IDs.
///
/// # Safety
/// `public_ids` is a live handle; `out` points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_public_ids_obfuscate(
    public_ids: *const IdmintPublicIds,
    id: u64,
    out: *mut u64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (p, out) = unsafe { (handle(public_ids, "public_ids")?, self::out(out, "out")?) };
        *out = p.inner.obfuscate(id)?;
        Ok(())
    })
}

/// The ID behind `public`, into `*out`.
///
/// Errors: `invalid_public_id` outside the width, `unknown_key_id` for a key
/// ID with no key here.
///
/// # Safety
/// `public_ids` is a live handle; `out` points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_public_ids_reveal(
    public_ids: *const IdmintPublicIds,
    public: u64,
    out: *mut u64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (p, out) = unsafe { (handle(public_ids, "public_ids")?, self::out(out, "out")?) };
        *out = p.inner.reveal(public)?;
        Ok(())
    })
}

/// `public` in the text form, into `*out` (free it with
/// `idmint_string_free`).
///
/// Errors: `encode_failed` when Sqids can't write it.
///
/// # Safety
/// `public_ids` is a live handle; `out` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_public_ids_encode(
    public_ids: *const IdmintPublicIds,
    public: u64,
    out: *mut *mut c_char,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (p, out) = unsafe { (handle(public_ids, "public_ids")?, self::out(out, "out")?) };
        *out = c_string(p.inner.encode(public)?).into_raw();
        Ok(())
    })
}

/// The public ID a text reads as, into `*out`.
///
/// Errors: `invalid_public_id` naming the text.
///
/// # Safety
/// `public_ids` is a live handle; `text` a NUL-terminated string; `out`
/// points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn idmint_public_ids_decode(
    public_ids: *const IdmintPublicIds,
    text: *const c_char,
    out: *mut u64,
) -> *mut IdmintError {
    call(|| {
        // SAFETY: as the caller promised.
        let (p, text, out) = unsafe {
            (
                handle(public_ids, "public_ids")?,
                self::text(text, "text")?,
                self::out(out, "out")?,
            )
        };
        *out = p.inner.decode(text)?;
        Ok(())
    })
}

// ---- Processes ----

/// Tells the library that this process is a child just forked: nothing made
/// before the fork issues from the parent's worker ID or segments again (a
/// leased generator claims anew, a fixed one fails with `forked`). Call it in
/// the child right after `fork()` (`pthread_atfork`'s child handler).
/// Async-signal-safe: one atomic add. Go never forks a running program and
/// needs none of this.
#[unsafe(no_mangle)]
pub extern "C" fn idmint_after_fork_in_child() {
    idmint_embed::after_fork_in_child();
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The header a C or Go program includes is the one cbindgen makes from
    /// this file now: regenerate it with `IDMINT_BLESS=1 cargo test -p
    /// idmint-ffi`.
    #[test]
    fn the_checked_in_header_is_current() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
        let mut made = Vec::new();
        cbindgen::Builder::new()
            .with_config(config)
            .with_src(dir.join("src/lib.rs"))
            .generate()
            .unwrap()
            .write(&mut made);
        let made = String::from_utf8(made).unwrap();
        let path = dir.join("include/idmint.h");
        if std::env::var_os("IDMINT_BLESS").is_some() {
            std::fs::write(&path, &made).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == made,
            "bindings/c/include/idmint.h is stale: run `IDMINT_BLESS=1 cargo test -p idmint-ffi` \
             and commit it"
        );
    }

    #[test]
    fn max_batch_is_the_cores() {
        assert_eq!(idmint_max_batch(), idmint_core::Snowflake::MAX_BATCH);
        // Above the core's largest batch: refused by the count alone.
        let options = IdmintGeneratorOptions {
            layout: ptr::null(),
            worker: 1,
            datacenter: 0,
            clock_behind: ptr::null(),
            sequence_exhausted: ptr::null(),
            sequence_start: ptr::null(),
            wall_clock: false,
        };
        let mut g = ptr::null_mut();
        // SAFETY: valid options and out-pointer.
        unsafe { assert!(idmint_generator_new(&options, &mut g).is_null()) };
        let max = i64::try_from(idmint_max_batch()).unwrap();
        for n in [0, -1, max + 1] {
            // SAFETY: a live generator; `out` NULL is allowed for a bad count.
            let e = unsafe { idmint_generator_next_ids(g, n, ptr::null_mut()) };
            assert_eq!(code(e), "invalid_count", "n = {n}");
            assert_eq!(code(idmint_generator_check_count(n)), "invalid_count");
        }
        assert!(idmint_generator_check_count(max).is_null());
        let mut ids = vec![0u64; 3];
        // SAFETY: room for 3.
        unsafe { assert!(idmint_generator_next_ids(g, 3, ids.as_mut_ptr()).is_null()) };
        assert!(ids[0] < ids[1] && ids[1] < ids[2]);
        // SAFETY: freed once.
        unsafe { idmint_generator_free(g) };
    }

    #[test]
    fn public_ids_defaults_and_ranges_are_embeds() {
        let d = idmint_public_ids_options_default();
        let embed = idmint_embed::PublicIdsOptions::new();
        assert_eq!(
            (d.bits, d.key_id_bits, d.has_active_key),
            (embed.bits(), 0, false)
        );
        // SAFETY: a static NUL-terminated string.
        let format = unsafe { CStr::from_ptr(d.format) };
        assert_eq!(format.to_str(), Ok(embed.format()));
        let o = IdmintPublicIdsOptions {
            key: c"000102030405060708090a0b0c0d0e0f".as_ptr(),
            bits: 300,
            ..d
        };
        let mut p = ptr::null_mut();
        // SAFETY: valid options and out-pointer.
        let e = unsafe { idmint_public_ids_new(&o, &mut p) };
        assert_eq!(code(e), "invalid_config");
        let o = IdmintPublicIdsOptions { bits: 63, ..o };
        // SAFETY: as above; freed once.
        unsafe {
            assert!(idmint_public_ids_new(&o, &mut p).is_null());
            idmint_public_ids_free(p);
        }
    }

    #[test]
    fn bad_arguments_and_panics_are_errors_not_crashes() {
        let mut l = ptr::null_mut();
        // SAFETY: NULL text is what is tested.
        let e = unsafe { idmint_layout_parse(ptr::null(), &mut l) };
        assert_eq!(code(e), "invalid_argument");
        assert!(l.is_null());
        let e = call(|| panic!("boom"));
        assert_eq!(code(e), "internal");
    }

    #[test]
    fn times_round_trip_before_and_after_1970() {
        for (seconds, nanos) in [(0, 0), (-1, 999_999_999), (1_750_000_000, 5), (-86_401, 1)] {
            let t = IdmintTime { seconds, nanos }.timestamp().unwrap();
            let back = IdmintTime::from(t);
            assert_eq!((back.seconds, back.nanos), (seconds, nanos));
        }
        let bad = IdmintTime {
            seconds: 0,
            nanos: 1_000_000_000,
        };
        assert!(bad.timestamp().is_err());
    }

    /// The code of `e` (which must be an error), freeing it.
    fn code(e: *mut IdmintError) -> String {
        assert!(!e.is_null(), "expected an error");
        // SAFETY: a live error, freed once here.
        unsafe {
            let code = CStr::from_ptr(idmint_error_code(e))
                .to_str()
                .unwrap()
                .to_owned();
            idmint_error_free(e);
            code
        }
    }
}
