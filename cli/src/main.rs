//! `dlock`: run a command under a distributed lock, inspect a lock, or watch the demo.

mod demo;
mod stats;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use dlock::{BACKENDS, Client, Error, ErrorCode, LockSpec, Primitive};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::Command;

/// Exit codes of `dlock run` besides the command's own (documented in `dlock run --help`).
mod exit {
    /// Bad arguments or URL (EX_USAGE).
    pub(crate) const USAGE: u8 = 64;
    /// The backend could not be reached (EX_UNAVAILABLE).
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// The command could not be started (EX_OSERR).
    pub(crate) const SPAWN: u8 = 71;
    /// The lock was lost while the command ran; the command was terminated.
    pub(crate) const LOST: u8 = 74;
    /// The lock could not be acquired within --wait; the command did not run (EX_TEMPFAIL).
    pub(crate) const NOT_ACQUIRED: u8 = 75;
}

#[derive(Parser)]
#[command(name = "dlock", version, about = about(), after_help = backends_help())]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a command only while holding a lock: a cluster-wide flock(1).
    ///
    /// The command gets DLOCK_FENCING_TOKEN (and DLOCK_LOCK) in its environment; with several
    /// --lock, the locks are taken as one multi-lock (all or none, in canonical order) and the
    /// command gets DLOCK_FENCING_TOKENS, a JSON object of each lock's token. dlock exits
    /// with the command's exit code (128 + signal if it was killed by one). Other exit codes:
    /// 75 the lock was not acquired within --wait (the command did not run); 74 the lock was
    /// lost while the command ran (it was sent SIGTERM, then SIGKILL after --grace);
    /// 69 the backend could not be reached; 71 the command could not be started; 64 bad
    /// arguments or URL. SIGINT and SIGTERM sent to dlock are passed on to the command.
    Run {
        #[command(flatten)]
        backend: BackendArg,
        /// Name of the lock; give it several times to hold several locks as one.
        #[arg(long, required = true)]
        lock: Vec<String>,
        /// Take the lock non-fairly (Redis): ahead of queued waiters if it is free, and free it
        /// afterwards instead of handing it to the next in line. One lock only.
        #[arg(long)]
        non_fair: bool,
        /// Hold one permit of the semaphore named by --lock, which has this many permits
        /// (Redis, ZooKeeper): at most that many `dlock run` at a time. One --lock only.
        #[arg(long)]
        permits: Option<u32>,
        /// Hold the read or the write hold of the read-write lock named by --lock (Redis, ZooKeeper):
        /// runs with `read` go on together, one with `write` alone (flock -s and -x). One
        /// --lock only.
        #[arg(long, value_parser = ["read", "write"])]
        rw: Option<String>,
        /// Lease, renewed every third of it while the command runs.
        #[arg(long, default_value = "30s", value_parser = duration)]
        lease: Duration,
        /// How long to wait for the lock; waits as long as it takes if not given.
        #[arg(long, value_parser = duration)]
        wait: Option<Duration>,
        /// Time between SIGTERM and SIGKILL when the lock is lost.
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
        /// Lock-delay (Redis only): if dlock stops renewing without releasing (paused,
        /// killed, cut off), nobody gets the lock until this long after the lease ran out.
        #[arg(long, value_parser = duration)]
        lock_delay: Option<Duration>,
        /// The command and its arguments.
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// Run a command only while leading an election: one of many replicas runs it.
    ///
    /// Every `dlock elect` of one --name campaigns; they lead one at a time, first come, first
    /// served, and the leader publishes --value (`dlock leader` shows it). The command runs while
    /// this process leads and gets DLOCK_TERM (the term: a fencing token larger than every
    /// earlier term's; DLOCK_FENCING_TOKEN too), DLOCK_ELECTION and DLOCK_LEADER_VALUE. When
    /// it exits, dlock resigns (the next candidate leads at once) and exits with its code.
    /// Leadership lost while it runs (a lease that ran out, a backend that said someone else
    /// leads) terminates it as `dlock run` does and exits 74 — or, with --requeue, campaigns
    /// again and runs the command again when it leads. Exit codes as `dlock run`. Elections run
    /// on redis://, redis-cluster:// and memory://.
    Elect {
        #[command(flatten)]
        backend: BackendArg,
        /// Name of the election (the lock of that name).
        #[arg(long)]
        name: String,
        /// What the leader publishes: who it is, where to reach it (at most 4096 bytes).
        #[arg(long, default_value = "")]
        value: String,
        /// Lease, renewed every third of it while leading: a leader that dies is replaced
        /// within about this long.
        #[arg(long, default_value = "30s", value_parser = duration)]
        lease: Duration,
        /// How long to wait to lead; waits as long as it takes if not given.
        #[arg(long, value_parser = duration)]
        wait: Option<Duration>,
        /// Time between SIGTERM and SIGKILL when leadership is lost.
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
        /// Lock-delay (Redis): after a leader stops renewing without resigning, nobody leads
        /// until this long after its lease ran out.
        #[arg(long, value_parser = duration)]
        lock_delay: Option<Duration>,
        /// After losing leadership, campaign again (and run the command again) instead of
        /// exiting 74.
        #[arg(long)]
        requeue: bool,
        /// The command and its arguments.
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// Show who leads an election: its term and value. With --watch, a line for every change
    /// (a new term, a new value, or none once nobody leads) until interrupted.
    Leader {
        #[command(flatten)]
        backend: BackendArg,
        /// Name of the election.
        name: String,
        /// Follow every change instead of printing the leader once.
        #[arg(long)]
        watch: bool,
        /// Print JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show who holds a lock, its fencing token, the lease left and the waiters.
    Status {
        #[command(flatten)]
        backend: BackendArg,
        /// Name of the lock.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Keep watching: one line per look (holder, token, lease left, waiters), every
        /// `--interval`, until interrupted.
        #[arg(long)]
        watch: bool,
        /// Time between looks with --watch: seconds, or a duration like 250ms.
        #[arg(long, default_value = "1", value_parser = seconds, requires = "watch")]
        interval: Duration,
    },
    /// Print the SQL backend's tables and functions (the DDL a client runs when it finds them
    /// missing), for teams that apply schema changes through their own migrations; or, for
    /// redis, the function library a client loads on Redis 7 (`FUNCTION LOAD` it for users
    /// granted `fcall` but not `function|load`).
    Schema {
        /// The database: postgres (or postgresql), mysql (or mariadb), redis.
        dialect: String,
        /// Prefix of every table, sequence and function name (as `?table_prefix=` in the URL;
        /// SQL only).
        #[arg(long, default_value = "dlock_")]
        table_prefix: String,
    },
    /// Watch workers contend for one lock, each doing fenced read-modify-writes on a shared
    /// counter; ends with a summary (acquisitions per worker, hand-off latency, checks).
    Demo {
        /// Backend URL; the default needs no server.
        #[arg(long, env = "DLOCK_BACKEND", default_value = "memory://demo")]
        backend: String,
        /// Number of workers.
        #[arg(long, default_value_t = 5)]
        workers: usize,
        /// How long to run: seconds, or a duration like 1500ms.
        #[arg(long, default_value = "3", value_parser = seconds)]
        seconds: Duration,
        /// Serve the workers' lock statistics on this address while the demo runs: `GET
        /// /metrics` (Prometheus text) and `GET /stats` (JSON, what `dlock stats` reads).
        /// Port 0 takes a free one; the address is printed.
        #[arg(long)]
        serve: Option<String>,
    },
    /// Print the lock statistics of a running `dlock demo --serve ADDR`: per lock, the
    /// acquisitions, hand-offs, renewals, holds and waiters now, wait times and losses.
    Stats {
        /// The address the demo serves on (host:port).
        #[arg(long)]
        from: String,
        /// Print the JSON as served instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct BackendArg {
    /// Backend URL (see "Backends" in `dlock --help`).
    #[arg(long, env = "DLOCK_BACKEND", long_help = backends_help())]
    backend: String,
}

/// One line on what dlock is, naming the backends of [`BACKENDS`].
fn about() -> String {
    let names: Vec<&str> = BACKENDS.iter().map(|s| s.name).collect();
    format!(
        "Distributed locks with fencing tokens, FIFO hand-off and a lost-lock signal ({})",
        names.join(", ")
    )
}

/// Every backend URL form, with what it is.
fn backends_help() -> String {
    let mut help = String::from("Backends (--backend, or DLOCK_BACKEND):");
    for scheme in BACKENDS {
        help += &format!("\n  {}\n      {}", scheme.form, scheme.about);
    }
    help
}

/// Human-friendly durations: `500ms`, `30s`, `2m`, `1h 30m`.
fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like 500ms, 30s or 2m: {e}"))
}

/// A number of seconds (`2`, `0.5`) or a duration (`1500ms`).
fn seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        Ok(_) => Err(format!("{text:?} is not a positive number of seconds")),
        Err(_) => duration(text),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run {
            backend,
            lock,
            non_fair,
            permits,
            rw,
            lease,
            wait,
            grace,
            lock_delay,
            command,
        } => {
            let options = RunOptions {
                lease,
                wait,
                grace,
                lock_delay,
                fair: !non_fair,
                permits,
                rw,
            };
            run(&backend.backend, &lock, &options, &command).await
        }
        Cmd::Elect {
            backend,
            name,
            value,
            lease,
            wait,
            grace,
            lock_delay,
            requeue,
            command,
        } => {
            let options = ElectOptions {
                lease,
                wait,
                grace,
                lock_delay,
                requeue,
            };
            elect(&backend.backend, &name, &value, &options, &command).await
        }
        Cmd::Leader {
            backend,
            name,
            watch,
            json,
        } => leader(&backend.backend, &name, watch, json).await,
        Cmd::Status {
            backend,
            name,
            json,
            watch: false,
            ..
        } => status(&backend.backend, &name, json).await,
        Cmd::Status {
            backend,
            name,
            json,
            interval,
            ..
        } => watch_status(&backend.backend, &name, json, interval).await,
        Cmd::Demo {
            backend,
            workers,
            seconds,
            serve,
        } => demo::run(&backend, workers, seconds, serve.as_deref()).await,
        Cmd::Stats { from, json } => stats::show(&from, json).await,
        Cmd::Schema {
            dialect,
            table_prefix,
        } => match dialect.as_str() {
            "redis" => Ok(dlock::redis_library()),
            _ => dlock::sql_schema(&dialect, &table_prefix),
        }
        .map(|text| {
            print!("{text}");
            0
        }),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("dlock: {e}");
            ExitCode::from(match e.code() {
                ErrorCode::InvalidArgument | ErrorCode::NotHeld | ErrorCode::Closed => exit::USAGE,
                _ => exit::UNAVAILABLE,
            })
        }
    }
}

/// How `dlock run` holds its lock.
struct RunOptions {
    lease: Duration,
    wait: Option<Duration>,
    grace: Duration,
    lock_delay: Option<Duration>,
    fair: bool,
    /// A permit of a semaphore with this many, instead of the lock.
    permits: Option<u32>,
    /// `read` or `write`: a hold of a read-write lock, instead of the lock.
    rw: Option<String>,
}

async fn run(
    backend: &str,
    locks: &[String],
    options: &RunOptions,
    command: &[String],
) -> Result<u8, Error> {
    let &RunOptions {
        lease,
        wait,
        grace,
        lock_delay,
        fair,
        permits,
        ref rw,
    } = options;
    let mut spec = match locks {
        [one] => LockSpec::named(one.clone(), permits, rw.as_deref())?,
        _ if permits.is_some() || rw.is_some() => {
            return Err(Error::InvalidArgument(
                "--permits and --rw take one --lock: the semaphore's or read-write lock's name"
                    .into(),
            ));
        }
        many => LockSpec::new(Primitive::Multi {
            names: many.to_vec(),
        }),
    };
    spec.lease = lease;
    spec.wait = wait;
    spec.fair = fair;
    spec.check()?;
    let mut client = Client::builder(backend);
    if let Some(delay) = lock_delay {
        client = client.lock_delay(delay);
    }
    let client = client.connect().await?;
    let lock = locks.join(", ");
    let guard = match spec.acquire(&client).await {
        Ok(guard) => guard,
        Err(Error::WaitTimedOut) => {
            eprintln!(
                "dlock: lock {lock:?} not acquired within {}",
                humantime::format_duration(wait.unwrap_or_default())
            );
            return Ok(exit::NOT_ACQUIRED);
        }
        Err(e) => return Err(e),
    };
    let tokens: Vec<String> = guard
        .members()
        .iter()
        .map(|m| format!("{}:{}", json_string(&m.name), m.fencing_token))
        .collect();
    let mut env = vec![("DLOCK_FENCING_TOKENS", format!("{{{}}}", tokens.join(",")))];
    if let [one] = locks {
        env.push(("DLOCK_FENCING_TOKEN", guard.fencing_token().to_string()));
        env.push(("DLOCK_LOCK", one.clone()));
    }
    let ran = supervise(
        command,
        &env,
        guard.lost_signal(),
        grace,
        &format!("lock {lock:?}"),
    )
    .await;
    if !matches!(ran, Ran::Lost)
        && let Err(e) = guard.release().await
    {
        eprintln!("dlock: releasing {lock:?}: {e}");
    }
    Ok(ran.code())
}

/// How a supervised command ended.
enum Ran {
    /// It exited with this code (128 + signal if a signal ended it).
    Exited(u8),
    /// It could not be started.
    NotStarted,
    /// What it ran under was lost: it was terminated.
    Lost,
}

impl Ran {
    /// dlock's exit code for it.
    fn code(&self) -> u8 {
        match self {
            Ran::Exited(code) => *code,
            Ran::NotStarted => exit::SPAWN,
            Ran::Lost => exit::LOST,
        }
    }
}

/// Runs `command` with `env` until it exits or `lost` fires (`what` is lost: SIGTERM, then
/// SIGKILL after `grace`); SIGINT and SIGTERM sent to dlock are passed on to it.
async fn supervise(
    command: &[String],
    env: &[(&str, String)],
    lost: &dlock::LostSignal,
    grace: Duration,
    what: &str,
) -> Ran {
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    for (key, value) in env {
        cmd.env(key, value);
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("dlock: cannot run {:?}: {e}", command[0]);
            return Ran::NotStarted;
        }
    };
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let signal = |sig: Signal| {
        if let Some(pid) = pid {
            let _ = kill(pid, sig);
        }
    };
    let mut interrupt =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(status) => Ran::Exited(exit_code(status)),
                    Err(_) => Ran::NotStarted,
                };
            }
            Some(reason) = lost.wait() => {
                eprintln!("dlock: {what} lost ({reason:?}); stopping the command");
                signal(Signal::SIGTERM);
                if tokio::time::timeout(grace, child.wait()).await.is_err() {
                    signal(Signal::SIGKILL);
                    let _ = child.wait().await;
                }
                return Ran::Lost;
            }
            Some(()) = recv(&mut interrupt) => signal(Signal::SIGINT),
            Some(()) = recv(&mut terminate) => signal(Signal::SIGTERM),
        }
    }
}

/// How `dlock elect` campaigns.
struct ElectOptions {
    lease: Duration,
    wait: Option<Duration>,
    grace: Duration,
    lock_delay: Option<Duration>,
    requeue: bool,
}

async fn elect(
    backend: &str,
    name: &str,
    value: &str,
    options: &ElectOptions,
    command: &[String],
) -> Result<u8, Error> {
    let mut client = Client::builder(backend);
    if let Some(delay) = options.lock_delay {
        client = client.lock_delay(delay);
    }
    let client = client.connect().await?;
    let mut election = client.election(name).lease(options.lease);
    if let Some(wait) = options.wait {
        election = election.wait(wait);
    }
    loop {
        let lead = match election.campaign(value).await {
            Ok(lead) => lead,
            Err(Error::WaitTimedOut) => {
                eprintln!(
                    "dlock: not leading {name:?} within {}",
                    humantime::format_duration(options.wait.unwrap_or_default())
                );
                return Ok(exit::NOT_ACQUIRED);
            }
            Err(e) => return Err(e),
        };
        let term = lead.term().to_string();
        eprintln!("dlock: leading {name:?} in term {term}");
        let env = [
            ("DLOCK_TERM", term.clone()),
            ("DLOCK_FENCING_TOKEN", term),
            ("DLOCK_ELECTION", name.to_owned()),
            ("DLOCK_LEADER_VALUE", value.to_owned()),
        ];
        let what = format!("leadership of {name:?}");
        let ran = supervise(command, &env, &lead.lost_signal(), options.grace, &what).await;
        match ran {
            Ran::Lost if options.requeue => continue,
            Ran::Lost => return Ok(exit::LOST),
            ran => {
                if let Err(e) = lead.resign().await {
                    eprintln!("dlock: resigning {name:?}: {e}");
                }
                return Ok(ran.code());
            }
        }
    }
}

async fn leader(backend: &str, name: &str, watch: bool, json: bool) -> Result<u8, Error> {
    use futures_util::StreamExt;
    let client = Client::connect(backend).await?;
    let election = client.election(name);
    let show = |leader: Option<dlock::Leader>| match (leader, json) {
        (Some(l), true) => println!(
            "{{\"election\":{},\"term\":{},\"value\":{}}}",
            json_string(name),
            l.term,
            json_string(&l.value)
        ),
        (None, true) => println!("{{\"election\":{},\"leader\":null}}", json_string(name)),
        (Some(l), false) => println!("term {}  {}", l.term, l.value),
        (None, false) => println!("none"),
    };
    if !watch {
        show(election.leader().await?);
        return Ok(0);
    }
    let mut changes = election.observe()?;
    while let Some(change) = changes.next().await {
        show(change?);
    }
    Err(Error::Closed)
}

async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => 128u8.saturating_add(u8::try_from(sig).unwrap_or(0)),
        (None, None) => 1,
    }
}

async fn status(backend: &str, name: &str, json: bool) -> Result<u8, Error> {
    let client = Client::connect(backend).await?;
    let s = client.status(name).await?;
    // Redlock: each node's own view too.
    let nodes = match client.node_status(name).await? {
        nodes if nodes.len() > 1 => nodes,
        _ => Vec::new(),
    };
    if json {
        let mut line = format!("{{\"lock\":{},{}", json_string(name), status_json(&s));
        if !nodes.is_empty() {
            let each: Vec<String> = nodes
                .iter()
                .map(|n| match n {
                    Ok(n) => format!("{{{}}}", status_json(n)),
                    Err(e) => format!("{{\"error\":{}}}", json_string(&e.to_string())),
                })
                .collect();
            line += &format!(",\"nodes\":[{}]", each.join(","));
        }
        println!("{line}}}");
        return Ok(0);
    }
    println!("lock     {name}");
    match &s.owner {
        Some(owner) => {
            println!("holder   {owner} (count {})", s.count);
            println!("token    {} (latest {})", s.fencing_token, s.latest_token);
            if let Some(ttl) = s.ttl {
                println!("lease    {:.1} s left", ttl.as_secs_f64());
            }
        }
        None => println!("holder   none (latest token {})", s.latest_token),
    }
    println!("waiters  {}", s.waiters.len());
    for w in &s.waiters {
        println!("         {w}");
    }
    for (i, node) in nodes.iter().enumerate() {
        match node {
            Ok(n) => println!(
                "node {i}   {} token {} latest {}{}",
                n.owner.as_deref().unwrap_or("free"),
                n.fencing_token,
                n.latest_token,
                n.ttl.map_or(String::new(), |t| format!(
                    " ({:.1} s left)",
                    t.as_secs_f64()
                ))
            ),
            Err(e) => println!("node {i}   unreachable: {e}"),
        }
    }
    Ok(0)
}

/// `status --watch`: one line per look, every `interval`, until interrupted. A look that fails
/// (the server restarting, say) prints the error and the watch goes on.
async fn watch_status(
    backend: &str,
    name: &str,
    json: bool,
    interval: Duration,
) -> Result<u8, Error> {
    let client = Client::connect(backend).await?;
    let started = std::time::Instant::now();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // One listener for the whole watch, so that an interrupt during a look is not missed.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let look = async {
            ticker.tick().await;
            let at = started.elapsed().as_secs_f64();
            match client.status(name).await {
                Ok(s) if json => format!("{{\"at_s\":{at:.3},{}}}", status_json(&s)),
                Ok(s) => watch_line(at, &s),
                Err(e) if json => {
                    format!(
                        "{{\"at_s\":{at:.3},\"error\":{}}}",
                        json_string(&e.to_string())
                    )
                }
                Err(e) => format!("{at:>8.1} s  unavailable: {e}"),
            }
        };
        tokio::select! {
            line = look => println!("{line}"),
            _ = &mut interrupted => return Ok(0),
        }
    }
}

/// One line of `status --watch`.
fn watch_line(at: f64, s: &dlock::LockStatus) -> String {
    let holder = match &s.owner {
        Some(owner) => format!(
            "held by {owner} (count {}) token {}",
            s.count, s.fencing_token
        ),
        None => format!("free (latest token {})", s.latest_token),
    };
    let ttl = s.ttl.map_or(String::new(), |t| {
        format!("  lease {:.1} s left", t.as_secs_f64())
    });
    format!("{at:>8.1} s  {holder}{ttl}  waiters {}", s.waiters.len())
}

/// A status as JSON fields (without braces): owner, count, tokens, lease left, waiters.
fn status_json(s: &dlock::LockStatus) -> String {
    let owner = s.owner.as_deref().map_or("null".to_owned(), json_string);
    let ttl = s
        .ttl
        .map_or("null".to_owned(), |t| t.as_millis().to_string());
    let waiters: Vec<String> = s.waiters.iter().map(|w| json_string(w)).collect();
    format!(
        "\"owner\":{owner},\"count\":{},\"fencing_token\":{},\"ttl_ms\":{ttl},\"latest_token\":{},\"waiters\":[{}]",
        s.count,
        s.fencing_token,
        s.latest_token,
        waiters.join(",")
    )
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
