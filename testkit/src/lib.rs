//! Real backend servers for tests: each starts its own process on a free loopback port in a
//! fresh temporary directory, and is stopped (and its directory removed) when dropped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A fresh directory under the system temp dir, unique within this process and across runs.
fn temp_dir(kind: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("dlock-{kind}-{}-{n}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A port nobody listens on right now (the OS picks it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A redis-server of our own.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts `redis-server` from `PATH` (scripts/setup installs it).
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts `redis-server` with extra configuration arguments (e.g. `["--requirepass", "x"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = temp_dir("redis");
        let mut server = RedisServer {
            child: None,
            dir,
            port: 0,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "redis-server did not start; see {}",
            server.dir.join("redis.log").display()
        );
    }

    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &self.port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/setup installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.answers_ping() {
                return true;
            }
            if self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some())
            {
                self.child = None;
                return false; // e.g. the port was taken in the meantime
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop();
        false
    }

    /// True when the server answers PING (or asks for authentication, which also means it is up).
    fn answers_ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 64];
        matches!(s.read(&mut buf), Ok(n) if n > 0 && (buf.starts_with(b"+PONG") || buf.starts_with(b"-NOAUTH")))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the server (SIGKILL): all data is gone, clients see their connections drop.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server and starts a new one, empty, on the same port.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
