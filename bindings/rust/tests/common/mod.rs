//! What the integration tests share: clients that run the engine natively, or from its
//! WebAssembly component under `DLOCK_TEST_ENGINE=wasm`.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::time::Duration;

use dlock::{Client, Error, Leader};
use futures_util::StreamExt;

/// A client builder running the engine natively, or from dlock.wasm under `DLOCK_TEST_ENGINE=wasm`.
pub(crate) fn builder(url: &str) -> dlock::ClientBuilder {
    let builder = Client::builder(url);
    match std::env::var("DLOCK_TEST_ENGINE").as_deref() {
        Ok("wasm") => {
            static COMPONENT: std::sync::OnceLock<dlock_wasmtime::WasmComponent> =
                std::sync::OnceLock::new();
            let component = COMPONENT.get_or_init(|| {
                dlock_wasmtime::WasmComponent::from_file(dlock_testkit::wasm_component())
                    .expect("dlock.wasm (just wasm)")
            });
            builder.machine(component.factory())
        }
        Ok("native") | Err(_) => builder,
        Ok(other) => panic!("DLOCK_TEST_ENGINE={other}: use native or wasm"),
    }
}

pub(crate) async fn connect(url: &str) -> Result<Client, Error> {
    builder(url).connect().await
}

/// Waits until `check` holds, polling; panics with `what` after 60 s.
pub(crate) async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    check: impl Fn() -> F,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waiters of lock `name`, as its status shows them (0 when the status fails).
pub(crate) async fn waiters(client: &Client, name: &str) -> usize {
    client.status(name).await.map_or(0, |s| s.waiters.len())
}

/// `workers` clients, every other one non-fair, take lock "hot" `rounds` times each: never two
/// inside, and every one served (none left asleep) within 120 s.
pub(crate) async fn fair_and_non_fair_contend(url: &str, workers: usize, rounds: usize) {
    let inside = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for i in 0..workers {
        let client = connect(url).await.expect("connect");
        let inside = inside.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = client
                    .lock("hot")
                    .fair(i % 2 == 0)
                    .lease(std::time::Duration::from_secs(5))
                    .acquire()
                    .await
                    .expect("acquire");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    join_within(handles, "a waiter is left asleep").await;
}

/// Waits for every task, at most 120 s: longer means the waiters are stuck (`stuck` says how).
async fn join_within(handles: Vec<tokio::task::JoinHandle<()>>, stuck: &str) {
    let all = async {
        for h in handles {
            h.await.expect("task");
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), all)
        .await
        .expect(stuck);
}

/// `clients` clients with `tasks` tasks each take lock "counter" `rounds` times and do a racy
/// read-modify-write of a counter under it: the count must come out exact, and fencing
/// tokens must grow in the order the holders got the lock.
pub(crate) async fn contend(url: &str, clients: usize, tasks: usize, rounds: usize) {
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for _ in 0..clients {
        let client = connect(url).await.expect("connect");
        for _ in 0..tasks {
            let (client, inside, counter, tokens) = (
                client.clone(),
                inside.clone(),
                counter.clone(),
                tokens.clone(),
            );
            handles.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = client
                        .lock("counter")
                        .lease(std::time::Duration::from_secs(5))
                        .acquire()
                        .await
                        .expect("acquire");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokens.lock().unwrap().push(guard.fencing_token());
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for h in handles {
        h.await.expect("task");
    }
    let total = (clients * tasks * rounds) as u64;
    assert_eq!(counter.load(Ordering::SeqCst), total);
    let tokens = tokens.lock().unwrap().clone();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not increasing: {tokens:?}"
    );
}

/// `clients` clients with `tasks` tasks each take `rounds` multi-locks of three of four names,
/// each task giving its names in another order, and do a racy read-modify-write of one counter
/// per name under it. Every name's count must come out exact (no two holders of a name, all
/// or none of a set), tokens must grow per name, and nobody may deadlock on overlapping sets.
pub(crate) async fn multi_contend(url: &str, clients: usize, tasks: usize, rounds: usize) {
    const NAMES: [&str; 4] = ["multi/a", "multi/b", "multi/c", "multi/d"];
    let inside: Arc<[AtomicBool; 4]> = Arc::new(Default::default());
    let counters: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let tokens = Arc::new(std::sync::Mutex::new(vec![Vec::new(); 4]));
    let mut expected = [0u64; 4];
    let mut handles = Vec::new();
    for c in 0..clients {
        let client = connect(url).await.expect("connect");
        for t in 0..tasks {
            let worker = c * tasks + t;
            let sets: Vec<Vec<usize>> = (0..rounds)
                .map(|r| {
                    let skip = (worker + r) % 4;
                    let mut set: Vec<usize> = (0..4).filter(|&i| i != skip).collect();
                    if worker % 2 == 1 {
                        set.reverse();
                    }
                    set
                })
                .collect();
            for i in sets.iter().flatten() {
                expected[*i] += 1;
            }
            let (client, inside, counters, tokens) = (
                client.clone(),
                inside.clone(),
                counters.clone(),
                tokens.clone(),
            );
            handles.push(tokio::spawn(async move {
                for set in sets {
                    let names = set.iter().map(|&i| NAMES[i]);
                    let guard = client
                        .multi_lock(names)
                        .lease(std::time::Duration::from_secs(5))
                        .acquire()
                        .await
                        .expect("acquire");
                    let mut sorted = set.clone();
                    sorted.sort_unstable();
                    let got: Vec<&str> = guard.members().iter().map(|m| m.name.as_str()).collect();
                    let want: Vec<&str> = sorted.iter().map(|&i| NAMES[i]).collect();
                    assert_eq!(got, want, "members in canonical order");
                    for (&i, m) in sorted.iter().zip(guard.members()) {
                        assert!(
                            !inside[i].swap(true, Ordering::SeqCst),
                            "two holders of {}",
                            m.name
                        );
                        tokens.lock().unwrap()[i].push(m.fencing_token);
                    }
                    let seen: Vec<u64> = sorted
                        .iter()
                        .map(|&i| counters[i].load(Ordering::SeqCst))
                        .collect();
                    tokio::task::yield_now().await;
                    for (&i, seen) in sorted.iter().zip(seen) {
                        counters[i].store(seen + 1, Ordering::SeqCst);
                        inside[i].store(false, Ordering::SeqCst);
                    }
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    join_within(handles, "multi-locks of overlapping sets deadlocked").await;
    for i in 0..4 {
        assert_eq!(
            counters[i].load(Ordering::SeqCst),
            expected[i],
            "{}",
            NAMES[i]
        );
        let tokens = &tokens.lock().unwrap()[i];
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{}: fencing tokens not increasing: {tokens:?}",
            NAMES[i]
        );
    }
}

/// A multi-lock is all or none: a try or a timed-out wait that meets one busy name holds
/// nothing afterwards, and an acquired one holds every name until released. Bad sets are
/// refused before anything is sent.
pub(crate) async fn multi_all_or_none(url: &str) {
    let (a, b) = (connect(url).await.unwrap(), connect(url).await.unwrap());
    let names = ["set/3", "set/1", "set/2", "set/1"];
    // What an abandoned multi-lock took is given back in the background: soon, not at once.
    let free = |client: &Client, name: &'static str| {
        let client = client.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while client.status(name).await.unwrap().owner.is_some() {
                if tokio::time::Instant::now() > deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            true
        }
    };
    let single = b.lock("set/2").acquire().await.unwrap();
    assert!(a.multi_lock(names).try_acquire().await.unwrap().is_none());
    assert!(free(&a, "set/1").await, "a failed try holds nothing");
    let waited = a
        .multi_lock(names)
        .wait(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(matches!(waited, Err(Error::WaitTimedOut)), "{waited:?}");
    assert!(free(&a, "set/1").await, "a timed-out wait holds nothing");
    // A waiting multi-lock gets the set once the busy name is released.
    let waiting = tokio::spawn({
        let a = a.clone();
        async move { a.multi_lock(names).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    single.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap();
    let got: Vec<&str> = guard.members().iter().map(|m| m.name.as_str()).collect();
    assert_eq!(got, ["set/1", "set/2", "set/3"]);
    for m in guard.members() {
        let status = b.status(&m.name).await.unwrap();
        assert!(status.owner.is_some(), "{} is held", m.name);
        assert_eq!(guard.fencing_token(&m.name), Some(m.fencing_token));
    }
    guard.extend(Duration::from_secs(60)).await.unwrap();
    assert!(b.lock("set/3").try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    for name in ["set/1", "set/2", "set/3"] {
        assert!(free(&b, name).await, "{name} is free after the release");
    }
    let many: Vec<String> = (0..=dlock_core::MAX_MULTI)
        .map(|i| format!("n{i}"))
        .collect();
    for bad in [vec![], many, vec!["ok".into(), String::new()]] {
        let err = a.multi_lock(bad).try_acquire().await.unwrap_err();
        assert!(err.is_misuse(), "{err:?}");
    }
}

/// `clients` clients with `tasks` tasks each take a permit of semaphore "pool" (`permits`
/// of them) `rounds` times and hold it a while: never more than `permits` holders at once,
/// every permit used at once at some point (the tasks outnumber the permits and hold them
/// for 50 ms), every fencing token distinct, and every round done.
pub(crate) async fn semaphore_contend(
    url: &str,
    permits: u32,
    clients: usize,
    tasks: usize,
    rounds: usize,
) {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for _ in 0..clients {
        let client = connect(url).await.expect("connect");
        for _ in 0..tasks {
            let (client, inside, most, tokens) =
                (client.clone(), inside.clone(), most.clone(), tokens.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = client
                        .semaphore("pool", permits)
                        .lease(Duration::from_secs(5))
                        .acquire()
                        .await
                        .expect("acquire a permit");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(
                        now <= permits as usize,
                        "{now} holders of {permits} permits"
                    );
                    most.fetch_max(now, Ordering::SeqCst);
                    tokens.lock().unwrap().push(guard.fencing_token());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    join_within(handles, "permit waiters stalled").await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        permits as usize,
        "all permits in use at once"
    );
    let mut tokens = tokens.lock().unwrap().clone();
    let n = tokens.len();
    assert_eq!(n, clients * tasks * rounds);
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), n, "a fencing token given to two permits");
}

/// A semaphore's rules: permits up to its number, each with a token of its own and a release
/// of its own; a bad number is refused before anything is sent, and on Redis (`checked`)
/// another number while the semaphore is in use; a lock of the same name is another thing.
pub(crate) async fn semaphore_rules(url: &str, checked: bool) {
    let (a, b) = (connect(url).await.unwrap(), connect(url).await.unwrap());
    let first = a.semaphore("rules", 2).acquire().await.unwrap();
    let second = b.semaphore("rules", 2).acquire().await.unwrap();
    assert!(first.fencing_token() != second.fencing_token());
    assert!(
        b.semaphore("rules", 2)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    if checked {
        let other = b.semaphore("rules", 3).try_acquire().await;
        assert!(
            matches!(other, Err(Error::Engine(dlock_core::Error::InvalidArgument(ref why))) if why.contains("2 permits")),
            "{other:?}"
        );
    }
    for bad in [0, dlock_core::MAX_PERMITS + 1] {
        let err = b.semaphore("rules", bad).try_acquire().await.unwrap_err();
        assert!(err.is_misuse(), "{err:?}");
    }
    let lock = b.lock("rules").try_acquire().await.unwrap();
    assert!(lock.is_some(), "the lock of the same name is free");
    first.release().await.unwrap();
    let third = b.semaphore("rules", 2).try_acquire().await.unwrap();
    assert!(third.is_some(), "a released permit is free again");
}

/// `clients` clients with `tasks` tasks each take read-write lock "rw" `rounds` times, one
/// task in three to write: a writer is alone (no reader, no other writer) and increments a
/// counter racily, a reader sees the counter unchanged while it reads, the count comes out
/// exact, and readers were in together at some point.
pub(crate) async fn rw_contend(url: &str, clients: usize, tasks: usize, rounds: usize) {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;
    let readers = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicU64::new(0));
    let mut writes = 0;
    let mut handles = Vec::new();
    for c in 0..clients {
        let client = connect(url).await.expect("connect");
        for t in 0..tasks {
            let write = (c * tasks + t).is_multiple_of(3);
            if write {
                writes += rounds as u64;
            }
            let (client, readers, writing, most_readers, counter) = (
                client.clone(),
                readers.clone(),
                writing.clone(),
                most_readers.clone(),
                counter.clone(),
            );
            handles.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let rw = client.rw_lock("rw");
                    let hold = if write { rw.write() } else { rw.read() };
                    let guard = hold
                        .lease(Duration::from_secs(5))
                        .acquire()
                        .await
                        .expect("acquire");
                    if write {
                        assert!(!writing.swap(true, Ordering::SeqCst), "two writers");
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside readers");
                        let seen = counter.load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        counter.store(seen + 1, Ordering::SeqCst);
                        writing.store(false, Ordering::SeqCst);
                    } else {
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        most_readers.fetch_max(now, Ordering::SeqCst);
                        assert!(
                            !writing.load(Ordering::SeqCst),
                            "a reader beside the writer"
                        );
                        let seen = counter.load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        assert_eq!(counter.load(Ordering::SeqCst), seen, "written while read");
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    join_within(handles, "read-write waiters stalled").await;
    assert_eq!(counter.load(Ordering::SeqCst), writes);
    assert!(
        most_readers.load(Ordering::SeqCst) > 1,
        "readers never shared the lock"
    );
}

/// A read-write lock's rules: writer preference (a reader does not pass a waiting writer), a
/// downgrade, no upgrade, reentrant holds, and a lock of the same name apart.
pub(crate) async fn rw_rules(url: &str) {
    use std::time::Duration;
    let (a, b) = (connect(url).await.unwrap(), connect(url).await.unwrap());
    let doc = a.rw_lock("rules");
    let read = doc.read().acquire().await.unwrap();
    let again = doc.read().acquire().await.unwrap();
    assert_eq!(again.fencing_token(), read.fencing_token(), "reentrant");
    let err = doc.write().try_acquire().await.unwrap_err();
    assert!(err.is_misuse(), "no upgrade: {err:?}");
    let other = b.rw_lock("rules");
    assert!(
        other.read().try_acquire().await.unwrap().is_some(),
        "readers share"
    );
    let writer = tokio::spawn({
        let other = other.clone();
        async move { other.write().acquire().await }
    });
    // Until the writer is queued a reader may still come in (and goes again); once it is,
    // no reader passes it. Waited for by that event, not by a sleep a loaded machine outlasts.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while let Some(reader) = b.rw_lock("rules").read().try_acquire().await.unwrap() {
        reader.release().await.unwrap();
        assert!(
            std::time::Instant::now() < deadline,
            "a reader still passes the waiting writer after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        b.lock("rules").try_acquire().await.unwrap().is_some(),
        "the lock is apart"
    );
    again.release().await.unwrap();
    read.release().await.unwrap();
    let write = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer got the lock")
        .unwrap()
        .unwrap();
    // Downgrade: the writer's owner reads beside it, then stops writing. The read hold's token
    // is a new one, but on ZooKeeper, where the read node takes the write node's number.
    let read = other.read().acquire().await.unwrap();
    if url.starts_with("zk://") {
        assert_eq!(read.fencing_token(), write.fencing_token());
    } else {
        assert!(read.fencing_token() > write.fencing_token());
    }
    assert!(
        a.rw_lock("rules")
            .read()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    write.release().await.unwrap();
    assert!(
        a.rw_lock("rules")
            .read()
            .try_acquire()
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        a.rw_lock("rules")
            .write()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    read.release().await.unwrap();
}

/// The next change an observer reports, within 60 s.
pub(crate) async fn next(observer: &mut dlock::Observer) -> Option<Leader> {
    tokio::time::timeout(Duration::from_secs(60), observer.next())
        .await
        .expect("an observer heard nothing for 60 s")
        .expect("the observer ended")
        .expect("the observer failed")
}

pub(crate) fn leader(term: u64, value: &str) -> Option<Leader> {
    Some(Leader {
        term,
        value: value.to_owned(),
    })
}

/// Two candidates on two clients, one observer on a third: the first leads, the second waits
/// and leads when the first resigns, with a larger term; a new value is heard in the same
/// term; the last resignation leaves the election free.
pub(crate) async fn candidates_take_turns_and_observers_hear_each(url: &str) {
    let (a, b, watcher) = (
        connect(url).await.unwrap(),
        connect(url).await.unwrap(),
        connect(url).await.unwrap(),
    );
    let mut observer = watcher.election("scheduler").observe().unwrap();
    assert_eq!(next(&mut observer).await, None, "nobody leads yet");

    let first = a.election("scheduler").campaign("a:1").await.unwrap();
    assert_eq!(next(&mut observer).await, leader(first.term(), "a:1"));
    assert_eq!(
        b.election("scheduler").leader().await.unwrap(),
        leader(first.term(), "a:1")
    );

    let election = b.election("scheduler");
    let second = tokio::spawn(async move { election.campaign("b:2").await });
    eventually("b queues", || async {
        waiters(&watcher, "scheduler").await == 1
    })
    .await;

    first.proclaim("a:1 (draining)").await.unwrap();
    assert_eq!(
        next(&mut observer).await,
        leader(first.term(), "a:1 (draining)")
    );

    let first_term = first.term();
    first.resign().await.unwrap();
    let second = second.await.unwrap().unwrap();
    assert!(second.term() > first_term, "terms grow");
    // A hand-off may show the free interval first; the new leader comes next either way.
    let mut seen = next(&mut observer).await;
    if seen.is_none() {
        seen = next(&mut observer).await;
    }
    assert_eq!(seen, leader(second.term(), "b:2"));

    second.resign().await.unwrap();
    assert_eq!(
        next(&mut observer).await,
        None,
        "free after the last resigns"
    );
    assert_eq!(a.election("scheduler").leader().await.unwrap(), None);
}

/// A leader whose process died: its lease runs out without a message. The observer notices
/// within the lease, and a waiting candidate takes over with a larger term. The dead leader
/// of election `reports` is written into the server by `write_dead_leader(lease_ms)`, as
/// PROCLAIM leaves it (term 7, value `dead:9`).
pub(crate) async fn a_silent_death_is_noticed_within_the_lease<F, W>(
    url: &str,
    write_dead_leader: W,
) where
    W: Fn(u64) -> F,
    F: std::future::Future<Output = ()>,
{
    let watcher = connect(url).await.unwrap();
    let candidate = connect(url).await.unwrap();
    // Written with a long lease first: the observer sees it however slow the machine is.
    write_dead_leader(600_000).await;

    let mut observer = watcher.election("reports").observe().unwrap();
    assert_eq!(next(&mut observer).await, leader(7, "dead:9"));
    let election = candidate.election("reports").lease(Duration::from_secs(5));
    let campaign = tokio::spawn(async move { election.campaign("alive:1").await });
    eventually("the candidate queues", || async {
        waiters(&watcher, "reports").await == 1
    })
    .await;
    // Its process dies: nothing more from it, and its lease runs out in 1 s.
    write_dead_leader(1_000).await;
    let leadership = campaign.await.unwrap().unwrap();
    assert!(leadership.term() > 7);
    let mut seen = next(&mut observer).await;
    if seen.is_none() {
        seen = next(&mut observer).await;
    }
    assert_eq!(seen, leader(leadership.term(), "alive:1"));
    leadership.resign().await.unwrap();
}

/// The scripted sequence of every host's stats test (Python's test_stats.py, Node's
/// stats.test.mjs): acquire, reenter, busy, time out, cancel, hand off, lose to max-hold. Then
/// the counts are exact. Each step waits for the server to show the last one's waiter come or
/// go, so that a step never takes another's waiter for its own. Nothing is renewed: every lease, and the waiter lease — which a
/// handed lock is valid for until its renewal, a third of it after the waiter queued — is two
/// minutes (renewed after 40 s). A waiter left behind would stay that long, past the bound of
/// "no waiter" below (60 s): on a pool of connections (MariaDB), a give-up's DEQUEUE sent
/// before its ACQUIRE was answered could run first and leave one (PROTOCOL.md §5).
pub(crate) async fn stats_after_a_script(url: &str) {
    const NAME: &str = "stats/a";
    let lease = Duration::from_secs(120);
    let client = builder(url).waiter_lease(lease).connect().await.unwrap();
    let lock = || client.lock(NAME).lease(lease);
    let outer = lock().owner(1).acquire().await.unwrap();
    let inner = lock().owner(1).acquire().await.unwrap();
    assert!(lock().try_acquire().await.unwrap().is_none());
    let timed_out = lock().wait(Duration::from_millis(50)).acquire().await;
    assert_eq!(timed_out.unwrap_err(), Error::WaitTimedOut);
    // Its DEQUEUE may still be on its way (sent after its ACQUIRE's reply): until it ran, the
    // waiter counted next could be this one, and the acquire cancelled below not sent yet.
    eventually("no waiter", || async { waiters(&client, NAME).await == 0 }).await;
    let cancelled = tokio::spawn(lock().acquire());
    eventually("one waiter", || async { waiters(&client, NAME).await == 1 }).await;
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    eventually("no waiter", || async { waiters(&client, NAME).await == 0 }).await;
    let handed = tokio::spawn(lock().acquire());
    eventually("one waiter", || async { waiters(&client, NAME).await == 1 }).await;
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    handed.await.unwrap().unwrap().release().await.unwrap();
    let short = lock().max_hold(Duration::from_millis(100)).acquire().await;
    assert_eq!(short.unwrap().lost().await, dlock::LostReason::MaxHold);

    let stats = client.stats().await.unwrap();
    let [s] = &stats.locks[..] else {
        panic!("one lock counted: {stats:?}")
    };
    assert_eq!((s.name.as_str(), s.kind), (NAME, dlock::Kind::Mutex));
    let counts = (s.acquired, s.handed_off, s.reentered, s.released);
    assert_eq!(counts, (3, 1, 1, 2), "{s:?}");
    let ended = (s.busy, s.timed_out, s.cancelled, s.failed);
    assert_eq!(ended, (1, 1, 1, 0), "{s:?}");
    let mut lost = [0; 6];
    lost[dlock::LostReason::MaxHold.index()] = 1;
    assert_eq!(s.lost, lost);
    assert_eq!((s.renewals, s.renewals_failed), (0, 0));
    assert_eq!(
        (s.held, s.waiting, s.wait.count, s.hold.count),
        (0, 0, 3, 3)
    );
    assert!(s.hold.max >= Duration::from_millis(100), "{s:?}");
}
