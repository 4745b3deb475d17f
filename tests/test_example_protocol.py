"""The architecture page's example protocol: registered by one line, it runs through both engines
and a scenario file, and fits what centralised EM fits (docs/examples/tree_sum.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from p2pem import geometric_graph, run_protocol
from p2pem.data import synthetic_mixture
from p2pem.em import EMSettings
from p2pem.registry import PROTOCOLS, make_protocol
from p2pem.runner import run_scenario
from p2pem.scenario import load_scenario
from p2pem.simulate import max_relative_difference

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tree_sum.py"


@pytest.fixture()
def tree_sum(monkeypatch):
    """The example module, registered as ``tree-sum`` (the one line a new protocol adds to the registry)."""
    spec = importlib.util.spec_from_file_location("tree_sum_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    monkeypatch.setitem(PROTOCOLS, "tree-sum", module.TreeSum)
    return module


def problem(seed: int):
    rng = np.random.default_rng(seed)
    X, _, _ = synthetic_mixture(160, n_features=2, n_components=3, rng=rng)
    parts = np.array_split(X[rng.permutation(len(X))], 16)
    return parts, geometric_graph(16, seed=seed), EMSettings(3, max_iter=12, tol=0.0, init_seed=seed)


def test_the_spanning_tree_covers_the_graph_from_node_0(tree_sum):
    from p2pem.protocols import Topology

    g = geometric_graph(30, seed=5)
    parent, children, order, height = tree_sum.spanning_tree(Topology.from_graph(g))
    assert sorted(order) == list(range(30)) and order[0] == 0 and parent[0] == -1
    assert all(g.has_edge(i, parent[i]) for i in range(1, 30))  # tree edges are graph edges
    assert sum(len(c) for c in children) == 29
    depth = {0: 0}
    for i in order[1:]:
        depth[i] = depth[parent[i]] + 1
    assert height == max(depth.values()) and all(depth[i] >= depth[parent[i]] for i in order[1:])


@pytest.mark.parametrize("seed", [0, 1])
def test_tree_sum_fits_what_centralised_em_fits_in_both_engines_bit_for_bit(tree_sum, seed):
    parts, g, settings = problem(seed)
    spec = make_protocol("tree-sum")
    ref = run_protocol(parts, g, make_protocol("centralized"), settings)
    a = run_protocol(parts, g, spec, settings, engine="vectorised", record_trace=True)
    b = run_protocol(parts, g, spec, settings, engine="messages", record_trace=True)
    assert a.n_iter == b.n_iter == 12
    assert max_relative_difference(a, ref) <= 1e-10  # only the order of the sums differs
    np.testing.assert_allclose(a.loglik, ref.loglik, rtol=1e-10)
    for key, _ in a.family.param_keys:
        assert np.array_equal(getattr(a.params, key), getattr(b.params, key))
    assert a.loglik == b.loglik and a.consensus_iterations == b.consensus_iterations
    assert (a.messages, a.bytes) == (b.messages, b.bytes) == (len(a.trace), sum(m.nbytes for m in a.trace))
    assert a.node_spread == b.node_spread == 0.0  # every node gets the root's average

    def key(m):
        return (m.iteration, m.round, m.sender, m.receivers)

    ta, tb = sorted(a.trace, key=key), sorted(b.trace, key=key)
    assert [key(m) for m in ta] == [key(m) for m in tb]
    assert all(np.array_equal(x.payload, y.payload) for x, y in zip(ta, tb, strict=True))


def test_a_scenario_names_the_registered_protocol(tree_sum, tmp_path):
    path = tmp_path / "tree.toml"
    path.write_text(
        'seed = 3\n[data]\nsource = "synthetic"\nn_samples = 90\n[graph]\nkind = "geometric"\nn_nodes = 9\nradius = 0.6\n'
        '[em]\nn_components = 2\nmax_iter = 5\n[[protocols]]\nname = "tree-sum"\n[[protocols]]\nname = "centralized"\n'
    )
    for engine in ("vectorised", "messages"):
        tree, central = run_scenario(load_scenario(path), engine=engine).runs
        assert tree.protocol == "tree-sum" and tree.n_iter == central.n_iter == 5
        assert max_relative_difference(tree, central) <= 1e-10
