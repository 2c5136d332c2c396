//! `idmint._idmint`: the Python extension module, a thin PyO3 layer over
//! `idmint-embed`. The package `idmint` (bindings/python/python/idmint)
//! re-exports it and adds the fork hook and the close at exit.
//!
//! What this layer decides, and nothing else:
//! - **Types.** IDs are Python `int`s (from `u64`, always below 2^63);
//!   times are aware `datetime`s in UTC, made by Python's own `datetime`
//!   module (exact to the millisecond, and the stable ABI has no C datetime
//!   API); errors are `idmint.IdmintError` with `.code`, `.message` and
//!   `.retry_after` (seconds, or `None`).
//! - **The GIL.** A call that can block on I/O or for long releases it
//!   (`Python::detach`): making and closing generators and allocators, a
//!   batch, a claim in a forked child, an ID that waits for the keeper or
//!   for a segment lease. A single ID is first tried holding the GIL when
//!   it cannot wait for more than 10 ms (a tick of the layout, or the clock
//!   policy's bound): releasing and taking the GIL on every call would cost
//!   more than the ID.

use std::time::Duration;

use idmint_embed::{Error, GeneratorOptions, IdParts};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(
    idmint,
    IdmintError,
    PyException,
    "An idmint failure: `.code` is idmint's stable error code (`clock_behind`, \
     `mark_reached`, `key_not_found`, `unavailable`, `closed`, `forked`, ...), \
     `.message` what went wrong, `.retry_after` the seconds to wait before a retry \
     may succeed (or None)."
);

/// Longest wait a single call may spend holding the GIL.
const GIL_HOLD_MAX: Duration = Duration::from_millis(10);

/// `e` as an `IdmintError` with its code, message and retry hint.
fn raise(py: Python<'_>, e: Error) -> PyErr {
    let ty = py.get_type::<IdmintError>();
    let made = ty.call1((e.to_string(),)).and_then(|obj| {
        obj.setattr("code", e.code())?;
        obj.setattr("message", e.message())?;
        obj.setattr("retry_after", e.retry_after().map(|d| d.as_secs_f64()))?;
        Ok(obj)
    });
    match made {
        Ok(obj) => PyErr::from_value(obj),
        Err(err) => err,
    }
}

/// Converts an `idmint-embed` result, raising its error.
trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, Error> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| raise(py, e))
    }
}

/// An aware UTC `datetime` for `ms` milliseconds since the Unix epoch, made
/// exactly: `datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)`.
fn utc_datetime(py: Python<'_>, ms: i64) -> PyResult<Py<PyAny>> {
    let datetime = py.import("datetime")?;
    let utc = datetime.getattr("timezone")?.getattr("utc")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("tzinfo", utc)?;
    let epoch = datetime
        .getattr("datetime")?
        .call((1970, 1, 1), Some(&kwargs))?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("milliseconds", ms)?;
    let delta = datetime.getattr("timedelta")?.call((), Some(&kwargs))?;
    Ok(epoch.add(delta)?.unbind())
}

/// Milliseconds since the Unix epoch of an aware `datetime` (exact: whole
/// milliseconds of `dt - epoch`).
fn datetime_ms(py: Python<'_>, dt: &Bound<'_, PyAny>) -> PyResult<i64> {
    let datetime = py.import("datetime")?;
    if dt.getattr("tzinfo")?.is_none() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "time must be an aware datetime (with a tzinfo, e.g. timezone.utc)",
        ));
    }
    let utc = datetime.getattr("timezone")?.getattr("utc")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("tzinfo", utc)?;
    let epoch = datetime
        .getattr("datetime")?
        .call((1970, 1, 1), Some(&kwargs))?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("milliseconds", 1)?;
    let ms = datetime.getattr("timedelta")?.call((), Some(&kwargs))?;
    dt.sub(epoch)?.floor_div(ms)?.extract()
}

// ---- Layout ----

/// A layout, from the text form the CLI and config take: `Layout("twitter")`,
/// `Layout("baidu,epoch=2024-01-01")`, `Layout("time=41,unit=1ms,...")`.
#[pyclass(module = "idmint", frozen)]
struct Layout {
    inner: idmint_embed::Layout,
}

#[pymethods]
impl Layout {
    #[new]
    fn new(py: Python<'_>, text: &str) -> PyResult<Layout> {
        Ok(Layout {
            inner: idmint_embed::Layout::parse(text).or_raise(py)?,
        })
    }

    /// Takes an ID apart: `.time` (aware UTC datetime, the start of its
    /// tick), `.tick`, `.datacenter`, `.worker`, `.rollback`, `.sequence`.
    fn decode(&self, py: Python<'_>, id: u64) -> PyResult<Decoded> {
        let d = self.inner.decode(id).or_raise(py)?;
        Ok(Decoded {
            id: d.id.get(),
            time_ms: d.time.as_millisecond(),
            tick: d.tick,
            datacenter: d.datacenter,
            worker: d.worker,
            rollback: d.rollback,
            sequence: d.sequence,
        })
    }

    /// Puts an ID together: from `time` (an aware datetime) or `tick`, and
    /// the node parts and sequence.
    #[pyo3(signature = (*, time=None, tick=None, datacenter=0, worker=0, sequence=0, rollback=0))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn compose(
        &self,
        py: Python<'_>,
        time: Option<&Bound<'_, PyAny>>,
        tick: Option<u64>,
        datacenter: u32,
        worker: u32,
        sequence: u32,
        rollback: u32,
    ) -> PyResult<u64> {
        let tick = match (time, tick) {
            (Some(_), Some(_)) => {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "give time or tick, not both",
                ));
            }
            (Some(time), None) => {
                let ms = datetime_ms(py, time)?;
                let ts = idmint_embed::Timestamp::from_millisecond(ms)
                    .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
                self.inner.tick_at(ts).or_raise(py)?
            }
            (None, Some(tick)) => tick,
            (None, None) => {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "give time (an aware datetime) or tick",
                ));
            }
        };
        self.inner
            .compose(IdParts {
                tick,
                datacenter,
                worker,
                rollback,
                sequence,
            })
            .or_raise(py)
    }

    /// The first instant the layout can't hold (aware UTC datetime), or
    /// None past the year 9999.
    #[getter]
    fn runs_out_at(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.inner
            .runs_out_at()
            .map(|t| utc_datetime(py, t.as_millisecond()))
            .transpose()
    }

    /// The preset's name (`twitter`, ...), or None for a custom layout.
    #[getter]
    fn preset(&self) -> Option<&'static str> {
        self.inner.preset_name()
    }

    /// IDs per second one worker can make.
    #[getter]
    fn ids_per_second_per_worker(&self) -> f64 {
        self.inner.ids_per_second_per_worker()
    }

    /// Worker IDs the node field holds.
    #[getter]
    fn workers(&self) -> u64 {
        self.inner.workers()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "Layout({:?})",
            self.inner
                .preset_name()
                .map_or_else(|| self.inner.to_string(), str::to_owned)
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Layout>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }
}

/// An ID taken apart by `Layout.decode`.
#[pyclass(module = "idmint", frozen, get_all)]
struct Decoded {
    /// The ID.
    id: u64,
    /// Milliseconds since the Unix epoch of the start of its tick.
    #[pyo3(name = "timestamp_ms")]
    time_ms: i64,
    /// Time units since the layout's epoch.
    tick: u64,
    datacenter: u32,
    worker: u32,
    rollback: u32,
    sequence: u32,
}

#[pymethods]
impl Decoded {
    /// The start of the ID's tick, an aware UTC datetime.
    #[getter]
    fn time(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        utc_datetime(py, self.time_ms)
    }

    fn __repr__(&self) -> String {
        format!(
            "Decoded(id={}, timestamp_ms={}, tick={}, datacenter={}, worker={}, rollback={}, sequence={})",
            self.id,
            self.time_ms,
            self.tick,
            self.datacenter,
            self.worker,
            self.rollback,
            self.sequence
        )
    }
}

// ---- Generator ----

/// Snowflake IDs in this process: `Generator(layout="twitter", worker=7)`
/// with a fixed worker ID, or `Generator.from_config(path)` with one leased
/// from the registry of an `idmint serve` config.
#[pyclass(module = "idmint", frozen, weakref)]
struct Generator {
    inner: idmint_embed::Generator,
    /// Whether a single ID is tried holding the GIL first.
    hold_gil: bool,
}

impl Generator {
    fn wrap(inner: idmint_embed::Generator) -> Generator {
        let hold_gil = inner.max_wait() <= GIL_HOLD_MAX;
        Generator { inner, hold_gil }
    }
}

#[pymethods]
impl Generator {
    #[new]
    // `None` for the layout and the worker is embed's default
    // (`GeneratorOptions::default`: twitter, worker 0).
    #[pyo3(signature = (layout=None, worker=None, *, datacenter=0, clock_behind=None, sequence_exhausted=None, sequence_start=None, wall_clock=false))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn new(
        py: Python<'_>,
        layout: Option<&Bound<'_, PyAny>>,
        worker: Option<u32>,
        datacenter: u32,
        clock_behind: Option<&str>,
        sequence_exhausted: Option<&str>,
        sequence_start: Option<&str>,
        wall_clock: bool,
    ) -> PyResult<Generator> {
        let mut options = GeneratorOptions::default();
        if let Some(l) = layout {
            options = options.with_layout(match l.cast::<Layout>() {
                Ok(l) => l.get().inner,
                Err(_) => idmint_embed::Layout::parse(&l.extract::<String>()?).or_raise(py)?,
            });
        }
        if let Some(worker) = worker {
            options = options.with_worker(worker);
        }
        let options = options
            .with_datacenter(datacenter)
            .with_wall_clock(wall_clock)
            .with_policies(clock_behind, sequence_exhausted, sequence_start)
            .or_raise(py)?;
        Ok(Generator::wrap(
            idmint_embed::Generator::new(options).or_raise(py)?,
        ))
    }

    /// A generator from the `[snowflake]` section of an `idmint serve`
    /// config file (and the `IDMINT_…` environment variables): claims a
    /// worker ID from its registry; returns once IDs can be issued.
    #[staticmethod]
    fn from_config(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Bound<'_, Generator>> {
        let made = py.detach(|| idmint_embed::Generator::from_config(&path));
        Bound::new(py, Generator::wrap(made.or_raise(py)?))
    }

    /// The next ID, an int.
    fn next_id(&self, py: Python<'_>) -> PyResult<u64> {
        if self.hold_gil
            && let Some(id) = self.inner.try_next_id().or_raise(py)?
        {
            return Ok(id);
        }
        let g = &self.inner;
        py.detach(|| g.next_id()).or_raise(py)
    }

    /// `n` IDs in increasing order, a list of ints.
    fn next_ids(&self, py: Python<'_>, n: i128) -> PyResult<Vec<u64>> {
        // Any int, checked by embed as every binding's count (a negative
        // one too, as `invalid_count`).
        let n = idmint_embed::Generator::check_count(n).or_raise(py)?;
        let g = &self.inner;
        py.detach(|| g.next_ids(n as u64)).or_raise(py)
    }

    /// Releases the lease and stops the generator's thread. Idempotent;
    /// later calls raise IdmintError with code "closed".
    fn close(&self, py: Python<'_>) {
        let g = &self.inner;
        py.detach(|| g.close());
    }

    /// The layout IDs are made with.
    #[getter]
    fn layout(&self) -> Layout {
        Layout {
            inner: self.inner.layout(),
        }
    }

    /// The worker ID issued with now.
    #[getter]
    fn worker(&self, py: Python<'_>) -> PyResult<u32> {
        // Off the GIL: in a forked child the first call claims a worker ID.
        let g = &self.inner;
        Ok(py.detach(|| g.status()).or_raise(py)?.worker)
    }

    /// The registry, worker ID, lease state and why it would refuse, as a dict.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = &self.inner;
        let s = py.detach(|| g.status()).or_raise(py)?;
        let d = PyDict::new(py);
        d.set_item("registry", s.registry)?;
        d.set_item("worker", s.worker)?;
        d.set_item("lease", s.lease)?;
        d.set_item("not_ready", s.not_ready)?;
        Ok(d)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        match self.inner.status() {
            Ok(s) => format!(
                "Generator(layout={:?}, registry={:?}, worker={}, lease={:?})",
                self.inner
                    .layout()
                    .preset_name()
                    .map_or_else(|| self.inner.layout().to_string(), str::to_owned),
                s.registry,
                s.worker,
                s.lease
            ),
            Err(e) => format!("Generator({})", e.code()),
        }
    }
}

// ---- Segments ----

/// Segment keys in this process, from the `[segment]` section of an
/// `idmint serve` config: `Segments.from_config(path).next_id("order")`.
#[pyclass(module = "idmint", frozen, weakref)]
struct Segments {
    inner: idmint_embed::Segments,
}

#[pymethods]
impl Segments {
    /// Opens the store, creates the declared keys, starts the preloader.
    /// `floors=True` keeps the server's floor file in `server.data_dir` (one
    /// process per data directory).
    #[staticmethod]
    #[pyo3(signature = (path, *, floors=false))]
    fn from_config(
        py: Python<'_>,
        path: std::path::PathBuf,
        floors: bool,
    ) -> PyResult<Bound<'_, Segments>> {
        let made = py.detach(|| idmint_embed::Segments::from_config_floors(&path, floors));
        let inner = made.or_raise(py)?;
        Bound::new(py, Segments { inner })
    }

    /// The next ID of `key`.
    fn next_id(&self, py: Python<'_>, key: &str) -> PyResult<u64> {
        if let Some(id) = self.inner.try_next_id(key).or_raise(py)? {
            return Ok(id);
        }
        let s = &self.inner;
        py.detach(|| s.next_id(key)).or_raise(py)
    }

    /// `n` IDs of `key` in increasing order.
    fn next_ids(&self, py: Python<'_>, key: &str, n: i128) -> PyResult<Vec<u64>> {
        let n = self.inner.check_count(n).or_raise(py)?;
        let s = &self.inner;
        py.detach(|| s.next_ids(key, n as u64)).or_raise(py)
    }

    /// The most IDs one `next_ids` call takes: the config's
    /// `server.max_count` (default `idmint.DEFAULT_MAX_COUNT`).
    #[getter]
    fn max_count(&self) -> u64 {
        self.inner.max_count()
    }

    /// Stops the preloader and closes the store. Idempotent.
    fn close(&self, py: Python<'_>) {
        let s = &self.inner;
        py.detach(|| s.close());
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }
}

// ---- Public IDs ----

/// Keyed, reversible obfuscation of IDs for the public, and its text forms
/// (`dec`, `base32`, `sqids`), with the settings of `[obfuscation]`.
#[pyclass(module = "idmint", frozen)]
struct PublicIds {
    inner: idmint_embed::PublicIds,
}

#[pymethods]
impl PublicIds {
    #[new]
    // `None` is embed's default for each (`PublicIdsOptions`: 63 bits, no
    // key-ID bits, the last key listed, `dec`), which also checks the range.
    #[pyo3(signature = (key, *, bits=None, key_id_bits=None, active_key=None, format=None))]
    fn new(
        py: Python<'_>,
        key: &str,
        bits: Option<i64>,
        key_id_bits: Option<i64>,
        active_key: Option<i64>,
        format: Option<&str>,
    ) -> PyResult<PublicIds> {
        let mut o = idmint_embed::PublicIdsOptions::new().with_active_key(active_key);
        if let Some(bits) = bits {
            o = o.with_bits(bits);
        }
        if let Some(key_id_bits) = key_id_bits {
            o = o.with_key_id_bits(key_id_bits);
        }
        if let Some(format) = format {
            o = o.with_format(format);
        }
        Ok(PublicIds {
            inner: idmint_embed::PublicIds::with_options(key, &o).or_raise(py)?,
        })
    }

    /// From the `[obfuscation]` section of a config (and `IDMINT_OBFUSCATION_KEY`).
    #[staticmethod]
    fn from_config(py: Python<'_>, path: std::path::PathBuf) -> PyResult<PublicIds> {
        Ok(PublicIds {
            inner: idmint_embed::PublicIds::from_config(&path).or_raise(py)?,
        })
    }

    /// The public ID of `id`.
    fn obfuscate(&self, py: Python<'_>, id: u64) -> PyResult<u64> {
        self.inner.obfuscate(id).or_raise(py)
    }

    /// The ID behind a public ID.
    fn reveal(&self, py: Python<'_>, public: u64) -> PyResult<u64> {
        self.inner.reveal(public).or_raise(py)
    }

    /// A public ID in the text form.
    fn encode(&self, py: Python<'_>, public: u64) -> PyResult<String> {
        self.inner.encode(public).or_raise(py)
    }

    /// The public ID a text reads as.
    fn decode(&self, py: Python<'_>, text: &str) -> PyResult<u64> {
        self.inner.decode(text).or_raise(py)
    }

    /// The public ID of `id`, as text.
    fn obfuscate_text(&self, py: Python<'_>, id: u64) -> PyResult<String> {
        self.inner.obfuscate_text(id).or_raise(py)
    }

    /// The ID behind a public ID's text.
    fn reveal_text(&self, py: Python<'_>, text: &str) -> PyResult<u64> {
        self.inner.reveal_text(text).or_raise(py)
    }

    /// `dec`, `base32` or `sqids`.
    #[getter]
    fn format(&self) -> &'static str {
        self.inner.format()
    }

    /// The width of public IDs in bits.
    #[getter]
    fn bits(&self) -> u8 {
        self.inner.bits()
    }
}

/// Closes every generator and allocator still open in this process
/// (`idmint_embed::close_all`): the package registers it with `atexit`, so
/// leases are released at exit rather than when they run out.
#[pyfunction]
fn _close_all(py: Python<'_>) {
    py.detach(idmint_embed::close_all);
}

/// Tells the library this process is a child just forked: nothing made
/// before the fork issues from the parent's worker ID or segments.
/// `idmint/__init__.py` registers it with `os.register_at_fork`.
#[pyfunction]
fn _after_fork_in_child() {
    idmint_embed::after_fork_in_child();
}

/// The extension module.
#[pymodule]
fn _idmint(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("IdmintError", m.py().get_type::<IdmintError>())?;
    m.add_class::<Layout>()?;
    m.add_class::<Decoded>()?;
    m.add_class::<Generator>()?;
    m.add_class::<Segments>()?;
    m.add_class::<PublicIds>()?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(_close_all, m)?)?;
    // The limits, as the embedded layer decides them (the README states
    // them; a test checks that it says these numbers).
    m.add("MAX_BATCH", idmint_embed::MAX_BATCH)?;
    m.add(
        "DEFAULT_MAX_COUNT",
        idmint_embed::Segments::default_max_count(),
    )?;
    Ok(())
}
