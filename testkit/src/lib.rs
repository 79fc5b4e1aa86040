//! Real backend servers for tests: each starts its own process on a free loopback port in a
//! fresh temporary directory, and is stopped (and its directory removed) when dropped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod cluster;
mod mariadb;
mod postgres;
mod proxy;
mod zookeeper;

pub use cluster::RedisCluster;
pub use mariadb::MariadbServer;
pub use postgres::PostgresServer;
pub use proxy::TcpProxy;
pub use zookeeper::{ZkEnsemble, four_letter};

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
    /// Serves TLS only (with certificates made in `dir`).
    tls: bool,
    /// A program the server runs under (`valgrind` and its options), or none.
    under: Vec<String>,
}

impl RedisServer {
    /// Starts `redis-server` from `PATH` (scripts/setup installs it).
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts `redis-server` with extra configuration arguments (e.g. `["--requirepass", "x"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_under(&[], extra)
    }

    /// Starts `redis-server` under the program `under` names with its arguments (e.g.
    /// `["valgrind", "--tool=callgrind"]`: the bench counts the server's instructions), with
    /// extra configuration arguments. [`pid`](Self::pid) is then the program's process, which
    /// runs the server.
    pub fn start_under(under: &[&str], extra: &[&str]) -> Self {
        let dir = temp_dir("redis");
        let owned = |args: &[&str]| args.iter().map(|s| s.to_string()).collect();
        Self::launch(RedisServer {
            child: None,
            dir,
            port: 0,
            extra: owned(extra),
            tls: false,
            under: owned(under),
        })
    }

    /// Starts `redis-server` whose one user is `user` with `password` and every right (the
    /// default user is off): for tests of credentials in URLs.
    pub fn start_with_user(user: &str, password: &str) -> Self {
        let password = format!(">{password}");
        Self::start_with(&[
            "--user", user, "on", &password, "~*", "&*", "+@all", "--user", "default", "off",
        ])
    }

    /// Starts a redis-server that speaks only TLS, with a fresh CA and a server certificate
    /// for 127.0.0.1 made by the `openssl` command. `Err` says why that is not possible here
    /// (no openssl command).
    pub fn start_tls() -> Result<Self, String> {
        let dir = temp_dir("redis-tls");
        make_certificates(&dir)?;
        let file = |name: &str| dir.join(name).display().to_string();
        let extra = vec![
            "--tls-cert-file".into(),
            file("server.crt"),
            "--tls-key-file".into(),
            file("server.key"),
            "--tls-ca-cert-file".into(),
            file("ca.crt"),
            "--tls-auth-clients".into(),
            "no".into(),
        ];
        Ok(Self::launch(RedisServer {
            child: None,
            dir,
            port: 0,
            extra,
            tls: true,
            under: Vec::new(),
        }))
    }

    fn launch(mut server: RedisServer) -> Self {
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
        let port = self.port.to_string();
        // A TLS server listens on its TLS port only.
        let ports = if self.tls {
            ["--port", "0", "--tls-port", &port]
        } else {
            ["--port", &port, "--save", ""]
        };
        let mut command = match self.under.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg("redis-server");
                command
            }
            None => Command::new("redis-server"),
        };
        let child = command
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(ports)
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
            if self.ready() {
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

    /// True when the server answers PING (or asks for authentication, which also means it is
    /// up); for a TLS server, when it accepts connections.
    fn ready(&self) -> bool {
        if self.tls {
            return TcpStream::connect(("127.0.0.1", self.port)).is_ok();
        }
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

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:PORT`, or `rediss://…` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The PEM file of the CA that signed a TLS server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
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

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("a running server");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Kills the server and starts a new one on the same port and directory: empty, unless
    /// it was started to persist (`--appendonly yes`), when it reloads what it had written.
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

/// `redlock://127.0.0.1:P1,127.0.0.1:P2,…` over these servers, in this order.
pub fn redlock_url(nodes: &[RedisServer]) -> String {
    let hosts: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    format!("redlock://{}", hosts.join(","))
}

/// Whether certificates can be made here: `Err` says why not (no `openssl` command).
pub(crate) fn openssl_available() -> Result<(), String> {
    Command::new("openssl")
        .arg("version")
        .output()
        .map(drop)
        .map_err(|e| format!("the openssl command is not available: {e}"))
}

/// A CA and a server certificate for 127.0.0.1 signed by it, made with the `openssl` command.
pub(crate) fn make_certificates(dir: &Path) -> Result<(), String> {
    let openssl = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .map_err(|e| format!("the openssl command is not available: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .map_err(|e| e.to_string())?;
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=dlock test CA",
    ])?;
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ])?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ])
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The engine's WebAssembly component: `$DLOCK_WASM`, or `target/dlock.wasm` in the
/// workspace (`just wasm` builds it).
pub fn wasm_component() -> PathBuf {
    match std::env::var_os("DLOCK_WASM") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dlock.wasm"),
    }
}

/// SplitMix64: a small seeded generator that gives the same numbers on every platform, for
/// tests that must replay.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}
