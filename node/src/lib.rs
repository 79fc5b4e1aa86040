//! The native half of the npm package `dlock`: the Rust client (and so the one engine) on
//! napi-rs's tokio runtime, exposed as Promise-returning methods. The JavaScript API
//! (`index.js`: options objects, AbortSignal, error codes, `held.lost`, `await using`) wraps it.

mod engine;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::BigInt;
use napi::{Error, Result, Status};
use napi_derive::napi;
use tokio::sync::oneshot;

/// A JS error whose message starts with its stable code; `index.js` moves it to `err.code`.
fn coded(code: &str, message: impl std::fmt::Display) -> Error {
    Error::new(Status::GenericFailure, format!("{code}: {message}"))
}

fn js_error(e: &dlock::Error) -> Error {
    use dlock::Error as E;
    let code = match e {
        E::WaitTimedOut => "DLOCK_TIMEOUT",
        E::Lost(_) | E::Engine(dlock_core::Error::LockLost { .. }) => "DLOCK_LOST",
        E::Engine(dlock_core::Error::NotHeld { .. }) => "DLOCK_NOT_HELD",
        E::Closed => "DLOCK_CLOSED",
        e if e.is_misuse() => "DLOCK_INVALID_ARGUMENT",
        _ => "DLOCK_BACKEND",
    };
    coded(code, e)
}

/// Milliseconds from JS as a duration: negative, NaN or infinite is refused here; zero and
/// out-of-range leases by the engine.
fn millis(what: &str, ms: f64) -> Result<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(coded(
            "DLOCK_INVALID_ARGUMENT",
            format!("{what} must be a finite number of milliseconds >= 0, got {ms}"),
        ));
    }
    Duration::try_from_secs_f64(ms / 1e3)
        .map_err(|e| coded("DLOCK_INVALID_ARGUMENT", format!("{what}: {e}")))
}

fn optional_millis(what: &str, ms: Option<f64>) -> Result<Option<Duration>> {
    ms.map(|ms| millis(what, ms)).transpose()
}

/// Connects to `redis://…`, `rediss://…` or `memory://[name]`.
#[napi]
pub async fn connect(
    url: String,
    waiter_lease_ms: Option<f64>,
    request_timeout_ms: Option<f64>,
    lock_delay_ms: Option<f64>,
) -> Result<NativeClient> {
    let mut builder = dlock::Client::builder(&url);
    if let Some(d) = optional_millis("waiterLeaseMs", waiter_lease_ms)? {
        builder = builder.waiter_lease(d);
    }
    if let Some(d) = optional_millis("requestTimeoutMs", request_timeout_ms)? {
        builder = builder.request_timeout(d);
    }
    if let Some(d) = optional_millis("lockDelayMs", lock_delay_ms)? {
        builder = builder.lock_delay(d);
    }
    let client = builder.connect().await.map_err(|e| js_error(&e))?;
    Ok(NativeClient {
        client: Mutex::new(Some(client)),
        cancels: Arc::default(),
        next_cancel: AtomicU32::new(1),
    })
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
    /// Runs an acquire that `cancel(cancel_id)` may stop (it then resolves with null).
    async fn cancellable(
        &self,
        acquire: impl Future<Output = std::result::Result<Option<dlock::SharedGuard>, dlock::Error>>,
        cancel_id: Option<u32>,
    ) -> Result<Option<NativeHeld>> {
        let guard = match cancel_id {
            None => acquire.await,
            Some(id) => {
                let (tx, rx) = oneshot::channel();
                self.cancels
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id, tx);
                let out = tokio::select! {
                    out = acquire => out,
                    // Dropping the acquire future leaves the wait queue.
                    _ = rx => Ok(None),
                };
                self.cancels
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                out
            }
        };
        let guard = guard.map_err(|e| js_error(&e))?;
        Ok(guard.map(|held| NativeHeld { held }))
    }

    fn client(&self) -> Result<dlock::Client> {
        let client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        client
            .clone()
            .ok_or_else(|| coded("DLOCK_CLOSED", "the client is closed"))
    }
}

#[napi]
impl NativeClient {
    /// An id to pass to `acquire` so that `cancel(id)` can stop that wait.
    #[napi]
    pub fn new_cancel_id(&self) -> u32 {
        self.next_cancel.fetch_add(1, Ordering::Relaxed)
    }

    /// Acquires. `waitMs` null waits as long as it takes; 0 tries once (null if busy). With
    /// `permits`: a permit of the semaphore `name`, which has that many (`owner` unused); with
    /// `rw` ('read' or 'write'): a hold of the read-write lock `name`.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub async fn acquire(
        &self,
        name: String,
        owner: i64,
        lease_ms: f64,
        wait_ms: Option<f64>,
        max_hold_ms: Option<f64>,
        fair: bool,
        permits: Option<u32>,
        rw: Option<String>,
        cancel_id: Option<u32>,
    ) -> Result<Option<NativeHeld>> {
        let client = self.client()?;
        let lock = match (permits, rw.as_deref()) {
            (None, None) => client.lock(name).owner(owner as u64),
            (Some(permits), None) => client.semaphore(name, permits),
            (None, Some("read")) => client.rw_lock(name).owner(owner as u64).read(),
            (None, Some("write")) => client.rw_lock(name).owner(owner as u64).write(),
            _ => {
                return Err(coded(
                    "DLOCK_INVALID_ARGUMENT",
                    format!("rw must be 'read' or 'write', without permits; got {rw:?}"),
                ));
            }
        };
        let mut lock = lock.fair(fair).lease(millis("leaseMs", lease_ms)?);
        if let Some(m) = optional_millis("maxHoldMs", max_hold_ms)? {
            lock = lock.max_hold(m);
        }
        let wait = optional_millis("waitMs", wait_ms)?;
        let acquire = async { Ok(lock.acquire_within(wait).await?.map(Into::into)) };
        self.cancellable(acquire, cancel_id).await
    }

    /// Acquires every name as one, all or none; `waitMs` and `cancelId` as for `acquire`.
    #[napi]
    pub async fn acquire_multi(
        &self,
        names: Vec<String>,
        lease_ms: f64,
        wait_ms: Option<f64>,
        max_hold_ms: Option<f64>,
        cancel_id: Option<u32>,
    ) -> Result<Option<NativeHeld>> {
        let mut lock = self
            .client()?
            .multi_lock(names)
            .lease(millis("leaseMs", lease_ms)?);
        if let Some(m) = optional_millis("maxHoldMs", max_hold_ms)? {
            lock = lock.max_hold(m);
        }
        let wait = optional_millis("waitMs", wait_ms)?;
        let acquire = async { Ok(lock.acquire_within(wait).await?.map(Into::into)) };
        self.cancellable(acquire, cancel_id).await
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

    /// The fenced write: true if `value` was stored under `token`, false if refused as stale.
    #[napi]
    pub async fn fenced_write(
        &self,
        resource: String,
        token: BigInt,
        value: String,
    ) -> Result<bool> {
        let (sign, token, lossless) = token.get_u64();
        if sign || !lossless {
            return Err(coded(
                "DLOCK_INVALID_ARGUMENT",
                "a fencing token is a positive 64-bit integer",
            ));
        }
        let outcome = self
            .client()?
            .fenced_write(&resource, token, &value)
            .await
            .map_err(|e| js_error(&e))?;
        Ok(outcome == dlock::FencedWrite::Written)
    }

    #[napi]
    pub async fn status(&self, name: String) -> Result<LockStatus> {
        let s = self
            .client()?
            .status(&name)
            .await
            .map_err(|e| js_error(&e))?;
        Ok(LockStatus {
            owner: s.owner,
            count: s.count,
            fencing_token: BigInt::from(s.fencing_token),
            ttl_ms: s.ttl.map(|t| t.as_secs_f64() * 1e3),
            latest_token: BigInt::from(s.latest_token),
            waiters: s.waiters,
        })
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

    /// `"expired"`, `"not-owner"`, `"max-hold"` or `"closed"` once lost, else null.
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

    #[napi]
    pub async fn release(&self) -> Result<()> {
        self.held.release().await.map_err(|e| js_error(&e))
    }

    #[napi]
    pub async fn extend(&self, lease_ms: f64) -> Result<()> {
        let lease = millis("leaseMs", lease_ms)?;
        self.held.extend(lease).await.map_err(|e| js_error(&e))
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
