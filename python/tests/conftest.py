"""Fixtures: a real redis-server, ZooKeeper or PostgreSQL per test, on a free loopback port in
a temporary directory."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, directory: Path, extra: List[str]) -> None:
        self.directory = directory
        self.extra = extra
        self.port = 0
        self.process: "subprocess.Popen[bytes] | None" = None
        for _ in range(5):
            self.port = free_port()
            if self._start():
                return
        raise RuntimeError("redis-server did not start")

    def _start(self) -> bool:
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.directory), *self.extra],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith((b"+PONG", b"-NOAUTH")):
                        return True
            except OSError:
                time.sleep(0.01)
        self.stop()
        return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        out = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, check=True)
        return out.stdout.decode().strip()

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        self.stop()
        deadline = time.monotonic() + 10
        while not self._start():
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not restart")
            time.sleep(0.05)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    assert shutil.which("redis-server"), "redis-server is not installed (scripts/setup installs it)"
    server = RedisServer(tmp_path, [])
    yield server
    server.stop()


@pytest.fixture
def redis_acl(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path, ["--user", "alice", "on", ">s3cret", "~*", "&*", "+@all", "--user", "default", "off"])
    yield server
    server.stop()


class RedisCluster:
    """Three redis-servers in cluster mode (cluster buses on free ports too), joined by
    ``redis-cli --cluster create``; masters only."""

    def __init__(self, directory: Path, masters: int = 3) -> None:
        self.nodes: List[RedisServer] = []
        for i in range(masters):
            node_dir = directory / f"node{i}"
            node_dir.mkdir()
            self.nodes.append(RedisServer(node_dir, [
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-port", str(free_port()), "--cluster-node-timeout", "2000"]))
        subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, check=True)
        deadline = time.monotonic() + 30
        while not all("cluster_state:ok" in n.cli("CLUSTER", "INFO") for n in self.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster is not ok after 30 s")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    cluster = RedisCluster(tmp_path)
    yield cluster
    cluster.stop()


class Redlock:
    """Independent redis-servers (no replication, no persistence) for a redlock:// URL."""

    def __init__(self, directory: Path, nodes: int = 3) -> None:
        self.nodes: List[RedisServer] = []
        for i in range(nodes):
            node_dir = directory / f"node{i}"
            node_dir.mkdir()
            self.nodes.append(RedisServer(node_dir, []))

    @property
    def url(self) -> str:
        return "redlock://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture
def redlock(tmp_path: Path) -> Iterator[Redlock]:
    servers = Redlock(tmp_path)
    yield servers
    servers.stop()


class ZooKeeperServer:
    """A standalone ZooKeeper (Debian's package, run with the JVM) on a free loopback port."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        data = directory / "zk-data"
        data.mkdir()
        config = directory / "zoo.cfg"
        config.write_text(
            f"tickTime=200\ninitLimit=20\nsyncLimit=10\ndataDir={data}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\n"
            "maxClientCnxns=0\n"
        )
        log = open(directory / "zookeeper.log", "wb")
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
             "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar",
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
            stdout=log, stderr=log,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"srvr")
                    if b"Mode:" in s.recv(4096):
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("ZooKeeper did not start")

    @property
    def url(self) -> str:
        return f"zk://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    assert Path("/usr/share/java/zookeeper.jar").exists(), "zookeeper is not installed (scripts/setup installs it)"
    server = ZooKeeperServer(tmp_path)
    yield server
    server.stop()


class PostgresServer:
    """A PostgreSQL server of the test's own: initdb and pg_ctl from Debian's package, a
    temporary directory, a free loopback port. Run as the `postgres` user when the tests run
    as root (PostgreSQL refuses to run as root)."""

    def __init__(self) -> None:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        assert versions, "postgresql is not installed (scripts/setup installs it)"
        self.bin = versions[-1].parent
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="dlock-pg-"))
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.directory, "postgres")
        data = self.directory / "data"
        self._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync")
        self._run(
            "pg_ctl", "-D", str(data), "-l", str(self.directory / "log"), "-w", "-t", "60", "start",
            "-o", f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off",
        )
        self.data = data

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bin / tool), *args], check=True, stdout=subprocess.DEVNULL)

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    yield server
    server.stop()


class MariadbServer:
    """A MariaDB server of the test's own: mariadb-install-db and mariadbd from Debian's
    package, a temporary directory, a free loopback port, a database `dlock`; killed by pid."""

    def __init__(self, directory: Path) -> None:
        assert shutil.which("mariadbd"), "mariadb-server is not installed (scripts/setup installs it)"
        self.directory = directory
        data = directory / "data"
        subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db", "--innodb-log-file-size=4M"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.port = free_port()
        self.process = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={directory / 'mariadb.sock'}",
             f"--pid-file={directory / 'mariadb.pid'}", f"--log-error={directory / 'mariadb.log'}",
             f"--port={self.port}", "--bind-address=127.0.0.1", "--user=root", "--skip-name-resolve",
             "--innodb-log-file-size=4M"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.sql("CREATE DATABASE IF NOT EXISTS dlock", check=False) is not None:
                return
            assert self.process.poll() is None, "mariadbd exited"
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("MariaDB did not start")

    def sql(self, sql: str, check: bool = True) -> Optional[str]:
        done = subprocess.run(
            ["mariadb", "--no-defaults", "-h", "127.0.0.1", f"-P{self.port}", "-u", "root", "-N", "-B", "-e", sql],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            assert not check, done.stderr
            return None
        return done.stdout.strip()

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/dlock"

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def mariadb(tmp_path: Path) -> Iterator[MariadbServer]:
    server = MariadbServer(tmp_path)
    yield server
    server.stop()
