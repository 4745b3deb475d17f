"""The leakage analysis respects the scenario: its data, its protocols, its size.

Tests of p2pem.leakage.inputs (the scenario's own rows, or the paper's Gaussian model),
p2pem.leakage.plan (skipped protocols, default targets, the run-time estimate) and the
readable figure of p2pem.leakage.plots, each through the command where a user meets it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from p2pem.cli import main
from p2pem.errors import ConfigError, DataError
from p2pem.leakage.closed_forms import group_sum_leakage_bits
from p2pem.leakage.config import DEFAULT_MAX_TARGETS, LEAKAGE_KEYS, parse_leakage
from p2pem.leakage.montecarlo import make_adversary, monte_carlo, monte_carlo_spec
from p2pem.leakage.plan import _prefix_ranks, default_targets, plan_analysis, prepare_protocols
from p2pem.leakage.reduce import principal_components
from p2pem.leakage.views import build_view
from p2pem.builders import load_data
from p2pem.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent

#: A CSV of small integers: every input the analysis draws from it is 1/K times a sum of them.
COLUMN = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] * 4


def _csv_scenario(tmp_path: Path, *, protocols: str = '[[protocols]]\nname = "secure-sum"\n\n[[protocols]]\nname = "pdmm-sp"\n',
                  leakage: str = "corrupt = [1, 3]\nruns = 400\nrounds = 3\n", nodes: int = 5, scale: float = 1.0) -> Path:
    rng = np.random.default_rng(0)
    rows = [f"{scale * x:g},{rng.standard_normal():.6f}" for x in COLUMN]
    csv = tmp_path / ("site.csv" if scale == 1.0 else f"site{scale:g}.csv")
    csv.write_text("count,noise\n" + "\n".join(rows) + "\n")
    edges = [[i, (i + 1) % nodes] for i in range(nodes)] + [[0, 2]]
    path = tmp_path / f"own{scale:g}.toml"
    path.write_text(f"""name = "own"
seed = 5

[data]
source = "csv"
path = "{csv.name}"
split = "random"

[graph]
kind = "edges"
edges = {edges}

[em]
n_components = 2

{protocols}
[[protocols]]
name = "centralized"

[leakage]
{leakage}""")
    return path


# ------------------------------------------------------------------------ inputs


def test_the_command_on_a_csv_scenario_uses_that_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _csv_scenario(tmp_path)
    out = tmp_path / "out"
    assert main(["leakage", str(path), "--out", str(out), "-q"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"inputs: the scenario's data \(site\.csv, 40 rows, feature 0 of 2, of largest spread\)", printed)
    summary = json.loads((out / "summary.json").read_text())
    inputs = summary["inputs"]
    parts = load_data(load_scenario(path))
    assert inputs["kind"] == "data" and inputs["feature"] == 0 and inputs["rows_per_node"] == [len(p) for p in parts]

    # every input is 1/K times a sum of n_i values of the CSV column (integers here): 2 x input is an
    # integer in [0, 9 n_i], which N(0, 1) draws would not be
    plan = plan_analysis(load_scenario(path), estimate=False)
    doubled = 2 * plan.inputs.values
    assert np.array_equal(doubled, np.round(doubled))
    for i, p in enumerate(parts):
        assert doubled[i].min() >= 0 and doubled[i].max() <= 9 * len(p)
        # the mean over runs is r n_i mean(column): |error| < 6 standard errors fails with probability < 2e-9
        se = plan.inputs.sd[i] / math.sqrt(plan.inputs.values.shape[1])
        assert abs(plan.inputs.values[i].mean() - 0.5 * len(p) * np.mean(COLUMN)) < 6 * se
        assert plan.inputs.sd[i] == pytest.approx(0.5 * np.std(COLUMN) * math.sqrt(len(p)), rel=1e-12)

    # the floors are those of inputs of the nodes' own variances (sums of different numbers of rows)
    runs = json.loads((out / "leakage.json").read_text())["runs"]
    ring = next(p for p in summary["protocols"] if p["protocol"] == "secure-sum")
    variances = [len(p) for p in parts]  # proportional to the nodes' variances
    for r in (r for r in runs if r["protocol"] == "secure-sum" and r["floor_bits"] is not None):
        group = next(g for g in ring["arcs"]["honest-but-curious"] if r["node"] in g)
        expected = group_sum_leakage_bits([variances[j] for j in group], group.index(r["node"]))
        assert r["floor_bits"] == pytest.approx(expected, rel=1e-12)
        assert r["exact_bits"][-1] == pytest.approx(expected, abs=1e-6)  # the exact value agrees


def test_the_data_sets_the_scale_pdmm_perturbation_acts_on(tmp_path: Path) -> None:
    # linear protocol, same seeds: the CSV scaled by 10 leaks exactly what the CSV leaks at a
    # perturbation 10 times smaller, so the analysis reads the values of the CSV, not a model
    one = _csv_scenario(tmp_path, protocols='[[protocols]]\nname = "pdmm-sp"\nperturbation_std = 0.5\n')
    ten = _csv_scenario(tmp_path, protocols='[[protocols]]\nname = "pdmm-sp"\nperturbation_std = 5.0\n', scale=10.0)
    exact = []
    for path in (one, ten):
        plan = plan_analysis(load_scenario(path), estimate=False)
        p = plan.protocols[0]
        mc = monte_carlo(monte_carlo_spec(p.spec, 3), plan.graph, plan.inputs.values, input_sd=plan.inputs.sd, seed=3)
        view = build_view(mc.trace, make_adversary("honest-but-curious", plan.config), inputs=mc.inputs, outputs=mc.outcome.results)
        from p2pem.leakage.reduce import exact_linear_mi

        exact.append(exact_linear_mi(mc.latents, mc.latent_sd, view.features, list(plan.config.targets)))
    assert exact[0] is not None and exact[1] is not None
    np.testing.assert_allclose(exact[1], exact[0], rtol=1e-6)
    assert max(exact[0]) > 0.5  # a perturbation of 0.5 against sums of 8 values of spread 2.9: visible


def test_gaussian_inputs_say_so_and_ignore_the_rows(tmp_path: Path) -> None:
    path = _csv_scenario(tmp_path, leakage='inputs = "gaussian"\ncorrupt = [1, 3]\nruns = 400\nrounds = 2\n')
    plan = plan_analysis(load_scenario(path), estimate=False)
    assert plan.inputs.kind == "gaussian" and "the scenario's rows are not used" in plan.inputs.description
    assert np.all(plan.inputs.sd == 0.5)


@pytest.mark.parametrize(
    ("leakage", "error", "message"),
    [
        ('inputs = "csv"\ncorrupt = [1]\n', ConfigError, "'leakage.inputs' must be one of 'data', 'gaussian', got 'csv'"),
        ('inputs = "gaussian"\nfeature = 1\ncorrupt = [1]\n', ConfigError, "'leakage.feature' needs inputs = \"data\""),
        ("feature = 2\ncorrupt = [1]\n", DataError, "'leakage.feature' = 2, but the prepared data has 2 features (0..1)"),
        ("feature = -1\ncorrupt = [1]\n", ConfigError, "'leakage.feature' must be >= 0"),
        ('targets = "some"\ncorrupt = [1]\n', ConfigError, "'leakage.targets' must be an array of node ids or \"all\""),
    ],
)
def test_bad_leakage_keys_are_one_line_errors(tmp_path: Path, leakage: str, error: type, message: str) -> None:
    path = _csv_scenario(tmp_path, leakage=leakage)
    with pytest.raises(error) as info:
        plan_analysis(load_scenario(path), estimate=False)
    assert str(info.value).startswith(str(path)) and message in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------------ protocols


def test_skipped_protocols_are_named_with_their_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    protocols = ('[[protocols]]\nname = "pdmm-sp"\nmode = "async"\n\n[[protocols]]\nname = "dp-central"\nbound = 10.0\n\n'
                 '[[protocols]]\nname = "secure-sum"\n')
    path = _csv_scenario(tmp_path, protocols=protocols, leakage="corrupt = [1, 3]\nruns = 300\nrounds = 1\n")
    out = tmp_path / "out"
    assert main(["leakage", str(path), "--out", str(out), "-q"]) == 0
    printed = capsys.readouterr().out
    skipped = json.loads((out / "summary.json").read_text())["skipped"]
    assert [s["protocol"] for s in skipped] == ["pdmm-sp", "dp-central", "centralized"]
    for s in skipped:
        assert f"  skipped {s['label']}: {s['reason']}" in printed
    assert "mode = 'sync'" in skipped[0]["reason"] and "epsilon" in skipped[1]["reason"] and "pools" in skipped[2]["reason"]
    assert {r["protocol"] for r in json.loads((out / "leakage.json").read_text())["runs"]} == {"secure-sum"}


def test_nothing_left_to_analyse_is_one_line_naming_the_skips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _csv_scenario(tmp_path, protocols="")
    assert main(["leakage", str(path), "--out", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("p2pem: error: ") and "no network protocol to analyse (centralized it pools" in err and "\n" not in err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ targets


def test_default_targets_on_a_large_graph_are_the_most_exposed_and_the_farthest() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "fig1.toml")
    g = nx.cycle_graph(30)
    g.add_edges_from([(i, i + 2) for i in range(0, 28, 2)])
    # node 10's only neighbours are 9 and 11, both corrupt: pdmm-sp discloses its input
    g.remove_edges_from([(8, 10), (10, 12)])
    assert sorted(g.neighbors(10)) == [9, 11]
    corrupt = (9, 11)
    cfg = dataclasses.replace(parse_leakage(scenario), corrupt=corrupt, targets=(), node_labels=())
    edges = [list(e) for e in g.edges]
    scenario = dataclasses.replace(scenario, graph=dataclasses.replace(scenario.graph, edges=edges, n_nodes=30))
    prepared = prepare_protocols(scenario, cfg, g)
    chosen, note = default_targets(g, cfg, prepared)
    assert len(chosen) == DEFAULT_MAX_TARGETS and note.startswith(f"{DEFAULT_MAX_TARGETS} of 28 honest nodes")
    assert 10 in chosen  # disclosed by design: the most exposed
    distance = nx.multi_source_dijkstra_path_length(g, set(corrupt))
    farthest = max(distance[i] for i in g if i not in corrupt)
    assert any(distance[i] == farthest for i in chosen)
    assert not set(chosen) & set(corrupt)
    # few honest nodes: every one of them
    small = nx.cycle_graph(6)
    assert default_targets(small, cfg, []) == ((0, 1, 2, 3, 4, 5), "every honest node")


def test_targets_from_the_option_the_key_and_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _csv_scenario(tmp_path, nodes=9, leakage="corrupt = [1]\nruns = 300\nrounds = 1\n")
    plan = plan_analysis(load_scenario(path), estimate=False)
    assert len(plan.config.targets) == DEFAULT_MAX_TARGETS and plan.targets_note.startswith("6 of 8 honest nodes")
    out = tmp_path / "all"
    assert main(["leakage", str(path), "--out", str(out), "--targets", "all", "-q"]) == 0
    assert json.loads((out / "summary.json").read_text())["settings"]["targets"] == [0, 2, 3, 4, 5, 6, 7, 8]
    assert "targets (--targets): 0, 2, 3, 4, 5, 6, 7, 8" in capsys.readouterr().out
    keyed = _csv_scenario(tmp_path, nodes=9, leakage='corrupt = [1]\ntargets = "all"\nruns = 300\n')
    assert parse_leakage(load_scenario(keyed)).targets == (0, 2, 3, 4, 5, 6, 7, 8)
    for bad, message in (("0,99", "--targets holds 99, not a node id 0..8"), ("1", "--targets names corrupt node 1"),
                         ("a,b", "--targets must be 'all' or comma-separated node ids")):
        assert main(["leakage", str(path), "--out", str(tmp_path / "bad"), "--targets", bad, "-q"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert main(["leakage", str(path), "--out", str(tmp_path / "bad"), "--targets", "0", "--whole-run", "-q"]) == 2
    assert "--targets applies to the Monte Carlo analysis" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


# ------------------------------------------------------------------------ run time


def test_the_run_time_estimate_counts_the_work_and_is_printed_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    argv = ["leakage", str(ROOT / "scenarios" / "fig1.toml"), "--out", str(out), "--runs", "300", "--rounds", "2", "-q"]
    assert main(argv) == 0
    assert "estimated run time" not in capsys.readouterr().out  # not on a terminal
    summary = json.loads((out / "summary.json").read_text())
    runs = json.loads((out / "leakage.json").read_text())["runs"]
    # one estimate per target and distinct view: every iteration for pdmm-sp, once for an exact protocol
    distinct = sum(len(r["rounds"]) if r["protocol"] == "pdmm-sp" else 1 for r in runs)
    assert summary["estimate"]["estimates"] == distinct and summary["estimate"]["seconds"] > 0
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert main([*argv[:3], str(tmp_path / "tty"), *argv[4:]]) == 0
    printed = capsys.readouterr().out
    assert re.search(rf"estimated run time: (about \d+ s|less than a second) \({distinct} estimates on 4 views of 300 runs\)", printed)
    assert printed.index("estimated run time") < printed.index("KSG bits")


def test_prefix_ranks_equal_the_principal_components_of_every_round() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "fig1_eavesdropper.toml")
    plan = plan_analysis(scenario, estimate=False)
    g, n = plan.graph, plan.graph.number_of_nodes()
    for p in plan.protocols:
        spec = monte_carlo_spec(p.spec, 6)
        mc = monte_carlo(spec, g, np.random.default_rng(0).standard_normal((n, n + 2 * g.number_of_edges() + 16)), input_sd=1.0, seed=1)
        for kind in plan.config.adversaries:
            has_server = p.spec.name == "federated"
            view = build_view(mc.trace, make_adversary(kind, plan.config, has_server=has_server), inputs=mc.inputs, outputs=mc.outcome.results)
            rank = _prefix_ranks(view.features, view.rounds)
            for t in [None, *range(1, 7)]:
                assert rank(t) == principal_components(view.until(t)).shape[1], (p.label, kind, t)


# ------------------------------------------------------------------------ figure


@pytest.mark.parametrize(
    ("n_adversaries", "n_nodes", "curves"), [(1, 3, True), (2, 3, True), (1, 6, True), (3, 4, True), (1, 28, False), (3, 80, False)]
)
def test_the_figure_stays_within_a_screenful(tmp_path: Path, n_adversaries: int, n_nodes: int, curves: bool) -> None:
    from matplotlib.image import imread

    from p2pem.leakage import plots
    from p2pem.leakage.report import LeakageRun

    rng = np.random.default_rng(0)
    runs = []
    for adv in ("honest-but-curious", "eavesdropper", "both")[:n_adversaries]:
        for protocol in ("pdmm-sp", "secure-sum"):
            for node in range(n_nodes):
                bits = tuple(float(v) for v in rng.uniform(0.01, 1.0, 5))
                runs.append(LeakageRun(protocol, adv, (), node, str(node), (1, 2, 3, 4, 5), bits, tuple((b / 2, 2 * b) for b in bits),
                                       bits, bits, 0.3, "floor", label=protocol))
    path = tmp_path / "leakage.png"
    plots.leakage_figure(runs, path, title="t", ceiling_bits=11.0)
    height, width = imread(path).shape[:2]
    assert width <= 1920 and height <= 1200, (width, height)
    # curves against iteration per (adversary, node) while they fit, the leakage per node beyond
    assert (plots.grid_layout(n_adversaries, n_nodes) is not None) == curves


# ------------------------------------------------------------------------ docs


def test_every_leakage_key_is_documented() -> None:
    from p2pem.leakage.wholerun_analysis import WHOLE_RUN_KEYS

    text = (ROOT / "docs" / "scenarios.md").read_text()
    section = text[text.index("## The `[leakage]` table"):]
    for key in LEAKAGE_KEYS:
        assert f"`{key}`" in section, key
    for key in WHOLE_RUN_KEYS:
        assert f"`{key}`" in section, key
