"""Whole-run views of differentially private runs: exact reduction, the noise model, the attack."""

from __future__ import annotations

import dataclasses
import math

import networkx as nx
import numpy as np
import pytest

from p2pem.data import split_rows, synthetic_mixture
from p2pem.em import EMSettings
from p2pem.leakage.attack import _Equations, match_rows, reconstruct_rows
from p2pem.leakage.views import Adversary
from p2pem.leakage.wholerun import record_whole_run
from p2pem.messages import SERVER
from p2pem.registry import make_protocol
from p2pem.simulate import run_protocol

BOUND = 4.0


@pytest.fixture(scope="module")
def setting():
    """The Fig. 1 graph of Li et al. (five nodes, three rows each); nodes 1 and 3 corrupt."""
    rng = np.random.default_rng(5)
    X, _, _ = synthetic_mixture(15, n_features=2, n_components=2, separation=3.0, rng=rng)
    parts = split_rows(X, 5, how="even", rng=rng)
    g = nx.Graph([(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (2, 4)])
    settings = EMSettings(2, max_iter=6, tol=0.0, init_seed=3)
    return parts, g, settings, Adversary("honest-but-curious", frozenset({1, 3}))


def _spec(aggregation: str, epsilon: float, **extra):
    if aggregation == "central":
        return make_protocol("dp-central", {"epsilon": epsilon, "bound": BOUND, **extra})
    return make_protocol("dp-distributed", {"aggregation": aggregation, "epsilon": epsilon, "bound": BOUND, "tolerate": 2, **extra})


@pytest.mark.parametrize("aggregation", ["pdmm-sp", "secure-sum", "central"])
def test_the_reduction_of_a_private_run_is_exact_and_the_run_is_the_simulators(setting, aggregation):
    parts, g, settings, adv = setting
    spec = _spec(aggregation, 1.0)
    advs = [adv, Adversary("honest-but-curious", frozenset({1, 3, SERVER}))] if aggregation == "central" else [adv]
    views = record_whole_run(parts, g, spec, settings, advs, seed=7)
    run = run_protocol(parts, g, spec, settings, seed=7)
    for view in views:
        # the groups' sums of (statistics + noise shares), from the observed messages alone
        assert float(view.reduction_error().max()) < 1e-9
        # the same run as run_protocol's (the view holds the first corrupt node's model: pdmm-sp's
        # nodes differ from node 0's by the consensus tolerance, the exact protocols' not at all)
        np.testing.assert_allclose(view.final.means, run.means, rtol=0 if aggregation != "pdmm-sp" else 1e-9)
        assert view.data_bound == BOUND and view.iterations == list(range(0, settings.max_iter + 1))
    if aggregation == "central":
        assert views[1].groups == ((0,), (2,), (4,))  # a corrupt aggregator reads every upload


@pytest.mark.parametrize("aggregation", ["pdmm-sp", "secure-sum"])
def test_whitened_residual_at_the_true_rows_is_unit_noise(setting, aggregation):
    """The attack's equations for a private view (released coordinates, whitened by the noise of
    the group's shares): at the true clipped rows every residual is one standard normal draw."""
    parts, g, settings, adv = setting
    view = record_whole_run(parts, g, _spec(aggregation, 2.0), settings, [adv], seed=3)[0]
    residuals = []
    for k, group in enumerate(view.groups):
        rows = np.clip(np.vstack([parts[i] for i in group]), -BOUND, BOUND)
        eq = _Equations(view.observations(k, settings.max_iter))
        residuals.append(eq(rows)[0] - eq.target)
    r = np.concatenate(residuals)
    # mean of r^2: 1 with standard error sqrt(2 / N); N = hundreds of equations
    assert abs(float(np.mean(r * r)) - 1.0) < 5 * math.sqrt(2 / r.size)
    assert abs(float(np.mean(r))) < 5 / math.sqrt(r.size)


def test_noise_decides_what_the_attack_recovers(setting):
    """Without noise the released coordinates still pin a disclosed group's rows down (the
    transform is right); at epsilon = 0.1 nothing is recovered and the error is of the data's size."""
    parts, g, settings, adv = setting
    settings = dataclasses.replace(settings, max_iter=10)
    out = {}
    for eps in (math.inf, 0.1):
        view = record_whole_run(parts, g, _spec("secure-sum", eps), settings, [adv], seed=3)[0]
        k = next(i for i, grp in enumerate(view.groups) if len(grp) == 1)  # node 2: both ring neighbours corrupt
        rows = np.clip(np.vstack([parts[i] for i in view.groups[k]]), -BOUND, BOUND)
        fit = reconstruct_rows(view.observations(k, settings.max_iter), len(rows), rng=np.random.default_rng(0), starts=6, max_nfev=400)
        out[eps] = match_rows(rows, fit.rows)
    assert np.all(out[math.inf] < 1e-6)
    assert np.all(out[0.1] > 1e-2) and float(np.sqrt(np.mean(out[0.1] ** 2))) > 0.3


def test_the_defence_scenario_cuts_off_the_components_its_docs_name():
    """scenarios/parkinsons_defence.toml: its corrupt sets leave honest components of 2, 3 and 8
    nodes beside large ones, and the default tolerate (40 of 80) covers every corrupt set."""
    from pathlib import Path

    from p2pem.leakage.wholerun_analysis import parse_whole_run
    from p2pem.builders import build_graph
    from p2pem.scenario import load_scenario

    scenario = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "parkinsons_defence.toml")
    g = build_graph(scenario)
    sizes = set()
    for corrupt in parse_whole_run(scenario).corrupt_sets:
        honest = g.subgraph(set(g.nodes) - set(corrupt))
        sizes |= {len(c) for c in nx.connected_components(honest)}
        assert len(corrupt) <= scenario.graph.n_nodes // 2
    assert {2, 3, 8} <= sizes and max(sizes) >= 60
    assert {p.params.get("tolerate") for p in scenario.protocols if p.name == "dp-distributed"} == {None}


def test_leakage_whole_run_command_takes_private_protocols(tmp_path):
    """p2pem leakage --whole-run on a scenario with dp-distributed: one record per honest node,
    the protocol's parameters in the report, a null final log-likelihood, a valid document."""
    import json
    from pathlib import Path

    from test_schemas import validate

    from p2pem.cli import main

    text = (Path(__file__).resolve().parents[1] / "scenarios" / "fig1_wholerun.toml").read_text()
    text = text.replace("max_iter = 10", "max_iter = 3\ntol = 0.0")
    head, _, rest = text.partition("[[protocols]]")
    protocols = '[[protocols]]\nname = "dp-distributed"\naggregation = "pdmm-sp"\nbound = 4.0\n\n'
    text = head + protocols + rest[rest.index("[leakage]"):]
    text = text.replace('iterations_seen = [0, 1, 2, 5, 11]', 'iterations_seen = [0, 4]')
    text = text.replace('adversary = ["honest-but-curious", "eavesdropper", "both"]', 'adversary = ["honest-but-curious"]')
    path = tmp_path / "s.toml"
    path.write_text(text)
    assert main(["leakage", str(path), "--whole-run", "--out", str(tmp_path / "out"), "-q"]) == 0
    doc = json.loads((tmp_path / "out" / "whole_run.json").read_text())
    validate(doc)
    (proto,) = doc["protocols"]
    assert proto["protocol"] == "dp-pdmm-sp-gaussian" and proto["final_loglik"] is None
    assert proto["protocol_params"]["epsilon"] == 1.0 and proto["protocol_params"]["tolerate"] is None
    hbc = [r for r in doc["runs"] if r["adversary"] == "honest-but-curious"]
    assert sorted(r["node"] for r in hbc) == [0, 2, 4]
