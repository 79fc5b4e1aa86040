//! The Rust client against real ZooKeeper (Debian's package, run by the tests on free
//! loopback ports): a standalone server, and a 3-node ensemble. With `DLOCK_TEST_ENGINE=wasm`
//! every client runs the engine from its WebAssembly component.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{Error, LostReason};
use dlock_testkit::{TcpProxy, ZkEnsemble};

mod common;
use common::{builder, connect, eventually, waiters};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_and_increasing_tokens_across_clients() {
    let zk = ZkEnsemble::start(1);
    common::contend(&zk.url(), 3, 3, 8).await;
    // Every contender node is gone; the lock's directory stays (it keeps the sequence).
    let client = connect(&zk.url()).await.unwrap();
    let status = client.status("counter").await.unwrap();
    assert_eq!((status.owner, status.waiters.len()), (None, 0));
}

/// The stats test every host runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_are_exact_after_a_scripted_sequence() {
    let zk = ZkEnsemble::start(1);
    common::stats_after_a_script(&zk.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_locks_are_all_or_none_and_never_deadlock() {
    let zk = ZkEnsemble::start(1);
    common::multi_all_or_none(&zk.url()).await;
    common::multi_contend(&zk.url(), 2, 2, 6).await;
}

/// The N lowest nodes hold the permits; a waiter watches the N just before its own, so a
/// release of any of them reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_let_in_at_most_their_permits() {
    let zk = ZkEnsemble::start(1);
    common::semaphore_rules(&zk.url(), false).await;
    common::semaphore_contend(&zk.url(), 3, 3, 3, 4).await;
}

/// Readers' nodes and writers' nodes share one directory: a writer holds as the lowest node, a
/// reader when no writer's node is lower (but its own owner's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_let_readers_share_and_writers_alone() {
    let zk = ZkEnsemble::start(1);
    common::rw_rules(&zk.url()).await;
    common::rw_contend(&zk.url(), 3, 3, 4).await;
}

#[tokio::test]
async fn reentrancy_try_acquire_and_status() {
    let zk = ZkEnsemble::start(1);
    let a = connect(&zk.url()).await.unwrap();
    let b = connect(&zk.url()).await.unwrap();
    let outer = a.lock("orders/42").owner(1).acquire().await.unwrap();
    let refused = builder(&zk.url())
        .lock_delay(Duration::from_secs(1))
        .connect()
        .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("lock-delay is a Redis feature")),
        "lock-delay on ZooKeeper: {:?}",
        refused.map(|_| ())
    );
    assert!(
        matches!(
            a.fenced_write("stock:42", outer.fencing_token(), "1").await,
            Err(dlock::Error::Unsupported(_))
        ),
        "fenced writes need Redis"
    );
    let inner = a.lock("orders/42").owner(1).acquire().await.unwrap();
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    let status = b.status("orders/42").await.unwrap();
    let owner = status.owner.expect("held");
    assert!(owner.starts_with(&format!("{:032x}-", a.id().0)), "{owner}");
    assert_eq!(status.fencing_token, outer.fencing_token());
    assert!(b.lock("orders/42").try_acquire().await.unwrap().is_none());
    // A failed try leaves no node behind.
    assert_eq!(waiters(&b, "orders/42").await, 0);
    inner.release().await.unwrap();
    assert!(b.lock("orders/42").try_acquire().await.unwrap().is_none());
    let token = outer.fencing_token();
    outer.release().await.unwrap();
    let next = b
        .lock("orders/42")
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(next.fencing_token() > token);
    // Waiting with a deadline ends cleanly, and leaves no node either.
    let err = a
        .lock("orders/42")
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WaitTimedOut), "{err:?}");
    eventually("the node to go", || async {
        waiters(&b, "orders/42").await == 0
    })
    .await;
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_order_and_only_the_successor_is_watched() {
    let zk = ZkEnsemble::start(1);
    let holder = connect(&zk.url()).await.unwrap();
    let first = holder.lock("fifo").acquire().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut clients = Vec::new();
    for i in 0..4 {
        let client = connect(&zk.url()).await.unwrap();
        let tx = tx.clone();
        let c = client.clone();
        tokio::spawn(async move {
            let guard = c.lock("fifo").acquire().await.expect("acquire");
            tx.send((i, guard)).unwrap();
        });
        eventually("the waiter to queue", || async {
            waiters(&holder, "fifo").await == i + 1
        })
        .await;
        clients.push(client);
    }
    // Four waiters, four watches, each on its own predecessor: no herd.
    let paths = |wchp: &str| wchp.lines().filter(|l| l.starts_with('/')).count();
    eventually("four watches", || async {
        paths(&zk.four_letter("wchp")) == 4
    })
    .await;
    let wchp = zk.four_letter("wchp");
    let sessions = wchp.lines().filter(|l| l.starts_with('\t')).count();
    assert_eq!(sessions, 4, "one watcher per path:\n{wchp}");

    let mut token = first.fencing_token();
    first.release().await.unwrap();
    for expected in 0..4 {
        let (i, guard) = rx.recv().await.unwrap();
        assert_eq!(i, expected, "served out of order");
        assert!(guard.fencing_token() > token);
        token = guard.fencing_token();
        // Only the successor woke: everyone behind still waits, still watching.
        assert_eq!(waiters(&holder, "fifo").await, 3 - expected);
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_holder_is_told_it_lost_before_the_next_waiter_gets_the_lock() {
    let zk = ZkEnsemble::start(1);
    let proxy = TcpProxy::start_zookeeper(zk.port(0));
    let short = format!("zk://127.0.0.1:{}?session_timeout_ms=1000", proxy.port());
    let holder = connect(&short).await.unwrap();
    let waiter = connect(&zk.url()).await.unwrap();
    let held = holder.lock("job").acquire().await.unwrap();
    let lost = held.lost_signal();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let w = waiter.clone();
    tokio::spawn(async move {
        let guard = w.lock("job").acquire().await.expect("acquire");
        let _ = tx.send((Instant::now(), guard));
    });
    eventually("the waiter to queue", || async {
        waiters(&waiter, "job").await == 1
    })
    .await;

    // The holder's network goes silent: its session expires on the server.
    proxy.blackhole(true);
    let reason = tokio::time::timeout(Duration::from_secs(10), lost.wait())
        .await
        .expect("the holder hears it lost the lock")
        .expect("a reason");
    let lost_at = Instant::now();
    assert!(
        matches!(
            reason,
            LostReason::Disconnected | LostReason::Expired | LostReason::SessionExpired
        ),
        "{reason:?}"
    );
    let (acquired_at, next) = tokio::time::timeout(Duration::from_secs(20), rx)
        .await
        .expect("the waiter gets the lock once the session expired")
        .unwrap();
    assert!(lost_at <= acquired_at, "two holders at once");
    assert!(next.fencing_token() > held.fencing_token());

    // Back on the network, the old holder works again, on a new session.
    proxy.blackhole(false);
    let token = next.fencing_token();
    next.release().await.unwrap();
    // An acquire that queued on the expired session fails with SessionExpired; the next
    // one runs on the new session.
    let again = loop {
        match holder
            .lock("job")
            .wait(Duration::from_secs(20))
            .acquire()
            .await
        {
            Ok(guard) => break guard,
            Err(Error::Engine(dlock_core::Error::SessionExpired)) => continue,
            Err(e) => panic!("the old holder cannot lock again: {e}"),
        }
    };
    assert!(again.fencing_token() > token);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_reply_was_lost_leaves_no_orphan_node() {
    let zk = ZkEnsemble::start(1);
    let proxy = TcpProxy::start_zookeeper(zk.port(0));
    let via_proxy = format!("zk://127.0.0.1:{}?session_timeout_ms=4000", proxy.port());
    let client = connect(&via_proxy).await.unwrap();
    let observer = connect(&zk.url()).await.unwrap();
    // Create the lock's directory first, so that the next create is the contender node.
    client
        .lock("orphan")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    proxy.cut_after_next_create();
    let guard = client
        .lock("orphan")
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .expect("acquired after the reconnect");
    assert_eq!(proxy.cuts(), 1, "the create's connection was cut");
    // The engine found its node by name instead of creating a second one.
    let status = observer.status("orphan").await.unwrap();
    assert_eq!(status.fencing_token, guard.fencing_token());
    assert!(status.waiters.is_empty(), "{status:?}");
    guard.release().await.unwrap();
    let status = observer.status("orphan").await.unwrap();
    assert_eq!((status.owner, status.waiters.len()), (None, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_ensemble_leader_never_makes_two_holders() {
    let mut zk = ZkEnsemble::start(3);
    let url = format!("{}?session_timeout_ms=4000", zk.url());
    let holder = connect(&url).await.unwrap();
    let waiter = connect(&url).await.unwrap();
    let held = holder.lock("leader").acquire().await.unwrap();
    let lost = held.lost_signal();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let w = waiter.clone();
    tokio::spawn(async move {
        let guard = w.lock("leader").acquire().await.expect("acquire");
        let _ = tx.send((Instant::now(), guard));
    });
    eventually("the waiter to queue", || async {
        waiter
            .status("leader")
            .await
            .is_ok_and(|s| s.waiters.len() == 1)
    })
    .await;

    let lost_at = Arc::new(std::sync::Mutex::new(None));
    let at = lost_at.clone();
    tokio::spawn(async move {
        if lost.wait().await.is_some() {
            *at.lock().unwrap() = Some(Instant::now());
        }
    });
    let leader = zk.leader().expect("a leader");
    zk.kill(leader);
    // A new leader is elected. The lock survives, or its holder is told it is lost; only
    // then may the waiter have it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let token = held.fencing_token();
    if lost_at.lock().unwrap().is_none() {
        match held.release().await {
            Ok(()) => {}
            Err(Error::Lost(_)) => {}
            Err(e) => panic!("release after the failover: {e}"),
        }
    }
    let (acquired_at, next) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("the waiter gets the lock")
        .unwrap();
    if let Some(lost_at) = *lost_at.lock().unwrap() {
        assert!(lost_at <= acquired_at, "two holders at once");
    }
    assert!(next.fencing_token() > token);
    // The new holder may lose the lock too while the ensemble settles; it is told so.
    match next.release().await {
        Ok(()) | Err(Error::Lost(_)) => {}
        Err(e) => panic!("release: {e}"),
    }
}

#[tokio::test]
async fn digest_credentials_protect_the_nodes() {
    let zk = ZkEnsemble::start(1);
    let hosts = zk.hosts();
    let alice = connect(&format!("zk://alice:secret@{hosts}/apps/billing"))
        .await
        .unwrap();
    let guard = alice.lock("invoice").acquire().await.unwrap();
    assert!(alice.status("invoice").await.unwrap().owner.is_some());
    // Without the credentials the nodes cannot even be read.
    let anonymous = connect(&format!("zk://{hosts}/apps/billing"))
        .await
        .unwrap();
    let err = anonymous.status("invoice").await.unwrap_err();
    assert!(err.to_string().contains("not authorized"), "{err}");
    let mallory = connect(&format!("zk://mallory:guess@{hosts}/apps/billing"))
        .await
        .unwrap();
    assert!(mallory.lock("invoice").try_acquire().await.is_err());
    guard.release().await.unwrap();
}

/// `sslmode=verify-full` with the server's CA: the client locks over the server's
/// `secureClientPort`, which speaks only TLS. Refused: the same port without TLS, TLS with
/// the system's roots (which do not know the test CA), a CA file that does not exist, and a CA
/// file without TLS asked for (a bad URL, before anything is sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verifies_the_server() {
    let zk = ZkEnsemble::start_tls().expect("a TLS server");
    let ca = zk.ca_file().display().to_string();
    let hosts = zk.secure_hosts();
    let url = format!("zk://{hosts}?sslmode=verify-full&sslrootcert={ca}");
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let guard = a.lock("tls").acquire().await.unwrap();
    assert!(b.lock("tls").try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    assert!(b.lock("tls").try_acquire().await.unwrap().is_some());
    let quick = "session_timeout_ms=1000";
    for refused in [
        format!("zk://{hosts}?{quick}"),
        format!("zk://{hosts}?{quick}&sslmode=require"),
        format!("zk://{hosts}?{quick}&sslmode=require&sslrootcert=/nonexistent/ca.pem"),
    ] {
        let err = connect(&refused).await.unwrap_err();
        assert!(err.is_backend(), "{refused}: {err:?}");
    }
    let err = connect(&format!("zk://{hosts}?sslrootcert={ca}"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidUrl(_)), "{err:?}");
}

/// A lock directory that Curator created as a container node, which ZooKeeper deletes once
/// it is empty (numbering its children from 0 when it comes back), gets its persistent pin
/// before a token comes from it: it outlives its last contender, and tokens keep growing.
/// (The server's ContainerManager runs every `znode.container.checkIntervalMs`, 100 ms here;
/// an unpinned container of the same test does go.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_directory_is_pinned_and_stays() {
    use zookeeper_client as zk;
    let ensemble = ZkEnsemble::start(1);
    let raw = zk::Client::connect(&ensemble.hosts()).await.unwrap();
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    raw.create("/dlock", &[], &open).await.unwrap();
    raw.create("/dlock/curator", &[], &container).await.unwrap();
    // The control: a container that had a child and has none goes.
    raw.create("/control", &[], &container).await.unwrap();
    raw.create("/control/x", &[], &ephemeral).await.unwrap();
    raw.delete("/control/x", None).await.unwrap();
    let client = connect(&ensemble.url()).await.unwrap();
    let first = client.lock("curator").acquire().await.unwrap();
    let token = first.fencing_token();
    first.release().await.unwrap();
    eventually("the unpinned container to go", || async {
        raw.check_stat("/control").await.unwrap().is_none()
    })
    .await;
    let (children, _) = raw.get_children("/dlock/curator").await.unwrap();
    assert_eq!(children, ["dlock-pin"]);
    let next = client.lock("curator").acquire().await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

/// A downgrade is not held off by a writer that queued after the write hold: the read node
/// takes the write node's number (Curator's layout), and that writer gets the lock only when
/// the read hold goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_passes_a_writer_queued_in_between() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let ensemble = ZkEnsemble::start(1);
    let raw = zookeeper_client::Client::connect(&ensemble.hosts())
        .await
        .unwrap();
    let (a, b) = (
        connect(&ensemble.url()).await.unwrap(),
        connect(&ensemble.url()).await.unwrap(),
    );
    let doc = a.rw_lock("doc");
    let write = doc.write().acquire().await.unwrap();
    let granted = Arc::new(AtomicBool::new(false));
    let queued = tokio::spawn({
        let (b, granted) = (b.clone(), granted.clone());
        async move {
            let hold = b.rw_lock("doc").write().acquire().await.unwrap();
            granted.store(true, Ordering::SeqCst);
            hold
        }
    });
    eventually("the second writer's node", || async {
        let (children, _) = raw.get_children("/dlock/doc.rwlock").await.unwrap();
        children.iter().filter(|c| c.contains("__WRIT__")).count() == 2
    })
    .await;
    let read = tokio::time::timeout(Duration::from_secs(30), doc.read().acquire())
        .await
        .expect("the downgrade does not wait for the queued writer")
        .unwrap();
    assert_eq!(read.fencing_token(), write.fencing_token());
    write.release().await.unwrap();
    // A request of this session after the release: the queued writer's session has heard
    // of the delete long since, and must still wait for the read node ahead of it.
    assert!(a.status("doc").await.is_ok());
    assert!(
        !granted.load(Ordering::SeqCst),
        "a writer beside the read hold"
    );
    let token = read.fencing_token();
    read.release().await.unwrap();
    let next = queued.await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}
