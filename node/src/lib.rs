//! The native half of the npm package `dlock`: the Rust client (and so the one engine) on
//! napi-rs's tokio runtime, exposed as Promise-returning methods. The JavaScript API
//! (`index.js`: options objects, AbortSignal, error codes, `held.lost`, `await using`) wraps it.

mod engine;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::{BigInt, Either};
use napi::{Error, Result, Status};
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

/// Connects to a backend URL (`dlock::BACKENDS`).
#[napi]
pub async fn connect(url: String, options: ConnectOptions) -> Result<NativeClient> {
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
    let client = builder.connect().await.map_err(js_error)?;
    Ok(NativeClient {
        client: Mutex::new(Some(client)),
        cancels: Arc::default(),
        next_cancel: AtomicU32::new(1),
    })
}

/// What to acquire, as `index.js` describes it: `name` (with `permits` for a semaphore's
/// permit, `rw` for a read-write lock's hold) or `names` (a multi-lock), and the options.
#[napi(object)]
#[derive(Debug)]
pub struct Spec {
    pub name: Option<String>,
    pub names: Option<Vec<String>>,
    pub permits: Option<u32>,
    pub rw: Option<String>,
    pub lease_ms: Option<f64>,
    pub wait_ms: Option<f64>,
    pub max_hold_ms: Option<f64>,
    pub owner: Option<i64>,
    pub fair: Option<bool>,
    pub compat: Option<String>,
}

impl Spec {
    fn to_rust(&self) -> Result<dlock::LockSpec> {
        let mut spec = match (&self.name, &self.names) {
            (Some(name), None) => {
                dlock::LockSpec::named(name.clone(), self.permits, self.rw.as_deref())
                    .map_err(js_error)?
            }
            (None, Some(names)) => dlock::LockSpec::new(dlock::Primitive::Multi {
                names: names.clone(),
            }),
            _ => return Err(coded("DLOCK_INVALID_ARGUMENT", "a name or names, not both")),
        };
        if let Some(lease) = self.lease_ms {
            spec.lease = millis("leaseMs", lease)?;
        }
        spec.wait = optional_millis("waitMs", self.wait_ms)?;
        spec.max_hold = optional_millis("maxHoldMs", self.max_hold_ms)?;
        spec.owner = self.owner.map(|o| o as u64);
        spec.fair = self.fair.unwrap_or(true);
        spec.compat(self.compat.as_deref()).map_err(js_error)?;
        Ok(spec)
    }
}

#[napi]
#[derive(Debug)]
pub struct NativeClient {
    client: Mutex<Option<dlock::Client>>,
    /// Pending acquires that an AbortSignal may cancel, by cancel id.
    cancels: Arc<Mutex<HashMap<u32, oneshot::Sender<()>>>>,
    next_cancel: AtomicU32,
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

    /// Runs a wait that `cancel(cancel_id)` may stop (then `None`: dropping it leaves the
    /// queue).
    async fn cancellable<T>(
        &self,
        cancel_id: Option<u32>,
        wait: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let Some(id) = cancel_id else {
            return Some(wait.await);
        };
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

/// The changes of an election's leader, one `next()` at a time.
#[napi]
#[derive(Debug)]
pub struct NativeObserver {
    observer: Arc<tokio::sync::Mutex<Option<dlock::Observer>>>,
}

#[napi]
impl NativeObserver {
    /// The next change: the leader, or null once nobody leads. Rejects with DLOCK_CLOSED once
    /// closed.
    #[napi]
    pub async fn next(&self) -> Result<Option<LeaderInfo>> {
        let mut observer = self.observer.lock().await;
        let change = match observer.as_mut() {
            Some(o) => o.changed().await,
            None => Err(dlock::Error::Closed),
        };
        Ok(change.map_err(js_error)?.map(LeaderInfo::from))
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
    /// An id to pass to `acquire` so that `cancel(id)` can stop that wait.
    #[napi]
    pub fn new_cancel_id(&self) -> u32 {
        self.next_cancel.fetch_add(1, Ordering::Relaxed)
    }

    /// Waits for what `spec` names, up to its `waitMs` (rejects with DLOCK_TIMEOUT when it
    /// runs out); null if `cancel(cancelId)` stopped the wait, which leaves the queue.
    #[napi]
    pub async fn acquire(&self, spec: Spec, cancel_id: Option<u32>) -> Result<Option<NativeHeld>> {
        let (client, spec) = (self.client()?, spec.to_rust()?);
        let held = self.cancellable(cancel_id, spec.acquire(&client)).await;
        let held = held.transpose().map_err(js_error)?;
        Ok(held.map(|held| NativeHeld { held, lead: None }))
    }

    /// Takes what `spec` names if it is free now; null if not.
    #[napi]
    pub async fn try_acquire(&self, spec: Spec) -> Result<Option<NativeHeld>> {
        let (client, spec) = (self.client()?, spec.to_rust()?);
        let held = spec.try_acquire(&client).await.map_err(js_error)?;
        Ok(held.map(|held| NativeHeld { held, lead: None }))
    }

    /// Waits to lead election `name` (up to `waitMs`), then publishes `value`; null if
    /// `cancel(cancelId)` stopped the wait.
    #[napi]
    pub async fn campaign(
        &self,
        name: String,
        value: String,
        lease_ms: f64,
        wait_ms: Option<f64>,
        cancel_id: Option<u32>,
    ) -> Result<Option<NativeHeld>> {
        let mut election = self
            .client()?
            .election(name)
            .lease(millis("leaseMs", lease_ms)?);
        if let Some(wait) = optional_millis("waitMs", wait_ms)? {
            election = election.wait(wait);
        }
        let lead = self.cancellable(cancel_id, election.campaign(value)).await;
        let lead = lead.transpose().map_err(js_error)?;
        Ok(lead.map(|lead| NativeHeld {
            held: lead.guard().clone(),
            lead: Some(lead),
        }))
    }

    /// The leader of election `name`: its term and value, null if nobody leads.
    #[napi]
    pub async fn leader(&self, name: String) -> Result<Option<LeaderInfo>> {
        let leader = self.client()?.election(name).leader().await;
        Ok(leader.map_err(js_error)?.map(LeaderInfo::from))
    }

    /// Follows election `name`'s leader: see `NativeObserver`.
    #[napi]
    pub fn observe(&self, name: String) -> Result<NativeObserver> {
        let observer = self.client()?.election(name).observe().map_err(js_error)?;
        Ok(NativeObserver {
            observer: Arc::new(tokio::sync::Mutex::new(Some(observer))),
        })
    }

    /// Stops the acquire started with this cancel id (it then resolves with null).
    #[napi]
    pub fn cancel(&self, cancel_id: u32) {
        if let Some(tx) = self
            .cancels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&cancel_id)
        {
            let _ = tx.send(());
        }
    }

    /// The fenced write: true if `value` was stored under `token` (a bigint, or a whole
    /// number), false if refused as stale.
    #[napi]
    pub async fn fenced_write(
        &self,
        resource: String,
        token: Either<BigInt, f64>,
        value: String,
    ) -> Result<bool> {
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
        let outcome = self.client()?.fenced_write(&resource, token, &value).await;
        Ok(outcome.map_err(js_error)? == dlock::FencedWrite::Written)
    }

    #[napi]
    pub async fn status(&self, name: String) -> Result<LockStatus> {
        let s = self.client()?.status(&name).await.map_err(js_error)?;
        Ok(LockStatus {
            owner: s.owner,
            count: s.count,
            fencing_token: BigInt::from(s.fencing_token),
            ttl_ms: s.ttl.map(|t| t.as_secs_f64() * 1e3),
            latest_token: BigInt::from(s.latest_token),
            waiters: s.waiters,
        })
    }

    /// What the client's engine counted, as the JSON of `dlock::json::stats_to_json`.
    #[napi]
    pub async fn stats(&self) -> Result<String> {
        let stats = self.client()?.stats().await.map_err(js_error)?;
        Ok(dlock::json::stats_to_json(&stats).to_string())
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
    pub async fn release(&self) -> Result<()> {
        self.held.release().await.map_err(js_error)
    }

    /// Publishes `value` under the same term (a leadership's only).
    #[napi]
    pub async fn proclaim(&self, value: String) -> Result<()> {
        let Some(lead) = &self.lead else {
            let why = "only a leadership proclaims".to_owned();
            return Err(js_error(dlock::Error::InvalidArgument(why)));
        };
        lead.proclaim(value).await.map_err(js_error)
    }

    #[napi]
    pub async fn extend(&self, lease_ms: f64) -> Result<()> {
        let lease = millis("leaseMs", lease_ms)?;
        self.held.extend(lease).await.map_err(js_error)
    }

    /// Resolves with the reason when the lock is lost, or with null once it is released.
    #[napi]
    pub async fn wait_lost(&self) -> Result<Option<String>> {
        Ok(self
            .held
            .lost_signal()
            .wait()
            .await
            .map(|r| r.as_str().to_owned()))
    }
}
