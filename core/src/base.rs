//! What every backend's machine shares: the clock, op bookkeeping, requests in flight with
//! their timeouts, the timer table and the output queue.

use core::time::Duration;
use std::collections::{BTreeSet, VecDeque};

use crate::error::{Error, MAX_LEASE, MAX_NAME_LEN, MAX_PERMITS, MAX_VALUE_LEN, MIN_LEASE};
use crate::time::Instant;
use crate::timers::{Timer, Timers};
use crate::types::{
    Acquire, Event, Kind, Op, OpId, Output, Primitive, Reply, Request, RequestId, Response,
};

/// A request under way: when it was sent and what the machine wanted of it.
#[derive(Clone, Debug)]
pub(crate) struct InFlight<P> {
    pub(crate) sent_at: Instant,
    pub(crate) purpose: P,
    /// Whether its timeout is a [`Timer::Request`] in the timer table rather than in
    /// [`Base`]'s queue of deadlines.
    timer: bool,
}

/// The requests under way, by id. Ids are handed out in order and never reused, so this is
/// a queue of slots from the oldest id still in flight: a request's slot is emptied when it
/// is answered or times out, and emptied slots at the front are dropped. Adding, finding
/// and taking a request cost O(1), and once the queue has grown to the most requests in
/// flight at once, nothing is allocated.
#[derive(Clone, Debug)]
pub(crate) struct InFlightTable<P> {
    /// The id of `slots[0]`.
    first: u64,
    slots: VecDeque<Option<InFlight<P>>>,
}

impl<P> InFlightTable<P> {
    fn new() -> Self {
        Self {
            first: 0,
            slots: VecDeque::new(),
        }
    }

    /// Adds request `id`, the next id after every one added before.
    fn insert(&mut self, id: RequestId, req: InFlight<P>) {
        if self.slots.is_empty() {
            self.first = id.0;
        }
        debug_assert_eq!(id.0, self.first + self.slots.len() as u64);
        self.slots.push_back(Some(req));
    }

    fn slot(&self, id: RequestId) -> Option<usize> {
        let at = usize::try_from(id.0.checked_sub(self.first)?).ok()?;
        (at < self.slots.len()).then_some(at)
    }

    fn contains(&self, id: RequestId) -> bool {
        self.slot(id).is_some_and(|at| self.slots[at].is_some())
    }

    fn remove(&mut self, id: RequestId) -> Option<InFlight<P>> {
        let at = self.slot(id)?;
        let req = self.slots[at].take()?;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.first += 1;
        }
        Some(req)
    }

    /// Every request under way, oldest first.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut InFlight<P>> {
        self.slots.iter_mut().flatten()
    }

    /// Takes every request under way, oldest first.
    fn drain(&mut self) -> Vec<InFlight<P>> {
        self.slots.drain(..).flatten().collect()
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Base<P, T> {
    pub(crate) now: Instant,
    pub(crate) request_timeout: Duration,
    next_request: u64,
    pub(crate) requests: InFlightTable<P>,
    /// When requests under way time out, earliest first, with ties in the order they were
    /// sent; its front is always a request still in flight. A request whose deadline is
    /// earlier than the last one queued here (a Redlock node's timeout, which scales with the
    /// lease) has a [`Timer::Request`] in `timers` instead. Every other request's deadline is
    /// `now + request_timeout` when it is sent, so they arrive in order and are queued and
    /// dropped in O(1).
    deadlines: VecDeque<(Instant, RequestId)>,
    pub(crate) timers: Timers<T>,
    out: VecDeque<Output>,
    /// Ops that have not had their terminal event yet.
    ops: BTreeSet<OpId>,
    /// Sticky: set by [`Notice::Closed`](crate::Notice::Closed).
    pub(crate) closed: bool,
}

impl<P, T: Copy + Ord> Base<P, T> {
    pub(crate) fn new(now: Instant, request_timeout: Duration) -> Self {
        Self {
            now,
            request_timeout,
            next_request: 1,
            requests: InFlightTable::new(),
            deadlines: VecDeque::new(),
            timers: Timers::default(),
            out: VecDeque::new(),
            ops: BTreeSet::new(),
            closed: false,
        }
    }

    /// Moves the clock forward (never back) and returns the next timer due, if any: the
    /// earliest, and at the same instant, in [`Timer`]'s order.
    pub(crate) fn due(&mut self, now: Instant) -> Option<Timer<T>> {
        self.now = self.now.max(now);
        let request = self
            .deadlines
            .front()
            .map(|&(at, id)| (at, Timer::Request(id.0)));
        match request {
            Some(first) if self.timers.first().is_none_or(|other| first < other) => {
                if first.0 > self.now {
                    return None;
                }
                self.deadlines.pop_front();
                self.drop_answered_deadlines();
                Some(first.1)
            }
            _ => self.timers.pop_due(self.now),
        }
    }

    /// When the next timer is due, if one is set.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let request = self.deadlines.front().map(|&(at, _)| at);
        match (request, self.timers.first().map(|(at, _)| at)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes the request a reply answers, or that timed out: `None` for an unknown id or one
    /// already taken.
    pub(crate) fn answered(&mut self, id: RequestId) -> Option<InFlight<P>> {
        let req = self.requests.remove(id)?;
        if req.timer {
            self.timers.clear(Timer::Request(id.0));
        }
        self.drop_answered_deadlines();
        Some(req)
    }

    /// Keeps the front of `deadlines` a request still in flight.
    fn drop_answered_deadlines(&mut self) {
        while let Some(&(_, id)) = self.deadlines.front() {
            if self.requests.contains(id) {
                break;
            }
            self.deadlines.pop_front();
        }
    }

    /// Whether a command with this op id is under way.
    pub(crate) fn in_use(&self, op: OpId) -> bool {
        self.ops.contains(&op)
    }

    /// Registers a command's op id: a duplicate or a closed machine ends it at once.
    /// Returns whether the command may proceed.
    pub(crate) fn begin(&mut self, op: OpId) -> bool {
        if self.ops.contains(&op) {
            self.event(Event::Failed {
                op,
                error: Error::DuplicateOp { op },
            });
            return false;
        }
        self.ops.insert(op);
        if self.closed {
            self.finish(Event::Failed {
                op,
                error: Error::Closed,
            });
            return false;
        }
        true
    }

    pub(crate) fn send(&mut self, op: Op, purpose: P) {
        self.send_within(op, purpose, self.request_timeout);
    }

    /// [`send`](Self::send) with a timeout of its own.
    pub(crate) fn send_within(&mut self, op: Op, purpose: P, timeout: Duration) {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        let deadline = self.now + timeout;
        let timer = self
            .deadlines
            .back()
            .is_some_and(|&(last, _)| deadline < last);
        if timer {
            self.timers.set(Timer::Request(id.0), deadline);
        } else {
            self.deadlines.push_back((deadline, id));
        }
        let req = InFlight {
            sent_at: self.now,
            purpose,
            timer,
        };
        self.requests.insert(id, req);
        self.out.push_back(Output::Request(Request { id, op }));
    }

    /// Emits a terminal event and frees its op id.
    pub(crate) fn finish(&mut self, event: Event) {
        if let Some(op) = event.terminal_op() {
            self.ops.remove(&op);
        }
        self.event(event);
    }

    pub(crate) fn event(&mut self, event: Event) {
        self.out.push_back(Output::Event(event));
    }

    pub(crate) fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// Ends the machine: every request under way is dropped (returned so that the machine
    /// can fail the commands waiting on them) and every timer cleared.
    pub(crate) fn close(&mut self) -> Vec<InFlight<P>> {
        self.closed = true;
        self.timers = Timers::default();
        self.deadlines.clear();
        self.requests.drain()
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

/// Checks an election leader's value: at most [`MAX_VALUE_LEN`] bytes.
pub fn check_value(value: &str) -> Result<(), Error> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::InvalidArgument(format!(
            "a leader's value is {} bytes long; at most {MAX_VALUE_LEN} are allowed",
            value.len()
        )));
    }
    Ok(())
}

/// Checks an acquire before anything is sent: its name, its lease and max hold, and that it
/// takes a primitive `backend` offers. Returns the lease and max hold in whole milliseconds.
pub(crate) fn check_acquire(
    a: &Acquire,
    backend: &str,
    offers: &[Primitive],
) -> Result<(Duration, Option<Duration>), Error> {
    check_name(&a.name)?;
    let lease = check_lease(a.lease)?;
    let max_hold = a.max_hold.map(check_lease).transpose()?;
    check_kind(a.kind, backend, offers)?;
    Ok((lease, max_hold))
}

/// Checks what an acquire takes: a primitive `backend` offers, and a semaphore of 1 to
/// [`MAX_PERMITS`] permits.
fn check_kind(kind: Kind, backend: &str, offers: &[Primitive]) -> Result<(), Error> {
    let primitive = kind.primitive();
    if !offers.contains(&primitive) {
        let what = match primitive {
            Primitive::Lock => "locks",
            Primitive::Semaphore => "semaphores",
            Primitive::RwLock => "read-write locks",
        };
        return Err(Error::InvalidArgument(format!(
            "{backend} offers no {what}"
        )));
    }
    match kind {
        Kind::Semaphore { permits } if !(1..=MAX_PERMITS).contains(&permits) => {
            Err(Error::InvalidArgument(format!(
                "a semaphore has 1 to {MAX_PERMITS} permits, not {permits}"
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses a new write hold to an owner that holds or waits for a read hold of the same lock
/// (`reads`): it would wait for itself. An owner that already has the write hold (`writes`)
/// reenters it.
pub(crate) fn refuse_upgrade(a: &Acquire, reads: bool, writes: bool) -> Result<(), Error> {
    if a.kind == Kind::Write && reads && !writes {
        return Err(Error::InvalidArgument(format!(
            "owner {} holds or waits for a read hold of {:?}: release it before writing (a \
             read hold is never upgraded; it would wait for itself)",
            a.owner, a.name
        )));
    }
    Ok(())
}

/// Accepts a lease in range and truncates it to whole milliseconds, the unit the servers
/// count in, so that local validity never assumes more than the server grants.
pub(crate) fn check_lease(lease: Duration) -> Result<Duration, Error> {
    if !(MIN_LEASE..=MAX_LEASE).contains(&lease) {
        return Err(Error::InvalidLease { lease });
    }
    Ok(Duration::from_millis(lease.as_millis() as u64))
}

/// A reply in the protocol a machine speaks, or the error it stands for: a transport error,
/// or a reply in another protocol (malformed).
pub(crate) fn unpack<T>(
    reply: Reply,
    protocol: &str,
    pick: impl FnOnce(Response) -> Result<T, Response>,
) -> Result<T, Error> {
    match reply {
        Ok(r) => pick(r)
            .map_err(|other| Error::MalformedReply(format!("a {protocol} request got {other:?}"))),
        Err(e) => Err(Error::from(e)),
    }
}

/// How long to wait before trying a failed request again.
pub(crate) fn retry_delay(scale: Duration) -> Duration {
    (scale / 10).min(Duration::from_millis(250))
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::Base;
    use crate::redis::RedisOp;
    use crate::time::Instant;
    use crate::timers::Timer;
    use crate::types::{Op, RequestId};

    fn op() -> Op {
        Op::Redis(RedisOp::Subscribe {
            channel: "c".into(),
        })
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    /// Requests whose deadlines come in order are queued, the others are timers; either
    /// way every timer fires earliest first, requests before other timers at the same
    /// instant, and requests among themselves in the order they were sent.
    #[test]
    fn request_timeouts_fire_in_timer_order_wherever_they_are_kept() {
        let mut base: Base<u32, ()> = Base::new(at(0), Duration::from_millis(10));
        base.send(op(), 1); // due at 10, queued
        base.send_within(op(), 2, Duration::from_millis(20)); // due at 20, queued
        base.send_within(op(), 3, Duration::from_millis(10)); // due at 10: before 20, a timer
        base.timers.set(Timer::Renew(7), at(10));
        base.send_within(op(), 4, Duration::from_millis(5)); // due at 5, a timer
        assert_eq!(base.next_deadline(), Some(at(5)));
        // Answered: its timer goes with it.
        assert_eq!(base.answered(RequestId(4)).map(|r| r.purpose), Some(4));
        assert_eq!(base.next_deadline(), Some(at(10)));
        assert_eq!(base.due(at(9)), None);
        let fired: Vec<_> = std::iter::from_fn(|| base.due(at(10))).collect();
        assert_eq!(
            fired,
            [Timer::Request(1), Timer::Request(3), Timer::Renew(7)]
        );
        for id in [1, 3] {
            assert!(base.answered(RequestId(id)).is_some());
        }
        // Answered twice, or never sent: nothing.
        assert!(base.answered(RequestId(1)).is_none());
        assert!(base.answered(RequestId(99)).is_none());
        assert_eq!(base.next_deadline(), Some(at(20)));
        assert_eq!(base.answered(RequestId(2)).map(|r| r.purpose), Some(2));
        assert_eq!(base.next_deadline(), None);
        assert_eq!(base.due(at(100)), None);
    }

    /// Answers in any order leave the queue's front a request still in flight, and the
    /// requests under way in the order they were sent.
    #[test]
    fn answers_out_of_order_keep_the_oldest_request_due_first() {
        let mut base: Base<u32, ()> = Base::new(at(0), Duration::from_millis(10));
        for ms in 0..5 {
            base.due(at(ms));
            base.send(op(), ms as u32);
        }
        for id in [2, 4, 1] {
            assert!(base.answered(RequestId(id)).is_some());
        }
        // Request 1 went at 0 (due at 10); 3 at 2 (due at 12); 5 at 4 (due at 14).
        assert_eq!(base.next_deadline(), Some(at(12)));
        let left: Vec<u32> = base.requests.values_mut().map(|r| r.purpose).collect();
        assert_eq!(left, [2, 4]);
        assert_eq!(base.due(at(20)), Some(Timer::Request(3)));
        assert!(base.answered(RequestId(3)).is_some());
        assert_eq!(base.due(at(20)), Some(Timer::Request(5)));
        assert!(base.answered(RequestId(5)).is_some());
        assert_eq!(base.due(at(20)), None);
        assert!(base.close().is_empty());
    }
}
