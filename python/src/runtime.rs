//! The runtime the Python package runs the Rust client on: tokio's current-thread scheduler,
//! driven by whichever thread needs it.
//!
//! A blocking call (`Call.wait()`) drives the runtime on the caller's own thread, with the
//! GIL released: its request is written and its reply read there, and its future completes
//! there. On a runtime of worker threads the same call crossed threads twice — the request
//! woke a worker to write it, the reply woke the caller — and each wake-up is a context
//! switch on the path of every acquire and release.
//!
//! Between blocking calls a keeper thread drives it (renewals, pub/sub notices, the calls of
//! `dlock.aio`, the signal ticks). It takes the runtime up once no thread has been in it for
//! [`KEEPER_GRACE`], so a thread that calls back to back never waits for it, and gives it up
//! as soon as a blocking call asks. While nobody drives it (at most [`KEEPER_GRACE`] after a
//! call), timers and replies wait: the engine measures a lease from when its request was
//! sent, so a renewal or a notice that late is late, never unsafe.
//!
//! The runtime never waits for the GIL: a thread steps out of it before it takes the GIL
//! (a blocking call to look at the signals), and `dlock.aio`'s callbacks run on its blocking
//! pool. So renewals go on while Python is busy, whoever holds the GIL and for how long.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long after the last blocking call left the runtime the keeper takes it up.
const KEEPER_GRACE: Duration = Duration::from_millis(1);
/// How often a blocking call looks at Python's signals (Ctrl-C) while it waits.
const SIGNAL_PERIOD: Duration = Duration::from_millis(50);

pub(crate) struct Runtime {
    tokio: tokio::runtime::Runtime,
    /// Threads in [`Runtime::block_on`]: driving the runtime, or waiting to.
    blocking: AtomicUsize,
    /// When the last of them left, in nanoseconds from `base`.
    last_call: AtomicU64,
    base: Instant,
    /// Tells the keeper to give the runtime up: a blocking call wants it.
    wanted: tokio::sync::Notify,
    /// The keeper waits here: with a deadline while calls come and go or the grace runs,
    /// without one once a call has lasted a whole grace (then `parked` is set and the last
    /// call to end wakes it).
    idle: (Mutex<()>, Condvar),
    parked: AtomicBool,
    /// Wakes the signal ticker when the first blocking call starts.
    busy: tokio::sync::Notify,
    /// A signal tick: every blocking call looks at the signals.
    pub(crate) tick: tokio::sync::Notify,
}

impl Runtime {
    /// A runtime with its keeper thread and its signal ticker.
    pub(crate) fn start() -> std::io::Result<Arc<Self>> {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .thread_name("dlock")
            .enable_all()
            .build()?;
        let rt = Arc::new(Runtime {
            tokio,
            blocking: AtomicUsize::new(0),
            last_call: AtomicU64::new(0),
            base: Instant::now(),
            wanted: tokio::sync::Notify::new(),
            idle: (Mutex::new(()), Condvar::new()),
            parked: AtomicBool::new(false),
            busy: tokio::sync::Notify::new(),
            tick: tokio::sync::Notify::new(),
        });
        rt.tokio.spawn(rt.clone().signal_ticker());
        let keeper = rt.clone();
        std::thread::Builder::new()
            .name("dlock-keeper".into())
            .spawn(move || keeper.keep())?;
        Ok(rt)
    }

    /// Spawns `future` on the runtime (the keeper or a blocking call drives it).
    pub(crate) fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tokio.spawn(future)
    }

    /// Runs `future` to completion on this thread, driving the runtime meanwhile (or waiting
    /// for it while another thread does). Call it with the GIL released, and never take the
    /// GIL inside it.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        if self.blocking.fetch_add(1, SeqCst) == 0 {
            // Both stored as a permit if nobody is waiting: no system call.
            self.busy.notify_one();
        }
        self.wanted.notify_one();
        let out = self.tokio.block_on(future);
        self.last_call
            .store(self.base.elapsed().as_nanos() as u64, SeqCst);
        // The keeper sets `parked` before it looks at `blocking`, this decrements before it
        // looks at `parked`: either the keeper sees no call under way, or this wakes it.
        if self.blocking.fetch_sub(1, SeqCst) == 1 && self.parked.load(SeqCst) {
            drop(self.idle.0.lock().unwrap_or_else(|e| e.into_inner()));
            self.idle.1.notify_one();
        }
        out
    }

    /// The keeper thread: drives the runtime while no blocking call does.
    fn keep(self: Arc<Self>) {
        loop {
            self.wait_for_idle();
            self.tokio.block_on(async {
                while self.blocking.load(SeqCst) == 0 {
                    self.wanted.notified().await;
                }
            });
        }
    }

    /// Returns once no thread has been in [`Runtime::block_on`] for [`KEEPER_GRACE`].
    ///
    /// While calls come and go it looks again every [`KEEPER_GRACE`], woken by its own
    /// timeout: a thread that calls back to back then never has to wake it (a system call on
    /// the caller's path, and a second wake-up of the keeper, each grace). Once one call
    /// has lasted a whole grace (a long wait for a lock), it parks without a deadline and
    /// the last call to end wakes it, so that a long wait does not wake it every grace.
    fn wait_for_idle(&self) {
        let (lock, idle) = &self.idle;
        let mut guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        // When the last call ended, as of the keeper's last look (none yet: u64::MAX).
        let mut seen = u64::MAX;
        loop {
            let last = self.last_call.load(SeqCst);
            if self.blocking.load(SeqCst) > 0 {
                if last != seen {
                    // Calls ended since the last look: look again after a grace.
                    seen = last;
                    guard = idle
                        .wait_timeout(guard, KEEPER_GRACE)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    continue;
                }
                self.parked.store(true, SeqCst);
                if self.blocking.load(SeqCst) > 0 {
                    guard = idle.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                self.parked.store(false, SeqCst);
                continue;
            }
            let quiet = self
                .base
                .elapsed()
                .saturating_sub(Duration::from_nanos(last));
            if quiet >= KEEPER_GRACE {
                return;
            }
            seen = last;
            guard = idle
                .wait_timeout(guard, KEEPER_GRACE - quiet)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Ticks every [`SIGNAL_PERIOD`] while blocking calls are under way, and sleeps while
    /// none is. A timer of each call's own would enter tokio's timer wheel ahead of
    /// everything in it, twice per acquire and release, to no purpose.
    async fn signal_ticker(self: Arc<Self>) {
        loop {
            while self.blocking.load(SeqCst) == 0 {
                self.busy.notified().await;
            }
            let start = tokio::time::Instant::now() + SIGNAL_PERIOD;
            let mut interval = tokio::time::interval_at(start, SIGNAL_PERIOD);
            while self.blocking.load(SeqCst) > 0 {
                interval.tick().await;
                self.tick.notify_waiters();
            }
        }
    }
}
