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
