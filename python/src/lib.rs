//! `dlock._dlock`: the native half of the Python package. It runs the Rust client (and so the
//! one engine) on a tokio runtime of its own and offers blocking calls (GIL released,
//! Ctrl-C honoured) and callback-based calls for asyncio. The Pythonic API is in
//! `python/dlock/`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod engine;

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

/// The process's runtime. A forked child gets a new one: the parent's worker threads do not
/// exist in the child, so its runtime must never be used (or dropped) there.
fn runtime() -> PyResult<Arc<tokio::runtime::Runtime>> {
    static RUNTIME: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, rt)) = slot.as_ref()
        && *owner == pid
    {
        return Ok(rt.clone());
    }
    // Inherited from a parent process: leak it rather than join threads that are not there.
    std::mem::forget(slot.take());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("dlock")
        .enable_all()
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the dlock runtime: {e}")))?;
    let rt = Arc::new(rt);
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}

/// The Python exception for a dlock error (classes live in `dlock.errors`).
fn to_py(py: Python<'_>, e: &dlock::Error) -> PyErr {
    use dlock::Error as E;
    let class = match e {
        E::WaitTimedOut => "LockTimeout",
        E::Lost(_) => "LockLost",
        E::Engine(dlock_core::Error::LockLost { .. }) => "LockLost",
        E::Engine(dlock_core::Error::NotHeld { .. }) => "NotHeld",
        e if e.is_misuse() && !matches!(e, E::Closed) => "InvalidArgument",
        e if e.is_backend() || e.is_timeout() => "BackendError",
        _ => "DlockError",
    };
    error_class(py, class, e.to_string())
}

fn error_class(py: Python<'_>, class: &str, message: String) -> PyErr {
    let ty = py
        .import("dlock.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| Ok(c.cast_into::<PyType>()?));
    match ty {
        Ok(ty) => PyErr::from_type(ty, message),
        Err(err) => err,
    }
}

/// Seconds (a Python float) as a duration; negative, NaN or infinite is refused here, zero
/// and out-of-range leases by the engine.
fn seconds(py: Python<'_>, what: &str, s: f64) -> PyResult<Duration> {
    if !s.is_finite() || s < 0.0 {
        return Err(error_class(
            py,
            "InvalidArgument",
            format!("{what} must be a finite number of seconds >= 0, got {s}"),
        ));
    }
    Duration::try_from_secs_f64(s)
        .map_err(|e| error_class(py, "InvalidArgument", format!("{what}: {e}")))
}

/// A semaphore's number of permits from Python; the engine checks its range.
fn permit_count(py: Python<'_>, n: i64) -> PyResult<u32> {
    u32::try_from(n).map_err(|_| {
        error_class(
            py,
            "InvalidArgument",
            format!(
                "a semaphore has 1 to {} permits, not {n}",
                dlock_core::MAX_PERMITS
            ),
        )
    })
}

fn optional_seconds(py: Python<'_>, what: &str, s: Option<f64>) -> PyResult<Option<Duration>> {
    s.map(|s| seconds(py, what, s)).transpose()
}

/// Runs `fut` to completion with the GIL released, raising KeyboardInterrupt (and dropping
/// the future, which cancels what it was doing) when a signal handler says so.
fn block_on<T: Send + 'static>(py: Python<'_>, fut: impl Future<Output = T> + Send) -> PyResult<T> {
    let rt = runtime()?;
    py.detach(move || {
        rt.block_on(async move {
            tokio::pin!(fut);
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tokio::select! {
                    out = &mut fut => return Ok(out),
                    _ = tick.tick() => Python::attach(|py| py.check_signals())?,
                }
            }
        })
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

/// Runs `fut` on the runtime and calls `callback(ok, value)` with its outcome from a runtime
/// thread (asyncio passes `loop.call_soon_threadsafe`-based callbacks).
fn spawn<T, F>(callback: Py<PyAny>, fut: F) -> PyResult<Task>
where
    F: Future<Output = Result<T, dlock::Error>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    let handle = runtime()?.spawn(async move {
        let out = fut.await;
        // Counted before the check, so that _shutdown either sees us or we see it.
        IN_PYTHON.fetch_add(1, Ordering::SeqCst);
        if FINALIZING.load(Ordering::SeqCst) {
            IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
            std::mem::forget(callback); // no GIL to drop it with
            std::mem::forget(out);
            return;
        }
        Python::attach(|py| {
            let called = match out {
                Ok(value) => value
                    .into_py_any(py)
                    .and_then(|v| callback.call1(py, (true, v))),
                Err(e) => callback.call1(py, (false, to_py(py, &e).into_value(py))),
            };
            if let Err(e) = called {
                e.write_unraisable(py, None);
            }
            drop(callback);
        });
        IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
    });
    Ok(Task {
        handle: handle.abort_handle(),
    })
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

/// A fresh owner id: each Python `Lock` object is one owner (acquiring it again while it
/// holds is reentrant).
#[pyfunction]
fn new_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[pyclass(frozen, module = "dlock._dlock")]
struct NativeClient {
    client: Mutex<Option<dlock::Client>>,
    pid: u32,
}

impl NativeClient {
    fn client(&self, py: Python<'_>) -> PyResult<dlock::Client> {
        if self.pid != std::process::id() {
            return Err(error_class(
                py,
                "DlockError",
                "this client was created in another process (before a fork): connect again".into(),
            ));
        }
        self.client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| error_class(py, "DlockError", "the client is closed".into()))
    }
}

fn builder(
    py: Python<'_>,
    url: &str,
    waiter_lease: Option<f64>,
    request_timeout: Option<f64>,
    lock_delay: Option<f64>,
) -> PyResult<dlock::ClientBuilder> {
    let mut b = dlock::Client::builder(url);
    if let Some(d) = optional_seconds(py, "waiter_lease", waiter_lease)? {
        b = b.waiter_lease(d);
    }
    if let Some(d) = optional_seconds(py, "request_timeout", request_timeout)? {
        b = b.request_timeout(d);
    }
    if let Some(d) = optional_seconds(py, "lock_delay", lock_delay)? {
        b = b.lock_delay(d);
    }
    Ok(b)
}

fn native_client(client: dlock::Client) -> NativeClient {
    NativeClient {
        client: Mutex::new(Some(client)),
        pid: std::process::id(),
    }
}

/// What an acquire is asked to do, checked before anything is sent.
struct Spec {
    lock: Either,
    wait: Option<Duration>,
}

/// One lock, or several as one.
enum Either {
    One(dlock::LockBuilder),
    Many(dlock::MultiLockBuilder),
}

impl Spec {
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: dlock::Client,
        name: String,
        owner: u64,
        lease: f64,
        wait: Option<f64>,
        max_hold: Option<f64>,
        fair: bool,
        permits: Option<i64>,
        rw: Option<&str>,
    ) -> PyResult<Self> {
        let lock = match (permits, rw) {
            (None, None) => client.lock(name).owner(owner),
            (Some(n), None) => client.semaphore(name, permit_count(py, n)?),
            (None, Some("read")) => client.rw_lock(name).owner(owner).read(),
            (None, Some("write")) => client.rw_lock(name).owner(owner).write(),
            _ => {
                return Err(error_class(
                    py,
                    "InvalidArgument",
                    format!("rw must be 'read' or 'write', without permits; got {rw:?}"),
                ));
            }
        };
        let mut lock = lock.fair(fair).lease(seconds(py, "lease", lease)?);
        if let Some(m) = optional_seconds(py, "max_hold", max_hold)? {
            lock = lock.max_hold(m);
        }
        let wait = optional_seconds(py, "wait", wait)?;
        Ok(Spec {
            lock: Either::One(lock),
            wait,
        })
    }

    fn multi(
        py: Python<'_>,
        client: dlock::Client,
        names: Vec<String>,
        lease: f64,
        wait: Option<f64>,
        max_hold: Option<f64>,
    ) -> PyResult<Self> {
        let mut lock = client.multi_lock(names).lease(seconds(py, "lease", lease)?);
        if let Some(m) = optional_seconds(py, "max_hold", max_hold)? {
            lock = lock.max_hold(m);
        }
        let wait = optional_seconds(py, "wait", wait)?;
        Ok(Spec {
            lock: Either::Many(lock),
            wait,
        })
    }

    async fn run(self) -> Result<Option<NativeHeld>, dlock::Error> {
        let held: Option<dlock::SharedGuard> = match self.lock {
            Either::One(lock) => lock.acquire_within(self.wait).await?.map(Into::into),
            Either::Many(lock) => lock.acquire_within(self.wait).await?.map(Into::into),
        };
        Ok(held.map(|held| NativeHeld { held }))
    }
}

#[pymethods]
impl NativeClient {
    #[staticmethod]
    #[pyo3(signature = (url, waiter_lease=None, request_timeout=None, lock_delay=None))]
    fn connect(
        py: Python<'_>,
        url: &str,
        waiter_lease: Option<f64>,
        request_timeout: Option<f64>,
        lock_delay: Option<f64>,
    ) -> PyResult<Self> {
        let b = builder(py, url, waiter_lease, request_timeout, lock_delay)?;
        let client = block_on(py, b.connect())?.map_err(|e| to_py(py, &e))?;
        Ok(native_client(client))
    }

    #[staticmethod]
    #[pyo3(signature = (url, callback, waiter_lease=None, request_timeout=None, lock_delay=None))]
    fn connect_async(
        py: Python<'_>,
        url: &str,
        callback: Py<PyAny>,
        waiter_lease: Option<f64>,
        request_timeout: Option<f64>,
        lock_delay: Option<f64>,
    ) -> PyResult<Task> {
        let b = builder(py, url, waiter_lease, request_timeout, lock_delay)?;
        spawn(
            callback,
            async move { b.connect().await.map(native_client) },
        )
    }

    /// Acquires: `wait=None` waits as long as it takes, `wait=0` tries once (None if busy).
    /// With `permits`: a permit of the semaphore `name`, which has that many; with `rw`
    /// ('read' or 'write'): a hold of the read-write lock `name`.
    #[pyo3(signature = (name, owner, lease, wait=None, max_hold=None, fair=true, permits=None, rw=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        name: String,
        owner: u64,
        lease: f64,
        wait: Option<f64>,
        max_hold: Option<f64>,
        fair: bool,
        permits: Option<i64>,
        rw: Option<&str>,
    ) -> PyResult<Option<NativeHeld>> {
        let spec = Spec::new(
            py,
            self.client(py)?,
            name,
            owner,
            lease,
            wait,
            max_hold,
            fair,
            permits,
            rw,
        )?;
        block_on(py, spec.run())?.map_err(|e| to_py(py, &e))
    }

    #[pyo3(signature = (name, owner, lease, wait, max_hold, fair, permits, rw, callback))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_async(
        &self,
        py: Python<'_>,
        name: String,
        owner: u64,
        lease: f64,
        wait: Option<f64>,
        max_hold: Option<f64>,
        fair: bool,
        permits: Option<i64>,
        rw: Option<&str>,
        callback: Py<PyAny>,
    ) -> PyResult<Task> {
        let spec = Spec::new(
            py,
            self.client(py)?,
            name,
            owner,
            lease,
            wait,
            max_hold,
            fair,
            permits,
            rw,
        )?;
        spawn(callback, spec.run())
    }

    /// Acquires every name as one, all or none; `wait` as for `acquire`.
    #[pyo3(signature = (names, lease, wait=None, max_hold=None))]
    fn acquire_multi(
        &self,
        py: Python<'_>,
        names: Vec<String>,
        lease: f64,
        wait: Option<f64>,
        max_hold: Option<f64>,
    ) -> PyResult<Option<NativeHeld>> {
        let spec = Spec::multi(py, self.client(py)?, names, lease, wait, max_hold)?;
        block_on(py, spec.run())?.map_err(|e| to_py(py, &e))
    }

    #[pyo3(signature = (names, lease, wait, max_hold, callback))]
    fn acquire_multi_async(
        &self,
        py: Python<'_>,
        names: Vec<String>,
        lease: f64,
        wait: Option<f64>,
        max_hold: Option<f64>,
        callback: Py<PyAny>,
    ) -> PyResult<Task> {
        let spec = Spec::multi(py, self.client(py)?, names, lease, wait, max_hold)?;
        spawn(callback, spec.run())
    }

    /// `{owner, count, fencing_token, ttl, latest_token, waiters}` of a lock.
    fn status<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyDict>> {
        let client = self.client(py)?;
        let status =
            block_on(py, async move { client.status(&name).await })?.map_err(|e| to_py(py, &e))?;
        let d = PyDict::new(py);
        d.set_item("owner", status.owner)?;
        d.set_item("count", status.count)?;
        d.set_item("fencing_token", status.fencing_token)?;
        d.set_item("ttl", status.ttl.map(|t| t.as_secs_f64()))?;
        d.set_item("latest_token", status.latest_token)?;
        d.set_item("waiters", status.waiters)?;
        Ok(d)
    }

    /// The fenced write: true if `value` was stored under `token`, false if refused as stale.
    fn fenced_write(
        &self,
        py: Python<'_>,
        resource: String,
        token: u64,
        value: String,
    ) -> PyResult<bool> {
        let client = self.client(py)?;
        let outcome = block_on(py, async move {
            client.fenced_write(&resource, token, &value).await
        })?
        .map_err(|e| to_py(py, &e))?;
        Ok(outcome == dlock::FencedWrite::Written)
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
    fn id(&self) -> PyResult<String> {
        let client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        Ok(client
            .as_ref()
            .map(|c| format!("{:032x}", c.id().0))
            .unwrap_or_default())
    }
}

/// A held lock. Safe to use from any thread; released once.
#[pyclass(frozen, module = "dlock._dlock")]
struct NativeHeld {
    held: dlock::SharedGuard,
}

impl NativeHeld {
    fn lost_future(
        &self,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Option<String>, dlock::Error>> + Send + 'static {
        let lost = self.held.lost_signal().clone();
        async move {
            let wait = lost.wait();
            let reason = match timeout {
                Some(t) => tokio::time::timeout(t, wait).await.ok().flatten(),
                None => wait.await,
            };
            Ok(reason.map(|r| r.as_str().to_owned()))
        }
    }
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

    /// Why the lock was lost (`"expired"`, `"not-owner"`, `"max-hold"`, `"closed"`), or None.
    #[getter]
    fn lost_reason(&self) -> Option<&'static str> {
        self.held.lost_signal().reason().map(|r| r.as_str())
    }

    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let held = self.held.clone();
        block_on(py, async move { held.release().await })?.map_err(|e| to_py(py, &e))
    }

    fn release_async(&self, callback: Py<PyAny>) -> PyResult<Task> {
        let held = self.held.clone();
        spawn(callback, async move { held.release().await })
    }

    fn extend(&self, py: Python<'_>, lease: f64) -> PyResult<()> {
        let (lease, held) = (seconds(py, "lease", lease)?, self.held.clone());
        block_on(py, async move { held.extend(lease).await })?.map_err(|e| to_py(py, &e))
    }

    fn extend_async(&self, py: Python<'_>, lease: f64, callback: Py<PyAny>) -> PyResult<Task> {
        let (lease, held) = (seconds(py, "lease", lease)?, self.held.clone());
        spawn(callback, async move { held.extend(lease).await })
    }

    /// Blocks until the lock is lost (its reason), released or `timeout` passes (None).
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<String>> {
        let timeout = optional_seconds(py, "timeout", timeout)?;
        block_on(py, self.lost_future(timeout))?.map_err(|e| to_py(py, &e))
    }

    fn wait_lost_async(&self, callback: Py<PyAny>) -> PyResult<Task> {
        spawn(callback, self.lost_future(None))
    }

    /// True while this object still holds the lock (not released, not lost).
    #[getter]
    fn held(&self) -> bool {
        self.held.is_held()
    }
}

#[pymodule(name = "_dlock")]
fn dlock_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<engine::Engine>()?;
    m.add_class::<NativeClient>()?;
    m.add_class::<NativeHeld>()?;
    m.add_class::<Task>()?;
    m.add_function(wrap_pyfunction!(new_owner, m)?)?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    m.add("DEFAULT_LEASE", dlock::DEFAULT_LEASE.as_secs_f64())?;
    Ok(())
}
