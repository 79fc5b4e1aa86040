//! ZooKeeper servers of our own (Debian's `zookeeper` package, run with the JVM): one
//! standalone server or an ensemble of several, each on free loopback ports in its own
//! temporary directory; or one server that also listens for TLS clients.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, make_certificates, temp_dir};

const CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

/// Netty (Debian's libnetty-java, a dependency of its zookeeper package), which a server needs
/// for `secureClientPort`.
const NETTY: &[&str] = &[
    "buffer",
    "codec",
    "common",
    "handler",
    "resolver",
    "transport",
    "transport-native-epoll",
    "transport-native-unix-common",
];

#[derive(Debug)]
struct Node {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    /// The TLS port (`secureClientPort`), if the server has one.
    secure_port: Option<u16>,
}

/// One ZooKeeper server (`ZkEnsemble::start(1)`) or an ensemble of several.
#[derive(Debug)]
pub struct ZkEnsemble {
    nodes: Vec<Node>,
}

impl ZkEnsemble {
    /// Starts `n` servers and waits until every one serves (standalone for 1; for more, a
    /// quorum with a leader). `tickTime` is 200 ms, so the server grants session timeouts
    /// from 400 ms to 4 s: short session-expiry tests.
    pub fn start(n: usize) -> Self {
        Self::start_with(n, false)
    }

    /// Starts one server that also serves TLS clients on a `secureClientPort`, with a fresh CA
    /// and a certificate for 127.0.0.1 made by the `openssl` command (its plain port stays, for
    /// four-letter commands). `Err` says why that is not possible here.
    pub fn start_tls() -> Result<Self, String> {
        crate::openssl_available()?;
        Ok(Self::start_with(1, true))
    }

    fn start_with(n: usize, tls: bool) -> Self {
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let mut nodes = Vec::new();
        for (i, (client, _, _)) in ports.iter().enumerate() {
            let dir = temp_dir("zk");
            let data = dir.join("data");
            std::fs::create_dir_all(&data).expect("data dir");
            let mut cfg = format!(
                "tickTime=200\ninitLimit=20\nsyncLimit=10\ndataDir={}\nclientPort={client}\n\
                 clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\n\
                 maxClientCnxns=0\nminSessionTimeout=400\nmaxSessionTimeout=20000\n",
                data.display()
            );
            let secure_port = tls.then(free_port);
            if let Some(port) = secure_port {
                make_certificates(&dir).expect("certificates");
                let pem = |name: &str| std::fs::read_to_string(dir.join(name)).expect("PEM");
                let store = dir.join("server.pem");
                std::fs::write(&store, pem("server.key") + &pem("server.crt")).expect("PEM");
                cfg += &format!(
                    "secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n\
                     serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                     ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                     ssl.trustStore.location={}\nssl.trustStore.type=PEM\nssl.clientAuth=none\n",
                    store.display(),
                    dir.join("ca.crt").display()
                );
            }
            if n > 1 {
                std::fs::write(data.join("myid"), format!("{}\n", i + 1)).expect("myid");
                for (j, (_, p, e)) in ports.iter().enumerate() {
                    cfg += &format!("server.{}=127.0.0.1:{p}:{e}\n", j + 1);
                }
            }
            std::fs::write(dir.join("zoo.cfg"), cfg).expect("zoo.cfg");
            nodes.push(Node {
                child: None,
                dir,
                port: *client,
                secure_port,
            });
        }
        let mut ensemble = ZkEnsemble { nodes };
        for i in 0..n {
            ensemble.launch(i);
        }
        for i in 0..n {
            ensemble.wait_serving(i);
        }
        ensemble
    }

    fn launch(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let log = std::fs::File::create(node.dir.join("zookeeper.log")).expect("log file");
        let mut classpath = CLASSPATH.to_owned();
        if node.secure_port.is_some() {
            for jar in NETTY {
                classpath += &format!(":/usr/share/java/netty-{jar}.jar");
            }
        }
        let child = Command::new("java")
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-cp",
                &classpath,
            ])
            .arg(format!("-Dzookeeper.log.dir={}", node.dir.display()))
            // Empty container nodes (Curator's directories) go within 100 ms, not a minute.
            .arg("-Dznode.container.checkIntervalMs=100")
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(node.dir.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("start ZooKeeper (is Debian's zookeeper package installed?)");
        node.child = Some(child);
    }

    /// Waits until server `i` answers `srvr` with a `Mode:` line (standalone, leader or
    /// follower), and `conf` with its own data directory: free ports come from binding port
    /// 0 and letting go, so another test's server may have taken the same port and answer.
    ///
    /// A server that exits at once is started again: its port can be briefly taken by a
    /// client that keeps reconnecting to it, whose socket Linux may bind to that very port
    /// (a TCP self-connect) while nobody listens there.
    fn wait_serving(&mut self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let data = self.nodes[i].dir.join("data").display().to_string();
        let ours = |port| four_letter(port, "conf").is_ok_and(|conf| conf.contains(&data));
        while Instant::now() < deadline {
            if self.mode(i).is_some() && ours(self.nodes[i].port) {
                return;
            }
            let exited = self.nodes[i]
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            if exited {
                std::thread::sleep(Duration::from_millis(200));
                self.launch(i);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log =
            std::fs::read_to_string(self.nodes[i].dir.join("zookeeper.log")).unwrap_or_default();
        panic!("ZooKeeper {i} did not start within 60 s; its log:\n{log}");
    }

    /// Server `i`'s mode (`standalone`, `leader`, `follower`), `None` if it does not serve.
    pub fn mode(&self, i: usize) -> Option<String> {
        let reply = four_letter(self.nodes[i].port, "srvr").ok()?;
        reply
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_owned())
    }

    /// The index of the current leader, if any.
    pub fn leader(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| self.mode(i).as_deref() == Some("leader"))
    }

    /// `host:port,host:port,…` of every server.
    pub fn hosts(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `zk://` URL of the whole ensemble.
    pub fn url(&self) -> String {
        format!("zk://{}", self.hosts())
    }

    /// `host:port` of every server's TLS port (servers started by [`start_tls`](Self::start_tls)).
    pub fn secure_hosts(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.secure_port.expect("a TLS server")))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The PEM file of the CA that signed a TLS server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.nodes[0].dir.join("ca.crt")
    }

    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// Kills server `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts server `i` again after [`kill`](Self::kill) and waits until it serves.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.launch(i);
        self.wait_serving(i);
    }

    /// A four-letter command sent to any serving server (e.g. `wchc`, `cons`).
    pub fn four_letter(&self, command: &str) -> String {
        for node in &self.nodes {
            if node.child.is_some()
                && let Ok(reply) = four_letter(node.port, command)
            {
                return reply;
            }
        }
        panic!("no ZooKeeper server answers {command}");
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
            let _ = std::fs::remove_dir_all(&self.nodes[i].dir);
        }
    }
}

/// Sends a four-letter command (`srvr`, `wchp`, `cons`…) to a ZooKeeper port and returns
/// the reply.
pub fn four_letter(port: u16, command: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(command.as_bytes())?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}
