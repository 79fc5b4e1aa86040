//! The Redisson-compatible lock, as a strategy of the lock lifecycle ([`crate::lock`]).
//!
//! An acquire runs REDISSON-ACQUIRE; a held lock answers with the holder's TTL. A waiter then
//! listens on the lock's channel (one subscription per name, kept while the client runs) and
//! tries again when a release speaks there, or when the holder's TTL runs out (a holder that
//! dies publishes nothing) — at the latest after one waiter lease, in case a message was lost
//! with a pub/sub connection. Waiters race for a freed lock: there is no queue and no
//! hand-off, as with Redisson. Reentrancy is counted by the lifecycle; the server sees one
//! field per tenure. Holds are renewed by the watchdog with REDISSON-EXTEND, like Redisson's.

use core::time::Duration;
use std::collections::BTreeMap;

use crate::base::{InFlight, check_lease, retry_delay};
use crate::config::Config;
use crate::error::Error;
use crate::ids::ClientId;
use crate::lock::tenures::{Held, State, Tenure};
use crate::lock::{Backend, Lifecycle, Machine, valid_until};
use crate::owner::OwnerToken;
use crate::plant::{self, Plant};
use crate::redis::{RedisOp, Value};
use crate::redisson::{self, AcquireReply, Keys};
use crate::time::Instant;
use crate::types::{
    Acquire, Event, HoldId, LostReason, NotAcquired, Notice, Op, OpId, Primitive, Response, Wait,
};

/// A pending acquire has at most one REDISSON-ACQUIRE under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pending {
    /// None: it waits for its channel, its holder's TTL or a retry.
    Idle,
    /// One is; `woken`: its channel spoke meanwhile, so try again once it is answered.
    Asking { woken: bool },
}

#[derive(Clone, Debug)]
pub(crate) enum Purpose {
    Acquire {
        seq: u64,
    },
    Subscribe {
        channel: String,
    },
    /// Watchdog REDISSON-EXTEND for these tenures, with the lease each asked for.
    Renew {
        items: Vec<(u64, Duration)>,
    },
    Release {
        seq: u64,
        op: OpId,
    },
    Extend {
        seq: u64,
        op: OpId,
        lease: Duration,
    },
    /// Best-effort: give back what an abandoned or lost tenure may hold. Ignored.
    Cleanup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RedissonTimer {
    /// A waiter tries again (its holder's TTL ran out, or a request failed).
    Retry(u64),
    /// Subscribe again to the channels of waiters whose subscription failed.
    Subscribe,
}

/// The Redisson-compatible strategy.
#[derive(Clone, Debug)]
pub(crate) struct Redisson {
    client_id: ClientId,
    /// The longest a waiter goes without trying again.
    look_again: Duration,
    /// Channels subscribed (`true`) or being subscribed (`false`).
    channels: BTreeMap<String, bool>,
}

type Life = Lifecycle<Redisson>;

impl Redisson {
    pub(crate) fn machine(config: &Config, now: Instant) -> Result<Machine<Redisson>, Error> {
        check_lease(config.waiter_lease)?;
        check_lease(config.request_timeout)?;
        if !config.lock_delay.is_zero() {
            return Err(Error::InvalidConfig(
                "lock-delay needs dlock's own Redis layout: a Redisson client would take a \
                 lapsed lock at once"
                    .into(),
            ));
        }
        let backend = Redisson {
            client_id: config.client_id,
            look_again: config.waiter_lease,
            channels: BTreeMap::new(),
        };
        Ok(Machine::new(
            config,
            backend,
            config.request_timeout,
            now,
            |_, _| {},
        ))
    }

    fn send(life: &mut Life, op: RedisOp, purpose: Purpose) {
        life.send(Op::Redis(op), purpose);
    }

    fn send_acquire(&mut self, life: &mut Life, seq: u64) {
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        let State::Pending(w) = &mut t.state else {
            return;
        };
        w.state = Pending::Asking { woken: false };
        let op = redisson::acquire(&t.data, &self.token(t), t.lease);
        life.clear_timer(RedissonTimer::Retry(seq));
        Redisson::send(life, op, Purpose::Acquire { seq });
    }

    /// The pending tenures that wait on `channel`.
    fn waiting_on(life: &Life, channel: &str) -> Vec<u64> {
        life.tenures
            .seqs()
            .into_iter()
            .filter(|seq| {
                life.tenures.get(*seq).is_some_and(|t| {
                    t.data.channel == channel && life.tenures.pending(*seq).is_some()
                })
            })
            .collect()
    }

    /// Subscribes to the channel of pending `seq` unless that is done or under way.
    fn listen(&mut self, life: &mut Life, seq: u64) {
        let Some(t) = life.tenures.get(seq) else {
            return;
        };
        if self.channels.contains_key(&t.data.channel) {
            return;
        }
        let channel = t.data.channel.clone();
        self.channels.insert(channel.clone(), false);
        let op = RedisOp::Subscribe {
            channel: channel.clone(),
        };
        Redisson::send(life, op, Purpose::Subscribe { channel });
    }

    /// The channel spoke, or the subscription to it is in place: every waiter on it tries
    /// again (one that is asking does once it is answered).
    fn wake(&mut self, life: &mut Life, channel: &str) {
        for seq in Redisson::waiting_on(life, channel) {
            match life.tenures.pending_mut(seq) {
                Some(w) if w.state != Pending::Idle => w.state = Pending::Asking { woken: true },
                Some(_) => self.send_acquire(life, seq),
                None => {}
            }
        }
    }

    fn on_acquire(
        &mut self,
        life: &mut Life,
        seq: u64,
        sent: Instant,
        reply: Result<Value, Error>,
    ) {
        let now = life.now();
        let Some(t) = life.tenures.get_mut(seq) else {
            return;
        };
        let (lease, channel) = (t.lease, t.data.channel.clone());
        let State::Pending(w) = &mut t.state else {
            return;
        };
        let (op, waiting) = (w.op, w.wait != Wait::No);
        let woken =
            std::mem::replace(&mut w.state, Pending::Idle) == Pending::Asking { woken: true };
        let reply = reply.and_then(|v| redisson::parse_acquire(&v));
        // It waits for the holder.
        w.waited |= waiting && matches!(reply, Ok(AcquireReply::Busy { .. }));
        match reply {
            Ok(AcquireReply::Acquired { fencing_token }) => {
                let valid = valid_until(sent, lease);
                if valid > now {
                    life.grant(
                        self,
                        seq,
                        Held::new(fencing_token, 1, valid, ()),
                        sent + lease / 3,
                    );
                } else if waiting {
                    // The reply came too late to rely on: ask again (the field renews it).
                    self.send_acquire(life, seq);
                } else {
                    life.fail(self, seq, Error::Timeout);
                }
            }
            Ok(AcquireReply::Busy { .. }) if !waiting => {
                let reason = NotAcquired::Busy;
                life.abandon(self, seq, Event::NotAcquired { op, reason }, false);
            }
            Ok(AcquireReply::Busy { ttl }) => match self.channels.get(&channel) {
                Some(true) if woken => self.send_acquire(life, seq),
                Some(true) => {
                    // Look again when the holder's TTL runs out: a holder that dies publishes
                    // nothing.
                    let wait = ttl.map_or(self.look_again, |ttl| {
                        (ttl + Duration::from_millis(1)).min(self.look_again)
                    });
                    life.set_timer(RedissonTimer::Retry(seq), now + wait);
                }
                // Once subscribed, every waiter on the channel tries again.
                Some(false) => {}
                None => self.listen(life, seq),
            },
            Err(error @ Error::MalformedReply(_)) => life.fail(self, seq, error),
            Err(error) => life.retry(self, seq, error, retry_delay(self.look_again)),
        }
    }

    fn extend_op(&self, life: &Life, items: &[(u64, Duration)]) -> RedisOp {
        redisson::extend(items.iter().filter_map(|(seq, lease)| {
            let t = life.tenures.get(*seq)?;
            Some((t.data.lock.as_str(), self.token(t), *lease))
        }))
    }
}

impl Backend for Redisson {
    const NAME: &'static str = "Redisson-compatible Redis";
    const WIRE: &'static str = "Redis";
    const OFFERS: &'static [Primitive] = &[Primitive::Lock];
    const SERVER_COUNTS: bool = false;
    const RENEWS_HOLDS: bool = true;

    type Tenure = Keys;
    type Pending = Pending;
    type Held = ();
    type Purpose = Purpose;
    type Timer = RedissonTimer;
    type Reply = Value;

    fn reply(response: Response) -> Result<Value, Response> {
        response.redis()
    }

    fn waiter_timer(seq: u64) -> RedissonTimer {
        RedissonTimer::Retry(seq)
    }

    fn tenure(&self, _: &Life, a: &Acquire, _: Wait) -> (Keys, Pending) {
        (Keys::new(&a.name), Pending::Idle)
    }

    /// The tenure's owner token is its hash field.
    fn token(&self, t: &Tenure<Self>) -> OwnerToken {
        redisson::field(self.client_id, t.seq)
    }

    fn start(&mut self, life: &mut Life, seq: u64) {
        self.send_acquire(life, seq);
    }

    fn release(&mut self, life: &mut Life, op: OpId, seq: u64, t: Tenure<Self>) {
        let req = redisson::release(&t.data, &self.token(&t));
        Redisson::send(life, req, Purpose::Release { seq, op });
    }

    fn extend(&mut self, life: &mut Life, op: OpId, seq: u64, lease: Duration) {
        let req = self.extend_op(life, &[(seq, lease)]);
        Redisson::send(life, req, Purpose::Extend { seq, op, lease });
    }

    fn renew(&mut self, life: &mut Life, items: &[(u64, Duration)]) {
        let req = self.extend_op(life, items);
        let items = items.to_vec();
        Redisson::send(life, req, Purpose::Renew { items });
    }

    fn on_reply(&mut self, life: &mut Life, req: InFlight<Purpose>, reply: Result<Value, Error>) {
        let sent = req.sent_at;
        let from_reply = |plant| if plant::on(plant) { life.now() } else { sent };
        match req.purpose {
            Purpose::Acquire { seq } => {
                let sent = from_reply(Plant::ValidityFromReply);
                self.on_acquire(life, seq, sent, reply)
            }
            Purpose::Subscribe { channel } => {
                if reply.is_ok() {
                    self.channels.insert(channel.clone(), true);
                    self.wake(life, &channel);
                } else {
                    self.channels.remove(&channel);
                    let at = life.now() + retry_delay(self.look_again);
                    life.set_timer(RedissonTimer::Subscribe, at);
                }
            }
            Purpose::Renew { items } => {
                let sent = from_reply(Plant::RenewalFromReply);
                let kept = reply.and_then(|v| redisson::parse_extend(&v, items.len()));
                life.renewals(self, items, sent, kept)
            }
            Purpose::Release { seq, op } => {
                let hold = HoldId(seq);
                match reply.and_then(|v| redisson::parse_release(&v)) {
                    Ok(true) => life.finish(Event::Released { op, hold, count: 0 }),
                    Ok(false) => life.refused(self, seq, op),
                    Err(error) => life.finish(Event::Failed { op, error }),
                }
            }
            Purpose::Extend { seq, op, lease } => {
                let kept = reply
                    .and_then(|v| redisson::parse_extend(&v, 1))
                    .map(|kept| kept[0]);
                life.extended(self, seq, op, (lease, sent), kept)
            }
            Purpose::Cleanup => {}
        }
    }

    fn notice(&mut self, life: &mut Life, notice: Notice) {
        match notice {
            // A new pub/sub connection has none of our subscriptions: every waiter listens
            // again (and tries again once it does).
            Notice::Connected => {
                self.channels.clear();
                if !life.closed() {
                    for seq in life.tenures.pending_where(|_| true) {
                        self.listen(life, seq);
                    }
                }
            }
            Notice::Message { channel, .. } => {
                if self.channels.contains_key(&channel) {
                    self.wake(life, &channel);
                }
            }
            Notice::Disconnected
            | Notice::Watch { .. }
            | Notice::SessionExpired
            | Notice::Closed => {}
        }
    }

    fn timer(&mut self, life: &mut Life, timer: RedissonTimer) {
        match timer {
            RedissonTimer::Retry(seq) => {
                if life
                    .tenures
                    .pending(seq)
                    .is_some_and(|w| w.state == Pending::Idle)
                {
                    self.send_acquire(life, seq);
                }
            }
            RedissonTimer::Subscribe => {
                for seq in life.tenures.pending_where(|_| true) {
                    self.listen(life, seq);
                }
            }
        }
    }

    /// A lease that ran out or a max hold that was reached gives the lock back, if the field
    /// still holds it (a late renewal may have kept it).
    fn lost(&mut self, life: &mut Life, t: &Tenure<Self>, reason: &LostReason) {
        if matches!(reason, LostReason::Expired | LostReason::MaxHold) && !life.closed() {
            let req = redisson::release(&t.data, &self.token(t));
            Redisson::send(life, req, Purpose::Cleanup);
        }
    }

    /// An acquire under way (or one whose reply was lost) may still take the lock: the
    /// release runs after it on the connection and gives it back.
    fn give_up(&mut self, life: &mut Life, t: &Tenure<Self>) {
        Redisson::send(
            life,
            redisson::release(&t.data, &self.token(t)),
            Purpose::Cleanup,
        );
    }

    const IGNORED: Purpose = Purpose::Cleanup;

    fn command_of(purpose: &Purpose) -> Option<OpId> {
        match *purpose {
            Purpose::Release { op, .. } | Purpose::Extend { op, .. } => Some(op),
            _ => None,
        }
    }

    fn acting_on(purpose: &Purpose, seq: u64) -> Option<OpId> {
        match *purpose {
            Purpose::Extend { seq: s, op, .. } if s == seq => Some(op),
            _ => None,
        }
    }
}
