"""Graphs: properties, not frozen outputs."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from p2pem.errors import GraphError
from p2pem.graphs import (
    cycle_space_dimension,
    default_radius,
    degree_report,
    geometric_graph,
    graph_from_edges,
    hamiltonian_cycle,
    require_cycle,
)


@pytest.mark.parametrize("n,seed", [(10, 0), (80, 1), (300, 2)])
def test_geometric_graph_adjacent_iff_within_radius(n, seed):
    g = geometric_graph(n, seed=seed)
    r = default_radius(n)
    assert nx.is_connected(g) and sorted(g.nodes) == list(range(n))
    pos = np.array([g.nodes[i]["pos"] for i in range(n)])
    for i, j in itertools.combinations(range(n), 2):
        assert g.has_edge(i, j) == (np.linalg.norm(pos[i] - pos[j]) <= r)


def test_geometric_graph_is_reproducible_and_seed_dependent():
    a, b, c = geometric_graph(50, seed=3), geometric_graph(50, seed=3), geometric_graph(50, seed=4)
    assert sorted(a.edges) == sorted(b.edges)
    assert sorted(a.edges) != sorted(c.edges)


def test_geometric_graph_gives_up_clearly():
    with pytest.raises(GraphError, match="increase the radius"):
        geometric_graph(40, radius=0.01, seed=0, max_tries=5)


def test_edge_list_validation():
    g = graph_from_edges([[0, 1], [1, 2], [2, 0]])
    assert g.number_of_edges() == 3
    with pytest.raises(GraphError, match="self-loop on node 1"):
        graph_from_edges([[0, 1], [1, 1]])
    with pytest.raises(GraphError, match="disconnected"):
        graph_from_edges([[0, 1], [2, 3]])
    with pytest.raises(GraphError, match="node 3 has no edge"):
        graph_from_edges([[0, 1], [1, 2]], n_nodes=4)


@pytest.mark.parametrize("n,seed", [(5, 1), (12, 2), (80, 1), (1000, 3)])
def test_hamiltonian_cycle_is_valid(n, seed):
    g = geometric_graph(n, seed=seed, radius=max(default_radius(n), 0.6 if n <= 12 else 0))
    cycle = hamiltonian_cycle(g)
    assert sorted(cycle) == list(range(n)) and cycle[0] == 0
    assert all(g.has_edge(cycle[i], cycle[(i + 1) % n]) for i in range(n))


def test_no_hamiltonian_cycle_is_reported():
    with pytest.raises(GraphError, match="exhaustive"):
        hamiltonian_cycle(nx.petersen_graph())
    with pytest.raises(GraphError, match="cut vertex"):
        hamiltonian_cycle(nx.Graph([(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 2)]))
    with pytest.raises(GraphError, match="node 3 has fewer than 2 neighbours"):
        hamiltonian_cycle(nx.Graph([(0, 1), (1, 2), (2, 0), (2, 3)]))


def _h_perp_dim_numerically(g: nx.Graph) -> int:
    edges = sorted([(i, j) for i, j in g.edges] + [(j, i) for i, j in g.edges])
    index = {e: k for k, e in enumerate(edges)}
    C = np.zeros((len(edges), g.number_of_nodes()))
    P = np.zeros((len(edges), len(edges)))
    for k, (i, j) in enumerate(edges):
        C[k, i] = 1.0 if i < j else -1.0
        P[k, index[(j, i)]] = 1.0
    return len(edges) - np.linalg.matrix_rank(np.hstack([C, P @ C]))


@pytest.mark.parametrize(
    "g",
    [nx.cycle_graph(5), nx.cycle_graph(6), nx.path_graph(6), nx.complete_graph(5), nx.petersen_graph(), geometric_graph(15, seed=2)],
    ids=["C5", "C6", "path", "K5", "petersen", "rgg15"],
)
def test_cycle_space_dimension_matches_rank(g):
    assert cycle_space_dimension(g) == _h_perp_dim_numerically(g)


def test_tree_is_refused_for_pdmm_sp():
    with pytest.raises(GraphError, match="no cycle"):
        require_cycle(nx.path_graph(6))
    require_cycle(nx.cycle_graph(6))


def test_degree_report_names_nodes():
    rep = degree_report(nx.Graph([(0, 1), (1, 2), (2, 0), (2, 3), (3, 0)]))
    assert rep.degrees == (3, 2, 3, 2)
    assert "min 2 (node 1, 3)" in rep.summary()


def test_eccentricity_bounds_are_upper_bounds_and_exact_on_small_graphs():
    import networkx as nx

    from p2pem.protocols.base import Topology, eccentricity_bounds

    small = geometric_graph(200, seed=2)
    topo = Topology.from_graph(small)
    exact = nx.eccentricity(small)
    assert topo.eccentricity.tolist() == [exact[i] for i in range(200)]
    assert topo.diameter == max(exact.values())
    big = geometric_graph(2500, seed=2)
    bt = Topology.from_graph(big)
    ptr, ind = bt.row_start.tolist() + [bt.dst.size], bt.dst
    bounds = eccentricity_bounds(np.asarray(ptr), ind)
    for v in (0, 1, 1234, 2499):
        assert bounds[v] >= nx.eccentricity(big, v)
    assert bt.diameter == bounds.max()
    assert eccentricity_bounds(np.array([0, 1, 2, 2, 2]), np.array([1, 0])) is None  # nodes 2, 3 isolated


def test_small_graph_eccentricities_equal_scipys():
    """Up to SMALL_GRAPH nodes the eccentricities come from plain BFS (no SciPy import in a node
    process); they must equal SciPy's all-pairs result, disconnected graphs included."""
    from scipy.sparse.csgraph import shortest_path

    from p2pem.protocols.base import _csr_from_lists, _small_eccentricities, _unit_csr

    rng = np.random.default_rng(7)
    for n, p in [(1, 0.5), (2, 1.0), (7, 0.3), (20, 0.25), (60, 0.05), (150, 0.03)]:
        upper = np.triu(rng.random((n, n)) < p, 1)
        adj = upper | upper.T
        ptr, ind = _csr_from_lists([np.flatnonzero(row).tolist() for row in adj])
        dist = shortest_path(_unit_csr(ptr, ind), unweighted=True)
        expected = np.max(dist, axis=1).astype(np.int64) if np.all(np.isfinite(dist)) else None
        got = _small_eccentricities(ptr, ind)
        assert (got is None and expected is None) or np.array_equal(got, expected), n


def test_node_process_imports_neither_scipy_nor_networkx():
    """A deployment starts one process per node on a shared machine: their start-up CPU adds
    up, and SciPy and networkx were most of it (step parameters of small graphs included)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import p2pem.cli, p2pem.deploy.config, p2pem.deploy.runtime, p2pem.deploy.transports.mqtt\n"
        "from p2pem.protocols.base import Topology, diameter_bound\n"
        "nbrs = ((1, 2), (0, 2), (0, 1, 3), (2,))\n"
        "assert diameter_bound(nbrs) == 2 and Topology(4, nbrs, 2).eccentricity.tolist() == [2, 2, 1, 2]\n"
        "from p2pem.protocols.pdmm import PdmmSP, step_params\n"
        "ring = Topology(6, tuple(tuple(sorted(((i - 1) % 6, (i + 1) % 6))) for i in range(6)), 3)\n"
        "assert step_params(PdmmSP(), ring, 0).schedule is not None  # the deflated default's spectrum\n"
        "print(sorted(m for m in ('scipy', 'networkx') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_topology_from_edges_matches_from_graph():
    from p2pem.protocols.base import Topology

    g = geometric_graph(150, seed=7)
    a = Topology.from_graph(g)
    b = Topology.from_edges(150, np.array(list(g.edges())))
    assert a.neighbours == b.neighbours == tuple(tuple(sorted(g.neighbors(i))) for i in range(150))
    assert a.diameter == b.diameter and (a.eccentricity == b.eccentricity).all()


def test_hamiltonian_search_refuses_unbalanced_bipartite_graphs_at_once_and_honours_its_budget() -> None:
    from p2pem.errors import GraphError
    from p2pem.graphs import _exhaustive_cycle, hamiltonian_cycle

    with pytest.raises(GraphError, match="bipartite with sides of 7 and 9 nodes"):
        hamiltonian_cycle(nx.complete_bipartite_graph(7, 9), time_budget=1.0)
    # the exhaustive search alone on K_{7,9} takes about a minute to prove there is no cycle;
    # with a budget it stops and says it did not finish
    g = nx.complete_bipartite_graph(7, 9)
    adj = [sorted(g.neighbors(v)) for v in range(16)]
    with pytest.raises(GraphError, match="within 0.2 s of exhaustive search"):
        _exhaustive_cycle(adj, 0.2)


def test_hamiltonian_heuristic_gives_up_at_its_budget_on_a_graph_without_a_cycle() -> None:
    from p2pem.errors import GraphError
    from p2pem.graphs import hamiltonian_cycle

    # K_{8,10} plus one edge inside the larger side: 2-connected, not bipartite, minimum degree
    # 8, so the cheap checks pass; but a cycle through all 10 nodes of that side needs 9 nodes
    # of the other between them (only one pair may sit side by side), so there is none and the
    # rotation-extension search (18 > 16 nodes) can only run out of its budget and say so
    g = nx.complete_bipartite_graph(8, 10)
    g.add_edge(8, 9)
    with pytest.raises(GraphError, match="no Hamiltonian cycle found within 0.2 s of search"):
        hamiltonian_cycle(g, time_budget=0.2)


def test_graph_summary_diameter_exact_then_bracketed():
    # result.json's diameter: exact up to 2000 nodes, else bounds around the true value
    import networkx as nx
    from scipy.sparse.csgraph import shortest_path

    from p2pem.runner import graph_summary

    small = geometric_graph(150, seed=2)
    gs = graph_summary(small)
    assert gs["diameter"] == nx.diameter(small) and gs["diameter_bounds"] == [gs["diameter"]] * 2
    big = geometric_graph(2100, seed=1)
    gs = graph_summary(big)
    true = int(shortest_path(nx.to_scipy_sparse_array(big, format="csr"), unweighted=True).max())
    lo, hi = gs["diameter_bounds"]
    assert gs["diameter"] is None and lo <= true <= hi
