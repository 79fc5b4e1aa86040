//! A MariaDB server of the test's own: `mariadb-install-db` and `mariadbd` from Debian's
//! package, a fresh temporary directory, a free loopback port, stopped by pid.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, temp_dir};

/// A running MariaDB server with a database `dlock`; stopped (and its directory removed) when
/// dropped.
#[derive(Debug)]
pub struct MariadbServer {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    /// Speaks only TLS (`require_secure_transport`), with a certificate for 127.0.0.1.
    tls: bool,
}

impl MariadbServer {
    /// Copies a fresh data directory (root may log in without a password over TCP), starts
    /// the server and creates the database `dlock`.
    pub fn start() -> Self {
        Self::launch(false)
    }

    /// A server that accepts TLS connections only, with a fresh CA ([`Self::ca_file`]) and a
    /// server certificate for 127.0.0.1 made by the `openssl` command. `Err` says why that is
    /// not possible here (no openssl command).
    pub fn start_tls() -> Result<Self, String> {
        crate::openssl_available()?;
        Ok(Self::launch(true))
    }

    /// The CA that signed a TLS server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    fn launch(tls: bool) -> Self {
        let dir = temp_dir("mariadb");
        if tls {
            crate::make_certificates(&dir).expect("certificates");
        }
        let status = Command::new("cp")
            .arg("-a")
            .arg(template().join("data"))
            .arg(&dir)
            .status()
            .expect("cp");
        assert!(
            status.success(),
            "copy of the MariaDB data directory failed"
        );
        let mut server = MariadbServer {
            dir,
            port: 0,
            child: None,
            tls,
        };
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                server.sql("CREATE DATABASE dlock");
                return server;
            }
        }
        panic!(
            "mariadbd did not start; see {}",
            server.dir.join("mariadb.log").display()
        );
    }

    fn spawn(&mut self) -> bool {
        let file = |name: &str| self.dir.join(name).display().to_string();
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", file("data")))
            .arg(format!("--socket={}", file("mariadb.sock")))
            .arg(format!("--pid-file={}", file("mariadb.pid")))
            .arg(format!("--log-error={}", file("mariadb.log")))
            // Its temporary files in its own directory, not /tmp with every other server's.
            .arg(format!("--tmpdir={}", self.dir.display()))
            .arg(format!("--port={}", self.port))
            .args([
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=32M",
                "--max-connections=500",
                // A commit reaches the OS, not the disk, as PostgreSQL's tests run with
                // fsync=off: a killed server keeps every commit; a test machine's disk does
                // not set the pace.
                "--innodb-flush-log-at-trx-commit=2",
                LOG_FILE_SIZE,
            ])
            .args(
                self.tls
                    .then(|| {
                        [
                            format!("--ssl-ca={}", file("ca.crt")),
                            format!("--ssl-cert={}", file("server.crt")),
                            format!("--ssl-key={}", file("server.key")),
                            "--require-secure-transport=ON".to_owned(),
                        ]
                    })
                    .into_iter()
                    .flatten(),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return false; // exited: the port was taken, say
            }
            // The server that answers must be ours: another test's server that took the
            // same free port answers too, while ours fails to bind and exits.
            if let Some(datadir) = self.try_sql("SELECT @@datadir") {
                if Path::new(&datadir) == self.dir.join("data") {
                    return true;
                }
                self.stop();
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop();
        false
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `mysql://root@127.0.0.1:<port>/dlock`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/dlock", self.port)
    }

    fn try_sql(&self, sql: &str) -> Option<String> {
        let output = Command::new("mariadb")
            .args(["--no-defaults", "-h", "127.0.0.1", "-u", "root", "-N", "-B"])
            .arg(format!("-P{}", self.port))
            .args(self.tls.then_some("--ssl"))
            .args(["-e", sql])
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Runs `sql` in the database `dlock` (or outside any, before it exists) and returns what
    /// it prints, tab-separated, without column names.
    pub fn sql(&self, sql: &str) -> String {
        let in_db = format!("USE dlock; {sql}");
        let text = if sql.starts_with("CREATE DATABASE") {
            sql
        } else {
            &in_db
        };
        self.try_sql(text)
            .unwrap_or_else(|| panic!("mariadb -e {sql:?} failed"))
    }

    /// Kills the server (SIGKILL: a crash).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port and data (InnoDB recovers).
    pub fn restart(&mut self) {
        self.stop();
        assert!(
            self.spawn(),
            "mariadbd did not restart; see {}",
            self.dir.join("mariadb.log").display()
        );
    }
}

impl Drop for MariadbServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A small redo log: a test server writes little, and every copy of the data directory
/// carries the log file.
const LOG_FILE_SIZE: &str = "--innodb-log-file-size=4M";

/// A freshly installed data directory, copied for every server: one `mariadb-install-db` per
/// machine (kept in the temp dir, `dlock-mariadb-template`, and never started itself) instead
/// of one per test.
fn template() -> &'static Path {
    static TEMPLATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let kept = std::env::temp_dir().join("dlock-mariadb-template");
        if kept.join("data/mysql").is_dir() {
            return kept;
        }
        let mut failure = String::new();
        for _ in 0..3 {
            let dir = temp_dir("mariadb-install");
            let output = Command::new("mariadb-install-db")
                .arg("--no-defaults")
                .arg(format!("--datadir={}", dir.join("data").display()))
                .args([
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    LOG_FILE_SIZE,
                ])
                .output()
                .expect("mariadb-install-db (scripts/setup installs mariadb-server)");
            if output.status.success() {
                // Another process may have kept one meanwhile: either is as good.
                if std::fs::rename(&dir, &kept).is_err() {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                return kept;
            }
            failure = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
        panic!("mariadb-install-db failed: {failure}")
    })
}
