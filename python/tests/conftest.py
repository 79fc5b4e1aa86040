"""Fixtures: a real redis-server per test, on a free loopback port in a temporary directory."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator, List

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
