//! `dlock._dlock`: the native half of the Python package. It runs the Rust client (and so the
//! one engine) on a tokio runtime of its own (see `runtime.rs`: a blocking call drives it on
//! the caller's thread) and offers blocking calls (GIL released, Ctrl-C honoured) and
//! callback-based calls for asyncio. The Pythonic API is in
//! `python/dlock/`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod engine;
mod runtime;

use runtime::Runtime;

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyTuple, PyType};

/// The forks between the process that loaded this module and this one: `dlock/__init__.py`
/// registers [`_forked`] with `os.register_at_fork`. A runtime or a client made at another
/// count belongs to an ancestor. (Counted, where `getpid` was a system call on every call.)
static FORKS: AtomicU64 = AtomicU64::new(0);

/// Runs in a forked child (`os.register_at_fork(after_in_child=…)`), before anything else.
#[pyfunction]
fn _forked() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

/// The process's runtime. A forked child gets a new one: the parent's threads do not exist in
/// the child, so its runtime must never be used (or dropped) there.
fn runtime() -> PyResult<Arc<Runtime>> {
    static RUNTIME: Mutex<Option<(u64, Arc<Runtime>)>> = Mutex::new(None);
    let forks = FORKS.load(Ordering::SeqCst);
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((made, rt)) = slot.as_ref()
        && *made == forks
    {
        return Ok(rt.clone());
    }
    // Inherited from a parent process: leak it rather than join threads that are not there.
    // No call of the parent's is under way here either (only the forking thread lives on).
    std::mem::forget(slot.take());
    let rt = Runtime::start()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the dlock runtime: {e}")))?;
    *slot = Some((forks, rt.clone()));
    Ok(rt)
}

/// The Python exception for a dlock error: the class `dlock.errors` maps its code to.
fn to_py(py: Python<'_>, e: &dlock::Error) -> PyErr {
    raise(py, e.code(), e.to_string())
}

/// An exception of the class `dlock.errors.BY_CODE[code]`, with `code` set on it.
pub(crate) fn raise(py: Python<'_>, code: dlock::ErrorCode, message: String) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let class = py
            .import("dlock.errors")?
            .getattr("BY_CODE")?
            .get_item(code.as_str())?;
        let class = class.cast_into::<PyType>()?;
        let err = PyErr::from_type(class, message);
        err.value(py).setattr("code", code.as_str())?;
        Ok(err)
    })();
    made.unwrap_or_else(|err| err)
}

/// The caller's mistake, as `InvalidArgument`.
pub(crate) fn invalid(py: Python<'_>, message: String) -> PyErr {
    raise(py, dlock::ErrorCode::InvalidArgument, message)
}

/// Seconds (a Python float) as a duration, checked by the Rust crate.
fn seconds(py: Python<'_>, what: &str, s: f64) -> PyResult<Duration> {
    dlock::spec::duration(what, s, dlock::spec::Unit::Seconds).map_err(|e| to_py(py, &e))
}

fn optional_seconds(py: Python<'_>, what: &str, s: Option<f64>) -> PyResult<Option<Duration>> {
    s.map(|s| seconds(py, what, s)).transpose()
}

/// Runs `fut` to completion with the GIL released, raising KeyboardInterrupt (and dropping
/// the future, which cancels what it was doing) when a signal handler says so. The signals
/// are looked at on the runtime's signal ticks, not at once: the caller has just left
/// Python, and taking the GIL back at once would cost every call a switch. The thread steps
/// out of the runtime to take the GIL: the runtime never waits for Python, so renewals go on
/// while another thread holds the GIL.
fn block_on<T: Send + 'static>(py: Python<'_>, fut: impl Future<Output = T> + Send) -> PyResult<T> {
    let rt = runtime()?;
    py.detach(move || {
        tokio::pin!(fut);
        loop {
            let done = rt.block_on(async {
                tokio::select! {
                    out = &mut fut => Some(out),
                    () = rt.tick.notified() => None,
                }
            });
            match done {
                Some(out) => return Ok(out),
                None => Python::attach(|py| py.check_signals())?,
            }
        }
    })
}

/// Set at interpreter exit: runtime threads must not enter Python any more.
static FINALIZING: AtomicBool = AtomicBool::new(false);
/// Runtime threads inside Python right now (calling a callback).
static IN_PYTHON: AtomicUsize = AtomicUsize::new(0);

/// Registered with `atexit` by `dlock/__init__.py`: from now on callbacks are dropped, and
/// the ones under way finish before the interpreter goes (a runtime thread still inside
/// Python during finalization would abort the process).
#[pyfunction]
fn _shutdown(py: Python<'_>) {
    FINALIZING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while IN_PYTHON.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// What a finished call gives Python: its value, made into a Python object once the GIL is
/// held, or the dlock error.
type Outcome =
    Result<Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Py<PyAny>> + Send>, dlock::Error>;

/// A native call, not started yet. Every native operation returns one, and each API runs it
/// its own way: `dlock` with `wait()` (blocking, GIL released, Ctrl-C honoured), `dlock.aio`
/// with `then(callback)` (on the runtime; the callback gets `(ok, value)` from a runtime
/// thread). One implementation per operation serves both.
#[pyclass(frozen, module = "dlock._dlock")]
struct Call {
    future: Mutex<Option<Pin<Box<dyn Future<Output = Outcome> + Send>>>>,
}

impl Call {
    fn new<T, F>(future: F) -> Self
    where
        F: Future<Output = Result<T, dlock::Error>> + Send + 'static,
        T: for<'py> IntoPyObject<'py> + Send + 'static,
    {
        let future = async move {
            let value = future.await?;
            let convert = move |py: Python<'_>| value.into_py_any(py);
            Ok(Box::new(convert)
                as Box<
                    dyn for<'py> FnOnce(Python<'py>) -> PyResult<Py<PyAny>> + Send,
                >)
        };
        Call {
            future: Mutex::new(Some(Box::pin(future))),
        }
    }

    fn take(&self) -> PyResult<Pin<Box<dyn Future<Output = Outcome> + Send>>> {
        let taken = self.future.lock().unwrap_or_else(|e| e.into_inner()).take();
        taken.ok_or_else(|| PyRuntimeError::new_err("this call was run already"))
    }
}

#[pymethods]
impl Call {
    /// Runs the call and blocks for its outcome; the GIL is released meanwhile.
    fn wait(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let future = self.take()?;
        match block_on(py, future)? {
            Ok(convert) => convert(py),
            Err(e) => Err(to_py(py, &e)),
        }
    }

    /// Runs the call on the runtime and calls `callback(ok, value)` with its outcome from a
    /// thread of the runtime's blocking pool (the runtime itself never waits for the GIL);
    /// the returned task's `cancel()` drops it (a waiting acquire leaves the queue).
    fn then(&self, callback: Py<PyAny>) -> PyResult<Task> {
        let future = self.take()?;
        let handle = runtime()?.spawn(async move {
            let out = future.await;
            tokio::task::spawn_blocking(move || call_back(callback, out));
        });
        Ok(Task {
            handle: handle.abort_handle(),
        })
    }
}

/// Calls `callback(ok, value)` with a call's outcome, taking the GIL (off the runtime).
fn call_back(callback: Py<PyAny>, out: Outcome) {
    // Counted before the check, so that _shutdown either sees us or we see it.
    IN_PYTHON.fetch_add(1, Ordering::SeqCst);
    if FINALIZING.load(Ordering::SeqCst) {
        IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
        std::mem::forget(callback); // no GIL to drop it with
        std::mem::forget(out);
        return;
    }
    Python::attach(|py| {
        let called = match out
            .map_err(|e| to_py(py, &e))
            .and_then(|convert| convert(py))
        {
            Ok(value) => callback.call1(py, (true, value)),
            Err(e) => callback.call1(py, (false, e.into_value(py))),
        };
        if let Err(e) = called {
            e.write_unraisable(py, None);
        }
        drop(callback);
    });
    IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
}

/// A call under way for asyncio; `cancel()` drops it (a waiting acquire leaves the queue).
#[pyclass(frozen, module = "dlock._dlock")]
struct Task {
    handle: tokio::task::AbortHandle,
}

#[pymethods]
impl Task {
    fn cancel(&self) {
        self.handle.abort();
    }
}

/// A fresh owner id: each Python `Lock` object is one owner per thread (or task).
#[pyfunction]
fn new_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The URL as it may be shown: without its password.
#[pyfunction]
fn redact(url: &str) -> String {
    dlock::redact(url)
}

/// The fenced update of one row (`dlock::fenced_update_sql`), with the driver's placeholder
/// style: `numbered`, `question` or `format`.
#[pyfunction]
fn fenced_update_sql(
    py: Python<'_>,
    table: &str,
    key: Vec<String>,
    values: Vec<String>,
    fence_column: &str,
    placeholder: &str,
) -> PyResult<String> {
    let key: Vec<&str> = key.iter().map(String::as_str).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    dlock::Placeholder::parse(placeholder)
        .and_then(|p| dlock::fenced_update_sql(table, &key, &values, fence_column, p))
        .map_err(|e| to_py(py, &e))
}

/// How to connect, as `dlock.connect` passes it.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct ConnectOptions {
    waiter_lease: Option<f64>,
    request_timeout: Option<f64>,
    lock_delay: Option<f64>,
}

/// What to acquire, as `dlock`'s lock objects pass it (`dlock._api.Spec`): `(name, names,
/// permits, rw, lease, wait, max_hold, owner, fair, compat)`, with `name` (and `permits` for
/// a semaphore's permit, `rw` for a read-write lock's hold) or `names` (a multi-lock). A
/// tuple: it is built and read on every acquire, and a dict of the same took several times
/// as long on both sides.
type Spec = (
    Option<String>,
    Option<Vec<String>>,
    Option<i128>,
    Option<String>,
    f64,
    Option<f64>,
    Option<f64>,
    Option<u64>,
    bool,
    Option<String>,
);

/// The Rust crate's spec of `spec`, checked.
fn lock_spec(py: Python<'_>, spec: Spec) -> PyResult<dlock::LockSpec> {
    let (name, names, permits, rw, lease, wait, max_hold, owner, fair, compat) = spec;
    let rust = |e: dlock::Error| to_py(py, &e);
    let permits = permits
        .map(dlock::spec::permits)
        .transpose()
        .map_err(rust)?;
    let mut spec = dlock::LockSpec::target(name, names, permits, rw.as_deref()).map_err(rust)?;
    spec.lease = seconds(py, "lease", lease)?;
    spec.wait = optional_seconds(py, "wait", wait)?;
    spec.max_hold = optional_seconds(py, "max_hold", max_hold)?;
    spec.owner = owner;
    spec.fair = fair;
    spec.compat(compat.as_deref()).map_err(rust)?;
    Ok(spec)
}

#[pyclass(frozen, module = "dlock._dlock")]
struct NativeClient {
    client: Mutex<Option<dlock::Client>>,
    /// [`FORKS`] when it connected.
    forks: u64,
}

impl NativeClient {
    fn client(&self, py: Python<'_>) -> PyResult<dlock::Client> {
        if self.forks != FORKS.load(Ordering::SeqCst) {
            return Err(raise(
                py,
                dlock::ErrorCode::Closed,
                "this client was created in another process (before a fork): connect again".into(),
            ));
        }
        let client = self
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        client.ok_or_else(|| to_py(py, &dlock::Error::Closed))
    }
}

#[pymethods]
impl NativeClient {
    /// Connects to `url` with `options` (a dict of the `dlock.connect` keywords).
    #[staticmethod]
    fn connect(py: Python<'_>, url: &str, options: ConnectOptions) -> PyResult<Call> {
        let mut b = dlock::Client::builder(url);
        if let Some(d) = optional_seconds(py, "waiter_lease", options.waiter_lease)? {
            b = b.waiter_lease(d);
        }
        if let Some(d) = optional_seconds(py, "request_timeout", options.request_timeout)? {
            b = b.request_timeout(d);
        }
        if let Some(d) = optional_seconds(py, "lock_delay", options.lock_delay)? {
            b = b.lock_delay(d);
        }
        Ok(Call::new(async move {
            let client = b.connect().await?;
            Ok(NativeClient {
                client: Mutex::new(Some(client)),
                forks: FORKS.load(Ordering::SeqCst),
            })
        }))
    }

    /// Waits for what `spec` names, up to its `wait` (`LockTimeout` when it runs out).
    fn acquire(&self, py: Python<'_>, spec: Spec) -> PyResult<Call> {
        let (client, spec) = (self.client(py)?, lock_spec(py, spec)?);
        Ok(Call::new(async move {
            let held = spec.acquire(&client).await?;
            Ok(NativeHeld { held, lead: None })
        }))
    }

    /// Takes what `spec` names if it is free now; None if not.
    fn try_acquire(&self, py: Python<'_>, spec: Spec) -> PyResult<Call> {
        let (client, spec) = (self.client(py)?, lock_spec(py, spec)?);
        Ok(Call::new(async move {
            let held = spec.try_acquire(&client).await?;
            Ok(held.map(|held| NativeHeld { held, lead: None }))
        }))
    }

    /// `(owner, count, fencing_token, ttl, latest_token, waiters)` of a lock.
    fn status(&self, py: Python<'_>, name: String) -> PyResult<Call> {
        let client = self.client(py)?;
        Ok(Call::new(async move {
            let s = client.status(&name).await?;
            let ttl = s.ttl.map(|t| t.as_secs_f64());
            Ok((
                s.owner,
                s.count,
                s.fencing_token,
                ttl,
                s.latest_token,
                s.waiters,
            ))
        }))
    }

    /// What the client's engine counted, per lock name and kind: `{"locks": [...]}`
    /// (`dlock::json::stats_to_json`).
    fn stats(&self, py: Python<'_>) -> PyResult<Call> {
        let client = self.client(py)?;
        Ok(Call::new(async move {
            let stats = client.stats().await?;
            Ok(engine::PyJson(dlock::json::stats_to_json(&stats)))
        }))
    }

    /// The fenced write: True if `value` was stored under `token`, False if refused as stale.
    fn fenced_write(
        &self,
        py: Python<'_>,
        resource: String,
        token: &Bound<'_, PyAny>,
        value: String,
    ) -> PyResult<Call> {
        // An int (not a bool, which Python counts as one); beyond 128 bits it is out of range
        // anyway, and the crate's check says so.
        let number = match token.cast::<PyBool>() {
            Ok(_) => None,
            Err(_) => token
                .extract::<i128>()
                .ok()
                .or_else(|| token.is_instance_of::<PyInt>().then_some(i128::MAX)),
        };
        let number =
            number.ok_or_else(|| invalid(py, format!("a fencing token is an int, not {token}")))?;
        let token = dlock::spec::fencing_token(number).map_err(|e| to_py(py, &e))?;
        let client = self.client(py)?;
        Ok(Call::new(async move {
            let outcome = client.fenced_write(&resource, token, &value).await?;
            Ok(outcome == dlock::FencedWrite::Written)
        }))
    }

    /// Waits to lead election `name` (up to `wait` seconds), then publishes `value`.
    #[pyo3(signature = (name, value, lease, wait=None))]
    fn campaign(
        &self,
        py: Python<'_>,
        name: String,
        value: String,
        lease: f64,
        wait: Option<f64>,
    ) -> PyResult<Call> {
        let mut election = self.client(py)?.election(name);
        election = election.lease(seconds(py, "lease", lease)?);
        if let Some(wait) = optional_seconds(py, "wait", wait)? {
            election = election.wait(wait);
        }
        Ok(Call::new(async move {
            let lead = election.campaign(value).await?;
            Ok(NativeHeld {
                held: lead.guard().clone(),
                lead: Some(lead),
            })
        }))
    }

    /// `(term, value)` of election `name`'s leader, None if nobody leads.
    fn leader(&self, py: Python<'_>, name: String) -> PyResult<Call> {
        let election = self.client(py)?.election(name);
        Ok(Call::new(async move {
            Ok(election.leader().await?.map(|l| (l.term, l.value)))
        }))
    }

    /// Follows election `name`'s leader: see `NativeObserver`.
    fn observe(&self, py: Python<'_>, name: String) -> PyResult<NativeObserver> {
        let observer = self.client(py)?.election(name).observe();
        let observer = observer.map_err(|e| to_py(py, &e))?;
        Ok(NativeObserver {
            observer: Arc::new(tokio::sync::Mutex::new(Some(observer))),
        })
    }

    /// Stops taking calls. Held locks stay held until released.
    fn close(&self) {
        self.client.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The client's 128-bit id in hex; its owner tokens start with it.
    #[getter]
    fn id(&self) -> String {
        let client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        client
            .as_ref()
            .map(|c| format!("{:032x}", c.id().0))
            .unwrap_or_default()
    }
}

/// A held lock, or the lock of an election's leadership. Safe to use from any thread;
/// released (resigned) once.
#[pyclass(frozen, module = "dlock._dlock")]
struct NativeHeld {
    held: dlock::SharedGuard,
    /// The leadership whose lock this is.
    lead: Option<dlock::Leadership>,
}

#[pymethods]
impl NativeHeld {
    #[getter]
    fn name(&self) -> &str {
        self.held.name()
    }

    #[getter]
    fn fencing_token(&self) -> u64 {
        self.held.fencing_token()
    }

    /// Each lock's `(name, fencing_token)`: one, or a multi-lock's in canonical order.
    #[getter]
    fn members(&self) -> Vec<(String, u64)> {
        let members = self.held.members().iter();
        members.map(|m| (m.name.clone(), m.fencing_token)).collect()
    }

    /// One of `LOST_REASONS` once lost, else None.
    #[getter]
    fn lost_reason(&self) -> Option<&'static str> {
        self.held.lost_signal().reason().map(|r| r.as_str())
    }

    /// True while this object still holds the lock (not released, not lost).
    #[getter]
    fn held(&self) -> bool {
        self.held.is_held()
    }

    /// Seconds left of the local validity (0 once it has passed).
    #[getter]
    fn valid_for(&self) -> f64 {
        let until = self.held.valid_until();
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        left.as_secs_f64()
    }

    fn release(&self) -> Call {
        let held = self.held.clone();
        Call::new(async move { held.release().await })
    }

    /// Publishes `value` under the same term (a leadership's only).
    fn proclaim(&self, py: Python<'_>, value: String) -> PyResult<Call> {
        let lead = self
            .lead
            .clone()
            .ok_or_else(|| invalid(py, "only a leadership proclaims".into()))?;
        Ok(Call::new(async move { lead.proclaim(value).await }))
    }

    fn extend(&self, py: Python<'_>, lease: f64) -> PyResult<Call> {
        let (lease, held) = (seconds(py, "lease", lease)?, self.held.clone());
        Ok(Call::new(async move { held.extend(lease).await }))
    }

    /// Until the lock is lost (its reason), released or `timeout` passes (None).
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Call> {
        let timeout = optional_seconds(py, "timeout", timeout)?;
        let lost = self.held.lost_signal().clone();
        Ok(Call::new(async move {
            let wait = lost.wait();
            let reason = match timeout {
                Some(t) => tokio::time::timeout(t, wait).await.ok().flatten(),
                None => wait.await,
            };
            Ok(reason.map(|r| r.as_str()))
        }))
    }
}

/// The changes of an election's leader, one `next()` at a time.
#[pyclass(frozen, module = "dlock._dlock")]
struct NativeObserver {
    observer: Arc<tokio::sync::Mutex<Option<dlock::Observer>>>,
}

#[pymethods]
impl NativeObserver {
    /// The next change: `(term, value)`, or None once nobody leads. Raises `ClientClosed`
    /// once closed.
    fn next(&self) -> Call {
        let observer = self.observer.clone();
        Call::new(async move {
            let mut observer = observer.lock().await;
            let change = match observer.as_mut() {
                Some(o) => o.changed().await?,
                None => return Err(dlock::Error::Closed),
            };
            Ok(change.map(|l| (l.term, l.value)))
        })
    }

    /// Stops observing (a `next()` under way ends with `ClientClosed`).
    fn close(&self) {
        if let Ok(mut observer) = self.observer.try_lock() {
            observer.take();
        } else {
            // A next() is under way: it ends when the observer goes, after it.
            let observer = self.observer.clone();
            if let Ok(rt) = runtime() {
                rt.spawn(async move { observer.lock().await.take() });
            }
        }
    }
}

#[pymodule(name = "_dlock")]
fn dlock_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<engine::Engine>()?;
    m.add_class::<NativeClient>()?;
    m.add_class::<NativeHeld>()?;
    m.add_class::<NativeObserver>()?;
    m.add_class::<Call>()?;
    m.add_class::<Task>()?;
    m.add_function(wrap_pyfunction!(new_owner, m)?)?;
    m.add_function(wrap_pyfunction!(redact, m)?)?;
    m.add_function(wrap_pyfunction!(fenced_update_sql, m)?)?;
    let reasons = dlock::LostReason::ALL.iter().map(|r| r.as_str());
    m.add("LOST_REASONS", PyTuple::new(m.py(), reasons)?)?;
    let codes = dlock::ErrorCode::ALL.iter().map(|c| c.as_str());
    m.add("ERROR_CODES", PyTuple::new(m.py(), codes)?)?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(_forked, m)?)?;
    m.add("DEFAULT_LEASE", dlock::DEFAULT_LEASE.as_secs_f64())?;
    // The metric names every host exports (dlock::prometheus): (field, name, help) each.
    use dlock::prometheus::{COUNTERS, GAUGES, HISTOGRAMS, LOST};
    m.add("METRIC_COUNTERS", COUNTERS.to_vec())?;
    m.add("METRIC_LOST", LOST)?;
    m.add("METRIC_GAUGES", GAUGES.to_vec())?;
    m.add("METRIC_HISTOGRAMS", HISTOGRAMS.to_vec())?;
    Ok(())
}
