//! Live mixed-language contention: workers in Rust (native engine), Rust with the Wasm
//! engine, Python and Node contend for one lock on a real redis-server, then on a real
//! ZooKeeper (one test), and on a real PostgreSQL, then on a real MariaDB (another), until a
//! shared counter reaches its target; and Java workers on Apache Curator contend with the
//! Rust, Python and Node workers for a lock (`InterProcessMutex`), a read-write lock
//! (`InterProcessReadWriteLock`) and a semaphore (`InterProcessSemaphoreV2`) on ZooKeeper (a
//! third), and Java workers on Redisson (`RFencedLock`) with them on Redis and on a Redis
//! Cluster in `compat=redisson` mode (a fourth). Each holder does a fenced
//! read-modify-write of the counter in a shared file and logs its tenure; the logs must show
//! every write counted, fencing tokens strictly increasing in acquisition order, no two
//! tenures overlapping (on a read-write lock: no write hold beside any other hold, and each
//! read hold's token between those of the writes before and after it; on a semaphore of 2
//! permits: never more than 2 holders, and dlock's tokens growing where permits follow each
//! other), no stale write, and every runtime with at least 10% of the acquisitions (each acquires as often as the lock's
//! hand-off lets it).
//!
//! Needs the Python wheel installed in target/venv, the Node addon built in node/ (both done
//! by `just python-test` and `just node-test`) and the JVM worker built by Maven
//! (contract/java/target/contend.jar), so it is ignored by a plain `cargo test` and run by
//! `just interop`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use dlock_testkit::{MariadbServer, PostgresServer, RedisCluster, RedisServer, ZkEnsemble};

/// Workers per runtime, and the counter's target: 4 runtimes × 2 workers share 2,000 writes
/// (plus one last acquisition each that finds the target reached).
const WORKERS: usize = 2;
const TARGET: usize = 2_000;
/// On SQL: MariaDB's waiters find a hand-off at their next look (25–50 ms), so fewer rounds.
const SQL_TARGET: usize = 500;
const RUNTIMES: [&str; 4] = ["rust", "rust-wasm", "python", "node"];
/// Beside Curator: one worker per dlock host, and Java.
const WITH_JAVA: [&str; 4] = ["rust", "python", "node", "java"];

/// What the workers take: a lock, a read-write lock's write hold and every third time its
/// read hold, or a permit of a semaphore of [`PERMITS`] (each worker `target` times).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Lock,
    Rw,
    Sem,
}

/// The semaphore's permits in [`Mode::Sem`] (as the workers have it).
const PERMITS: usize = 2;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn worker(runtime: &str, url: &str, dir: &Path, label: &str, target: usize, mode: Mode) -> Child {
    let repo = repo();
    let args = [
        url,
        "mixed/job",
        &dir.to_string_lossy(),
        label,
        &target.to_string(),
        match mode {
            Mode::Lock => "lock",
            Mode::Rw => "rw",
            Mode::Sem => "sem",
        },
    ]
    .map(str::to_owned);
    let mut cmd = match runtime {
        "rust" => Command::new(env!("CARGO_BIN_EXE_contend")),
        "rust-wasm" => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_contend"));
            c.args(args.clone())
                .arg("--wasm")
                .arg(dlock_testkit::wasm_component());
            return c.spawn().expect("the Rust worker starts");
        }
        "python" => {
            let python = std::env::var_os("DLOCK_PYTHON")
                .map_or_else(|| repo.join("target/venv/bin/python"), PathBuf::from);
            let mut c = Command::new(python);
            c.arg(repo.join("contract/workers/contend.py"));
            c
        }
        "node" => {
            let mut c = Command::new("node");
            c.arg(repo.join("contract/workers/contend.mjs"))
                .env("DLOCK_NODE_PACKAGE", repo.join("node"));
            c
        }
        "java" => {
            let mut c = Command::new("java");
            c.arg("-jar")
                .arg(repo.join("contract/java/target/contend.jar"));
            c
        }
        other => unreachable!("{other}"),
    };
    cmd.args(args)
        .spawn()
        .unwrap_or_else(|e| panic!("the {runtime} worker does not start: {e}"))
}

/// The workers of one run, killed if the run ends early (a failed check), so that none
/// outlives the server it contends on.
struct Workers(Vec<(String, Child)>);

impl Drop for Workers {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

struct Tenure {
    token: u64,
    start: u64,
    end: u64,
    /// 0 written, 1 refused as stale, 2 found the target reached, 3 a read hold, 4 a permit.
    outcome: u64,
    runtime: &'static str,
}

impl Tenure {
    fn reads(&self) -> bool {
        self.outcome == 3
    }
}

/// The tenures of one run, sorted by start, and the acquisitions per runtime.
struct Run {
    tenures: Vec<Tenure>,
    per_runtime: BTreeMap<&'static str, usize>,
}

impl Run {
    /// The gaps between a tenure's end and the next one's start where the lock passed from a
    /// runtime in `from` to a runtime in `to` (ms): the hand-off between them.
    fn hand_offs(&self, from: &[&str], to: &[&str]) -> Vec<f64> {
        let mut gaps: Vec<f64> = self
            .tenures
            .windows(2)
            .filter(|p| !p[0].reads() && !p[1].reads())
            .filter(|p| from.contains(&p[0].runtime) && to.contains(&p[1].runtime))
            .map(|p| p[1].start.saturating_sub(p[0].end) as f64 / 1e6)
            .collect();
        gaps.sort_by(f64::total_cmp);
        gaps
    }

    /// On a semaphore: the gaps between a release while every permit was held and the next
    /// acquisition (ms), where that release was by a runtime in `from` and the acquisition by
    /// one in `to` — a waiter let in by the other side's release.
    fn permit_hand_offs(&self, from: &[&str], to: &[&str]) -> Vec<f64> {
        let mut gaps: Vec<f64> = self
            .tenures
            .iter()
            .filter(|b| to.contains(&b.runtime))
            .filter_map(|b| {
                let a = self
                    .tenures
                    .iter()
                    .filter(|a| a.end <= b.start)
                    .max_by_key(|a| a.end)?;
                let full = holders_before(&self.tenures, a.end) >= PERMITS;
                (full && from.contains(&a.runtime)).then(|| (b.start - a.end) as f64 / 1e6)
            })
            .collect();
        gaps.sort_by(f64::total_cmp);
        gaps
    }

    fn summary(&self, what: &str, started: Instant) -> String {
        let total: usize = self.per_runtime.values().sum();
        let reads = self.tenures.iter().filter(|t| t.reads()).count();
        format!(
            "{what}: {total} acquisitions ({reads} reads) in {:.1?}: {:?}",
            started.elapsed(),
            self.per_runtime
        )
    }
}

fn median(sorted: &[f64]) -> String {
    match sorted.len() {
        0 => "-".into(),
        n => format!("{:.2} ms (n={n})", sorted[n / 2]),
    }
}

fn contend(url: &str, target: usize) -> BTreeMap<&'static str, usize> {
    contend_with(url, target, &RUNTIMES, Mode::Lock).per_runtime
}

fn contend_with(url: &str, target: usize, runtimes: &[&'static str], mode: Mode) -> Run {
    let dir = tempdir();
    let mut children = Workers(
        runtimes
            .iter()
            .flat_map(|r| (0..WORKERS).map(move |w| (*r, w)))
            .map(|(r, w)| {
                let label = format!("{r}-{w}");
                (label.clone(), worker(r, url, &dir, &label, target, mode))
            })
            .collect(),
    );
    let children = &mut children.0;
    let deadline = Instant::now() + Duration::from_secs(300);
    // Every worker connects (and compiles its engine) first; then all start at once.
    let labels: Vec<String> = children.iter().map(|(l, _)| l.clone()).collect();
    while !labels
        .iter()
        .all(|l| dir.join(format!("{l}.ready")).exists())
    {
        assert!(Instant::now() < deadline, "workers not ready after 300 s");
        for (label, child) in children.iter_mut() {
            if let Some(status) = child.try_wait().expect("waitable") {
                panic!("worker {label} exited before starting: {status}");
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(dir.join("go"), "").unwrap();
    while !children.is_empty() {
        assert!(
            Instant::now() < deadline,
            "workers still running after 300 s"
        );
        children.retain_mut(|(label, child)| match child.try_wait().expect("waitable") {
            Some(status) => {
                assert!(status.success(), "worker {label} failed: {status}");
                false
            }
            None => true,
        });
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut tenures = Vec::new();
    for &runtime in runtimes {
        for w in 0..WORKERS {
            let log = std::fs::read_to_string(dir.join(format!("{runtime}-{w}.log"))).unwrap();
            for line in log.lines() {
                let f: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
                tenures.push(Tenure {
                    token: f[0],
                    start: f[1],
                    end: f[2],
                    outcome: f[3],
                    runtime,
                });
            }
        }
    }
    tenures.sort_by_key(|t| t.start);
    let total = tenures.len();
    let mut per_runtime = BTreeMap::new();
    for t in &tenures {
        *per_runtime.entry(t.runtime).or_insert(0) += 1;
    }
    // Every runtime takes part. With FIFO hand-off each gets about its share, and at least a
    // tenth is asked; in Redisson's layout a release wakes every waiter and the first to retry
    // wins (Redisson's lock is not fair), so shares follow each worker's speed — optimised
    // Python and Node workers beside a debug-built Rust one — and only a hundredth is asked.
    let least = if url.contains("compat=redisson") {
        100
    } else {
        10
    };
    for (runtime, n) in &per_runtime {
        assert!(n * least >= total, "{runtime} acquired only {n} of {total}");
    }
    if mode == Mode::Sem {
        assert_eq!(total, target * WORKERS * runtimes.len());
        check_semaphore(&tenures);
        std::fs::remove_dir_all(&dir).ok();
        return Run {
            tenures,
            per_runtime,
        };
    }
    let writes = tenures.iter().filter(|t| t.outcome == 0).count();
    assert!(total >= target, "only {total} acquisitions");
    assert_eq!(
        tenures.iter().filter(|t| t.outcome == 1).count(),
        0,
        "stale writes"
    );
    match mode {
        Mode::Lock => check_exclusive(&tenures),
        Mode::Rw => check_rw(&tenures),
        Mode::Sem => unreachable!(),
    }
    let counter = std::fs::read_to_string(dir.join("counter")).unwrap();
    let mut counter = counter
        .split_whitespace()
        .map(|x| x.parse::<u64>().unwrap());
    assert_eq!(writes, target);
    assert_eq!(
        counter.next(),
        Some(writes as u64),
        "the counter lost updates"
    );
    let last_write = tenures.iter().rev().find(|t| t.outcome == 0);
    assert_eq!(counter.next(), last_write.map(|t| t.token));
    std::fs::remove_dir_all(&dir).ok();
    Run {
        tenures,
        per_runtime,
    }
}

fn overlap(a: &Tenure, b: &Tenure) -> String {
    format!(
        "overlapping tenures: {} (token {}, outcome {}) until {} and {} (token {}, outcome {}) from {}",
        a.runtime, a.token, a.outcome, a.end, b.runtime, b.token, b.outcome, b.start
    )
}

/// A lock: no two tenures overlap, and tokens grow in acquisition order.
fn check_exclusive(tenures: &[Tenure]) {
    for pair in tenures.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(a.end <= b.start, "{}", overlap(a, b));
        assert!(a.token < b.token, "token {} after {}", b.token, a.token);
    }
}

/// A read-write lock (`tenures` sorted by start): a write hold overlaps no other hold; write
/// tokens grow in acquisition order; a read hold's token is larger than that of every write
/// before it and smaller than that of every write after it.
fn check_rw(tenures: &[Tenure]) {
    let mut latest: Option<&Tenure> = None;
    for (i, t) in tenures.iter().enumerate() {
        if !t.reads() {
            if let Some(a) = latest {
                assert!(a.end <= t.start, "{}", overlap(a, t));
            }
            if let Some(b) = tenures.get(i + 1) {
                assert!(t.end <= b.start, "{}", overlap(t, b));
            }
        }
        if latest.is_none_or(|a| a.end < t.end) {
            latest = Some(t);
        }
    }
    let writes: Vec<&Tenure> = tenures.iter().filter(|t| !t.reads()).collect();
    for pair in writes.windows(2) {
        assert!(
            pair[0].token < pair[1].token,
            "write token {} after {}",
            pair[1].token,
            pair[0].token
        );
    }
    for r in tenures.iter().filter(|t| t.reads()) {
        for w in &writes {
            let ordered = if w.end <= r.start {
                w.token < r.token
            } else {
                w.token > r.token
            };
            assert!(
                ordered,
                "read token {} ({}) and write token {} ({}) out of order",
                r.token, r.runtime, w.token, w.runtime
            );
        }
    }
}

/// The holders at the instant just before `at` (`tenures` sorted by start).
fn holders_before(tenures: &[Tenure], at: u64) -> usize {
    tenures
        .iter()
        .take_while(|t| t.start < at)
        .filter(|t| t.end >= at)
        .count()
}

/// A semaphore of [`PERMITS`] (`tenures` sorted by start): never more holders at once, all of
/// them at once at some point (or the test shows nothing), and dlock's tokens distinct and
/// growing from a permit to any permit taken after it ended (Curator's holders have none: 0).
fn check_semaphore(tenures: &[Tenure]) {
    let mut most = 0;
    for t in tenures {
        let inside = holders_before(tenures, t.start + 1);
        assert!(
            inside <= PERMITS,
            "{inside} holders of {PERMITS} permits when {} took one at {}",
            t.runtime,
            t.start
        );
        most = most.max(inside);
    }
    assert_eq!(most, PERMITS, "the permits were never all taken at once");
    let fenced: Vec<&Tenure> = tenures.iter().filter(|t| t.token != 0).collect();
    for (i, a) in fenced.iter().enumerate() {
        for b in &fenced[i + 1..] {
            assert_ne!(a.token, b.token, "two permits with one token");
            if a.end <= b.start {
                assert!(a.token < b.token, "token {} after {}", b.token, a.token);
            }
        }
    }
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "dlock-contention-{}-{}",
        std::process::id(),
        dlock_testkit::free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
#[ignore = "needs the Python wheel and the Node addon: run by `just interop`"]
fn four_runtimes_share_one_lock_on_redis_then_on_zookeeper() {
    let redis = RedisServer::start();
    let started = Instant::now();
    let on_redis = contend(&redis.url(), TARGET);
    println!(
        "redis: {} acquisitions in {:.1?}: {on_redis:?}",
        on_redis.values().sum::<usize>(),
        started.elapsed()
    );
    drop(redis);

    let zk = ZkEnsemble::start(1);
    let started = Instant::now();
    let on_zk = contend(&zk.url(), TARGET);
    println!(
        "zookeeper: {} acquisitions in {:.1?}: {on_zk:?}",
        on_zk.values().sum::<usize>(),
        started.elapsed()
    );
}

#[test]
#[ignore = "needs the Python wheel and the Node addon: run by `just interop`"]
fn four_runtimes_share_one_lock_on_postgres_then_on_mariadb() {
    for (kind, url, _server) in [
        {
            let pg = PostgresServer::start();
            ("postgres", pg.url(), Box::new(pg) as Box<dyn std::any::Any>)
        },
        {
            let db = MariadbServer::start();
            ("mariadb", db.url(), Box::new(db) as Box<dyn std::any::Any>)
        },
    ] {
        let started = Instant::now();
        let counts = contend(&url, SQL_TARGET);
        println!(
            "{kind}: {} acquisitions in {:.1?}: {counts:?}",
            counts.values().sum::<usize>(),
            started.elapsed()
        );
    }
}

/// Curator on ZooKeeper: Java workers with `InterProcessMutex`, then with
/// `InterProcessReadWriteLock`, then with `InterProcessSemaphoreV2`, on the paths dlock uses,
/// beside dlock's Rust, Python and Node workers; then the lock again with digest credentials.
/// Prints the hand-off between the two sides.
#[test]
#[ignore = "needs the Python wheel, the Node addon and the JVM worker: run by `just interop`"]
fn curator_and_dlock_share_a_lock_a_rw_lock_and_a_semaphore_on_zookeeper() {
    let zk = ZkEnsemble::start(1);
    let dlock = &WITH_JAVA[..3];
    // Last, with digest credentials under a chroot that a dlock client creates first (with
    // nodes only their creator may read): Curator authenticates as the same user.
    let secure = format!("zk://alice:secret@{}/secure", zk.hosts());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        dlock::Client::builder(&secure).connect().await.unwrap();
    });
    for (what, url, mode, target) in [
        ("lock", zk.url(), Mode::Lock, 1_000),
        ("rw-lock", zk.url(), Mode::Rw, 600),
        ("semaphore", zk.url(), Mode::Sem, 100),
        ("lock with credentials", secure, Mode::Lock, 300),
    ] {
        let started = Instant::now();
        let run = contend_with(&url, target, &WITH_JAVA, mode);
        println!("{}", run.summary(&format!("curator {what}"), started));
        if mode == Mode::Sem {
            println!(
                "  hand-off p50 (a full semaphore's release to the next acquisition): Curator -> dlock {}, dlock -> Curator {}, dlock -> dlock {}, Curator -> Curator {}",
                median(&run.permit_hand_offs(&["java"], dlock)),
                median(&run.permit_hand_offs(dlock, &["java"])),
                median(&run.permit_hand_offs(dlock, dlock)),
                median(&run.permit_hand_offs(&["java"], &["java"])),
            );
            continue;
        }
        println!(
            "  hand-off p50: Curator -> dlock {}, dlock -> Curator {}, dlock -> dlock {}, Curator -> Curator {}",
            median(&run.hand_offs(&["java"], dlock)),
            median(&run.hand_offs(dlock, &["java"])),
            median(&run.hand_offs(dlock, dlock)),
            median(&run.hand_offs(&["java"], &["java"])),
        );
    }
}

/// Redisson on Redis: Java workers with `RFencedLock` beside dlock's Rust, Python and Node
/// workers in `compat=redisson` mode, on one lock name, on one redis-server and then on a Redis
/// Cluster (sharded pub/sub); tokens from the one counter they share. Prints the hand-off
/// between the two sides.
#[test]
#[ignore = "needs the Python wheel, the Node addon and the JVM worker: run by `just interop`"]
fn redisson_and_dlock_share_a_lock_on_redis_and_on_a_cluster() {
    let dlock = &WITH_JAVA[..3];
    for on_cluster in [false, true] {
        let (url, _server) = match on_cluster {
            false => {
                let redis = RedisServer::start();
                let url = format!("{}/?compat=redisson", redis.url());
                (url, Box::new(redis) as Box<dyn std::any::Any>)
            }
            true => {
                let cluster = RedisCluster::start(3);
                let url = format!("{}?compat=redisson", cluster.url());
                (url, Box::new(cluster) as Box<dyn std::any::Any>)
            }
        };
        let what = if on_cluster {
            "redisson lock on a cluster"
        } else {
            "redisson lock"
        };
        let started = Instant::now();
        let run = contend_with(&url, 1_000, &WITH_JAVA, Mode::Lock);
        println!("{}", run.summary(what, started));
        println!(
            "  hand-off p50: Redisson -> dlock {}, dlock -> Redisson {}, dlock -> dlock {}, Redisson -> Redisson {}",
            median(&run.hand_offs(&["java"], dlock)),
            median(&run.hand_offs(dlock, &["java"])),
            median(&run.hand_offs(dlock, dlock)),
            median(&run.hand_offs(&["java"], &["java"])),
        );
    }
}
