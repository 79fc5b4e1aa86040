"""Every engine vector in tests/vectors, replayed through dlock.Engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

import dlock

VECTORS = sorted((Path(__file__).resolve().parents[2] / "tests" / "vectors").glob("*.json"))


def test_there_are_vectors() -> None:
    assert len(VECTORS) >= 40


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_vector(path: Path) -> None:
    vector: Dict[str, Any] = json.loads(path.read_text())
    engine = dlock.Engine(vector["config"], vector["start"])
    for i, step in enumerate(vector["steps"]):
        if "input" in step:
            engine.handle_input(step["now"], step["input"])
        else:
            engine.handle_timeout(step["now"])
        outputs: List[Dict[str, Any]] = []
        while (out := engine.poll_output()) is not None:
            outputs.append(out)
        where = f"{vector['name']} step {i} (now {step['now']}, fed {step.get('input', 'a timeout')})"
        for j in range(max(len(outputs), len(step["outputs"]))):
            expected = step["outputs"][j] if j < len(step["outputs"]) else None
            got = outputs[j] if j < len(outputs) else None
            assert got == expected, f"{where}: output {j} differs\n  expected {expected}\n  got      {got}"
        assert engine.poll_timeout() == step["timeout"], f"{where}: timeout differs"
