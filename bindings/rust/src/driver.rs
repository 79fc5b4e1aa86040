//! The tokio driver: one task per client runs the engine. Feed inputs, drain outputs, sleep
//! until the next deadline, reply or mail (a call or a notice: one channel).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dlock_core::{
    Command, Event, HoldId, Input, Instant, Leader, LostReason, Member, NotAcquired, Notice, OpId,
    Output, Reply, RequestId, Stats,
};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::Error;
use crate::machine::{Machine, MachineError};
use crate::transport::{Pending, Transport};

/// What the driver hands back for a successful acquire: the lock's fencing token, or a
/// multi-lock's members.
#[derive(Debug)]
pub(crate) struct Granted<T> {
    pub(crate) hold: HoldId,
    pub(crate) tokens: T,
    pub(crate) signal: Arc<HoldSignal>,
}

/// What the guards of one hold hear from the driver: until when it is valid (each renewal
/// moves it on) and how it ended — lost, with the reason, or released, after which it can no
/// longer be lost. One allocation per hold, shared by the driver and every guard of it.
#[derive(Debug)]
pub(crate) struct HoldSignal {
    /// Until when it is valid, on the engine's clock: nanoseconds from the client's base
    /// instant (a `Mutex<Instant>` would be three times the size, for 100,000 holds).
    valid: AtomicU64,
    /// Set once: `Some(reason)` lost, `None` released (or the driver gone).
    ended: std::sync::OnceLock<Option<LostReason>>,
    ending: Notify,
}

impl HoldSignal {
    fn new(valid: Instant) -> Self {
        Self {
            valid: AtomicU64::new(valid.as_nanos()),
            ended: std::sync::OnceLock::new(),
            ending: Notify::new(),
        }
    }

    /// Until when it is valid, on tokio's clock; `base` is the client's.
    pub(crate) fn valid_until(&self, base: tokio::time::Instant) -> tokio::time::Instant {
        base + Duration::from_nanos(self.valid.load(Ordering::Relaxed))
    }

    fn set_valid(&self, t: Instant) {
        self.valid.store(t.as_nanos(), Ordering::Relaxed);
    }

    /// Why the hold was lost, if it was.
    pub(crate) fn lost(&self) -> Option<LostReason> {
        self.ended.get().cloned().flatten()
    }

    /// Lost for `reason`, or released (`None`); the first end stands.
    fn end(&self, reason: Option<LostReason>) {
        let _ = self.ended.set(reason);
        self.ending.notify_waiters();
    }

    /// Completes when the hold ends: with the reason it was lost, or `None` once released.
    pub(crate) async fn ended(&self) -> Option<LostReason> {
        loop {
            let notified = self.ending.notified();
            let mut notified = std::pin::pin!(notified);
            // Listening before looking: an end between the look and the wait still wakes it.
            notified.as_mut().enable();
            if let Some(end) = self.ended.get() {
                return end.clone();
            }
            notified.await;
        }
    }
}

pub(crate) type GrantReply<T> = oneshot::Sender<Result<Option<Granted<T>>, Error>>;

/// A call from the public API.
#[derive(Debug)]
pub(crate) enum Call {
    /// A command for the engine, and who hears its terminal event (nobody for a cancel, whose
    /// acquire hears it).
    Command {
        command: Command,
        waiter: Option<Waiter>,
    },
    /// A snapshot of what the engine counted.
    Stats(oneshot::Sender<Result<Stats, Error>>),
}

/// What reaches the driver by its one channel, in the order sent: callers' calls, the
/// transport's notices, and the end of the client's handles. One channel is one queue to
/// wait on: each turn of the driver's loop polls it once, not a channel per sender.
#[derive(Debug)]
pub(crate) enum Mail {
    Call(Call),
    /// From the transport: a pub/sub message, a watch, a connection change.
    Notice(Notice),
    /// The client's last handle (so its last guard too) is gone, after every call it made:
    /// the driver finishes what is under way (background releases), then stops.
    Closed,
}

/// Where a transport sends its notices: the driver's channel.
#[derive(Clone, Debug)]
pub(crate) struct Inbox(pub(crate) mpsc::UnboundedSender<Mail>);

impl Inbox {
    /// Passes `notice` to the driver; false once the driver has stopped.
    pub(crate) fn send(&self, notice: Notice) -> bool {
        self.0.send(Mail::Notice(notice)).is_ok()
    }

    pub(crate) fn same_channel(&self, other: &Inbox) -> bool {
        self.0.same_channel(&other.0)
    }
}

/// One request on its way, with the id its reply goes back under.
struct InFlight {
    id: RequestId,
    reply: Pending,
}

impl std::future::Future for InFlight {
    type Output = (RequestId, Reply);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let id = self.id;
        self.reply.as_mut().poll(cx).map(|reply| (id, reply))
    }
}

#[derive(Debug)]
pub(crate) enum Waiter {
    Acquire(GrantReply<u64>),
    AcquireMulti(GrantReply<Vec<Member>>),
    Done(Option<oneshot::Sender<Result<(), Error>>>),
    /// A proclaim: the term.
    Proclaim(oneshot::Sender<Result<u64, Error>>),
    /// An observe: each leader seen, until it ends.
    Observe(mpsc::UnboundedSender<Result<Option<Leader>, Error>>),
}

impl Waiter {
    /// Ends the call with `error` (a background release has nobody to tell).
    fn fail(self, error: Error) {
        match self {
            Waiter::Acquire(reply) => {
                let _ = reply.send(Err(error));
            }
            Waiter::AcquireMulti(reply) => {
                let _ = reply.send(Err(error));
            }
            Waiter::Done(Some(reply)) => {
                let _ = reply.send(Err(error));
            }
            Waiter::Done(None) => {}
            Waiter::Proclaim(reply) => {
                let _ = reply.send(Err(error));
            }
            Waiter::Observe(tx) => {
                let _ = tx.send(Err(error));
            }
        }
    }
}

/// How many turns the driver takes one after another, with no wait between them, before it
/// lets the other tasks run. Each turn can answer a caller or hand the connection a request,
/// but neither the caller nor the connection runs while the driver does. With many tasks, a
/// burst of replies was answered whole, then every next call taken, then every request
/// written at once: the client and the server took turns instead of working at the same
/// time. 16 overlaps them: 64 tasks over 1,000 locks made 56,300 cycles/s with the server 63%
/// busy, and make 91,800/s with it 98% busy (bench/README, "Why the capacity row's client
/// made fewer cycles…"). A lone caller waits between turns and never gets here.
const BURST: u32 = 16;

pub(crate) struct Driver {
    engine: Box<dyn Machine>,
    /// Set when the engine failed: the driver stops.
    broken: Option<MachineError>,
    transport: Transport,
    /// Requests under way, polled by the driver itself: a reply reaches the engine without
    /// a hop through another task.
    requests: FuturesUnordered<InFlight>,
    base: tokio::time::Instant,
    /// The engine's next timer: one sleep, moved when the engine's deadline moves earlier. A
    /// sleep made afresh on every turn of the loop would enter tokio's timer wheel each time,
    /// and the first entry into an empty wheel wakes the runtime's thread through its
    /// eventfd: a system call and a spurious wake-up on every request.
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// The deadline `timer` is set to, until it fires. A later deadline leaves it there:
    /// each request moves the engine's deadline on (its timeout), and moving the sleep each
    /// time costs more than the one early step, with nothing due, that it then takes.
    armed: Option<tokio::time::Instant>,
    /// The engine's next deadline, as its last step gave it.
    deadline: Option<Instant>,
    /// Outputs of the engine's steps not yet acted on.
    outputs: VecDeque<Output>,
    mail: mpsc::UnboundedReceiver<Mail>,
    ids: Arc<AtomicU64>,
    waiting: BTreeMap<OpId, Waiter>,
    /// Hashed, not ordered: a hold's entry costs half a B-tree's (the driver never walks
    /// them in order).
    holds: HashMap<HoldId, Arc<HoldSignal>>,
}

impl Driver {
    pub(crate) fn new(
        engine: Box<dyn Machine>,
        transport: Transport,
        base: tokio::time::Instant,
        mail: mpsc::UnboundedReceiver<Mail>,
        ids: Arc<AtomicU64>,
    ) -> Self {
        let mut engine = engine;
        if cfg!(feature = "metrics") {
            engine.keep_observations();
        }
        Self {
            engine,
            broken: None,
            transport,
            requests: FuturesUnordered::new(),
            base,
            timer: Box::pin(tokio::time::sleep_until(base)),
            armed: None,
            deadline: None,
            outputs: VecDeque::new(),
            mail,
            ids,
            waiting: BTreeMap::new(),
            holds: HashMap::new(),
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.base.elapsed().as_nanos() as u64)
    }

    /// Hold `hold` is valid until `t` now (a renewal or an extend moved it on).
    fn valid(&self, hold: HoldId, t: Instant) {
        if let Some(signal) = self.holds.get(&hold) {
            signal.set_valid(t);
        }
    }

    pub(crate) async fn run(mut self) {
        let mut open = true;
        // Turns taken one after another without waiting: see `BURST`.
        let mut burst = 0;
        // The engine's first outputs (its subscription, say) and timers.
        self.step(None);
        loop {
            // Acting on the outputs answers waiters: whether any is left is known only after.
            self.dispatch();
            // Once every handle is gone, finish what is under way (background releases), then
            // stop.
            if self.broken.is_some() || (!open && self.waiting.is_empty()) {
                break;
            }
            if burst == BURST {
                burst = 0;
                tokio::task::yield_now().await;
            }
            let deadline = self
                .deadline
                .map(|t| self.base + Duration::from_nanos(t.as_nanos()));
            if let Some(at) = deadline
                && self.armed.is_none_or(|armed| at < armed)
            {
                self.timer.as_mut().reset(at);
                self.armed = Some(at);
            }
            // In a fixed order, the work under way before new work: due timers (renewals,
            // expiries), replies, then mail. Each is finite (a step takes every timer due),
            // so none starves the next; and a fixed order spares a random draw and the
            // bookkeeping of a rotating start on each of the several turns a lock cycle takes.
            let mut waited = false;
            let mut turn = std::pin::pin!(async {
                tokio::select! {
                    biased;
                    () = self.timer.as_mut(), if deadline.is_some() => {
                        self.armed = None;
                        self.step(None);
                    }
                    Some((id, reply)) = self.requests.next(), if !self.requests.is_empty() => {
                        self.step(Some(Input::Reply { id, reply }));
                    }
                    Some(mail) = self.mail.recv() => match mail {
                        Mail::Call(call) => self.call(call),
                        Mail::Notice(notice) => self.step(Some(Input::Notice(notice))),
                        Mail::Closed => open = false,
                    },
                    // No timer, no request and no sender left: nothing can happen any more.
                    else => return false,
                }
                true
            });
            let go_on = std::future::poll_fn(|cx| {
                let turn = turn.as_mut().poll(cx);
                waited |= turn.is_pending();
                turn
            })
            .await;
            if !go_on {
                break;
            }
            burst = if waited { 0 } else { burst + 1 };
        }
        match self.broken.take() {
            None => {
                self.step(Some(Input::Notice(Notice::Closed)));
                self.dispatch();
            }
            Some(e) => self.abandon(e),
        }
        self.transport.close();
    }

    /// Runs one event through the engine (`None`: the timers due now) and keeps what follows.
    fn step(&mut self, input: Option<Input>) {
        match self.engine.step(self.now(), input, &mut self.outputs) {
            Ok(deadline) => self.deadline = deadline,
            Err(e) => {
                tracing::error!(error = %e, "the lock engine failed; this client stops");
                self.broken.get_or_insert(e);
            }
        }
    }

    /// The engine failed: everything pending fails, every hold is lost.
    fn abandon(&mut self, e: MachineError) {
        for (_, waiter) in std::mem::take(&mut self.waiting) {
            waiter.fail(Error::Machine(e.0.clone()));
        }
        for (_, signal) in std::mem::take(&mut self.holds) {
            signal.end(Some(LostReason::Closed));
        }
    }

    fn call(&mut self, call: Call) {
        let (command, waiter) = match call {
            Call::Command { command, waiter } => (command, waiter),
            Call::Stats(reply) => {
                let stats = self.engine.stats().map_err(|e| Error::Machine(e.0));
                let _ = reply.send(stats);
                return;
            }
        };
        if let Some(waiter) = waiter {
            self.waiting.insert(command.op(), waiter);
        }
        self.step(Some(Input::Command(command)));
    }

    /// Acts on the engine's outputs: requests go to the transport, events to their callers
    /// (an event that makes the driver step again adds to the outputs, acted on here too).
    fn dispatch(&mut self) {
        #[cfg(feature = "metrics")]
        for observation in self.engine.observations() {
            crate::metrics::publish(observation);
        }
        while let Some(out) = self.outputs.pop_front() {
            match out {
                Output::Request(request) => self.requests.push(InFlight {
                    id: request.id,
                    reply: self.transport.execute(request.op),
                }),
                Output::Event(event) => self.event(event),
            }
        }
    }

    /// Hands an acquired hold to its caller, with a loss signal; when the caller is gone (the
    /// acquire future was dropped) it is given back.
    fn granted<T>(&mut self, reply: GrantReply<T>, hold: HoldId, tokens: T, valid: Instant) {
        let signal = self
            .holds
            .entry(hold)
            .or_insert_with(|| Arc::new(HoldSignal::new(valid)));
        signal.set_valid(valid);
        let granted = Granted {
            hold,
            tokens,
            signal: signal.clone(),
        };
        if let Err(Ok(Some(granted))) = reply.send(Ok(Some(granted))) {
            let op = OpId(self.ids.fetch_add(1, Ordering::Relaxed));
            self.call(Call::Command {
                command: Command::Release {
                    op,
                    hold: granted.hold,
                },
                waiter: Some(Waiter::Done(None)),
            });
        }
    }

    fn event(&mut self, event: Event) {
        let waiter = event.terminal_op().and_then(|op| self.waiting.remove(&op));
        match (event, waiter) {
            (
                Event::Acquired {
                    hold,
                    fencing_token,
                    count,
                    valid_until,
                    ..
                },
                Some(Waiter::Acquire(reply)),
            ) => {
                tracing::debug!(hold = hold.0, fencing_token, count, "acquired");
                self.granted(reply, hold, fencing_token, valid_until);
            }
            (
                Event::AcquiredMulti {
                    hold,
                    members,
                    valid_until,
                    ..
                },
                Some(Waiter::AcquireMulti(reply)),
            ) => {
                tracing::debug!(hold = hold.0, ?members, "acquired a multi-lock");
                self.granted(reply, hold, members, valid_until);
            }
            (Event::NotAcquired { reason, .. }, Some(Waiter::Acquire(reply))) => {
                let _ = reply.send(not_acquired(reason));
            }
            (Event::NotAcquired { reason, .. }, Some(Waiter::AcquireMulti(reply))) => {
                let _ = reply.send(not_acquired(reason));
            }
            (Event::Released { hold, count, .. }, Some(Waiter::Done(reply))) => {
                tracing::debug!(hold = hold.0, count, "released");
                if count == 0
                    && let Some(signal) = self.holds.remove(&hold)
                {
                    signal.end(None);
                }
                if let Some(reply) = reply {
                    let _ = reply.send(Ok(()));
                }
            }
            (
                Event::Extended {
                    hold, valid_until, ..
                },
                reply,
            ) => {
                self.valid(hold, valid_until);
                if let Some(Waiter::Done(Some(reply))) = reply {
                    let _ = reply.send(Ok(()));
                }
            }
            (Event::Proclaimed { term, .. }, Some(Waiter::Proclaim(reply))) => {
                tracing::debug!(term, "proclaimed");
                let _ = reply.send(Ok(term));
            }
            (Event::Leader { op, leader }, None) => {
                if let Some(Waiter::Observe(tx)) = self.waiting.get(&op)
                    && tx.send(Ok(leader)).is_err()
                {
                    // Nobody listens any more (the Observer's drop sends the cancel too).
                    self.step(Some(Input::Command(Command::Cancel { op })));
                }
            }
            (Event::NotAcquired { .. }, Some(Waiter::Observe(_))) => {}
            (Event::Failed { error, .. }, Some(waiter)) => {
                tracing::debug!(%error, "command failed");
                waiter.fail(Error::from(error));
            }
            (Event::Renewed { hold, valid_until }, _) => {
                tracing::trace!(hold = hold.0, "renewed");
                self.valid(hold, valid_until);
            }
            (Event::Lost { hold, reason }, _) => {
                tracing::warn!(
                    hold = hold.0,
                    reason = crate::error::reason_text(&reason),
                    "lock lost"
                );
                if let Some(signal) = self.holds.remove(&hold) {
                    signal.end(Some(reason));
                }
            }
            (event, _) => tracing::error!(?event, "event with no matching command"),
        }
    }
}

impl Drop for Driver {
    /// Whatever stops the driver, no guard waits for an end that cannot come.
    fn drop(&mut self) {
        for signal in self.holds.values() {
            signal.end(None);
        }
    }
}

/// An acquire that ended without the lock, as the public API reports it: busy is `None`.
fn not_acquired<T>(reason: NotAcquired) -> Result<Option<T>, Error> {
    match reason {
        NotAcquired::Busy => Ok(None),
        NotAcquired::TimedOut => Err(Error::WaitTimedOut),
        NotAcquired::Cancelled => Err(Error::Closed),
    }
}
