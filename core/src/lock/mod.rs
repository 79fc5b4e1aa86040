//! # The lock lifecycle, written once
//!
//! Every backend's locks live the same life; only the requests that move them differ. This
//! module is that life: the tenure index, reentrancy, wait deadlines, request timeouts,
//! validity and its expiry, max hold, renewal scheduling and batching, close, and the one
//! terminal event per command. A [`Backend`] is a strategy that supplies only what is its own:
//! the requests that start and continue an acquire, renew, extend and release a hold, how it
//! reads their replies, its notices and its own timers. Nothing here names a backend.
//!
//! ## Theory of operation
//!
//! The engine hands a [`Machine`] commands, replies, notices and due timers, in that call
//! order per input: due timers first (so a late reply can never revive a hold whose validity
//! has run out), then the input. A command registers its op id ([`Base::begin`]) and is
//! checked before anything is sent; the machine then moves tenures through these states:
//!
//! | state | how it is entered | how it is left |
//! | --- | --- | --- |
//! | — | | `acquire` of a new (kind, name, owner): a new tenure, **pending** ([`Backend::start`]); of a held one: a reentry (the lifecycle counts it, or [`Backend::reenter`] asks a server that counts; releases likewise, [`Backend::release_level`]) |
//! | **pending** | `acquire` | granted → **held** ([`Lifecycle::grant`], terminal `Acquired`); refused, failed, timed out (`WaitDeadline`), cancelled or closed → **gone** ([`Lifecycle::abandon`]: one terminal event, and [`Backend::give_up`] leaves the queue unless closed) |
//! | **held** | a grant | renewed ([`Lifecycle::renewed`]: validity moves on, never back); released to count 0 → **gone** ([`Backend::release`]); validity ran out (`Expire`), max hold (`MaxHold`), refused by the server, a broken session or close → **gone** ([`Lifecycle::lose`]: one `Lost`, [`Backend::lost`] gives back what the server may keep, and commands under way on it end with `LockLost`) |
//!
//! A hold is valid until `sent + lease − drift` ([`valid_until`]) for the latest request that
//! confirmed it, `sent` being when that request left. The watchdog renews each hold a third
//! of a lease after that send, batched with every hold due within a sixth of a lease; a
//! failed renewal is tried again soon and the `Expire` timer decides when it is too late.
//! ZooKeeper renews its session instead of each hold ([`Backend::RENEWS_HOLDS`]) and moves
//! every hold's validity on each confirmation.

pub(crate) mod tenures;

use core::fmt;
use core::time::Duration;

use crate::base::{
    Base, InFlight, check_acquire, check_lease, check_name, check_value, refuse_upgrade,
    retry_delay, unpack,
};
use crate::config::Config;
use crate::error::Error;
use crate::owner::OwnerToken;
use crate::plant::{self, Plant};
use crate::stats::{Counters, Observation, Observed, Stats};
use crate::status::HoldInfo;
use crate::time::{Instant, drift};
use crate::timers::Timer;
use crate::types::{
    Acquire, Command, Event, HoldId, Kind, LostReason, NotAcquired, Notice, Op, OpId, Primitive,
    Reply, RequestId, Response, Wait,
};
use tenures::{Held, State, Tenure, Tenures, Waiting, Watch};

/// Until when a hold is valid locally: the lease counted from the send of the request that
/// confirmed it, less the drift allowance.
pub(crate) fn valid_until(sent: Instant, lease: Duration) -> Instant {
    sent + lease - drift(lease)
}

/// When a hold valid until `valid_until` is lost: then, unless a bug is planted.
fn expire_at(valid_until: Instant, lease: Duration) -> Instant {
    if plant::on(Plant::LostLate) {
        return valid_until + lease / 2;
    }
    valid_until
}

/// The refusal of an election by a backend that offers none.
pub(crate) fn no_elections(backend: &str) -> Error {
    Error::InvalidArgument(format!("{backend} offers no elections"))
}

/// A backend's protocol, as a strategy of the lifecycle.
///
/// Every hook gets the lifecycle, through which it sends requests, sets its timers and moves
/// tenures on ([`Lifecycle::grant`], [`Lifecycle::renewed`], [`Lifecycle::lose`],
/// [`Lifecycle::abandon`], [`Lifecycle::retry`]).
pub(crate) trait Backend: Sized + Clone + fmt::Debug {
    /// The backend's name in refusals ("Redlock offers no semaphores").
    const NAME: &'static str;
    /// The protocol its replies come in, for malformed-reply errors.
    const WIRE: &'static str = Self::NAME;
    /// The primitives it offers.
    const OFFERS: &'static [Primitive] =
        &[Primitive::Lock, Primitive::Semaphore, Primitive::RwLock];
    /// The server counts a hold's levels: a reentry and the release of a level are requests
    /// ([`Backend::reenter`], [`Backend::release`] with a count). Otherwise the lifecycle
    /// counts them, and only a tenure's first acquire and last release reach the server.
    const SERVER_COUNTS: bool;
    /// Each hold is renewed on its own by the watchdog ([`Backend::renew`]). Otherwise the
    /// backend keeps every hold's validity moving itself (ZooKeeper's session).
    const RENEWS_HOLDS: bool;

    /// What it keeps per tenure (its keys, its directory).
    type Tenure: Clone + fmt::Debug;
    /// Where a pending acquire stands in its protocol.
    type Pending: Clone + fmt::Debug;
    /// What it keeps per held tenure.
    type Held: Clone + fmt::Debug;
    /// Why a request was sent: what its reply moves on.
    type Purpose: Clone + fmt::Debug;
    /// Its own timers.
    type Timer: Copy + Ord + fmt::Debug;
    /// A reply in its protocol.
    type Reply;

    /// The reply in its protocol, or the response back if it is another's.
    fn reply(response: Response) -> Result<Self::Reply, Response>;

    /// The timer that moves a pending tenure on (a refresh, a retry, a back-off); it goes
    /// when the tenure stops pending.
    fn waiter_timer(seq: u64) -> Self::Timer;

    /// Refuses what this backend cannot do, after the lifecycle's checks of name, lease,
    /// primitive and upgrade.
    fn refuse(&self, _a: &Acquire) -> Result<(), Error> {
        Ok(())
    }

    /// The lease a tenure gets when `asked` is asked for.
    fn lease(&self, asked: Duration) -> Duration {
        asked
    }

    /// A new tenure for `a`: what the backend keeps for it and the state its acquire starts
    /// in.
    fn tenure(
        &self,
        life: &Lifecycle<Self>,
        a: &Acquire,
        wait: Wait,
    ) -> (Self::Tenure, Self::Pending);

    /// The owner token of tenure `t` on the server.
    fn token(&self, t: &Tenure<Self>) -> OwnerToken;

    /// Starts the acquire of new tenure `seq`.
    fn start(&mut self, life: &mut Lifecycle<Self>, seq: u64);

    /// A reentrant acquire `op` of held `seq`, asked of a server that counts levels.
    fn reenter(&mut self, _life: &mut Lifecycle<Self>, _seq: u64, _op: OpId) {
        unreachable!("{} counts no levels on the server", Self::NAME)
    }

    /// Release `op` of one level of held `seq`, `count` levels staying, asked of a server
    /// that counts levels.
    fn release_level(&mut self, _life: &mut Lifecycle<Self>, _op: OpId, _seq: u64, _count: u32) {
        unreachable!("{} counts no levels on the server", Self::NAME)
    }

    /// Release `op` of the last level of hold `seq`: `t`, already forgotten (the
    /// application stops relying on the lock now, whatever the reply says).
    fn release(&mut self, life: &mut Lifecycle<Self>, op: OpId, seq: u64, t: Tenure<Self>);

    /// Extend `op` of held `seq` to `lease`.
    fn extend(&mut self, life: &mut Lifecycle<Self>, op: OpId, seq: u64, lease: Duration);

    /// Renews one batch of holds (hold, lease), each marked as renewing
    /// ([`Backend::RENEWS_HOLDS`] only). Settle each with [`Lifecycle::renewal`].
    fn renew(&mut self, life: &mut Lifecycle<Self>, items: &[(u64, Duration)]);

    /// The reply to a request, or `Err(Timeout)` when none came in time.
    fn on_reply(
        &mut self,
        life: &mut Lifecycle<Self>,
        req: InFlight<Self::Purpose>,
        reply: Result<Self::Reply, Error>,
    );

    /// News from the backend (all but [`Notice::Closed`], which closes the machine).
    fn notice(&mut self, life: &mut Lifecycle<Self>, notice: Notice);

    /// One of its timers is due.
    fn timer(&mut self, life: &mut Lifecycle<Self>, timer: Self::Timer);

    /// Hold `t` is lost for `reason` and forgotten: give back what the server may still
    /// keep for it (nothing is sent once the machine is closed).
    fn lost(&mut self, life: &mut Lifecycle<Self>, t: &Tenure<Self>, reason: &LostReason);

    /// Pending `t` gave up and is forgotten: leave the queue, and give back what it may have
    /// been granted.
    fn give_up(&mut self, life: &mut Lifecycle<Self>, t: &Tenure<Self>);

    /// The purpose a request gets when its reply is to be ignored.
    const IGNORED: Self::Purpose;

    /// The command that waits on a request of this purpose, if one does: it ends with
    /// `Closed` when the machine closes.
    fn command_of(purpose: &Self::Purpose) -> Option<OpId>;

    /// The extend or reentry of hold `seq` that a request of this purpose is, if it is one: it
    /// ends with `LockLost` when the hold is lost, and its reply is ignored from then on.
    fn acting_on(purpose: &Self::Purpose, seq: u64) -> Option<OpId>;

    /// Commands under way that the backend keeps apart from its requests (Redlock's rounds),
    /// ended now: those acting on lost hold `Some(seq)` as [`Backend::acting_on`], or all of
    /// them (`None`) when the machine closes.
    fn end_own(&mut self, _seq: Option<u64>) -> Vec<OpId> {
        Vec::new()
    }

    /// Proclaim `op`: held `seq` publishes `value` (checked) as the leader of the election of
    /// its name ([`Command::Proclaim`](crate::Command::Proclaim)); ends in
    /// [`Event::Proclaimed`]. Refused by a backend without elections.
    fn proclaim(
        &mut self,
        _life: &mut Lifecycle<Self>,
        _op: OpId,
        _seq: u64,
        _value: String,
    ) -> Result<(), Error> {
        Err(no_elections(Self::NAME))
    }

    /// Observe `op` of the election `name` (checked), until [`Backend::unobserve`].
    fn observe(
        &mut self,
        _life: &mut Lifecycle<Self>,
        _op: OpId,
        _name: String,
    ) -> Result<(), Error> {
        Err(no_elections(Self::NAME))
    }

    /// Ends observe `op` if it is one, forgetting it without an event: whether it was.
    fn unobserve(&mut self, _life: &mut Lifecycle<Self>, _op: OpId) -> bool {
        false
    }

    /// Every observe, forgotten (the machine closes; each ends with `Closed`).
    fn end_observers(&mut self) -> Vec<OpId> {
        Vec::new()
    }

    /// Tenure `seq` left the index.
    fn forgot(&mut self, _life: &mut Lifecycle<Self>, _seq: u64) {}

    /// Tenure `seq` became held.
    fn granted(&mut self, _life: &mut Lifecycle<Self>, _seq: u64) {}
}

/// What every tenure of one machine shares: the clock, requests, timers and outputs
/// ([`Base`]), and the tenure index.
#[derive(Clone, Debug)]
pub(crate) struct Lifecycle<B: Backend> {
    pub(crate) base: Base<B::Purpose, B::Timer>,
    pub(crate) tenures: Tenures<B>,
    /// What happened to the locks, per name and kind.
    stats: Counters,
    /// At most this many holds per renewal request.
    max_batch: usize,
    next_seq: u64,
}

/// How a renewal of one hold went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// The server kept it.
    Kept,
    /// The server says it is not ours.
    Refused,
    /// No answer that tells: try again soon.
    Failed,
}

impl<B: Backend> Lifecycle<B> {
    pub(crate) fn now(&self) -> Instant {
        self.base.now
    }

    pub(crate) fn closed(&self) -> bool {
        self.base.closed
    }

    pub(crate) fn send(&mut self, op: Op, purpose: B::Purpose) {
        self.base.send(op, purpose);
    }

    pub(crate) fn set_timer(&mut self, timer: B::Timer, at: Instant) {
        self.base.timers.set(Timer::Backend(timer), at);
    }

    pub(crate) fn clear_timer(&mut self, timer: B::Timer) {
        self.base.timers.clear(Timer::Backend(timer));
    }

    pub(crate) fn timer_is_set(&self, timer: B::Timer) -> bool {
        self.base.timers.is_set(Timer::Backend(timer))
    }

    pub(crate) fn finish(&mut self, event: Event) {
        self.base.finish(event);
    }

    pub(crate) fn event(&mut self, event: Event) {
        self.base.event(event);
    }

    /// The op of pending `seq`'s acquire.
    pub(crate) fn pending_op(&self, seq: u64) -> Option<OpId> {
        self.tenures.pending(seq).map(|w| w.op)
    }

    /// Counts `record` for tenure `seq`'s lock.
    fn record(&mut self, seq: u64, record: Observed) {
        if let Some(t) = self.tenures.get(seq) {
            self.stats.record(&t.name, t.kind, record);
        }
    }

    /// Pending `seq` found the lock held and waits for the holder: once granted, it counts as
    /// handed off.
    pub(crate) fn waits(&mut self, seq: u64) {
        if let Some(w) = self.tenures.pending_mut(seq) {
            w.waited = true;
        }
    }

    /// Pending `seq` becomes `held`, renewed at `renew_at` (or now, if that has passed): the
    /// acquire's terminal event.
    pub(crate) fn grant(&mut self, b: &mut B, seq: u64, held: Held<B::Held>, renew_at: Instant) {
        let (fencing_token, count, valid_until) =
            (held.fencing_token, held.count, held.valid_until);
        let now = self.base.now;
        let Some((op, started, handed_off)) = self.tenures.grant(seq, held, now) else {
            return;
        };
        let waited = now.saturating_duration_since(started);
        self.record(seq, Observed::Acquired { waited, handed_off });
        if B::RENEWS_HOLDS
            && let Some(h) = self.tenures.held_mut(seq)
        {
            h.watch = Watch::Due(renew_at.max(now));
        }
        let max_hold = self.tenures.get(seq).and_then(|t| t.max_hold);
        let timers = &mut self.base.timers;
        timers.clear(Timer::WaitDeadline(seq));
        timers.clear(Timer::Backend(B::waiter_timer(seq)));
        if let Some(max) = max_hold {
            timers.set(Timer::MaxHold(seq), now + max);
        }
        self.arm(seq);
        b.granted(self, seq);
        self.finish(Event::Acquired {
            op,
            hold: HoldId(seq),
            fencing_token,
            valid_until,
            count,
        });
    }

    /// Held `seq` is reentered by `op`: one level more, the acquire's terminal event.
    pub(crate) fn reentered(&mut self, seq: u64, op: OpId) {
        let Some(h) = self.tenures.held_mut(seq) else {
            return;
        };
        h.count += 1;
        let event = Event::Acquired {
            op,
            hold: HoldId(seq),
            fencing_token: h.fencing_token,
            valid_until: h.valid_until,
            count: h.count,
        };
        self.record(seq, Observed::Reentered);
        self.finish(event);
    }

    /// The server kept `seq` for `lease` from a request sent at `sent`: the validity moves on
    /// (never back) and the next renewal is due a third of a lease after `sent`. With
    /// `announce`, the application hears of it ([`Event::Renewed`]).
    pub(crate) fn renewed(&mut self, seq: u64, sent: Instant, lease: Duration, announce: bool) {
        let now = self.base.now;
        let Some(h) = self.tenures.held_mut(seq) else {
            return;
        };
        h.valid_until = h.valid_until.max(valid_until(sent, lease));
        if B::RENEWS_HOLDS && h.watch != Watch::Sent {
            h.watch = Watch::Due((sent + lease / 3).max(now));
        }
        let valid_until = h.valid_until;
        self.arm(seq);
        if announce {
            self.event(Event::Renewed {
                hold: HoldId(seq),
                valid_until,
            });
        }
    }

    /// The watchdog's renewal of `seq` for `lease`, sent at `sent`, settled.
    pub(crate) fn renewal(
        &mut self,
        b: &mut B,
        seq: u64,
        lease: Duration,
        sent: Instant,
        outcome: Renewal,
    ) {
        let Some(h) = self.tenures.held_mut(seq) else {
            return;
        };
        // No longer under way: `renewed` sets when the next is due, or the retry below.
        h.watch = Watch::Idle;
        match outcome {
            Renewal::Kept => self.renewed(seq, sent, lease, true),
            Renewal::Refused => self.lose(b, seq, LostReason::NotOwner),
            Renewal::Failed => {
                // Try again soon; the hold's validity decides when it is too late.
                h.watch = Watch::Due(self.base.now + retry_delay(lease));
                self.record(seq, Observed::RenewalFailed);
                self.arm(seq);
            }
        }
    }

    /// The answer to one watchdog request renewing `items` (hold, lease), sent at `sent`:
    /// whether the server kept each, or why the request failed.
    pub(crate) fn renewals(
        &mut self,
        b: &mut B,
        items: Vec<(u64, Duration)>,
        sent: Instant,
        kept: Result<Vec<bool>, Error>,
    ) {
        for (i, (seq, lease)) in items.into_iter().enumerate() {
            let outcome = match &kept {
                Ok(kept) if kept[i] => Renewal::Kept,
                Ok(_) => Renewal::Refused,
                Err(_) => Renewal::Failed,
            };
            self.renewal(b, seq, lease, sent, outcome);
        }
    }

    /// The answer to extend `op` of hold `seq` to `lease`, sent at `sent`: whether the server
    /// kept the hold (its lease is `lease` from now on), or why the request failed.
    pub(crate) fn extended(
        &mut self,
        b: &mut B,
        seq: u64,
        op: OpId,
        (lease, sent): (Duration, Instant),
        kept: Result<bool, Error>,
    ) {
        let hold = HoldId(seq);
        if self.tenures.held(seq).is_none() {
            let error = Error::LockLost { hold };
            return self.finish(Event::Failed { op, error });
        }
        match kept {
            Ok(true) => {
                if let Some(t) = self.tenures.get_mut(seq) {
                    t.lease = lease;
                }
                self.renewed(seq, sent, lease, false);
                if let Some(h) = self.tenures.held(seq) {
                    let valid_until = h.valid_until;
                    self.finish(Event::Extended {
                        op,
                        hold,
                        valid_until,
                    });
                }
            }
            Ok(false) => self.refused(b, seq, op),
            Err(error) => self.finish(Event::Failed { op, error }),
        }
    }

    /// A held tenure is gone: one [`Event::Lost`], what the server may keep is given back,
    /// and the commands under way on it end.
    pub(crate) fn lose(&mut self, b: &mut B, seq: u64, reason: LostReason) {
        if self.tenures.held(seq).is_none() {
            return;
        }
        self.record(seq, Observed::Lost(reason.clone()));
        let Some(t) = self.forget(b, seq) else { return };
        b.lost(self, &t, &reason);
        let hold = HoldId(seq);
        self.event(Event::Lost { hold, reason });
        let mut ended = Vec::new();
        for req in self.base.requests.values_mut() {
            if let Some(op) = B::acting_on(&req.purpose, seq) {
                req.purpose = B::IGNORED;
                ended.push(op);
            }
        }
        ended.extend(b.end_own(Some(seq)));
        for op in ended {
            let error = Error::LockLost { hold };
            self.finish(Event::Failed { op, error });
        }
    }

    /// The server says held `seq` is not ours while command `op` was acting on it.
    pub(crate) fn refused(&mut self, b: &mut B, seq: u64, op: OpId) {
        self.lose(b, seq, LostReason::NotOwner);
        let hold = HoldId(seq);
        self.finish(Event::Failed {
            op,
            error: Error::LockLost { hold },
        });
    }

    /// A pending acquire ends with `event`; with `cleanup`, it leaves the queue and gives
    /// back what it may have been granted.
    pub(crate) fn abandon(&mut self, b: &mut B, seq: u64, event: Event, cleanup: bool) {
        match &event {
            Event::NotAcquired { reason, .. } => self.record(seq, Observed::NotAcquired(*reason)),
            _ => self.record(seq, Observed::Failed),
        }
        let Some(t) = self.forget(b, seq) else { return };
        if cleanup && !self.base.closed {
            b.give_up(self, &t);
        }
        self.finish(event);
    }

    /// Pending `seq` fails with `error` and leaves the queue.
    pub(crate) fn fail(&mut self, b: &mut B, seq: u64, error: Error) {
        if let Some(op) = self.pending_op(seq) {
            self.abandon(b, seq, Event::Failed { op, error }, true);
        }
    }

    /// A request of pending `seq` failed: a waiter tries again after `delay`
    /// ([`Backend::waiter_timer`]), a try-acquire fails.
    pub(crate) fn retry(&mut self, b: &mut B, seq: u64, error: Error, delay: Duration) {
        let Some(w) = self.tenures.pending(seq) else {
            return;
        };
        if w.wait == Wait::No {
            self.fail(b, seq, error);
        } else {
            let at = self.base.now + delay;
            self.set_timer(B::waiter_timer(seq), at);
        }
    }

    /// Removes a tenure, everything that points at it and its timers; a hold's time is
    /// counted.
    fn forget(&mut self, b: &mut B, seq: u64) -> Option<Tenure<B>> {
        let t = self.tenures.remove(seq)?;
        if let State::Held(_) = t.state {
            let held = self.base.now.saturating_duration_since(t.since);
            self.stats.record(&t.name, t.kind, Observed::Ended { held });
        }
        let timers = &mut self.base.timers;
        for timer in [
            Timer::Renew,
            Timer::Expire,
            Timer::MaxHold,
            Timer::WaitDeadline,
        ] {
            timers.clear(timer(seq));
        }
        timers.clear(Timer::Backend(B::waiter_timer(seq)));
        b.forgot(self, seq);
        Some(t)
    }

    /// The holds to renew with `seq`: it and every other hold due within a sixth of its lease
    /// — but none whose validity has already run out (after a pause, say): its expiry, due
    /// as well, reports it lost, and a renewal would only keep the lock from others. Then,
    /// while the last request would go out with room in it ([`Config::max_batch`]), the holds
    /// due next within a third of the lease fill it, renewed that much early: renewals gather
    /// into full requests (and from then on are due together), where each burst would
    /// otherwise end with a part-empty one. Each is marked as renewing, with the lease it
    /// asks for.
    fn due_renewals(&mut self, seq: u64) -> Vec<(u64, Duration)> {
        let Some(t) = self.tenures.get(seq) else {
            return Vec::new();
        };
        let now = self.base.now;
        let (horizon, period) = (now + t.lease / 6, now + t.lease / 3);
        let mut due = vec![seq];
        // Each hold has one timer: its renewal's, or its expiry's when that comes first (a
        // retry due after it) — such a hold joins too while still valid. In the order their
        // renewals are due.
        let tenures = &self.tenures;
        let due_by = |by: Instant| {
            move |timer| match timer {
                Timer::Renew(s) | Timer::Expire(s) => match tenures.held(s).map(|h| h.watch) {
                    Some(Watch::Due(at)) if at <= by => Some((at, s)),
                    _ => None,
                },
                _ => None,
            }
        };
        let timers = &mut self.base.timers;
        let mut picked = timers.take_until(horizon, usize::MAX, due_by(horizon));
        let room = (self.max_batch - (1 + picked.len()) % self.max_batch) % self.max_batch;
        picked.extend(timers.take_until(period, room, due_by(period)));
        picked.sort_unstable();
        due.extend(picked.into_iter().map(|(_, s)| s));
        let mut items = Vec::with_capacity(due.len());
        for s in due {
            if let Some(Tenure {
                state: State::Held(h),
                lease,
                ..
            }) = self.tenures.get_mut(s)
                && let Watch::Due(_) = h.watch
            {
                if h.valid_until > now {
                    h.watch = Watch::Sent;
                    items.push((s, *lease));
                } else {
                    h.watch = Watch::Idle;
                }
            }
            self.arm(s);
        }
        items
    }

    /// Sets held `seq`'s one timer to its next deadline: its renewal if one is due by the end
    /// of its validity, or else that end. Fired, a renewal sends one (or, if the validity has
    /// run out meanwhile, none) and sets the expiry, which the renewal's answer moves on.
    fn arm(&mut self, seq: u64) {
        let Some(Tenure {
            state: State::Held(h),
            lease,
            ..
        }) = self.tenures.get(seq)
        else {
            return;
        };
        let expire = expire_at(h.valid_until, *lease);
        let (timer, other, at) = match h.watch {
            Watch::Due(renew) if renew <= expire => (Timer::Renew(seq), Timer::Expire(seq), renew),
            _ => (Timer::Expire(seq), Timer::Renew(seq), expire),
        };
        let timers = &mut self.base.timers;
        timers.clear(other);
        timers.set(timer, at);
    }
}

/// The machine behind one backend: the lifecycle and the backend's strategy.
/// [`Engine`](crate::Engine) runs one.
#[derive(Clone, Debug)]
pub(crate) struct Machine<B: Backend> {
    life: Lifecycle<B>,
    backend: B,
}

impl<B: Backend> Machine<B> {
    /// A machine at `now` for `backend`, with its requests timing out after
    /// `request_timeout`. `start` runs first (a subscription, say).
    pub(crate) fn new(
        config: &Config,
        backend: B,
        request_timeout: Duration,
        now: Instant,
        start: impl FnOnce(&mut B, &mut Lifecycle<B>),
    ) -> Self {
        let mut machine = Self {
            life: Lifecycle {
                base: Base::new(now, request_timeout),
                tenures: Tenures::new(),
                stats: Counters::default(),
                max_batch: config.max_batch.max(1),
                next_seq: 1,
            },
            backend,
        };
        start(&mut machine.backend, &mut machine.life);
        machine
    }

    pub(crate) fn base(&mut self) -> &mut Base<B::Purpose, B::Timer> {
        &mut self.life.base
    }

    pub(crate) fn base_ref(&self) -> &Base<B::Purpose, B::Timer> {
        &self.life.base
    }

    /// A snapshot of a held lock, `None` if it is not held.
    pub(crate) fn hold(&self, hold: HoldId) -> Option<HoldInfo> {
        self.life.tenures.info(hold.0)
    }

    /// See [`Engine::keep_observations`](crate::Engine::keep_observations).
    pub(crate) fn keep_observations(&mut self, on: bool) {
        self.life.stats.keep_observations(on);
    }

    pub(crate) fn poll_observation(&mut self) -> Option<Observation> {
        self.life.stats.poll_observation()
    }

    /// A snapshot of the counts, with the holds and waiters of now.
    pub(crate) fn stats(&self) -> Stats {
        let live = self.life.tenures.all().map(|t| {
            let held = matches!(t.state, State::Held(_));
            (t.name.as_str(), t.kind, held)
        });
        self.life.stats.snapshot(live)
    }

    /// Runs `cmd`: a cancel at once; any other command once its op id is registered
    /// ([`Base::begin`]), ending it with [`Event::Failed`] if it is refused.
    pub(crate) fn command(&mut self, cmd: Command) {
        let op = cmd.op();
        if let Command::Cancel { .. } = cmd {
            return self.cancel(op);
        }
        if !self.life.base.begin(op) {
            return;
        }
        let result = match cmd {
            Command::Acquire(a) => self.acquire(a),
            Command::Release { op, hold } => self.release(op, hold),
            Command::Extend { op, hold, lease } => self.extend(op, hold, lease),
            Command::Proclaim { op, hold, value } => self.proclaim(op, hold, value),
            Command::Observe { op, name } => {
                check_name(&name).and_then(|()| self.backend.observe(&mut self.life, op, name))
            }
            // The engine makes multi-locks of the machine's locks and never hands one on.
            Command::AcquireMulti(_) => Err(Error::InvalidArgument(
                "a backend's machine takes no multi-lock; the engine does".into(),
            )),
            Command::Cancel { .. } => Ok(()),
        };
        if let Err(error) = result {
            self.life.finish(Event::Failed { op, error });
        }
    }

    pub(crate) fn reply(&mut self, id: RequestId, reply: Reply) {
        if let Some(req) = self.life.base.answered(id) {
            let reply = unpack(reply, B::WIRE, B::reply);
            self.backend.on_reply(&mut self.life, req, reply);
        }
    }

    pub(crate) fn notice(&mut self, notice: Notice) {
        match notice {
            Notice::Closed => self.close(),
            notice => self.backend.notice(&mut self.life, notice),
        }
    }

    pub(crate) fn timer(&mut self, timer: Timer<B::Timer>) {
        let (life, b) = (&mut self.life, &mut self.backend);
        match timer {
            Timer::Request(id) => {
                if let Some(req) = life.base.answered(RequestId(id)) {
                    b.on_reply(life, req, Err(Error::Timeout));
                }
            }
            Timer::Renew(seq) => {
                let items = life.due_renewals(seq);
                for &(seq, _) in &items {
                    life.record(seq, Observed::Renewal);
                }
                for chunk in items.chunks(life.max_batch) {
                    b.renew(life, chunk);
                }
            }
            Timer::Expire(seq) => life.lose(b, seq, LostReason::Expired),
            Timer::MaxHold(seq) => life.lose(b, seq, LostReason::MaxHold),
            Timer::WaitDeadline(seq) => {
                if let Some(op) = life.pending_op(seq) {
                    let reason = NotAcquired::TimedOut;
                    life.abandon(b, seq, Event::NotAcquired { op, reason }, true);
                }
            }
            Timer::Backend(timer) => b.timer(life, timer),
        }
    }

    /// Hold `seq` is lost for `reason` (a multi-lock's member lapsed with the rest).
    pub(crate) fn lose(&mut self, seq: u64, reason: LostReason) {
        self.life.lose(&mut self.backend, seq, reason);
    }

    fn acquire(&mut self, a: Acquire) -> Result<(), Error> {
        let (lease, max_hold) = check_acquire(&a, B::NAME, B::OFFERS)?;
        let (life, b) = (&mut self.life, &mut self.backend);
        let reads = life.tenures.slot(Kind::Read, &a.name, a.owner).is_some();
        let writes = life.tenures.slot(Kind::Write, &a.name, a.owner).is_some();
        refuse_upgrade(&a, reads, writes)?;
        b.refuse(&a)?;

        // A lock's or read-write hold's owner reenters its tenure; every permit is a tenure
        // of its own.
        if let Some(seq) = life.tenures.slot(a.kind, &a.name, a.owner) {
            let hold = HoldId(seq);
            let t = life.tenures.get_mut(seq).ok_or(Error::NotHeld { hold })?;
            return match &mut t.state {
                State::Pending(w) => Err(Error::AlreadyWaiting { op: w.op }),
                State::Held(_) if B::SERVER_COUNTS => {
                    b.reenter(life, seq, a.op);
                    Ok(())
                }
                // Counted here: the server sees one tenure. Its validity is still ahead (the
                // expiry timer runs before any command).
                State::Held(_) => {
                    life.reentered(seq, a.op);
                    Ok(())
                }
            };
        }

        let seq = life.next_seq;
        life.next_seq += 1;
        let wait = match a.wait {
            Wait::Until(t) if t <= life.base.now => Wait::No,
            w => w,
        };
        let (data, state) = b.tenure(life, &a, wait);
        let lease = b.lease(lease);
        life.tenures.insert(
            seq,
            Tenure {
                name: a.name,
                seq,
                owner: a.owner,
                kind: a.kind,
                lease,
                max_hold,
                since: life.base.now,
                data,
                state: State::Pending(Box::new(Waiting {
                    op: a.op,
                    wait,
                    waited: false,
                    state,
                })),
            },
        );
        if let Wait::Until(deadline) = wait {
            life.base.timers.set(Timer::WaitDeadline(seq), deadline);
        }
        b.start(life, seq);
        Ok(())
    }

    fn release(&mut self, op: OpId, hold: HoldId) -> Result<(), Error> {
        let (life, b) = (&mut self.life, &mut self.backend);
        let seq = hold.0;
        let h = life.tenures.held_mut(seq).ok_or(Error::NotHeld { hold })?;
        h.count -= 1;
        let count = h.count;
        match count {
            0 => {
                life.record(seq, Observed::Released);
                let t = life.forget(b, seq).ok_or(Error::NotHeld { hold })?;
                b.release(life, op, seq, t);
            }
            _ if B::SERVER_COUNTS => b.release_level(life, op, seq, count),
            _ => life.finish(Event::Released { op, hold, count }),
        }
        Ok(())
    }

    fn extend(&mut self, op: OpId, hold: HoldId, lease: Duration) -> Result<(), Error> {
        let lease = check_lease(lease)?;
        if self.life.tenures.held(hold.0).is_none() {
            return Err(Error::NotHeld { hold });
        }
        self.backend.extend(&mut self.life, op, hold.0, lease);
        Ok(())
    }

    fn proclaim(&mut self, op: OpId, hold: HoldId, value: String) -> Result<(), Error> {
        check_value(&value)?;
        if self.life.tenures.held(hold.0).is_none() {
            return Err(Error::NotHeld { hold });
        }
        self.backend.proclaim(&mut self.life, op, hold.0, value)
    }

    fn cancel(&mut self, op: OpId) {
        let reason = NotAcquired::Cancelled;
        let event = Event::NotAcquired { op, reason };
        if let Some(seq) = self.life.tenures.pending_op(op) {
            self.life.abandon(&mut self.backend, seq, event, true);
        } else if self.backend.unobserve(&mut self.life, op) {
            self.life.finish(event);
        }
    }

    /// Ends the machine, for good: holds are lost, acquires and the commands under way fail
    /// with `Closed`, and nothing is sent from now on.
    fn close(&mut self) {
        let (life, b) = (&mut self.life, &mut self.backend);
        life.base.closed = true;
        for seq in life.tenures.seqs() {
            match life.tenures.get(seq).map(|t| &t.state) {
                Some(State::Held(_)) => life.lose(b, seq, LostReason::Closed),
                Some(State::Pending(w)) => {
                    let op = w.op;
                    let error = Error::Closed;
                    life.abandon(b, seq, Event::Failed { op, error }, false);
                }
                None => {}
            }
        }
        let requests = life.base.close();
        let waiting = requests
            .iter()
            .filter_map(|req| B::command_of(&req.purpose));
        let ended: Vec<OpId> = waiting
            .chain(b.end_own(None))
            .chain(b.end_observers())
            .collect();
        for op in ended {
            let error = Error::Closed;
            life.finish(Event::Failed { op, error });
        }
    }
}
