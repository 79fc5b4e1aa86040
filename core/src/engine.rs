//! The lock engine: a sans-IO state machine for reentrant, leased, fenced mutexes.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::error::{Error, MAX_LEASE, MAX_NAME_LEN, MIN_LEASE};
use crate::redis::{self, AcquireReply, LockKeys, Mode, RedisOp, ReleaseReply, Value};
use crate::time::{Instant, drift};
use crate::timers::{Timer, Timers};
use crate::types::{
    Acquire, ClientId, Command, Event, HoldId, Input, LostReason, NotAcquired, Notice, OpId,
    Output, Request, RequestId, Wait,
};

/// Engine settings. [`Config::new`] gives the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// This engine's identity; owner tokens derive from it. Read it from a CSPRNG.
    pub client_id: ClientId,
    /// How long a queued waiter keeps its place without renewing it, and how long a lock
    /// handed to a waiter stays promised to it before the waiter confirms. A crashed waiter
    /// stalls the queue for at most this long. Renewed every third of it.
    pub waiter_lease: Duration,
    /// A request with no reply after this long counts as failed.
    pub request_timeout: Duration,
    /// At most this many locks are renewed by one request.
    pub max_batch: usize,
}

impl Config {
    pub fn new(client_id: ClientId) -> Self {
        Self {
            client_id,
            waiter_lease: Duration::from_secs(3),
            request_timeout: Duration::from_secs(2),
            max_batch: 100,
        }
    }
}

/// A snapshot of one held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldInfo {
    pub name: String,
    pub owner: u64,
    pub fencing_token: u64,
    pub count: u32,
    pub lease: Duration,
    pub valid_until: Instant,
}

/// One tenure (or attempted tenure) of a lock by one owner of this engine.
#[derive(Debug)]
struct Tenure {
    name: String,
    owner: u64,
    keys: LockKeys,
    token: String,
    lease: Duration,
    max_hold: Option<Duration>,
    state: State,
}

#[derive(Debug)]
enum State {
    Pending(Pending),
    Held(Held),
}

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
    in_flight: bool,
}

#[derive(Debug)]
struct Held {
    fencing_token: u64,
    /// Granted levels: acquisitions reported to the application minus releases.
    count: u32,
    /// Reentrant acquires sent and not yet answered.
    reentering: u32,
    valid_until: Instant,
    renewing: bool,
}

#[derive(Debug)]
struct InFlight {
    sent_at: Instant,
    purpose: Purpose,
}

#[derive(Debug)]
enum Purpose {
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

/// The sans-IO lock engine.
///
/// Feed it with [`handle_input`](Self::handle_input) and
/// [`handle_timeout`](Self::handle_timeout), then drain [`poll_output`](Self::poll_output)
/// until it returns `None` and sleep until [`poll_timeout`](Self::poll_timeout).
#[derive(Debug)]
pub struct Engine {
    config: Config,
    channel: String,
    now: Instant,
    next_seq: u64,
    next_request: u64,
    tenures: BTreeMap<u64, Tenure>,
    /// (name, owner) → tenure, for reentrancy and for "already waiting".
    slots: BTreeMap<(String, u64), u64>,
    /// Pending acquire op → tenure, for cancel.
    acquires: BTreeMap<OpId, u64>,
    /// Ops that have not had their terminal event yet.
    ops: BTreeSet<OpId>,
    requests: BTreeMap<RequestId, InFlight>,
    timers: Timers,
    out: VecDeque<Output>,
    closed: bool,
}

impl Engine {
    /// A new engine at time `now`. Its first output subscribes to its wake-up channel.
    pub fn new(config: Config, now: Instant) -> Result<Self, Error> {
        check_lease(config.waiter_lease)?;
        check_lease(config.request_timeout)?;
        let mut engine = Self {
            channel: redis::wake_channel(config.client_id),
            config: Config {
                max_batch: config.max_batch.max(1),
                ..config
            },
            now,
            next_seq: 1,
            next_request: 1,
            tenures: BTreeMap::new(),
            slots: BTreeMap::new(),
            acquires: BTreeMap::new(),
            ops: BTreeSet::new(),
            requests: BTreeMap::new(),
            timers: Timers::default(),
            out: VecDeque::new(),
            closed: false,
        };
        engine.subscribe();
        Ok(engine)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The pub/sub channel on which this engine's waiters are woken.
    pub fn wake_channel(&self) -> &str {
        &self.channel
    }

    /// A snapshot of a held lock, `None` if it is not held.
    pub fn hold(&self, hold: HoldId) -> Option<HoldInfo> {
        let t = self.tenures.get(&hold.0)?;
        let State::Held(h) = &t.state else {
            return None;
        };
        Some(HoldInfo {
            name: t.name.clone(),
            owner: t.owner,
            fencing_token: h.fencing_token,
            count: h.count,
            lease: t.lease,
            valid_until: h.valid_until,
        })
    }

    /// Feeds one input. Timers due at `now` run first, so a late reply can never revive a
    /// lock whose validity has already run out.
    pub fn handle_input(&mut self, now: Instant, input: Input) {
        self.handle_timeout(now);
        match input {
            Input::Command(cmd) => self.command(cmd),
            Input::Reply { id, reply } => {
                if let Some(req) = self.requests.remove(&id) {
                    self.timers.clear(Timer::Request(id.0));
                    self.reply(req, reply.map_err(Error::from));
                }
            }
            Input::Notice(notice) => self.notice(notice),
        }
    }

    /// Runs every timer due at `now`. Call it when [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        while let Some(timer) = self.timers.pop_due(self.now) {
            self.timer(timer);
        }
    }

    /// The next output, `None` when drained.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next, `None` if no timer is set.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    // --- commands ---

    fn command(&mut self, cmd: Command) {
        let op = match &cmd {
            Command::Acquire(a) => a.op,
            Command::Release { op, .. } | Command::Extend { op, .. } => *op,
            Command::Cancel { op } => return self.cancel(*op),
        };
        if self.ops.contains(&op) {
            return self.event(Event::Failed {
                op,
                error: Error::DuplicateOp { op },
            });
        }
        self.ops.insert(op);
        if self.closed {
            return self.finish(Event::Failed {
                op,
                error: Error::Closed,
            });
        }
        let result = match cmd {
            Command::Acquire(a) => self.acquire(a),
            Command::Release { op, hold } => self.release(op, hold),
            Command::Extend { op, hold, lease } => self.extend(op, hold, lease),
            Command::Cancel { .. } => Ok(()),
        };
        if let Err(error) = result {
            self.finish(Event::Failed { op, error });
        }
    }

    fn acquire(&mut self, a: Acquire) -> Result<(), Error> {
        check_name(&a.name)?;
        let lease = check_lease(a.lease)?;
        let max_hold = a.max_hold.map(check_lease).transpose()?;

        if let Some(&seq) = self.slots.get(&(a.name.clone(), a.owner)) {
            let t = self
                .tenures
                .get_mut(&seq)
                .ok_or(Error::NotHeld { hold: HoldId(seq) })?;
            return match &mut t.state {
                State::Pending(p) => Err(Error::AlreadyWaiting { op: p.op }),
                State::Held(h) => {
                    // The server's count mirrors granted levels plus reentries under way.
                    h.reentering += 1;
                    let count = h.count + h.reentering;
                    let op_ = redis::acquire(
                        &t.keys,
                        &t.token,
                        t.lease,
                        count,
                        Mode::Refresh,
                        self.config.waiter_lease,
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
            Wait::Until(t) if t <= self.now => Wait::No,
            w => w,
        };
        let mode = if wait == Wait::No {
            Mode::Try
        } else {
            Mode::Wait
        };
        let token = redis::owner_token(self.config.client_id, seq);
        self.tenures.insert(
            seq,
            Tenure {
                keys: LockKeys::new(&a.name),
                name: a.name.clone(),
                owner: a.owner,
                token,
                lease,
                max_hold,
                state: State::Pending(Pending {
                    op: a.op,
                    wait,
                    mode,
                    queued: None,
                    woken: None,
                    in_flight: false,
                }),
            },
        );
        self.slots.insert((a.name, a.owner), seq);
        self.acquires.insert(a.op, seq);
        if let Wait::Until(deadline) = wait {
            self.timers.set(Timer::WaitDeadline(seq), deadline);
        }
        self.send_acquire(seq);
        Ok(())
    }

    fn release(&mut self, op: OpId, hold: HoldId) -> Result<(), Error> {
        let seq = hold.0;
        let Some(Tenure {
            state: State::Held(h),
            ..
        }) = self.tenures.get_mut(&seq)
        else {
            return Err(Error::NotHeld { hold });
        };
        h.count -= 1;
        let count = h.count;
        if count > 0 {
            let t = &self.tenures[&seq];
            let req = redis::release(&t.keys, &t.token, count);
            self.send(req, Purpose::Release { seq, op, count });
        } else {
            // The application stops relying on the lock now, whatever the reply says.
            let t = self.forget(seq).ok_or(Error::NotHeld { hold })?;
            self.send(
                redis::release(&t.keys, &t.token, 0),
                Purpose::Release { seq, op, count },
            );
        }
        Ok(())
    }

    fn extend(&mut self, op: OpId, hold: HoldId, lease: Duration) -> Result<(), Error> {
        let lease = check_lease(lease)?;
        let Some(
            t @ Tenure {
                state: State::Held(_),
                ..
            },
        ) = self.tenures.get(&hold.0)
        else {
            return Err(Error::NotHeld { hold });
        };
        let req = redis::extend([(t.keys.lock.as_str(), t.token.as_str(), lease)]);
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
        if let Some(&seq) = self.acquires.get(&op) {
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

    // --- replies ---

    fn reply(&mut self, req: InFlight, reply: Result<Value, Error>) {
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
                    self.timers
                        .set(Timer::Subscribe, self.now + self.retry_delay());
                }
            }
        }
    }

    fn on_acquire(&mut self, seq: u64, mode: Mode, sent: Instant, reply: Result<Value, Error>) {
        let Some(t) = self.tenures.get_mut(&seq) else {
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
                if valid_until > self.now {
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
            Ok(AcquireReply::Queued { latest }) if mode != Mode::Try => {
                if p.queued.is_none_or(|(at, _)| at < sent) {
                    p.queued = Some((sent, latest));
                }
                p.mode = Mode::Refresh;
                let woken = p.woken.is_some();
                let at = (sent + self.config.waiter_lease / 3).max(self.now);
                self.timers.set(Timer::Refresh(seq), at);
                if woken {
                    self.take_hand_off(seq);
                }
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
                let at = self.now + self.retry_delay();
                self.timers.set(Timer::Refresh(seq), at);
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
        }) = self.tenures.get_mut(&seq)
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
            }) = self.tenures.get_mut(&seq)
            else {
                continue;
            };
            h.renewing = false;
            match &flags {
                Ok(flags) if flags[i] => self.renewed(seq, sent, lease, true),
                Ok(_) => self.lose(seq, LostReason::NotOwner),
                Err(_) => {
                    // Try again soon; the Expire timer decides when it is too late.
                    let at = self.now + (lease / 10).min(self.retry_delay());
                    self.timers.set(Timer::Renew(seq), at);
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
            self.tenures.get(&seq),
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
                if let Some(t) = self.tenures.get_mut(&seq) {
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

    fn notice(&mut self, notice: Notice) {
        match notice {
            Notice::Connected => {
                if !self.closed {
                    self.subscribe();
                }
            }
            Notice::Disconnected => {}
            Notice::Message { channel, payload } => {
                if channel == self.channel {
                    self.wake(&payload);
                }
            }
            Notice::Closed => self.close(),
        }
    }

    /// A hand-off: the server gave us the lock and published our token.
    fn wake(&mut self, payload: &[u8]) {
        let Some((token, fencing_token)) = redis::parse_wake(payload) else {
            return;
        };
        let Some(seq) = redis::token_seq(self.config.client_id, token) else {
            return;
        };
        let Some(Tenure {
            state: State::Pending(p),
            ..
        }) = self.tenures.get_mut(&seq)
        else {
            return;
        };
        p.woken = Some(p.woken.map_or(fencing_token, |w| w.max(fencing_token)));
        self.take_hand_off(seq);
    }

    /// Acts on a hand-off notice as soon as it can. The handed tenure lives until our waiter
    /// deadline, which our latest answered ACQUIRE set to at least its send time + waiter
    /// lease — provided the hand-off came after that request ran, which a fencing token
    /// larger than the reply's `latest` proves. A notice older than that reply is stale; one
    /// that cannot be proven either way is claimed with another ACQUIRE.
    fn take_hand_off(&mut self, seq: u64) {
        let Some(Tenure {
            state: State::Pending(p),
            ..
        }) = self.tenures.get_mut(&seq)
        else {
            return;
        };
        let Some(fencing_token) = p.woken else { return };
        if p.in_flight {
            return; // its reply decides
        }
        p.woken = None;
        let wl = self.config.waiter_lease;
        match p.queued {
            Some((at, latest)) if fencing_token > latest => {
                let valid_until = at + wl - drift(wl);
                if valid_until > self.now {
                    self.held(seq, fencing_token, 1, valid_until, self.now);
                } else {
                    self.send_acquire(seq);
                }
            }
            Some(_) => {} // stale: that hand-off ended before our latest request ran
            None => self.send_acquire(seq),
        }
    }

    fn close(&mut self) {
        self.closed = true;
        let seqs: Vec<u64> = self.tenures.keys().copied().collect();
        for seq in seqs {
            match self.tenures.get(&seq).map(|t| &t.state) {
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
        for (id, req) in std::mem::take(&mut self.requests) {
            self.timers.clear(Timer::Request(id.0));
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
        self.timers = Timers::default();
    }

    // --- timers ---

    fn timer(&mut self, timer: Timer) {
        match timer {
            Timer::Request(id) => {
                if let Some(req) = self.requests.remove(&RequestId(id)) {
                    self.reply(req, Err(Error::Timeout));
                }
            }
            Timer::Renew(seq) => self.renew_batch(seq),
            Timer::Expire(seq) => self.lose(seq, LostReason::Expired),
            Timer::MaxHold(seq) => self.lose(seq, LostReason::MaxHold),
            Timer::WaitDeadline(seq) => {
                if let Some(Tenure {
                    state: State::Pending(p),
                    ..
                }) = self.tenures.get(&seq)
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
                }) = self.tenures.get(&seq)
                    && !p.in_flight
                {
                    self.send_acquire(seq);
                }
            }
            Timer::Subscribe => self.subscribe(),
        }
    }

    /// Renews `seq` and, in the same requests, every other hold due within a sixth of its lease.
    fn renew_batch(&mut self, seq: u64) {
        let Some(t) = self.tenures.get(&seq) else {
            return;
        };
        let horizon = self.now + t.lease / 6;
        let mut due = vec![seq];
        due.extend(self.timers.take_until(horizon, |timer| match timer {
            Timer::Renew(s) => Some(s),
            _ => None,
        }));
        let mut items = Vec::with_capacity(due.len());
        for s in due {
            if let Some(Tenure {
                state: State::Held(h),
                lease,
                ..
            }) = self.tenures.get_mut(&s)
                && !h.renewing
            {
                h.renewing = true;
                items.push((s, *lease));
            }
        }
        for chunk in items.chunks(self.config.max_batch) {
            let req = redis::extend(chunk.iter().map(|(s, lease)| {
                let t = &self.tenures[s];
                (t.keys.lock.as_str(), t.token.as_str(), *lease)
            }));
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
        let Some(t) = self.tenures.get_mut(&seq) else {
            return;
        };
        let State::Pending(p) = &mut t.state else {
            return;
        };
        p.in_flight = true;
        let mode = p.mode;
        let req = redis::acquire(
            &t.keys,
            &t.token,
            t.lease,
            1,
            mode,
            self.config.waiter_lease,
        );
        self.timers.clear(Timer::Refresh(seq));
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
        let Some(t) = self.tenures.get_mut(&seq) else {
            return;
        };
        let State::Pending(p) = &t.state else { return };
        let op = p.op;
        t.state = State::Held(Held {
            fencing_token,
            count,
            reentering: 0,
            valid_until,
            renewing: false,
        });
        self.acquires.remove(&op);
        self.timers.clear(Timer::WaitDeadline(seq));
        self.timers.clear(Timer::Refresh(seq));
        self.timers.set(Timer::Expire(seq), valid_until);
        self.timers.set(Timer::Renew(seq), renew_at.max(self.now));
        if let Some(max) = t.max_hold {
            self.timers.set(Timer::MaxHold(seq), self.now + max);
        }
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
        let Some(Tenure {
            state: State::Held(h),
            ..
        }) = self.tenures.get_mut(&seq)
        else {
            return;
        };
        h.valid_until = h.valid_until.max(sent + lease - drift(lease));
        let valid_until = h.valid_until;
        self.timers.set(Timer::Expire(seq), valid_until);
        if !h.renewing {
            self.timers
                .set(Timer::Renew(seq), (sent + lease / 3).max(self.now));
        }
        if announce {
            self.event(Event::Renewed {
                hold: HoldId(seq),
                valid_until,
            });
        }
    }

    /// A held tenure is gone. Anything we may still hold on the server is given back.
    fn lose(&mut self, seq: u64, reason: LostReason) {
        if !matches!(
            self.tenures.get(&seq),
            Some(Tenure {
                state: State::Held(_),
                ..
            })
        ) {
            return;
        }
        let Some(t) = self.forget(seq) else { return };
        if matches!(reason, LostReason::Expired | LostReason::MaxHold) && !self.closed {
            self.send(redis::release(&t.keys, &t.token, 0), Purpose::Cleanup);
        }
        self.event(Event::Lost {
            hold: HoldId(seq),
            reason,
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
        if cleanup && !self.closed {
            self.send(redis::dequeue(&t.keys, &t.token), Purpose::Cleanup);
        }
        self.finish(event);
    }

    /// Removes a tenure and everything that points at it.
    fn forget(&mut self, seq: u64) -> Option<Tenure> {
        let t = self.tenures.remove(&seq)?;
        self.slots.remove(&(t.name.clone(), t.owner));
        if let State::Pending(p) = &t.state {
            self.acquires.remove(&p.op);
        }
        for timer in [
            Timer::Renew,
            Timer::Expire,
            Timer::MaxHold,
            Timer::WaitDeadline,
            Timer::Refresh,
        ] {
            self.timers.clear(timer(seq));
        }
        Some(t)
    }

    fn subscribe(&mut self) {
        let channel = self.channel.clone();
        self.send(RedisOp::Subscribe { channel }, Purpose::Subscribe);
    }

    fn send(&mut self, op: RedisOp, purpose: Purpose) {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.requests.insert(
            id,
            InFlight {
                sent_at: self.now,
                purpose,
            },
        );
        self.timers
            .set(Timer::Request(id.0), self.now + self.config.request_timeout);
        self.out.push_back(Output::Request(Request { id, op }));
    }

    fn retry_delay(&self) -> Duration {
        (self.config.waiter_lease / 10).min(Duration::from_millis(250))
    }

    /// Emits a terminal event and frees its op id.
    fn finish(&mut self, event: Event) {
        if let Some(op) = event.terminal_op() {
            self.ops.remove(&op);
        }
        self.event(event);
    }

    fn event(&mut self, event: Event) {
        self.out.push_back(Output::Event(event));
    }
}

/// Checks a lock name: 1 to [`MAX_NAME_LEN`] bytes.
pub fn check_name(name: &str) -> Result<(), Error> {
    match name.len() {
        0 => Err(Error::EmptyName),
        len if len > MAX_NAME_LEN => Err(Error::NameTooLong { len }),
        _ => Ok(()),
    }
}

/// Accepts a lease in range and truncates it to whole milliseconds, the unit the server
/// counts in, so that local validity never assumes more than the server grants.
fn check_lease(lease: Duration) -> Result<Duration, Error> {
    if !(MIN_LEASE..=MAX_LEASE).contains(&lease) {
        return Err(Error::InvalidLease { lease });
    }
    Ok(Duration::from_millis(lease.as_millis() as u64))
}
