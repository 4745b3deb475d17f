"""pdmm-sp's CPU round on nodes renumbered into a locality order: the same bits as the original numbering."""

from __future__ import annotations

import numpy as np
import pytest

from p2pem.data import split_rows, synthetic_mixture
from p2pem.em import EMSettings
from p2pem.graphs import geometric_edges, geometric_graph
from p2pem.protocols import PdmmSP, Topology
from p2pem.protocols.pdmm import engine
from p2pem.protocols.pdmm.device import Locality
from p2pem.simulate import protocol_streams, run_protocol


def _topology(n: int, seed: int) -> Topology:
    _, pairs, _ = geometric_edges(n, seed=seed)
    return Topology.from_edges(n, pairs)


def _inputs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 5)) * 10.0 ** rng.integers(-2, 3, size=(n, 1)) + 3.0


def _run(monkeypatch, renumber: bool, fn):
    # the reference: the original numbering (no node count reaches the threshold)
    monkeypatch.setattr(engine, "LOCALITY_NODES", 0 if renumber else 10**12)
    return fn()


@pytest.mark.parametrize("n, seed, threads", [(30, 0, 1), (150, 3, 3), (700, 8, 2)])
@pytest.mark.parametrize("params", [
    {},  # the Leja polynomial and its public stop round
    {"stop": "adaptive"},  # the counters and their flooded stop round
    {"accel": "heavy-ball", "stop": "adaptive"},
    {"accel": "deflated"},
    {"accel": "none"},
    {"accel": "none", "theta": 0.5},  # not in place
])
def test_renumbered_rounds_equal_the_original_numbering_bit_for_bit(monkeypatch, n, seed, params, threads):
    topo, s = _topology(n, seed), _inputs(n, seed)
    spec = PdmmSP(threads=threads, **params)
    ref = _run(monkeypatch, False, lambda: spec.aggregate(s, topo, protocol_streams(seed, n), 2))
    got = _run(monkeypatch, True, lambda: spec.aggregate(s, topo, protocol_streams(seed, n), 2))
    assert ref.converged and got.converged and got.rounds == ref.rounds
    assert got.results.tobytes() == ref.results.tobytes()
    # the renumbering is not the identity here: the test compares two different row orders
    assert not np.array_equal(Locality(topo).perm, np.arange(n))


@pytest.mark.parametrize("params", [{}, {"accel": "heavy-ball", "stop": "adaptive"}])
@pytest.mark.parametrize("threads", [1, 2])
def test_every_broadcast_of_a_renumbered_run_equals_the_original_run(monkeypatch, params, threads):
    n, seed = 60, 1
    topo, s = _topology(n, seed), _inputs(n, seed)
    spec = PdmmSP(threads=threads, **params)
    ref = _run(monkeypatch, False, lambda: spec.aggregate(s, topo, protocol_streams(seed, n), 2, record=True))
    got = _run(monkeypatch, True, lambda: spec.aggregate(s, topo, protocol_streams(seed, n), 2, record=True))
    assert len(got.trace) == len(ref.trace) > 0
    for a, b in zip(got.trace, ref.trace, strict=True):
        assert (a.sender, a.receivers, a.round, a.kind, a.meta) == (b.sender, b.receivers, b.round, b.kind, b.meta)
        assert a.payload.tobytes() == b.payload.tobytes()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_renumbered_em_run_equals_the_message_level_engine(monkeypatch, threads):
    rng = np.random.default_rng(3)
    X, _, _ = synthetic_mixture(150, n_features=2, n_components=2, rng=rng)
    parts = split_rows(X, 30, how="even", rng=rng)
    g = geometric_graph(30, seed=2)
    settings = EMSettings(2, max_iter=2, tol=0.0, init_seed=0)
    monkeypatch.setattr(engine, "LOCALITY_NODES", 0)
    fast = run_protocol(parts, g, PdmmSP(threads=threads), settings, seed=5)
    slow = run_protocol(parts, g, PdmmSP(threads=threads), settings, seed=5, engine="messages")
    for a, b in ((fast.weights, slow.weights), (fast.means, slow.means), (fast.covariances, slow.covariances)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_the_locality_order_keeps_every_neighbour_list_and_its_order():
    topo = _topology(400, 5)
    loc = Locality(topo)
    assert sorted(loc.perm.tolist()) == list(range(400))
    assert np.array_equal(loc.perm[loc.inv], np.arange(400))
    for k in range(400):
        i = int(loc.perm[k])
        # row k holds node i's neighbours, as original ids in their original (ascending) order
        assert loc.perm[loc.dst[loc.indptr[k]:loc.indptr[k + 1]]].tolist() == list(topo.neighbours[i])
        assert np.array_equal(loc.edges[loc.indptr[k]:loc.indptr[k + 1]], np.arange(topo.indptr[i], topo.indptr[i + 1]))
    w = np.random.default_rng(0).random(topo.dst.size)
    x = np.random.default_rng(1).normal(size=(400, 3))
    assert (loc.matrix(w) @ x[loc.perm])[loc.inv].tobytes() == (topo.weighted_adjacency(w).tocsc() @ x).tobytes()
    # and it is local: the renumbered graph's bandwidth is far below the drawn order's
    band = lambda src, dst: int(np.max(np.abs(src - dst)))  # noqa: E731
    assert band(np.repeat(np.arange(400), np.diff(loc.indptr)), loc.dst) < band(topo.src, topo.dst) / 3
