"""The newcomer's afternoon (``sim/afternoon.py --quick``) runs green: own CSV with named
hospitals, simulate, the API, leakage and synth, each checking that the names come back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_the_afternoon_runs_green_in_quick_mode(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "sim" / "afternoon.py"), "--out", str(tmp_path), "--quick", "--json",
                           str(tmp_path / "afternoon.json")], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.rstrip().endswith("the afternoon ran green")
    steps = json.loads((tmp_path / "afternoon.json").read_text())["steps"]
    assert [s["step"] for s in steps] == ["simulate", "api", "leakage", "synth"]
