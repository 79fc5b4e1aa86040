"""The package's types hold: mypy --strict on a typed example, and stubtest on the native module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=HERE)


def test_mypy_strict_on_a_typed_example() -> None:
    out = run("mypy", "--strict", "--no-incremental", "typed_example.py")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_typed_example_runs() -> None:
    out = subprocess.run([sys.executable, "typed_example.py"], capture_output=True, text=True, cwd=HERE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"], "fencing tokens grow"


def test_stubtest_on_the_native_module() -> None:
    out = run("mypy.stubtest", "dlock._dlock")
    assert out.returncode == 0, out.stdout + out.stderr
