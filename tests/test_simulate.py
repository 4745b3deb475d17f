"""End-to-end: every protocol against the centralised reference; both engines bit for bit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from p2pem import DistributedGMM, PdmmSP, geometric_graph, make_protocol, run_protocol
from p2pem.data import synthetic_mixture
from p2pem.em import EMSettings
from p2pem.errors import ConfigError, DataError, GraphError
from p2pem.builders import build_graph, em_settings
from p2pem.builders import load_data
from p2pem.scenario import load_scenario
from p2pem.simulate import max_relative_difference, relative_error

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def parkinsons():
    sc = load_scenario(ROOT / "scenarios" / "parkinsons.toml")
    return load_data(sc), build_graph(sc), em_settings(sc), sc.streams()["protocol"]


@pytest.fixture(scope="module")
def parkinsons_reference(parkinsons):
    parts, g, settings, _ = parkinsons
    return run_protocol(parts, g, make_protocol("centralized"), settings)


@pytest.mark.parametrize("name,tol", [("secure-sum", 1e-12), ("federated", 1e-12), ("pdmm-sp", 1e-8)])
def test_parkinsons_protocols_equal_reference(parkinsons, parkinsons_reference, name, tol):
    parts, g, settings, seed = parkinsons
    run = run_protocol(parts, g, make_protocol(name), settings, seed=seed)
    ref = parkinsons_reference
    assert run.n_iter == ref.n_iter == 100 and len(run.loglik) == 101
    assert max_relative_difference(run, ref) <= tol
    np.testing.assert_allclose(run.loglik, ref.loglik, rtol=tol)
    assert np.all(np.diff(run.loglik) >= -1e-9)
    assert run.node_spread <= tol
    assert not run.unconverged_iterations


def test_parkinsons_async_equals_reference(parkinsons, parkinsons_reference):
    parts, g, settings, seed = parkinsons
    short = dataclasses.replace(settings, max_iter=2)
    ref = run_protocol(parts, g, make_protocol("centralized"), short)
    run = run_protocol(parts, g, PdmmSP(mode="async"), short, seed=seed)
    assert run.n_iter == 2 and max_relative_difference(run, ref) <= 1e-8


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "protocol,tol",
    [
        ("secure-sum", 1e-12),
        ("federated", 1e-12),
        (PdmmSP(), 1e-8),
        (PdmmSP(theta=0.5, c=0.3), 1e-8),
        (PdmmSP(accel="deflated"), 1e-8),
        (PdmmSP(mode="async"), 1e-8),
        (PdmmSP(mode="async", theta=0.5), 1e-8),
    ],
    ids=["secure-sum", "federated", "pdmm-sync", "admm-sync", "pdmm-deflated", "pdmm-async", "admm-async"],
)
def test_synthetic_mixtures_equal_reference(seed, protocol, tol):
    rng = np.random.default_rng(100 + seed)
    n_nodes = 12
    X, _, _ = synthetic_mixture(150, n_features=2, n_components=3, rng=rng)
    parts = np.array_split(X[rng.permutation(len(X))], n_nodes)
    g = geometric_graph(n_nodes, seed=seed, radius=0.7)
    settings = EMSettings(3, max_iter=15, tol=0.0, init_seed=seed)
    ref = run_protocol(parts, g, make_protocol("centralized"), settings)
    run = run_protocol(parts, g, make_protocol(protocol), settings, seed=seed)
    assert run.n_iter == 15
    assert max_relative_difference(run, ref) <= tol
    assert np.all(np.diff(run.loglik) >= -1e-9)


@pytest.mark.parametrize(
    "protocol",
    ["secure-sum", "federated", PdmmSP(), PdmmSP(accel="deflated"), PdmmSP(theta=0.5, c=0.2, encrypt_duals=False)],
    ids=["secure-sum", "federated", "pdmm-sp", "pdmm-sp-deflated", "admm-plaintext"],
)
def test_engines_agree_bit_for_bit_including_traces(protocol):
    rng = np.random.default_rng(7)
    X, _, _ = synthetic_mixture(120, n_features=2, n_components=3, rng=rng)
    parts = np.array_split(X, 15)
    g = geometric_graph(15, seed=4)
    settings = EMSettings(3, max_iter=4, tol=0.0, init_seed=2)
    spec = make_protocol(protocol)
    a = run_protocol(parts, g, spec, settings, seed=9, engine="vectorised", record_trace=True)
    b = run_protocol(parts, g, spec, settings, seed=9, engine="messages", record_trace=True)
    for x, y in ((a.weights, b.weights), (a.means, b.means), (a.covariances, b.covariances)):
        assert np.array_equal(x, y)
    assert a.loglik == b.loglik and a.consensus_iterations == b.consensus_iterations
    assert (a.messages, a.bytes) == (b.messages, b.bytes) == (len(a.trace), sum(m.nbytes for m in a.trace))

    def key(m):
        return (m.iteration, m.round, m.kind, m.sender, m.receivers)

    ta, tb = sorted(a.trace, key=key), sorted(b.trace, key=key)
    assert [key(m) for m in ta] == [key(m) for m in tb]
    for x, y in zip(ta, tb, strict=True):
        assert x.meta == y.meta and x.encrypted == y.encrypted
        assert np.array_equal(x.payload, y.payload) if isinstance(x.payload, np.ndarray) else x.payload == y.payload


def test_accuracy_holds_over_six_orders_of_perturbation():
    """The "no accuracy trade-off" claim, until float64 runs out (sim/bench_precision.py maps the floor)."""
    rng = np.random.default_rng(11)
    X, _, _ = synthetic_mixture(200, n_features=2, n_components=3, rng=rng)
    parts = np.array_split(X, 20)
    g = geometric_graph(20, seed=1)
    settings = EMSettings(3, max_iter=10, tol=0.0, init_seed=1)
    ref = run_protocol(parts, g, make_protocol("centralized"), settings)
    for std in (1e-1, 1e0, 1e1, 1e2, 1e3, 1e4, 1e5):
        run = run_protocol(parts, g, PdmmSP(perturbation_std=std, max_iter=3000), settings, seed=3)
        assert max_relative_difference(run, ref) <= 1e-8, std


def test_distributed_gmm_api_and_user_init():
    rng = np.random.default_rng(12)
    X, _, _ = synthetic_mixture(90, n_features=2, n_components=2, rng=rng)
    parts = np.array_split(X, 9)
    g = geometric_graph(9, seed=3, radius=0.6)
    init = {"weights": [0.5, 0.5], "means": X[:2].tolist(), "covariances": [np.eye(2).tolist()] * 2}
    m = DistributedGMM(n_components=2, protocol="pdmm-sp", max_iter=100, tol=1e-6, reg_covar=1e-6, random_state=0, init=init).fit(parts, g)
    c = DistributedGMM(n_components=2, protocol="centralized", max_iter=100, tol=1e-6, random_state=0, init=init).fit(parts, g)
    assert m.n_iter_ == c.n_iter_ < 100 and m.converged_
    np.testing.assert_allclose(m.means_, c.means_, rtol=1e-8)
    assert len(m.loglik_) == m.n_iter_ + 1
    assert m.score(X) == pytest.approx(m.loglik_[-1], rel=1e-9)
    exact = DistributedGMM(2, protocol="federated", max_iter=0, init=init).fit(parts, g)
    np.testing.assert_array_equal(exact.means_, np.asarray(init["means"]))


def test_bad_inputs_are_one_line_errors():
    g = geometric_graph(4, seed=1, radius=0.9)
    good = [np.ones((2, 2)) * i for i in range(4)]
    with pytest.raises(DataError, match="node 2"):
        run_protocol(good[:2] + [np.empty((0, 2))] + good[3:], g, make_protocol("federated"), EMSettings(2))
    with pytest.raises(DataError):
        run_protocol(good[:3] + [np.ones((2, 3))], g, make_protocol("federated"), EMSettings(2))
    with pytest.raises(ConfigError, match="split over 3"):
        run_protocol(good[:3], g, make_protocol("federated"), EMSettings(2))
    import networkx as nx

    with pytest.raises(GraphError, match="no cycle"):
        run_protocol(good, nx.path_graph(4), PdmmSP(), EMSettings(2))
    with pytest.raises(ConfigError, match="n_components"):
        EMSettings(0)


def test_device_engine_agrees_with_cpu_engine(parkinsons):
    # device = "cuda" runs this code path on CuPy; array-api-strict checks its portability here
    parts, g, settings, seed = parkinsons
    short = dataclasses.replace(settings, max_iter=3)
    cpu = run_protocol(parts, g, PdmmSP(), short, seed=seed)
    strict = run_protocol(parts, g, PdmmSP(), short, seed=seed, device="array-api-strict")
    assert strict.protocol_params["device"] == "array-api-strict"
    # a device draws the initial duals as one block (not the per-node streams): other duals,
    # the same average to the consensus tolerance, a round or two more or less
    assert all(abs(a - b) <= 3 for a, b in zip(strict.consensus_iterations, cpu.consensus_iterations, strict=True))
    assert max_relative_difference(strict, cpu) <= 1e-9
    again = run_protocol(parts, g, PdmmSP(), short, seed=seed, device="array-api-strict")
    assert np.array_equal(again.means, strict.means)  # seeded: reproducible on the device too
    with pytest.raises(ConfigError, match="device"):
        run_protocol(parts, g, PdmmSP(), short, seed=seed, device="tpu")


def test_a_topology_stands_in_for_the_networkx_graph():
    # large runs skip networkx: a Topology from edges gives the same run, bit for bit
    import networkx as nx

    from p2pem.graphs import hamiltonian_cycle
    from p2pem.protocols.base import Topology

    rng = np.random.default_rng(3)
    X, _, _ = synthetic_mixture(90, n_features=2, n_components=2, rng=rng)
    parts = np.array_split(X, 9)
    g = geometric_graph(9, seed=5, radius=0.8)
    edges = np.array(sorted(g.edges()))
    settings = EMSettings(2, max_iter=3, tol=0.0, init_seed=1)
    ring = hamiltonian_cycle(g, time_budget=5.0)
    for spec, topo in (
        (PdmmSP(), Topology.from_edges(9, edges)),
        (make_protocol("federated"), Topology.from_edges(9, edges)),
        (make_protocol("secure-sum"), Topology.from_edges(9, edges, ring=ring)),
    ):
        a, b = run_protocol(parts, g, spec, settings, seed=2), run_protocol(parts, topo, spec, settings, seed=2)
        assert np.array_equal(a.means, b.means) and a.consensus_iterations == b.consensus_iterations
    with pytest.raises(GraphError, match="Hamiltonian"):
        run_protocol(parts, Topology.from_edges(9, edges), make_protocol("secure-sum"), settings)
    tree = np.array(sorted(nx.bfs_tree(g, 0).to_undirected().edges()))
    with pytest.raises(GraphError, match="no cycle"):
        run_protocol(parts, Topology.from_edges(9, tree), PdmmSP(), settings)
    with pytest.raises(ConfigError, match="split over 8"):
        run_protocol(parts[:8], Topology.from_edges(9, edges), PdmmSP(), settings)


def test_device_reductions_equal_the_host_ones():
    # the device path's neighbour minimum (a gather table) and dual sums (incidence products)
    # against the host's segmented reductions, on a graph with uneven degrees
    import array_api_strict as xp
    from p2pem.graphs import geometric_edges
    from p2pem.protocols.base import Topology
    from p2pem.protocols.pdmm.device import NeighbourMin, SparseProduct
    from p2pem.protocols.pdmm.engine import dual_sum_matrices

    _, pairs, _ = geometric_edges(300, seed=3)
    t_ = Topology.from_edges(300, pairs)
    assert t_.degrees.min() < t_.degrees.max()
    rng = np.random.default_rng(0)
    host, dev = NeighbourMin(t_, np, True), NeighbourMin(t_, xp, False)
    for a in (rng.integers(0, 50, 300), np.full(300, 7), np.arange(300)):
        ref = np.array([min(a[i], *a[t_.dst[t_.indptr[i]:t_.indptr[i + 1]]]) for i in range(300)])
        assert np.array_equal(host(a), ref)
        assert np.array_equal(np.asarray(dev(xp.asarray(a))), ref)
    z = rng.normal(0.0, 100.0, size=(t_.dst.size, 4))
    own, theirs = (SparseProduct(a, xp, None) for a in dual_sum_matrices(t_))
    sign = t_.sign[:, None]
    u = np.add.reduceat(sign * z, t_.row_start, axis=0)
    v = np.add.reduceat(sign * z[t_.reverse], t_.row_start, axis=0)
    assert np.allclose(np.asarray(own(xp.asarray(z))), u, rtol=0, atol=1e-9)
    assert np.allclose(np.asarray(theirs(xp.asarray(z))), v, rtol=0, atol=1e-9)


def test_relative_error_is_relative_to_the_reference_and_absolute_against_zeros():
    assert relative_error([1.0, 3.0], [1.0, 4.0]) == 0.25
    assert relative_error([[1.0, 4.0]], [[1.0, 3.0]]) == 1 / 3
    assert relative_error([0.0, -2e-9], [0.0, 0.0]) == 2e-9  # no division by zero
