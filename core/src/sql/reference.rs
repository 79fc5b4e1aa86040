//! The SQL functions and procedures of `postgres.sql` and `mysql.sql` in Rust, statement by
//! statement: the database the simulation runs the SQL backend against. The differential
//! test (`bindings/rust/tests/sql_differential.rs`) keeps it honest against a real PostgreSQL
//! and a real MariaDB.
//!
//! Time is the database's, in microseconds (`clock_timestamp()`, `UTC_TIMESTAMP(6)`), given
//! to each call; every call runs atomically, as the functions do holding their row.

use std::collections::BTreeMap;

use crate::plant::{self, Plant};
use crate::sql::{Dialect, Param, SqlOp, SqlSettings, SqlValue, Statement};

/// The `kind` column: a lock, a semaphore and a read-write lock of one name are apart.
pub const LOCK: &str = "lock";
pub const SEMAPHORE: &str = "semaphore";
pub const RWLOCK: &str = "rwlock";

/// A row's key: name and kind.
pub type Key = (String, &'static str);

/// One row of `dlock_lock`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    /// The holder of a lock, the writer of a read-write lock.
    pub owner: Option<String>,
    pub holds: i64,
    /// The latest fencing token of the name and kind.
    pub fence: i64,
    /// The holder's lease end, µs.
    pub expires_at: Option<u64>,
    /// A semaphore's number of permits.
    pub permits: Option<i64>,
}

/// One row of `dlock_holder`: a permit, or a reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub holds: i64,
    pub fence: i64,
    /// Its lease end, µs.
    pub expires_at: u64,
}

/// One waiter's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    pub ticket: u64,
    pub owner: String,
    /// Its waiter-lease deadline, µs.
    pub expires_at: u64,
    /// What a read-write lock's waiter waits for: `read` or `write`.
    pub mode: Option<String>,
}

/// What one statement did: its reply, and the notifications it sent (PostgreSQL), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub values: Vec<SqlValue>,
    pub notified: Vec<(String, Vec<u8>)>,
}

/// The tables of one table prefix.
#[derive(Debug, Clone)]
pub struct Store {
    dialect: Dialect,
    /// The channel that tells observers of elections (PostgreSQL).
    leader_channel: String,
    pub locks: BTreeMap<Key, Row>,
    /// `dlock_leader`: each election's value, and the term it was proclaimed in.
    pub leaders: BTreeMap<String, (i64, String)>,
    /// Each name's holders by owner token.
    pub holders: BTreeMap<Key, BTreeMap<String, Hold>>,
    /// Each name's waiters in ticket order.
    pub waiters: BTreeMap<Key, Vec<Waiter>>,
    next_ticket: u64,
    /// PostgreSQL's sequence (its last value), or MySQL's counter row.
    pub fence: i64,
    notified: Vec<(String, Vec<u8>)>,
}

fn ms(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0) * 1000
}

fn key(name: &str, kind: &'static str) -> Key {
    (name.to_owned(), kind)
}

fn ints(v: &[i64]) -> Vec<SqlValue> {
    v.iter().map(|n| SqlValue::Int(*n)).collect()
}

/// ms a lease ending at `e` has left at `t`; -2 when it has ended (`dlock_ms_left_v1`).
fn ms_left(e: Option<u64>, t: u64) -> i64 {
    match e {
        Some(e) if e > t => ((e - t) / 1000) as i64,
        _ => -2,
    }
}

impl Store {
    /// The tables of `settings`' dialect and table prefix, empty.
    pub fn new(settings: &SqlSettings) -> Self {
        Self {
            dialect: settings.dialect,
            leader_channel: settings.leader_channel(),
            locks: BTreeMap::new(),
            leaders: BTreeMap::new(),
            holders: BTreeMap::new(),
            waiters: BTreeMap::new(),
            next_ticket: 1,
            fence: 0,
            notified: Vec::new(),
        }
    }

    /// Runs `op` at database time `now_us`. `Listen` is the transport's, not a statement.
    pub fn exec(&mut self, now_us: u64, op: &SqlOp) -> Result<Outcome, String> {
        let SqlOp::Query {
            statement, params, ..
        } = op
        else {
            return Err(format!("{op:?} is not a statement"));
        };
        let text = |i: usize| match params.get(i) {
            Some(Param::Text(s)) => Ok(s.as_str()),
            other => Err(format!("parameter {i} of {statement:?}: {other:?}")),
        };
        let int = |i: usize| match params.get(i) {
            Some(Param::Int(n)) => Ok(*n),
            other => Err(format!("parameter {i} of {statement:?}: {other:?}")),
        };
        let t = now_us;
        let acquire = || -> Result<Acquire<'_>, String> {
            Ok(Acquire {
                name: text(0)?,
                token: text(1)?,
                lease: int(2)?,
                count: int(3)?,
                mode: text(4)?,
                wlease: int(5)?,
                flag: text(6)?,
            })
        };
        let values = match statement {
            Statement::Acquire => self.acquire(t, &acquire()?),
            Statement::Release => self.release(t, text(0)?, text(1)?, int(2)?, text(3)?),
            Statement::Dequeue => self.dequeue(t, text(0)?, text(1)?),
            Statement::PermitAcquire => self.permit_acquire(t, &acquire()?),
            Statement::PermitRelease => self.permit_release(t, text(0)?, text(1)?, text(2)?),
            Statement::PermitDequeue => self.permit_dequeue(t, text(0)?, text(1)?),
            Statement::RwAcquire => self.rw_acquire(t, &acquire()?, text(7)?),
            Statement::RwRelease => self.rw_release(t, text(0)?, text(1)?, int(2)?),
            Statement::RwDequeue => self.rw_dequeue(t, text(0)?, text(1)?),
            Statement::Extend => match (self.dialect, params.as_slice()) {
                (
                    Dialect::Postgres,
                    [Param::TextList(n), Param::TextList(o), Param::IntList(l)],
                ) => {
                    let items: Vec<(&str, &str, i64)> = n
                        .iter()
                        .zip(o)
                        .zip(l)
                        .map(|((n, o), l)| (n.as_str(), o.as_str(), *l))
                        .collect();
                    self.extend(t, &items)
                }
                (Dialect::Mysql, _) => self.extend(t, &[(text(0)?, text(1)?, int(2)?)]),
                (_, other) => return Err(format!("extend takes {other:?}")),
            },
            Statement::Status => self.status(t, text(0)?),
            Statement::Proclaim => self.proclaim(t, text(0)?, text(1)?, int(2)?, text(3)?),
            Statement::Resign => self.resign(t, text(0)?, text(1)?),
            Statement::Leader => self.leader(t, text(0)?),
        };
        Ok(Outcome {
            values,
            notified: std::mem::take(&mut self.notified),
        })
    }

    /// `dlock_row_v1`: the row of a name and kind, created free if missing.
    fn row(&mut self, name: &str, kind: &'static str) -> &mut Row {
        self.locks.entry(key(name, kind)).or_default()
    }

    /// The row's holder while its lease lives.
    fn holder(&mut self, name: &str, kind: &'static str, t: u64) -> Option<String> {
        let row = self.row(name, kind);
        row.owner
            .clone()
            .filter(|_| row.expires_at.is_some_and(|e| e > t))
    }

    /// `dlock_live_head_v1`: the first live waiter, its deadline and mode, dropping dead ones
    /// ahead of it.
    fn live_head(&mut self, name: &str, kind: &'static str, t: u64) -> Option<Waiter> {
        let queue = self.waiters.get_mut(&key(name, kind))?;
        while let Some(w) = queue.first() {
            if w.expires_at > t {
                return Some(w.clone());
            }
            queue.remove(0);
        }
        None
    }

    fn remove_waiter(&mut self, name: &str, kind: &'static str, owner: &str) -> bool {
        let Some(queue) = self.waiters.get_mut(&key(name, kind)) else {
            return false;
        };
        let before = queue.len();
        queue.retain(|w| w.owner != owner);
        before != queue.len()
    }

    fn queued(&self, name: &str, kind: &'static str, owner: &str) -> bool {
        self.waiters
            .get(&key(name, kind))
            .is_some_and(|q| q.iter().any(|w| w.owner == owner))
    }

    /// `dlock_enqueue_v1`.
    fn enqueue(&mut self, name: &str, kind: &'static str, owner: &str, until: u64, mode: &str) {
        let mode = (kind == RWLOCK).then(|| mode.to_owned());
        let queue = self.waiters.entry(key(name, kind)).or_default();
        match queue.iter_mut().find(|w| w.owner == owner) {
            Some(w) => {
                w.expires_at = until;
                w.mode = mode;
            }
            None => {
                queue.push(Waiter {
                    ticket: self.next_ticket,
                    owner: owner.to_owned(),
                    expires_at: until,
                    mode,
                });
                self.next_ticket += 1;
            }
        }
    }

    /// The fencing token of a new tenure of a name and kind, recorded in its row.
    fn next_fence(&mut self, name: &str, kind: &'static str) -> i64 {
        let latest = self.row(name, kind).fence;
        let token = match self.dialect {
            // greatest(nextval(sequence), fence + 1): the sequence moves by one.
            Dialect::Postgres => {
                self.fence += 1;
                self.fence.max(latest + 1)
            }
            // greatest(counter, fence) + 1, and the counter takes it.
            Dialect::Mysql => {
                self.fence = self.fence.max(latest) + 1;
                self.fence
            }
        };
        self.row(name, kind).fence = token;
        token
    }

    /// `dlock_grant_v1`: the row's new tenure for `owner` until `until`; its fencing token.
    fn grant(&mut self, name: &str, kind: &'static str, owner: &str, until: u64) -> i64 {
        let token = self.next_fence(name, kind);
        let row = self.row(name, kind);
        row.owner = Some(owner.to_owned());
        row.holds = 1;
        row.expires_at = Some(until);
        token
    }

    /// `dlock_grant_hold_v1`: a new permit or read hold for `owner` until `until`.
    fn grant_hold(&mut self, name: &str, kind: &'static str, owner: &str, until: u64) -> i64 {
        let fence = self.next_fence(name, kind);
        let hold = Hold {
            holds: 1,
            fence,
            expires_at: until,
        };
        self.holders
            .entry(key(name, kind))
            .or_default()
            .insert(owner.to_owned(), hold);
        fence
    }

    /// `dlock_stretch_v1`: the row's tenure if `owner` holds it, at `count` holds, lasting
    /// until `until` at least; its token.
    fn stretch(
        &mut self,
        name: &str,
        kind: &'static str,
        owner: &str,
        count: i64,
        t: u64,
        until: u64,
    ) -> Option<i64> {
        self.holder(name, kind, t).filter(|o| o == owner)?;
        let row = self.row(name, kind);
        row.holds = count;
        row.expires_at = row.expires_at.max(Some(until));
        Some(row.fence)
    }

    /// The live hold of `owner` among the holders.
    fn hold_mut(
        &mut self,
        name: &str,
        kind: &'static str,
        owner: &str,
        t: u64,
    ) -> Option<&mut Hold> {
        self.holders
            .get_mut(&key(name, kind))?
            .get_mut(owner)
            .filter(|h| h.expires_at > t)
    }

    /// `dlock_stretch_hold_v1`.
    fn stretch_hold(
        &mut self,
        name: &str,
        kind: &'static str,
        owner: &str,
        count: i64,
        t: u64,
        until: u64,
    ) -> Option<i64> {
        let hold = self.hold_mut(name, kind, owner, t)?;
        hold.holds = count;
        hold.expires_at = hold.expires_at.max(until);
        Some(hold.fence)
    }

    fn remove_hold(&mut self, name: &str, kind: &'static str, owner: &str) {
        if let Some(holders) = self.holders.get_mut(&key(name, kind)) {
            holders.remove(owner);
        }
    }

    /// `dlock_live_holders_v1`: drops the holders whose lease ended; how many are left, and
    /// the least and the most ms one has left (-2: none).
    fn live_holders(&mut self, name: &str, kind: &'static str, t: u64) -> (i64, i64, i64) {
        let Some(holders) = self.holders.get_mut(&key(name, kind)) else {
            return (0, -2, -2);
        };
        holders.retain(|_, h| h.expires_at > t);
        let left = holders.values().map(|h| ms_left(Some(h.expires_at), t));
        let soonest = left.clone().min().unwrap_or(-2);
        let last = left.max().unwrap_or(-2);
        (holders.len() as i64, soonest, last)
    }

    /// `dlock_wake_v1` (PostgreSQL; MySQL wakes nobody).
    fn wake(&mut self, head: &str, word: &str) {
        if self.dialect == Dialect::Postgres {
            let channel = format!("dlock:wake:{}", head.chars().take(32).collect::<String>());
            let payload = format!("{head} {word}").into_bytes();
            self.notified.push((channel, payload));
        }
    }

    /// A non-fair release wakes the first live waiter to race for what it freed: on PostgreSQL
    /// (dropping the dead waiters ahead of it, as `dlock_live_head_v1` does). MySQL has no push
    /// channel: its procedures leave the queue as it is, and the waiters look again.
    fn wake_first(&mut self, name: &str, kind: &'static str, t: u64) {
        if self.dialect == Dialect::Postgres
            && let Some(head) = self.live_head(name, kind, t)
        {
            self.wake(&head.owner, "free");
        }
    }

    /// `dlock_free_v1`.
    fn free(&mut self, name: &str, kind: &'static str) {
        let row = self.row(name, kind);
        row.owner = None;
        row.holds = 0;
        row.expires_at = None;
    }

    /// `dlock_hand_off_v1`: 1 if the first live waiter got the lock.
    fn hand_off(&mut self, name: &str, t: u64) -> i64 {
        match self.live_head(name, LOCK, t) {
            None => {
                self.free(name, LOCK);
                0
            }
            Some(head) => {
                self.remove_waiter(name, LOCK, &head.owner);
                let token = self.grant(name, LOCK, &head.owner, head.expires_at);
                self.wake(&head.owner, &token.to_string());
                1
            }
        }
    }

    fn acquire(&mut self, t: u64, a: &Acquire<'_>) -> Vec<SqlValue> {
        let until = t + ms(a.lease);
        if let Some(fence) = self.stretch(a.name, LOCK, a.token, a.count, t, until) {
            return ints(&[1, fence, a.count]);
        }
        if a.mode == "refresh" && !self.queued(a.name, LOCK, a.token) {
            return ints(&[3]);
        }
        let l = self.row(a.name, LOCK).clone();
        if self.holder(a.name, LOCK, t).is_none() || plant::on(Plant::SqlGrantBesideHolder) {
            let head = self.live_head(a.name, LOCK, t);
            if head.is_none_or(|h| h.owner == a.token) || a.flag == "barge" {
                self.remove_waiter(a.name, LOCK, a.token);
                let fence = self.grant(a.name, LOCK, a.token, until);
                return ints(&[1, fence, 1]);
            }
        }
        let pttl = ms_left(l.expires_at, t);
        if a.mode == "try" {
            return ints(&[0, pttl]);
        }
        self.enqueue(a.name, LOCK, a.token, t + ms(a.wlease), "");
        ints(&[2, pttl, l.fence])
    }

    fn release(
        &mut self,
        t: u64,
        name: &str,
        token: &str,
        count: i64,
        flag: &str,
    ) -> Vec<SqlValue> {
        if self.holder(name, LOCK, t).as_deref() != Some(token) {
            return ints(&[0]);
        }
        if count > 0 {
            self.row(name, LOCK).holds = count;
            return ints(&[1, count]);
        }
        if flag == "free" {
            self.free(name, LOCK);
            self.wake_first(name, LOCK, t);
            return ints(&[2, 0]);
        }
        let handed = self.hand_off(name, t);
        ints(&[2, handed])
    }

    fn dequeue(&mut self, t: u64, name: &str, token: &str) -> Vec<SqlValue> {
        let result = if self.holder(name, LOCK, t).as_deref() == Some(token) {
            self.hand_off(name, t);
            2
        } else {
            i64::from(self.remove_waiter(name, LOCK, token))
        };
        ints(&[result])
    }

    /// `dlock_hand_permits_v1`: up to `free` permits to the first live waiters; how many.
    fn hand_permits(&mut self, name: &str, free: i64, t: u64) -> i64 {
        let mut handed = 0;
        while handed < free {
            let Some(head) = self.live_head(name, SEMAPHORE, t) else {
                break;
            };
            self.remove_waiter(name, SEMAPHORE, &head.owner);
            let token = self.grant_hold(name, SEMAPHORE, &head.owner, head.expires_at);
            self.wake(&head.owner, &token.to_string());
            handed += 1;
        }
        handed
    }

    /// `dlock_give_back_v1`.
    fn give_back(&mut self, name: &str, token: &str, flag: &str, t: u64) -> i64 {
        self.remove_hold(name, SEMAPHORE, token);
        if flag == "free" {
            self.wake_first(name, SEMAPHORE, t);
            return 0;
        }
        let (held, _, _) = self.live_holders(name, SEMAPHORE, t);
        let permits = self.row(name, SEMAPHORE).permits.unwrap_or(0);
        self.hand_permits(name, permits - held, t)
    }

    fn permit_acquire(&mut self, t: u64, a: &Acquire<'_>) -> Vec<SqlValue> {
        let (name, token, permits) = (a.name, a.token, a.count);
        let until = t + ms(a.lease);
        self.row(name, SEMAPHORE);
        if let Some(fence) = self.stretch_hold(name, SEMAPHORE, token, 1, t, until) {
            return ints(&[1, fence, 1]);
        }
        if a.mode == "refresh" && !self.queued(name, SEMAPHORE, token) {
            return ints(&[3]);
        }
        let (held, _, _) = self.live_holders(name, SEMAPHORE, t);
        let set = self.row(name, SEMAPHORE).permits;
        if set != Some(permits) {
            let head = self.live_head(name, SEMAPHORE, t);
            if held > 0 || head.is_some() {
                return ints(&[4, set.unwrap_or(0)]);
            }
            self.row(name, SEMAPHORE).permits = Some(permits);
        }
        let mut free = permits - held;
        if free > 0 && a.flag == "barge" {
            self.remove_waiter(name, SEMAPHORE, token);
            return ints(&[1, self.grant_hold(name, SEMAPHORE, token, until), 1]);
        }
        free -= self.hand_permits(name, free, t);
        if let Some(fence) = self.stretch_hold(name, SEMAPHORE, token, 1, t, until) {
            return ints(&[1, fence, 1]);
        }
        if free > 0 {
            return ints(&[1, self.grant_hold(name, SEMAPHORE, token, until), 1]);
        }
        let (_, soonest, _) = self.live_holders(name, SEMAPHORE, t);
        if a.mode == "try" {
            return ints(&[0, soonest]);
        }
        self.enqueue(name, SEMAPHORE, token, t + ms(a.wlease), "");
        ints(&[2, soonest, self.row(name, SEMAPHORE).fence])
    }

    fn permit_release(&mut self, t: u64, name: &str, token: &str, flag: &str) -> Vec<SqlValue> {
        self.row(name, SEMAPHORE);
        if self.hold_mut(name, SEMAPHORE, token, t).is_none() {
            return ints(&[0]);
        }
        ints(&[2, self.give_back(name, token, flag, t)])
    }

    fn permit_dequeue(&mut self, t: u64, name: &str, token: &str) -> Vec<SqlValue> {
        self.row(name, SEMAPHORE);
        if self.hold_mut(name, SEMAPHORE, token, t).is_some() {
            self.give_back(name, token, "", t);
            return ints(&[2]);
        }
        ints(&[i64::from(self.remove_waiter(name, SEMAPHORE, token))])
    }

    /// `dlock_hand_rw_v1`: how many waiters the read-write lock went to.
    fn hand_rw(&mut self, name: &str, t: u64) -> i64 {
        if self.holder(name, RWLOCK, t).is_some() {
            return 0;
        }
        let (mut held, _, _) = self.live_holders(name, RWLOCK, t);
        let mut handed = 0;
        while let Some(head) = self.live_head(name, RWLOCK, t) {
            let write = head.mode.as_deref() == Some("write");
            if write && held > 0 {
                break;
            }
            self.remove_waiter(name, RWLOCK, &head.owner);
            handed += 1;
            if write {
                let token = self.grant(name, RWLOCK, &head.owner, head.expires_at);
                self.wake(&head.owner, &token.to_string());
                break;
            }
            let token = self.grant_hold(name, RWLOCK, &head.owner, head.expires_at);
            self.wake(&head.owner, &token.to_string());
            held += 1;
        }
        handed
    }

    /// `dlock_rw_ours_v1`.
    fn rw_ours(&mut self, a: &Acquire<'_>, want: &str, t: u64, until: u64) -> Option<i64> {
        if want == "write" {
            self.stretch(a.name, RWLOCK, a.token, a.count, t, until)
        } else {
            self.stretch_hold(a.name, RWLOCK, a.token, a.count, t, until)
        }
    }

    fn rw_acquire(&mut self, t: u64, a: &Acquire<'_>, mine: &str) -> Vec<SqlValue> {
        let (name, token, want) = (a.name, a.token, a.flag);
        let until = t + ms(a.lease);
        self.row(name, RWLOCK);
        if let Some(fence) = self.rw_ours(a, want, t, until) {
            return ints(&[1, fence, a.count]);
        }
        if a.mode == "refresh" && !self.queued(name, RWLOCK, token) {
            return ints(&[3]);
        }
        self.hand_rw(name, t);
        if let Some(fence) = self.rw_ours(a, want, t, until) {
            return ints(&[1, fence, a.count]);
        }
        let first = self
            .live_head(name, RWLOCK, t)
            .is_none_or(|h| h.owner == token);
        let writing = self.holder(name, RWLOCK, t);
        let (held, _, last) = self.live_holders(name, RWLOCK, t);
        let take = if want == "write" {
            first && writing.is_none() && held == 0
        } else {
            (first && writing.is_none()) || (!mine.is_empty() && writing.as_deref() == Some(mine))
        };
        if take {
            self.remove_waiter(name, RWLOCK, token);
            let fence = if want == "write" {
                self.grant(name, RWLOCK, token, until)
            } else {
                self.grant_hold(name, RWLOCK, token, until)
            };
            return ints(&[1, fence, 1]);
        }
        let row = self.row(name, RWLOCK).clone();
        let pttl = if writing.is_some() {
            ms_left(row.expires_at, t)
        } else {
            last
        };
        if a.mode == "try" {
            return ints(&[0, pttl]);
        }
        self.enqueue(name, RWLOCK, token, t + ms(a.wlease), want);
        ints(&[2, pttl, row.fence])
    }

    fn rw_release(&mut self, t: u64, name: &str, token: &str, count: i64) -> Vec<SqlValue> {
        let writer = self.holder(name, RWLOCK, t).as_deref() == Some(token);
        if writer {
            if count > 0 {
                self.row(name, RWLOCK).holds = count;
                return ints(&[1, count]);
            }
            self.free(name, RWLOCK);
        } else {
            let Some(hold) = self.hold_mut(name, RWLOCK, token, t) else {
                return ints(&[0]);
            };
            if count > 0 {
                hold.holds = count;
                return ints(&[1, count]);
            }
            self.remove_hold(name, RWLOCK, token);
        }
        ints(&[2, self.hand_rw(name, t)])
    }

    fn rw_dequeue(&mut self, t: u64, name: &str, token: &str) -> Vec<SqlValue> {
        if self.holder(name, RWLOCK, t).as_deref() == Some(token) {
            self.free(name, RWLOCK);
        } else if self.hold_mut(name, RWLOCK, token, t).is_some() {
            self.remove_hold(name, RWLOCK, token);
        } else {
            return ints(&[i64::from(self.remove_waiter(name, RWLOCK, token))]);
        }
        self.hand_rw(name, t);
        ints(&[2])
    }

    /// Any hold: a row's tenure (lock, writer) or one of the holders (permit, reader).
    fn extend(&mut self, t: u64, items: &[(&str, &str, i64)]) -> Vec<SqlValue> {
        items
            .iter()
            .map(|&(name, token, lease)| {
                let until = t + ms(lease);
                let live = |e: Option<u64>| e.is_some_and(|e| e > t);
                let row = self.locks.iter_mut().find(|((n, _), r)| {
                    n == name && r.owner.as_deref() == Some(token) && live(r.expires_at)
                });
                let extended = if let Some((_, row)) = row {
                    row.expires_at = row.expires_at.max(Some(until));
                    true
                } else if let Some(hold) = self
                    .holders
                    .iter_mut()
                    .filter(|((n, _), _)| n == name)
                    .find_map(|(_, hs)| hs.get_mut(token).filter(|h| live(Some(h.expires_at))))
                {
                    hold.expires_at = hold.expires_at.max(until);
                    true
                } else {
                    false
                };
                SqlValue::Int(i64::from(extended))
            })
            .collect()
    }

    fn status(&mut self, t: u64, name: &str) -> Vec<SqlValue> {
        let row = self.locks.get(&key(name, LOCK)).cloned();
        let held = row
            .as_ref()
            .is_some_and(|r| r.owner.is_some() && r.expires_at.is_some_and(|e| e > t));
        let (owner, holds, fence, pttl, latest) = match &row {
            Some(r) if held => (
                r.owner.clone().unwrap_or_default(),
                r.holds,
                r.fence,
                ms_left(r.expires_at, t),
                r.fence,
            ),
            Some(r) => (String::new(), 0, 0, -2, r.fence),
            None => (String::new(), 0, 0, -2, 0),
        };
        let waiters: Vec<String> = self
            .waiters
            .get(&key(name, LOCK))
            .map(|q| {
                q.iter()
                    .filter(|w| w.expires_at > t)
                    .map(|w| w.owner.clone())
                    .collect()
            })
            .unwrap_or_default();
        match self.dialect {
            Dialect::Postgres => {
                let mut values = vec![
                    SqlValue::Text(owner),
                    SqlValue::Text(holds.to_string()),
                    SqlValue::Text(fence.to_string()),
                    SqlValue::Text(pttl.to_string()),
                    SqlValue::Text(latest.to_string()),
                ];
                values.extend(waiters.into_iter().map(SqlValue::Text));
                values
            }
            Dialect::Mysql => vec![
                SqlValue::Text(owner),
                SqlValue::Int(holds),
                SqlValue::Int(fence),
                SqlValue::Int(pttl),
                SqlValue::Int(latest),
                if waiters.is_empty() {
                    SqlValue::Null
                } else {
                    SqlValue::Text(waiters.join(" "))
                },
            ],
        }
    }
}

impl Store {
    /// `dlock_tell_v1`: tells the observers of election `name` to read (PostgreSQL).
    fn tell(&mut self, name: &str) {
        if self.dialect == Dialect::Postgres {
            let message = (self.leader_channel.clone(), name.as_bytes().to_vec());
            self.notified.push(message);
        }
    }

    fn proclaim(
        &mut self,
        t: u64,
        name: &str,
        token: &str,
        term: i64,
        value: &str,
    ) -> Vec<SqlValue> {
        let ours = self.holder(name, LOCK, t).as_deref() == Some(token);
        let fence = self.row(name, LOCK).fence;
        let term = if plant::on(Plant::ProclaimAnyTerm) {
            fence
        } else {
            term
        };
        if !ours || fence != term {
            return ints(&[0]);
        }
        self.leaders
            .insert(name.to_owned(), (term, value.to_owned()));
        self.tell(name);
        ints(&[1, term])
    }

    /// RESIGN: RELEASE with count 0, which then drops the value and tells the observers.
    fn resign(&mut self, t: u64, name: &str, token: &str) -> Vec<SqlValue> {
        let released = self.release(t, name, token, 0, "");
        if released.first() == Some(&SqlValue::Int(2)) {
            self.leaders.remove(name);
            self.tell(name);
        }
        released
    }

    /// LEADER, read only: term, value (if proclaimed in this tenure) and pttl, as text.
    fn leader(&mut self, t: u64, name: &str) -> Vec<SqlValue> {
        let row = self.locks.get(&key(name, LOCK));
        let held = row.filter(|r| r.owner.is_some() && r.expires_at.is_some_and(|e| e > t));
        let Some(row) = held else {
            return self.leader_reply(0, None, -2);
        };
        let value = self
            .leaders
            .get(name)
            .filter(|(fence, _)| *fence == row.fence)
            .map(|(_, value)| value.clone());
        let (fence, pttl) = (row.fence, ms_left(row.expires_at, t));
        self.leader_reply(fence, value, pttl)
    }

    /// LEADER's reply: all text on PostgreSQL (one `text[]`), the numbers as numbers on
    /// MySQL (a row).
    fn leader_reply(&self, term: i64, value: Option<String>, pttl: i64) -> Vec<SqlValue> {
        let number = |n: i64| match self.dialect {
            Dialect::Postgres => SqlValue::Text(n.to_string()),
            Dialect::Mysql => SqlValue::Int(n),
        };
        vec![
            number(term),
            value.map_or(SqlValue::Null, SqlValue::Text),
            number(pttl),
        ]
    }
}

/// The arguments of an acquire (ACQUIRE, PERMIT-ACQUIRE, RW-ACQUIRE): for a semaphore,
/// `count` is its number of permits; for a read-write lock, `flag` is `read` or `write`.
struct Acquire<'a> {
    name: &'a str,
    token: &'a str,
    lease: i64,
    count: i64,
    mode: &'a str,
    wlease: i64,
    flag: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::{Script, Words};
    use crate::sql::SqlSettings;

    /// A non-fair release (and a non-fair permit release) wakes the first live waiter on
    /// PostgreSQL, dropping the dead ones ahead of it, and leaves the queue alone on MySQL,
    /// which wakes nobody — as the functions and procedures do (the differential test against
    /// MariaDB found the reference pruning there too).
    #[test]
    fn a_non_fair_release_drops_dead_waiters_only_where_it_wakes() {
        for (dialect, queued_after) in [(Dialect::Mysql, 1), (Dialect::Postgres, 0)] {
            for (acquire, release, kind, count) in [
                (Script::Acquire, Script::Release, LOCK, "1"),
                (Script::PermitAcquire, Script::PermitRelease, SEMAPHORE, "1"),
            ] {
                let settings = SqlSettings::new(dialect);
                let mut store = Store::new(&settings);
                let mut run = |t: u64, script: Script, args: &[&str]| {
                    store
                        .exec(t, &settings.call(script, &["m"], &Words::from_iter(args)))
                        .unwrap()
                };
                // `a` holds for a second; `b` queues with a 50 ms waiter lease, then dies.
                run(0, acquire, &["a", "1000", count, "try", "50", ""]);
                run(1_000, acquire, &["b", "1000", count, "wait", "50", ""]);
                let release_args: &[&str] = match release {
                    Script::Release => &["a", "0", "free"],
                    _ => &["a", "free"],
                };
                let released = run(100_000, release, release_args);
                assert!(
                    released.notified.is_empty(),
                    "{dialect:?}: nobody live to wake"
                );
                let queued = store.waiters.get(&key("m", kind)).map_or(0, Vec::len);
                assert_eq!(queued, queued_after, "{dialect:?} {kind}");
            }
        }
    }
}
