//! The `dlock` binary as a user runs it: several OS processes against a real redis-server
//! or a real ZooKeeper.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dlock_core::redis::LockKeys;
use dlock_testkit::{MariadbServer, PostgresServer, RedisServer, ZkEnsemble};

fn dlock() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlock"));
    cmd.env_remove("DLOCK_BACKEND");
    cmd
}

/// `dlock ARGS…` started with its standard output piped: the child and its lines, read as
/// they come.
fn spawn_reading(args: &[&str]) -> (std::process::Child, impl FnMut() -> String + use<>) {
    use std::io::{BufRead, BufReader};
    let mut child = dlock().args(args).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, move || lines.next().expect("a line").expect("utf-8"))
}

fn run(url: &str, extra: &[&str], command: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["run", "--backend", url, "--lock", "job"])
        .args(extra)
        .arg("--")
        .args(command);
    cmd
}

fn redis_cli(server: &RedisServer, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &server.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `dlock status job --json`. A server starved of CPU (a loaded CI machine, three clients
/// busy on it) may not answer within the request timeout: that read is asked again, up to
/// five times; any other failure fails the test.
fn status_json(url: &str) -> String {
    for _ in 0..5 {
        let out = dlock()
            .args(["status", "--backend", url, "job", "--json"])
            .output()
            .expect("status");
        if out.status.success() {
            return String::from_utf8(out.stdout).expect("utf-8");
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no reply within the request timeout"),
            "{out:?}"
        );
    }
    panic!("dlock status timed out five times on {url}");
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Three `dlock run` processes on one backend: each holder's whole run is uninterrupted and
/// sees a larger fencing token than the one before.
fn three_processes_never_overlap(url: &str, dir: &Path) {
    let log = dir.join("log");
    let script = format!(
        "for i in 1 2 3; do echo \"start $DLOCK_FENCING_TOKEN\" >> {log}; sleep 0.05; echo \"end $DLOCK_FENCING_TOKEN\" >> {log}; done",
        log = log.display()
    );
    let children: Vec<_> = (0..3)
        .map(|_| {
            run(url, &["--lease", "2s"], &["sh", "-c", &script])
                .spawn()
                .expect("spawn dlock run")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().expect("wait").success());
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 18, "{text}");
    let mut last = 0;
    for chunk in lines.chunks(6) {
        // One holder's whole run, uninterrupted, with one token.
        let token: u64 = chunk[0]
            .strip_prefix("start ")
            .expect("start")
            .parse()
            .expect("token");
        for (i, line) in chunk.iter().enumerate() {
            let expected = if i % 2 == 0 {
                format!("start {token}")
            } else {
                format!("end {token}")
            };
            assert_eq!(*line, expected, "interleaved:\n{text}");
        }
        assert!(token > last, "tokens not increasing:\n{text}");
        last = token;
    }
}

#[test]
fn three_processes_never_overlap_and_see_increasing_tokens() {
    let server = RedisServer::start();
    three_processes_never_overlap(&server.url(), server.dir());
}

#[test]
fn three_processes_never_overlap_on_zookeeper() {
    let zk = ZkEnsemble::start(1);
    let dir = std::env::temp_dir().join(format!("dlock-cli-zk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    three_processes_never_overlap(&zk.url(), &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_and_demo_on_zookeeper() {
    let zk = ZkEnsemble::start(1);
    let url = zk.url();
    let mut holder = run(&url, &[], &["sleep", "30"]).spawn().unwrap();
    wait_until("the lock is held", || {
        status_json(&url).contains("\"count\":1")
    });
    let mut waiter = run(&url, &[], &["true"]).spawn().unwrap();
    wait_until("one waiter queues", || {
        status_json(&url).contains("\"waiters\":[\"")
    });
    let json = status_json(&url);
    assert!(fencing_token(&json) > 0, "{json}");
    assert!(json.contains("\"ttl_ms\":null"), "{json}");
    let _ = holder.kill();
    let _ = holder.wait();
    // The killed holder's session expires; then the waiter runs its command and exits.
    assert!(waiter.wait().unwrap().success());

    let out = dlock()
        .args([
            "demo",
            "--backend",
            &url,
            "--workers",
            "3",
            "--seconds",
            "1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(": ok") && !text.contains("FAILED"), "{text}");
}

#[test]
fn run_passes_the_exit_code_and_the_environment() {
    let server = RedisServer::start();
    let out = run(
        &server.url(),
        &[],
        &["sh", "-c", "echo $DLOCK_LOCK $DLOCK_FENCING_TOKEN; exit 7"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (lock, token) = stdout.trim().split_once(' ').expect("two words");
    assert_eq!(lock, "job");
    assert!(token.parse::<u64>().unwrap() > 0, "{stdout}");
    // Released afterwards.
    assert!(status_json(&server.url()).contains("\"owner\":null"));
}

#[test]
fn run_holds_several_locks_as_one_and_takes_non_fair_locks() {
    let server = RedisServer::start();
    let url = server.url();
    let out = dlock()
        .args([
            "run",
            "--backend",
            &url,
            "--lock",
            "job",
            "--lock",
            "b/2",
            "--lock",
            "job",
        ])
        .args(["--", "sh", "-c"])
        .arg("echo \"$DLOCK_FENCING_TOKENS\"; echo \"${DLOCK_FENCING_TOKEN:-none}\"")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    // Every lock's token, in canonical order; no single token for several locks.
    let tokens = lines.next().expect("the tokens");
    let rest = tokens
        .strip_prefix("{\"b/2\":")
        .and_then(|t| t.strip_suffix('}'))
        .expect(tokens);
    let (b, job) = rest.split_once(",\"job\":").expect(tokens);
    assert!(b.parse::<u64>().unwrap() > 0 && job.parse::<u64>().unwrap() > 0);
    assert_eq!(lines.next(), Some("none"));
    assert!(status_json(&url).contains("\"owner\":null"), "released");

    let out = run(
        &url,
        &["--non-fair"],
        &["sh", "-c", "echo $DLOCK_FENCING_TOKENS"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("{\"job\":"));
    let out = run(&url, &["--lock", "other", "--non-fair"], &["true"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "a non-fair multi-lock is refused"
    );
}

#[test]
fn run_with_permits_lets_that_many_commands_run_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    // Two of the semaphore's two permits held by sleeping commands; a third waits no more
    // than 300 ms and does not run.
    let sleepers: Vec<_> = (0..2)
        .map(|_| {
            run(&url, &["--permits", "2"], &["sleep", "30"])
                .spawn()
                .unwrap()
        })
        .collect();
    let marker = server.dir().join("ran");
    wait_until("both permits are held", || {
        let out = run(&url, &["--permits", "2", "--wait", "300ms"], &["true"])
            .output()
            .unwrap();
        out.status.code() == Some(75)
    });
    let out = run(
        &url,
        &["--permits", "2", "--wait", "300ms"],
        &["touch", marker.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(!marker.exists(), "the third command did not run");
    // The lock "job" is another thing: it is free.
    let out = run(&url, &["--wait", "1s"], &["true"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // SIGTERM is passed on to each sleep, and its permit released.
    for mut s in sleepers {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(s.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        assert_eq!(s.wait().unwrap().code(), Some(128 + 15));
    }
    let out = run(&url, &["--permits", "2", "--lock", "other"], &["true"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "--permits with two locks is refused"
    );
}

#[test]
fn run_with_rw_lets_readers_run_together_and_a_writer_alone() {
    let server = RedisServer::start();
    let url = server.url();
    let reader = run(&url, &["--rw", "read"], &["sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("the read hold is taken", || {
        run(&url, &["--rw", "write", "--wait", "100ms"], &["true"])
            .output()
            .unwrap()
            .status
            .code()
            == Some(75)
    });
    let out = run(&url, &["--rw", "read", "--wait", "5s"], &["true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "a second reader runs beside the first: {out:?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(reader.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut reader = reader;
    assert_eq!(reader.wait().unwrap().code(), Some(128 + 15));
    let out = run(&url, &["--rw", "write", "--wait", "5s"], &["true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the writer runs once the reader is gone: {out:?}"
    );
    let out = run(&url, &["--rw", "read", "--permits", "2"], &["true"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "--rw with --permits is refused"
    );
}

#[test]
fn run_gives_up_after_wait_without_running_the_command() {
    let server = RedisServer::start();
    let mut holder = run(&server.url(), &[], &["sleep", "3"]).spawn().unwrap();
    wait_until("the lock is held", || {
        status_json(&server.url()).contains("\"count\":1")
    });
    let marker = server.dir().join("ran");
    let out = run(
        &server.url(),
        &["--wait", "200ms"],
        &["touch", marker.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(!marker.exists(), "the command ran without the lock");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_lost_lock_terminates_the_command() {
    let server = RedisServer::start();
    let started = Instant::now();
    let mut child = run(
        &server.url(),
        &["--lease", "600ms", "--grace", "1s"],
        &["sleep", "30"],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_until("the lock is held", || {
        status_json(&server.url()).contains("\"count\":1")
    });
    redis_cli(&server, &["DEL", LockKeys::new("job").lock()]);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(74));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the command ran on"
    );
}

#[test]
fn a_killed_holder_frees_the_lock_after_its_lease() {
    let server = RedisServer::start();
    let mut holder = run(&server.url(), &["--lease", "1s"], &["sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("the lock is held", || {
        status_json(&server.url()).contains("\"count\":1")
    });
    let killed = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = holder.wait();
    let out = run(&server.url(), &["--wait", "10s"], &["true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let took = killed.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "acquired after {took:?}, before the dead holder's lease ended"
    );
}

#[test]
fn status_shows_holder_and_waiters() {
    let server = RedisServer::start();
    let mut holder = run(&server.url(), &[], &["sleep", "30"]).spawn().unwrap();
    wait_until("the lock is held", || {
        status_json(&server.url()).contains("\"count\":1")
    });
    let mut waiter = run(&server.url(), &[], &["true"]).spawn().unwrap();
    wait_until("one waiter queues", || {
        status_json(&server.url()).contains("\"waiters\":[\"")
    });
    let json = status_json(&server.url());
    assert!(json.starts_with("{\"lock\":\"job\",\"owner\":\""), "{json}");
    assert!(fencing_token(&json) > 0, "{json}");
    let text = dlock()
        .args(["status", "--backend", &server.url(), "job"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("holder") && text.contains("waiters  1"),
        "{text}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = waiter.kill();
    let _ = waiter.wait();
}

#[test]
fn runs_exclude_and_status_shows_every_node_on_redlock() {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = dlock_testkit::redlock_url(&nodes);
    three_processes_never_overlap(&url, nodes[0].dir());

    let mut holder = run(&url, &[], &["sleep", "30"]).spawn().unwrap();
    wait_until("the lock is held", || {
        status_json(&url).contains("\"count\":1")
    });
    nodes[2].stop();
    let json = status_json(&url);
    assert!(json.starts_with("{\"lock\":\"job\",\"owner\":\""), "{json}");
    assert!(fencing_token(&json) > 0, "{json}");
    assert!(
        json.contains("\"nodes\":[{\"owner\":\"") && json.contains("{\"error\":"),
        "{json}"
    );
    let text = dlock()
        .args(["status", "--backend", &url, "job"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("holder") && text.contains("node 1") && text.contains("node 2   unreachable"),
        "{text}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn demo_runs_without_a_server_and_checks_itself() {
    let out = dlock()
        .args(["demo", "--workers", "3", "--seconds", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("final counter") && text.contains(": ok"),
        "{text}"
    );
    assert!(!text.contains("FAILED"), "{text}");
}

#[test]
fn bad_arguments_get_clear_errors() {
    let check = |args: &[&str], code: i32, says: &str| {
        let Output { status, stderr, .. } = dlock().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&stderr);
        assert_eq!(status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    check(
        &[
            "run",
            "--backend",
            "memory://",
            "--lock",
            "x",
            "--lease",
            "ten",
            "--",
            "true",
        ],
        2,
        "not a duration",
    );
    check(
        &["run", "--backend", "http://x", "--lock", "x", "--", "true"],
        64,
        "unknown scheme",
    );
    check(
        &["run", "--backend", "memory://", "--lock", "", "--", "true"],
        64,
        "empty",
    );
    check(
        &[
            "run",
            "--backend",
            "memory://",
            "--lock",
            "x",
            "--lease",
            "1ms",
            "--",
            "true",
        ],
        64,
        "lease",
    );
    check(
        &[
            "run",
            "--backend",
            "redis://127.0.0.1:1",
            "--lock",
            "x",
            "--",
            "true",
        ],
        69,
        "cannot connect",
    );
    check(&["run", "--lock", "x", "--", "true"], 2, "--backend");
    check(
        &[
            "run",
            "--backend",
            "memory://",
            "--lock",
            "x",
            "--lock-delay",
            "1ms",
            "--",
            "true",
        ],
        64,
        "lease",
    );
    let delayed = dlock()
        .args([
            "run",
            "--backend",
            "memory://",
            "--lock",
            "x",
            "--lock-delay",
            "2s",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(delayed.status.success(), "{delayed:?}");
    for sub in ["run", "status", "demo"] {
        let out = dlock().args([sub, "--help"]).output().unwrap();
        assert!(
            out.status.success() && !out.stdout.is_empty(),
            "{sub} --help"
        );
    }
    assert!(Path::new(env!("CARGO_BIN_EXE_dlock")).exists());
}

#[test]
fn tls_with_a_verified_server_certificate() {
    let server = match RedisServer::start_tls() {
        Ok(server) => server,
        Err(why) => return println!("skipped: no TLS redis-server here: {why}"),
    };
    let url = server.url();
    assert!(url.starts_with("rediss://"));
    let mut trusted = dlock();
    trusted
        .env("SSL_CERT_FILE", server.ca_file())
        .env_remove("SSL_CERT_DIR");
    let out = trusted
        .args([
            "run",
            "--backend",
            &url,
            "--lock",
            "tls",
            "--",
            "sh",
            "-c",
            "echo $DLOCK_FENCING_TOKEN",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8_lossy(&out.stdout);
    assert!(token.trim().parse::<u64>().unwrap() > 0, "{token}");
    // Without the CA the certificate is refused: TLS is verified, not just encrypted.
    let out = dlock()
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .args(["run", "--backend", &url, "--lock", "tls", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("certificate"),
        "refused for another reason: {stderr}"
    );
}

/// The `fencing_token` number in `dlock status --json` output.
fn fencing_token(json: &str) -> u64 {
    let (_, rest) = json
        .split_once("\"fencing_token\":")
        .expect("a fencing_token field");
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().expect("a number")
}

#[test]
fn no_password_in_any_output_and_help_lists_every_backend() {
    const PASSWORD: &str = "s3cret-pw";
    let server = RedisServer::start_with_user("alice", PASSWORD);
    let port = server.port();
    let closed = dlock_testkit::free_port();
    let printed = |out: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let cases = [
        (format!("redis://alice:{PASSWORD}@127.0.0.1:{closed}"), 69),
        (
            format!("redis://alice:wrong{PASSWORD}@127.0.0.1:{port}"),
            69,
        ),
        (format!("redis://alice:{PASSWORD}@"), 64),
        (
            format!("redlock://alice:{PASSWORD}@127.0.0.1:{closed},127.0.0.1:{closed}"),
            64,
        ),
        (format!("zk://alice:{PASSWORD}@127.0.0.1"), 64),
        (format!("nope://alice:{PASSWORD}@127.0.0.1:{port}"), 64),
        (format!("alice:{PASSWORD}@127.0.0.1:{port}"), 64),
    ];
    for (url, code) in &cases {
        for out in [
            run(url, &[], &["true"]).output().unwrap(),
            dlock()
                .args(["status", "--backend", url, "job"])
                .output()
                .unwrap(),
        ] {
            assert_eq!(out.status.code(), Some(*code), "{url}: {out:?}");
            let text = printed(&out);
            assert!(
                !text.contains(PASSWORD) && text.contains("dlock:"),
                "{text}"
            );
        }
    }
    // A held lock with --wait 0: the timeout message, still without the password.
    let url = format!("redis://alice:{PASSWORD}@127.0.0.1:{port}");
    let mut holder = run(&url, &[], &["sleep", "30"]).spawn().unwrap();
    wait_until("the holder holds", || {
        let out = dlock()
            .args(["status", "--backend", &url, "job", "--json"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("\"count\":1")
    });
    let out = run(&url, &["--wait", "0s"], &["true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let out = dlock()
        .args(["status", "--backend", &url, "job"])
        .output()
        .unwrap();
    assert!(!printed(&out).contains(PASSWORD), "{}", printed(&out));
    holder.kill().unwrap();
    holder.wait().unwrap();

    let help = dlock().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for scheme in dlock::BACKENDS {
        assert!(
            help.contains(scheme.form),
            "{} missing from --help:\n{help}",
            scheme.form
        );
    }
    let out = run(&format!("nope://127.0.0.1:{port}"), &[], &["true"])
        .output()
        .unwrap();
    for scheme in dlock::BACKENDS {
        assert!(
            printed(&out).contains(&format!("{}://", scheme.name)),
            "{}",
            printed(&out)
        );
    }
}

/// Three `dlock run` processes never overlap and see growing tokens; a held lock with
/// `--wait 0` does not run the command; `dlock status` reads the row (`query` runs SQL).
fn sql_run_and_status(url: &str, dir: &Path, query: impl Fn(&str) -> String) {
    three_processes_never_overlap(url, dir);
    let mut holder = run(url, &[], &["sleep", "60"]).spawn().unwrap();
    wait_until("the lock is held", || {
        status_json(url).contains("\"count\":1")
    });
    let marker = dir.join("ran");
    let out = run(
        url,
        &["--wait", "0"],
        &["touch", &marker.display().to_string()],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(!marker.exists(), "the command ran without the lock");
    let token = fencing_token(&status_json(url));
    assert_eq!(
        query("SELECT fence FROM dlock_lock WHERE name = 'job'"),
        token.to_string()
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    holder.wait().unwrap();
    assert!(
        status_json(url).contains("\"owner\":null"),
        "released on SIGTERM"
    );
}

#[test]
fn three_processes_never_overlap_on_postgres_and_wait_0_does_not_run() {
    let pg = PostgresServer::start();
    sql_run_and_status(&pg.url(), pg.dir(), |sql| pg.psql(sql));
}

#[test]
fn three_processes_never_overlap_on_mariadb_and_wait_0_does_not_run() {
    let db = MariadbServer::start();
    sql_run_and_status(&db.url(), db.dir(), |sql| db.sql(sql));
}

/// `dlock schema postgres` prints DDL that a migration tool applies as it is; a client then
/// finds the schema in place and needs no right to create anything.
#[test]
fn the_printed_schema_is_what_a_client_uses() {
    let pg = PostgresServer::start();
    let out = dlock()
        .args(["schema", "postgres", "--table-prefix", "app_"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let ddl = String::from_utf8(out.stdout).unwrap();
    pg.psql(&ddl);
    pg.psql(
        "CREATE ROLE locker LOGIN; GRANT SELECT, INSERT, UPDATE, DELETE ON app_lock, app_holder, app_waiter TO locker; GRANT USAGE ON SEQUENCE app_fence TO locker; REVOKE CREATE ON SCHEMA public FROM PUBLIC",
    );
    let url = format!(
        "postgres://locker@127.0.0.1:{}/postgres?table_prefix=app_",
        pg.port()
    );
    for options in [&["--wait", "10s"][..], &["--permits", "2"]] {
        let out = run(&url, options, &["true"]).output().unwrap();
        assert!(out.status.success(), "{options:?}: {out:?}");
    }
    assert_eq!(
        pg.psql("SELECT count(*) FROM app_lock WHERE name = 'job' AND owner IS NULL"),
        "2",
        "the lock and the semaphore, both free"
    );
    let out = dlock().args(["schema", "oracle"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}

/// `dlock schema redis` prints the function library as `FUNCTION LOAD` takes it; a user granted
/// `fcall` but not `function|load` then runs its locks by FCALL of what the administrator
/// loaded.
#[test]
fn the_printed_redis_library_is_what_a_client_calls() {
    let rules = dlock_core::redis::acl_rules().replace(" +function|load", "");
    let mut args = vec!["--user", "locker", "on", ">pw"];
    args.extend(rules.split(' '));
    let server = RedisServer::start_with(&args);
    let out = dlock().args(["schema", "redis"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut load = Command::new("redis-cli")
        .args(["-p", &server.port().to_string(), "-x", "FUNCTION", "LOAD"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    load.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let loaded = load.wait_with_output().unwrap();
    let name = dlock_core::redis::library().name;
    assert_eq!(String::from_utf8_lossy(&loaded.stdout).trim(), name);
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    let out = run(&url, &["--wait", "10s"], &["true"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stats = redis_cli(&server, &["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_fcall:"), "{stats}");
    assert!(!stats.contains("cmdstat_evalsha:"), "{stats}");
}

/// `dlock schema mysql` is a script the mariadb client runs as it is (`DELIMITER`); a user with
/// only the rights to use the tables and run the procedures then locks.
#[test]
fn the_printed_mysql_schema_is_what_a_client_uses() {
    let db = MariadbServer::start();
    let out = dlock()
        .args(["schema", "mariadb", "--table-prefix", "app_"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut client = Command::new("mariadb")
        .args(["--no-defaults", "-h", "127.0.0.1", "-u", "root", "dlock"])
        .arg(format!("-P{}", db.port()))
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    client.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    assert!(client.wait().unwrap().success());
    db.sql(
        "CREATE USER locker@'%'; GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON dlock.* TO locker@'%'",
    );
    let url = format!(
        "mysql://locker@127.0.0.1:{}/dlock?table_prefix=app_",
        db.port()
    );
    for options in [&["--wait", "10s"][..], &["--permits", "2"]] {
        let out = run(&url, options, &["true"]).output().unwrap();
        assert!(out.status.success(), "{options:?}: {out:?}");
    }
    assert_eq!(
        db.sql("SELECT count(*) FROM app_lock WHERE name = 'job' AND owner IS NULL"),
        "2",
        "the lock and the semaphore, both free"
    );
}

/// Waits up to 60 s for `f`, polling: for what a loaded machine may take seconds to do.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lines `dlock elect` commands appended to `log`: `<term> <value>` each.
fn leaders(log: &Path) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|line| {
            let (term, value) = line.split_once(' ').expect("term value");
            (term.parse().expect("term"), value.to_owned())
        })
        .collect()
}

/// Three `dlock elect` processes: exactly one runs its command while the others wait; the
/// leader killed with SIGKILL (with its command: one process group) is followed by another
/// with a larger term; `dlock leader` shows each term, once and as it changes.
fn three_candidates_one_leader(url: &str, dir: &Path) {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    let log = dir.join("leaders");
    let script = format!(
        "echo \"$DLOCK_TERM $DLOCK_LEADER_VALUE\" >> {}; exec sleep 300",
        log.display()
    );
    let mut watch = dlock()
        .args(["leader", "--backend", url, "sched", "--watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, seen) = std::sync::mpsc::channel::<String>();
    let out = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    assert_eq!(seen.recv_timeout(Duration::from_secs(60)).unwrap(), "none");
    let mut candidates: Vec<_> = (0..3)
        .map(|i| {
            let mut cmd = dlock();
            cmd.args([
                "elect",
                "--backend",
                url,
                "--name",
                "sched",
                "--lease",
                "2s",
            ])
            .args(["--value", &format!("p{i}"), "--", "sh", "-c", &script])
            .process_group(0);
            cmd.spawn().unwrap()
        })
        .collect();
    eventually("one leads and two wait", || {
        leaders(&log).len() == 1 && status_waiters(url, "sched") == 2
    });
    let [(term, value)] = &leaders(&log)[..] else {
        unreachable!()
    };
    let once = dlock()
        .args(["leader", "--backend", url, "sched"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&once.stdout).trim(),
        format!("term {term}  {value}")
    );
    let leading: usize = value.trim_start_matches('p').parse().unwrap();
    let pgid = nix::unistd::Pid::from_raw(-(candidates[leading].id() as i32));
    let killed = Instant::now();
    nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL).unwrap();
    let _ = candidates[leading].wait();
    eventually("another leads", || leaders(&log).len() == 2);
    eprintln!("failover on {url}: {:?} after SIGKILL", killed.elapsed());
    let (next, next_value) = leaders(&log)[1].clone();
    assert!(next > *term, "terms grow: {term} then {next}");
    assert_ne!(next_value, *value);
    // The watcher saw the first leader, maybe the lock free, then the second.
    let mut watched = Vec::new();
    while !watched.contains(&format!("term {next}  {next_value}")) {
        watched.push(seen.recv_timeout(Duration::from_secs(60)).unwrap());
    }
    assert_eq!(watched[0], format!("term {term}  {value}"), "{watched:?}");
    assert!(
        watched[1..watched.len() - 1].iter().all(|l| l == "none"),
        "{watched:?}"
    );
    for (i, mut child) in candidates.into_iter().enumerate() {
        if i != leading {
            let pgid = nix::unistd::Pid::from_raw(-(child.id() as i32));
            let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
}

/// Waiters of lock `name` as `dlock status --json` shows them (0 if the read fails).
fn status_waiters(url: &str, name: &str) -> usize {
    let out = dlock()
        .args(["status", "--backend", url, name, "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("\"waiters\":[").nth(1).map_or(0, |w| {
        w.split(']').next().unwrap_or("").matches('"').count() / 2
    })
}

#[test]
fn three_elect_processes_one_leader_and_a_failover_on_redis() {
    let server = RedisServer::start();
    three_candidates_one_leader(&server.url(), server.dir());
}

#[test]
fn three_elect_processes_one_leader_and_a_failover_on_zookeeper() {
    let zk = ZkEnsemble::start(1);
    let dir = std::env::temp_dir().join(format!("dlock-cli-elect-zk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The session is the lease: a killed leader's node goes when its session expires.
    let url = format!("{}?session_timeout_ms=2000", zk.url());
    three_candidates_one_leader(&url, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn three_elect_processes_one_leader_and_a_failover_on_postgres() {
    let db = PostgresServer::start();
    three_candidates_one_leader(&db.url(), db.dir());
}

#[test]
fn three_elect_processes_one_leader_and_a_failover_on_mariadb() {
    let db = MariadbServer::start();
    three_candidates_one_leader(&db.url(), db.dir());
}

#[test]
fn elect_runs_the_command_and_resigns_with_its_exit_code() {
    let server = RedisServer::start();
    let url = server.url();
    let out = dlock()
        .args(["elect", "--backend", &url, "--name", "e", "--value", "me"])
        .args([
            "--",
            "sh",
            "-c",
            "echo $DLOCK_ELECTION $DLOCK_LEADER_VALUE $DLOCK_TERM; exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.starts_with("e me "), "{printed}");
    let json = dlock()
        .args(["leader", "--backend", &url, "e", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&json.stdout).trim(),
        "{\"election\":\"e\",\"leader\":null}",
        "resigned on exit"
    );
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let refused = dlock()
        .args(["elect", "--backend", &dlock_testkit::redlock_url(&nodes)])
        .args(["--name", "e", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(64), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Redlock offers no elections"),
        "{refused:?}"
    );
}

#[test]
fn status_watch_prints_a_line_per_look_until_interrupted() {
    let server = RedisServer::start();
    let url = server.url();
    let (mut watch, mut next) = spawn_reading(&[
        "status",
        "--backend",
        &url,
        "job",
        "--watch",
        "--interval",
        "50ms",
    ]);
    assert!(next().contains("free (latest token 0)  waiters 0"));
    let mut holder = run(&url, &[], &["sleep", "30"]).spawn().unwrap();
    // Each look prints a line; the holder shows once its acquire is through.
    let held = std::iter::repeat_with(&mut next)
        .find(|l| l.contains("held by"))
        .unwrap();
    assert!(
        held.contains("(count 1) token ") && held.contains("lease "),
        "{held}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert!(watch.wait().unwrap().success(), "interrupted, it exits 0");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// `GET` of `path` from `addr`: the body of a 200 answer.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("the demo serves");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    body.to_owned()
}

#[test]
fn a_demo_serves_its_stats_to_dlock_stats_and_prometheus() {
    let (mut demo, next) = spawn_reading(&[
        "demo",
        "--workers",
        "3",
        "--seconds",
        "600",
        "--serve",
        "127.0.0.1:0",
    ]);
    let addr = std::iter::repeat_with(next)
        .find_map(|l| {
            l.split("dlock stats --from ")
                .nth(1)
                .map(|a| a.trim_end_matches(')').to_owned())
        })
        .unwrap();
    // Until the workers' first acquire is counted (an event, polled).
    while !http_get(&addr, "/stats").contains("demo-counter") {
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = dlock().args(["stats", "--from", &addr]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(
        table.lines().next().unwrap().starts_with("lock "),
        "{table}"
    );
    assert!(
        table.lines().nth(1).unwrap().starts_with("demo-counter "),
        "{table}"
    );

    let json = dlock()
        .args(["stats", "--from", &addr, "--json"])
        .output()
        .unwrap();
    let json = String::from_utf8_lossy(&json.stdout);
    assert!(
        json.starts_with("{\"locks\":[{") && json.contains("\"name\":\"demo-counter\""),
        "{json}"
    );

    // The Prometheus text: every family announced, every sample `name{labels} value`, and the
    // counts a snapshot of the same processes: acquisitions only grow.
    let acquired = |text: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with("dlock_acquired_total{"))
            .unwrap();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let first = http_get(&addr, "/metrics");
    for line in first.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect(line);
        assert!(value.parse::<f64>().is_ok(), "{line}");
        assert!(
            series.contains("{name=\"demo-counter\",kind=\"lock\""),
            "{line}"
        );
    }
    for family in [
        "dlock_acquired_total counter",
        "dlock_lost_total counter",
        "dlock_held gauge",
        "dlock_wait_seconds histogram",
    ] {
        assert_eq!(
            first.matches(&format!("# TYPE {family}\n")).count(),
            1,
            "{family}"
        );
    }
    assert!(
        first
            .contains("dlock_wait_seconds_bucket{name=\"demo-counter\",kind=\"lock\",le=\"+Inf\"}")
    );
    let mut later = http_get(&addr, "/metrics");
    while acquired(&later) <= acquired(&first) {
        std::thread::sleep(Duration::from_millis(10));
        later = http_get(&addr, "/metrics");
    }
    let _ = demo.kill();
    let _ = demo.wait();

    // An address nothing answers: exit 69 naming it, without a password typed into it.
    let out = dlock()
        .args(["stats", "--from", "ops:hunter2@127.0.0.1:1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("ops:***@127.0.0.1:1") && !err.contains("hunter2"),
        "{err}"
    );
}
