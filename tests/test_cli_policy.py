"""What every command shares: its --out (parents created, one overwrite policy), one-line
errors and warnings, Ctrl-C, help that fits a terminal, -v, "did you mean", and tables and
figures that read right at a glance."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from p2pem.cli import build_parser, main
from test_cli import _tradeoff_scenario  # the tests folder is on sys.path (pytest's rootdir import mode)

ROOT = Path(__file__).resolve().parents[1]
FIG1 = str(ROOT / "scenarios" / "fig1.toml")

SMALL = """
seed = 3
[data]
source = "synthetic"
n_samples = 60
[graph]
kind = "edges"
edges = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]
[em]
n_components = 2
max_iter = 3
tol = 0.0
[[protocols]]
name = "pdmm-sp"
[[protocols]]
name = "centralized"
"""


def _small(tmp_path: Path, text: str = SMALL, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _pubs(tmp_path: Path) -> Path:
    pubs = tmp_path / "pubs"
    if pubs.exists():
        return pubs
    pubs.mkdir()
    for i in range(4):
        assert main(["keys", "new", "--out", str(pubs / f"node{i}.key"), "--node-id", str(i), "-q"]) == 0
    return pubs


def _argv(command: str, tmp_path: Path, out: Path) -> list[str]:
    return {
        "simulate": lambda: ["simulate", str(_small(tmp_path))],
        "leakage": lambda: ["leakage", FIG1, "--runs", "200", "--iterations", "1"],
        "tradeoff": lambda: ["tradeoff", str(_tradeoff_scenario(tmp_path))],
        "deploy": lambda: ["deploy", str(_small(tmp_path)), "--prepare-only"],
        "keys new": lambda: ["keys", "new", "--node-id", "0"],
        "keys tls": lambda: ["keys", "tls", "--host", "127.0.0.1"],
        "keys roster": lambda: ["keys", "roster", str(_small(tmp_path)), "--public", str(_pubs(tmp_path))],
        "model": lambda: ["model", str(_run(tmp_path))],
        "synth": lambda: ["synth", str(ROOT / "scenarios" / "synth_ais.toml"), "--rows", "50"],
        "select": lambda: ["select", str(_small(tmp_path)), "--components", "1..2", "--families", "gaussian", "--n-init", "1"],
    }[command]() + ["--out", str(out), "-q"]


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    if not run.exists():
        assert main(["simulate", str(_small(tmp_path)), "--out", str(run), "-q"]) == 0
    return run


COMMANDS = ["simulate", "leakage", "tradeoff", "deploy", "keys new", "keys tls", "keys roster", "model", "select", "synth"]
FILE_OUTPUTS = {"keys new": "out.key", "keys roster": "out.toml", "model": "model.json"}


def test_every_command_that_writes_out_is_covered() -> None:
    """The list above is every command with --out (a new command joins it, or this fails)."""
    from p2pem.cli import _leaf_parsers

    parser = build_parser()
    found = set()
    for leaf in _leaf_parsers(parser):
        if "--out" in leaf._option_string_actions:
            found.add(leaf.prog.removeprefix("p2pem "))
            assert "--force" in leaf._option_string_actions, leaf.prog
    assert found == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_out_parents_are_created_and_an_existing_out_needs_force(tmp_path: Path, capsys, command: str) -> None:
    out = tmp_path / "new" / "deeper" / FILE_OUTPUTS.get(command, "out")
    assert main(_argv(command, tmp_path, out)) == 0, capsys.readouterr().err
    assert out.exists()
    capsys.readouterr()
    # run again: refused, in one line, nothing touched
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")} if out.is_dir() else {out: out.stat().st_mtime_ns}
    assert main(_argv(command, tmp_path, out)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"p2pem: error: {out}: already exists") and "--force" in err and "\n" not in err, err
    assert before == ({p: p.stat().st_mtime_ns for p in out.rglob("*")} if out.is_dir() else {out: out.stat().st_mtime_ns})
    assert main([*_argv(command, tmp_path, out), "--force"]) == 0, capsys.readouterr().err


def test_an_empty_out_folder_is_used_and_a_failed_run_removes_the_parents_it_made(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["simulate", str(_small(tmp_path)), "--out", str(tmp_path / "empty"), "-q"]) == 0
    bad = _small(tmp_path, SMALL.replace("n_components = 2", "n_components = 200"), "bad.toml")
    assert main(["simulate", str(bad), "--out", str(tmp_path / "x" / "y" / "out"), "-q"]) == 3
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "where,message",
    [
        ("file/out", "is not a folder"),
        ("file", "exists and is not a folder"),
    ],
)
def test_unwritable_out_is_one_line(tmp_path: Path, capsys, where: str, message: str) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["simulate", str(_small(tmp_path)), "--out", str(tmp_path / where), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("p2pem: error:") and message in err and "\n" not in err, err


def test_a_read_only_folder_is_refused_before_the_run(tmp_path: Path, capsys, monkeypatch) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    real_access = os.access
    # as root every folder is writable: the check is made to see what an ordinary user's would
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == locked else real_access(path, mode))
    assert main(["simulate", str(_small(tmp_path)), "--out", str(locked / "out"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"p2pem: error: {locked / 'out'}: cannot write in {locked} (permission denied)"


def test_the_kinds_of_output_do_not_mix(tmp_path: Path, capsys) -> None:
    (tmp_path / "folder").mkdir()
    assert main(["keys", "new", "--out", str(tmp_path / "folder"), "-q"]) == 2
    assert "is a folder" in capsys.readouterr().err


# ------------------------------------------------------------------ one-line errors


def test_misspelt_keys_and_names_get_a_suggestion(tmp_path: Path, capsys) -> None:
    cases = [
        (("max_iter = 3", "max_iters = 3"), "did you mean 'max_iter'?"),
        (('name = "pdmm-sp"', 'name = "pdmm_sp"'), "did you mean 'pdmm-sp'?"),
        (('name = "pdmm-sp"', 'name = "pdmm-sp"\nperturbation_sd = 1.0'), "did you mean 'perturbation_std'?"),
        (('kind = "edges"', 'kind = "egdes"'), "did you mean 'edges'?"),
    ]
    for (old, new), hint in cases:
        scenario = _small(tmp_path, SMALL.replace(old, new, 1))
        assert main(["simulate", str(scenario), "--out", str(tmp_path / "out"), "-q"]) == 2
        err = capsys.readouterr().err.strip()
        assert hint in err and "\n" not in err, err


def test_graph_problems_name_the_file_and_key(tmp_path: Path, capsys) -> None:
    radius = _small(tmp_path, SMALL.replace('kind = "edges"\nedges = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]',
                                            'kind = "geometric"\nn_nodes = 30\nradius = 0.01'))
    assert main(["simulate", str(radius), "--out", str(tmp_path / "o1"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{radius}: 'graph.radius' = 0.01: no connected geometric graph" in err and "\n" not in err, err
    tree = _small(tmp_path, SMALL.replace("[[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]", "[[0, 1], [1, 2], [2, 3]]"), "tree.toml")
    assert main(["simulate", str(tree), "--out", str(tmp_path / "o2"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{tree}: 'protocols[0]' (pdmm-sp) on 'graph.edges': the graph has no cycle" in err and "\n" not in err, err


def test_a_collapsed_model_is_a_model_problem_not_a_protocol_one(tmp_path: Path, capsys) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b\n" + "1,2\n" * 6 + "3,4\n" * 6)  # b = a + 1: a singular covariance
    text = SMALL.replace('source = "synthetic"\nn_samples = 60', f'source = "csv"\npath = "{rows}"').replace("max_iter = 3", "max_iter = 3\nreg_covar = 0.0")
    assert main(["simulate", str(_small(tmp_path, text)), "--out", str(tmp_path / "out"), "-q"]) == 6
    err = capsys.readouterr().err.strip()
    assert "singular" in err and "\n" not in err


def _python(*argv: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "p2pem", *argv], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, **(env or {})}, **kwargs)


def test_a_warning_is_one_line_printed_once(tmp_path: Path) -> None:
    text = SMALL.replace('name = "pdmm-sp"', 'name = "dp-central"\nepsilon = 1.0\n[[protocols]]\nname = "dp-distributed"\nepsilon = 1.0')
    proc = _python("simulate", str(_small(tmp_path, text)), "--out", str(tmp_path / "out"), "-q")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    warned = [line for line in lines if line.startswith("p2pem: warning:")]
    assert len(warned) == 2 and all("NOT differentially private" in line for line in warned), proc.stderr
    assert len(lines) == 2, proc.stderr  # no source line, no category, nothing else
    assert len(set(warned)) == 2  # the two protocols' warnings, each once
    # --json collects them
    proc = _python("simulate", str(_small(tmp_path, text)), "--out", str(tmp_path / "out2"), "-q", "--json")
    assert len(json.loads(proc.stdout)["warnings"]) == 2


def test_two_ctrl_c_quit_in_one_line(tmp_path: Path) -> None:
    scenario = ROOT / "scenarios" / "parkinsons.toml"
    with subprocess.Popen([sys.executable, "-m", "p2pem", "-v", "simulate", str(scenario), "--engine", "messages", "--out", str(tmp_path / "out")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:  # wait until the run is under way
            if "running pdmm-sp" in line:
                break
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "p2pem: interrupted" in err
    assert not (tmp_path / "out").exists()


def test_one_ctrl_c_cleans_up(tmp_path: Path) -> None:
    scenario = ROOT / "scenarios" / "parkinsons.toml"
    with subprocess.Popen([sys.executable, "-m", "p2pem", "-v", "simulate", str(scenario), "--engine", "messages", "--out", str(tmp_path / "a" / "out")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "running pdmm-sp" in line:
                break
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 130
    assert err.strip().splitlines()[-1] == "p2pem: interrupted" and "Traceback" not in err, err
    assert not (tmp_path / "a").exists()  # the parent folders it made are gone again


# ------------------------------------------------------------------------- help, -v


def test_every_help_fits_a_terminal() -> None:
    parser = build_parser()
    from p2pem.cli import _leaf_parsers

    os.environ["COLUMNS"] = "80"
    try:
        for leaf in [parser, *_leaf_parsers(parser)]:
            text = leaf.format_help()
            long = [line for line in text.splitlines() if len(line) > 88]
            assert not long, (leaf.prog, long)
    finally:
        del os.environ["COLUMNS"]


def test_verbose_says_what_runs(tmp_path: Path) -> None:
    proc = _python("-v", "simulate", str(_small(tmp_path)), "--out", str(tmp_path / "out"), "-q")
    assert proc.returncode == 0
    assert "INFO p2pem.runner: s: running pdmm-sp" in proc.stderr and "INFO p2pem.builders: s: 60 rows x 2 features over 4 nodes" in proc.stderr
    quiet = _python("simulate", str(_small(tmp_path)), "--out", str(tmp_path / "out2"), "-q")
    assert "INFO" not in quiet.stderr


# ------------------------------------------------------------------ tables, figures


def test_a_private_run_shows_epsilon_and_no_fake_loglik(tmp_path: Path, capsys) -> None:
    text = SMALL.replace('name = "pdmm-sp"', 'name = "dp-distributed"\nepsilon = 2.0\nbound = 8.0\n[[protocols]]\nname = "pdmm-sp"')
    assert main(["simulate", str(_small(tmp_path, text)), "--out", str(tmp_path / "out"), "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("protocol"))
    rows = lines[lines.index(header) + 2 : lines.index(header) + 5]
    assert [row.split()[0] for row in rows] == ["dp-secure-sum-gaussian", "pdmm-sp", "centralized"]
    # every column ends where its header ends, whatever the labels' lengths
    titles = ["EM its", "final loglik", "max rel err", "epsilon", "consensus its", "messages", "MB", "wall s"]
    ends = [header.index(title) + len(title) for title in titles]
    for row in rows:
        assert [m.end() for m in re.finditer(r"\S+", row)][1:] == ends, (header, row)
    dp = rows[0].split()
    assert dp[2] == "-" and "nan" not in rows[0]  # a private run releases no log-likelihood
    assert float(dp[4]) < 2.0  # epsilon against an outsider: below the configured one (the colluders')
    assert any(line.startswith("dp-secure-sum-gaussian: epsilon ") and "against 2 colluding nodes" in line for line in lines)


def test_every_line_of_a_figure_has_its_own_colour() -> None:
    from p2pem.plots import protocol_styles

    labels = ["dp-central-gaussian", "dp-pdmm-sp-gaussian", "dp-secure-sum-laplace", "pdmm-sp", "secure-sum", "federated", "centralized"]
    colours = [style["color"] for style in protocol_styles(labels).values()]
    assert len(set(colours)) == len(labels)


def test_the_loglik_figure_names_what_it_cannot_draw(tmp_path: Path, monkeypatch) -> None:
    import matplotlib.pyplot as plt

    from p2pem.plots import loglik_figure
    from p2pem.runner import run_scenario
    from p2pem.scenario import load_scenario

    text = SMALL.replace('name = "pdmm-sp"', 'name = "dp-central"\nepsilon = 1.0\nbound = 8.0\n[[protocols]]\nname = "pdmm-sp"')
    run = run_scenario(load_scenario(_small(tmp_path, text)))
    captured = {}
    original = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        captured["fig"] = fig
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    loglik_figure(run.runs, tmp_path / "loglik.png", title="t")
    ax = captured["fig"].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["pdmm-sp", "centralized"]
    assert "not plotted (no log-likelihood released): dp-central-gaussian" in ax.get_title()
    ticks = ax.get_xticks()
    assert all(float(t).is_integer() for t in ticks)  # EM iterations, no 2.5


def test_the_quick_start_runs_twice(tmp_path, monkeypatch):
    """`make parkinsons` writes into its own folder: run again, it replaces its files instead of
    refusing (the Makefile's command, run from a copy of its scenario's folder)."""
    recipe = re.search(r"^parkinsons:.*\n\t\$\(BIN\)/p2pem (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert recipe is not None
    argv = recipe.group(1).split()
    monkeypatch.chdir(ROOT)
    out = argv.index("--out") + 1
    argv[out] = str(tmp_path / argv[out])
    assert main([*argv, "-q"]) == 0
    first = json.loads((Path(argv[out]) / "result.json").read_text())
    assert main([*argv, "-q"]) == 0
    again = json.loads((Path(argv[out]) / "result.json").read_text())
    assert [p["loglik"] for p in again["protocols"]] == [p["loglik"] for p in first["protocols"]]
