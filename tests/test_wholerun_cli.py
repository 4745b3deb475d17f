"""``p2pem leakage SCENARIO --whole-run``: whole_run.json, the figure, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2pem.cli import main

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
RECORD_KEYS = {"protocol", "adversary", "corrupt", "node", "iterations_seen", "reconstruction_error", "rows_recovered", "baseline_error"}


def test_whole_run_writes_versioned_json_and_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["leakage", str(SCENARIOS / "fig1_wholerun.toml"), "--whole-run", "--out", str(out), "-q"]) == 0
    data = json.loads((out / "whole_run.json").read_text())
    assert data["format"] == "p2pem-whole-run" and data["version"] == 1
    from test_schemas import validate

    validate(data)
    assert (out / "whole_run.png").stat().st_size > 10_000
    runs = data["runs"]
    # 3 protocols x (honest-but-curious, both: 3 honest nodes; eavesdropper: 5 nodes)
    assert len(runs) == 3 * (3 + 5 + 3)
    for r in runs:
        assert RECORD_KEYS <= set(r)
        assert len(r["reconstruction_error"]) == len(r["rows_recovered"]) == len(r["iterations_seen"]) == 5
        assert r["node"] not in r["corrupt"]
    by = {(r["protocol"], r["adversary"], r["node"]): r for r in runs}
    # federated with a corrupt server: every row after one iteration; pdmm-sp: the triple {1, 3, 5}
    assert by[("federated", "honest-but-curious", 0)]["rows_recovered"][1:] == [1.0] * 4
    assert by[("pdmm-sp", "honest-but-curious", 0)]["disclosed_group"] == [0, 2, 4]
    assert by[("pdmm-sp", "honest-but-curious", 0)]["rows_recovered"][0] == 0.0
    assert by[("pdmm-sp", "honest-but-curious", 2)]["rows_recovered"][-1] == 1.0
    # the exact reduction and the rank check are reported with the disclosures
    for d in data["disclosures"]:
        assert all(g["max_reduction_error"] < 1e-9 for g in d["groups"])
        if d["protocol"] == "pdmm-sp":
            assert d["rank_check"]["matches_groups"]
    # the pdmm-sp schedule and stop round the whole run used, as a real run does
    pdmm = next(p for p in data["protocols"] if p["protocol"] == "pdmm-sp")
    assert pdmm["schedule"]["stop"] == "public round" and pdmm["max_rounds"] == pdmm["schedule"]["stop_round"]
    assert next(p for p in data["protocols"] if p["protocol"] == "federated")["schedule"] is None
    printed = capsys.readouterr().out
    assert "whole_run.json" in printed and "exact reduction" in printed
    assert f"public stop round {pdmm['schedule']['stop_round']}" in printed


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("starts = 3", "startz = 3", "unknown key 'leakage.whole_run.startz'"),
        ("tolerance = 1e-3", "tolerance = -1.0", "'leakage.whole_run.tolerance' must be a number > 0"),
        ("iterations_seen = [0, 1, 2, 5, 11]", "iterations_seen = [1, 1]", "'leakage.whole_run.iterations_seen' names a value more than once"),
        ("starts = 3", "starts = 3\nmax_minutes = 0", "'leakage.whole_run.max_minutes' must be a number of minutes > 0"),
        # an attack estimated past the limit is refused before it starts, with the estimate and what to change
        ("starts = 3", "starts = 3\nmax_minutes = 1e-12", "the whole-run attack on pdmm-sp would take about"),
    ],
)
def test_whole_run_errors_are_one_line_and_leave_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, message: str) -> None:
    text = (SCENARIOS / "fig1_wholerun.toml").read_text()
    assert old in text
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(old, new))
    out = tmp_path / "out"
    assert main(["leakage", str(path), "--whole-run", "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(path) in err and "\n" not in err
    assert not out.exists()


def test_whole_run_refuses_monte_carlo_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["leakage", str(SCENARIOS / "fig1_wholerun.toml"), "--whole-run", "--runs", "1000", "--out", str(tmp_path / "o")]) == 2
    assert "--runs and --rounds apply to the Monte Carlo analysis" in capsys.readouterr().err


def test_whole_run_with_a_public_init_has_no_initialisation_to_see(tmp_path: Path) -> None:
    text = (SCENARIOS / "fig1_wholerun.toml").read_text()
    init = "max_iter = 10\n\n[em.init]\nweights = [0.5, 0.5]\nmeans = [[0.0, 0.0], [3.0, 3.0]]\ncovariances = [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]]\n"
    path = tmp_path / "public_init.toml"
    path.write_text(text.replace("max_iter = 10\n", init).replace("iterations_seen = [0, 1, 2, 5, 11]", "iterations_seen = [0, 1, 3]"))
    out = tmp_path / "out"
    assert main(["leakage", str(path), "--whole-run", "--out", str(out), "-q"]) == 0
    runs = json.loads((out / "whole_run.json").read_text())["runs"]
    assert all(r["iterations_seen"] == [1, 3] for r in runs)


def test_the_attack_cost_counts_every_solve_of_the_closed_form_size(tmp_path: Path) -> None:
    """attack_solves counts, per disclosed group and T, the equations of aggregations 0..T:
    1 + d + d(d+1)/2 for the initialisation and K(1 + d + d(d+1)/2) + 1 per EM iteration (the
    attack module's closed form), the unknowns m d, and starts x max_nfev evaluations."""
    from p2pem.builders import build_graph, build_protocols, em_settings, load_data
    from p2pem.leakage.wholerun import record_whole_run
    from p2pem.leakage.wholerun_analysis import BUDGETS, _attack_tasks, adversaries_for, attack_seconds, attack_solves, parse_whole_run
    from p2pem.scenario import load_scenario

    import numpy as np

    sc = load_scenario(SCENARIOS / "fig1_wholerun.toml")
    config = parse_whole_run(sc)
    parts, spec, settings = load_data(sc), build_protocols(sc)[0], em_settings(sc)
    views = record_whole_run(parts, build_graph(sc), spec, settings, adversaries_for(spec.name, config), seed=sc.streams()["protocol"])
    seen = (0, 1, 2)
    tasks = _attack_tasks(views, parts, seen, np.random.SeedSequence(0), config.starts)
    d, k = parts[0].shape[1], settings.n_components
    per_init, per_iteration = 1 + d + d * (d + 1) // 2, k * (1 + d + d * (d + 1) // 2) + 1
    expected = []
    for task in tasks.values():
        m = task.rows.shape[0]
        _, starts, nfev = next(b for b in BUDGETS if m <= b[0])
        expected += [(per_init + t * per_iteration, m * d, (starts or config.starts) * nfev) for t in seen]
    assert attack_solves(list(tasks.values())) == expected
    assert attack_seconds([(3, 2, 5)], 1.0) == 5 * 3 * 2**2
