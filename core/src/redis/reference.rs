//! The reference Redis: the protocol's scripts executed against an in-memory keyspace.
//!
//! This is the one model of the server side used by the deterministic simulation and by the
//! `memory://` backend. Each script below follows its Lua twin in `lua/` step by step, on
//! the same Redis primitives, so that a reader can check them side by side; a differential
//! test against a real redis-server keeps the two honest. Server time (the scripts' `TIME`)
//! is injected as milliseconds.

use std::collections::{BTreeMap, VecDeque};

use super::{Script, Value, Words};
use crate::plant::{self, Plant};

#[derive(Debug, Clone, PartialEq)]
enum Data {
    Str(String),
    Hash(BTreeMap<String, String>),
    List(VecDeque<String>),
    ZSet(BTreeMap<String, f64>),
}

#[derive(Debug, Clone)]
struct Entry {
    data: Data,
    /// Absolute expiry in server milliseconds.
    expires_at: Option<u64>,
}

/// What one script run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub reply: Value,
    /// `(channel, message)` pairs the script published, in order.
    pub published: Vec<(String, Vec<u8>)>,
}

/// One key of a [`Store::dump`].
#[derive(Debug, Clone, PartialEq)]
pub struct DumpedKey {
    /// `TYPE value`, as [`Store::dump`] renders it.
    pub shown: String,
    /// Absolute expiry in server milliseconds (`PEXPIRETIME`), if any.
    pub expires_at: Option<u64>,
}

/// A sorted set as [`Store::dump`] renders it: members in order, each with its score.
pub fn zset_shown<'a>(members: impl IntoIterator<Item = (&'a str, f64)>) -> String {
    let members: BTreeMap<&str, String> = members
        .into_iter()
        .map(|(m, score)| (m, score.to_string()))
        .collect();
    format!("zset {members:?}")
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// An in-memory keyspace that runs the protocol's scripts.
#[derive(Debug, Clone, Default)]
pub struct Store {
    keys: BTreeMap<String, Entry>,
    now: u64,
    published: Vec<(String, Vec<u8>)>,
}

impl Store {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `script` atomically at server time `now_ms`, as `EVALSHA` would.
    pub fn eval(
        &mut self,
        now_ms: u64,
        script: Script,
        keys: &Words,
        args: &Words,
    ) -> Result<Outcome, String> {
        let (keys, args) = (&keys.to_vec()[..], &args.to_vec()[..]);
        self.now = now_ms;
        self.published.clear();
        // Redis rolls nothing back when a script fails half way; neither do we.
        let reply = match script {
            Script::Acquire => self.acquire(keys, args),
            Script::Release => self.release(keys, args),
            Script::Dequeue => self.dequeue(keys, args),
            Script::Extend => self.extend(keys, args),
            Script::Status => self.status(keys),
            Script::Raise => self.raise(keys, args),
            Script::PermitAcquire => self.permit_acquire(keys, args),
            Script::PermitRelease => self.permit_release(keys, args),
            Script::PermitDequeue => self.permit_dequeue(keys, args),
            Script::RwAcquire => self.rw_acquire(keys, args),
            Script::RwRelease => self.rw_release(keys, args),
            Script::RwDequeue => self.rw_dequeue(keys, args),
            Script::FencedWrite => self.fenced_write(keys, args),
            // The reference store has no users: every command is allowed.
            Script::AclProbe => Ok(Value::Array(Vec::new())),
            Script::RedissonAcquire => self.redisson_acquire(keys, args),
            Script::RedissonRelease => self.redisson_release(keys, args),
            Script::RedissonExtend => self.redisson_extend(keys, args),
            Script::RedissonStatus => self.redisson_status(keys),
            Script::Proclaim => self.proclaim(keys, args),
            Script::Resign => self.resign(keys, args),
            Script::Leader => self.leader(keys),
        }?;
        Ok(Outcome {
            reply,
            published: std::mem::take(&mut self.published),
        })
    }

    /// Number of live keys at server time `now_ms` (expired keys are dropped).
    pub fn len(&mut self, now_ms: u64) -> usize {
        self.now = now_ms;
        self.keys
            .retain(|_, e| e.expires_at.is_none_or(|t| now_ms <= t));
        self.keys.len()
    }

    /// True when no live key is left.
    pub fn is_empty(&mut self, now_ms: u64) -> bool {
        self.len(now_ms) == 0
    }

    /// Every live key at server time `now_ms` with its contents in a stable text form (`TYPE
    /// value`; sorted-set members with their scores) and its absolute expiry, for comparing
    /// keyspaces.
    pub fn dump(&mut self, now_ms: u64) -> BTreeMap<String, DumpedKey> {
        self.len(now_ms);
        self.keys
            .iter()
            .map(|(k, e)| {
                let shown = match &e.data {
                    Data::Str(s) => format!("string {s}"),
                    Data::Hash(h) => format!("hash {h:?}"),
                    Data::List(l) => format!("list {l:?}"),
                    Data::ZSet(z) => zset_shown(z.iter().map(|(m, s)| (m.as_str(), *s))),
                };
                let expires_at = e.expires_at;
                (k.clone(), DumpedKey { shown, expires_at })
            })
            .collect()
    }

    /// Sets or clears the absolute expiry of a live key, as `PEXPIREAT` / `PERSIST` would:
    /// for a test that follows a real server's expiry times exactly.
    pub fn set_expiry(&mut self, key: &str, expires_at: Option<u64>) {
        if let Some(e) = self.live(key) {
            e.expires_at = expires_at;
        }
    }

    /// `PTTL` at server time `now_ms`, for inspection: ms left, -1 without expiry, -2 absent.
    pub fn pttl_at(&mut self, now_ms: u64, key: &str) -> i64 {
        self.now = now_ms;
        self.pttl(key)
    }

    /// `HGET` at server time `now_ms`, for inspection (status commands, tests).
    pub fn hget_at(
        &mut self,
        now_ms: u64,
        key: &str,
        field: &str,
    ) -> Result<Option<String>, String> {
        self.now = now_ms;
        self.hget(key, field)
    }

    /// The fenced write ([`super::fenced_write`]), mirroring its Lua source.
    fn fenced_write(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let ([resource], [token, value]) = (keys, args) else {
            return Err("ERR dlock fenced write takes 1 key and 2 arguments".into());
        };
        let (resource, token, value) = (resource.as_str(), token.as_str(), value.as_str());
        let highest = self.hget(resource, "fence")?.unwrap_or_else(|| "0".into());
        let decimal = token
            .bytes()
            .next()
            .is_some_and(|b| (b'1'..=b'9').contains(&b))
            && token.bytes().all(|b| b.is_ascii_digit());
        if !decimal {
            return Err(
                "ERR dlock fenced write: the token must be a positive decimal integer".into(),
            );
        }
        if token.len() < highest.len() || (token.len() == highest.len() && token < highest.as_str())
        {
            return Ok(Value::Array(vec![
                Value::Int(0),
                Value::Data(highest.into_bytes()),
            ]));
        }
        self.hset(
            resource,
            &[("fence", token.to_owned()), ("value", value.to_owned())],
        )?;
        Ok(Value::Array(vec![
            Value::Int(1),
            Value::Data(token.as_bytes().to_vec()),
        ]))
    }

    // --- the scripts, each mirroring its Lua source ---

    fn acquire(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let [lock, fence, queue, waiters] = four(keys)?;
        let (args, barge) = flag(args, 5, "barge");
        let [token, lease, count, mode, wlease] = args_n::<5>(args)?;
        let (lease, count, wlease) = (int(lease)?, int(count)?, int(wlease)?);

        let owner = self.hget(lock, "owner")?;
        if owner.as_deref() == Some(token.as_str()) {
            self.hset(lock, &[("count", count.to_string())])?;
            self.stretch(lock, lease);
            let fence = int(&self.hget(lock, "fence")?.unwrap_or_default())?;
            return Ok(ints(&[1, fence, count]));
        }
        if mode == "refresh" && self.zscore(waiters, token)?.is_none() {
            return Ok(ints(&[3]));
        }

        let now = self.now;
        if owner.is_none() {
            let head = self.live_head(queue, waiters, now)?;
            if barge || head.as_ref().is_none_or(|(h, _)| h == token) {
                if head.is_some() {
                    self.lrem(queue, token)?;
                    self.zrem(waiters, token)?;
                }
                let f = self.grant(lock, token, fence, now, lease)?;
                return Ok(ints(&[1, f, 1]));
            }
        }
        if mode == "try" {
            return Ok(ints(&[0, self.pttl(lock)]));
        }

        let latest = self.enqueue(queue, waiters, token, now, wlease, fence)?;
        Ok(ints(&[2, self.pttl(lock), latest]))
    }

    fn release(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let [lock, fence, queue, waiters] = four(keys)?;
        let (args, free) = flag(args, 2, "free");
        let [token, count] = args_n::<2>(args)?;
        let count = int(count)?;

        if self.hget(lock, "owner")?.as_deref() != Some(token.as_str()) {
            return Ok(ints(&[0]));
        }
        if count > 0 {
            self.hset(lock, &[("count", count.to_string())])?;
            return Ok(ints(&[1, count]));
        }
        self.del(lock);
        if free {
            self.wake_head(queue, waiters, self.now)?;
            return Ok(ints(&[2, 0]));
        }
        let handed = self.hand_off(lock, fence, queue, waiters, self.now)?;
        Ok(ints(&[2, handed]))
    }

    fn dequeue(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let [lock, fence, queue, waiters] = four(keys)?;
        let [token] = args_n::<1>(args)?;

        if self.hget(lock, "owner")?.as_deref() == Some(token.as_str()) {
            self.del(lock);
            self.hand_off(lock, fence, queue, waiters, self.now)?;
            return Ok(Value::Int(2));
        }
        self.lrem(queue, token)?;
        Ok(Value::Int(self.zrem(waiters, token)?))
    }

    fn extend(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        if args.len() != 2 * keys.len() {
            return Err("ERR extend takes a token and a lease per key".into());
        }
        let mut result = Vec::with_capacity(keys.len());
        for (lock, pair) in keys.iter().zip(args.chunks(2)) {
            if self.hget(lock, "owner")?.as_deref() == Some(pair[0].as_str()) {
                self.stretch(lock, int(&pair[1])?);
                result.push(Value::Int(1));
            } else {
                result.push(Value::Int(0));
            }
        }
        Ok(Value::Array(result))
    }

    fn status(&mut self, keys: &[String]) -> Result<Value, String> {
        let [lock, fence, queue, waiters] = four(keys)?;
        let number = |v: Option<String>| {
            v.map(|s| int(&s))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let mut reply = vec![
            Value::Data(self.hget(lock, "owner")?.unwrap_or_default().into_bytes()),
            Value::Int(number(self.hget(lock, "count")?)?),
            Value::Int(number(self.hget(lock, "fence")?)?),
            Value::Int(self.pttl(lock)),
            Value::Int(number(self.get(fence)?)?),
        ];
        let now = self.now;
        for waiter in self.lrange(queue)? {
            if self
                .zscore(waiters, &waiter)?
                .is_some_and(|d| d > now as f64)
            {
                reply.push(Value::Data(waiter.into_bytes()));
            }
        }
        Ok(Value::Array(reply))
    }

    fn proclaim(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let [lock] = keys_n::<1>(keys)?;
        let [token, term, value] = args_n::<3>(args)?;

        let held = self.hget(lock, "fence")?;
        let term = match plant::on(Plant::ProclaimAnyTerm) {
            true => held.clone().unwrap_or_default(),
            false => term.clone(),
        };
        if self.hget(lock, "owner")?.as_deref() != Some(token.as_str())
            || held.as_deref() != Some(term.as_str())
        {
            return Ok(ints(&[0]));
        }
        self.hset(lock, &[("value", value.clone())])?;
        self.published
            .push((leader_channel(lock), format!("{term} {value}").into_bytes()));
        Ok(ints(&[1, int(&term)?]))
    }

    fn resign(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let [lock, fence, queue, waiters] = four(keys)?;
        let [token] = args_n::<1>(args)?;

        if self.hget(lock, "owner")?.as_deref() != Some(token.as_str()) {
            return Ok(ints(&[0]));
        }
        let term = self.hget(lock, "fence")?.unwrap_or_default();
        self.del(lock);
        let handed = self.hand_off(lock, fence, queue, waiters, self.now)?;
        self.published
            .push((leader_channel(lock), term.into_bytes()));
        Ok(ints(&[2, handed]))
    }

    fn leader(&mut self, keys: &[String]) -> Result<Value, String> {
        let [lock] = keys_n::<1>(keys)?;
        let term = self.hget(lock, "fence")?.map_or(Ok(0), |t| int(&t))?;
        let value = self.hget(lock, "value")?;
        Ok(Value::Array(vec![
            Value::Int(term),
            value.map_or(Value::Nil, |v| Value::Data(v.into_bytes())),
            Value::Int(self.pttl(lock)),
        ]))
    }

    fn permit_acquire(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let sem = Semaphore::new(keys, args.first())?;
        let (args, barge) = flag(args, 5, "barge");
        let [token, lease, permits, mode, wlease] = args_n::<5>(args)?;
        let (lease, permits, wlease) = (int(lease)?, int(permits)?, int(wlease)?);
        let [permit, fence, queue, waiters] = [&sem.permit, &sem.fence, &sem.queue, &sem.waiters];

        if self.hget(permit, "owner")?.as_deref() == Some(token.as_str()) {
            self.stretch(permit, lease);
            let fence = int(&self.hget(permit, "fence")?.unwrap_or_default())?;
            return Ok(ints(&[1, fence, 1]));
        }
        if mode == "refresh" && self.zscore(waiters, token)?.is_none() {
            return Ok(ints(&[3]));
        }

        let now = self.now;
        let (held, _, _) = self.live_holders(&sem.holders, &sem.prefix)?;
        let set = self.get(&sem.capacity)?.map_or(Ok(0), |v| int(&v))?;
        if set != permits {
            if held > 0 || self.live_head(queue, waiters, now)?.is_some() {
                return Ok(ints(&[4, set]));
            }
            self.set(&sem.capacity, &permits.to_string());
        }
        let mut free = permits - held;
        if plant::on(Plant::PermitWhenNoneFree) {
            free = free.max(1);
        }
        if free > 0 && barge {
            self.lrem(queue, token)?;
            self.zrem(waiters, token)?;
            let f = self.grant_permit(&sem, token, now, lease)?;
            return Ok(ints(&[1, f, 1]));
        }
        free -= self.hand_permits(&sem, free, now)?;
        if self.hget(permit, "owner")?.as_deref() == Some(token.as_str()) {
            self.stretch(permit, lease);
            let fence = int(&self.hget(permit, "fence")?.unwrap_or_default())?;
            return Ok(ints(&[1, fence, 1]));
        }
        if free > 0 {
            let f = self.grant_permit(&sem, token, now, lease)?;
            return Ok(ints(&[1, f, 1]));
        }
        let (_, soonest, _) = self.live_holders(&sem.holders, &sem.prefix)?;
        if mode == "try" {
            return Ok(ints(&[0, soonest]));
        }

        let latest = self.enqueue(queue, waiters, token, now, wlease, fence)?;
        Ok(ints(&[2, soonest, latest]))
    }

    fn permit_release(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let sem = Semaphore::new(keys, args.first())?;
        let (args, free) = flag(args, 1, "free");
        let [token] = args_n::<1>(args)?;

        if self.hget(&sem.permit, "owner")?.as_deref() != Some(token.as_str()) {
            return Ok(ints(&[0]));
        }
        let handed = self.give_back(&sem, token, free, self.now)?;
        Ok(ints(&[2, handed]))
    }

    fn permit_dequeue(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let sem = Semaphore::new(keys, args.first())?;
        let [token] = args_n::<1>(args)?;

        if self.hget(&sem.permit, "owner")?.as_deref() == Some(token.as_str()) {
            self.give_back(&sem, token, false, self.now)?;
            return Ok(Value::Int(2));
        }
        self.lrem(&sem.queue, token)?;
        Ok(Value::Int(self.zrem(&sem.waiters, token)?))
    }

    // --- the holders' helper (lua/holders.lua) ---

    /// The holders whose hash (`prefix` and holder) lives: how many, and the least and the
    /// most time one has left (-2: none); holders whose hash has expired are dropped.
    fn live_holders(&mut self, holders: &str, prefix: &str) -> Result<(i64, i64, i64), String> {
        let (mut held, mut soonest, mut last) = (0, -2, -2);
        for holder in self.zrange(holders)? {
            let pttl = self.pttl(&format!("{prefix}{holder}"));
            if pttl == -2 {
                self.zrem(holders, &holder)?;
            } else {
                held += 1;
                if soonest == -2 || (pttl >= 0 && pttl < soonest) {
                    soonest = pttl;
                }
                last = last.max(pttl);
            }
        }
        Ok((held, soonest, last))
    }

    // --- the permit scripts' helpers (lua/permits.lua) ---

    fn grant_permit(
        &mut self,
        sem: &Semaphore,
        owner: &str,
        now: u64,
        ttl: i64,
    ) -> Result<i64, String> {
        let permit = format!("{}{owner}", sem.prefix);
        let token = self.grant(&permit, owner, &sem.fence, now, ttl)?;
        self.zadd(&sem.holders, token as f64, owner)?;
        Ok(token)
    }

    fn hand_permits(&mut self, sem: &Semaphore, free: i64, now: u64) -> Result<i64, String> {
        let mut handed = 0;
        while handed < free {
            let Some((head, deadline)) = self.pop_head(&sem.queue, &sem.waiters, now)? else {
                break;
            };
            let token = self.grant_permit(sem, &head, now, deadline - now as i64)?;
            self.wake(&head, &token.to_string());
            handed += 1;
        }
        Ok(handed)
    }

    fn give_back(
        &mut self,
        sem: &Semaphore,
        token: &str,
        free: bool,
        now: u64,
    ) -> Result<i64, String> {
        self.del(&sem.permit);
        self.zrem(&sem.holders, token)?;
        if free {
            self.wake_head(&sem.queue, &sem.waiters, now)?;
            return Ok(0);
        }
        let (held, _, _) = self.live_holders(&sem.holders, &sem.prefix)?;
        let capacity = self.get(&sem.capacity)?.map_or(Ok(0), |v| int(&v))?;
        self.hand_permits(sem, capacity - held, now)
    }

    fn rw_acquire(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let rw = Rw::new(keys)?;
        let (token, lease, count, mode, wlease, want) = match args {
            [t, l, c, m, w, want] | [t, l, c, m, w, want, _] => {
                (t, int(l)?, int(c)?, m, int(w)?, want)
            }
            _ => return Err(format!("ERR expected 6 or 7 arguments, got {}", args.len())),
        };
        let mine = args.get(6);

        if let Some(held) = self.rw_ours(&rw, token, count, lease)? {
            return Ok(held);
        }
        if mode == "refresh" && self.zscore(&rw.waiters, token)?.is_none() {
            return Ok(ints(&[3]));
        }

        let now = self.now;
        self.hand_rw(&rw, now)?;
        if let Some(held) = self.rw_ours(&rw, token, count, lease)? {
            return Ok(held);
        }

        let head = self.live_head(&rw.queue, &rw.waiters, now)?;
        let first = head.as_ref().is_none_or(|(h, _)| h == token);
        let writing = self.hget(&rw.writer, "owner")?;
        let take = if want == "write" {
            first
                && writing.is_none()
                && (self.live_holders(&rw.readers, &rw.prefix)?.0 == 0
                    || plant::on(Plant::WriteBesideReaders))
        } else {
            let downgrade = mine.is_some()
                && (writing.as_ref() == mine || plant::on(Plant::DowngradeForAnyone));
            (first && writing.is_none()) || downgrade
        };
        if take {
            self.lrem(&rw.queue, token)?;
            self.zrem(&rw.waiters, token)?;
            self.hdel(&rw.modes, token)?;
            if want == "write" {
                let f = self.grant(&rw.writer, token, &rw.fence, now, lease)?;
                return Ok(ints(&[1, f, 1]));
            }
            let f = self.grant(&rw.own, token, &rw.fence, now, lease)?;
            self.zadd(&rw.readers, f as f64, token)?;
            return Ok(ints(&[1, f, 1]));
        }
        let (_, _, last) = self.live_holders(&rw.readers, &rw.prefix)?;
        let pttl = if writing.is_some() {
            self.pttl(&rw.writer)
        } else {
            last
        };
        if mode == "try" {
            return Ok(ints(&[0, pttl]));
        }

        let latest = self.enqueue(&rw.queue, &rw.waiters, token, now, wlease, &rw.fence)?;
        self.hset(&rw.modes, &[(token.as_str(), want.clone())])?;
        if self.pttl(&rw.modes) < wlease {
            self.pexpire(&rw.modes, wlease);
        }
        Ok(ints(&[2, pttl, latest]))
    }

    fn rw_release(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let rw = Rw::new(keys)?;
        let [token, count] = args_n::<2>(args)?;
        let count = int(count)?;

        if self.hget(&rw.own, "owner")?.as_deref() != Some(token.as_str()) {
            return Ok(ints(&[0]));
        }
        if count > 0 {
            self.hset(&rw.own, &[("count", count.to_string())])?;
            return Ok(ints(&[1, count]));
        }
        self.del(&rw.own);
        self.zrem(&rw.readers, token)?;
        let handed = self.hand_rw(&rw, self.now)?;
        Ok(ints(&[2, handed]))
    }

    fn rw_dequeue(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let rw = Rw::new(keys)?;
        let [token] = args_n::<1>(args)?;

        if self.hget(&rw.own, "owner")?.as_deref() == Some(token.as_str()) {
            self.del(&rw.own);
            self.zrem(&rw.readers, token)?;
            self.hand_rw(&rw, self.now)?;
            return Ok(Value::Int(2));
        }
        self.lrem(&rw.queue, token)?;
        self.hdel(&rw.modes, token)?;
        Ok(Value::Int(self.zrem(&rw.waiters, token)?))
    }

    // --- the RW scripts' helpers (lua/rw.lua) ---

    /// The hold of `token` on its own hash, renewed to `count` levels: `ours()`.
    fn rw_ours(
        &mut self,
        rw: &Rw,
        token: &str,
        count: i64,
        lease: i64,
    ) -> Result<Option<Value>, String> {
        if self.hget(&rw.own, "owner")?.as_deref() != Some(token) {
            return Ok(None);
        }
        self.hset(&rw.own, &[("count", count.to_string())])?;
        self.stretch(&rw.own, lease);
        let fence = int(&self.hget(&rw.own, "fence")?.unwrap_or_default())?;
        Ok(Some(ints(&[1, fence, count])))
    }

    fn hand_rw(&mut self, rw: &Rw, now: u64) -> Result<i64, String> {
        if self.live(&rw.writer).is_some() {
            return Ok(0);
        }
        let (mut held, _, _) = self.live_holders(&rw.readers, &rw.prefix)?;
        let mut handed = 0;
        while let Some((head, _)) = self.live_head(&rw.queue, &rw.waiters, now)? {
            let want = self.hget(&rw.modes, &head)?;
            let writes = want.as_deref() == Some("write");
            if writes && held > 0 {
                break;
            }
            let (_, deadline) = self.pop_head(&rw.queue, &rw.waiters, now)?.expect("live");
            self.hdel(&rw.modes, &head)?;
            let ttl = deadline - now as i64;
            let token = if writes {
                self.grant(&rw.writer, &head, &rw.fence, now, ttl)?
            } else {
                let reader = format!("{}{head}", rw.prefix);
                let token = self.grant(&reader, &head, &rw.fence, now, ttl)?;
                self.zadd(&rw.readers, token as f64, &head)?;
                held += 1;
                token
            };
            self.wake(&head, &token.to_string());
            handed += 1;
            if writes {
                break;
            }
        }
        Ok(handed)
    }

    // --- the prelude's helpers ---

    fn live_head(
        &mut self,
        queue: &str,
        waiters: &str,
        now: u64,
    ) -> Result<Option<(String, i64)>, String> {
        loop {
            let Some(head) = self.lindex0(queue)? else {
                return Ok(None);
            };
            if let Some(deadline) = self.zscore(waiters, &head)?
                && deadline > now as f64
            {
                return Ok(Some((head, deadline as i64)));
            }
            self.lpop(queue)?;
            self.zrem(waiters, &head)?;
        }
    }

    fn enqueue(
        &mut self,
        queue: &str,
        waiters: &str,
        token: &str,
        now: u64,
        wlease: i64,
        fence: &str,
    ) -> Result<i64, String> {
        if self.zscore(waiters, token)?.is_none() {
            self.rpush(queue, token)?;
        }
        self.zadd(waiters, (now as i64 + wlease) as f64, token)?;
        if self.pttl(queue) < wlease {
            self.pexpire(queue, wlease);
            self.pexpire(waiters, wlease);
        }
        self.get(fence)?
            .map(|f| int(&f))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    fn wake_head(&mut self, queue: &str, waiters: &str, now: u64) -> Result<(), String> {
        if let Some((head, _)) = self.live_head(queue, waiters, now)? {
            self.wake(&head, "free");
        }
        Ok(())
    }

    /// Publishes `word` (a handed tenure's fencing token, or "free") to the waiter `head`.
    fn wake(&mut self, head: &str, word: &str) {
        let client = head.get(..32).unwrap_or(head);
        self.published.push((
            format!("dlock:wake:{client}"),
            format!("{head} {word}").into_bytes(),
        ));
    }

    fn grant(
        &mut self,
        lock: &str,
        owner: &str,
        fence: &str,
        now: u64,
        ttl: i64,
    ) -> Result<i64, String> {
        let token = self.next_token(fence, now)?;
        self.hset(
            lock,
            &[
                ("owner", owner.to_owned()),
                ("count", "1".into()),
                ("fence", token.to_string()),
            ],
        )?;
        self.pexpire(lock, ttl);
        Ok(token)
    }

    fn pop_head(
        &mut self,
        queue: &str,
        waiters: &str,
        now: u64,
    ) -> Result<Option<(String, i64)>, String> {
        let head = self.live_head(queue, waiters, now)?;
        if let Some((h, _)) = &head {
            self.lpop(queue)?;
            self.zrem(waiters, h)?;
        }
        Ok(head)
    }

    fn hand_off(
        &mut self,
        lock: &str,
        fence: &str,
        queue: &str,
        waiters: &str,
        now: u64,
    ) -> Result<i64, String> {
        let Some((head, deadline)) = self.pop_head(queue, waiters, now)? else {
            return Ok(0);
        };
        let mut ttl = deadline - now as i64;
        if plant::on(Plant::LongHandOff) {
            ttl += 30_000;
        }
        let token = self.grant(lock, &head, fence, now, ttl)?;
        self.wake(&head, &token.to_string());
        Ok(1)
    }

    fn raise(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let [lock, fence] = match keys {
            [a, b] => [a, b],
            _ => return Err(format!("ERR expected 2 keys, got {}", keys.len())),
        };
        let [token, fencing] = args_n::<2>(args)?;
        if self.hget(lock, "owner")?.as_deref() != Some(token.as_str()) {
            return Ok(Value::Int(0));
        }
        let current = self.get(fence)?.map_or(Ok(0), |v| int(&v))?;
        if current < int(fencing)? {
            self.set(fence, fencing);
        }
        self.hset(lock, &[("fence", fencing.clone())])?;
        Ok(Value::Int(1))
    }

    // --- The Redisson-compatible lock (lua/redisson_*.lua) ---

    fn redisson_acquire(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let [lock, fence] = keys_n::<2>(keys)?;
        let [field, lease] = args_n::<2>(args)?;
        if self.live(lock).is_none() {
            self.hset(lock, &[(field, "1".to_owned())])?;
            self.pexpire(lock, int(lease)?);
            let token = self.next_token(fence, self.now)?;
            return Ok(ints(&[1, token]));
        }
        if self.hget(lock, field)?.is_some() {
            if plant::on(Plant::RedissonReacquireShrinks) {
                self.pexpire(lock, int(lease)?);
            }
            self.stretch(lock, int(lease)?);
            let token = self.next_token(fence, self.now)?;
            return Ok(ints(&[1, token]));
        }
        Ok(ints(&[0, self.pttl(lock)]))
    }

    fn redisson_release(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        let [lock] = keys_n::<1>(keys)?;
        let [field, channel] = args_n::<2>(args)?;
        if self.hget(lock, field)?.is_none() {
            return Ok(Value::Int(0));
        }
        self.del(lock);
        self.published.push((channel.clone(), b"0".to_vec()));
        Ok(Value::Int(1))
    }

    fn redisson_extend(&mut self, keys: &[String], args: &[String]) -> Result<Value, String> {
        if args.len() != 2 * keys.len() {
            return Err("ERR redisson-extend takes a field and a lease per key".into());
        }
        let mut result = Vec::with_capacity(keys.len());
        for (lock, pair) in keys.iter().zip(args.chunks(2)) {
            if self.hget(lock, &pair[0])?.is_some() {
                self.stretch(lock, int(&pair[1])?);
                result.push(Value::Int(1));
            } else {
                result.push(Value::Int(0));
            }
        }
        Ok(Value::Array(result))
    }

    fn redisson_status(&mut self, keys: &[String]) -> Result<Value, String> {
        let [lock, fence] = keys_n::<2>(keys)?;
        let mut reply: Vec<Value> = match self.live(lock).map(|e| &e.data) {
            None => Vec::new(),
            Some(Data::Hash(h)) => h
                .iter()
                .flat_map(|(f, v)| [f.clone(), v.clone()])
                .map(|s| Value::Data(s.into_bytes()))
                .collect(),
            Some(_) => return Err(WRONGTYPE.into()),
        };
        reply.push(Value::Int(self.pttl(lock)));
        let latest = self.get(fence)?.map(|s| int(&s)).transpose()?;
        reply.push(Value::Int(latest.unwrap_or(0)));
        Ok(Value::Array(reply))
    }

    fn next_token(&mut self, fence: &str, now: u64) -> Result<i64, String> {
        let token = self.incr(fence)?;
        let floor = i64::try_from(now).map_or(i64::MAX, |ms| ms.saturating_mul(1000));
        if token >= floor || plant::on(Plant::NoTimeFloor) {
            return Ok(token);
        }
        if let Some(e) = self.live(fence) {
            e.data = Data::Str(floor.to_string());
        }
        Ok(floor)
    }

    fn stretch(&mut self, lock: &str, lease: i64) {
        if self.pttl(lock) < lease {
            self.pexpire(lock, lease);
        }
    }

    // --- Redis primitives, with Redis's expiry and empty-collection rules ---

    fn live(&mut self, key: &str) -> Option<&mut Entry> {
        let now = self.now;
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|t| now > t))
        {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    fn del(&mut self, key: &str) {
        self.live(key);
        self.keys.remove(key);
    }

    fn pttl(&mut self, key: &str) -> i64 {
        let now = self.now;
        match self.live(key) {
            None => -2,
            Some(Entry {
                expires_at: None, ..
            }) => -1,
            Some(Entry {
                expires_at: Some(t),
                ..
            }) => (*t as i64 - now as i64).max(0),
        }
    }

    fn pexpire(&mut self, key: &str, ms: i64) {
        let now = self.now;
        if ms <= 0 {
            self.del(key);
        } else if let Some(e) = self.live(key) {
            e.expires_at = Some(now + ms as u64);
        }
    }

    fn incr(&mut self, key: &str) -> Result<i64, String> {
        let next = match self.live(key).map(|e| &e.data) {
            None => 1,
            Some(Data::Str(s)) => s
                .parse::<i64>()
                .map_err(|_| "ERR value is not an integer or out of range")?
                .checked_add(1)
                .ok_or("ERR increment or decrement would overflow")?,
            Some(_) => return Err(WRONGTYPE.into()),
        };
        match self.live(key) {
            Some(e) => e.data = Data::Str(next.to_string()),
            None => {
                self.keys.insert(
                    key.to_owned(),
                    Entry {
                        data: Data::Str(next.to_string()),
                        expires_at: None,
                    },
                );
            }
        }
        Ok(next)
    }

    /// `SET key value`: a string without expiry, whatever the key held before.
    fn set(&mut self, key: &str, value: &str) {
        self.keys.insert(
            key.to_owned(),
            Entry {
                data: Data::Str(value.to_owned()),
                expires_at: None,
            },
        );
    }

    fn get(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.live(key).map(|e| &e.data) {
            None => Ok(None),
            Some(Data::Str(s)) => Ok(Some(s.clone())),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    fn hget(&mut self, key: &str, field: &str) -> Result<Option<String>, String> {
        match self.live(key).map(|e| &e.data) {
            None => Ok(None),
            Some(Data::Hash(h)) => Ok(h.get(field).cloned()),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    fn hset(&mut self, key: &str, pairs: &[(&str, String)]) -> Result<(), String> {
        let entry = self.entry_or(key, || Data::Hash(BTreeMap::new()));
        let Data::Hash(h) = &mut entry.data else {
            return Err(WRONGTYPE.into());
        };
        for (field, value) in pairs {
            h.insert((*field).to_owned(), value.clone());
        }
        Ok(())
    }

    fn hdel(&mut self, key: &str, field: &str) -> Result<(), String> {
        match self.live(key).map(|e| &mut e.data) {
            None => return Ok(()),
            Some(Data::Hash(h)) => {
                h.remove(field);
            }
            Some(_) => return Err(WRONGTYPE.into()),
        }
        self.drop_if_empty(key);
        Ok(())
    }

    fn lindex0(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.live(key).map(|e| &e.data) {
            None => Ok(None),
            Some(Data::List(l)) => Ok(l.front().cloned()),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    fn lrange(&mut self, key: &str) -> Result<Vec<String>, String> {
        match self.live(key).map(|e| &e.data) {
            None => Ok(Vec::new()),
            Some(Data::List(l)) => Ok(l.iter().cloned().collect()),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    fn lpop(&mut self, key: &str) -> Result<Option<String>, String> {
        let popped = match self.live(key).map(|e| &mut e.data) {
            None => return Ok(None),
            Some(Data::List(l)) => l.pop_front(),
            Some(_) => return Err(WRONGTYPE.into()),
        };
        self.drop_if_empty(key);
        Ok(popped)
    }

    fn rpush(&mut self, key: &str, value: &str) -> Result<(), String> {
        let entry = self.entry_or(key, || Data::List(VecDeque::new()));
        let Data::List(l) = &mut entry.data else {
            return Err(WRONGTYPE.into());
        };
        l.push_back(value.to_owned());
        Ok(())
    }

    fn lrem(&mut self, key: &str, value: &str) -> Result<(), String> {
        match self.live(key).map(|e| &mut e.data) {
            None => return Ok(()),
            Some(Data::List(l)) => l.retain(|v| v != value),
            Some(_) => return Err(WRONGTYPE.into()),
        }
        self.drop_if_empty(key);
        Ok(())
    }

    fn zscore(&mut self, key: &str, member: &str) -> Result<Option<f64>, String> {
        match self.live(key).map(|e| &e.data) {
            None => Ok(None),
            Some(Data::ZSet(z)) => Ok(z.get(member).copied()),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    /// `ZRANGE key 0 -1`: members by score, then by member.
    fn zrange(&mut self, key: &str) -> Result<Vec<String>, String> {
        match self.live(key).map(|e| &e.data) {
            None => Ok(Vec::new()),
            Some(Data::ZSet(z)) => {
                let mut members: Vec<(f64, String)> =
                    z.iter().map(|(m, s)| (*s, m.clone())).collect();
                members.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
                Ok(members.into_iter().map(|(_, m)| m).collect())
            }
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    fn zadd(&mut self, key: &str, score: f64, member: &str) -> Result<(), String> {
        let entry = self.entry_or(key, || Data::ZSet(BTreeMap::new()));
        let Data::ZSet(z) = &mut entry.data else {
            return Err(WRONGTYPE.into());
        };
        z.insert(member.to_owned(), score);
        Ok(())
    }

    fn zrem(&mut self, key: &str, member: &str) -> Result<i64, String> {
        let removed = match self.live(key).map(|e| &mut e.data) {
            None => return Ok(0),
            Some(Data::ZSet(z)) => z.remove(member).is_some(),
            Some(_) => return Err(WRONGTYPE.into()),
        };
        self.drop_if_empty(key);
        Ok(i64::from(removed))
    }

    fn entry_or(&mut self, key: &str, empty: impl FnOnce() -> Data) -> &mut Entry {
        self.live(key);
        self.keys.entry(key.to_owned()).or_insert_with(|| Entry {
            data: empty(),
            expires_at: None,
        })
    }

    /// Redis deletes a list, hash or sorted set when its last element goes.
    fn drop_if_empty(&mut self, key: &str) {
        let empty = match self.keys.get(key).map(|e| &e.data) {
            Some(Data::List(l)) => l.is_empty(),
            Some(Data::ZSet(z)) => z.is_empty(),
            Some(Data::Hash(h)) => h.is_empty(),
            _ => false,
        };
        if empty {
            self.keys.remove(key);
        }
    }
}

/// The six keys of the permit scripts, and the prefix of the semaphore's permit hashes (the
/// permit's key without its owner token, the first argument).
struct Semaphore {
    permit: String,
    fence: String,
    queue: String,
    waiters: String,
    holders: String,
    capacity: String,
    prefix: String,
}

impl Semaphore {
    fn new(keys: &[String], token: Option<&String>) -> Result<Self, String> {
        let [permit, fence, queue, waiters, holders, capacity] = match keys {
            [a, b, c, d, e, f] => [a, b, c, d, e, f].map(String::clone),
            _ => return Err(format!("ERR expected 6 keys, got {}", keys.len())),
        };
        let token = token.ok_or("ERR expected an owner token")?;
        let prefix = permit
            .strip_suffix(token.as_str())
            .unwrap_or_default()
            .to_owned();
        Ok(Self {
            permit,
            fence,
            queue,
            waiters,
            holders,
            capacity,
            prefix,
        })
    }
}

/// The seven keys of the RW scripts, and the prefix of the lock's reader hashes (the writer's
/// key with `write` replaced by `read:`).
struct Rw {
    own: String,
    fence: String,
    queue: String,
    waiters: String,
    readers: String,
    writer: String,
    modes: String,
    prefix: String,
}

impl Rw {
    fn new(keys: &[String]) -> Result<Self, String> {
        let [own, fence, queue, waiters, readers, writer, modes] = match keys {
            [a, b, c, d, e, f, g] => [a, b, c, d, e, f, g].map(String::clone),
            _ => return Err(format!("ERR expected 7 keys, got {}", keys.len())),
        };
        let prefix = format!("{}read:", writer.strip_suffix("write").unwrap_or(&writer));
        Ok(Self {
            own,
            fence,
            queue,
            waiters,
            readers,
            writer,
            modes,
            prefix,
        })
    }
}

fn four(keys: &[String]) -> Result<[&String; 4], String> {
    match keys {
        [a, b, c, d] => Ok([a, b, c, d]),
        _ => Err(format!("ERR expected 4 keys, got {}", keys.len())),
    }
}

fn keys_n<const N: usize>(keys: &[String]) -> Result<[&String; N], String> {
    let keys: [&String; N] = keys
        .iter()
        .collect::<Vec<_>>()
        .try_into()
        .map_err(|_| format!("ERR the script takes {N} keys"))?;
    Ok(keys)
}

fn args_n<const N: usize>(args: &[String]) -> Result<[&String; N], String> {
    let refs: Vec<&String> = args.iter().collect();
    refs.try_into()
        .map_err(|_| format!("ERR expected {N} arguments, got {}", args.len()))
}

/// The arguments without an optional trailing `word` at index `at`, and whether it was there.
fn flag<'a>(args: &'a [String], at: usize, word: &str) -> (&'a [String], bool) {
    match args.get(at) {
        Some(a) if a == word && args.len() == at + 1 => (&args[..at], true),
        _ => (args, false),
    }
}

/// The election channel beside lock hash `lock` (`dlock:{E}:lock` → `dlock:{E}:leader`), as
/// the scripts derive it.
fn leader_channel(lock: &str) -> String {
    format!("{}leader", lock.strip_suffix("lock").unwrap_or(lock))
}

fn int(s: &str) -> Result<i64, String> {
    s.parse().map_err(|_| format!("ERR not an integer: {s:?}"))
}

fn ints(values: &[i64]) -> Value {
    Value::Array(values.iter().map(|v| Value::Int(*v)).collect())
}
