//! The native half of the npm package `dlock`: the Rust client (and so the one engine) on
//! napi-rs's tokio runtime. The JavaScript API (`index.js`: promises, options objects,
//! AbortSignal, error codes, `held.lost`, `await using`) wraps it.
//!
//! A call that waits for the backend returns at once: `index.js` gives it an id, and its
//! outcome comes back through the client's settle function (`Calls`).

mod engine;

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use napi::bindgen_prelude::{BigInt, Either, FnArgs, Function, ToNapiValue};
use napi::threadsafe_function::{
    ThreadsafeCallContext, ThreadsafeFunction, ThreadsafeFunctionCallMode,
};
use napi::{Env, Error, Result, Status, sys};
use napi_derive::napi;
use tokio::sync::oneshot;

/// A JS error whose message starts with its stable code; `index.js` moves it to `err.code`.
fn coded(code: &str, message: impl std::fmt::Display) -> Error {
    Error::new(Status::GenericFailure, format!("{code}: {message}"))
}

/// `DLOCK_` and the error's code in upper snake case (`DLOCK_NOT_HELD`).
fn js_error(e: dlock::Error) -> Error {
    coded(&js_code(e.code()), e)
}

/// The message of a call that failed: its code first, as `coded` writes it.
fn failure(e: dlock::Error) -> String {
    format!("{}: {e}", js_code(e.code()))
}

fn js_code(code: dlock::ErrorCode) -> String {
    format!("DLOCK_{}", code.as_str().replace('-', "_").to_uppercase())
}

/// Milliseconds from JS as a duration, checked by the Rust crate.
fn millis(what: &str, ms: f64) -> Result<Duration> {
    dlock::spec::duration(what, ms, dlock::spec::Unit::Milliseconds).map_err(js_error)
}

fn optional_millis(what: &str, ms: Option<f64>) -> Result<Option<Duration>> {
    ms.map(|ms| millis(what, ms)).transpose()
}

/// The runtime every client's I/O and engine run on: one thread, whatever the core count. A
/// call wakes it once and the call's outcome wakes JavaScript's thread once. napi-rs's
/// default (a worker per core) also woke a second worker to steal each task the first woke,
/// a thread switch on every request: one thread cut the CPU of an uncontended cycle by a
/// quarter, for 7% less peak throughput from 64 concurrent calls (CHANGELOG).
#[napi_derive::module_init]
fn init() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("dlock")
        .enable_all()
        .build()
        .expect("the dlock runtime's thread starts");
    napi::bindgen_prelude::create_custom_tokio_runtime(runtime);
}

/// The lease a lock gets when none is set, in milliseconds.
#[napi]
pub const DEFAULT_LEASE_MS: u32 = dlock::DEFAULT_LEASE.as_millis() as u32;

/// Every reason a held lock may be lost, as `held.lostReason` gives it.
#[napi]
pub fn lost_reasons() -> Vec<&'static str> {
    dlock::LostReason::ALL.iter().map(|r| r.as_str()).collect()
}

/// The metric names every host exports (`dlock::prometheus`): `{ counters, lost, gauges,
/// histograms }`, each entry `[field, name, help]` (`lost`: `[name, help]`), as JSON.
#[napi]
pub fn metrics_table() -> String {
    use dlock::prometheus::{COUNTERS, GAUGES, HISTOGRAMS, LOST};
    serde_json::json!({
        "counters": COUNTERS,
        "lost": LOST,
        "gauges": GAUGES,
        "histograms": HISTOGRAMS,
    })
    .to_string()
}

/// Every `err.code` dlock rejects with.
#[napi]
pub fn error_codes() -> Vec<String> {
    dlock::ErrorCode::ALL.into_iter().map(js_code).collect()
}

/// The URL as it may be shown: without its password.
#[napi]
pub fn redact(url: String) -> String {
    dlock::redact(&url)
}

/// The fenced update of one row (`dlock::fenced_update_sql`), with the driver's placeholder
/// style: `numbered` (`$1`) or `question` (`?`).
#[napi]
pub fn fenced_update_sql(
    table: String,
    key: Vec<String>,
    values: Vec<String>,
    fence_column: String,
    placeholder: String,
) -> Result<String> {
    let key: Vec<&str> = key.iter().map(String::as_str).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    dlock::Placeholder::parse(&placeholder)
        .and_then(|p| dlock::fenced_update_sql(&table, &key, &values, &fence_column, p))
        .map_err(js_error)
}

/// How to connect: the client's options, each optional.
#[napi(object)]
#[derive(Debug)]
pub struct ConnectOptions {
    pub waiter_lease_ms: Option<f64>,
    pub request_timeout_ms: Option<f64>,
    pub lock_delay_ms: Option<f64>,
}

/// What a call ends with, as JavaScript gets it.
enum Outcome {
    Client(NativeClient),
    Held(Option<NativeHeld>),
    Flag(bool),
    /// `undefined`.
    Done,
    Leader(Option<LeaderInfo>),
    /// A lost reason, the stats' JSON, or a failed call's coded message.
    Text(Option<String>),
    Status(LockStatus),
}

// The one way napi-rs turns a Rust value into a JavaScript one is this unsafe trait.
#[allow(unsafe_code)]
impl ToNapiValue for Outcome {
    unsafe fn to_napi_value(env: sys::napi_env, value: Self) -> Result<sys::napi_value> {
        // SAFETY: `env` is the one napi-rs gave; each arm hands it on unchanged.
        unsafe {
            match value {
                Outcome::Client(c) => NativeClient::to_napi_value(env, c),
                Outcome::Held(h) => Option::<NativeHeld>::to_napi_value(env, h),
                Outcome::Flag(b) => bool::to_napi_value(env, b),
                Outcome::Done => <()>::to_napi_value(env, ()),
                Outcome::Leader(l) => Option::<LeaderInfo>::to_napi_value(env, l),
                Outcome::Text(t) => Option::<String>::to_napi_value(env, t),
                Outcome::Status(s) => LockStatus::to_napi_value(env, s),
            }
        }
    }
}

/// A call's id and how it ended: its value, or its coded message.
type Settled = (u32, std::result::Result<Outcome, String>);

type Settle = ThreadsafeFunction<Settled, (), FnArgs<(u32, bool, Outcome)>, Status, false, true>;

/// How a client's calls end. A call returns at once and its work runs on the runtime; the
/// outcome comes back by one threadsafe function, made once per client from `index.js`'s
/// `settle(id, ok, value)`. (napi-rs's `async fn` makes a threadsafe function, an `Error` and
/// two tasks for every call, and a function's release takes another turn of the event loop.)
///
/// The function is weak while no call is under way, so that an idle client does not keep the
/// process alive; a call under way does.
struct Calls {
    settle: Settle,
    alive: Arc<Alive>,
    /// Waits that `cancel(id)` may stop, by call id.
    cancels: Mutex<HashMap<u32, oneshot::Sender<()>>>,
}

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calls")
            .field("alive", &self.alive)
            .finish_non_exhaustive()
    }
}

/// The calls under way, which keep the event loop alive; counted on JavaScript's thread only.
#[derive(Debug, Default)]
struct Alive {
    count: AtomicU32,
    /// The settle function (`napi_threadsafe_function`), once made.
    settle: std::sync::OnceLock<usize>,
}

// napi-rs's own `refer` and `unref` take the function by `&mut`, which the client's calls share.
#[allow(unsafe_code)]
impl Alive {
    /// One more call: the first keeps the loop alive.
    fn more(&self, env: &Env) {
        if self.count.fetch_add(1, Ordering::Relaxed) == 0
            && let Some(&f) = self.settle.get()
        {
            // SAFETY: on JavaScript's thread, with the function this client made.
            unsafe {
                sys::napi_ref_threadsafe_function(env.raw(), f as sys::napi_threadsafe_function)
            };
        }
    }

    /// One call fewer: the last lets the loop end.
    fn fewer(&self, env: &Env) {
        if self.count.fetch_sub(1, Ordering::Relaxed) == 1
            && let Some(&f) = self.settle.get()
        {
            // SAFETY: as in `more`.
            unsafe {
                sys::napi_unref_threadsafe_function(env.raw(), f as sys::napi_threadsafe_function)
            };
        }
    }
}

impl Calls {
    fn new(settle: Function<'_, (), ()>) -> Result<Arc<Calls>> {
        let alive = Arc::new(Alive::default());
        let counted = alive.clone();
        let settle = settle
            .build_threadsafe_function::<Settled>()
            .callee_handled::<false>()
            .weak::<true>()
            .build_callback(move |ctx: ThreadsafeCallContext<Settled>| {
                counted.fewer(&ctx.env);
                Ok(match ctx.value {
                    (id, Ok(value)) => (id, true, value).into(),
                    (id, Err(message)) => (id, false, Outcome::Text(Some(message))).into(),
                })
            })?;
        let _ = alive.settle.set(settle.raw() as usize);
        Ok(Arc::new(Calls {
            settle,
            alive,
            cancels: Mutex::default(),
        }))
    }

    /// Runs `work` on the runtime; its outcome settles call `id`.
    fn start<F>(self: &Arc<Self>, env: &Env, id: u32, work: F)
    where
        F: Future<Output = std::result::Result<Outcome, String>> + Send + 'static,
    {
        self.alive.more(env);
        let calls = self.clone();
        napi::bindgen_prelude::spawn(async move {
            let outcome = AssertUnwindSafe(work).catch_unwind().await;
            let outcome = outcome.unwrap_or_else(|_| {
                Err("dlock: the call panicked (a bug in dlock: please report it)".into())
            });
            calls
                .settle
                .call((id, outcome), ThreadsafeFunctionCallMode::NonBlocking);
        });
    }

    /// Runs `wait`, which `cancel(id)` may stop when `cancellable` (then `None`: dropping it
    /// leaves the queue).
    async fn cancellable<T>(
        self: Arc<Self>,
        id: u32,
        cancellable: bool,
        wait: impl Future<Output = T>,
    ) -> Option<T> {
        if !cancellable {
            return Some(wait.await);
        }
        let (tx, rx) = oneshot::channel();
        let cancels = || self.cancels.lock().unwrap_or_else(|e| e.into_inner());
        cancels().insert(id, tx);
        let out = tokio::select! {
            out = wait => Some(out),
            _ = rx => None,
        };
        cancels().remove(&id);
        out
    }
}

/// What to acquire, as `index.js` passes it (`Acquirable._spec`): `[name, names, permits, rw,
/// leaseMs, waitMs, maxHoldMs, owner, fair, compat]`, null where unset, with `name` (and
/// `permits` for a semaphore's permit, `rw` for a read-write lock's hold) or `names` (a
/// multi-lock). An array: it is built and read on every acquire, and an object of the same
/// took several times as long on both sides.
#[napi]
pub type Spec = (
    Option<String>,
    Option<Vec<String>>,
    Option<u32>,
    Option<String>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<i64>,
    Option<bool>,
    Option<String>,
);

/// The Rust crate's spec of `spec`, checked.
fn lock_spec(spec: Spec) -> Result<dlock::LockSpec> {
    let (name, names, permits, rw, lease_ms, wait_ms, max_hold_ms, owner, fair, compat) = spec;
    let mut spec =
        dlock::LockSpec::target(name, names, permits, rw.as_deref()).map_err(js_error)?;
    if let Some(lease) = lease_ms {
        spec.lease = millis("leaseMs", lease)?;
    }
    spec.wait = optional_millis("waitMs", wait_ms)?;
    spec.max_hold = optional_millis("maxHoldMs", max_hold_ms)?;
    spec.owner = owner.map(|o| o as u64);
    spec.fair = fair.unwrap_or(true);
    spec.compat(compat.as_deref()).map_err(js_error)?;
    Ok(spec)
}

/// Connects to a backend URL (`dlock::BACKENDS`); call `id` settles with the client, whose
/// calls settle by `settle`.
#[napi]
pub fn connect(
    env: Env,
    id: u32,
    url: String,
    options: ConnectOptions,
    settle: Function<'_, (), ()>,
) -> Result<()> {
    let mut builder = dlock::Client::builder(&url);
    if let Some(d) = optional_millis("waiterLeaseMs", options.waiter_lease_ms)? {
        builder = builder.waiter_lease(d);
    }
    if let Some(d) = optional_millis("requestTimeoutMs", options.request_timeout_ms)? {
        builder = builder.request_timeout(d);
    }
    if let Some(d) = optional_millis("lockDelayMs", options.lock_delay_ms)? {
        builder = builder.lock_delay(d);
    }
    let calls = Calls::new(settle)?;
    let own = calls.clone();
    calls.start(&env, id, async move {
        let client = builder.connect().await.map_err(failure)?;
        Ok(Outcome::Client(NativeClient {
            client: Mutex::new(Some(client)),
            calls: own,
        }))
    });
    Ok(())
}

#[napi]
#[derive(Debug)]
pub struct NativeClient {
    client: Mutex<Option<dlock::Client>>,
    calls: Arc<Calls>,
}

/// A lock's state, as `dlock status` shows it.
#[napi(object)]
#[derive(Debug)]
pub struct LockStatus {
    pub owner: Option<String>,
    pub count: u32,
    pub fencing_token: BigInt,
    pub ttl_ms: Option<f64>,
    pub latest_token: BigInt,
    pub waiters: Vec<String>,
}

/// One lock of a held multi-lock.
#[napi(object)]
#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub fencing_token: BigInt,
}

impl NativeClient {
    fn client(&self) -> Result<dlock::Client> {
        let client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        client.clone().ok_or_else(|| js_error(dlock::Error::Closed))
    }
}

/// An election's leader.
#[napi(object)]
#[derive(Debug)]
pub struct LeaderInfo {
    /// The fencing token of the tenure that leads.
    pub term: BigInt,
    pub value: String,
}

impl From<dlock::Leader> for LeaderInfo {
    fn from(l: dlock::Leader) -> Self {
        LeaderInfo {
            term: BigInt::from(l.term),
            value: l.value,
        }
    }
}

/// The changes of an election's leader, one `next(id)` at a time.
#[napi]
#[derive(Debug)]
pub struct NativeObserver {
    observer: Arc<tokio::sync::Mutex<Option<dlock::Observer>>>,
    calls: Arc<Calls>,
}

#[napi]
impl NativeObserver {
    /// The next change: call `id` settles with the leader, or null once nobody leads; rejects
    /// with DLOCK_CLOSED once closed.
    #[napi]
    pub fn next(&self, env: Env, id: u32) {
        let observer = self.observer.clone();
        self.calls.start(&env, id, async move {
            let mut observer = observer.lock().await;
            let change = match observer.as_mut() {
                Some(o) => o.changed().await,
                None => Err(dlock::Error::Closed),
            };
            Ok(Outcome::Leader(
                change.map_err(failure)?.map(LeaderInfo::from),
            ))
        });
    }

    /// Stops observing; a `next()` under way ends with DLOCK_CLOSED.
    #[napi]
    pub fn close(&self) {
        match self.observer.try_lock() {
            Ok(mut observer) => drop(observer.take()),
            Err(_) => {
                let observer = self.observer.clone();
                napi::bindgen_prelude::spawn(async move { drop(observer.lock().await.take()) });
            }
        }
    }
}

#[napi]
impl NativeClient {
    /// Waits for what `spec` names, up to its `waitMs` (rejects with DLOCK_TIMEOUT when it
    /// runs out). With `cancellable`, `cancel(id)` may stop the wait, which leaves the queue:
    /// call `id` then settles with null.
    #[napi]
    pub fn acquire(&self, env: Env, id: u32, spec: Spec, cancellable: bool) -> Result<()> {
        let (client, spec) = (self.client()?, lock_spec(spec)?);
        let own = self.calls.clone();
        let calls = self.calls.clone();
        self.calls.start(&env, id, async move {
            let held = calls
                .cancellable(id, cancellable, spec.acquire(&client))
                .await;
            let held = held.transpose().map_err(failure)?;
            Ok(Outcome::Held(held.map(|held| NativeHeld {
                held,
                lead: None,
                calls: own,
            })))
        });
        Ok(())
    }

    /// Takes what `spec` names if it is free now; null if not.
    #[napi]
    pub fn try_acquire(&self, env: Env, id: u32, spec: Spec) -> Result<()> {
        let (client, spec) = (self.client()?, lock_spec(spec)?);
        let calls = self.calls.clone();
        self.calls.start(&env, id, async move {
            let held = spec.try_acquire(&client).await.map_err(failure)?;
            Ok(Outcome::Held(held.map(|held| NativeHeld {
                held,
                lead: None,
                calls,
            })))
        });
        Ok(())
    }

    /// Waits to lead election `name` (up to `waitMs`), then publishes `value`; cancellable as
    /// `acquire`.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn campaign(
        &self,
        env: Env,
        id: u32,
        name: String,
        value: String,
        lease_ms: f64,
        wait_ms: Option<f64>,
        cancellable: bool,
    ) -> Result<()> {
        let mut election = self
            .client()?
            .election(name)
            .lease(millis("leaseMs", lease_ms)?);
        if let Some(wait) = optional_millis("waitMs", wait_ms)? {
            election = election.wait(wait);
        }
        let calls = self.calls.clone();
        self.calls.start(&env, id, async move {
            let lead = calls
                .clone()
                .cancellable(id, cancellable, election.campaign(value))
                .await;
            let lead = lead.transpose().map_err(failure)?;
            Ok(Outcome::Held(lead.map(|lead| NativeHeld {
                held: lead.guard().clone(),
                lead: Some(lead),
                calls,
            })))
        });
        Ok(())
    }

    /// The leader of election `name`: its term and value, null if nobody leads.
    #[napi]
    pub fn leader(&self, env: Env, id: u32, name: String) -> Result<()> {
        let election = self.client()?.election(name);
        self.calls.start(&env, id, async move {
            let leader = election.leader().await.map_err(failure)?;
            Ok(Outcome::Leader(leader.map(LeaderInfo::from)))
        });
        Ok(())
    }

    /// Follows election `name`'s leader: see `NativeObserver`.
    #[napi]
    pub fn observe(&self, name: String) -> Result<NativeObserver> {
        let observer = self.client()?.election(name).observe().map_err(js_error)?;
        Ok(NativeObserver {
            observer: Arc::new(tokio::sync::Mutex::new(Some(observer))),
            calls: self.calls.clone(),
        })
    }

    /// Stops the cancellable wait of call `id` (it then settles with null).
    #[napi]
    pub fn cancel(&self, id: u32) {
        let cancels = &self.calls.cancels;
        if let Some(tx) = cancels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
        {
            let _ = tx.send(());
        }
    }

    /// The fenced write: true if `value` was stored under `token` (a bigint, or a whole
    /// number), false if refused as stale.
    #[napi]
    pub fn fenced_write(
        &self,
        env: Env,
        id: u32,
        resource: String,
        token: Either<BigInt, f64>,
        value: String,
    ) -> Result<()> {
        let token = match token {
            // 0n may come with no words at all.
            Either::A(big) if big.words.iter().all(|w| *w == 0) => 0,
            // Beyond 128 bits it is out of range anyway, and the crate's check says so.
            Either::A(big) => match big.get_i128() {
                (n, true) => n,
                _ => i128::MAX,
            },
            Either::B(n) if n.fract() == 0.0 && n.abs() < 1e30 => n as i128,
            Either::B(n) => {
                let why = format!("a fencing token is a whole number, not {n}");
                return Err(js_error(dlock::Error::InvalidArgument(why)));
            }
        };
        let token = dlock::spec::fencing_token(token).map_err(js_error)?;
        let client = self.client()?;
        self.calls.start(&env, id, async move {
            let outcome = client.fenced_write(&resource, token, &value).await;
            Ok(Outcome::Flag(
                outcome.map_err(failure)? == dlock::FencedWrite::Written,
            ))
        });
        Ok(())
    }

    #[napi]
    pub fn status(&self, env: Env, id: u32, name: String) -> Result<()> {
        let client = self.client()?;
        self.calls.start(&env, id, async move {
            let s = client.status(&name).await.map_err(failure)?;
            Ok(Outcome::Status(LockStatus {
                owner: s.owner,
                count: s.count,
                fencing_token: BigInt::from(s.fencing_token),
                ttl_ms: s.ttl.map(|t| t.as_secs_f64() * 1e3),
                latest_token: BigInt::from(s.latest_token),
                waiters: s.waiters,
            }))
        });
        Ok(())
    }

    /// What the client's engine counted, as the JSON of `dlock::json::stats_to_json`.
    #[napi]
    pub fn stats(&self, env: Env, id: u32) -> Result<()> {
        let client = self.client()?;
        self.calls.start(&env, id, async move {
            let stats = client.stats().await.map_err(failure)?;
            Ok(Outcome::Text(Some(
                dlock::json::stats_to_json(&stats).to_string(),
            )))
        });
        Ok(())
    }

    /// Stops taking calls; held locks stay held until released.
    #[napi]
    pub fn close(&self) {
        self.client.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The client's 128-bit id in hex; its owner tokens start with it.
    #[napi(getter)]
    pub fn id(&self) -> String {
        let client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        client
            .as_ref()
            .map(|c| format!("{:032x}", c.id().0))
            .unwrap_or_default()
    }
}

#[napi]
#[derive(Debug)]
pub struct NativeHeld {
    held: dlock::SharedGuard,
    /// The leadership whose lock this is.
    lead: Option<dlock::Leadership>,
    calls: Arc<Calls>,
}

#[napi]
impl NativeHeld {
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.held.name().to_owned()
    }

    #[napi(getter)]
    pub fn fencing_token(&self) -> BigInt {
        BigInt::from(self.held.fencing_token())
    }

    /// Each lock's name and fencing token: one, or a multi-lock's in canonical order.
    #[napi(getter)]
    pub fn members(&self) -> Vec<Member> {
        let members = self.held.members().iter();
        members
            .map(|m| Member {
                name: m.name.clone(),
                fencing_token: BigInt::from(m.fencing_token),
            })
            .collect()
    }

    /// One of `lostReasons()` once lost, else null.
    #[napi(getter)]
    pub fn lost_reason(&self) -> Option<String> {
        self.held
            .lost_signal()
            .reason()
            .map(|r| r.as_str().to_owned())
    }

    /// True while this object holds the lock (not released, not lost).
    #[napi(getter)]
    pub fn held(&self) -> bool {
        self.held.is_held()
    }

    /// Milliseconds left of the local validity (0 once it has passed).
    #[napi(getter)]
    pub fn valid_for_ms(&self) -> f64 {
        let until = self.held.valid_until();
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        left.as_secs_f64() * 1e3
    }

    #[napi]
    pub fn release(&self, env: Env, id: u32) {
        let held = self.held.clone();
        self.calls.start(&env, id, async move {
            held.release().await.map_err(failure)?;
            Ok(Outcome::Done)
        });
    }

    /// Publishes `value` under the same term (a leadership's only).
    #[napi]
    pub fn proclaim(&self, env: Env, id: u32, value: String) -> Result<()> {
        let Some(lead) = self.lead.clone() else {
            let why = "only a leadership proclaims".to_owned();
            return Err(js_error(dlock::Error::InvalidArgument(why)));
        };
        self.calls.start(&env, id, async move {
            lead.proclaim(value).await.map_err(failure)?;
            Ok(Outcome::Done)
        });
        Ok(())
    }

    #[napi]
    pub fn extend(&self, env: Env, id: u32, lease_ms: f64) -> Result<()> {
        let lease = millis("leaseMs", lease_ms)?;
        let held = self.held.clone();
        self.calls.start(&env, id, async move {
            held.extend(lease).await.map_err(failure)?;
            Ok(Outcome::Done)
        });
        Ok(())
    }

    /// Settles call `id` with the reason when the lock is lost, or with null once it is
    /// released.
    #[napi]
    pub fn wait_lost(&self, env: Env, id: u32) {
        let lost = self.held.lost_signal().clone();
        self.calls.start(&env, id, async move {
            let reason = lost.wait().await;
            Ok(Outcome::Text(reason.map(|r| r.as_str().to_owned())))
        });
    }
}
