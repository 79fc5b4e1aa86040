//! A PostgreSQL server of the test's own: `initdb` and `pg_ctl` from Debian's package, a fresh
//! temporary directory, a free loopback port. PostgreSQL refuses to run as root, so as root
//! its tools run as the `postgres` user.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{free_port, temp_dir};

/// A running PostgreSQL server; stopped (and its directory removed) when dropped.
#[derive(Debug)]
pub struct PostgresServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    running: bool,
    /// Serves TLS with the certificates made in `dir` (`ca.crt` signs `server.crt`).
    tls: bool,
}

/// `runuser -u postgres --` when we are root (PostgreSQL will not run as root), else nothing.
fn as_postgres() -> Vec<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if root {
        ["runuser", "-u", "postgres", "--"]
            .map(String::from)
            .to_vec()
    } else {
        Vec::new()
    }
}

impl PostgresServer {
    /// Creates a cluster (trust authentication for the `postgres` user) and starts it.
    pub fn start() -> Self {
        Self::launch(false)
    }

    /// As [`PostgresServer::start`], serving TLS too (`ssl = on`) with a fresh CA and a server
    /// certificate for 127.0.0.1 made by the `openssl` command ([`PostgresServer::ca_file`]).
    /// `Err` says why that is not possible here (no openssl command).
    pub fn start_tls() -> Result<Self, String> {
        crate::openssl_available()?;
        Ok(Self::launch(true))
    }

    /// The CA that signed a TLS server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    fn launch(tls: bool) -> Self {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .expect("postgresql is not installed (scripts/setup installs it)")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|bin| bin.join("pg_ctl").exists())
            .collect();
        versions.sort();
        let bin = versions.pop().expect("no pg_ctl under /usr/lib/postgresql");
        let dir = temp_dir("postgres");
        if tls {
            use std::os::unix::fs::PermissionsExt;
            crate::make_certificates(&dir).expect("certificates");
            // PostgreSQL refuses a key that others may read.
            std::fs::set_permissions(
                dir.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .expect("chmod server.key");
        }
        if !as_postgres().is_empty() {
            let status = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()
                .expect("chown");
            assert!(status.success(), "chown {}", dir.display());
        }
        let mut server = PostgresServer {
            bin,
            dir,
            port: 0,
            running: false,
            tls,
        };
        let data = server.data();
        server.tool(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--no-instructions",
            ],
        );
        for _ in 0..5 {
            server.port = free_port();
            if server.try_start() {
                return server;
            }
        }
        panic!(
            "PostgreSQL did not start; see {}",
            server.dir.join("postgres.log").display()
        );
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn run(&self, tool: &str, args: &[&str]) -> bool {
        let mut command = as_postgres();
        command.push(self.bin.join(tool).display().to_string());
        command.extend(args.iter().map(|a| a.to_string()));
        Command::new(&command[0])
            .args(&command[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
            .success()
    }

    fn tool(&self, tool: &str, args: &[&str]) {
        assert!(self.run(tool, args), "{tool} {args:?} failed");
    }

    fn try_start(&mut self) -> bool {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        if self.tls {
            let file = |name: &str| self.dir.join(name).display().to_string();
            options += &format!(
                " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                file("server.crt"),
                file("server.key")
            );
        }
        let log = self.dir.join("postgres.log").display().to_string();
        let data = self.data();
        self.running = self.run(
            "pg_ctl",
            &[
                "-D", &data, "-l", &log, "-w", "-t", "120", "-o", &options, "start",
            ],
        );
        self.running
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs `sql` with `psql` and returns what it prints (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> String {
        let port = self.port.to_string();
        let output = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-v", "ON_ERROR_STOP=1", "-At", "-c", sql])
            .output()
            .expect("psql");
        assert!(
            output.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`: no shutdown checkpoint, as a
    /// crash would).
    pub fn stop(&mut self) {
        if self.running {
            let data = self.data();
            self.running = !self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        }
    }

    /// Stops the server at once and starts it again on the same port and data (it recovers
    /// from its WAL, as after a crash).
    pub fn restart(&mut self) {
        self.stop();
        assert!(
            self.try_start(),
            "PostgreSQL did not restart; see {}",
            self.dir.join("postgres.log").display()
        );
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
