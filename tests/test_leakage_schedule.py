"""The leakage Monte Carlo runs pdmm-sp as a real run does (issue 29, item 8): the same
coefficients and, where a real run stops at a public round, the same stop round."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from p2pem.builders import build_graph, build_protocols, em_settings, load_data
from p2pem.leakage.montecarlo import DEFAULT_ROUNDS, analysed_schedule, monte_carlo
from p2pem.protocols import PdmmSP
from p2pem.scenario import load_scenario
from p2pem.simulate import run_protocol

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "fig1.toml"


def _setting():
    scenario = load_scenario(SCENARIO)
    graph = build_graph(scenario)
    spec = next(s for s in build_protocols(scenario) if isinstance(s, PdmmSP))
    return scenario, graph, spec


def test_the_monte_carlo_stops_where_a_real_run_stops_with_its_coefficients():
    scenario, graph, spec = _setting()
    analysed = analysed_schedule(spec, graph)
    real = run_protocol(load_data(scenario), graph, spec, em_settings(scenario), seed=0)
    # a real run stops every aggregation at its public round
    assert analysed.stop == "public round" and set(real.consensus_iterations) == {analysed.stop_round}
    mc = monte_carlo(analysed.spec, graph, np.random.default_rng(0).standard_normal((graph.number_of_nodes(), 50)), input_sd=1.0, seed=1)
    topology = spec.topology(graph)
    assert mc.last_round == analysed.rounds == analysed.stop_round and analysed.as_run
    assert analysed.spec.public_parameters(topology) == spec.public_parameters(topology)
    # never beyond it (a real run sends nothing after), fewer when asked
    assert analysed_schedule(spec, graph, analysed.stop_round + 10).rounds == analysed.stop_round
    assert analysed_schedule(spec, graph, 2).rounds == 2 and analysed_schedule(spec, graph, 2).spec.tol == spec.tol


def test_an_adaptive_stop_is_analysed_for_a_fixed_number_of_rounds_and_says_so():
    _, graph, spec = _setting()
    adaptive = dataclasses.replace(spec, stop="adaptive")
    analysed = analysed_schedule(adaptive, graph)
    assert analysed.stop == "adaptive" and analysed.stop_round is None and analysed.rounds == DEFAULT_ROUNDS
    assert analysed.spec.tol == 0.0 and "depends on the data" in analysed.describe()
    topology = spec.topology(graph)
    assert analysed.as_run == (analysed.spec.public_parameters(topology) == adaptive.public_parameters(topology))
