//! The reference store against a real redis-server: the same random sequences of script
//! calls must give the same replies, publish the same messages (channel and payload, in
//! order) and leave the same keyspace.
//!
//! The test starts its own `redis-server` (from `PATH`; `scripts/setup` installs it) on a
//! free loopback port in a temporary directory and stops it at the end. Some leases are a few
//! milliseconds long, so locks and waiters expire during a run (dead queue heads, free locks
//! with waiters). To keep expiry away from the instants the two sides compare, calls start
//! just after a 10 ms tick of the server's clock and short leases are 5 ms past a multiple
//! of 10 ms, so that expiries tend to fall mid-tick, far from any call.
//!
//! Each call runs on redis-server in one MULTI/EXEC — `TIME`, the script, the keyspace dump
//! (which reads `TIME` again) — so nothing runs between the two readings of the clock, however
//! loaded the machine: the script ran at one of the milliseconds between them (or, for
//! expiry, the one before: Redis fixes the expiry clock when EXEC starts). The reference
//! store runs the script at each of them in turn and takes the first at which the reply, the
//! published messages and the whole keyspace agree — contents, sorted-set scores (waiters'
//! deadlines) and each key's absolute expiry (`PEXPIRETIME`) — so a fencing token taken from
//! the clock must be exactly the server's. A stall of the machine only widens the window the
//! reference searches; nothing is given up. The expiry times the server set are then copied
//! into the reference (a `PEXPIRE` may read the clock a millisecond after the script's `TIME`),
//! so both sides go on from exactly the same state.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ::redis as resp;
use dlock_core::ClientId;
use dlock_core::redis::reference::{DumpedKey, Store, zset_shown};
use dlock_core::redis::{
    self, Fairness, LockKeys, Mode, RedisOp, RwHold, RwKeys, Script, SemaphoreKeys, Value, Words,
};
use dlock_testkit::{RedisServer, Rng};

fn convert(v: resp::Value) -> Value {
    match v {
        resp::Value::Nil => Value::Nil,
        resp::Value::Int(i) => Value::Int(i),
        resp::Value::BulkString(b) => Value::Data(b),
        resp::Value::SimpleString(s) => Value::Status(s),
        resp::Value::Okay => Value::Status("OK".into()),
        resp::Value::Array(items) => Value::Array(items.into_iter().map(convert).collect()),
        other => panic!("unexpected reply {other:?}"),
    }
}

/// Replies agree, except remaining TTLs ((PERMIT-)ACQUIRE's `{0, pttl}` and `{2, pttl, latest}`,
/// STATUS's fourth item) within 50 ms.
fn same_reply(script: Script, real: &Value, reference: &Value) -> bool {
    let ttl_at = match (script, real) {
        (Script::Acquire | Script::PermitAcquire | Script::RwAcquire, Value::Array(a))
            if matches!(a.first(), Some(Value::Int(0 | 2))) =>
        {
            Some(1)
        }
        (Script::Status, _) => Some(3),
        (Script::RedissonAcquire, Value::Array(a)) if matches!(a.first(), Some(Value::Int(0))) => {
            Some(1)
        }
        (Script::RedissonStatus, Value::Array(a)) => Some(a.len().saturating_sub(2)),
        _ => None,
    };
    match (ttl_at, real, reference) {
        (Some(at), Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            a.iter().zip(b).enumerate().all(|(i, pair)| match pair {
                (Value::Int(x), Value::Int(y)) if i == at => (x - y).abs() <= 50,
                (x, y) => x == y,
            })
        }
        _ => real == reference,
    }
}

/// The server's keyspace, read atomically by a script (Redis freezes expiry time for a
/// script's duration), with the server time in ms at which it was read: each key's type,
/// contents (sorted sets with scores) and absolute expiry (-1: none).
const DUMP: &str = r"
local t = redis.call('TIME')
local out = {t[1] * 1000 + math.floor(t[2] / 1000)}
for _, k in ipairs(redis.call('KEYS', '*')) do
  local kind = redis.call('TYPE', k)['ok']
  local v = {}
  if kind == 'string' then v = {redis.call('GET', k)}
  elseif kind == 'hash' then v = redis.call('HGETALL', k)
  elseif kind == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif kind == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  end
  table.insert(out, {k, kind, v, redis.call('PEXPIRETIME', k)})
end
return out
";

fn dump_real(con: &mut resp::Connection) -> (u64, Keyspace) {
    parse_dump(resp::Script::new(DUMP).invoke(con).expect("dump"))
}

/// A keyspace as [`Store::dump`] shows it.
type Keyspace = BTreeMap<String, DumpedKey>;

/// The server time and keyspace from a [`DUMP`] reply.
fn parse_dump(v: resp::Value) -> (u64, Keyspace) {
    type Entry = (String, String, Vec<String>, i64);
    let resp::Value::Array(mut items) = v else {
        panic!("dump replied {v:?}")
    };
    let at: u64 = resp::from_redis_value(items.remove(0)).expect("time");
    let keys = items
        .into_iter()
        .map(|item| {
            let (k, kind, v, expires_at): Entry = resp::from_redis_value(item).expect("entry");
            let shown = match kind.as_str() {
                "string" => format!("string {}", v[0]),
                "hash" => format!(
                    "hash {:?}",
                    v.chunks(2)
                        .map(|p| (p[0].clone(), p[1].clone()))
                        .collect::<BTreeMap<_, _>>()
                ),
                "list" => format!("list {v:?}"),
                "zset" => zset_shown(
                    v.chunks(2)
                        .map(|p| (p[0].as_str(), p[1].parse().expect("a score"))),
                ),
                other => panic!("unexpected key type {other}"),
            };
            let expires_at = u64::try_from(expires_at).ok();
            (k, DumpedKey { shown, expires_at })
        })
        .collect();
    (at, keys)
}

const TICK_MS: u64 = 10;

/// Sleeps until just after the server clock's next tick.
fn next_tick(con: &mut resp::Connection) {
    let now = server_ms(con);
    let wait = TICK_MS - now % TICK_MS;
    std::thread::sleep(Duration::from_millis(wait) + Duration::from_micros(300));
}

fn server_ms(con: &mut resp::Connection) -> u64 {
    let (secs, micros): (u64, u64) = resp::cmd("TIME").query(con).expect("TIME");
    secs * 1000 + micros / 1000
}

/// About the server's time in ms × 1000, the floor of fresh counters (§3).
fn server_floor_guess() -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    ms * 1000
}

fn random_op(rng: &mut Rng, names: &[&str], tokens: &[String]) -> RedisOp {
    let name = names[rng.below(names.len() as u64) as usize];
    let keys = LockKeys::new(name);
    // One semaphore and one read-write lock, so that they fill up and their waiters queue.
    let sem = SemaphoreKeys::new(names[0]);
    let rw = RwKeys::new(names[1]);
    let token = &tokens[rng.below(tokens.len() as u64) as usize];
    let rw_hold = |rng: &mut Rng| RwHold {
        keys: &rw,
        token,
        write: rng.below(3) == 0,
        downgrade: (rng.below(4) == 0)
            .then(|| tokens[rng.below(tokens.len() as u64) as usize].as_str()),
    };
    let mut lease = || {
        if rng.below(3) == 0 {
            Duration::from_millis(5 + TICK_MS * rng.below(4))
        } else {
            Duration::from_secs(60)
        }
    };
    let (lease, waiter_lease) = (lease(), lease());
    match rng.below(25) {
        22 => {
            // The lock's current term now and then (read from the store), else a wrong one.
            let term = [7, server_floor_guess()][rng.below(2) as usize];
            redis::proclaim(
                &keys,
                token,
                term,
                ["", "a:1", "b b"][rng.below(3) as usize],
            )
        }
        23 => redis::resign(keys.clone(), token),
        24 => redis::leader(&keys),
        17..=19 => {
            let hold = rw_hold(rng);
            let mode = [Mode::Try, Mode::Wait, Mode::Refresh][rng.below(3) as usize];
            let count = 1 + rng.below(2) as u32;
            redis::rw_acquire(&hold, lease, count, mode, waiter_lease)
        }
        20 => redis::rw_release(&rw_hold(rng), rng.below(2) as u32),
        21 => redis::rw_dequeue(&rw_hold(rng)),
        11..=13 => {
            // Mostly 2 permits; now and then 1, which the semaphore refuses while in use.
            let permits = if rng.below(8) == 0 { 1 } else { 2 };
            let mode = [Mode::Try, Mode::Wait, Mode::Refresh][rng.below(3) as usize];
            redis::permit_acquire(
                &sem,
                token,
                lease,
                permits,
                mode,
                waiter_lease,
                fairness(rng),
            )
        }
        14..=15 => redis::permit_release(&sem, token, fairness(rng)),
        16 => redis::permit_dequeue(&sem, token),
        10 => {
            // Below, near or above the counters (which start at the server time × 1000).
            let fencing = [7, server_floor_guess(), 1 << 52][rng.below(3) as usize];
            redis::raise(&keys, token, fencing + rng.below(3))
        }
        0..=4 => {
            let mode = [Mode::Try, Mode::Wait, Mode::Refresh][rng.below(3) as usize];
            let count = 1 + rng.below(3) as u32;
            redis::acquire(
                keys.clone(),
                token,
                lease,
                count,
                mode,
                waiter_lease,
                fairness(rng),
            )
        }
        5..=6 => redis::release(keys.clone(), token, rng.below(3) as u32, fairness(rng)),
        7 => redis::dequeue(keys.clone(), token),
        8 => redis::status(keys.clone()),
        _ => {
            let n = 1 + rng.below(3) as usize;
            let picks: Vec<(LockKeys, String, Duration)> = (0..n)
                .map(|_| {
                    let name = names[rng.below(names.len() as u64) as usize];
                    let t = tokens[rng.below(tokens.len() as u64) as usize].clone();
                    // A lock, or the permit or read hold that token would hold.
                    let k = match rng.below(4) {
                        0 => SemaphoreKeys::new(name).lock_keys(&t),
                        1 => RwKeys::new(name).lock_keys(&t, false),
                        _ => LockKeys::new(name),
                    };
                    (k, t, Duration::from_secs(30 + rng.below(90)))
                })
                .collect();
            redis::extend(picks.iter().map(|(k, t, l)| (k.lock(), t.as_str(), *l)))
        }
    }
}

/// A redis-server and the reference store, fed the same script calls.
struct Pair {
    _server: RedisServer,
    con: resp::Connection,
    /// Subscribed to every channel while a call runs: what the scripts publish.
    sub: resp::Connection,
    /// SHA-1 of each script, loaded into the server (EVALSHA in MULTI cannot fall back).
    scripts: BTreeMap<Script, String>,
    /// The function library, loaded too: calls alternate between EVALSHA and FCALL on one
    /// keyspace, as clients of earlier releases and of this one share a server.
    library: redis::Library,
    calls: u64,
    dump: String,
    store: Store,
}

impl Pair {
    fn start() -> Self {
        // `just plants`: a planted bug in a Lua script (core/src/plant.rs) that these
        // comparisons must catch.
        #[cfg(feature = "plants")]
        dlock_core::plant::set_from_env();
        let server = RedisServer::start();
        let con = resp::Client::open(server.url())
            .and_then(|c| c.get_connection())
            .expect("connect");
        let mut con = con;
        let sub = resp::Client::open(server.url())
            .and_then(|c| c.get_connection())
            .expect("connect");
        // A marker that never comes fails the test instead of hanging it.
        sub.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("read timeout");
        let mut load = |source: &str| -> String {
            resp::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query(&mut con)
                .expect("SCRIPT LOAD")
        };
        let scripts = Script::ALL
            .iter()
            .map(|s| (*s, load(&s.source())))
            .collect();
        let dump = load(DUMP);
        let library = redis::library();
        let _: String = resp::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&library.source)
            .query(&mut con)
            .expect("FUNCTION LOAD");
        Pair {
            _server: server,
            con,
            sub,
            scripts,
            library,
            calls: 0,
            dump,
            store: Store::new(),
        }
    }

    fn reset(&mut self) {
        self.store = Store::new();
        // FLUSHALL keeps functions.
        let _: () = resp::cmd("FLUSHALL")
            .query(&mut self.con)
            .expect("FLUSHALL");
    }

    /// Runs a fixed sequence on both from empty keyspaces: each step's call (after `before`
    /// it) must get the same reply on both, starting with the number given (if any).
    fn run<const N: usize>(
        &mut self,
        steps: [(&str, RedisOp, Option<i64>); N],
        before: impl Fn(&str),
    ) {
        self.reset();
        for (what, op, first) in steps {
            before(what);
            let reply = self.compare(op, what);
            if let Some(first) = first {
                assert_eq!(first_number(&reply), first, "{what}: {reply:?}");
            }
        }
    }

    /// Runs `op` on both just after a clock tick; panics when replies or keyspaces differ.
    /// Returns redis-server's reply.
    fn compare(&mut self, op: RedisOp, what: &str) -> Value {
        let RedisOp::Eval { script, keys, args } = op else {
            unreachable!()
        };
        let mut sub = self.sub.as_pubsub();
        sub.psubscribe("*").expect("PSUBSCRIBE");
        next_tick(&mut self.con);
        self.calls += 1;
        let (verb, name) = if self.calls.is_multiple_of(2) {
            ("EVALSHA", self.scripts[&script].clone())
        } else {
            ("FCALL", self.library.function(script))
        };
        let what = &format!("{what} (by {verb})");
        let (time, real, dump): ((u64, u64), resp::Value, resp::Value) = resp::pipe()
            .atomic()
            .cmd("TIME")
            .cmd(verb)
            .arg(name)
            .arg(keys.len())
            .arg(keys.to_vec())
            .arg(args.to_vec())
            .cmd("EVALSHA")
            .arg(&self.dump)
            .arg(0)
            .query(&mut self.con)
            .unwrap_or_else(|e| panic!("{what}: the script fails on redis-server: {e}"));
        // What the call published, in order: every message up to a marker published after it.
        let _: i64 = resp::cmd("PUBLISH")
            .arg(MARKER)
            .arg("")
            .query(&mut self.con)
            .expect("PUBLISH");
        let mut published = Vec::new();
        loop {
            let msg = sub.get_message().expect("a published message");
            if msg.get_channel_name() == MARKER {
                break;
            }
            published.push((
                msg.get_channel_name().to_owned(),
                msg.get_payload_bytes().to_vec(),
            ));
        }
        drop(sub);
        let at = time.0 * 1000 + time.1 / 1000;
        let real = convert(real);
        let (dumped, real_keys) = parse_dump(dump);
        // The script ran at one of the milliseconds from `at` to `dumped` (or, for expiry,
        // the one before `at`: Redis fixes the time keys expire by when EXEC starts): the
        // first at which the reference agrees is taken.
        let mut first = None;
        for now in (at..=dumped).chain([at - 1]) {
            let mut store = self.store.clone();
            let outcome = store
                .eval(now, script, &keys, &args)
                .expect("script runs on the reference store");
            let window = (at - 1, dumped);
            let differing = differing_keys(&real_keys, &store.clone().dump(dumped), now, window);
            if same_reply(script, &real, &outcome.reply)
                && differing.is_empty()
                && same_messages(&published, &outcome.published)
            {
                for (key, k) in &real_keys {
                    store.set_expiry(key, k.expires_at);
                }
                self.store = store;
                return real;
            }
            first.get_or_insert((outcome, differing));
        }
        let (outcome, differing) = first.expect("at least one millisecond");
        panic!(
            "{what}: {} {keys:?} {args:?} (server ms {at}, keys at {dumped})\n  redis-server: {real:?}, published {}\n  reference:    {:?}, published {}\n  {}",
            script.name(),
            shown(&published),
            outcome.reply,
            shown(&outcome.published),
            differing.join("\n  "),
        );
    }
}

/// The channel on which the test marks the end of a call's messages.
const MARKER: &str = "dlock-differential:marker";

/// Two lists of published messages agree: the same messages in the same order, exactly. (The
/// reference runs at the millisecond the script read, so a fencing token taken from the clock
/// is the same on both; a token off by one is a bug, not drift.)
fn same_messages(real: &[(String, Vec<u8>)], reference: &[(String, Vec<u8>)]) -> bool {
    real == reference
}

fn shown(messages: &[(String, Vec<u8>)]) -> String {
    let shown: Vec<String> = messages
        .iter()
        .map(|(c, p)| format!("{c} {:?}", String::from_utf8_lossy(p)))
        .collect();
    format!("[{}]", shown.join(", "))
}

/// The keys that differ between redis-server's keyspace and the reference's, which ran the
/// script at `now` and dumped its keys at the end of the transaction's `window` of server
/// time, described. Contents must be equal. An expiry time set by the script may differ by as
/// much as the clock moved: the reference set it `now`, redis-server whenever the script's
/// `PEXPIRE` ran, an instant in the window. A key only redis-server still shows is allowed if it
/// expires by the window's end: the dump read the server clock after the instant at which it
/// decided which keys had expired.
fn differing_keys(
    real_keys: &Keyspace,
    ref_keys: &Keyspace,
    now: u64,
    window: (u64, u64),
) -> Vec<String> {
    real_keys
        .keys()
        .chain(ref_keys.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|k| !same_key(real_keys.get(*k), ref_keys.get(*k), now, window))
        .map(|k| {
            format!(
                "{k}: redis-server {:?}, reference {:?}",
                real_keys.get(k),
                ref_keys.get(k)
            )
        })
        .collect()
}

fn same_key(
    real: Option<&DumpedKey>,
    reference: Option<&DumpedKey>,
    now: u64,
    (start, end): (u64, u64),
) -> bool {
    match (real, reference) {
        (Some(a), Some(b)) => {
            a.shown == b.shown
                && match (a.expires_at, b.expires_at) {
                    (Some(x), Some(y)) => (start..=end).contains(&(x + now - y)),
                    (x, y) => x == y,
                }
        }
        (Some(a), None) => a.expires_at.is_some_and(|t| t <= end),
        (a, b) => a == b,
    }
}

#[test]
fn reference_store_matches_redis_server() {
    let mut pair = Pair::start();
    let names = ["orders/42", "a{b}c", "%7B"];
    let tokens: Vec<String> = (0..6)
        .map(|i| dlock_core::owner_token(ClientId(0xfeed + u128::from(i % 2)), i).into())
        .collect();
    let mut ops = 0;
    for seed in 1..=8 {
        let mut rng = Rng(seed);
        pair.reset();
        for step in 0..150 {
            let op = random_op(&mut rng, &names, &tokens);
            pair.compare(op, &format!("seed {seed} step {step}"));
            ops += 1;
        }
    }
    println!("reference store matched redis-server on {ops} script calls");
}

/// The Redisson-compatible scripts (PROTOCOL.md §19), each path step by step — a free lock
/// taken, a held one refused with its TTL, the same field taking it again, renewals of the
/// holder and of a stranger, a stranger's release changing nothing, the holder's release
/// publishing 0, status of a held and of a free lock, names with a hash tag of their own —
/// then random calls.
#[test]
fn redisson_scripts_match_redis_server() {
    use dlock_core::redisson::{self as rs, Keys};
    let mut pair = Pair::start();
    let (a, b) = (Keys::new("orders/42"), Keys::new("a{b}c"));
    let lease = Duration::from_secs(60);
    let (f1, f2) = ("feed:1", "4f0e5b1c-7a2d-4e9b-9c3f-1d2e3f4a5b6c:7");
    let steps = [
        ("f1 takes the lock", rs::acquire(&a, f1, lease), Some(1)),
        ("f2 finds it held", rs::acquire(&a, f2, lease), Some(0)),
        ("f1 takes it again", rs::acquire(&a, f1, lease), Some(1)),
        ("status of the held lock", rs::status(&a), None),
        (
            "f1 renews, f2 cannot",
            rs::extend([
                (a.lock.as_str(), f1, lease * 2),
                (a.lock.as_str(), f2, lease),
            ]),
            Some(1),
        ),
        ("f2's release changes nothing", rs::release(&a, f2), Some(0)),
        ("f1 releases, publishing 0", rs::release(&a, f1), Some(1)),
        ("status of the free lock", rs::status(&a), None),
        ("f2 takes a{b}c", rs::acquire(&b, f2, lease), Some(1)),
        ("and releases it", rs::release(&b, f2), Some(1)),
    ];
    pair.run(steps, |_| {});
    let fields = ["feed:1", "feed:2", "cafe:1"];
    let mut ops = 0;
    for seed in 1..=4 {
        let mut rng = Rng(seed);
        pair.reset();
        for step in 0..100 {
            let keys = if rng.below(2) == 0 { &a } else { &b };
            let field = fields[rng.below(3) as usize];
            let lease = Duration::from_millis(rng.range(1, 200));
            let op = match rng.below(4) {
                0 => rs::acquire(keys, field, lease),
                1 => rs::release(keys, field),
                2 => rs::extend([(keys.lock.as_str(), field, lease)]),
                _ => rs::status(keys),
            };
            pair.compare(op, &format!("seed {seed} step {step}"));
            ops += 1;
        }
    }
    println!("the Redisson-compatible scripts matched redis-server on {ops} random calls");
}

/// The non-fair paths, which random calls rarely reach: a release that frees the lock with
/// waiters queued (and wakes the first), a fair acquire that defers to the queue's head, and
/// a non-fair one that barges past it — and leaves the queue it was in.
#[test]
fn non_fair_scripts_match_redis_server() {
    use redis::Fairness::*;
    let mut pair = Pair::start();
    let keys = LockKeys::new("nf");
    let t: Vec<String> = (1..=4)
        .map(|i| dlock_core::owner_token(ClientId(0xfeed), i).into())
        .collect();
    let lease = Duration::from_secs(60);
    let acquire = |token: &str, mode, fairness| {
        redis::acquire(keys.clone(), token, lease, 1, mode, lease, fairness)
    };
    let steps = [
        (
            "t0 takes the lock, barging",
            acquire(&t[0], Mode::Try, NonFair),
        ),
        ("t1 queues", acquire(&t[1], Mode::Wait, Fair)),
        ("t2 queues, non-fair", acquire(&t[2], Mode::Wait, NonFair)),
        (
            "t0 frees it, waking t1",
            redis::release(keys.clone(), &t[0], 0, NonFair),
        ),
        ("t3 defers to t1", acquire(&t[3], Mode::Try, Fair)),
        (
            "t2 barges from the queue",
            acquire(&t[2], Mode::Refresh, NonFair),
        ),
        ("t1 finds it taken", acquire(&t[1], Mode::Refresh, Fair)),
        (
            "t2 hands it to t1, fairly",
            redis::release(keys.clone(), &t[2], 0, Fair),
        ),
        ("t3 queues", acquire(&t[3], Mode::Wait, NonFair)),
        (
            "t1 frees it for t3",
            redis::release(keys.clone(), &t[1], 0, NonFair),
        ),
        ("t3 takes it", acquire(&t[3], Mode::Refresh, Fair)),
        (
            "t3 frees it with nobody waiting",
            redis::release(keys.clone(), &t[3], 0, NonFair),
        ),
    ];
    pair.run(steps.map(|(what, op)| (what, op, None)), |_| {});
}

/// The semaphore's paths, step by step: permits taken up to the number, waiters queued in
/// order, a release handing its permit to the first waiter (and a non-fair one only waking
/// it), another number of permits refused while in use, a waiter that gives up a permit
/// handed to it passing it on, and permits that ran out handed to waiters by a newcomer's
/// acquire.
#[test]
fn permit_scripts_match_redis_server() {
    use redis::Fairness::*;
    let mut pair = Pair::start();
    let sem = SemaphoreKeys::new("pool");
    let t: Vec<String> = (1..=5)
        .map(|i| dlock_core::owner_token(ClientId(0xfeed), i).into())
        .collect();
    let (lease, short) = (Duration::from_secs(60), Duration::from_millis(205));
    let take = |token: &str, lease, mode, fairness| {
        redis::permit_acquire(
            &sem,
            token,
            lease,
            2,
            mode,
            Duration::from_secs(60),
            fairness,
        )
    };
    // Each step, and the first number of the reply it must get (then the handed count of a
    // release, or nothing to check).
    let steps = [
        ("t0 takes a permit", take(&t[0], lease, Mode::Try, Fair), 1),
        (
            "t1 takes the second, for a moment",
            take(&t[1], short, Mode::Wait, Fair),
            1,
        ),
        ("t2 finds none", take(&t[2], lease, Mode::Try, Fair), 0),
        ("t2 queues", take(&t[2], lease, Mode::Wait, Fair), 2),
        ("t3 queues", take(&t[3], lease, Mode::Wait, NonFair), 2),
        (
            "3 permits are refused",
            redis::permit_acquire(&sem, &t[4], lease, 3, Mode::Try, lease, Fair),
            4,
        ),
        (
            "t0 hands its permit to t2",
            redis::permit_release(&sem, &t[0], Fair),
            2,
        ),
        ("t2 claims it", take(&t[2], lease, Mode::Refresh, Fair), 1),
        (
            "t1's permit ran out: t4's try hands it to t3",
            take(&t[4], lease, Mode::Try, Fair),
            0,
        ),
        ("t4 queues", take(&t[4], lease, Mode::Wait, Fair), 2),
        (
            "t3 gives up its handed permit: t4 gets it",
            redis::permit_dequeue(&sem, &t[3]),
            2,
        ),
        ("t0 queues", take(&t[0], lease, Mode::Wait, Fair), 2),
        (
            "t2 frees its permit, waking t0",
            redis::permit_release(&sem, &t[2], NonFair),
            2,
        ),
        ("t1 barges", take(&t[1], lease, Mode::Try, NonFair), 1),
        ("t0 finds none", take(&t[0], lease, Mode::Refresh, Fair), 2),
        (
            "t1 releases to t0",
            redis::permit_release(&sem, &t[1], Fair),
            2,
        ),
        (
            "t1 no longer holds",
            redis::permit_release(&sem, &t[1], Fair),
            0,
        ),
        (
            "t0 and t4 hold and renew",
            redis::extend(
                [&t[0], &t[4]]
                    .map(|t| (sem.permit(t), t.as_str()))
                    .iter()
                    .map(|(k, t)| (k.as_str(), *t, lease)),
            ),
            1,
        ),
    ];
    pair.run(
        steps.map(|(what, op, first)| (what, op, Some(first))),
        |what| {
            if what.starts_with("t1's permit ran out") {
                std::thread::sleep(short);
            }
        },
    );
}

/// The read-write lock's paths, step by step: readers together, a queued writer that holds off
/// later readers (writer preference), the last reader's release handing the lock to the
/// writer, a writer's own read hold beside it (downgrade), the writer's release handing the
/// lock to every reader first in line, and a waiter that gives up a handed lock.
#[test]
fn rw_scripts_match_redis_server() {
    let mut pair = Pair::start();
    let keys = RwKeys::new("rw");
    let t: Vec<String> = (1..=6)
        .map(|i| dlock_core::owner_token(ClientId(0xfeed), i).into())
        .collect();
    let lease = Duration::from_secs(60);
    let hold = |i: usize, write: bool, downgrade: Option<usize>| RwHold {
        keys: &keys,
        token: &t[i],
        write,
        downgrade: downgrade.map(|d| t[d].as_str()),
    };
    let take = |i, write, mode| redis::rw_acquire(&hold(i, write, None), lease, 1, mode, lease);
    let steps = [
        ("t0 reads", take(0, false, Mode::Try), 1),
        ("t1 reads too", take(1, false, Mode::Try), 1),
        ("t2 queues to write", take(2, true, Mode::Wait), 2),
        (
            "t3 may not read past the writer",
            take(3, false, Mode::Try),
            0,
        ),
        ("t3 queues to read", take(3, false, Mode::Wait), 2),
        (
            "t0 stops reading",
            redis::rw_release(&hold(0, false, None), 0),
            2,
        ),
        (
            "the last reader hands over to t2",
            redis::rw_release(&hold(1, false, None), 0),
            2,
        ),
        ("t2 claims the write hold", take(2, true, Mode::Refresh), 1),
        (
            "t2 reenters",
            redis::rw_acquire(&hold(2, true, None), lease, 2, Mode::Refresh, lease),
            1,
        ),
        (
            "t4, t2's owner, reads beside it",
            redis::rw_acquire(&hold(4, false, Some(2)), lease, 1, Mode::Try, lease),
            1,
        ),
        (
            "t2 drops a level",
            redis::rw_release(&hold(2, true, None), 1),
            1,
        ),
        (
            "t2 stops writing: t3 reads",
            redis::rw_release(&hold(2, true, None), 0),
            2,
        ),
        ("t3 claims its read hold", take(3, false, Mode::Refresh), 1),
        ("t5 may not write", take(5, true, Mode::Try), 0),
        ("t5 queues to write", take(5, true, Mode::Wait), 2),
        ("t0 may not read past t5", take(0, false, Mode::Try), 0),
        (
            "t4 stops reading",
            redis::rw_release(&hold(4, false, None), 0),
            2,
        ),
        (
            "t3 hands over to t5",
            redis::rw_release(&hold(3, false, None), 0),
            2,
        ),
        (
            "t5 gives its handed hold up",
            redis::rw_dequeue(&hold(5, true, None)),
            2,
        ),
        ("t0 reads a free lock", take(0, false, Mode::Try), 1),
        (
            "t0's read hold renews",
            redis::extend([(keys.reader(&t[0]).as_str(), t[0].as_str(), lease)]),
            1,
        ),
    ];
    pair.run(
        steps.map(|(what, op, first)| (what, op, Some(first))),
        |_| {},
    );
}

/// The first number of a reply: the whole reply, or its first item.
fn first_number(reply: &Value) -> i64 {
    match reply {
        Value::Int(n) => *n,
        Value::Array(items) => match items.first() {
            Some(Value::Int(n)) => *n,
            _ => panic!("{reply:?}"),
        },
        _ => panic!("{reply:?}"),
    }
}

/// The fenced write ([`redis::fenced_write`]) against the reference store: random tokens
/// (equal, smaller, larger, beyond 2^53, malformed) give the same replies and keyspace.
#[test]
fn fenced_write_matches_redis_server() {
    let server = RedisServer::start();
    let mut con = resp::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    let script = resp::Script::new(&Script::FencedWrite.source());
    let mut store = Store::new();
    let mut rng = Rng(7);
    let tokens = [
        "1",
        "2",
        "9",
        "10",
        "99",
        "100",
        "9007199254740993",
        "18446744073709551615",
    ];
    let (mut written, mut refused, mut errors) = (0, 0, 0);
    for step in 0..400 {
        let resource = ["stock:{a}", "stock:{b}"][rng.below(2) as usize];
        let token = match rng.below(20) {
            0 => "0".to_owned(),
            1 => "007".to_owned(),
            2 => "-3".to_owned(),
            3 => "x".to_owned(),
            _ => (*rng.pick(&tokens)).to_owned(),
        };
        let value = format!("v{step}");
        let real = script
            .key(resource)
            .arg(&token)
            .arg(&value)
            .invoke::<resp::Value>(&mut con)
            .map(convert)
            .map_err(|e| e.to_string());
        let (keys, args) = (Words::from([resource]), Words::from([&token, &value]));
        let reference = store
            .eval(0, Script::FencedWrite, &keys, &args)
            .map(|outcome| outcome.reply);
        match (&real, &reference) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "step {step}: {resource} {token}");
                match redis::parse_fenced_write(a).expect("well formed") {
                    redis::FencedWrite::Written => written += 1,
                    redis::FencedWrite::Stale { .. } => refused += 1,
                }
            }
            (Err(a), Err(b)) => {
                assert!(
                    a.contains(b.trim_start_matches("ERR ")),
                    "step {step}: {a} / {b}"
                );
                errors += 1;
            }
            _ => panic!(
                "step {step}: {resource} {token}: redis-server {real:?}, reference {reference:?}"
            ),
        }
        let (_, real_keys) = dump_real(&mut con);
        assert_eq!(real_keys, store.dump(0), "step {step}: keyspaces differ");
    }
    println!(
        "fenced write: {written} written, {refused} refused, {errors} malformed tokens; the same on both"
    );
    assert!(written > 10 && refused > 10 && errors > 10);
}

#[test]
fn keyspaces_agree_only_on_equal_contents_and_expiry() {
    let key = |shown: &str, expires_at| DumpedKey {
        shown: shown.to_owned(),
        expires_at,
    };
    // The reference ran the script at 1,000; the transaction ran from 998 to 1,003.
    let (now, window) = (1_000, (998, 1_003));
    let same = |real: Option<DumpedKey>, reference: Option<DumpedKey>| {
        same_key(real.as_ref(), reference.as_ref(), now, window)
    };
    let fence = |f: u64| key(&format!("hash {{\"fence\": \"{f}\"}}"), None);
    let held = fence(1_764_470_000_000_000);
    assert!(same(Some(held.clone()), Some(fence(1_764_470_000_000_000))));
    // A fencing token one off (or one millisecond of the clock floor off) is a difference.
    assert!(!same(
        Some(held.clone()),
        Some(fence(1_764_470_000_001_000))
    ));
    assert!(!same(
        Some(held.clone()),
        Some(fence(1_764_470_000_000_001))
    ));
    // Expiry set at another instant of the window; a key redis-server shows that expires by
    // the window's end.
    let expiring = |t| key("string 7", Some(t));
    for real in [1_498, 1_500, 1_503] {
        assert!(same(Some(expiring(real)), Some(expiring(1_500))));
    }
    assert!(!same(Some(expiring(1_497)), Some(expiring(1_500))));
    assert!(!same(Some(expiring(1_504)), Some(expiring(1_500))));
    assert!(!same(Some(key("string 7", None)), Some(expiring(1_500))));
    assert!(same(Some(expiring(1_003)), None));
    assert!(!same(Some(expiring(1_004)), None));
    assert!(!same(None, Some(expiring(1_500))));
    assert!(!same(Some(key("string 7", None)), None));
    assert!(!same(
        Some(key("string 8", Some(1_500))),
        Some(expiring(1_500))
    ));
}

/// Fair two times in three: non-fair ACQUIREs barge past the queue, non-fair RELEASEs free the
/// lock and wake the first waiter.
fn fairness(rng: &mut Rng) -> redis::Fairness {
    if rng.below(3) == 0 {
        redis::Fairness::NonFair
    } else {
        redis::Fairness::Fair
    }
}

/// `just plants`: every planted bug credited to this test (a Lua script that differs from its
/// reference twin, core/src/plant.rs) fails at least one comparison against redis-server.
#[cfg(feature = "plants")]
#[test]
#[ignore = "run by `just plants`, with the plants feature, alone in its process"]
fn plants() {
    use dlock_core::plant;
    let comparisons: [(&str, fn()); 4] = [
        ("reference_store", reference_store_matches_redis_server),
        ("non_fair_scripts", non_fair_scripts_match_redis_server),
        ("permit_scripts", permit_scripts_match_redis_server),
        ("rw_scripts", rw_scripts_match_redis_server),
    ];
    // The failed comparisons are expected: keep their panics quiet.
    std::panic::set_hook(Box::new(|_| {}));
    let mut missed = Vec::new();
    for p in plant::credited_to("differential") {
        plant::set(Some(p));
        let failed: Vec<&str> = comparisons
            .iter()
            .filter(|(_, compare)| std::panic::catch_unwind(compare).is_err())
            .map(|(name, _)| *name)
            .collect();
        if failed.is_empty() {
            missed.push(p.name());
        }
        println!("plant {:<26} failed comparisons: {failed:?}", p.name());
    }
    plant::set(None);
    let _ = std::panic::take_hook();
    assert!(missed.is_empty(), "planted bugs not caught: {missed:?}");
}

#[test]
fn election_scripts_match_redis_server() {
    let mut pair = Pair::start();
    pair.reset();
    let keys = LockKeys::new("leader");
    let t: Vec<String> = (1..=2)
        .map(|i| dlock_core::owner_token(ClientId(0xe1ec7), i).into())
        .collect();
    let lease = Duration::from_secs(60);
    let acquire = |token: &str, mode| {
        redis::acquire(keys.clone(), token, lease, 1, mode, lease, Fairness::Fair)
    };
    let reply = pair.compare(acquire(&t[0], Mode::Try), "t0 leads");
    let Value::Array(items) = &reply else {
        panic!("acquire replied {reply:?}")
    };
    let Value::Int(term) = items[1] else {
        panic!("acquire replied {reply:?}")
    };
    let term = term as u64;
    for (what, op) in [
        ("held, nothing proclaimed", redis::leader(&keys)),
        ("t0 proclaims", redis::proclaim(&keys, &t[0], term, "a:1")),
        (
            "another term is refused",
            redis::proclaim(&keys, &t[0], term - 1, "stale"),
        ),
        (
            "another token is refused",
            redis::proclaim(&keys, &t[1], term, "b:1"),
        ),
        ("t0 leads with a:1", redis::leader(&keys)),
        ("t1 queues", acquire(&t[1], Mode::Wait)),
        ("t1 cannot resign", redis::resign(keys.clone(), &t[1])),
        (
            "t0 resigns, handing over to t1",
            redis::resign(keys.clone(), &t[0]),
        ),
        ("t1 holds, nothing proclaimed", redis::leader(&keys)),
        (
            "t1 resigns, nobody waits",
            redis::resign(keys.clone(), &t[1]),
        ),
        ("free", redis::leader(&keys)),
    ] {
        pair.compare(op, what);
    }
}
