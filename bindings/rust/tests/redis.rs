//! The Rust client against a real redis-server, started by each test on a free loopback port.
//! With `DLOCK_TEST_ENGINE=wasm` every client runs the engine from its WebAssembly component
//! (`dlock-wasmtime`) instead of natively: the same tests, the other engine.

use std::sync::Arc;
use std::time::Duration;

use dlock::{Error, LostReason};
use dlock_core::redis::{self as protocol, LockKeys, RedisOp};
use dlock_testkit::RedisServer;
use redis::AsyncCommands;

mod common;
use common::{builder, connect};

const MS: Duration = Duration::from_millis(1);

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(server.url()).expect("url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// Runs one protocol script directly, as a client that then disappears would.
async fn run_script(con: &mut redis::aio::MultiplexedConnection, op: RedisOp) -> redis::Value {
    let RedisOp::Eval { script, keys, args } = op else {
        panic!("not a script")
    };
    let script = redis::Script::new(&script.source());
    let mut call = script.prepare_invoke();
    for k in &keys {
        call.key(k);
    }
    for a in &args {
        call.arg(a);
    }
    call.invoke_async(con).await.expect("script")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_clients_and_tasks() {
    let server = RedisServer::start();
    common::contend(&server.url(), 4, 4, 10).await;
}

/// The stats test every host runs (Python's test_stats.py, Node's stats.test.mjs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_are_exact_after_a_scripted_sequence() {
    let server = RedisServer::start();
    common::stats_after_a_script(&server.url()).await;
}

#[tokio::test]
async fn reentrant_acquires_share_a_tenure() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let outer = client.lock("job").owner(7).acquire().await.unwrap();
    let inner = client.lock("job").owner(7).acquire().await.unwrap();
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(client.status("job").await.unwrap().count, 2);
    // Another owner of the same client is another contender.
    assert!(
        client
            .lock("job")
            .owner(8)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    inner.release().await.unwrap();
    assert_eq!(client.status("job").await.unwrap().count, 1);
    outer.release().await.unwrap();
    assert_eq!(client.status("job").await.unwrap().owner, None);
}

#[tokio::test]
async fn try_acquire_and_wait_timeout() {
    let server = RedisServer::start();
    let a = connect(&server.url()).await.unwrap();
    let b = connect(&server.url()).await.unwrap();
    let held = a.lock("x").acquire().await.unwrap();
    assert!(b.lock("x").try_acquire().await.unwrap().is_none());
    let err = b.lock("x").wait(200 * MS).acquire().await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(err, Error::WaitTimedOut);
    tokio::time::sleep(50 * MS).await;
    assert!(
        a.status("x").await.unwrap().waiters.is_empty(),
        "the timed-out waiter left the queue"
    );
    held.release().await.unwrap();
    assert!(b.lock("x").try_acquire().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_first_come_first_served() {
    let server = RedisServer::start();
    let holder = connect(&server.url()).await.unwrap();
    let held = holder.lock("fifo").acquire().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let client = connect(&server.url()).await.unwrap();
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client.lock("fifo").acquire().await.unwrap();
            order.lock().unwrap().push(i);
            guard.release().await.unwrap();
        }));
        // Queue one after another.
        while holder.status("fifo").await.unwrap().waiters.len() < i + 1 {
            tokio::time::sleep(MS).await;
        }
    }
    held.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn the_watchdog_keeps_a_long_holder() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let guard = client.lock("long").lease(900 * MS).acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!guard.is_lost());
    let status = client.status("long").await.unwrap();
    assert_eq!(status.fencing_token, guard.fencing_token());
    assert!(
        status
            .ttl
            .is_some_and(|t| t > Duration::ZERO && t <= 900 * MS),
        "{status:?}"
    );
    let other = connect(&server.url()).await.unwrap();
    assert!(other.lock("long").try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_holder_that_stops_renewing_loses_the_lock_after_its_lease() {
    let server = RedisServer::start();
    let client = builder(&server.url())
        .waiter_lease(300 * MS)
        .connect()
        .await
        .unwrap();
    let mut con = raw(&server).await;
    // A client takes the lock and dies: nobody renews it.
    let keys = LockKeys::new("abandoned");
    let dead = dlock_core::owner_token(dlock_core::ClientId(0xdead), 1);
    let op = protocol::acquire(
        keys.clone(),
        &dead,
        400 * MS,
        1,
        protocol::Mode::Try,
        Duration::from_secs(3),
        protocol::Fairness::Fair,
    );
    let started = std::time::Instant::now();
    let first_token = match run_script(&mut con, op).await {
        redis::Value::Array(items) => match items.get(1) {
            Some(redis::Value::Int(token)) => u64::try_from(*token).expect("a token"),
            other => panic!("acquire replied {other:?}"),
        },
        other => panic!("acquire replied {other:?}"),
    };
    let guard = client
        .lock("abandoned")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= 300 * MS,
        "acquired after {waited:?}, before the dead holder's lease ran out"
    );
    assert!(guard.fencing_token() > first_token);
}

#[tokio::test]
async fn lost_fires_when_the_key_is_deleted_behind_the_holders_back() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let guard = client
        .lock("fragile")
        .lease(600 * MS)
        .acquire()
        .await
        .unwrap();
    let mut con = raw(&server).await;
    let _: () = con.del(LockKeys::new("fragile").lock()).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost within a renewal");
    assert_eq!(reason, LostReason::NotOwner);
    assert!(guard.is_lost());
    let err = guard.release().await.unwrap_err();
    assert!(err.is_lost(), "{err:?}");
}

#[tokio::test]
async fn lost_fires_when_redis_restarts_and_the_client_recovers() {
    let mut server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let guard = client.lock("r").lease(600 * MS).acquire().await.unwrap();
    server.restart();
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost");
    assert!(
        matches!(reason, LostReason::NotOwner | LostReason::Expired),
        "{reason:?}"
    );
    // The same client works again once Redis is back.
    let again = tokio::time::timeout(Duration::from_secs(5), client.lock("r").acquire())
        .await
        .expect("in time")
        .unwrap();
    again.release().await.unwrap();
}

/// Returns once the server has `n` connections of `kind`: waits for the event, not a time.
async fn clients(raw: &mut redis::aio::MultiplexedConnection, kind: &str, n: usize) {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let list: String = redis::cmd("CLIENT")
                .arg(&["LIST", "TYPE", kind])
                .query_async(raw)
                .await
                .unwrap();
            if list.lines().count() == n {
                break;
            }
            tokio::time::sleep(10 * MS).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never {n} {kind} connections"));
}

/// A client whose waiters refresh their place only every 10 s (30 s waiter lease): within a
/// few seconds, only a wake-up brings one in.
async fn patient(url: &str) -> dlock::Client {
    builder(url)
        .waiter_lease(Duration::from_secs(30))
        .connect()
        .await
        .unwrap()
}

/// Returns once lock `name` has a waiter in its queue: waits for the event, not a time.
async fn queued(raw: &mut redis::aio::MultiplexedConnection, name: &str) {
    let queue = LockKeys::new(name).queue().to_owned();
    tokio::time::timeout(Duration::from_secs(60), async {
        while raw.llen::<_, usize>(&queue).await.unwrap() == 0 {
            tokio::time::sleep(10 * MS).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("nobody queued for {name}"));
}

/// A script connection the server drops (CLIENT KILL here; a proxy's idle timeout or a
/// failover elsewhere) is made again at once: the hold stays, and the next request goes
/// through on the new connection.
#[tokio::test]
async fn a_dropped_connection_is_made_again_and_the_hold_kept() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let guard = client.lock("k").lease(60_000 * MS).acquire().await.unwrap();
    let mut raw = raw(&server).await;
    // The client's pub/sub connection has subscribed (until then it counts as a plain one).
    clients(&mut raw, "pubsub", 1).await;
    // Every plain connection but this one: the client's script connection.
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(killed, 1);
    // The client connects again: this one and the client's new one.
    clients(&mut raw, "normal", 2).await;
    assert!(!guard.is_lost());
    guard
        .extend(60_000 * MS)
        .await
        .expect("extended over the new connection");
    guard
        .release()
        .await
        .expect("released over the new connection");
    let held: bool = raw.exists(LockKeys::new("k").lock()).await.unwrap();
    assert!(!held);
}

#[tokio::test]
async fn fencing_tokens_increase_across_clients_client_restarts_and_a_server_restart() {
    let mut server = RedisServer::start();
    let mut last = 0;
    for _ in 0..3 {
        let client = connect(&server.url()).await.unwrap();
        for _ in 0..3 {
            let guard = client.lock("fenced").acquire().await.unwrap();
            assert!(guard.fencing_token() > last);
            last = guard.fencing_token();
            guard.release().await.unwrap();
        }
        drop(client);
    }
    // A restart without persistence loses the counter; the server clock keeps tokens growing.
    server.restart();
    let client = connect(&server.url()).await.unwrap();
    let guard = client.lock("fenced").acquire().await.unwrap();
    assert!(
        guard.fencing_token() > last,
        "{} after {last}",
        guard.fencing_token()
    );
}

#[tokio::test]
async fn release_and_extend_by_a_non_owner_change_nothing() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let guard = client.lock("mine").acquire().await.unwrap();
    let mut con = raw(&server).await;
    let keys = LockKeys::new("mine");
    let intruder = dlock_core::owner_token(dlock_core::ClientId(0xbad), 1);
    let released = run_script(
        &mut con,
        protocol::release(keys.clone(), &intruder, 0, protocol::Fairness::Fair),
    )
    .await;
    assert_eq!(released, redis::Value::Array(vec![redis::Value::Int(0)]));
    let extended = run_script(
        &mut con,
        protocol::extend([(keys.lock(), intruder.as_str(), 60_000 * MS)]),
    )
    .await;
    assert_eq!(extended, redis::Value::Array(vec![redis::Value::Int(0)]));
    let status = client.status("mine").await.unwrap();
    assert_eq!(status.fencing_token, guard.fencing_token());
    assert!(status.ttl.unwrap() <= dlock::DEFAULT_LEASE);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_gets_a_typed_error_and_sends_nothing() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let long = "n".repeat(1025);
    let cases: Vec<(&str, Duration, Option<Duration>)> = vec![
        ("", Duration::from_secs(1), None),
        (&long, Duration::from_secs(1), None),
        ("ok", Duration::ZERO, None),
        ("ok", 5 * MS, None),
        ("ok", Duration::from_secs(8 * 86_400), None),
        ("ok", Duration::from_secs(1), Some(Duration::ZERO)),
    ];
    for (name, lease, max_hold) in cases {
        let mut lock = client.lock(name).lease(lease);
        if let Some(m) = max_hold {
            lock = lock.max_hold(m);
        }
        let err = lock.acquire().await.unwrap_err();
        assert!(err.is_misuse(), "{name:?} {lease:?}: {err:?}");
    }
    assert!(client.status("").await.unwrap_err().is_misuse());
    let mut con = raw(&server).await;
    let size: u64 = redis::cmd("DBSIZE").query_async(&mut con).await.unwrap();
    assert_eq!(size, 0, "bad input reached Redis");

    for url in [
        "",
        "127.0.0.1:6379",
        "redis://",
        "redis://:6379",
        "http://x",
        "memory://a b",
        "redis://h:99999",
        "zk://",
        "zk://127.0.0.1",
        "zk://127.0.0.1:0",
        "zk://127.0.0.1:2181/chroot/",
        "zk://127.0.0.1:2181?session_timeout_ms=0",
        "zk://127.0.0.1:2181?ttl=5",
        "zk://nopassword@127.0.0.1:2181",
    ] {
        let err = connect(url).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidUrl(_) | Error::Unsupported(_)),
            "{url:?}: {err:?}"
        );
        assert!(err.is_misuse());
    }
    let closed = format!("redis://127.0.0.1:{}", dlock_testkit::free_port());
    let err = connect(&closed).await.unwrap_err();
    assert!(
        matches!(err, Error::Connect(_)) && err.is_backend(),
        "{err:?}"
    );
}

/// A server that forgot the function library (FUNCTION FLUSH, or a new primary that never had
/// it) answers "Function not found": the client loads the library (FUNCTION LOAD REPLACE)
/// and calls again, unseen by the caller; EVALSHA is never sent.
#[tokio::test]
async fn a_flushed_function_library_is_loaded_again_unseen() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let guard = client.lock("flushed").acquire().await.unwrap();
    let mut con = raw(&server).await;
    let library = protocol::library();
    let libraries = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            let list: redis::Value = redis::cmd("FUNCTION")
                .arg("LIST")
                .query_async(&mut con)
                .await
                .unwrap();
            format!("{list:?}")
        }
    };
    assert!(libraries(&mut con).await.contains(&library.name));
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!libraries(&mut con).await.contains(&library.name));
    guard.release().await.expect("released through a reload");
    assert!(
        libraries(&mut con).await.contains(&library.name),
        "loaded again"
    );
    let keys = LockKeys::new("flushed");
    assert!(!con.exists::<_, bool>(&keys.lock()).await.unwrap());
    let again = client.lock("flushed").acquire().await.unwrap();
    again.release().await.unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(stats.contains("cmdstat_fcall:"), "{stats}");
    assert!(!stats.contains("cmdstat_evalsha:"), "{stats}");
}

/// A server without functions (Redis before 7; here FCALL renamed away) gets EVALSHA from
/// the first refusal on; when it forgot its scripts (SCRIPT FLUSH, or a restart) it answers
/// NOSCRIPT, and the client loads the script (SCRIPT LOAD, never EVAL) and runs it again,
/// unseen by the caller.
#[tokio::test]
async fn without_functions_a_flushed_script_cache_is_loaded_again_unseen() {
    let server = RedisServer::start_with(&["--rename-command", "FCALL", ""]);
    let client = connect(&server.url()).await.unwrap();
    let guard = client.lock("flushed").acquire().await.unwrap();
    let mut con = raw(&server).await;
    let sha = redis::Script::new(&protocol::Script::Release.source())
        .get_hash()
        .to_owned();
    let exists = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        let sha = sha.clone();
        async move {
            let found: Vec<bool> = redis::cmd("SCRIPT")
                .arg("EXISTS")
                .arg(&sha)
                .query_async(&mut con)
                .await
                .unwrap();
            found == [true]
        }
    };
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!exists(&mut con).await);
    guard.release().await.expect("released through NOSCRIPT");
    assert!(exists(&mut con).await, "RELEASE was loaded again");
    let keys = LockKeys::new("flushed");
    assert!(!con.exists::<_, bool>(&keys.lock()).await.unwrap());
    let again = client.lock("flushed").acquire().await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test]
async fn auth_with_an_acl_user() {
    let server = RedisServer::start_with_user("alice", "s3cret");
    let url = format!("redis://alice:s3cret@127.0.0.1:{}", server.port());
    let client = connect(&url).await.expect("alice may connect");
    let guard = client.lock("acl").acquire().await.unwrap();
    assert!(guard.fencing_token() > 0);
    guard.release().await.unwrap();
    let wrong = format!("redis://alice:nope@127.0.0.1:{}", server.port());
    assert!(matches!(
        connect(&wrong).await.unwrap_err(),
        Error::Connect(_)
    ));
    assert!(
        matches!(connect(&server.url()).await.unwrap_err(), Error::Connect(_)),
        "default user is off"
    );
}

#[tokio::test]
async fn dropping_a_waiting_acquire_leaves_the_queue_and_dropping_a_guard_releases() {
    let server = RedisServer::start();
    let a = connect(&server.url()).await.unwrap();
    let b = connect(&server.url()).await.unwrap();
    let held = a.lock("d").acquire().await.unwrap();
    let waiting = tokio::time::timeout(100 * MS, b.lock("d").acquire()).await;
    assert!(waiting.is_err(), "still waiting when dropped");
    tokio::time::sleep(50 * MS).await;
    assert!(a.status("d").await.unwrap().waiters.is_empty());
    drop(held);
    let mut free = false;
    for _ in 0..100 {
        if a.status("d").await.unwrap().owner.is_none() {
            free = true;
            break;
        }
        tokio::time::sleep(5 * MS).await;
    }
    assert!(free, "dropping the guard released the lock");
}

/// A guard keeps its client's engine running after the last `Client` handle is dropped: it
/// still extends, and dropping it releases in the background. Then the engine stops and
/// closes its connections. (An earlier driver kept waiting once its last waiter was
/// answered, and kept its connections open for good.)
#[tokio::test]
async fn the_engine_stops_once_the_last_handle_and_guard_are_gone() {
    let server = RedisServer::start();
    let mut con = raw(&server).await;
    let connections = async |con: &mut redis::aio::MultiplexedConnection| {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(con)
            .await
            .unwrap();
        list.lines().count()
    };
    let before = connections(&mut con).await;
    let client = connect(&server.url()).await.unwrap();
    let guard = client.lock("last").acquire().await.unwrap();
    drop(client);
    guard.extend(Duration::from_secs(30)).await.unwrap();
    drop(guard);
    let key = LockKeys::new("last").lock().to_owned();
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let held: bool = con.exists(&key).await.unwrap();
            if !held && connections(&mut con).await == before {
                break;
            }
            tokio::time::sleep(5 * MS).await;
        }
    })
    .await
    .expect("the lock released and the client's connections closed");
}

#[tokio::test]
async fn max_hold_bounds_the_watchdog() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let guard = client
        .lock("bounded")
        .lease(200 * MS)
        .max_hold(500 * MS)
        .acquire()
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost");
    assert_eq!(reason, LostReason::MaxHold);
    tokio::time::sleep(50 * MS).await;
    assert_eq!(
        client.status("bounded").await.unwrap().owner,
        None,
        "released at max hold"
    );
}

/// Every handle on a hold hears how it ended, once: a release as `None`, a loss with its
/// reason, whether it listened before or after; and renewals move the validity it reports.
#[tokio::test]
async fn a_lost_signal_tells_every_handle_how_the_hold_ended() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let lock = client.lock("signal").lease(Duration::from_secs(10));
    let guard = lock.acquire().await.unwrap();
    let before = guard.valid_until();
    guard.extend(Duration::from_secs(60)).await.unwrap();
    assert!(
        guard.valid_until() > before,
        "an extend moves the validity on"
    );
    let (early, late) = (guard.lost_signal(), guard.lost_signal());
    let listening = tokio::spawn(async move { early.wait().await });
    guard.release().await.unwrap();
    assert_eq!(
        listening.await.unwrap(),
        None,
        "released: it can no longer be lost"
    );
    assert_eq!(late.wait().await, None);
    assert_eq!(late.reason(), None);

    let guard = client
        .lock("signal")
        .max_hold(100 * MS)
        .acquire()
        .await
        .unwrap();
    let signal = guard.lost_signal();
    assert_eq!(signal.wait().await, Some(LostReason::MaxHold));
    assert_eq!(guard.lost_signal().wait().await, Some(LostReason::MaxHold));
    assert!(guard.is_lost());
    assert_eq!(guard.lost().await, LostReason::MaxHold);
    assert!(matches!(
        guard.release().await,
        Err(Error::Lost(LostReason::MaxHold))
    ));
}

#[tokio::test]
async fn extend_raises_the_lease() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let guard = client
        .lock("e")
        .lease(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    guard.extend(Duration::from_secs(60)).await.unwrap();
    let ttl = client.status("e").await.unwrap().ttl.unwrap();
    assert!(ttl > Duration::from_secs(50), "{ttl:?}");
    let err = guard.extend(Duration::ZERO).await.unwrap_err();
    assert!(err.is_misuse());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_backend_has_the_same_semantics_in_process() {
    let url = "memory://rust-tests";
    let a = connect(url).await.unwrap();
    let b = connect(url).await.unwrap();
    // The longest wait there is: a deadline at the end of time, not an overflow.
    let first = a.lock("m").wait(Duration::MAX).acquire().await.unwrap();
    assert!(b.lock("m").try_acquire().await.unwrap().is_none());
    let waiter =
        tokio::spawn(async move { b.lock("m").acquire().await.map(|g| g.fencing_token()) });
    tokio::time::sleep(20 * MS).await;
    let token = first.fencing_token();
    first.release().await.unwrap();
    assert!(waiter.await.unwrap().unwrap() > token);
    common::semaphore_rules(url, true).await;
    common::semaphore_contend(url, 2, 2, 2, 3).await;
    common::rw_rules(url).await;
    common::rw_contend(url, 2, 3, 3).await;
}

/// Fencing at the resource: a holder whose lock was taken over cannot overwrite the newer
/// holder's write, on redis-server and on memory://.
#[tokio::test]
async fn a_fenced_write_with_a_stale_token_is_refused() {
    use dlock::FencedWrite;

    let server = RedisServer::start();
    let memory = format!("memory://fenced-{}", std::process::id());
    for url in [server.url(), memory] {
        let (old, new) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
        // The old holder's tenure ends (max-hold) while it still works; a new one begins.
        let stale = old
            .lock("stock/42")
            .max_hold(150 * MS)
            .acquire()
            .await
            .unwrap();
        let stale_token = stale.fencing_token();
        assert_eq!(
            old.fenced_write("stock:42", stale_token, "10").await,
            Ok(FencedWrite::Written)
        );
        let fresh = new
            .lock("stock/42")
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap();
        assert!(fresh.fencing_token() > stale_token, "{url}");
        let token = fresh.fencing_token();
        assert_eq!(
            new.fenced_write("stock:42", token, "9").await,
            Ok(FencedWrite::Written)
        );
        assert_eq!(
            new.fenced_write("stock:42", token, "8").await,
            Ok(FencedWrite::Written),
            "the same tenure writes again"
        );
        // The paused holder wakes up and writes: refused, and nothing changes.
        assert_eq!(
            old.fenced_write("stock:42", stale_token, "11").await,
            Ok(FencedWrite::Stale { highest: token }),
            "{url}"
        );
        assert!(matches!(
            old.fenced_write("stock:42", 0, "x").await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(old.fenced_write("", 5, "x").await.unwrap_err().is_misuse());
        fresh.release().await.unwrap();
        drop(stale);
    }
    let mut con = raw(&server).await;
    let stored: String = con.hget("stock:42", "value").await.unwrap();
    assert_eq!(stored, "8");
}

/// Lock-delay: a holder cut off from Redis (as if paused) is told it lost the lock when its
/// lease runs out, but nobody else gets the lock until the delay after that has passed too.
/// A released lock is free at once. On zk:// the option is refused.
#[tokio::test]
async fn lock_delay_keeps_a_lapsed_lock_from_the_next_holder() {
    use std::time::Instant;

    let server = RedisServer::start();
    let proxy = dlock_testkit::TcpProxy::start(server.port());
    let delay = Duration::from_millis(2500);
    let paused = builder(&format!("redis://127.0.0.1:{}", proxy.port()))
        .lock_delay(delay)
        .request_timeout(Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let next = connect(&server.url()).await.unwrap();

    // Released: free at once, delay or not.
    let held = paused.lock("job").lease(300 * MS).acquire().await.unwrap();
    held.release().await.unwrap();
    let free = next.lock("job").try_acquire().await.unwrap();
    free.expect("free at once").release().await.unwrap();

    let held = paused.lock("job").lease(300 * MS).acquire().await.unwrap();
    proxy.blackhole(true);
    let lost_at = {
        held.lost().await;
        Instant::now()
    };
    let got = next
        .lock("job")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let gap = lost_at.elapsed();
    assert!(
        gap >= delay - 200 * MS,
        "the next holder got the lock {gap:?} after the old one was told it lost it; lock-delay is {delay:?}"
    );
    got.release().await.unwrap();
    proxy.blackhole(false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_locks_are_all_or_none_and_never_deadlock() {
    let server = RedisServer::start();
    common::multi_all_or_none(&server.url()).await;
    common::multi_contend(&server.url(), 3, 2, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_let_in_at_most_their_permits() {
    let server = RedisServer::start();
    common::semaphore_rules(&server.url(), true).await;
    common::semaphore_contend(&server.url(), 3, 3, 3, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_let_readers_share_and_writers_alone() {
    let server = RedisServer::start();
    common::rw_rules(&server.url()).await;
    common::rw_contend(&server.url(), 3, 3, 4).await;
}

#[tokio::test]
async fn an_abandoned_permit_goes_to_the_waiter_after_its_lease() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let mut con = raw(&server).await;
    // Two clients take the semaphore's two permits and die: nobody renews them.
    let keys = protocol::SemaphoreKeys::new("abandoned");
    let mut tokens = Vec::new();
    for seq in 1..=2 {
        let dead = dlock_core::owner_token(dlock_core::ClientId(0xdead), seq);
        let op = protocol::permit_acquire(
            &keys,
            &dead,
            400 * MS,
            2,
            protocol::Mode::Try,
            Duration::from_secs(3),
            protocol::Fairness::Fair,
        );
        match run_script(&mut con, op).await {
            redis::Value::Array(items) => match items.as_slice() {
                [redis::Value::Int(1), redis::Value::Int(token), _] => tokens.push(*token as u64),
                other => panic!("permit-acquire replied {other:?}"),
            },
            other => panic!("permit-acquire replied {other:?}"),
        }
    }
    let started = std::time::Instant::now();
    let guard = client
        .semaphore("abandoned", 2)
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= 300 * MS,
        "got a permit after {waited:?}, before the leases ran out"
    );
    assert!(tokens.iter().all(|t| guard.fencing_token() > *t));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_lock_of_a_multi_lock_loses_it_and_frees_the_others() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await.unwrap();
    let guard = client
        .multi_lock(["m/x", "m/y", "m/z"])
        .lease(300 * MS)
        .acquire()
        .await
        .unwrap();
    // An operator deletes one lock's key: the next renewal finds it not ours.
    let mut con = raw(&server).await;
    let _: () = con.del(LockKeys::new("m/y").lock()).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("told lost within a renewal or two");
    assert_eq!(reason, LostReason::NotOwner);
    assert!(matches!(
        guard.release().await,
        Err(Error::Lost(LostReason::NotOwner))
    ));
    // The others are given back in the background, right after the loss is reported.
    for name in ["m/x", "m/z"] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while client.status(name).await.unwrap().owner.is_some() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} was not given back"
            );
            tokio::time::sleep(10 * MS).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_fair_locks_exclude_barge_and_wake_their_waiter() {
    let server = RedisServer::start();
    let url = server.url();
    // Fair and non-fair workers on one lock: never two inside, every one served.
    common::fair_and_non_fair_contend(&url, 6, 15).await;

    // A non-fair release frees the lock and wakes the waiter, which takes it itself. The
    // waiter refreshes its place only every 10 s (30 s waiter lease) and the holder's lease
    // lasts 30 s: only the wake-up can bring it in within the 5 s below.
    let mut raw = raw(&server).await;
    let a = connect(&url).await.unwrap();
    let b = patient(&url).await;
    let held = a.lock("x").fair(false).acquire().await.unwrap();
    let waiting = tokio::spawn(async move { b.lock("x").acquire().await });
    queued(&mut raw, "x").await;
    let released = std::time::Instant::now();
    let token = held.fencing_token();
    held.release().await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "woken by the release, not by a refresh 10 s later"
    );
    assert!(next.fencing_token() > token);
}

/// A pub/sub connection the server drops (CLIENT KILL here; a proxy or a failover elsewhere)
/// is made again and subscribes again: a waiter queued after it is still woken by the
/// release. It refreshes its place only every 10 s (30 s waiter lease) and the holder's lease
/// lasts 30 s: only the wake-up brings it in within the 5 s below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_pubsub_connection_is_made_again_and_wakes_its_waiter() {
    let server = RedisServer::start();
    let url = server.url();
    let mut raw = raw(&server).await;
    let a = connect(&url).await.unwrap();
    let b = patient(&url).await;
    let held = a
        .lock("x")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    clients(&mut raw, "pubsub", 2).await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "pubsub"])
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(killed, 2);
    // Both connect again, and count as pub/sub connections once they have subscribed.
    clients(&mut raw, "pubsub", 2).await;
    let waiting = tokio::spawn(async move { b.lock("x").acquire().await });
    queued(&mut raw, "x").await;
    let released = std::time::Instant::now();
    held.release().await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "woken by the release, not by a refresh 10 s later"
    );
    next.release().await.unwrap();
}

/// A user with exactly `dlock_core::redis::acl_rules()` (keys and channels under `dlock:`, the
/// client's and the scripts' commands) can use every primitive, by FCALL; so can one with the
/// rules of earlier releases, without `fcall` and `function|load`, by EVALSHA. One without
/// some of the scripts' commands fails to connect (the ACL probe) naming them; a fenced write
/// outside its keys is refused with NOPERM before it wrote anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_acl_user_uses_every_primitive() {
    let rules = protocol::acl_rules();
    let mut args = vec!["--user", "locker", "on", ">pw"];
    args.extend(rules.split(' '));
    let classic = rules.replace(" +fcall", "").replace(" +function|load", "");
    assert_ne!(classic, rules);
    args.extend(["--user", "classic", "on", ">pw"]);
    args.extend(classic.split(' '));
    args.extend(["--user", "admin", "on", ">admin", "~*", "&*", "+@all"]);
    // A user without two of the scripts' commands.
    let partial = rules.replace(" +publish", "").replace(" +zadd", "");
    args.extend(["--user", "partial", "on", ">pw"]);
    args.extend(partial.split(' '));
    args.extend(["--user", "default", "off"]);
    let server = RedisServer::start_with(&args);
    // It fails to connect, naming what it lacks, before any lock script could stop half-way.
    let e = connect(&format!("redis://partial:pw@127.0.0.1:{}", server.port()))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Connect(_)), "{e:?}");
    assert!(e.to_string().contains("publish, zadd"), "{e}");
    let admin = |command: &[&str]| {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &server.port().to_string()])
            .args(["--user", "admin", "--pass", "admin", "--no-auth-warning"])
            .args(command)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (user, by) in [
        ("locker", "cmdstat_fcall:"),
        ("classic", "cmdstat_evalsha:"),
    ] {
        admin(&["CONFIG", "RESETSTAT"]);
        every_primitive(&format!("redis://{user}:pw@127.0.0.1:{}", server.port())).await;
        let stats = admin(&["INFO", "commandstats"]);
        assert!(stats.contains(by), "{user}: {stats}");
        assert_eq!(
            admin(&["EXISTS", "stock:42"]).trim(),
            "0",
            "nothing half-done"
        );
    }
}

async fn every_primitive(url: &str) {
    let a = connect(url)
        .await
        .expect("the least-privilege user connects");
    let b = connect(url).await.unwrap();

    // A lock: reentrant, renewed, handed to a waiter by its release (PUBLISH on the channel).
    let outer = a.lock("acl").owner(1).acquire().await.unwrap();
    let inner = a.lock("acl").owner(1).acquire().await.unwrap();
    outer.extend(Duration::from_secs(20)).await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("acl").acquire().await }
    });
    let queued = async {
        while b.status("acl").await.unwrap().waiters.is_empty() {
            tokio::time::sleep(5 * MS).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), queued)
        .await
        .expect("the waiter queues");
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    let handed = waiter.await.unwrap().expect("handed over");
    assert!(handed.fencing_token() > 0);
    handed.release().await.unwrap();

    // A semaphore, a read-write lock, a multi-lock.
    let p1 = a.semaphore("pool", 2).acquire().await.unwrap();
    let p2 = b.semaphore("pool", 2).acquire().await.unwrap();
    assert!(
        a.semaphore("pool", 2)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let doc = a.rw_lock("doc");
    let r1 = doc.read().acquire().await.unwrap();
    let r2 = b.rw_lock("doc").read().acquire().await.unwrap();
    assert!(
        b.rw_lock("doc")
            .write()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let multi = a.multi_lock(["m/1", "m/2"]).acquire().await.unwrap();
    for guard in [p1, p2, r1, r2] {
        guard.release().await.unwrap();
    }
    multi.release().await.unwrap();

    // A fenced write to a resource under dlock: works; one outside the user's keys is
    // refused naming the permission, and nothing was written.
    let held = a.lock("stock").acquire().await.unwrap();
    let token = held.fencing_token();
    assert_eq!(
        a.fenced_write("dlock:resource", token, "7").await.unwrap(),
        dlock::FencedWrite::Written
    );
    let e = a.fenced_write("stock:42", token, "7").await.unwrap_err();
    assert!(
        e.is_backend() && e.to_string().contains("permission"),
        "{e}"
    );
    held.release().await.unwrap();
}
