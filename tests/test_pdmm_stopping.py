"""pdmm-sp's one stopping rule (p2pem.protocols.pdmm.stopping.StopRule): all nodes at once against
each node on its own, and the stop round against the rule's definition."""

from __future__ import annotations

import numpy as np
import pytest

from p2pem.graphs import geometric_graph
from p2pem.protocols import Topology
from p2pem.protocols.pdmm.device import NeighbourMin
from p2pem.protocols.pdmm.stopping import NEVER, StopRule

TOL = 1e-10


def _round_inputs(settled: np.ndarray):
    """x, x_prev, nb_sum, degree for which exactly the nodes flagged in ``settled`` pass the settle test."""
    n = settled.size
    x = np.ones((n, 3))
    x_prev = x + np.where(settled, 0.0, 1.0)[:, None]
    degree = np.full((n, 1), 4.0)
    return x, x_prev, degree * x, degree


def _run(topo: Topology, flags: np.ndarray, max_iter: int, settle_after: int):
    """The batch rule and one rule per node, fed the same settle flags round by round."""
    n = topo.n_nodes
    ecc = topo.eccentricity
    batch = StopRule(ecc, tol=TOL, max_iter=max_iter, settle_after=settle_after, n_nodes=n)
    nodes = [StopRule(int(ecc[i]), tol=TOL, max_iter=max_iter, settle_after=settle_after) for i in range(n)]
    nb_min = NeighbourMin(topo, np, True)
    nbrs = topo.neighbours
    for t in range(1, max_iter + 1):
        x, x_prev, nb_sum, degree = _round_inputs(flags[t - 1])
        # what round t's broadcasts carried: every node's state before round t
        g_sent = [rule.g for rule in nodes]
        stop_sent = [rule.stop_at for rule in nodes]
        assert np.array_equal(batch.g, g_sent) and np.array_equal(batch.stop_at, stop_sent)
        g_nb = [min(g_sent[j] for j in nbrs[i]) for i in range(n)]
        stop_nb = [min(stop_sent[j] for j in nbrs[i]) for i in range(n)]
        done = [rule.advance(t, x[i], x_prev[i], nb_sum[i], degree[i],
                             lambda g, m=g_nb[i]: min(g, m), lambda s, m=stop_nb[i]: min(s, m))
                for i, rule in enumerate(nodes)]
        batch_done = batch.advance(t, x, x_prev, nb_sum, degree, nb_min, nb_min)
        assert all(d == batch_done for d in done)
        if batch_done:
            assert all(rule.converged == batch.converged for rule in nodes)
            return t, batch.converged
    raise AssertionError("max_iter reached without stopping")


@pytest.mark.parametrize("seed", range(4))
def test_batch_rule_is_every_node_s_rule_and_stops_when_all_were_settled_long_enough(seed):
    topo = Topology.from_graph(geometric_graph(40, seed=seed))
    rng = np.random.default_rng(seed)
    rounds, settle_from = 120, 30
    # unsettled at random until round settle_from, settled from then on
    flags = rng.random((rounds, 40)) < 0.7
    flags[settle_from - 1:] = True
    t, converged = _run(topo, flags, rounds, settle_after=3)
    assert converged
    # the rule stops at t* + e_i for the first round t* at which some node i's counter exceeds
    # e_i, i.e. every node within distance d < e_i + 1 was settled in rounds t* - e_i .. t* - d
    dist = np.array([[len(p) - 1 for p in row] for row in _paths(topo)])
    ecc = topo.eccentricity

    def counter_exceeds(i, s):
        return all(flags[r - 1, j] for j in range(40) for r in range(max(s - ecc[i], 1), s - dist[i, j] + 1)) and s - ecc[i] > 3

    proposals = [s + ecc[i] for s in range(1, rounds + 1) for i in range(40) if counter_exceeds(i, s)]
    assert t == min(proposals)


def test_the_rule_waits_for_max_iter_and_says_so():
    topo = Topology.from_graph(geometric_graph(30, seed=1))
    flags = np.ones((25, 30), dtype=bool)
    flags[:, 7] = False  # one node never settles
    t, converged = _run(topo, flags, 25, settle_after=1)
    assert t == 25 and not converged


def test_asynchronous_counting_stops_after_the_diameter_or_with_a_neighbour():
    rule = StopRule(3, tol=TOL, max_iter=100)
    x = np.ones(2)
    assert not rule.advance_async(1, x, None, [x, x], [0, 0], False)  # no previous broadcast yet
    for t in range(2, 5):
        assert not rule.advance_async(t, x, x, [x, x], [9, 9], False) and rule.g == t - 1
    assert rule.advance_async(5, x, x, [x, x], [9, 9], False) and rule.converged and rule.g == 4
    other = StopRule(3, tol=TOL, max_iter=100)
    assert other.advance_async(1, x, x, [x + 1.0, x], [0, 0], True) and other.converged and other.g == 0
    assert StopRule(3, tol=TOL, max_iter=100).stop_at == NEVER


def _paths(topo: Topology):
    import networkx as nx

    g = nx.Graph()
    g.add_edges_from((i, j) for i, nb in enumerate(topo.neighbours) for j in nb)
    lengths = dict(nx.all_pairs_shortest_path(g))
    return [[lengths[i][j] for j in range(topo.n_nodes)] for i in range(topo.n_nodes)]


# ------------------------------------------------------------------ the public stop round


def _aggregate(spec, topo, values, seed=3):
    from p2pem.simulate import protocol_streams

    return spec.aggregate(values, topo, protocol_streams(seed, topo.n_nodes), 1, record=True)


@pytest.mark.parametrize("n", [12, 20, 60, 450])
def test_a_bounded_polynomial_stops_every_node_at_its_public_round_on_the_average(n):
    """Up to 400 nodes the polynomial runs on the whole spectrum, above on the lowest
    eigenvalues and a grid checked 8 times finer: one round after its last root x is the
    average (to 1e-11 of the largest entry, a tenth of the stopping tolerance), so every node
    stops there, announcing no counter and no stop round; the counters' rule ("adaptive") gets
    the same average in more rounds."""
    from p2pem.protocols.pdmm import PdmmSP

    topo = Topology.from_graph(geometric_graph(n, seed=n))
    values = np.random.default_rng(n).normal(size=(n, 7)) * np.logspace(0, 3, 7)
    mean = values.mean(axis=0)
    params = PdmmSP().resolved_params(topo)
    assert params["accel"] == "polynomial" and params["stop_round"] == params["special_rounds"] + 1
    fixed = _aggregate(PdmmSP(), topo, values)
    adaptive = _aggregate(PdmmSP(stop="adaptive"), topo, values)
    assert fixed.converged and adaptive.converged
    assert fixed.rounds == params["stop_round"] < adaptive.rounds
    for out in (fixed, adaptive):
        assert np.max(np.abs(out.results - mean) / np.abs(mean).max()) < 1e-11
    primals = [m for m in fixed.trace if m.kind == "primal"]
    assert {m.meta for m in primals} == {(0, NEVER)} and max(m.round for m in primals) == params["stop_round"]
    assert any(m.meta != (0, NEVER) for m in adaptive.trace if m.kind == "primal")


def test_with_a_public_stop_round_a_member_can_announce_no_counter_stop_or_later_round():
    """What an honest node sends is fixed by the graph: a counter, a stop round or a round past
    the public one convicts the sender, and no stop proposal is ever plausible."""
    from p2pem.messages import Message
    from p2pem.protocols.base import NodeContext, ProtocolViolation
    from p2pem.simulate import protocol_streams
    from p2pem.protocols.pdmm import PdmmSP

    topo = Topology.from_graph(geometric_graph(20, seed=20))
    spec = PdmmSP()
    stop = spec.resolved_params(topo)["stop_round"]
    node = spec.node_aggregation(NodeContext(0, topo, protocol_streams(1, 20)[0]), 1)
    node.start(np.ones(3))
    j = topo.neighbours[0][0]

    def primal(t, meta):
        return Message(j, topo.neighbours[j], 1, t, "primal", np.ones(3), False, meta)

    node.check(primal(stop, (0, NEVER)))
    for t, meta in [(5, (1, NEVER)), (5, (0, 5 + topo.diameter - 1)), (stop + 1, (0, NEVER))]:
        with pytest.raises(ProtocolViolation, match="public stop round"):
            node.check(primal(t, meta))
    assert node.check_proposal(j, stop - 1, stop - 1 + int(topo.eccentricity[j]))[0] == "form"


def test_adaptive_tol_0_or_a_polynomial_not_checked_below_target_leaves_the_stop_to_the_counters(monkeypatch):
    from p2pem.protocols.pdmm import PdmmSP, schedules

    small = Topology.from_graph(geometric_graph(30, seed=1))
    assert PdmmSP(stop="adaptive").resolved_params(small)["stop_round"] is None
    assert PdmmSP(tol=0.0, max_iter=200).resolved_params(small).get("stop_round") is None
    with pytest.raises(Exception, match="stop must be 'auto' or 'adaptive'"):
        PdmmSP(stop="never")
    large = Topology.from_graph(geometric_graph(450, seed=1))
    assert PdmmSP().resolved_params(large)["stop_round"] is not None
    # where the finer grid finds the polynomial above its target, the counters decide
    monkeypatch.setattr(schedules, "BOUND_SLACK", 1e-6)
    again = Topology.from_graph(geometric_graph(450, seed=1))
    assert PdmmSP().resolved_params(again)["stop_round"] is None
    assert PdmmSP().aggregate(np.ones((450, 2)), again, np.random.default_rng(0).spawn(450), 1).converged
