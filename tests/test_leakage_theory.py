"""Tests of p2pem.leakage.theory: closed forms by design and topology warnings."""

from __future__ import annotations

import math

import networkx as nx
import pytest

from p2pem.graphs import graph_from_edges
from p2pem.leakage.closed_forms import sum_leakage_bits
from p2pem.leakage.theory import closed_form_bits, describe_group, disclosed_groups, topology_report
from p2pem.leakage.views import Adversary
from p2pem.messages import SERVER
from p2pem.registry import make_protocol

FIG1_EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (2, 4)]


@pytest.fixture
def fig1() -> nx.Graph:
    return graph_from_edges(FIG1_EDGES)


def _groups(name: str, graph: nx.Graph, adversary: Adversary, **params):
    spec = make_protocol(name, params)
    return disclosed_groups(spec, spec.topology(graph), graph, adversary)


def test_topology_report_fig1(fig1: nx.Graph) -> None:
    rep = topology_report(fig1, [1, 3, SERVER])
    assert rep.corrupt == (1, 3)
    assert rep.components == ((0, 2, 4),)
    assert rep.isolated == ()
    assert rep.warnings() == []
    assert rep.summary(lambda i: str(i + 1)) == "honest component: {1, 3, 5}"


def test_topology_warnings_name_isolated_nodes_and_components() -> None:
    # A path 0-1-2-3-4 plus chord 0-2: corrupting 1 and 3 leaves 4 without honest neighbours.
    g = graph_from_edges([(0, 1), (1, 2), (2, 3), (3, 4), (0, 2)])
    rep = topology_report(g, [1, 3])
    assert rep.isolated == (4,)
    assert rep.components == ((0, 2), (4,))
    warnings = rep.warnings(lambda i: f"n{i}")
    assert any("honest node n4 has no honest neighbour" in w for w in warnings)
    assert any("2 components" in w and "{n0, n2}" in w and "{n4}" in w for w in warnings)
    assert all("\n" not in w for w in warnings)


def test_fig1_closed_forms(fig1: nx.Graph) -> None:
    hbc = Adversary("honest-but-curious", frozenset({1, 3, SERVER}))
    clients_only = Adversary("honest-but-curious", frozenset({1, 3}))
    assert _groups("federated", fig1, hbc) == [(0,), (2,), (4,)]
    assert _groups("federated", fig1, clients_only) == [(0, 2, 4)]
    assert sorted(_groups("secure-sum", fig1, hbc)) == [(0, 4), (2,)]
    assert _groups("pdmm-sp", fig1, hbc) == [(0, 2, 4)]
    groups = _groups("pdmm-sp", fig1, hbc)
    assert closed_form_bits(groups, 0) == pytest.approx(0.5 * math.log2(3 / 2))
    assert describe_group(groups, 0, lambda i: str(i + 1)) == "I(X1; X1+X3+X5)"
    assert closed_form_bits(_groups("secure-sum", fig1, hbc), 2) == math.inf
    assert describe_group(_groups("secure-sum", fig1, hbc), 2) == "full disclosure"
    assert closed_form_bits(_groups("secure-sum", fig1, hbc), 0) == pytest.approx(0.5)


def test_eavesdropper_closed_forms(fig1: nx.Graph) -> None:
    eve = Adversary("eavesdropper")
    everyone = [(0, 1, 2, 3, 4)]
    assert _groups("pdmm-sp", fig1, eve) == everyone
    assert _groups("secure-sum", fig1, eve) == everyone
    assert _groups("federated", fig1, eve) == [(i,) for i in range(5)]
    assert _groups("pdmm-sp", fig1, eve, encrypt_duals=False) == [(i,) for i in range(5)]
    # Plaintext duals do not matter to corrupt nodes that do not eavesdrop.
    hbc = Adversary("honest-but-curious", frozenset({1, 3}))
    assert _groups("pdmm-sp", fig1, hbc, encrypt_duals=False) == [(0, 2, 4)]
    assert closed_form_bits(everyone, 3) == pytest.approx(sum_leakage_bits(5))


def test_secure_sum_arcs_wrap_past_the_initiator() -> None:
    ring = nx.cycle_graph(7)
    adversary = Adversary("honest-but-curious", frozenset({2, 5}))
    groups = _groups("secure-sum", ring, adversary)
    assert sorted(groups) == [(0, 1, 6), (3, 4)]
    assert closed_form_bits(groups, 6) == pytest.approx(sum_leakage_bits(3))
    assert closed_form_bits(groups, 2) == 0.0  # a corrupt node is in no group
