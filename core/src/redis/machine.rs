//! The machine behind a Redis backend: reentrant, leased, fenced mutexes with FIFO hand-off
//! over the scripts of [`crate::redis`].

use core::time::Duration;

use crate::base::{
    Base, Commands, InFlight, check_acquire, check_lease, refuse_upgrade, retry_delay, unpack,
};
use crate::config::Config;
use crate::status::HoldInfo;
use crate::error::Error;
use crate::owner::{owner_token, token_seq};
use crate::redis::{
    self, AcquireReply, Fairness, LockKeys, Mode, RedisOp, ReleaseReply, RwKeys, SemaphoreKeys,
    Value, Wake,
};
use crate::tenures::{self, Held, Target, Tenures};
use crate::time::{Instant, drift};
use crate::timers::Timer;
use crate::types::{
    Acquire, ClientId, Event, HoldId, Kind, LostReason, NotAcquired, Notice, Op, OpId, Primitive,
    Reply, RequestId, Response, Wait,
};

type Tenure = tenures::Tenure<Pending>;
type State = tenures::State<Pending>;

#[derive(Debug)]
struct Pending {
    op: OpId,
    wait: Wait,
    /// Mode of the next ACQUIRE: `Wait` until the server has queued us, then `Refresh`.
    mode: Mode,
    /// Send time of the latest ACQUIRE the server answered with "queued", and the lock's
    /// latest fencing token when it ran. A hand-off with a larger token happened after that
    /// request ran, so its send time bounds the hand-off from below.
    queued: Option<(Instant, u64)>,
    /// The fencing token of a hand-off notice not yet acted on (it arrived while a request
    /// was under way, whose reply may prove it fresh).
    woken: Option<u64>,
    /// A non-fair release freed the lock and woke us while a request was under way: look
    /// again as soon as it is answered.
    free: bool,
    in_flight: bool,
}

impl tenures::Pending for Pending {
    fn op(&self) -> OpId {
        self.op
    }
}

#[derive(Debug)]
pub(crate) enum Purpose {
    /// ACQUIRE for a pending tenure.
    Acquire {
        seq: u64,
        mode: Mode,
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
}

/// The Redis protocol's machine: [`Engine`](crate::Engine) runs it for a Redis backend.
#[derive(Debug)]
pub(crate) struct Machine {
    base: Base<Purpose>,
    client_id: ClientId,
    waiter_lease: Duration,
    /// Added to every lease the server is asked to keep (not to the holder's validity).
    lock_delay: Duration,
    max_batch: usize,
    channel: String,
    next_seq: u64,
    tenures: Tenures<Pending>,
}

impl Machine {
    /// A new machine at time `now`. Its first output subscribes to its wake-up channel.
    pub(crate) fn new(config: &Config, now: Instant) -> Result<Self, Error> {
        check_lease(config.waiter_lease)?;
        check_lease(config.request_timeout)?;
        if !config.lock_delay.is_zero() {
            check_lease(config.lock_delay)?;
        }
        let mut machine = Self {
            base: Base::new(now, config.request_timeout),
            client_id: config.client_id,
            waiter_lease: config.waiter_lease,
            lock_delay: config.lock_delay,
            max_batch: config.max_batch.max(1),
            channel: redis::wake_channel(config.client_id),
            next_seq: 1,
            tenures: Tenures::new(),
        };
        machine.subscribe();
        Ok(machine)
    }

    // --- replies ---

    fn on_reply(&mut self, req: InFlight<Purpose>, reply: Result<Value, Error>) {
        let sent = req.sent_at;
        match req.purpose {
            Purpose::Acquire { seq, mode } => self.on_acquire(seq, mode, sent, reply),
            Purpose::Reenter { seq, op, lease } => self.on_reenter(seq, op, lease, sent, reply),
            Purpose::Renew { items } => self.on_renew(items, sent, reply),
            Purpose::Release { seq, op, count } => self.on_release(seq, op, count, reply),
            Purpose::Extend { seq, op, lease } => self.on_extend(seq, op, lease, sent, reply),
            Purpose::Cleanup => {}
            Purpose::Subscribe => {
                if reply.is_err() {
                    self.base
                        .timers
                        .set(Timer::Subscribe, self.base.now + self.retry_delay());
                }
            }
        }
    }

    fn on_acquire(&mut self, seq: u64, mode: Mode, sent: Instant, reply: Result<Value, Error>) {
        let Some(t) = self.tenures.get_mut(seq) else {
            return;
        };
        let lease = t.lease;
        let p = match &mut t.state {
            State::Pending(p) => p,
            State::Held(_) => {
                // A hand-off notice won the race; a successful claim still renews the lease.
                if let Ok(AcquireReply::Acquired { .. }) =
                    reply.and_then(|v| redis::parse_acquire(&v))
                {
                    self.renewed(seq, sent, lease, false);
                }
                return;
            }
        };
        p.in_flight = false;
        let op = p.op;
        let waiting = p.wait != Wait::No;
        match reply.and_then(|v| redis::parse_acquire(&v)) {
            Ok(AcquireReply::Acquired {
                fencing_token,
                count,
            }) => {
                let valid_until = sent + lease - drift(lease);
                if valid_until > self.base.now {
                    self.held(seq, fencing_token, count, valid_until, sent + lease / 3);
                } else if waiting {
                    // The reply came too late to use; ask again (the owner path renews it).
                    self.send_acquire(seq);
                } else {
                    self.abandon(
                        seq,
                        Event::Failed {
                            op,
                            error: Error::Timeout,
                        },
                        true,
                    );
                }
            }
            Ok(AcquireReply::Busy) if mode == Mode::Try => {
                self.abandon(
                    seq,
                    Event::NotAcquired {
                        op,
                        reason: NotAcquired::Busy,
                    },
                    false,
                );
            }
            Ok(AcquireReply::Queued { latest, expires }) if mode != Mode::Try => {
                if p.queued.is_none_or(|(at, _)| at < sent) {
                    p.queued = Some((sent, latest));
                }
                p.mode = Mode::Refresh;
                let woken = p.woken.is_some();
                let free = std::mem::take(&mut p.free);
                // Refresh our place in the queue in time to keep it, and look again as soon as
                // the holder's lease runs out: a holder that dies without releasing wakes
                // nobody, so the queue head must come and take the lock itself.
                let keep_place = sent + waiter_lease(self.waiter_lease, lease) / 3;
                let lapse = expires.map(|pttl| self.base.now + pttl + Duration::from_millis(1));
                let at = lapse
                    .map_or(keep_place, |l| l.min(keep_place))
                    .max(self.base.now);
                self.base.timers.set(Timer::Refresh(seq), at);
                if woken {
                    self.take_hand_off(seq);
                } else if free {
                    self.send_acquire(seq);
                }
            }
            Ok(AcquireReply::OtherPermits { permits })
                if matches!(t.target, Target::Permit { .. }) =>
            {
                let error = Error::InvalidArgument(format!(
                    "semaphore {:?} is in use with {permits} permits",
                    t.name
                ));
                self.abandon(seq, Event::Failed { op, error }, false);
            }
            Ok(AcquireReply::NotQueued) if mode == Mode::Refresh => {
                // Our place was given up (we were silent longer than the waiter lease): queue again.
                p.mode = Mode::Wait;
                p.queued = None;
                self.send_acquire(seq);
            }
            Ok(other) => {
                let error =
                    Error::MalformedReply(format!("acquire in mode {mode:?} replied {other:?}"));
                self.abandon(seq, Event::Failed { op, error }, true);
            }
            Err(error @ Error::MalformedReply(_)) => {
                self.abandon(seq, Event::Failed { op, error }, true)
            }
            Err(error) if !waiting => self.abandon(seq, Event::Failed { op, error }, true),
            Err(_) => {
                let at = self.base.now + self.retry_delay();
                self.base.timers.set(Timer::Refresh(seq), at);
            }
        }
    }

    fn on_reenter(
        &mut self,
        seq: u64,
        op: OpId,
        lease: Duration,
        sent: Instant,
        reply: Result<Value, Error>,
    ) {
        let hold = HoldId(seq);
        let Some(Tenure {
            state: State::Held(h),
            ..
        }) = self.tenures.get_mut(seq)
        else {
            // Released or lost while the reentry was under way.
            return self.finish(Event::Failed {
                op,
                error: Error::LockLost { hold },
            });
        };
        h.reentering -= 1;
        match reply.and_then(|v| redis::parse_acquire(&v)) {
            Ok(AcquireReply::Acquired { fencing_token, .. })
                if fencing_token == h.fencing_token =>
            {
                h.count += 1;
                let count = h.count;
                self.renewed(seq, sent, lease, false);
                let valid_until = self.hold(hold).map_or(sent, |info| info.valid_until);
                self.finish(Event::Acquired {
                    op,
                    hold,
                    fencing_token,
                    valid_until,
                    count,
                });
            }
            Ok(AcquireReply::Acquired { fencing_token, .. }) => {
                let error = Error::MalformedReply(format!(
                    "reentry got fencing token {fencing_token}, its tenure has {}",
                    h.fencing_token
                ));
                self.finish(Event::Failed { op, error });
            }
            Ok(_) => {
                self.refused(seq, op);
            }
            Err(error) => self.finish(Event::Failed { op, error }),
        }
    }

    fn on_renew(
        &mut self,
        items: Vec<(u64, Duration)>,
        sent: Instant,
        reply: Result<Value, Error>,
    ) {
        let flags = reply.and_then(|v| redis::parse_extend(&v, items.len()));
        for (i, (seq, lease)) in items.into_iter().enumerate() {
            let Some(Tenure {
                state: State::Held(h),
                ..
            }) = self.tenures.get_mut(seq)
            else {
                continue;
            };
            h.renewing = false;
            match &flags {
                Ok(flags) if flags[i] => self.renewed(seq, sent, lease, true),
                Ok(_) => self.lose(seq, LostReason::NotOwner),
                Err(_) => {
                    // Try again soon; the Expire timer decides when it is too late.
                    let at = self.base.now + (lease / 10).min(self.retry_delay());
                    self.base.timers.set(Timer::Renew(seq), at);
                }
            }
        }
    }

    fn on_release(&mut self, seq: u64, op: OpId, count: u32, reply: Result<Value, Error>) {
        let hold = HoldId(seq);
        match reply.and_then(|v| redis::parse_release(&v)) {
            Ok(ReleaseReply::Freed | ReleaseReply::Held { .. }) => {
                self.finish(Event::Released { op, hold, count })
            }
            Ok(ReleaseReply::NotOwner) => {
                self.refused(seq, op);
            }
            Err(error) => self.finish(Event::Failed { op, error }),
        }
    }

    fn on_extend(
        &mut self,
        seq: u64,
        op: OpId,
        lease: Duration,
        sent: Instant,
        reply: Result<Value, Error>,
    ) {
        let hold = HoldId(seq);
        if !matches!(
            self.tenures.get(seq),
            Some(Tenure {
                state: State::Held(_),
                ..
            })
        ) {
            return self.finish(Event::Failed {
                op,
                error: Error::LockLost { hold },
            });
        }
        match reply.and_then(|v| redis::parse_extend(&v, 1)) {
            Ok(flags) if flags[0] => {
                if let Some(t) = self.tenures.get_mut(seq) {
                    t.lease = lease;
                }
                self.renewed(seq, sent, lease, false);
                if let Some(info) = self.hold(hold) {
                    self.finish(Event::Extended {
                        op,
                        hold,
                        valid_until: info.valid_until,
                    });
                }
            }
            Ok(_) => {
                self.refused(seq, op);
            }
            Err(error) => self.finish(Event::Failed { op, error }),
        }
    }

    // --- notices ---

    pub(crate) fn notice(&mut self, notice: Notice) {
        match notice {
            Notice::Connected => {
                if !self.base.closed {
                    self.subscribe();
                }
            }
            Notice::Message { channel, payload } => {
                if channel == self.channel {
                    self.wake(&payload);
                }
            }
            Notice::Closed => self.close(),
            // Held locks keep their local validity, which runs out unless a renewal gets
            // through after a reconnect. ZooKeeper's notices do not occur on Redis.
            Notice::Disconnected | Notice::Watch { .. } | Notice::SessionExpired => {}
        }
    }

    /// A wake-up: the server handed us the lock, or freed it for us to come and take.
    fn wake(&mut self, payload: &[u8]) {
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
        let Some(Tenure {
            state: State::Pending(p),
            ..
        }) = self.tenures.get_mut(seq)
        else {
            return;
        };
        match hand_off {
            Some(fencing_token) => {
                p.woken = Some(p.woken.map_or(fencing_token, |w| w.max(fencing_token)));
                self.take_hand_off(seq);
            }
            None if p.in_flight => p.free = true,
            // Queued (or about to be): ask again now, to take the lock if it is still free.
            None => self.send_acquire(seq),
        }
    }

    /// Acts on a hand-off notice as soon as it can. The handed tenure lives until our waiter
    /// deadline, which our latest answered ACQUIRE set to at least its send time + waiter
    /// lease — provided the hand-off came after that request ran, which a fencing token
    /// larger than the reply's `latest` proves. A notice older than that reply is stale; one
    /// that cannot be proven either way is claimed with another ACQUIRE.
    fn take_hand_off(&mut self, seq: u64) {
        let Some(Tenure {
            state: State::Pending(p),
            lease,
            ..
        }) = self.tenures.get_mut(seq)
        else {
            return;
        };
        let Some(fencing_token) = p.woken else { return };
        if p.in_flight {
            return; // its reply decides
        }
        p.woken = None;
        let wl = waiter_lease(self.waiter_lease, *lease);
        match p.queued {
            Some((at, latest)) if fencing_token > latest => {
                let valid_until = at + wl - drift(wl);
                if valid_until > self.base.now {
                    self.held(seq, fencing_token, 1, valid_until, self.base.now);
                } else {
                    self.send_acquire(seq);
                }
            }
            Some(_) => {} // stale: that hand-off ended before our latest request ran
            None => self.send_acquire(seq),
        }
    }

    fn close(&mut self) {
        self.base.closed = true;
        let seqs = self.tenures.seqs();
        for seq in seqs {
            match self.tenures.get(seq).map(|t| &t.state) {
                Some(State::Held(_)) => self.lose(seq, LostReason::Closed),
                Some(State::Pending(p)) => {
                    let op = p.op;
                    self.abandon(
                        seq,
                        Event::Failed {
                            op,
                            error: Error::Closed,
                        },
                        false,
                    );
                }
                None => {}
            }
        }
        for req in self.base.close() {
            match req.purpose {
                Purpose::Reenter { op, .. }
                | Purpose::Release { op, .. }
                | Purpose::Extend { op, .. } => {
                    self.finish(Event::Failed {
                        op,
                        error: Error::Closed,
                    });
                }
                _ => {}
            }
        }
    }

    // --- timers ---

    pub(crate) fn timer(&mut self, timer: Timer) {
        match timer {
            Timer::Request(id) => {
                if let Some(req) = self.base.requests.remove(&RequestId(id)) {
                    self.on_reply(req, Err(Error::Timeout));
                }
            }
            Timer::Renew(seq) => self.renew_batch(seq),
            Timer::Expire(seq) => self.lose(seq, LostReason::Expired),
            Timer::MaxHold(seq) => self.lose(seq, LostReason::MaxHold),
            Timer::WaitDeadline(seq) => {
                if let Some(Tenure {
                    state: State::Pending(p),
                    ..
                }) = self.tenures.get(seq)
                {
                    let op = p.op;
                    self.abandon(
                        seq,
                        Event::NotAcquired {
                            op,
                            reason: NotAcquired::TimedOut,
                        },
                        true,
                    );
                }
            }
            Timer::Refresh(seq) => {
                if let Some(Tenure {
                    state: State::Pending(p),
                    ..
                }) = self.tenures.get(seq)
                    && !p.in_flight
                {
                    self.send_acquire(seq);
                }
            }
            Timer::Subscribe => self.subscribe(),
            Timer::Session | Timer::Heartbeat | Timer::Cleanup => {}
        }
    }

    /// Renews `seq` and, in the same requests, every other hold due with it.
    fn renew_batch(&mut self, seq: u64) {
        let items = self
            .tenures
            .due_renewals(seq, self.base.now, &mut self.base.timers);
        for chunk in items.chunks(self.max_batch) {
            let req = self.tenures.extend(chunk, self.lock_delay);
            self.send(
                req,
                Purpose::Renew {
                    items: chunk.to_vec(),
                },
            );
        }
    }

    // --- state changes ---

    fn send_acquire(&mut self, seq: u64) {
        let Some(t) = self.tenures.get_mut(seq) else {
            return;
        };
        let State::Pending(p) = &mut t.state else {
            return;
        };
        p.in_flight = true;
        let mode = p.mode;
        let req = t.acquire(
            t.lease + self.lock_delay,
            1,
            mode,
            waiter_lease(self.waiter_lease, t.lease) + self.lock_delay,
        );
        self.base.timers.clear(Timer::Refresh(seq));
        self.send(req, Purpose::Acquire { seq, mode });
    }

    /// A pending tenure becomes held: the acquire's terminal event.
    fn held(
        &mut self,
        seq: u64,
        fencing_token: u64,
        count: u32,
        valid_until: Instant,
        renew_at: Instant,
    ) {
        let (now, timers) = (self.base.now, &mut self.base.timers);
        let held = Held::new(fencing_token, count, valid_until);
        let Some(op) = self.tenures.grant(seq, held, renew_at, now, timers) else {
            return;
        };
        self.finish(Event::Acquired {
            op,
            hold: HoldId(seq),
            fencing_token,
            valid_until,
            count,
        });
    }

    /// The server kept `seq` for `lease` from a request sent at `sent`.
    fn renewed(&mut self, seq: u64, sent: Instant, lease: Duration, announce: bool) {
        let (now, timers) = (self.base.now, &mut self.base.timers);
        let Some(valid_until) = self.tenures.renewed(seq, sent, lease, now, timers) else {
            return;
        };
        if announce {
            self.event(Event::Renewed {
                hold: HoldId(seq),
                valid_until,
            });
        }
    }

    /// A held tenure is gone. Anything we may still hold on the server is given back — except
    /// a lease that ran out under lock-delay: the application may still be at work (it was
    /// paused, say), and the delay exists to keep the next holder away from it.
    pub(crate) fn lose(&mut self, seq: u64, reason: LostReason) {
        if !matches!(
            self.tenures.get(seq),
            Some(Tenure {
                state: State::Held(_),
                ..
            })
        ) {
            return;
        }
        let Some(t) = self.forget(seq) else { return };
        let give_back = match reason {
            LostReason::Expired => self.lock_delay.is_zero(),
            LostReason::MaxHold => true,
            _ => false,
        };
        if give_back && !self.base.closed {
            self.send(t.release(0), Purpose::Cleanup);
        }
        self.event(Event::Lost {
            hold: HoldId(seq),
            reason,
        });
        // Extends and reentries still under way on it end now; their replies are ignored.
        let lost = Error::LockLost { hold: HoldId(seq) };
        self.base.fail_in_flight(&lost, |purpose| match *purpose {
            Purpose::Extend { seq: s, op, .. } | Purpose::Reenter { seq: s, op, .. }
                if s == seq =>
            {
                *purpose = Purpose::Cleanup;
                Some(op)
            }
            _ => None,
        });
    }

    /// The server says `seq` is not ours while command `op` was acting on it.
    fn refused(&mut self, seq: u64, op: OpId) {
        self.lose(seq, LostReason::NotOwner);
        let hold = HoldId(seq);
        self.finish(Event::Failed {
            op,
            error: Error::LockLost { hold },
        });
    }

    /// A pending acquire ends with `event`; with `cleanup`, we leave the queue (and pass the
    /// lock on if it was already handed to us).
    fn abandon(&mut self, seq: u64, event: Event, cleanup: bool) {
        let Some(t) = self.forget(seq) else { return };
        if cleanup && !self.base.closed {
            self.send(t.dequeue(), Purpose::Cleanup);
        }
        self.finish(event);
    }

    /// Removes a tenure and everything that points at it.
    fn forget(&mut self, seq: u64) -> Option<Tenure> {
        self.tenures.forget(seq, &mut self.base.timers)
    }

    fn subscribe(&mut self) {
        let channel = self.channel.clone();
        self.send(RedisOp::Subscribe { channel }, Purpose::Subscribe);
    }

    fn send(&mut self, op: RedisOp, purpose: Purpose) {
        self.base.send(Op::Redis(op), purpose);
    }

    fn retry_delay(&self) -> Duration {
        retry_delay(self.waiter_lease)
    }

    fn finish(&mut self, event: Event) {
        self.base.finish(event);
    }

    fn event(&mut self, event: Event) {
        self.base.event(event);
    }
}

/// The commands, as [`crate::base::dispatch`] hands them over.
impl Commands for Machine {
    type Purpose = Purpose;

    fn base(&mut self) -> &mut Base<Purpose> {
        &mut self.base
    }

    fn acquire(&mut self, a: Acquire) -> Result<(), Error> {
        let (lease, max_hold) = check_acquire(
            &a,
            "Redis",
            &[Primitive::Lock, Primitive::Semaphore, Primitive::RwLock],
        )?;
        let reads = self.tenures.slot(Kind::Read, &a.name, a.owner).is_some();
        let writes = self.tenures.slot(Kind::Write, &a.name, a.owner).is_some();
        refuse_upgrade(&a, reads, writes)?;
        if !a.fair && matches!(a.kind, Kind::Read | Kind::Write) {
            return Err(Error::InvalidArgument(
                "read-write locks are always fair (readers and writers are served in order)".into(),
            ));
        }

        // A lock's or read-write hold's owner reenters its tenure; every permit is a tenure
        // of its own.
        if let Some(seq) = self.tenures.slot(a.kind, &a.name, a.owner) {
            let t = self
                .tenures
                .get_mut(seq)
                .ok_or(Error::NotHeld { hold: HoldId(seq) })?;
            return match &mut t.state {
                State::Pending(p) => Err(Error::AlreadyWaiting { op: p.op }),
                State::Held(h) => {
                    // The server's count mirrors granted levels plus reentries under way.
                    h.reentering += 1;
                    let count = h.count + h.reentering;
                    let op_ = t.acquire(
                        t.lease + self.lock_delay,
                        count,
                        Mode::Refresh,
                        waiter_lease(self.waiter_lease, t.lease) + self.lock_delay,
                    );
                    let lease = t.lease;
                    self.send(
                        op_,
                        Purpose::Reenter {
                            seq,
                            op: a.op,
                            lease,
                        },
                    );
                    Ok(())
                }
            };
        }

        let seq = self.next_seq;
        self.next_seq += 1;
        let wait = match a.wait {
            Wait::Until(t) if t <= self.base.now => Wait::No,
            w => w,
        };
        let mode = if wait == Wait::No {
            Mode::Try
        } else {
            Mode::Wait
        };
        let token = owner_token(self.client_id, seq);
        let (keys, target) = match a.kind {
            Kind::Mutex => (LockKeys::new(&a.name), Target::Lock),
            Kind::Semaphore { permits } => {
                let keys = SemaphoreKeys::new(&a.name);
                (keys.lock_keys(&token), Target::Permit { keys, permits })
            }
            Kind::Read | Kind::Write => {
                let keys = RwKeys::new(&a.name);
                let write = a.kind == Kind::Write;
                // A read beside the same owner's write hold: downgrade.
                let downgrade = if write {
                    None
                } else {
                    self.tenures
                        .slot(Kind::Write, &a.name, a.owner)
                        .filter(|seq| self.tenures.held(*seq).is_some())
                        .and_then(|seq| self.tenures.get(seq))
                        .map(|t| t.token.clone())
                };
                let lock_keys = keys.lock_keys(&token, write);
                let target = Target::Rw {
                    keys,
                    write,
                    downgrade,
                };
                (lock_keys, target)
            }
        };
        self.tenures.insert(
            seq,
            Tenure {
                keys,
                target,
                name: a.name,
                owner: a.owner,
                token,
                lease,
                max_hold,
                fairness: if a.fair {
                    Fairness::Fair
                } else {
                    Fairness::NonFair
                },
                state: State::Pending(Pending {
                    op: a.op,
                    wait,
                    mode,
                    queued: None,
                    woken: None,
                    free: false,
                    in_flight: false,
                }),
            },
        );
        if let Wait::Until(deadline) = wait {
            self.base.timers.set(Timer::WaitDeadline(seq), deadline);
        }
        self.send_acquire(seq);
        Ok(())
    }

    fn release(&mut self, op: OpId, hold: HoldId) -> Result<(), Error> {
        let seq = hold.0;
        let h = self.tenures.held_mut(seq).ok_or(Error::NotHeld { hold })?;
        h.count -= 1;
        let count = h.count;
        if count > 0 {
            let t = self.tenures.get(seq).ok_or(Error::NotHeld { hold })?;
            let req = t.release(count);
            self.send(req, Purpose::Release { seq, op, count });
        } else {
            // The application stops relying on the lock now, whatever the reply says.
            let t = self.forget(seq).ok_or(Error::NotHeld { hold })?;
            self.send(t.release(0), Purpose::Release { seq, op, count });
        }
        Ok(())
    }

    fn extend(&mut self, op: OpId, hold: HoldId, lease: Duration) -> Result<(), Error> {
        let lease = check_lease(lease)?;
        if self.tenures.held(hold.0).is_none() {
            return Err(Error::NotHeld { hold });
        }
        let req = self.tenures.extend(&[(hold.0, lease)], self.lock_delay);
        self.send(
            req,
            Purpose::Extend {
                seq: hold.0,
                op,
                lease,
            },
        );
        Ok(())
    }

    fn cancel(&mut self, op: OpId) {
        if let Some(seq) = self.tenures.pending_op(op) {
            self.abandon(
                seq,
                Event::NotAcquired {
                    op,
                    reason: NotAcquired::Cancelled,
                },
                true,
            );
        }
    }
}

impl Machine {
    pub(crate) fn base(&mut self) -> &mut Base<Purpose> {
        &mut self.base
    }

    pub(crate) fn base_ref(&self) -> &Base<Purpose> {
        &self.base
    }

    /// A snapshot of a held lock, `None` if it is not held.
    pub(crate) fn hold(&self, hold: HoldId) -> Option<HoldInfo> {
        self.tenures.info(hold.0)
    }

    pub(crate) fn reply(&mut self, id: RequestId, reply: Reply) {
        if let Some(req) = self.base.answered(id) {
            let reply = unpack(reply, "Redis", |r| match r {
                Response::Redis(v) => Ok(v),
                other => Err(other),
            });
            self.on_reply(req, reply);
        }
    }
}

/// The waiter lease of one acquire: the client's, but never longer than the lease asked for.
/// A hand-off gives the waiter a tenure that lasts what is left of its waiter lease, so this
/// keeps a lock handed to a waiter that dies before it renews from outliving a lease. Like
/// the lease, it is sent with the lock-delay added, and the waiter's own arithmetic uses it
/// without.
fn waiter_lease(configured: Duration, lease: Duration) -> Duration {
    configured.min(lease)
}
