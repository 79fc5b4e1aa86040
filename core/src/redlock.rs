//! Redlock: one lock over several independent Redis servers, held while a majority of them
//! hold it, with fencing tokens that keep growing (a max-register over a majority).
//!
//! Every node runs the Redis protocol's own scripts ([`crate::redis`]) on the same keys; this
//! machine only decides which node gets what and when a majority has answered. Requests go
//! out as [`Op::Redlock`] with the node's index. `docs/PROTOCOL.md` §9 gives the rules and the
//! argument.
//!
//! - **Acquire**: ACQUIRE `try` on every node at once. Each node that grants the lock answers
//!   with its own next counter value. With a majority granted, the tenure's fencing token is
//!   the largest of those values; RAISE records it on granting nodes that gave a smaller one,
//!   until a majority carries it. The hold is valid until `sent + lease − drift`, counted from
//!   the first round, and only if that is still ahead when the majority is complete. Without
//!   a majority, the lock is released on every node and — for a waiter — tried again after a
//!   randomised back-off (there is no queue across independent servers).
//! - **Renew, extend**: EXTEND on every node; a majority of "extended" renews the hold.
//! - **Release**: RELEASE on every node; a majority of "freed" ends it cleanly.
//! - **Reentrancy** is counted by the engine, as on ZooKeeper.

use core::time::Duration;
use std::collections::BTreeMap;

use crate::base::{Base, Commands, InFlight, check_acquire, check_lease, retry_delay, unpack};
use crate::config::Config;
use crate::status::{HoldInfo, LockStatus};
use crate::error::Error;
use crate::owner::owner_token;
use crate::redis::{
    self, AcquireReply, Fairness, LockKeys, Mode, RedisOp, ReleaseReply, Value,
};
use crate::tenures::{self, Held, Target, Tenures};
use crate::time::{Instant, drift};
use crate::timers::Timer;
use crate::types::{
    Acquire, ClientId, Event, HoldId, Kind, LostReason, NotAcquired, Notice, Op, OpId, Primitive,
    Reply, RequestId, Response, Wait,
};

/// Most nodes one engine will spread a lock over.
pub const MAX_NODES: u32 = 255;

/// How many of `nodes` make a majority.
pub fn quorum(nodes: u32) -> u32 {
    nodes / 2 + 1
}

/// What a majority of nodes agree on, from each node's STATUS (PROTOCOL.md §6): the owner
/// that holds the lock on a majority, with the fencing token a majority of them records and
/// the time until fewer than a majority hold it; no owner if none holds a majority. The
/// latest token is the largest any node answered. Fails when fewer than a majority answered.
pub fn merge_status(nodes: &[Result<LockStatus, Error>]) -> Result<LockStatus, Error> {
    let quorum = quorum(nodes.len() as u32) as usize;
    let answered: Vec<&LockStatus> = nodes.iter().filter_map(|s| s.as_ref().ok()).collect();
    if answered.len() < quorum {
        let error = nodes.iter().find_map(|s| s.as_ref().err());
        return Err(Error::Unavailable(format!(
            "{} of {} Redlock nodes answered{}",
            answered.len(),
            nodes.len(),
            error.map_or(String::new(), |e| format!(" ({e})"))
        )));
    }
    let latest_token = answered.iter().map(|s| s.latest_token).max().unwrap_or(0);
    let majority = answered.iter().find_map(|s| {
        let owner = s.owner.as_ref()?;
        let holding: Vec<&&LockStatus> = answered
            .iter()
            .filter(|o| o.owner.as_ref() == Some(owner))
            .collect();
        (holding.len() >= quorum).then_some((owner, holding))
    });
    let Some((owner, mut holding)) = majority else {
        return Ok(LockStatus {
            owner: None,
            count: 0,
            fencing_token: 0,
            ttl: None,
            latest_token,
            waiters: Vec::new(),
        });
    };
    holding.sort_by_key(|s| core::cmp::Reverse(s.ttl));
    Ok(LockStatus {
        owner: Some(owner.clone()),
        count: holding.iter().map(|s| s.count).max().unwrap_or(0),
        // The token a majority records (a late grant may show its own until it is raised).
        fencing_token: holding
            .iter()
            .map(|s| s.fencing_token)
            .find(|t| holding.iter().filter(|s| s.fencing_token == *t).count() >= quorum)
            .unwrap_or_else(|| holding.iter().map(|s| s.fencing_token).max().unwrap_or(0)),
        ttl: holding[quorum - 1].ttl,
        latest_token,
        waiters: Vec::new(),
    })
}

/// The first back-off ceiling of a waiter whose attempt found no majority, and the highest.
/// Each failed attempt doubles it; the wait is drawn uniformly below it.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(200);

type Tenure = tenures::Tenure<Pending>;
type State = tenures::State<Pending>;

#[derive(Debug)]
struct Pending {
    op: OpId,
    wait: Wait,
    /// The attempt under way; `None` while backing off.
    attempt: Option<Attempt>,
    /// Attempts that found no majority so far.
    tries: u32,
}

impl tenures::Pending for Pending {
    fn op(&self) -> OpId {
        self.op
    }
}

/// One round of ACQUIREs on every node, then RAISEs until a majority carries the token.
#[derive(Debug)]
struct Attempt {
    round: u64,
    sent: Instant,
    answers: Vec<Answer>,
    raising: Option<Raising>,
    /// The last error a node gave, reported if the attempt cannot succeed.
    error: Option<Error>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Waiting,
    /// Granted; the node's counter after granting.
    Granted(u64),
    /// Held by another owner.
    Busy,
    Failed,
}

#[derive(Debug)]
struct Raising {
    token: u64,
    /// Nodes that carry `token` as this tenure's.
    carried: u32,
    /// RAISEs under way.
    under_way: u32,
}

/// A request to every node for some holds, settled per hold by a majority.
#[derive(Debug)]
struct Round {
    sent: Instant,
    kind: RoundKind,
    items: Vec<Item>,
    /// Nodes that have not answered.
    waiting: u32,
    error: Option<Error>,
}

#[derive(Debug, Clone, Copy)]
enum RoundKind {
    Renew,
    Extend { op: OpId },
    Release { op: OpId },
}

#[derive(Debug)]
struct Item {
    seq: u64,
    lease: Duration,
    /// Nodes that said yes (extended, freed).
    yes: u32,
    /// Nodes that said the lock is not ours.
    refused: u32,
    settled: bool,
}

#[derive(Debug)]
pub(crate) enum Purpose {
    Acquire {
        seq: u64,
        round: u64,
        node: u32,
    },
    Raise {
        seq: u64,
        round: u64,
    },
    /// EXTEND or RELEASE of a [`Round`].
    Round {
        round: u64,
    },
    /// Best effort; the reply is ignored.
    Cleanup,
}

/// The Redlock machine: [`Engine`](crate::Engine) runs it for [`Protocol::Redlock`](crate::Protocol::Redlock).
#[derive(Debug)]
pub(crate) struct Machine {
    base: Base<Purpose>,
    client_id: ClientId,
    nodes: u32,
    lock_delay: Duration,
    max_batch: usize,
    /// splitmix64 state for back-off jitter, seeded from the client id (randomness comes
    /// from the host, through the id).
    rng: u64,
    next_seq: u64,
    next_round: u64,
    tenures: Tenures<Pending>,
    rounds: BTreeMap<u64, Round>,
}

impl Machine {
    pub(crate) fn new(config: &Config, nodes: u32, now: Instant) -> Result<Self, Error> {
        check_lease(config.request_timeout)?;
        if !config.lock_delay.is_zero() {
            check_lease(config.lock_delay)?;
        }
        if !(1..=MAX_NODES).contains(&nodes) {
            return Err(Error::InvalidConfig(format!(
                "Redlock needs 1 to {MAX_NODES} nodes, not {nodes}"
            )));
        }
        let id = config.client_id.0;
        Ok(Self {
            base: Base::new(now, config.request_timeout),
            client_id: config.client_id,
            nodes,
            lock_delay: config.lock_delay,
            max_batch: config.max_batch.max(1),
            rng: (id as u64) ^ ((id >> 64) as u64),
            next_seq: 1,
            next_round: 1,
            tenures: Tenures::new(),
            rounds: BTreeMap::new(),
        })
    }

    fn quorum(&self) -> u32 {
        quorum(self.nodes)
    }

    // --- acquiring ---

    /// Sends ACQUIRE `try` to every node.
    fn attempt(&mut self, seq: u64) {
        let round = self.next_round;
        self.next_round += 1;
        let nodes = self.nodes;
        let Some(t) = self.tenures.get_mut(seq) else {
            return;
        };
        let State::Pending(p) = &mut t.state else {
            return;
        };
        t.token = owner_token(self.client_id, round);
        p.attempt = Some(Attempt {
            round,
            sent: self.base.now,
            answers: vec![Answer::Waiting; nodes as usize],
            raising: None,
            error: None,
        });
        let lease = t.lease + self.lock_delay;
        let op = redis::acquire(
            &t.keys,
            &t.token,
            lease,
            1,
            Mode::Try,
            lease,
            Fairness::Fair,
        );
        let timeout = node_timeout(self.base.request_timeout, t.lease);
        for node in 0..nodes {
            let purpose = Purpose::Acquire { seq, round, node };
            self.send(node, op.clone(), purpose, timeout);
        }
    }

    fn on_acquire(&mut self, seq: u64, round: u64, node: u32, reply: Result<Value, Error>) {
        let (answer, error) = match reply.and_then(|v| redis::parse_acquire(&v)) {
            Ok(AcquireReply::Acquired { fencing_token, .. }) => {
                (Answer::Granted(fencing_token), None)
            }
            Ok(AcquireReply::Busy) => (Answer::Busy, None),
            Ok(other) => {
                let error = Error::MalformedReply(format!("acquire in mode try replied {other:?}"));
                (Answer::Failed, Some(error))
            }
            Err(error) => (Answer::Failed, Some(error)),
        };
        let token = owner_token(self.client_id, round);
        let Some(a) = self.attempt_mut(seq, round) else {
            // An attempt that has ended: give back what it got, unless it won the tenure —
            // then record the tenure's token there too, so that every node shows one tenure.
            let won = self
                .tenures
                .get(seq)
                .filter(|t| t.token == token)
                .and_then(|_| self.tenures.held(seq))
                .map(|h| h.fencing_token);
            match (answer, won) {
                (Answer::Granted(value), Some(fencing_token)) if value != fencing_token => {
                    self.send_raise(seq, round, node, fencing_token);
                }
                (Answer::Granted(_), None) => self.give_back_on(seq, node, &token),
                _ => {}
            }
            return;
        };
        if error.is_some() {
            a.error = error;
        }
        a.answers[node as usize] = answer;
        if let (Some(r), Answer::Granted(value)) = (&mut a.raising, answer) {
            // Late, but it can help carry the token (a node ahead of it — its counter moved on
            // in between — is raised too, to record the tenure's token in its lock).
            if value == r.token {
                r.carried += 1;
                return self.decide(seq);
            }
            let token = r.token;
            r.under_way += 1;
            return self.send_raise(seq, round, node, token);
        }
        self.decide(seq);
    }

    fn on_raise(&mut self, seq: u64, round: u64, reply: Result<Value, Error>) {
        let ok = reply.and_then(|v| redis::parse_raise(&v));
        let Some(a) = self.attempt_mut(seq, round) else {
            return;
        };
        let Some(r) = &mut a.raising else { return };
        r.under_way -= 1;
        match ok {
            Ok(true) => r.carried += 1,
            Ok(false) => {}
            Err(e) => a.error = Some(e),
        }
        self.decide(seq);
    }

    /// Moves an attempt on once its answers allow: to RAISE, to held, or to failed.
    fn decide(&mut self, seq: u64) {
        let (quorum, nodes, now) = (self.quorum(), self.nodes, self.base.now);
        let Some(Tenure {
            state: State::Pending(p),
            lease,
            ..
        }) = self.tenures.get_mut(seq)
        else {
            return;
        };
        let lease = *lease;
        let Some(a) = &mut p.attempt else { return };
        let valid_until = a.sent + lease - drift(lease);
        if let Some(r) = &a.raising {
            if r.carried >= quorum {
                let token = r.token;
                return if valid_until > now {
                    self.held(seq, token, valid_until)
                } else {
                    self.failed_attempt(seq, Some(Error::Timeout))
                };
            }
            if r.carried + r.under_way < quorum {
                return self.failed_attempt(seq, None);
            }
            return;
        }
        let granted: Vec<(u32, u64)> = (0..nodes)
            .filter_map(|n| match a.answers[n as usize] {
                Answer::Granted(v) => Some((n, v)),
                _ => None,
            })
            .collect();
        let refused = a
            .answers
            .iter()
            .filter(|x| matches!(x, Answer::Busy | Answer::Failed))
            .count() as u32;
        if granted.len() as u32 >= quorum {
            if valid_until <= now {
                return self.failed_attempt(seq, Some(Error::Timeout));
            }
            // The tenure's token: the largest counter of the granting nodes. Every granting
            // node read its counter while it held the lock for us, so a majority's largest
            // value is above every token a majority carried before (PROTOCOL.md §9).
            let token = granted.iter().map(|&(_, v)| v).max().unwrap_or(0);
            let behind: Vec<u32> = granted
                .iter()
                .filter(|&&(_, v)| v < token)
                .map(|&(n, _)| n)
                .collect();
            let round = a.round;
            a.raising = Some(Raising {
                token,
                carried: granted.len() as u32 - behind.len() as u32,
                under_way: behind.len() as u32,
            });
            for node in behind {
                self.send_raise(seq, round, node, token);
            }
            self.decide(seq);
        } else if refused > nodes - quorum {
            self.failed_attempt(seq, None);
        }
    }

    fn send_raise(&mut self, seq: u64, round: u64, node: u32, token: u64) {
        let Some(t) = self.tenures.get(seq) else {
            return;
        };
        let op = redis::raise(&t.keys, &t.token, token);
        let timeout = node_timeout(self.base.request_timeout, t.lease);
        self.send(node, op, Purpose::Raise { seq, round }, timeout);
    }

    /// An attempt found no majority: give back what it got, then end a try-acquire or back off.
    fn failed_attempt(&mut self, seq: u64, error: Option<Error>) {
        let Some(p) = self.tenures.pending_mut(seq) else {
            return;
        };
        let Some(a) = p.attempt.take() else { return };
        p.tries += 1;
        let (op, wait, tries) = (p.op, p.wait, p.tries);
        let busy = a.answers.iter().any(|x| matches!(x, Answer::Busy));
        self.give_back(seq);
        if wait == Wait::No {
            let event = match error.or(a.error) {
                Some(error) if !busy => Event::Failed { op, error },
                _ => Event::NotAcquired {
                    op,
                    reason: NotAcquired::Busy,
                },
            };
            return self.abandon(seq, event, false);
        }
        // Not sooner when a holder's lease runs out: contenders that all waited for it would
        // collide again, in lockstep.
        let at = self.base.now + self.backoff(tries);
        self.base.timers.set(Timer::Refresh(seq), at);
    }

    /// Randomised exponential back-off ("full jitter"): uniform between 1 ms and
    /// 10 ms × 2^(tries − 1), at most 200 ms, so that contenders that split the nodes between
    /// them do not collide again in lockstep.
    fn backoff(&mut self, tries: u32) -> Duration {
        let ceiling = BACKOFF_MIN
            .saturating_mul(1 << tries.saturating_sub(1).min(16))
            .min(BACKOFF_MAX);
        let ceiling = ceiling.as_micros() as u64;
        Duration::from_micros(1_000 + self.random() % (ceiling - 1_000 + 1))
    }

    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn attempt_mut(&mut self, seq: u64, round: u64) -> Option<&mut Attempt> {
        match self.tenures.pending_mut(seq) {
            Some(Pending {
                attempt: Some(a), ..
            }) if a.round == round => Some(a),
            _ => None,
        }
    }

    // --- rounds: renew, extend, release ---

    /// Sends `op` to every node for `items` (hold, lease) and tallies the answers.
    fn round(&mut self, kind: RoundKind, items: Vec<(u64, Duration)>, op: RedisOp) {
        let id = self.next_round;
        self.next_round += 1;
        let shortest = items.iter().map(|&(_, l)| l).min().unwrap_or(Duration::MAX);
        self.rounds.insert(
            id,
            Round {
                sent: self.base.now,
                kind,
                items: items
                    .into_iter()
                    .map(|(seq, lease)| Item {
                        seq,
                        lease,
                        yes: 0,
                        refused: 0,
                        settled: false,
                    })
                    .collect(),
                waiting: self.nodes,
                error: None,
            },
        );
        let timeout = node_timeout(self.base.request_timeout, shortest);
        for node in 0..self.nodes {
            self.send(node, op.clone(), Purpose::Round { round: id }, timeout);
        }
    }

    fn on_round(&mut self, id: u64, reply: Result<Value, Error>) {
        let (quorum, nodes) = (self.quorum(), self.nodes);
        let Some(round) = self.rounds.get_mut(&id) else {
            return;
        };
        round.waiting -= 1;
        let flags = reply.and_then(|v| match round.kind {
            RoundKind::Release { .. } => redis::parse_release(&v).map(|r| match r {
                ReleaseReply::NotOwner => vec![false],
                ReleaseReply::Held { .. } | ReleaseReply::Freed => vec![true],
            }),
            RoundKind::Renew | RoundKind::Extend { .. } => {
                redis::parse_extend(&v, round.items.len())
            }
        });
        let mut outcomes = Vec::new();
        for (i, item) in round.items.iter_mut().enumerate() {
            if item.settled {
                continue;
            }
            match &flags {
                Ok(flags) if flags[i] => item.yes += 1,
                Ok(_) => item.refused += 1,
                Err(_) => {}
            }
            let outcome = if item.yes >= quorum {
                Outcome::Yes
            } else if item.refused > nodes - quorum {
                Outcome::NotOwner
            } else if item.yes + round.waiting < quorum {
                Outcome::NoQuorum
            } else {
                continue;
            };
            item.settled = true;
            outcomes.push((item.seq, item.lease, outcome));
        }
        if let Err(e) = flags {
            round.error = Some(e);
        }
        let (kind, sent, error) = (round.kind, round.sent, round.error.clone());
        if round.waiting == 0 || round.items.iter().all(|i| i.settled) {
            self.rounds.remove(&id);
        }
        for (seq, lease, outcome) in outcomes {
            self.settle(kind, seq, lease, sent, outcome, error.clone());
        }
    }

    fn settle(
        &mut self,
        kind: RoundKind,
        seq: u64,
        lease: Duration,
        sent: Instant,
        outcome: Outcome,
        error: Option<Error>,
    ) {
        let hold = HoldId(seq);
        let error = error.unwrap_or(Error::Unavailable(format!(
            "no majority of the {} Redlock nodes answered",
            self.nodes
        )));
        match (kind, outcome) {
            (RoundKind::Renew, outcome) => {
                let Some(h) = self.tenures.held_mut(seq) else {
                    return;
                };
                h.renewing = false;
                match outcome {
                    Outcome::Yes => self.renewed(seq, sent, lease, true),
                    Outcome::NotOwner => self.lose(seq, LostReason::NotOwner),
                    Outcome::NoQuorum => {
                        // Try again soon; the expiry timer decides when it is too late.
                        let at = self.base.now + (lease / 10).min(retry_delay(lease));
                        self.base.timers.set(Timer::Renew(seq), at);
                    }
                }
            }
            (RoundKind::Extend { op }, Outcome::Yes) => {
                if let Some(t) = self.tenures.get_mut(seq) {
                    t.lease = lease;
                }
                self.renewed(seq, sent, lease, false);
                // Released (or lost) while the extend was under way: it extended nothing.
                let event = match self.hold(hold) {
                    Some(info) => Event::Extended {
                        op,
                        hold,
                        valid_until: info.valid_until,
                    },
                    None => Event::Failed {
                        op,
                        error: Error::LockLost { hold },
                    },
                };
                self.base.finish(event);
            }
            (RoundKind::Extend { op } | RoundKind::Release { op }, Outcome::NotOwner) => {
                self.lose(seq, LostReason::NotOwner);
                self.base.finish(Event::Failed {
                    op,
                    error: Error::LockLost { hold },
                });
            }
            (RoundKind::Extend { op } | RoundKind::Release { op }, Outcome::NoQuorum) => {
                self.base.finish(Event::Failed { op, error });
            }
            (RoundKind::Release { op }, Outcome::Yes) => {
                self.base.finish(Event::Released { op, hold, count: 0 });
            }
        }
    }

    // --- replies, notices, timers ---

    pub(crate) fn reply(&mut self, id: RequestId, reply: Reply) {
        if let Some(req) = self.base.answered(id) {
            let reply = unpack(reply, "Redis", |r| match r {
                Response::Redis(v) => Ok(v),
                other => Err(other),
            });
            self.on_reply(req, reply);
        }
    }

    fn on_reply(&mut self, req: InFlight<Purpose>, reply: Result<Value, Error>) {
        match req.purpose {
            Purpose::Acquire { seq, round, node } => self.on_acquire(seq, round, node, reply),
            Purpose::Raise { seq, round } => self.on_raise(seq, round, reply),
            Purpose::Round { round } => self.on_round(round, reply),
            Purpose::Cleanup => {}
        }
    }

    pub(crate) fn notice(&mut self, notice: Notice) {
        // Connection news changes nothing: holds keep their validity until a majority stops
        // renewing them. There are no wake-ups to listen for.
        if notice == Notice::Closed {
            self.close();
        }
    }

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
                    let reason = NotAcquired::TimedOut;
                    self.abandon(seq, Event::NotAcquired { op, reason }, true);
                }
            }
            Timer::Refresh(seq) => {
                if let Some(Pending { attempt: None, .. }) = self.tenures.pending_mut(seq) {
                    self.attempt(seq);
                }
            }
            Timer::Subscribe | Timer::Session | Timer::Heartbeat | Timer::Cleanup => {}
        }
    }

    /// Renews `seq` and every other hold due with it, in EXTENDs of up to `max_batch` locks
    /// to every node.
    fn renew_batch(&mut self, seq: u64) {
        let items = self
            .tenures
            .due_renewals(seq, self.base.now, &mut self.base.timers);
        for chunk in items.chunks(self.max_batch) {
            let req = self.tenures.extend(chunk, self.lock_delay);
            self.round(RoundKind::Renew, chunk.to_vec(), req);
        }
    }

    // --- state changes ---

    fn held(&mut self, seq: u64, fencing_token: u64, valid_until: Instant) {
        let Some(t) = self.tenures.get(seq) else {
            return;
        };
        let sent = match &t.state {
            State::Pending(Pending {
                attempt: Some(a), ..
            }) => a.sent,
            _ => return,
        };
        let renew_at = sent + t.lease / 3;
        let (now, timers) = (self.base.now, &mut self.base.timers);
        let held = Held::new(fencing_token, 1, valid_until);
        let Some(op) = self.tenures.grant(seq, held, renew_at, now, timers) else {
            return;
        };
        self.base.finish(Event::Acquired {
            op,
            hold: HoldId(seq),
            fencing_token,
            valid_until,
            count: 1,
        });
    }

    /// A majority kept `seq` for `lease` from a request sent at `sent`.
    fn renewed(&mut self, seq: u64, sent: Instant, lease: Duration, announce: bool) {
        let (now, timers) = (self.base.now, &mut self.base.timers);
        let Some(valid_until) = self.tenures.renewed(seq, sent, lease, now, timers) else {
            return;
        };
        if announce {
            self.base.event(Event::Renewed {
                hold: HoldId(seq),
                valid_until,
            });
        }
    }

    /// A held tenure is gone; what the nodes may still hold is given back as on one Redis
    /// (not a lease that ran out under lock-delay).
    pub(crate) fn lose(&mut self, seq: u64, reason: LostReason) {
        if self.tenures.held(seq).is_none() {
            return;
        }
        let give_back = match reason {
            LostReason::Expired => self.lock_delay.is_zero(),
            LostReason::MaxHold => true,
            _ => false,
        };
        if give_back {
            self.give_back(seq);
        }
        self.forget(seq);
        self.base.event(Event::Lost {
            hold: HoldId(seq),
            reason,
        });
        // Extends still under way on it end now; their answers are ignored.
        let ended: Vec<u64> = self
            .rounds
            .iter()
            .filter(|(_, r)| {
                matches!(r.kind, RoundKind::Extend { .. }) && r.items.iter().any(|i| i.seq == seq)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in ended {
            if let Some(Round {
                kind: RoundKind::Extend { op },
                ..
            }) = self.rounds.remove(&id)
            {
                self.base.finish(Event::Failed {
                    op,
                    error: Error::LockLost { hold: HoldId(seq) },
                });
            }
        }
    }

    /// A pending acquire ends with `event`; with `cleanup`, whatever it got is given back.
    fn abandon(&mut self, seq: u64, event: Event, cleanup: bool) {
        if cleanup {
            self.give_back(seq);
        }
        self.forget(seq);
        self.base.finish(event);
    }

    /// RELEASE of the latest attempt's token on every node, best effort.
    fn give_back(&mut self, seq: u64) {
        let Some(token) = self.tenures.get(seq).map(|t| t.token.clone()) else {
            return;
        };
        for node in 0..self.nodes {
            self.give_back_on(seq, node, &token);
        }
    }

    /// RELEASE of `token` on `node`. A tenure that is already forgotten sent its give-back
    /// before (a grant that overtakes it holds the lock for no one for at most a lease).
    fn give_back_on(&mut self, seq: u64, node: u32, token: &str) {
        let Some(t) = self.tenures.get(seq) else {
            return;
        };
        if self.base.closed {
            return;
        }
        let op = redis::release(&t.keys, token, 0, Fairness::Fair);
        let timeout = node_timeout(self.base.request_timeout, t.lease);
        self.send(node, op, Purpose::Cleanup, timeout);
    }

    fn forget(&mut self, seq: u64) -> Option<Tenure> {
        self.tenures.forget(seq, &mut self.base.timers)
    }

    fn close(&mut self) {
        let seqs = self.tenures.seqs();
        self.base.closed = true;
        for seq in seqs {
            match self.tenures.get(seq).map(|t| &t.state) {
                Some(State::Held(_)) => self.lose(seq, LostReason::Closed),
                Some(State::Pending(p)) => {
                    let op = p.op;
                    let error = Error::Closed;
                    self.abandon(seq, Event::Failed { op, error }, false);
                }
                None => {}
            }
        }
        self.base.close();
        for (_, round) in std::mem::take(&mut self.rounds) {
            if let RoundKind::Extend { op } | RoundKind::Release { op } = round.kind {
                self.base.finish(Event::Failed {
                    op,
                    error: Error::Closed,
                });
            }
        }
    }

    fn send(&mut self, node: u32, op: RedisOp, purpose: Purpose, timeout: Duration) {
        self.base
            .send_within(Op::Redlock { node, op }, purpose, timeout);
    }
}

/// A node's share of a request's time: a node that does not answer within a third of the
/// lease (or the request timeout, if shorter) counts as failed, so that one silent node cannot
/// use up a tenure's validity.
fn node_timeout(request_timeout: Duration, lease: Duration) -> Duration {
    request_timeout.min(lease / 3)
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Yes,
    NotOwner,
    NoQuorum,
}

/// The commands, as [`crate::base::dispatch`] hands them over.
impl Commands for Machine {
    type Purpose = Purpose;

    fn base(&mut self) -> &mut Base<Purpose> {
        &mut self.base
    }

    fn acquire(&mut self, a: Acquire) -> Result<(), Error> {
        let (lease, max_hold) = check_acquire(&a, "Redlock", &[Primitive::Lock])?;

        if let Some(seq) = self.tenures.slot(Kind::Mutex, &a.name, a.owner) {
            let t = self
                .tenures
                .get_mut(seq)
                .ok_or(Error::NotHeld { hold: HoldId(seq) })?;
            return match &mut t.state {
                State::Pending(p) => Err(Error::AlreadyWaiting { op: p.op }),
                // Counted here: the nodes see one tenure. Its validity is still ahead (the
                // expiry timer runs before any command).
                State::Held(h) => {
                    h.count += 1;
                    let event = Event::Acquired {
                        op: a.op,
                        hold: HoldId(seq),
                        fencing_token: h.fencing_token,
                        valid_until: h.valid_until,
                        count: h.count,
                    };
                    self.base.finish(event);
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
        self.tenures.insert(
            seq,
            Tenure {
                keys: LockKeys::new(&a.name),
                target: Target::Lock,
                name: a.name,
                owner: a.owner,
                token: String::new(),
                lease,
                max_hold,
                fairness: Fairness::Fair,
                state: State::Pending(Pending {
                    op: a.op,
                    wait,
                    attempt: None,
                    tries: 0,
                }),
            },
        );
        if let Wait::Until(deadline) = wait {
            self.base.timers.set(Timer::WaitDeadline(seq), deadline);
        }
        self.attempt(seq);
        Ok(())
    }

    fn release(&mut self, op: OpId, hold: HoldId) -> Result<(), Error> {
        let h = self
            .tenures
            .held_mut(hold.0)
            .ok_or(Error::NotHeld { hold })?;
        h.count -= 1;
        if h.count > 0 {
            let count = h.count;
            self.base.finish(Event::Released { op, hold, count });
            return Ok(());
        }
        // The application stops relying on the lock now, whatever the nodes say.
        let t = self.forget(hold.0).ok_or(Error::NotHeld { hold })?;
        let req = redis::release(&t.keys, &t.token, 0, Fairness::Fair);
        self.round(RoundKind::Release { op }, vec![(hold.0, t.lease)], req);
        Ok(())
    }

    fn extend(&mut self, op: OpId, hold: HoldId, lease: Duration) -> Result<(), Error> {
        let lease = check_lease(lease)?;
        if self.tenures.held(hold.0).is_none() {
            return Err(Error::NotHeld { hold });
        }
        let items = vec![(hold.0, lease)];
        let req = self.tenures.extend(&items, self.lock_delay);
        self.round(RoundKind::Extend { op }, items, req);
        Ok(())
    }

    fn cancel(&mut self, op: OpId) {
        if let Some(seq) = self.tenures.pending_op(op) {
            let reason = NotAcquired::Cancelled;
            self.abandon(seq, Event::NotAcquired { op, reason }, true);
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

    pub(crate) fn hold(&self, hold: HoldId) -> Option<HoldInfo> {
        self.tenures.info(hold.0)
    }
}
