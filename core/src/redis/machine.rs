//! The Redis backend: reentrant, leased, fenced mutexes, semaphores and read-write locks with
//! FIFO hand-off over the scripts of [`crate::redis`], as a strategy of the lock lifecycle
//! ([`crate::lock`]).
//!
//! A pending acquire runs ACQUIRE (PERMIT-, RW-ACQUIRE) until the server grants it: first to
//! try or to join the queue, then to refresh its place there, which keeps its waiter lease
//! alive. The releasing script hands the lock to the first live waiter and wakes it on its
//! engine's channel; the hold it hands over lasts until the waiter's own deadline, which its
//! latest answered ACQUIRE set (PROTOCOL.md §5). The server counts a hold's levels, so a
//! reentry and the release of a level are requests too.
//!
//! The same machine runs the SQL backend: a [`Wire`] carries the scripts — as `EVALSHA` on
//! Redis ([`Lua`]), as calls of the database functions of the same names on SQL
//! ([`crate::sql`]) — and brings their replies back as the scripts give them.

mod election;

use core::fmt;
use core::time::Duration;
use std::collections::BTreeMap;

use crate::base::{InFlight, check_lease, retry_delay};
use crate::config::Config;
use crate::error::Error;
use crate::ids::ClientId;
use crate::jitter::Jitter;
use crate::lock::tenures::{Held, State, Tenure, Tenures};
use crate::lock::{Backend, Lifecycle, Machine, valid_until};
use crate::owner::{OwnerToken, owner_token, token_seq};
use crate::plant::{self, Plant};
use crate::redis::{
    self, AcquireReply, Fairness, LockKeys, Mode, RedisOp, ReleaseReply, RwHold, RwKeys,
    SemaphoreKeys, Value, Wake,
};
use crate::status::LockStatus;
use crate::time::{Instant, server_delay};
use crate::types::{
    Acquire, Event, HoldId, Kind, LostReason, NotAcquired, Notice, Op, OpId, Primitive, Response,
    Wait,
};

/// What carries the queue protocol's scripts to the server and their replies back.
pub(crate) trait Wire: Clone + fmt::Debug + Sized {
    /// The backend's name in refusals.
    const NAME: &'static str;
    /// The protocol its replies come in, for malformed-reply errors.
    const WIRE: &'static str;
    /// The primitives its server side offers.
    const OFFERS: &'static [Primitive];

    /// The request that runs `op` — a lock script on the locks `names` (the script's keys
    /// stand for them), or the wake-up channel's subscription.
    fn op(&self, op: RedisOp, names: &[&str]) -> Op;

    /// A reply as the script gives it, or the response back if it is another protocol's.
    fn reply(response: Response) -> Result<Value, Response>;

    /// A STATUS reply, as [`Wire::reply`] gave it.
    fn status(reply: &Value) -> Result<LockStatus, Error> {
        redis::parse_status(reply)
    }

    /// Refuses a lock name the server cannot store (after the engine's checks).
    fn refuse_name(&self, _name: &str) -> Result<(), Error> {
        Ok(())
    }

    /// It offers elections (§20): the PROCLAIM, RESIGN and LEADER scripts, and leaders'
    /// messages pushed to observers.
    const ELECTS: bool = false;

    /// The channel that tells election `name`'s observers to read LEADER.
    fn leader_channel(&self, name: &str) -> String {
        redis::leader_channel(name)
    }

    /// A message on an election's channel, as an observer of election `name` reads it:
    /// `None` if it concerns another election; else the news it carries, if any.
    fn leader_news<'a>(&self, _name: &str, payload: &'a [u8]) -> Option<LeaderNews<'a>> {
        Some(redis::parse_leader_message(payload))
    }

    /// Refuses a leader's value the server cannot store (after the engine's checks).
    fn refuse_value(&self, _value: &str) -> Result<(), Error> {
        Ok(())
    }

    /// The server pushes wake-ups (pub/sub, `NOTIFY`): the machine subscribes to its channel.
    fn pushes(&self) -> bool {
        true
    }

    /// With no wake-ups pushed, the longest a queued waiter waits before it looks again
    /// (jittered between half of it and all of it), and so how late it may find a hand-off or
    /// a freed lock. While the lock changes hands it looks sooner ([`Pending::next_look`]).
    fn poll(&self) -> Option<Duration> {
        None
    }
}

/// What a message on an election's channel says, if anything: a term, with the value
/// proclaimed in it (or `None`: the term ended).
pub(crate) type LeaderNews<'a> = Option<(u64, Option<&'a str>)>;

/// Redis: the scripts run with `EVALSHA`, wake-ups come by pub/sub.
#[derive(Clone, Debug)]
pub(crate) struct Lua;

impl Wire for Lua {
    const NAME: &'static str = "Redis";
    const WIRE: &'static str = "Redis";
    const ELECTS: bool = true;
    const OFFERS: &'static [Primitive] =
        &[Primitive::Lock, Primitive::Semaphore, Primitive::RwLock];

    fn op(&self, op: RedisOp, _names: &[&str]) -> Op {
        Op::Redis(op)
    }

    fn reply(response: Response) -> Result<Value, Response> {
        response.redis()
    }
}

/// What a Redis tenure is on the server.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// What it holds; its keys follow from that and the lock's name when a request is built
    /// ([`Keys::lock_keys`]), so that a held lock keeps no strings of its own here.
    pub(crate) target: Target,
    /// How its acquires and its final release treat waiters.
    pub(crate) fairness: Fairness,
    /// It has proclaimed itself an election's leader (or asked to): its final release
    /// resigns, telling the observers.
    pub(crate) leads: bool,
}

/// What a tenure holds: a lock, a permit of a semaphore, or a hold of a read-write lock. The
/// other primitives' keys are boxed: a lock's tenure, the common one, stays small.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Lock,
    Permit {
        keys: Box<SemaphoreKeys>,
        permits: u32,
    },
    Rw(Box<RwTarget>),
}

/// A hold of a read-write lock.
#[derive(Clone, Debug)]
pub(crate) struct RwTarget {
    keys: RwKeys,
    write: bool,
    /// A read hold beside the same owner's write hold: that hold's owner token.
    downgrade: Option<OwnerToken>,
}

impl Keys {
    /// The keys of tenure `token` on lock `name`, in the order the lock's scripts take them;
    /// for a permit or a read-write hold, `lock` is the hold's own hash.
    pub(crate) fn lock_keys(&self, name: &str, token: &str) -> LockKeys {
        match &self.target {
            Target::Lock => LockKeys::new(name),
            Target::Permit { keys, .. } => keys.lock_keys(token),
            Target::Rw(rw) => rw.keys.lock_keys(token, rw.write),
        }
    }

    /// The (PERMIT- or RW-)ACQUIRE of tenure `token` of lock `name` at `count` levels.
    fn acquire(
        &self,
        name: &str,
        token: &str,
        lease: Duration,
        count: u32,
        mode: Mode,
        waiter_lease: Duration,
    ) -> RedisOp {
        match &self.target {
            Target::Lock => redis::acquire(
                LockKeys::new(name),
                token,
                lease,
                count,
                mode,
                waiter_lease,
                self.fairness,
            ),
            Target::Permit { keys, permits } => redis::permit_acquire(
                keys,
                token,
                lease,
                *permits,
                mode,
                waiter_lease,
                self.fairness,
            ),
            Target::Rw(_) => {
                redis::rw_acquire(&self.rw_hold(token), lease, count, mode, waiter_lease)
            }
        }
    }

    /// The RELEASE of tenure `token` of lock `name` down to `count` levels (a permit has one).
    fn release(&self, name: &str, token: &str, count: u32) -> RedisOp {
        match &self.target {
            Target::Lock if self.leads && count == 0 => redis::resign(LockKeys::new(name), token),
            Target::Lock => redis::release(LockKeys::new(name), token, count, self.fairness),
            Target::Permit { keys, .. } => redis::permit_release(keys, token, self.fairness),
            Target::Rw(_) => redis::rw_release(&self.rw_hold(token), count),
        }
    }

    /// The DEQUEUE of waiter `token` of lock `name`, which gives up.
    fn dequeue(&self, name: &str, token: &str) -> RedisOp {
        match &self.target {
            Target::Lock => redis::dequeue(LockKeys::new(name), token),
            Target::Permit { keys, .. } => redis::permit_dequeue(keys, token),
            Target::Rw(_) => redis::rw_dequeue(&self.rw_hold(token)),
        }
    }

    fn rw_hold<'a>(&'a self, token: &'a str) -> RwHold<'a> {
        let Target::Rw(rw) = &self.target else {
            unreachable!("only a read-write tenure has a read-write hold")
        };
        RwHold {
            keys: &rw.keys,
            token,
            write: rw.write,
            downgrade: rw.downgrade.as_deref(),
        }
    }
}

/// One EXTEND for `items` (hold, lease), each asking the server to keep its lock for the
/// lease plus `lock_delay` (one Redis, and every node of Redlock).
pub(crate) fn extend<B: Backend>(
    tenures: &Tenures<B>,
    items: &[(u64, Duration)],
    lock_delay: Duration,
    key_and_token: impl Fn(&Tenure<B>) -> (String, OwnerToken),
) -> RedisOp {
    redis::extend(items.iter().map(|(s, lease)| {
        let t = tenures
            .get(*s)
            .expect("a hold being renewed is in the index");
        let (key, token) = key_and_token(t);
        (key, token, *lease + lock_delay)
    }))
}

/// Where a pending acquire stands in the lock's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A try-acquire: never queued (ACQUIRE `try`).
    Try,
    /// Not in the queue yet, or dropped from it: the next ACQUIRE joins (`wait`).
    Joining,
    /// In the queue since an ACQUIRE sent at `at` ran, when the lock's latest fencing token
    /// was `latest`: the next ACQUIRE refreshes the place (`refresh`). A hand-off with a
    /// larger token happened after that request ran, so `at` bounds it from below.
    Queued { at: Instant, latest: u64 },
}

impl Place {
    fn mode(self) -> Mode {
        match self {
            Place::Try => Mode::Try,
            Place::Joining => Mode::Wait,
            Place::Queued { .. } => Mode::Refresh,
        }
    }
}

/// A pending acquire: its place in the queue, where its ACQUIREs stand, and the fencing token
/// of a hand-off notice not yet acted on (it arrived while an ACQUIRE was under way, whose
/// reply may prove it fresh or stale).
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    place: Place,
    step: Step,
    woken: Option<u64>,
    /// Without pushed wake-ups: how many times the poll interval is halved for the next look
    /// (at most [`FAST_LOOK`]).
    pace: u8,
    /// Without pushed wake-ups: the largest latest fencing token a look has found (what the
    /// pace follows).
    seen: u64,
    /// The next refresh only looks (STATUS), as it comes before the place must be kept or
    /// the holder's lease runs out.
    look: bool,
}

/// Without pushed wake-ups, a waiter whose look found a new tenure (or that just queued)
/// looks again after the poll interval / 2^FAST_LOOK; each look that finds the same tenure
/// doubles that, up to the poll interval. A lock that changes hands often (a hot lock) is
/// looked at often, and found free or handed over soon after; one held long is looked at
/// every poll interval after a few looks, as before.
const FAST_LOOK: u8 = 3;

/// A pending acquire has at most one ACQUIRE under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// None: it waits for a wake-up or its refresh.
    Idle,
    /// One is; `free`: a non-fair release freed the lock and woke us meanwhile, so look again
    /// as soon as it is answered.
    Asking { free: bool },
}

impl Pending {
    fn asking(&self) -> bool {
        self.step != Step::Idle
    }

    /// The longest wait before the next look, after a look (an ACQUIRE that queued, or a
    /// STATUS) that found the lock's latest fencing token `latest`: `poll` halved
    /// [`FAST_LOOK`] times when that token is new to this waiter, else twice the previous
    /// wait, up to `poll`.
    fn next_look(&mut self, latest: u64, poll: Duration) -> Duration {
        let moved = latest > self.seen || self.seen == 0;
        self.seen = self.seen.max(latest);
        self.pace = if moved {
            FAST_LOOK
        } else {
            self.pace.saturating_sub(1)
        };
        (poll / (1 << self.pace))
            .max(Duration::from_millis(1))
            .min(poll)
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Purpose {
    /// ACQUIRE for a pending tenure.
    Acquire {
        seq: u64,
        mode: Mode,
    },
    /// STATUS of a queued waiter's lock, without pushed wake-ups: a look that locks nothing.
    Look {
        seq: u64,
    },
    /// ACQUIRE (refresh mode) by the owner of a held lock: reentry.
    Reenter {
        seq: u64,
        op: OpId,
        lease: Duration,
    },
    /// Watchdog EXTEND for these tenures, with the lease each asked for.
    Renew {
        items: Vec<(u64, Duration)>,
    },
    Release {
        seq: u64,
        op: OpId,
        count: u32,
    },
    Extend {
        seq: u64,
        op: OpId,
        lease: Duration,
    },
    /// Best-effort: give back what an abandoned tenure may have got. The reply is ignored.
    Cleanup,
    Subscribe,
    /// PROCLAIM by held `seq`.
    Proclaim {
        seq: u64,
        op: OpId,
    },
    /// SUBSCRIBE to an election's channel.
    Follow {
        channel: String,
    },
    /// LEADER read `read` for an observer.
    Leader {
        op: OpId,
        read: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RedisTimer {
    /// A queued waiter renews its waiter lease (and learns of a missed hand-off), or a failed
    /// ACQUIRE is tried again.
    Refresh(u64),
    /// Try the wake-up subscription again.
    Subscribe,
    /// An observer reads its election again.
    Observe(OpId),
    /// Try the election channels' subscriptions again.
    Follow,
}

/// The Redis protocol's strategy, over the wire `W`.
#[derive(Clone, Debug)]
pub(crate) struct Redis<W: Wire = Lua> {
    wire: W,
    /// Jitter of a polling waiter's looks ([`Wire::poll`]).
    jitter: Jitter,
    client_id: ClientId,
    waiter_lease: Duration,
    /// Added to every lease the server is asked to keep (not to the holder's validity):
    /// the lock-delay, 1% longer ([`server_delay`]).
    lock_delay: Duration,
    channel: String,
    /// The elections observed.
    elections: Elections,
    /// Acquires given up while their ACQUIRE was under way, with the DEQUEUE that undoes
    /// them: it is sent once that ACQUIRE is answered ([`Backend::give_up`]).
    undo: BTreeMap<u64, Op>,
}

use election::Elections;

type Life<W> = Lifecycle<Redis<W>>;

impl<W: Wire> Redis<W> {
    /// A machine at time `now` over `wire`. Its first output subscribes to its wake-up
    /// channel.
    pub(crate) fn machine(config: &Config, wire: W, now: Instant) -> Result<Machine<Self>, Error> {
        check_lease(config.waiter_lease)?;
        check_lease(config.request_timeout)?;
        if !config.lock_delay.is_zero() {
            check_lease(config.lock_delay)?;
        }
        let redis = Redis {
            jitter: Jitter::new(config.client_id),
            wire,
            client_id: config.client_id,
            waiter_lease: config.waiter_lease,
            lock_delay: server_delay(config.lock_delay),
            channel: redis::wake_channel(config.client_id),
            elections: Elections::default(),
            undo: BTreeMap::new(),
        };
        Ok(Machine::new(
            config,
            redis,
            config.request_timeout,
            now,
            Redis::subscribe,
        ))
    }

    fn subscribe(&mut self, life: &mut Life<W>) {
        if !self.wire.pushes() {
            return;
        }
        let channel = self.channel.clone();
        self.send(
            life,
            RedisOp::Subscribe { channel },
            &[],
            Purpose::Subscribe,
        );
    }

    /// Sends `op`, a script on the locks `names` (or the subscription), over the wire.
    fn send(&self, life: &mut Life<W>, op: RedisOp, names: &[&str], purpose: Purpose) {
        life.send(self.wire.op(op, names), purpose);
    }

    /// The waiter lease of one acquire: the client's, but never longer than the lease asked
    /// for. A hand-off gives the waiter a tenure that lasts what is left of its waiter lease,
    /// so this keeps a lock handed to a waiter that dies before it renews from outliving a
    /// lease. Like the lease, it is sent with the lock-delay added, and the waiter's own
    /// arithmetic uses it without.
    fn waiter_lease(&self, lease: Duration) -> Duration {
        self.waiter_lease.min(lease)
    }

    /// ACQUIRE of tenure `t` at `count` levels in `mode`.
    fn acquire_op(&self, t: &Tenure<Self>, count: u32, mode: Mode) -> RedisOp {
        t.data.acquire(
            &t.name,
            &self.token(t),
            t.lease + self.lock_delay,
            count,
            mode,
            self.waiter_lease(t.lease) + self.lock_delay,
        )
    }

    /// One EXTEND of `items` (hold, lease), over the wire.
    fn extend_op(&self, tenures: &Tenures<Self>, items: &[(u64, Duration)]) -> Op {
        let req = extend(tenures, items, self.lock_delay, |t| {
            let token = self.token(t);
            (t.data.lock_keys(&t.name, &token).lock().to_owned(), token)
        });
        let names: Vec<&str> = items
            .iter()
            .filter_map(|(s, _)| tenures.get(*s).map(|t| t.name.as_str()))
            .collect();
        self.wire.op(req, &names)
    }

    fn send_acquire(&mut self, life: &mut Life<W>, seq: u64) {
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        let State::Pending(w) = &mut t.state else {
            return;
        };
        w.state.step = Step::Asking { free: false };
        w.state.look = false;
        let mode = w.state.place.mode();
        let req = self.wire.op(self.acquire_op(t, 1, mode), &[&t.name]);
        life.clear_timer(RedisTimer::Refresh(seq));
        life.send(req, Purpose::Acquire { seq, mode });
    }

    fn on_acquire(
        &mut self,
        life: &mut Life<W>,
        seq: u64,
        mode: Mode,
        sent: Instant,
        reply: Result<Value, Error>,
    ) {
        let now = life.now();
        let Some(t) = life.tenures.get_mut(seq) else {
            // Given up meanwhile: whatever this ACQUIRE did, the DEQUEUE undoes it now.
            if let Some(dequeue) = self.undo.remove(&seq) {
                life.send(dequeue, Purpose::Cleanup);
            }
            return;
        };
        let lease = t.lease;
        let w = match &mut t.state {
            State::Pending(w) => w,
            State::Held(_) => {
                // A hand-off notice won the race; a successful claim still renews the lease.
                if let Ok(AcquireReply::Acquired { .. }) =
                    reply.and_then(|v| redis::parse_acquire(&v))
                {
                    life.renewed(seq, sent, lease, false);
                }
                return;
            }
        };
        let (op, waiting) = (w.op, w.wait != Wait::No);
        let p = &mut w.state;
        let free = std::mem::replace(&mut p.step, Step::Idle) == Step::Asking { free: true };
        match reply.and_then(|v| redis::parse_acquire(&v)) {
            Ok(AcquireReply::Acquired {
                fencing_token,
                count,
            }) => {
                let valid = valid_until(sent, lease);
                if valid > now {
                    let held = Held::new(fencing_token, count, valid, 0);
                    life.grant(self, seq, held, sent + lease / 3);
                } else if waiting {
                    // The reply came too late to use; ask again (the owner path renews it).
                    self.send_acquire(life, seq);
                } else {
                    life.fail(self, seq, Error::Timeout);
                }
            }
            Ok(AcquireReply::Busy) if mode == Mode::Try => {
                let reason = NotAcquired::Busy;
                life.abandon(self, seq, Event::NotAcquired { op, reason }, false);
            }
            Ok(AcquireReply::Queued { latest, expires }) if mode != Mode::Try => {
                w.waited = true;
                if !matches!(p.place, Place::Queued { at, .. } if at >= sent) {
                    p.place = Place::Queued { at: sent, latest };
                }
                let woken = p.woken.is_some();
                self.schedule_refresh(life, seq, expires, latest);
                if woken {
                    self.take_hand_off(life, seq);
                } else if free {
                    self.send_acquire(life, seq);
                }
            }
            Ok(AcquireReply::OtherPermits { permits })
                if matches!(t.data.target, Target::Permit { .. }) =>
            {
                let error = Error::InvalidArgument(format!(
                    "semaphore {:?} is in use with {permits} permits",
                    t.name
                ));
                life.abandon(self, seq, Event::Failed { op, error }, false);
            }
            Ok(AcquireReply::NotQueued) if mode == Mode::Refresh => {
                // Our place was given up (we were silent longer than the waiter lease): queue again.
                p.place = Place::Joining;
                self.send_acquire(life, seq);
            }
            Ok(other) => {
                let error =
                    Error::MalformedReply(format!("acquire in mode {mode:?} replied {other:?}"));
                life.fail(self, seq, error);
            }
            Err(error @ Error::MalformedReply(_)) => life.fail(self, seq, error),
            Err(error) => life.retry(self, seq, error, retry_delay(self.waiter_lease)),
        }
    }

    /// Sets queued waiter `seq`'s next refresh: in time to keep its place, and as soon as the
    /// holder's lease (`expires` from now, as the last reply found it) runs out — a holder
    /// that dies without releasing wakes nobody, so the queue head must come and take the
    /// lock itself. Without wake-ups it looks again sooner, after a look that found the
    /// lock's latest fencing token `latest` ([`Pending::next_look`]): a hand-off is found at
    /// the next look. A look that comes before the other two reads a plain lock's STATUS,
    /// which locks no row and commits nothing, instead of sending an ACQUIRE.
    fn schedule_refresh(
        &mut self,
        life: &mut Life<W>,
        seq: u64,
        expires: Option<Duration>,
        latest: u64,
    ) {
        let now = life.now();
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        let (wl, lock) = (
            self.waiter_lease(t.lease),
            matches!(t.data.target, Target::Lock),
        );
        let State::Pending(w) = &mut t.state else {
            return;
        };
        let p = &mut w.state;
        let Place::Queued { at: queued, .. } = p.place else {
            return;
        };
        let keep_place = queued + wl / 3;
        let lapse = expires.map(|pttl| now + pttl + Duration::from_millis(1));
        let mut at = lapse.map_or(keep_place, |l| l.min(keep_place)).max(now);
        p.look = false;
        if let Some(poll) = self.wire.poll() {
            let look = p.next_look(latest, poll);
            let look = now + self.jitter.between(look / 2, look);
            if look < at {
                (at, p.look) = (look, lock);
            }
        }
        life.set_timer(RedisTimer::Refresh(seq), at);
    }

    /// A queued waiter looks at its lock (STATUS) without taking or renewing anything.
    fn send_look(&mut self, life: &mut Life<W>, seq: u64) {
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        if let State::Pending(w) = &mut t.state {
            w.state.look = false;
        }
        let keys = t.data.lock_keys(&t.name, &self.token(t));
        let req = self.wire.op(redis::status(keys), &[&t.name]);
        life.send(req, Purpose::Look { seq });
    }

    /// What a look found. Handed to us after our place was last confirmed (a fencing token
    /// larger than that reply's `latest`): taken as a hand-off notice would be. Held by
    /// another: look again later. Free, expired, or ours in a way only an ACQUIRE can tell:
    /// ACQUIRE, which takes it.
    fn on_look(&mut self, life: &mut Life<W>, seq: u64, reply: Result<Value, Error>) {
        let Some(t) = life.tenures.get(seq) else {
            return;
        };
        let token = self.token(t);
        let Some(w) = life.tenures.pending_mut(seq) else {
            return;
        };
        let p = &mut w.state;
        if p.asking() {
            return; // the ACQUIRE under way decides
        }
        let Place::Queued { latest, .. } = p.place else {
            return self.send_acquire(life, seq);
        };
        match reply.and_then(|v| W::status(&v)) {
            Ok(s) if s.owner.as_deref() == Some(token.as_str()) && s.fencing_token > latest => {
                p.woken = Some(p.woken.map_or(s.fencing_token, |w| w.max(s.fencing_token)));
                self.take_hand_off(life, seq);
            }
            Ok(s) if s.owner.is_some() && s.owner.as_deref() != Some(token.as_str()) => {
                self.schedule_refresh(life, seq, s.ttl, s.latest_token);
            }
            _ => self.send_acquire(life, seq),
        }
    }

    fn on_reenter(
        &mut self,
        life: &mut Life<W>,
        seq: u64,
        op: OpId,
        lease: Duration,
        sent: Instant,
        reply: Result<Value, Error>,
    ) {
        let hold = HoldId(seq);
        let Some(h) = life.tenures.held_mut(seq) else {
            // Released or lost while the reentry was under way.
            let error = Error::LockLost { hold };
            return life.finish(Event::Failed { op, error });
        };
        h.data -= 1;
        match reply.and_then(|v| redis::parse_acquire(&v)) {
            Ok(AcquireReply::Acquired { fencing_token, .. })
                if fencing_token == h.fencing_token =>
            {
                life.renewed(seq, sent, lease, false);
                life.reentered(seq, op);
            }
            Ok(AcquireReply::Acquired { fencing_token, .. }) => {
                let error = Error::MalformedReply(format!(
                    "reentry got fencing token {fencing_token}, its tenure has {}",
                    h.fencing_token
                ));
                life.finish(Event::Failed { op, error });
            }
            Ok(_) => life.refused(self, seq, op),
            Err(error) => life.finish(Event::Failed { op, error }),
        }
    }

    fn on_release(
        &mut self,
        life: &mut Life<W>,
        seq: u64,
        op: OpId,
        count: u32,
        reply: Result<Value, Error>,
    ) {
        let hold = HoldId(seq);
        match reply.and_then(|v| redis::parse_release(&v)) {
            Ok(ReleaseReply::Freed | ReleaseReply::Held { .. }) => {
                life.finish(Event::Released { op, hold, count })
            }
            Ok(ReleaseReply::NotOwner) => life.refused(self, seq, op),
            Err(error) => life.finish(Event::Failed { op, error }),
        }
    }

    /// A wake-up: the server handed us the lock, or freed it for us to come and take.
    fn wake(&mut self, life: &mut Life<W>, payload: &[u8]) {
        let (token, hand_off) = match redis::parse_wake(payload) {
            Some(Wake::HandOff {
                token,
                fencing_token,
            }) => (token, Some(fencing_token)),
            Some(Wake::Free { token }) => (token, None),
            None => return,
        };
        let Some(seq) = token_seq(self.client_id, token) else {
            return;
        };
        let Some(w) = life.tenures.pending_mut(seq) else {
            return;
        };
        let p = &mut w.state;
        match hand_off {
            Some(fencing_token) => {
                p.woken = Some(p.woken.map_or(fencing_token, |w| w.max(fencing_token)));
                self.take_hand_off(life, seq);
            }
            None if p.asking() => p.step = Step::Asking { free: true },
            // Queued (or about to be): ask again now, to take the lock if it is still free.
            None => self.send_acquire(life, seq),
        }
    }

    /// Acts on a hand-off notice as soon as it can. The handed tenure lives until our waiter
    /// deadline, which our latest answered ACQUIRE set to at least its send time + waiter
    /// lease — provided the hand-off came after that request ran, which a fencing token
    /// larger than the reply's `latest` proves. A notice older than that reply is stale; one
    /// that cannot be proven either way is claimed with another ACQUIRE.
    fn take_hand_off(&mut self, life: &mut Life<W>, seq: u64) {
        let now = life.now();
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        let lease = t.lease;
        let State::Pending(w) = &mut t.state else {
            return;
        };
        let p = &mut w.state;
        let Some(fencing_token) = p.woken else { return };
        if p.asking() {
            return; // its reply decides
        }
        p.woken = None;
        let wl = self.waiter_lease(lease);
        match p.place {
            Place::Queued { at, latest } if fencing_token > latest => {
                let valid = valid_until(at, wl);
                if valid > now {
                    // Renewed as every hold is, a third of its lease after the request that
                    // confirmed it (at once if that has passed): a holder that is done by
                    // then, as under a hot lock, never renews it.
                    let renew_at = at + wl / 3;
                    life.grant(self, seq, Held::new(fencing_token, 1, valid, 0), renew_at);
                } else {
                    self.send_acquire(life, seq);
                }
            }
            Place::Queued { at, .. } if plant::on(Plant::StaleWakeUpTrusted) => {
                let valid = valid_until(at, wl);
                life.grant(self, seq, Held::new(fencing_token, 1, valid, 0), now);
            }
            Place::Queued { .. } => {} // stale: that hand-off ended before our latest request ran
            Place::Try | Place::Joining => self.send_acquire(life, seq),
        }
    }
}

impl<W: Wire> Backend for Redis<W> {
    const NAME: &'static str = W::NAME;
    const WIRE: &'static str = W::WIRE;
    const OFFERS: &'static [Primitive] = W::OFFERS;
    const SERVER_COUNTS: bool = true;
    const RENEWS_HOLDS: bool = true;

    type Tenure = Keys;
    type Pending = Pending;
    /// Reentrant acquires sent and not yet answered: the server's count is the granted levels
    /// plus these.
    type Held = u32;
    type Purpose = Purpose;
    type Timer = RedisTimer;
    type Reply = Value;

    fn reply(response: Response) -> Result<Value, Response> {
        W::reply(response)
    }

    fn waiter_timer(seq: u64) -> RedisTimer {
        RedisTimer::Refresh(seq)
    }

    fn refuse(&self, a: &Acquire) -> Result<(), Error> {
        if !a.fair && matches!(a.kind, Kind::Read | Kind::Write) {
            return Err(Error::InvalidArgument(
                "read-write locks are always fair (readers and writers are served in order)".into(),
            ));
        }
        self.wire.refuse_name(&a.name)
    }

    fn tenure(&self, life: &Life<W>, a: &Acquire, wait: Wait) -> (Keys, Pending) {
        let target = match a.kind {
            Kind::Mutex => Target::Lock,
            Kind::Semaphore { permits } => Target::Permit {
                keys: Box::new(SemaphoreKeys::new(&a.name)),
                permits,
            },
            Kind::Read | Kind::Write => {
                let write = a.kind == Kind::Write;
                // A read beside the same owner's write hold: downgrade.
                let downgrade = if write {
                    None
                } else {
                    life.tenures
                        .slot(Kind::Write, &a.name, a.owner)
                        .filter(|seq| life.tenures.held(*seq).is_some())
                        .and_then(|seq| life.tenures.get(seq))
                        .map(|t| self.token(t))
                };
                Target::Rw(Box::new(RwTarget {
                    keys: RwKeys::new(&a.name),
                    write,
                    downgrade,
                }))
            }
        };
        let fairness = if a.fair {
            Fairness::Fair
        } else {
            Fairness::NonFair
        };
        let pending = Pending {
            place: if wait == Wait::No {
                Place::Try
            } else {
                Place::Joining
            },
            step: Step::Idle,
            woken: None,
            pace: 0,
            seen: 0,
            look: false,
        };
        let keys = Keys {
            target,
            fairness,
            leads: false,
        };
        (keys, pending)
    }

    fn token(&self, t: &Tenure<Self>) -> OwnerToken {
        owner_token(self.client_id, t.seq)
    }

    fn start(&mut self, life: &mut Life<W>, seq: u64) {
        self.send_acquire(life, seq);
    }

    fn reenter(&mut self, life: &mut Life<W>, seq: u64, op: OpId) {
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        let State::Held(h) = &mut t.state else { return };
        // The server's count mirrors granted levels plus reentries under way.
        h.data += 1;
        let count = h.count + h.data;
        let req = self
            .wire
            .op(self.acquire_op(t, count, Mode::Refresh), &[&t.name]);
        let lease = t.lease;
        life.send(req, Purpose::Reenter { seq, op, lease });
    }

    fn release_level(&mut self, life: &mut Life<W>, op: OpId, seq: u64, count: u32) {
        if let Some(t) = life.tenures.get(seq) {
            let req = self
                .wire
                .op(t.data.release(&t.name, &self.token(t), count), &[&t.name]);
            life.send(req, Purpose::Release { seq, op, count });
        }
    }

    fn release(&mut self, life: &mut Life<W>, op: OpId, seq: u64, t: Tenure<Self>) {
        let req = t.data.release(&t.name, &self.token(&t), 0);
        self.send(
            life,
            req,
            &[&t.name],
            Purpose::Release { seq, op, count: 0 },
        );
    }

    fn extend(&mut self, life: &mut Life<W>, op: OpId, seq: u64, lease: Duration) {
        let req = self.extend_op(&life.tenures, &[(seq, lease)]);
        life.send(req, Purpose::Extend { seq, op, lease });
    }

    fn renew(&mut self, life: &mut Life<W>, items: &[(u64, Duration)]) {
        let req = self.extend_op(&life.tenures, items);
        let items = items.to_vec();
        life.send(req, Purpose::Renew { items });
    }

    fn on_reply(
        &mut self,
        life: &mut Life<W>,
        req: InFlight<Purpose>,
        reply: Result<Value, Error>,
    ) {
        let sent = req.sent_at;
        let from_reply = |plant| if plant::on(plant) { life.now() } else { sent };
        match req.purpose {
            Purpose::Acquire { seq, mode } => {
                let sent = from_reply(Plant::ValidityFromReply);
                self.on_acquire(life, seq, mode, sent, reply)
            }
            Purpose::Look { seq } => self.on_look(life, seq, reply),
            Purpose::Reenter { seq, op, lease } => {
                self.on_reenter(life, seq, op, lease, sent, reply)
            }
            Purpose::Renew { items } => {
                let sent = from_reply(Plant::RenewalFromReply);
                let kept = reply.and_then(|v| redis::parse_extend(&v, items.len()));
                life.renewals(self, items, sent, kept)
            }
            Purpose::Release { seq, op, count } => self.on_release(life, seq, op, count, reply),
            Purpose::Extend { seq, op, lease } => {
                let kept = reply
                    .and_then(|v| redis::parse_extend(&v, 1))
                    .map(|kept| kept[0]);
                life.extended(self, seq, op, (lease, sent), kept)
            }
            Purpose::Cleanup => {}
            Purpose::Proclaim { seq, op } => self.on_proclaim(life, seq, op, reply),
            Purpose::Follow { channel } => self.on_follow(life, channel, reply.is_ok()),
            Purpose::Leader { op, read } => self.on_leader(life, op, read, reply),
            Purpose::Subscribe => {
                if reply.is_err() {
                    let at = life.now() + retry_delay(self.waiter_lease);
                    life.set_timer(RedisTimer::Subscribe, at);
                }
            }
        }
    }

    fn notice(&mut self, life: &mut Life<W>, notice: Notice) {
        match notice {
            Notice::Connected => {
                if !life.closed() {
                    self.subscribe(life);
                    self.refollow(life, true);
                }
            }
            Notice::Message { channel, payload } => {
                if channel == self.channel {
                    self.wake(life, &payload);
                } else {
                    self.leader_message(life, &channel, &payload);
                }
            }
            // Held locks keep their local validity, which runs out unless a renewal gets
            // through after a reconnect. ZooKeeper's notices do not occur on Redis.
            Notice::Disconnected
            | Notice::Watch { .. }
            | Notice::SessionExpired
            | Notice::Closed => {}
        }
    }

    fn timer(&mut self, life: &mut Life<W>, timer: RedisTimer) {
        match timer {
            RedisTimer::Refresh(seq) => match life.tenures.pending(seq) {
                Some(w) if w.state.asking() => {}
                Some(w) if w.state.look && matches!(w.state.place, Place::Queued { .. }) => {
                    self.send_look(life, seq)
                }
                Some(_) => self.send_acquire(life, seq),
                None => {}
            },
            RedisTimer::Subscribe => self.subscribe(life),
            RedisTimer::Observe(op) => self.read(life, op),
            RedisTimer::Follow => self.refollow(life, false),
        }
    }

    fn proclaim(
        &mut self,
        life: &mut Life<W>,
        op: OpId,
        seq: u64,
        value: String,
    ) -> Result<(), Error> {
        election::check_elects::<W>()?;
        self.start_proclaim(life, op, seq, value)
    }

    fn observe(&mut self, life: &mut Life<W>, op: OpId, name: String) -> Result<(), Error> {
        election::check_elects::<W>()?;
        self.start_observe(life, op, name)
    }

    fn unobserve(&mut self, life: &mut Life<W>, op: OpId) -> bool {
        self.stop_observe(life, op)
    }

    fn end_observers(&mut self) -> Vec<OpId> {
        self.stop_observers()
    }

    /// Anything we may still hold on the server is given back — except a lease that ran out
    /// under lock-delay: the application may still be at work (it was paused, say), and the
    /// delay exists to keep the next holder away from it.
    fn lost(&mut self, life: &mut Life<W>, t: &Tenure<Self>, reason: &LostReason) {
        let give_back = match reason {
            LostReason::Expired => self.lock_delay.is_zero(),
            LostReason::MaxHold => true,
            _ => false,
        };
        if give_back && !life.closed() {
            self.send(
                life,
                t.data.release(&t.name, &self.token(t), 0),
                &[&t.name],
                Purpose::Cleanup,
            );
        }
    }

    /// Leaves the queue, and passes the lock on if it was already handed to us — once the
    /// ACQUIRE under way, if any, is answered: a transport may run requests in another order
    /// than they were sent (a pool of connections does), and an ACQUIRE that ran after the
    /// DEQUEUE would queue a waiter nobody refreshes, ahead of the others until its waiter
    /// lease ends, or take the lock for nobody until its lease ends.
    fn give_up(&mut self, life: &mut Life<W>, t: &Tenure<Self>) {
        let dequeue = t.data.dequeue(&t.name, &self.token(t));
        let dequeue = self.wire.op(dequeue, &[&t.name]);
        match &t.state {
            State::Pending(w) if w.state.asking() => {
                self.undo.insert(t.seq, dequeue);
            }
            _ => life.send(dequeue, Purpose::Cleanup),
        }
    }

    const IGNORED: Purpose = Purpose::Cleanup;

    fn command_of(purpose: &Purpose) -> Option<OpId> {
        match *purpose {
            Purpose::Reenter { op, .. }
            | Purpose::Release { op, .. }
            | Purpose::Extend { op, .. }
            | Purpose::Proclaim { op, .. } => Some(op),
            _ => None,
        }
    }

    fn acting_on(purpose: &Purpose, seq: u64) -> Option<OpId> {
        match *purpose {
            Purpose::Extend { seq: s, op, .. }
            | Purpose::Reenter { seq: s, op, .. }
            | Purpose::Proclaim { seq: s, op }
                if s == seq =>
            {
                Some(op)
            }
            _ => None,
        }
    }
}
