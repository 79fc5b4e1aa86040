//! The Rust worker of `just bench` (bench/bench.py runs it): dlock with the native engine
//! (`dlock`) or the Wasm engine (`dlock-wasm`), rslock (`rslock`, Redlock on one node,
//! with its default retry of up to 200 ms), and the databases' own session locks
//! (`pg_advisory_lock`, `GET_LOCK`). Same command line as the Python, Node and Java
//! workers:
//!
//! - `worker rtt URL N`: N raw round trips of the server (PING and EVALSHA of `return 1` on
//!   Redis, and a cycle of dlock's ACQUIRE and RELEASE functions, by FCALL as the client
//!   calls them on Redis 7, on a bare connection;
//!   `exists /` on ZooKeeper, `SELECT 1` on PostgreSQL and MariaDB); prints
//!   `{"ping": [ns…], "evalsha": [ns…], "dlock scripts": [ns…]}`, `{"exists": [ns…]}`, `{"postgres select": [ns…]}`
//!   or `{"mariadb select": [ns…]}`.
//! - `worker uncontended LIB URL NAME N [WARMUP]`: WARMUP cycles (default 1: scripts loaded,
//!   connections open), then N measured acquire + release cycles of a lock nobody else uses;
//!   prints `{"samples": [ns…], "total": ns, "cpu": ns}`, `cpu` the CPU time (user and system,
//!   every thread of the process) the N cycles took.
//! - `worker contend LIB URL NAME OUT SECONDS HOLD_US OUTSIDE_US`: connects, writes
//!   `OUT.ready` and waits for a file `go` beside OUT; then for SECONDS it acquires (waiting
//!   as long as it takes), holds HOLD_US, releases and works OUTSIDE_US outside the lock, and
//!   writes one line `t_request t_acquired t_released` (CLOCK_MONOTONIC ns) per cycle to OUT.
//!   The hold is a spin on the monotonic clock and the work outside a thread sleep (nanosleep):
//!   tokio's timer would round either up to the next millisecond.
//! - `worker capacity LIB URL PREFIX SECONDS TASKS LOCKS`: TASKS tasks of one client take
//!   locks `PREFIX/0` … `PREFIX/LOCKS-1` over and over for SECONDS, task t the locks i with
//!   i mod TASKS = t, so that no two tasks ever want one lock (what the server carries, not
//!   the waiting); prints `{"cycles": n, "seconds": s}`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

type Release = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>>>;
/// Acquires lock NAME (waiting as long as it takes) → its release.
type Acquire = Box<dyn FnMut(&str) -> Pin<Box<dyn Future<Output = Release>>>>;

fn clock_ns(clock: nix::time::ClockId) -> u64 {
    let ts = nix::time::clock_gettime(clock).expect("a clock");
    u64::try_from(ts.tv_sec()).expect("after boot") * 1_000_000_000
        + u64::try_from(ts.tv_nsec()).expect("in range")
}

fn now_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_MONOTONIC)
}

/// The CPU time of this process so far: user and system, every thread.
fn cpu_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
}

fn print_samples(key: &str, samples: &[u64]) -> String {
    let list: Vec<String> = samples.iter().map(u64::to_string).collect();
    format!("\"{key}\": [{}]", list.join(","))
}

/// Acquire (waiting as long as it takes) → the release, for one library.
async fn library(lib: &str, url: &str) -> Acquire {
    match lib {
        "dlock" | "dlock-wasm" => {
            let mut builder = dlock::Client::builder(url);
            if lib == "dlock-wasm" {
                let component =
                    dlock_wasmtime::WasmComponent::from_file(dlock_testkit::wasm_component())
                        .expect("target/dlock.wasm (just wasm)");
                builder = builder.machine(component.factory());
            }
            let client = builder.connect().await.expect("connects");
            Box::new(move |name| {
                let lock = client.lock(name).lease(Duration::from_secs(10));
                Box::pin(async move {
                    let guard = lock.acquire().await.expect("acquires");
                    Box::new(move || {
                        Box::pin(async move { guard.release().await.expect("releases") })
                            as Pin<Box<dyn Future<Output = ()>>>
                    }) as Release
                })
            })
        }
        "rslock" => {
            let manager = std::rc::Rc::new(rslock::LockManager::new(vec![url.to_owned()]));
            Box::new(move |name| {
                let (manager, name) = (manager.clone(), name.to_owned());
                Box::pin(async move {
                    let lock = manager
                        .acquire_no_guard(name.as_bytes(), Duration::from_secs(10))
                        .await
                        .expect("acquires");
                    Box::new(move || {
                        Box::pin(async move { manager.unlock(&lock).await })
                            as Pin<Box<dyn Future<Output = ()>>>
                    }) as Release
                })
            })
        }
        // The databases' own session locks: no lease, no fence, waiting inside the server —
        // the yardstick of what the database can do.
        "pg_advisory_lock" => {
            let client = std::rc::Rc::new(postgres(url).await);
            Box::new(move |name| {
                let (client, name) = (client.clone(), name.to_owned());
                Box::pin(async move {
                    let take = "SELECT pg_advisory_lock(hashtext($1))";
                    client.execute(take, &[&name]).await.expect("locks");
                    Box::new(move || {
                        Box::pin(async move {
                            let give = "SELECT pg_advisory_unlock(hashtext($1))";
                            client.execute(give, &[&name]).await.expect("unlocks");
                        }) as Pin<Box<dyn Future<Output = ()>>>
                    }) as Release
                })
            })
        }
        "GET_LOCK" => {
            use mysql_async::prelude::Queryable;
            let conn = mysql_async::Conn::from_url(url).await.expect("connects");
            let conn = std::rc::Rc::new(tokio::sync::Mutex::new(conn));
            Box::new(move |name| {
                let (conn, name) = (conn.clone(), name.to_owned());
                Box::pin(async move {
                    let take = "SELECT GET_LOCK(?, 3600)";
                    let got: Option<i64> = conn
                        .lock()
                        .await
                        .exec_first(take, (&name,))
                        .await
                        .expect("locks");
                    assert_eq!(got, Some(1), "GET_LOCK timed out");
                    Box::new(move || {
                        Box::pin(async move {
                            let give = "DO RELEASE_LOCK(?)";
                            conn.lock()
                                .await
                                .exec_drop(give, (&name,))
                                .await
                                .expect("unlocks");
                        }) as Pin<Box<dyn Future<Output = ()>>>
                    }) as Release
                })
            })
        }
        other => panic!("unknown library {other}"),
    }
}

/// A tokio-postgres connection to a `postgres://` URL, driven on this thread.
async fn postgres(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connects");
    tokio::spawn(connection);
    client
}

async fn rtt(url: &str, n: usize) -> String {
    let times = |samples: &mut Vec<u64>, t: u64| samples.push(now_ns() - t);
    if let Some(hosts) = url.strip_prefix("zk://") {
        let client = zookeeper_client::Client::connector()
            .connect(hosts)
            .await
            .expect("connects");
        let mut exists = Vec::with_capacity(n);
        for _ in 0..n {
            let t = now_ns();
            client.check_stat("/").await.expect("exists");
            times(&mut exists, t);
        }
        return format!("{{{}}}", print_samples("exists", &exists));
    }
    if url.starts_with("postgres://") {
        let client = postgres(url).await;
        let mut select = Vec::with_capacity(n);
        for _ in 0..n {
            let t = now_ns();
            client.query_one("SELECT 1", &[]).await.expect("SELECT 1");
            times(&mut select, t);
        }
        return format!("{{{}}}", print_samples("postgres select", &select));
    }
    if url.starts_with("mysql://") {
        use mysql_async::prelude::Queryable;
        let mut conn = mysql_async::Conn::from_url(url).await.expect("connects");
        let mut select = Vec::with_capacity(n);
        for _ in 0..n {
            let t = now_ns();
            let _: Option<i64> = conn.query_first("SELECT 1").await.expect("SELECT 1");
            times(&mut select, t);
        }
        return format!("{{{}}}", print_samples("mariadb select", &select));
    }
    let mut con = redis::Client::open(url)
        .expect("a URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let script = redis::Script::new("return 1");
    let (mut ping, mut evalsha) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let _: i64 = script.invoke_async(&mut con).await.expect("loads");
    for _ in 0..n {
        let t = now_ns();
        let _: String = redis::cmd("PING")
            .query_async(&mut con)
            .await
            .expect("PING");
        times(&mut ping, t);
        let t = now_ns();
        let _: i64 = script.invoke_async(&mut con).await.expect("EVALSHA");
        times(&mut evalsha, t);
    }
    let scripts = dlock_scripts(&mut con, n).await;
    format!(
        "{{{}, {}, {}}}",
        print_samples("ping", &ping),
        print_samples("evalsha", &evalsha),
        print_samples("dlock scripts", &scripts)
    )
}

/// dlock's own uncontended cycle without dlock's client: the ACQUIRE and RELEASE functions
/// with the keys and arguments the engine sends (PROTOCOL.md §5), each one FCALL on a bare
/// redis-rs connection. A dlock cycle's time over this one is what its client adds; this
/// one's over two EVALSHA of `return 1` is what its scripts cost the server.
async fn dlock_scripts(con: &mut redis::aio::MultiplexedConnection, n: usize) -> Vec<u64> {
    use dlock_core::redis::{self as protocol, Fairness, LockKeys, Mode, RedisOp};
    let keys = LockKeys::new("bench-dlock-scripts");
    let token = dlock_core::owner_token(dlock_core::ClientId(0xbe4c), 1);
    let lease = Duration::from_secs(10);
    let library = protocol::library();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&library.source)
        .query_async(con)
        .await
        .expect("FUNCTION LOAD");
    // Each a ready FCALL command: what is timed is the server and the wire.
    let fcall = |op: RedisOp| {
        let RedisOp::Eval { script, .. } = &op else {
            unreachable!("a script")
        };
        dlock_bench::script_call("FCALL", &library.function(*script), &[op])
    };
    let take = fcall(protocol::acquire(
        keys.clone(),
        &token,
        lease,
        1,
        Mode::Wait,
        lease,
        Fairness::Fair,
    ));
    let give = fcall(protocol::release(keys, &token, 0, Fairness::Fair));
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = now_ns();
        let taken: Vec<i64> = take.query_async(con).await.expect("ACQUIRE");
        let given: Vec<i64> = give.query_async(con).await.expect("RELEASE");
        samples.push(now_ns() - t);
        // Acquired ({1, token, 1}), then freed with nobody to hand it to ({2, 0}).
        assert!(taken[0] == 1 && given == [2, 0], "{taken:?} {given:?}");
    }
    samples
}

async fn contend(
    mut acquire: Acquire,
    name: &str,
    out: &Path,
    seconds: f64,
    hold: Duration,
    outside: Duration,
) {
    let ready = PathBuf::from(format!("{}.ready", out.display()));
    std::fs::write(&ready, "").expect("writable");
    let go = out.parent().expect("a directory").join("go");
    while !go.exists() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let deadline = now_ns() + (seconds * 1e9) as u64;
    let hold_ns = u64::try_from(hold.as_nanos()).expect("a hold in range");
    let mut lines = String::new();
    while now_ns() < deadline {
        let requested = now_ns();
        let release = acquire(name).await;
        let acquired = now_ns();
        // Held for exactly `hold` (a spin on the monotonic clock: tokio's timer rounds 1 ms up
        // to about 2).
        while now_ns() < acquired + hold_ns {
            std::hint::spin_loop();
        }
        let released = now_ns();
        release().await;
        lines.push_str(&format!("{requested} {acquired} {released}\n"));
        // Nothing is held: blocking the thread (the client's driver with it) costs nothing.
        std::thread::sleep(outside);
    }
    std::fs::write(out, lines).expect("writable");
}

/// `tasks` loops of acquire + release over disjoint shares of `locks` locks, for `seconds`:
/// the cycles done and the seconds they took.
async fn capacity(
    acquire: Acquire,
    prefix: &str,
    seconds: f64,
    tasks: u64,
    locks: u64,
) -> (u64, f64) {
    let acquire = std::cell::RefCell::new(acquire);
    let start = now_ns();
    let deadline = start + (seconds * 1e9) as u64;
    let loops = (0..tasks).map(|task| {
        let acquire = &acquire;
        async move {
            let mut cycles = 0;
            for i in (task..locks).step_by(tasks as usize).cycle() {
                if now_ns() >= deadline {
                    break;
                }
                let name = format!("{prefix}/{i}");
                let taken = acquire.borrow_mut()(&name);
                (taken.await)().await;
                cycles += 1;
            }
            cycles
        }
    });
    let cycles = futures_util::future::join_all(loops)
        .await
        .into_iter()
        .sum();
    (cycles, (now_ns() - start) as f64 / 1e9)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| {
        args.get(i)
            .map(String::as_str)
            .expect("see the usage in worker.rs")
    };
    let num = |i: usize| arg(i).parse::<u64>().expect("a number");
    match arg(0) {
        "rtt" => println!("{}", rtt(arg(1), num(2) as usize).await),
        "uncontended" => {
            let (mut acquire, name) = (library(arg(1), arg(2)).await, arg(3));
            let warmup = args.get(5).map_or(1, |_| num(5));
            for _ in 0..warmup {
                (acquire(name).await)().await;
            }
            let n = num(4) as usize;
            let mut samples = Vec::with_capacity(n);
            let (start, cpu) = (now_ns(), cpu_ns());
            for _ in 0..n {
                let t = now_ns();
                (acquire(name).await)().await;
                samples.push(now_ns() - t);
            }
            let (total, cpu) = (now_ns() - start, cpu_ns() - cpu);
            println!(
                "{{{}, \"total\": {total}, \"cpu\": {cpu}}}",
                print_samples("samples", &samples)
            );
        }
        "contend" => {
            let acquire = library(arg(1), arg(2)).await;
            let seconds: f64 = arg(5).parse().expect("seconds");
            let micros = |i| Duration::from_micros(num(i));
            let out = Path::new(arg(4));
            contend(acquire, arg(3), out, seconds, micros(6), micros(7)).await;
        }
        "capacity" => {
            let acquire = library(arg(1), arg(2)).await;
            let seconds: f64 = arg(4).parse().expect("seconds");
            let (tasks, locks) = (num(5), num(6));
            let (cycles, took) = capacity(acquire, arg(3), seconds, tasks, locks).await;
            println!("{{\"cycles\": {cycles}, \"seconds\": {took}}}");
        }
        other => panic!("unknown mode {other}"),
    }
}
