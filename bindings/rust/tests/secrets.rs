//! A password in a backend URL never leaves the process in the clear: not in an error's
//! `Display` or `Debug`, not in a builder's or client's `Debug`, not in a tracing event or
//! span. Every error path a caller can reach is provoked with a known password in the URL.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::Error;
use dlock_testkit::{RedisServer, free_port};

mod common;
use common::{builder, connect};

const PASSWORD: &str = "Pa55-w0rd:s3cret@x";

/// Every tracing event and span the client emits, as text.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn assert_hidden(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD),
        "{what} shows the password: {text}"
    );
    // The part after the user name's colon, alone, must not show either.
    assert!(
        !text.contains("s3cret"),
        "{what} shows part of the password: {text}"
    );
}

fn assert_error_hidden(e: &Error) {
    assert_hidden("an error's Display", &e.to_string());
    assert_hidden("an error's Debug", &format!("{e:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_in_any_error_debug_or_log() {
    let log = Log::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer({
            let log = log.clone();
            move || log.clone()
        })
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let server = RedisServer::start_with_user("alice", PASSWORD);
    let port = server.port();
    let closed = free_port();
    let good = format!("redis://alice:{PASSWORD}@127.0.0.1:{port}");

    // Bad URLs of every scheme, unreachable servers, a wrong password: each fails, and says so
    // without the password.
    let failing = [
        format!("redis://alice:{PASSWORD}@"),
        format!("redis://alice:{PASSWORD}@127.0.0.1:99999"),
        format!("rediss://alice:{PASSWORD}@127.0.0.1:{closed}"),
        format!("redis://alice:{PASSWORD}@127.0.0.1:{closed}"),
        format!("redis://alice:wrong-{PASSWORD}@127.0.0.1:{port}"),
        format!("redis-cluster://alice:{PASSWORD}@127.0.0.1"),
        format!("redis-cluster://alice:{PASSWORD}@127.0.0.1:{closed}"),
        format!("redlock://alice:{PASSWORD}@127.0.0.1:{closed},127.0.0.1:{closed}"),
        format!(
            "redlock://alice:{PASSWORD}@127.0.0.1:{closed},127.0.0.2:{closed},127.0.0.3:{closed}"
        ),
        format!("zk://alice:{PASSWORD}@127.0.0.1"),
        format!("zk://alice:{PASSWORD}@127.0.0.1:{closed}?session_timeout_ms=1000"),
        format!("zk://alice:{PASSWORD}@127.0.0.1:{closed}/bad/"),
        format!("nope://alice:{PASSWORD}@127.0.0.1:{port}"),
        format!("alice:{PASSWORD}@127.0.0.1:{port}"),
    ];
    for url in &failing {
        assert_hidden("a builder's Debug", &format!("{:?}", builder(url)));
        let e = connect(url).await.expect_err(url);
        assert_error_hidden(&e);
    }

    // A working client: its Debug, a wait that times out, a lost lock, a misuse.
    let client = connect(&good).await.expect("alice connects");
    assert_hidden("a client's Debug", &format!("{client:?}"));
    let held = client.lock("secret").acquire().await.unwrap();
    let other = connect(&good).await.unwrap();
    let e = other
        .lock("secret")
        .wait(Duration::from_millis(50))
        .acquire()
        .await
        .unwrap_err();
    assert!(e.is_timeout());
    assert_error_hidden(&e);
    let e = client.lock("").acquire().await.unwrap_err();
    assert_error_hidden(&e);
    let e = client.fenced_write("r", 0, "v").await.unwrap_err();
    assert_error_hidden(&e);
    held.release().await.unwrap();
    // The server goes away under a held lock: renewals fail, the lock is lost.
    let held = client
        .lock("secret")
        .lease(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let mut server = server;
    server.stop();
    let reason = tokio::time::timeout(Duration::from_secs(30), held.lost())
        .await
        .expect("lost once the server is gone");
    assert_hidden("a lost reason", &format!("{reason:?}"));
    let e = held.release().await.unwrap_err();
    assert_error_hidden(&e);
    let e = client.status("secret").await.unwrap_err();
    assert_error_hidden(&e);

    let log = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    assert!(log.contains("acquire"), "the log was recorded: {log}");
    // Spans around acquire, hold and release carry the lock's name and fencing token.
    assert!(log.contains("acquire{lock=secret fencing_token="), "{log}");
    let hold = |l: &&str| l.starts_with("20") && l.contains(" hold{lock=secret fencing_token=");
    let closes = |l: &&str| l.contains(": close time.busy=");
    assert!(
        log.lines()
            .filter(hold)
            .any(|l| l.contains("}:release:") && closes(&l)),
        "a release inside the hold: {log}"
    );
    assert!(
        log.lines()
            .filter(hold)
            .any(|l| !l.contains(":release") && closes(&l)),
        "the hold's own close, with its time: {log}"
    );
    assert_hidden("the tracing log", &log);
}
