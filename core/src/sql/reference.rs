//! The SQL functions and procedures of `postgres.sql` and `mysql.sql` in Rust, statement by
//! statement: the database the simulation runs the SQL backend against. The differential
//! test (`bindings/rust/tests/sql_differential.rs`) keeps it honest against a real PostgreSQL
//! and a real MariaDB.
//!
//! Time is the database's, in microseconds (`clock_timestamp()`, `UTC_TIMESTAMP(6)`), given
//! to each call; every call runs atomically, as the functions do holding their row.

use std::collections::BTreeMap;

use crate::sql::{Dialect, Param, SqlOp, SqlValue, Statement};

/// One lock's row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    pub owner: Option<String>,
    pub holds: i64,
    /// The latest fencing token of the name.
    pub fence: i64,
    /// The holder's lease end, µs.
    pub expires_at: Option<u64>,
}

/// One waiter's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    pub ticket: u64,
    pub owner: String,
    /// Its waiter-lease deadline, µs.
    pub expires_at: u64,
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
    pub locks: BTreeMap<String, Row>,
    /// Each name's waiters in ticket order.
    pub waiters: BTreeMap<String, Vec<Waiter>>,
    next_ticket: u64,
    /// PostgreSQL's sequence (its last value), or MySQL's counter row.
    pub fence: i64,
    notified: Vec<(String, Vec<u8>)>,
}

fn ms(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0) * 1000
}

impl Store {
    pub fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            locks: BTreeMap::new(),
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
        let values = match statement {
            Statement::Acquire => {
                let (name, token, lease) = (text(0)?, text(1)?, int(2)?);
                let (count, mode, wlease, flag) = (int(3)?, text(4)?, int(5)?, text(6)?);
                self.acquire(t, name, token, lease, count, mode, wlease, flag)
            }
            Statement::Release => self.release(t, text(0)?, text(1)?, int(2)?, text(3)?),
            Statement::Dequeue => self.dequeue(t, text(0)?, text(1)?),
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
        };
        Ok(Outcome {
            values,
            notified: std::mem::take(&mut self.notified),
        })
    }

    /// `dlock_row_v1`: the name's row, created free if missing.
    fn row(&mut self, name: &str) -> Row {
        self.locks.entry(name.to_owned()).or_default().clone()
    }

    fn row_mut(&mut self, name: &str) -> &mut Row {
        self.locks.entry(name.to_owned()).or_default()
    }

    fn held(row: &Row, t: u64) -> bool {
        row.owner.is_some() && row.expires_at.is_some_and(|e| e > t)
    }

    /// PTTL's word: ms left, or -2 when nobody holds it.
    fn pttl(row: &Row, t: u64) -> i64 {
        match row.expires_at {
            Some(e) if Self::held(row, t) => ((e - t) / 1000) as i64,
            _ => -2,
        }
    }

    /// `dlock_live_head_v1`: the first live waiter and its deadline, dropping dead ones
    /// ahead of it.
    fn live_head(&mut self, name: &str, t: u64) -> Option<(String, u64)> {
        let queue = self.waiters.get_mut(name)?;
        while let Some(w) = queue.first() {
            if w.expires_at > t {
                return Some((w.owner.clone(), w.expires_at));
            }
            queue.remove(0);
        }
        None
    }

    fn remove_waiter(&mut self, name: &str, owner: &str) -> bool {
        let Some(queue) = self.waiters.get_mut(name) else {
            return false;
        };
        let before = queue.len();
        queue.retain(|w| w.owner != owner);
        before != queue.len()
    }

    fn queued(&self, name: &str, owner: &str) -> bool {
        self.waiters
            .get(name)
            .is_some_and(|q| q.iter().any(|w| w.owner == owner))
    }

    /// `dlock_grant_v1`: a new tenure for `owner` until `until`; its fencing token.
    fn grant(&mut self, name: &str, owner: &str, until: u64) -> i64 {
        let latest = self.row(name).fence;
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
        let row = self.row_mut(name);
        *row = Row {
            owner: Some(owner.to_owned()),
            holds: 1,
            fence: token,
            expires_at: Some(until),
        };
        token
    }

    /// `dlock_wake_v1` (PostgreSQL; MySQL wakes nobody).
    fn wake(&mut self, head: &str, word: &str) {
        if self.dialect == Dialect::Postgres {
            let channel = format!("dlock:wake:{}", head.chars().take(32).collect::<String>());
            let payload = format!("{head} {word}").into_bytes();
            self.notified.push((channel, payload));
        }
    }

    fn free(&mut self, name: &str) {
        let row = self.row_mut(name);
        row.owner = None;
        row.holds = 0;
        row.expires_at = None;
    }

    /// `dlock_hand_off_v1`: 1 if the first live waiter got the lock.
    fn hand_off(&mut self, name: &str, t: u64) -> i64 {
        match self.live_head(name, t) {
            None => {
                self.free(name);
                0
            }
            Some((head, deadline)) => {
                self.remove_waiter(name, &head);
                let token = self.grant(name, &head, deadline);
                self.wake(&head, &token.to_string());
                1
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &mut self,
        t: u64,
        name: &str,
        token: &str,
        lease: i64,
        count: i64,
        mode: &str,
        wlease: i64,
        flag: &str,
    ) -> Vec<SqlValue> {
        let l = self.row(name);
        let ints = |v: &[i64]| v.iter().map(|n| SqlValue::Int(*n)).collect();
        if l.owner.as_deref() == Some(token) && Self::held(&l, t) {
            let row = self.row_mut(name);
            row.holds = count;
            row.expires_at = row.expires_at.max(Some(t + ms(lease)));
            return ints(&[1, l.fence, count]);
        }
        if mode == "refresh" && !self.queued(name, token) {
            return ints(&[3]);
        }
        if !Self::held(&l, t) {
            let head = self.live_head(name, t);
            if head.is_none() || head.as_ref().is_some_and(|(h, _)| h == token) || flag == "barge" {
                self.remove_waiter(name, token);
                let fence = self.grant(name, token, t + ms(lease));
                return ints(&[1, fence, 1]);
            }
        }
        let pttl = Self::pttl(&l, t);
        if mode == "try" {
            return ints(&[0, pttl]);
        }
        let deadline = t + ms(wlease);
        let queue = self.waiters.entry(name.to_owned()).or_default();
        match queue.iter_mut().find(|w| w.owner == token) {
            Some(w) => w.expires_at = deadline,
            None => {
                queue.push(Waiter {
                    ticket: self.next_ticket,
                    owner: token.to_owned(),
                    expires_at: deadline,
                });
                self.next_ticket += 1;
            }
        }
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
        let l = self.row(name);
        let ints = |v: &[i64]| v.iter().map(|n| SqlValue::Int(*n)).collect();
        if l.owner.as_deref() != Some(token) || !Self::held(&l, t) {
            return ints(&[0]);
        }
        if count > 0 {
            self.row_mut(name).holds = count;
            return ints(&[1, count]);
        }
        if flag == "free" {
            self.free(name);
            if let Some((head, _)) = self.live_head(name, t) {
                self.wake(&head, "free");
            }
            return ints(&[2, 0]);
        }
        let handed = self.hand_off(name, t);
        ints(&[2, handed])
    }

    fn dequeue(&mut self, t: u64, name: &str, token: &str) -> Vec<SqlValue> {
        let l = self.row(name);
        let result = if l.owner.as_deref() == Some(token) && Self::held(&l, t) {
            self.hand_off(name, t);
            2
        } else {
            i64::from(self.remove_waiter(name, token))
        };
        vec![SqlValue::Int(result)]
    }

    fn extend(&mut self, t: u64, items: &[(&str, &str, i64)]) -> Vec<SqlValue> {
        items
            .iter()
            .map(|(name, token, lease)| {
                let extended = match self.locks.get_mut(*name) {
                    Some(row) if row.owner.as_deref() == Some(*token) && Self::held(row, t) => {
                        row.expires_at = row.expires_at.max(Some(t + ms(*lease)));
                        1
                    }
                    _ => 0,
                };
                SqlValue::Int(extended)
            })
            .collect()
    }

    fn status(&mut self, t: u64, name: &str) -> Vec<SqlValue> {
        let row = self.locks.get(name).cloned();
        let held = row.as_ref().is_some_and(|r| Self::held(r, t));
        let (owner, holds, fence, pttl, latest) = match &row {
            Some(r) if held => (
                r.owner.clone().unwrap_or_default(),
                r.holds,
                r.fence,
                Self::pttl(r, t),
                r.fence,
            ),
            Some(r) => (String::new(), 0, 0, -2, r.fence),
            None => (String::new(), 0, 0, -2, 0),
        };
        let waiters: Vec<String> = self
            .waiters
            .get(name)
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
