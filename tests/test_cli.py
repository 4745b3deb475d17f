"""The CLI: outputs a script can read, and one-line errors with nothing half-written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2pem.cli import main

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
seed = 3
[data]
source = "csv"
path = "{path}"
split = "{split}"
[graph]
kind = "{kind}"
n_nodes = {n_nodes}
{edges}
[em]
n_components = {k}
max_iter = 3
[[protocols]]
name = "pdmm-sp"
[[protocols]]
name = "federated"
[[protocols]]
name = "centralized"
"""


def _write(tmp_path: Path, csv: str, *, split="even", kind="geometric", n_nodes=6, k=2, edges="") -> Path:
    (tmp_path / "rows.csv").write_text(csv)
    text = SCENARIO.format(path="rows.csv", split=split, kind=kind, n_nodes=n_nodes, k=k, edges=edges)
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def _csv(n=30, bad=None) -> str:
    import numpy as np

    rng = np.random.default_rng(0)
    rows = ["a,b"] + [f"{x:.6f},{y:.6f}" for x, y in rng.normal(size=(n, 2)) + [[0, 0]] * n]
    if bad is not None:
        rows[5] = bad
    return "\n".join(rows) + "\n"


def test_simulate_writes_result_and_plot(tmp_path, capsys):
    scenario = _write(tmp_path, _csv())
    out = tmp_path / "out"
    assert main(["simulate", str(scenario), "--out", str(out), "-q"]) == 0
    result = json.loads((out / "result.json").read_text())
    names = [r["protocol"] for r in result["protocols"]]
    assert names == ["pdmm-sp", "federated", "centralized"]
    for run in result["protocols"]:
        for key in ("loglik", "weights", "means", "covariances", "consensus_iterations", "messages", "bytes", "wall_s"):
            assert key in run
        assert len(run["loglik"]) == 4
    assert result["graph"]["n_nodes"] == 6 and len(result["graph"]["degrees"]) == 6
    assert (out / "loglik.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "pdmm-sp" in printed and "degree min" in printed


@pytest.mark.parametrize(
    "csv,kwargs,message",
    [
        (_csv(bad="1.0,nan"), {}, "line 6, column 'b'"),
        (_csv(bad="1.0,inf"), {}, "line 6, column 'b'"),
        (_csv(bad="1.0,abc"), {}, "'abc' is not a number"),
        (_csv(bad="1.0"), {}, "line 6"),
        (_csv(n=3), {"n_nodes": 3, "k": 5}, "fewer"),
        (_csv(), {"kind": "edges", "n_nodes": 6, "edges": "edges = [[0, 1], [1, 2], [2, 0], [3, 4], [4, 5], [5, 3]]"}, "disconnected"),
        (_csv(n=8), {"split": "random", "n_nodes": 8}, "holds no rows"),
    ],
    ids=["nan", "inf", "text", "ragged", "too-few-rows", "disconnected", "empty-node"],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, csv, kwargs, message):
    scenario = _write(tmp_path, csv, **kwargs)
    out = tmp_path / "out"
    code = main(["simulate", str(scenario), "--out", str(out), "-q"])
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert err.startswith("p2pem: error:") and "\n" not in err and message in err, err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


@pytest.mark.parametrize(
    "patch,message",
    [
        (("max_iter = 3", "max_iters = 3"), "unknown key 'em.max_iters'"),
        (("n_nodes = 6", 'n_nodes = "6"'), "'graph.n_nodes' must be an integer"),
        (("n_nodes = 6", "n_nodes = true"), "'graph.n_nodes' must be an integer"),
        (('name = "pdmm-sp"', 'name = "pdmm-sp"\nthetta = 0.5'), "unknown parameter 'thetta'"),
        (("seed = 3", "seed = [3"), "s.toml"),
    ],
)
def test_bad_scenarios_name_file_and_key(tmp_path, capsys, patch, message):
    scenario = _write(tmp_path, _csv())
    scenario.write_text(scenario.read_text().replace(*patch))
    code = main(["simulate", str(scenario), "--out", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err and "s.toml" in err, err


def test_pdmm_sp_on_a_tree_is_refused_before_anything_runs(tmp_path, capsys):
    scenario = _write(tmp_path, _csv(), kind="edges", n_nodes=6, edges="edges = [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]")
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "out"), "-q"]) == 2
    assert "no cycle" in capsys.readouterr().err


def test_console_script_help_and_exit_codes():
    exe = [sys.executable, "-m", "p2pem"]
    out = subprocess.run([*exe, "simulate", "--help"], capture_output=True, text=True, check=True).stdout
    assert "result.json" in out and "--engine" in out
    bad = subprocess.run([*exe, "simulate", "nope.toml", "--out", "x"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "nope.toml" in bad.stderr


def test_missing_parent_folders_are_created_and_removed_again_on_error(tmp_path, capsys):
    scenario = _write(tmp_path, _csv())
    out = tmp_path / "a" / "b" / "out"
    assert main(["simulate", str(scenario), "--out", str(out), "-q"]) == 0
    assert (out / "result.json").exists()
    bad = _write(tmp_path, _csv(bad="1.0,nan"))
    assert main(["simulate", str(bad), "--out", str(tmp_path / "c" / "d" / "out"), "-q"]) != 0
    assert not (tmp_path / "c").exists()


def _run_with_stderr(argv: list[str], *, terminal: bool) -> tuple[int, str]:
    """Run ``python -m p2pem ARGV`` with stderr on a pipe, or on an 80-column pseudo-terminal."""
    cmd = [sys.executable, "-m", "p2pem", *argv]
    if not terminal:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300, cwd=ROOT)
        return proc.returncode, proc.stderr
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    # tqdm sizes its bar from the terminal: a pty without a window size gets an empty bar
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=slave, cwd=ROOT) as proc:
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=300)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


def _tradeoff_scenario(tmp_path: Path) -> Path:
    """scenarios/tradeoff_parkinsons.toml cut to one epsilon, one seed and three EM iterations."""
    import re

    text = (ROOT / "scenarios" / "tradeoff_parkinsons.toml").read_text()
    text = text.replace('"../data/', json.dumps(str(ROOT / "data"))[:-1] + '/')
    text = re.sub(r"(?m)^epsilons = .*$", "epsilons = [1.0]", text)
    text = re.sub(r"(?m)^n_seeds = \d+", "n_seeds = 1", text)
    text = re.sub(r"(?m)^max_iter = \d+", "max_iter = 3", text)
    path = tmp_path / "tradeoff.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("command", ["simulate", "leakage", "tradeoff"])
def test_progress_bars_only_on_a_terminal(tmp_path: Path, command: str) -> None:
    fig1 = str(ROOT / "scenarios" / "fig1.toml")
    argv = {
        "simulate": ["simulate", fig1],
        "leakage": ["leakage", fig1, "--runs", "200", "--iterations", "1"],
        "tradeoff": ["tradeoff", str(_tradeoff_scenario(tmp_path))],
    }[command]
    code, err = _run_with_stderr([*argv, "--out", str(tmp_path / "piped")], terminal=False)
    assert code == 0, err
    assert "\r" not in err  # no bar redraws in a log file
    # the control: the same command on a terminal does draw a bar (a carriage return that is
    # not the terminal's own \r\n line ending), so the assertion above can fail
    code, err = _run_with_stderr([*argv, "--out", str(tmp_path / "tty")], terminal=True)
    assert code == 0, err
    assert any(piece and piece[0] != "\n" for piece in err.split("\r")[1:]), err


def test_simulate_warns_of_degenerate_components_as_the_estimator_does(tmp_path, capsys):
    """Too many components for the rows (issue 31: 20 on 178 wine rows): the table says which
    protocols ended with components lighter than n_features + 1 rows, counted from result.json."""
    import numpy as np

    scenario = tmp_path / "s.toml"
    scenario.write_text('seed = 2\n[data]\nsource = "synthetic"\nn_samples = 40\nn_features = 3\nn_components = 2\n'
                        '[graph]\nkind = "geometric"\nn_nodes = 4\n[em]\nn_components = 9\nmax_iter = 5\n'
                        '[[protocols]]\nname = "secure-sum"\n')
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "out"), "-q"]) == 0
    out = capsys.readouterr().out
    run = json.loads((tmp_path / "out" / "result.json").read_text())["protocols"][0]
    light = int(np.sum(~(np.asarray(run["weights"]) * 40 >= 3 + 1)))
    assert light > 0
    assert f"  warning: secure-sum: {light} of 9 components hold fewer rows' weight than n_features + 1 = 4;" in out
    scenario.write_text(scenario.read_text().replace("n_components = 9", "n_components = 2"))
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "two"), "-q"]) == 0
    assert "degenerate" not in capsys.readouterr().out
