//! The Redisson-compatible mode (`redis://…?compat=redisson`) against a real redis-server, and
//! on a real Redis Cluster (`redis-cluster://…?compat=redisson`): dlock clients exclude each
//! other on Redisson's layout, and a holder that runs Redisson's own scripts (RedissonLock
//! 3.52's acquire and unlock, as a Java client sends them) excludes them and wakes them — on a
//! cluster by sharded pub/sub, as Redisson does there. The real Redisson contends in
//! `just interop`.

use std::time::{Duration, Instant};

use dlock::Error;
use dlock_testkit::{RedisCluster, RedisServer};
use redis::AsyncCommands;

mod common;
use common::{connect, eventually};

fn url(server: &RedisServer) -> String {
    format!("{}/?compat=redisson", server.url())
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// RedissonLock.tryLockInnerAsync: nil when acquired, else the holder's PTTL.
const REDISSON_LOCK: &str = "\
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; \
return redis.call('pttl', KEYS[1]);";

/// RedissonLock.unlockInnerAsync (3.24+, with the unlock latch).
const REDISSON_UNLOCK: &str = "\
local val = redis.call('get', KEYS[3]); if val ~= false then return tonumber(val); end; \
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0; \
else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1; end;";

/// A client whose waiters look again only every 2 minutes unless woken: a waiter that takes
/// the lock sooner was woken by the channel.
async fn patient(url: &str) -> dlock::Client {
    dlock::Client::builder(url)
        .waiter_lease(Duration::from_secs(120))
        .connect()
        .await
        .unwrap()
}

/// Redisson takes "invoice" for a minute: `client` cannot, and starts waiting.
async fn redisson_holds_and_dlock_waits(
    client: &dlock::Client,
    con: &mut impl redis::aio::ConnectionLike,
) -> tokio::task::JoinHandle<Result<dlock::Guard, Error>> {
    assert_eq!(redisson_lock(con, "invoice", 60_000).await, None);
    let busy = client.lock("invoice").try_acquire().await.unwrap();
    assert!(busy.is_none());
    let client = client.clone();
    tokio::spawn(async move { client.lock("invoice").acquire().await })
}

/// Redisson unlocks "invoice" (publishing with `publish`): the waiter takes it at once (its
/// client would look again only in 2 minutes, the lease is a minute).
async fn redisson_unlock_wakes(
    waiter: tokio::task::JoinHandle<Result<dlock::Guard, Error>>,
    con: &mut impl redis::aio::ConnectionLike,
    publish: &str,
) -> dlock::Guard {
    let released = Instant::now();
    redisson_unlock(con, "invoice", publish).await;
    let held = waiter.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(30),
        "woken by the message, not by the 60 s lease"
    );
    held
}

const FIELD: &str = "4f0e5b1c-7a2d-4e9b-9c3f-1d2e3f4a5b6c:1";

async fn redisson_lock(
    con: &mut impl redis::aio::ConnectionLike,
    name: &str,
    lease_ms: u64,
) -> Option<i64> {
    redis::Script::new(REDISSON_LOCK)
        .key(name)
        .arg(lease_ms)
        .arg(FIELD)
        .invoke_async(con)
        .await
        .unwrap()
}

/// Redisson's unlock, publishing with `publish` (`spublish` on a cluster, Redisson ≥ 3.22).
async fn redisson_unlock(con: &mut impl redis::aio::ConnectionLike, name: &str, publish: &str) {
    let released: Option<i64> = redis::Script::new(REDISSON_UNLOCK)
        .key(name)
        .key(format!("redisson_lock__channel:{{{name}}}"))
        .key(format!("redisson_unlock_latch:{{{name}}}:request-1"))
        .arg(0)
        .arg(30_000)
        .arg(FIELD)
        .arg(publish)
        .arg(13_500)
        .invoke_async(con)
        .await
        .unwrap();
    assert_eq!(released, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_clients_exclude_each_other_on_redissons_layout() {
    let server = RedisServer::start();
    common::contend(&url(&server), 3, 3, 8).await;
    let client = connect(&url(&server)).await.unwrap();
    let mut con = raw(&server).await;
    let held = client
        .lock("orders/42")
        .owner(7)
        .lease(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    // Redisson's layout: the raw name is a hash of one field with count 1, the lease its TTL;
    // the token is RFencedLock's counter.
    let fields: Vec<(String, String)> = con.hgetall("orders/42").await.unwrap();
    let [(field, count)] = fields.as_slice() else {
        panic!("{fields:?}")
    };
    assert_eq!(count, "1");
    let (client_id, tenure) = field.split_once(':').expect("<client id>:<tenure>");
    assert!(client_id.len() == 32 && client_id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(tenure.parse::<u64>().is_ok(), "{field}");
    let pttl: i64 = con.pttl("orders/42").await.unwrap();
    assert!(pttl > 15_000, "{pttl}");
    let counter: u64 = con.get("redisson_lock_token:{orders/42}").await.unwrap();
    assert_eq!(counter, held.fencing_token());
    let status = client.status("orders/42").await.unwrap();
    assert_eq!(status.owner.as_deref(), Some(field.as_str()));
    assert_eq!(status.latest_token, held.fencing_token());
    // Reentry is counted by the engine: the server keeps one field at 1.
    let again = client.lock("orders/42").owner(7).acquire().await.unwrap();
    assert_eq!(again.fencing_token(), held.fencing_token());
    again.release().await.unwrap();
    held.release().await.unwrap();
    assert!(!con.exists::<_, bool>("orders/42").await.unwrap());
    // Only locks: semaphores and read-write locks are refused before anything is sent.
    let err = client.semaphore("pool", 2).try_acquire().await.unwrap_err();
    assert!(err.is_misuse(), "{err:?}");
    let err = client
        .rw_lock("doc")
        .read()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_misuse(), "{err:?}");
}

/// A Redisson holder keeps dlock out; its unlock's message wakes a dlock waiter at once (the
/// holder's lease is far from over), and a dlock release wakes a Redisson waiter's channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_holder_excludes_dlock_and_its_release_wakes_dlock() {
    let server = RedisServer::start();
    let client = patient(&url(&server)).await;
    let mut con = raw(&server).await;
    let waiter = redisson_holds_and_dlock_waits(&client, &mut con).await;
    // The waiter listens on Redisson's channel before the unlock.
    eventually("the waiter's subscription", || async {
        let mut con = raw(&server).await;
        let subs: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redisson_lock__channel:{invoice}")
            .query_async(&mut con)
            .await
            .unwrap();
        subs.first().is_some_and(|(_, n)| *n > 0)
    })
    .await;
    let held = redisson_unlock_wakes(waiter, &mut con, "publish").await;
    // Now dlock holds: Redisson's acquire gets the PTTL, and dlock's release publishes 0.
    let pttl = redisson_lock(&mut con, "invoice", 60_000).await;
    assert!(pttl.is_some_and(|t| t > 0), "{pttl:?}");
    let mut pubsub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub
        .subscribe("redisson_lock__channel:{invoice}")
        .await
        .unwrap();
    held.release().await.unwrap();
    use futures_util::StreamExt as _;
    let message = pubsub.on_message().next().await.unwrap();
    assert_eq!(message.get_payload_bytes(), b"0");
    assert_eq!(redisson_lock(&mut con, "invoice", 60_000).await, None);
}

/// A Redisson holder that dies publishes nothing: the dlock waiter takes the lock when the
/// key's TTL runs out. A dlock holder's watchdog keeps renewing the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holder_lapses_and_the_watchdog_renews() {
    let server = RedisServer::start();
    let client = connect(&url(&server)).await.unwrap();
    let mut con = raw(&server).await;
    assert_eq!(redisson_lock(&mut con, "report", 1_500).await, None);
    let held = client
        .lock("report")
        .lease(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    // Taken after the dead holder's key ran out: the hash is dlock's field alone.
    let fields: Vec<String> = con.hkeys("report").await.unwrap();
    assert!(fields.len() == 1 && fields[0] != FIELD, "{fields:?}");
    let first: i64 = redis::cmd("PEXPIRETIME")
        .arg("report")
        .query_async(&mut con)
        .await
        .unwrap();
    eventually("a renewal of the key", || async {
        let mut con = raw(&server).await;
        let now: i64 = redis::cmd("PEXPIRETIME")
            .arg("report")
            .query_async(&mut con)
            .await
            .unwrap();
        now > first
    })
    .await;
    assert!(!held.is_lost());
    held.release().await.unwrap();
}

/// On a cluster: dlock clients exclude each other; a Redisson holder's unlock (SPUBLISH, as
/// Redisson 3.22 and later send it on a cluster) wakes a dlock waiter subscribed by SSUBSCRIBE
/// on the node of the lock's slot, and dlock's release reaches a sharded subscriber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_redisson_and_dlock_wake_each_other_by_sharded_pub_sub() {
    let cluster = RedisCluster::start(3);
    let url = format!("{}?compat=redisson", cluster.url());
    common::contend(&url, 3, 3, 8).await;
    let client = patient(&url).await;
    let nodes: Vec<String> = cluster.nodes().iter().map(|n| n.url()).collect();
    let cluster_client = |resp3: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>| {
        let builder = redis::cluster::ClusterClient::builder(nodes.clone());
        match resp3 {
            Some(tx) => builder
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(tx),
            None => builder,
        }
        .build()
        .unwrap()
    };
    let mut con = cluster_client(None).get_async_connection().await.unwrap();
    let waiter = redisson_holds_and_dlock_waits(&client, &mut con).await;
    let channel = "redisson_lock__channel:{invoice}";
    let owner = cluster.owner(cluster.slot(channel));
    eventually("the waiter's sharded subscription", || async {
        let subs = cluster.cli(owner, &["PUBSUB", "SHARDNUMSUB", channel]);
        subs.lines().nth(1).is_some_and(|n| n.trim() != "0")
    })
    .await;
    let held = redisson_unlock_wakes(waiter, &mut con, "spublish").await;
    let (tx, mut pushes) = tokio::sync::mpsc::unbounded_channel();
    let mut listener = cluster_client(Some(tx))
        .get_async_connection()
        .await
        .unwrap();
    listener.ssubscribe(channel).await.unwrap();
    held.release().await.unwrap();
    loop {
        let push = pushes.recv().await.unwrap();
        if push.kind == redis::PushKind::SMessage {
            assert_eq!(push.data[1], redis::Value::BulkString(b"0".to_vec()));
            break;
        }
    }
    assert_eq!(redisson_lock(&mut con, "invoice", 60_000).await, None);
}

/// One client, two layouts: a lock that asks for Redisson's (`LockBuilder::redisson`) is
/// Redisson's hash at the raw name and excludes a `?compat=redisson` client, while the
/// client's other locks keep dlock's keys. Elsewhere than on Redis it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lock_of_a_plain_client_in_redissons_layout() {
    let server = RedisServer::start();
    let plain = connect(&server.url()).await.unwrap();
    let compat = connect(&url(&server)).await.unwrap();
    let mut con = raw(&server).await;
    let held = plain.lock("orders/42").redisson().acquire().await.unwrap();
    let fields: Vec<(String, String)> = con.hgetall("orders/42").await.unwrap();
    assert_eq!(
        fields.len(),
        1,
        "Redisson's hash at the raw name: {fields:?}"
    );
    let counter: u64 = con.get("redisson_lock_token:{orders/42}").await.unwrap();
    assert_eq!(counter, held.fencing_token());
    assert!(
        compat
            .lock("orders/42")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        plain
            .lock("orders/42")
            .try_acquire()
            .await
            .unwrap()
            .is_some(),
        "dlock's own layout is another lock"
    );
    held.release().await.unwrap();
    assert!(
        compat
            .lock("orders/42")
            .try_acquire()
            .await
            .unwrap()
            .is_some()
    );
    let memory = connect("memory://redisson-per-lock").await.unwrap();
    let err = memory.lock("x").redisson().try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
    let err = plain
        .semaphore("pool", 2)
        .redisson()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_misuse(), "{err:?}");
    let mut spec = dlock::LockSpec::named("pool".into(), Some(2), None).unwrap();
    spec.compat(Some("redisson")).unwrap();
    assert!(spec.check().unwrap_err().is_misuse());
    assert!(spec.compat(Some("curator")).unwrap_err().is_misuse());
}

#[tokio::test]
async fn bad_compat_values_are_refused() {
    for (url, what) in [
        ("redis://127.0.0.1:1/?compat=curator", "compat"),
        (
            "redis-cluster://127.0.0.1:1,127.0.0.1:2?compat=curator",
            "compat",
        ),
        (
            "redis-cluster://127.0.0.1:1,127.0.0.1:2?compat=redisson&db=2",
            "query",
        ),
    ] {
        let err = connect(url).await.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidUrl(m) | Error::Unsupported(m) if m.contains(what)),
            "{url}: {err:?}"
        );
    }
    let server = RedisServer::start();
    let err = dlock::Client::builder(&url(&server))
        .lock_delay(Duration::from_secs(1))
        .connect()
        .await
        .unwrap_err();
    assert!(
        err.is_misuse() || err.to_string().contains("lock-delay"),
        "{err:?}"
    );
}
