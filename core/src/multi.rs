//! Multi-locks: several locks acquired as one, all or none, on any backend.
//!
//! A multi-lock is a composition of ordinary locks, made by the engine over its backend's
//! machine; it needs nothing new on the wire. Its names are put in one canonical order (sorted
//! by their bytes, duplicates dropped) and acquired one after the other, each waiting up to the
//! multi-lock's deadline. Because every client takes overlapping sets in the same order, two
//! multi-locks can never wait for each other in a cycle: no deadlock. When one lock cannot be
//! had (busy, timed out, cancelled, failed) the ones already taken are released and the
//! multi-lock is not acquired. Once held, the loss of any one lock reports the whole
//! multi-lock lost and releases the others.
//!
//! The members are acquired under an owner of their own (one per multi-lock acquire, from the
//! ids the engine reserves, [`RESERVED_IDS`]), so a multi-lock never shares a hold with
//! another lock of the application: it is not reentrant, and a name its caller already holds
//! through another lock is waited for like any other. Member ops, owners and the multi-lock's
//! hold id come from the reserved ids; their events never reach the application, which sees
//! one hold: [`Event::AcquiredMulti`], then [`Event::Renewed`] (the earliest member's
//! validity), [`Event::Lost`], [`Event::Released`] and [`Event::Extended`] for it.

use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

use crate::base::check_name;
use crate::error::{Error, MAX_MULTI};
use crate::time::Instant;
use crate::types::{
    Acquire, AcquireMulti, Command, Event, HoldId, Kind, LostReason, Member, NotAcquired, OpId,
    RESERVED_IDS, Wait,
};

/// The names of a multi-lock in canonical order: sorted by their bytes, duplicates dropped.
/// Checks every name and the count first.
pub fn canonical(names: &[String]) -> Result<Vec<String>, Error> {
    names.iter().try_for_each(|name| check_name(name))?;
    let mut names = names.to_vec();
    names.sort_unstable();
    names.dedup();
    match names.len() {
        0 => Err(Error::InvalidArgument(
            "a multi-lock needs at least one name".into(),
        )),
        n if n > MAX_MULTI => Err(Error::InvalidArgument(format!(
            "a multi-lock takes at most {MAX_MULTI} names, not {n}"
        ))),
        _ => Ok(names),
    }
}

/// What an application command on a multi-lock does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Doing {
    Acquire,
    Release,
    Extend,
}

/// An application command on a multi-lock, under way.
#[derive(Clone, Debug)]
struct AppOp {
    multi: HoldId,
    doing: Doing,
    /// Member ops of a release or extend still under way.
    pending: usize,
    /// The first error they met.
    error: Option<Error>,
}

#[derive(Clone, Debug)]
struct MultiLock {
    names: Vec<String>,
    lease: Duration,
    wait: Wait,
    max_hold: Option<Duration>,
    /// The members held, in canonical order: a prefix of `names` while acquiring.
    held: Vec<Held>,
    /// The application's acquire, until it ends.
    acquire: Option<OpId>,
    /// True from [`Event::AcquiredMulti`] until released or lost.
    owned: bool,
    /// The validity last reported to the application.
    reported: Instant,
    /// Member ops under way; the multi-lock is forgotten when none is left and nothing is
    /// held or owned.
    pending: usize,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    hold: HoldId,
    fencing_token: u64,
    valid_until: Instant,
}

impl MultiLock {
    /// The earliest validity of the members held.
    fn valid_until(&self) -> Instant {
        let min = self.held.iter().map(|h| h.valid_until).min();
        min.unwrap_or(Instant::from_nanos(0))
    }
}

/// What the engine has its machine do for a multi-lock.
#[derive(Clone, Debug)]
pub(crate) enum ToMachine {
    Command(Command),
    /// Stop renewing this member as if its lease had run out, without a release: under
    /// lock-delay it then stays taken for the delay after its lease, like the member that did
    /// run out.
    Lapse(HoldId),
}

/// A member command under way.
#[derive(Debug, Clone, Copy)]
struct MemberOp {
    multi: HoldId,
    /// The application command it serves.
    app: Option<OpId>,
    /// The member a release gives back.
    gives_back: Option<HoldId>,
}

/// The engine's multi-locks: it turns multi-lock commands into member commands for the
/// backend's machine and member events into multi-lock events.
#[derive(Clone, Debug, Default)]
pub(crate) struct Multis {
    /// The last reserved id handed out (ops, owners and multi-lock holds).
    next: u64,
    locks: BTreeMap<HoldId, MultiLock>,
    /// Member ops under way.
    ops: BTreeMap<OpId, MemberOp>,
    /// Member holds → their multi-lock, until given back: a member's news that the machine
    /// queued before it took the release still comes here.
    members: BTreeMap<HoldId, HoldId>,
    /// Application commands under way on multi-locks.
    app_ops: BTreeMap<OpId, AppOp>,
    /// Work for the machine.
    commands: VecDeque<ToMachine>,
    /// Events for the application.
    events: VecDeque<Event>,
}

impl Multis {
    /// Takes the application's command, or hands it back for the machine. `in_use` tells
    /// whether the machine has a command of the same op id under way.
    pub(crate) fn command(&mut self, cmd: Command, in_use: bool) -> Option<Command> {
        let op = cmd.op();
        match &cmd {
            Command::Acquire(a) if a.owner >= RESERVED_IDS => {
                return self.refuse(op, "owners from 2^52 up are reserved for the engine");
            }
            Command::Cancel { .. } => {
                if self.app_ops.contains_key(&op) {
                    self.cancel(op);
                    return None;
                }
                return Some(cmd);
            }
            _ => {}
        }
        if op.0 >= RESERVED_IDS {
            return self.refuse(op, "op ids from 2^52 up are reserved for the engine");
        }
        let ours = match &cmd {
            Command::AcquireMulti(_) => true,
            Command::Release { hold, .. } | Command::Extend { hold, .. } => self.is_ours(*hold),
            _ => false,
        };
        if self.app_ops.contains_key(&op) || (ours && in_use) {
            self.events.push_back(Event::Failed {
                op,
                error: Error::DuplicateOp { op },
            });
            return None;
        }
        match cmd {
            Command::AcquireMulti(m) => self.acquire(m),
            Command::Release { op, hold } if ours => self.release(op, hold),
            Command::Extend { op, hold, lease } if ours => self.extend(op, hold, lease),
            cmd => return Some(cmd),
        }
        None
    }

    /// Whether `event` is about a multi-lock's member (then [`event`](Self::event) takes it).
    pub(crate) fn claims(&self, event: &Event) -> bool {
        match event {
            Event::Renewed { hold, .. } | Event::Lost { hold, .. } => {
                self.members.contains_key(hold)
            }
            event => event
                .terminal_op()
                .is_some_and(|op| self.ops.contains_key(&op)),
        }
    }

    /// A member's event.
    pub(crate) fn event(&mut self, event: Event) {
        match event {
            Event::Renewed { hold, valid_until } => self.renewed(hold, valid_until),
            Event::Lost { hold, reason } => self.lost(hold, reason),
            event => {
                let Some(op) = event.terminal_op() else {
                    return;
                };
                let Some(MemberOp {
                    multi,
                    app,
                    gives_back,
                }) = self.ops.remove(&op)
                else {
                    return;
                };
                if let Some(hold) = gives_back {
                    self.members.remove(&hold);
                }
                if let Some(lock) = self.locks.get_mut(&multi) {
                    lock.pending -= 1;
                }
                if let Some(a) = app.and_then(|app| self.app_ops.get_mut(&app)) {
                    a.pending = a.pending.saturating_sub(1);
                }
                self.ended(multi, app, event);
                self.forget_if_done(multi);
            }
        }
    }

    /// The member holds of owned multi-lock `multi`, `None` if it is not one.
    pub(crate) fn members_of(&self, multi: HoldId) -> Option<impl Iterator<Item = HoldId> + '_> {
        let lock = self.locks.get(&multi).filter(|l| l.owned)?;
        Some(lock.held.iter().map(|h| h.hold))
    }

    pub(crate) fn next_command(&mut self) -> Option<ToMachine> {
        self.commands.pop_front()
    }

    pub(crate) fn next_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // --- application commands ---

    fn acquire(&mut self, m: AcquireMulti) {
        let names = match canonical(&m.names) {
            Ok(names) => names,
            Err(error) => return self.events.push_back(Event::Failed { op: m.op, error }),
        };
        let multi = HoldId(self.reserve());
        self.app_ops.insert(m.op, AppOp::new(multi, Doing::Acquire));
        self.locks.insert(
            multi,
            MultiLock {
                names,
                lease: m.lease,
                wait: m.wait,
                max_hold: m.max_hold,
                held: Vec::new(),
                acquire: Some(m.op),
                owned: false,
                reported: Instant::from_nanos(0),
                pending: 0,
            },
        );
        self.acquire_next(multi);
    }

    /// Gives back every member; the multi-lock is released when all have answered.
    fn release(&mut self, op: OpId, multi: HoldId) {
        let Some(lock) = self.locks.get_mut(&multi).filter(|l| l.owned) else {
            return self.not_held(op, multi);
        };
        lock.owned = false;
        self.app_ops.insert(op, AppOp::new(multi, Doing::Release));
        self.release_members(multi, Some(op));
        self.app_done(op);
    }

    fn extend(&mut self, op: OpId, multi: HoldId, lease: Duration) {
        let Some(lock) = self.locks.get(&multi).filter(|l| l.owned) else {
            return self.not_held(op, multi);
        };
        let holds: Vec<HoldId> = lock.held.iter().map(|h| h.hold).collect();
        self.app_ops.insert(op, AppOp::new(multi, Doing::Extend));
        for hold in holds {
            let member_op = self.member_op(multi, Some(op));
            self.commands.push_back(ToMachine::Command(Command::Extend {
                op: member_op,
                hold,
                lease,
            }));
        }
    }

    /// The application stops waiting: it hears "cancelled" now, and what was taken is given
    /// back.
    fn cancel(&mut self, op: OpId) {
        let Some(multi) = self
            .app_ops
            .get(&op)
            .filter(|a| a.doing == Doing::Acquire)
            .map(|a| a.multi)
        else {
            return;
        };
        self.fail_acquire(multi, |op| Event::NotAcquired {
            op,
            reason: NotAcquired::Cancelled,
        });
    }

    // --- member events ---

    /// Member op of application command `app` ended with `event`.
    fn ended(&mut self, multi: HoldId, app: Option<OpId>, event: Event) {
        let Some(lock) = self.locks.get_mut(&multi) else {
            return;
        };
        let acquiring = app.is_some() && lock.acquire == app;
        match event {
            Event::Acquired {
                hold,
                fencing_token,
                valid_until,
                ..
            } => {
                self.members.insert(hold, multi);
                lock.held.push(Held {
                    hold,
                    fencing_token,
                    valid_until,
                });
                if acquiring {
                    self.acquire_next(multi);
                } else {
                    // Granted after the application gave up: give it back.
                    self.release_member(multi, hold, None);
                }
            }
            Event::NotAcquired { reason, .. } if acquiring => {
                self.fail_acquire(multi, |op| Event::NotAcquired { op, reason });
            }
            Event::Failed { error, .. } if acquiring => {
                let error = ours(multi, error);
                self.fail_acquire(multi, |op| Event::Failed { op, error });
            }
            Event::Extended {
                hold, valid_until, ..
            } => {
                if let Some(h) = lock.held.iter_mut().find(|h| h.hold == hold) {
                    h.valid_until = valid_until;
                }
                app.into_iter().for_each(|app| self.app_done(app));
            }
            Event::Failed { error, .. } => {
                if let Some(a) = app.and_then(|app| self.app_ops.get_mut(&app)) {
                    a.error.get_or_insert(ours(multi, error));
                }
                app.into_iter().for_each(|app| self.app_done(app));
            }
            _ => app.into_iter().for_each(|app| self.app_done(app)),
        }
    }

    fn renewed(&mut self, hold: HoldId, valid_until: Instant) {
        let Some(&multi) = self.members.get(&hold) else {
            return;
        };
        let Some(lock) = self.locks.get_mut(&multi) else {
            return;
        };
        if let Some(h) = lock.held.iter_mut().find(|h| h.hold == hold) {
            h.valid_until = valid_until;
        }
        let now_valid = lock.valid_until();
        if lock.owned && now_valid > lock.reported {
            lock.reported = now_valid;
            self.events.push_back(Event::Renewed {
                hold: multi,
                valid_until: now_valid,
            });
        }
    }

    fn lost(&mut self, hold: HoldId, reason: LostReason) {
        let Some(multi) = self.members.remove(&hold) else {
            return;
        };
        let Some(lock) = self.locks.get_mut(&multi) else {
            return;
        };
        if !lock.held.iter().any(|h| h.hold == hold) {
            // Lost on its way back: nothing more to do.
            return self.forget_if_done(multi);
        }
        lock.held.retain(|h| h.hold != hold);
        if lock.acquire.is_some() {
            // A member taken while waiting for the next is gone: the acquire fails as a single
            // waiter would on a closed engine or an expired session, else with the loss.
            let error = match reason {
                LostReason::Closed => Error::Closed,
                LostReason::SessionExpired => Error::SessionExpired,
                _ => Error::LockLost { hold: multi },
            };
            self.fail_acquire(multi, |op| Event::Failed { op, error });
        } else if lock.owned {
            lock.owned = false;
            self.events.push_back(Event::Lost {
                hold: multi,
                reason: reason.clone(),
            });
            if reason == LostReason::Expired {
                // The application's validity ran out with this member's: the others lapse
                // with it (their Lost comes back here) rather than being released, so that a
                // lock-delay keeps all of them from the next holder alike.
                let holds: Vec<HoldId> = lock.held.drain(..).map(|h| h.hold).collect();
                self.commands
                    .extend(holds.into_iter().map(ToMachine::Lapse));
            } else {
                self.release_members(multi, None);
            }
        }
        self.forget_if_done(multi);
    }

    // --- helpers ---

    /// Takes the next member, or reports the multi-lock acquired when all are held.
    fn acquire_next(&mut self, multi: HoldId) {
        let Some(lock) = self.locks.get_mut(&multi) else {
            return;
        };
        let Some(name) = lock.names.get(lock.held.len()).cloned() else {
            let valid_until = lock.valid_until();
            let members = lock
                .names
                .iter()
                .zip(&lock.held)
                .map(|(name, h)| Member {
                    name: name.clone(),
                    fencing_token: h.fencing_token,
                })
                .collect();
            lock.owned = true;
            lock.reported = valid_until;
            return self.finish_acquire(multi, |op| Event::AcquiredMulti {
                op,
                hold: multi,
                members,
                valid_until,
            });
        };
        let (lease, wait, max_hold, app) = (lock.lease, lock.wait, lock.max_hold, lock.acquire);
        let op = self.member_op(multi, app);
        self.commands
            .push_back(ToMachine::Command(Command::Acquire(Acquire {
                op,
                name,
                // One owner per multi-lock acquire: its hold id.
                owner: multi.0,
                lease,
                wait,
                max_hold,
                fair: true,
                kind: Kind::Mutex,
            })));
    }

    /// The acquire ends without the set with the event `event` makes of its op; the member
    /// acquire under way is cancelled and the members taken so far are given back.
    fn fail_acquire(&mut self, multi: HoldId, event: impl FnOnce(OpId) -> Event) {
        let app = self.locks.get(&multi).and_then(|l| l.acquire);
        self.finish_acquire(multi, event);
        let acquiring: Vec<OpId> = self
            .ops
            .iter()
            .filter(|(_, m)| m.multi == multi && m.app.is_some() && m.app == app)
            .map(|(op, _)| *op)
            .collect();
        for op in acquiring {
            self.commands
                .push_back(ToMachine::Command(Command::Cancel { op }));
        }
        self.release_members(multi, None);
        self.forget_if_done(multi);
    }

    fn finish_acquire(&mut self, multi: HoldId, event: impl FnOnce(OpId) -> Event) {
        let Some(op) = self.locks.get_mut(&multi).and_then(|l| l.acquire.take()) else {
            return;
        };
        self.app_ops.remove(&op);
        self.events.push_back(event(op));
    }

    /// Gives back every member held, for application command `app` (if any).
    fn release_members(&mut self, multi: HoldId, app: Option<OpId>) {
        let holds: Vec<HoldId> = self
            .locks
            .get(&multi)
            .map_or_else(Vec::new, |l| l.held.iter().map(|h| h.hold).collect());
        for hold in holds {
            self.release_member(multi, hold, app);
        }
    }

    fn release_member(&mut self, multi: HoldId, hold: HoldId, app: Option<OpId>) {
        if let Some(lock) = self.locks.get_mut(&multi) {
            lock.held.retain(|h| h.hold != hold);
        }
        let op = self.member_op(multi, app);
        if let Some(m) = self.ops.get_mut(&op) {
            m.gives_back = Some(hold);
        }
        self.commands
            .push_back(ToMachine::Command(Command::Release { op, hold }));
    }

    /// A member op of release or extend `app` ended: when none is left, so does `app`.
    fn app_done(&mut self, app: OpId) {
        let Some(a) = self.app_ops.get(&app) else {
            return;
        };
        if a.pending > 0 || a.doing == Doing::Acquire {
            return;
        }
        let Some(a) = self.app_ops.remove(&app) else {
            return;
        };
        let event = match (a.error, a.doing) {
            (Some(error), _) => Event::Failed { op: app, error },
            (None, Doing::Extend) => {
                let lock = self.locks.get_mut(&a.multi);
                let valid_until = lock.map_or(Instant::from_nanos(0), |l| {
                    l.reported = l.valid_until();
                    l.reported
                });
                Event::Extended {
                    op: app,
                    hold: a.multi,
                    valid_until,
                }
            }
            (None, _) => Event::Released {
                op: app,
                hold: a.multi,
                count: 0,
            },
        };
        self.events.push_back(event);
    }

    fn forget_if_done(&mut self, multi: HoldId) {
        let done = self.locks.get(&multi).is_some_and(|l| {
            l.pending == 0 && l.acquire.is_none() && !l.owned && l.held.is_empty()
        });
        if done {
            self.locks.remove(&multi);
        }
    }

    fn is_ours(&self, hold: HoldId) -> bool {
        hold.0 >= RESERVED_IDS || self.members.contains_key(&hold)
    }

    /// A new member op for `multi`, serving application command `app`.
    fn member_op(&mut self, multi: HoldId, app: Option<OpId>) -> OpId {
        let op = OpId(self.reserve());
        self.ops.insert(
            op,
            MemberOp {
                multi,
                app,
                gives_back: None,
            },
        );
        if let Some(lock) = self.locks.get_mut(&multi) {
            lock.pending += 1;
        }
        if let Some(a) = app.and_then(|app| self.app_ops.get_mut(&app)) {
            a.pending += 1;
        }
        op
    }

    fn reserve(&mut self) -> u64 {
        self.next += 1;
        RESERVED_IDS | self.next
    }

    fn not_held(&mut self, op: OpId, hold: HoldId) {
        self.events.push_back(Event::Failed {
            op,
            error: Error::NotHeld { hold },
        });
    }

    fn refuse(&mut self, op: OpId, why: &str) -> Option<Command> {
        self.events.push_back(Event::Failed {
            op,
            error: Error::InvalidArgument(why.into()),
        });
        None
    }
}

impl AppOp {
    fn new(multi: HoldId, doing: Doing) -> Self {
        Self {
            multi,
            doing,
            pending: 0,
            error: None,
        }
    }
}

/// A member's error as the application sees it: a lost member is the multi-lock lost.
fn ours(multi: HoldId, error: Error) -> Error {
    match error {
        Error::LockLost { .. } => Error::LockLost { hold: multi },
        error => error,
    }
}
