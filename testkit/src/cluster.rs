//! A Redis Cluster of our own: redis-servers in cluster mode on free loopback ports (each with
//! its cluster bus on another free port), joined by `redis-cli --cluster create`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{RedisServer, free_port};

/// Masters only (no replicas), every slot assigned.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` servers, creates the cluster and waits until every node reports
    /// `cluster_state:ok`.
    pub fn start(masters: usize) -> Self {
        let nodes: Vec<RedisServer> = (0..masters)
            .map(|_| {
                let bus = free_port().to_string();
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                    &bus,
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let cluster = RedisCluster { nodes };
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH (it comes with redis-server)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_ok();
        cluster
    }

    fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..self.nodes.len() {
            while !self
                .cli(i, &["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
            {
                assert!(
                    Instant::now() < deadline,
                    "the cluster is not ok after 30 s"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// `redis-cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }

    /// The nodes, to connect to one directly.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Runs a command on node `i` with redis-cli and returns its output.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.nodes[i].port().to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        self.cli(0, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot number")
    }

    fn node_id(&self, i: usize) -> String {
        self.cli(i, &["CLUSTER", "MYID"]).trim().to_owned()
    }

    /// The index of the node that serves `slot`.
    pub fn owner(&self, slot: u16) -> usize {
        (0..self.nodes.len())
            .find(|&i| self.serves(i, slot))
            .expect("some node serves every slot")
    }

    /// Whether node `i` owns `slot`, by its own line of CLUSTER NODES (slots from the ninth
    /// field on, as `n` or `lo-hi`).
    fn serves(&self, i: usize, slot: u16) -> bool {
        let nodes = self.cli(i, &["CLUSTER", "NODES"]);
        let Some(me) = nodes.lines().find(|l| l.contains("myself")) else {
            return false;
        };
        me.split(' ').skip(8).any(|range| {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
        })
    }

    /// Moves `slot`, with its keys (and their expiry times), to node `to`, the way
    /// `redis-cli --cluster reshard` does: IMPORTING / MIGRATING, MIGRATE, then SETSLOT NODE
    /// on every master.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let from = self.owner(slot);
        assert_ne!(from, to, "slot {slot} is already on node {to}");
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let slot_s = slot.to_string();
        self.cli(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id]);
        self.cli(from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id]);
        let to_port = self.nodes[to].port().to_string();
        loop {
            let keys = self.cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            let out = self.cli(from, &args);
            assert!(
                out.trim() == "OK" || out.trim() == "NOKEY",
                "MIGRATE: {out}"
            );
        }
        for i in 0..self.nodes.len() {
            self.cli(i, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(0..self.nodes.len()).all(|i| i == to || !self.serves(i, slot))
            || !self.serves(to, slot)
        {
            assert!(Instant::now() < deadline, "slot {slot} did not move");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
