"""pdmm-sp's rounds split over threads: the same bits as one thread, for every number of blocks."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp

from p2pem.data import split_rows, synthetic_mixture
from p2pem.em import EMSettings
from p2pem.errors import ConfigError
from p2pem.graphs import geometric_edges, geometric_graph
from p2pem.protocols import PdmmSP, Topology
from p2pem.protocols.pdmm import engine
from p2pem.protocols.pdmm.device import RowBlocks, SparseProduct
from p2pem.registry import make_protocol
from p2pem.simulate import protocol_streams, run_protocol

BLOCKS = (2, 3, 5)


def _topology(n: int, seed: int) -> Topology:
    _, pairs, _ = geometric_edges(n, seed=seed)
    return Topology.from_edges(n, pairs)


def _inputs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 6)) * 10.0 ** rng.integers(-2, 3, size=(n, 1)) + 3.0


@pytest.mark.parametrize("params", [
    {},  # the default: the Leja polynomial and its public stop round
    {"stop": "adaptive"},  # the counters, the settle test every round
    {"accel": "heavy-ball"},
    {"accel": "deflated"},
    {"accel": "none"},
    {"accel": "none", "theta": 0.5},  # not in place: only the product is split
])
def test_threaded_rounds_equal_the_one_thread_engine_bit_for_bit(params):
    n, seed = 200, 7
    topo, s = _topology(n, seed), _inputs(n, seed)
    ref = PdmmSP(threads=1, **params).aggregate(s, topo, protocol_streams(seed, n), 2)
    assert ref.converged
    for k in BLOCKS:
        got = PdmmSP(threads=k, **params).aggregate(s, topo, protocol_streams(seed, n), 2)
        assert got.rounds == ref.rounds and got.converged
        assert got.results.tobytes() == ref.results.tobytes()


@pytest.mark.parametrize("params", [{}, {"accel": "heavy-ball", "stop": "adaptive"}])
def test_every_broadcast_of_a_threaded_run_equals_the_one_thread_run(params):
    n, seed = 60, 1
    topo, s = _topology(n, seed), _inputs(n, seed)
    ref = PdmmSP(threads=1, **params).aggregate(s, topo, protocol_streams(seed, n), 2, record=True)
    got = PdmmSP(threads=3, **params).aggregate(s, topo, protocol_streams(seed, n), 2, record=True)
    assert len(got.trace) == len(ref.trace) > 0
    for a, b in zip(got.trace, ref.trace, strict=True):
        assert (a.sender, a.round, a.kind, a.meta) == (b.sender, b.round, b.kind, b.meta)
        assert a.payload.tobytes() == b.payload.tobytes()


def test_a_threaded_em_run_equals_the_one_thread_run():
    rng = np.random.default_rng(3)
    X, _, _ = synthetic_mixture(300, n_features=2, n_components=3, rng=rng)
    parts = split_rows(X, 60, how="even", rng=rng)
    g = geometric_graph(60, seed=2)
    settings = EMSettings(3, max_iter=4, tol=0.0, init_seed=0)
    one = run_protocol(parts, g, PdmmSP(threads=1), settings, seed=5)
    three = run_protocol(parts, g, PdmmSP(threads=3), settings, seed=5)
    for a, b in ((one.weights, three.weights), (one.means, three.means), (one.covariances, three.covariances)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_blocked_product_equals_scipys_product_bit_for_bit():
    rng = np.random.default_rng(4)
    topo = _topology(500, 3)
    a = topo.weighted_adjacency(rng.random(topo.dst.size) * 2.0 ** rng.integers(-20, 20, size=topo.dst.size))
    x = rng.normal(size=(500, 7)) * 10.0 ** rng.integers(-8, 8, size=(500, 7))
    ref = a.tocsc() @ x
    with ThreadPoolExecutor(4) as pool:
        for k in (1, *BLOCKS, 500, 900):
            blocks = RowBlocks(topo.indptr, k)
            got = SparseProduct(a, np, sp, blocks)(x, pool)
            assert got.tobytes() == ref.tobytes()


@pytest.mark.parametrize("k", [1, 2, 3, 8, 60, 1000])
def test_row_blocks_cover_every_node_once_with_balanced_edges(k):
    topo = _topology(300, 5)
    indptr, m = topo.indptr, int(topo.indptr[-1])
    spans = RowBlocks(indptr, k).spans
    assert spans[0][0] == 0 and spans[-1][1] == 300
    assert all(lo < hi for lo, hi in spans) and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert len(spans) <= k
    edges = [int(indptr[hi] - indptr[lo]) for lo, hi in spans]
    # each block ends at the first node boundary after its share: at most one node's edges over
    assert max(edges) <= m / len(spans) + int(topo.degrees.max()) or len(spans) == 1


def test_an_error_in_any_block_is_raised_after_every_block_finished():
    blocks = RowBlocks(np.arange(0, 41, 4), 3)
    done = []

    def work(lo, hi):
        done.append(lo)
        if lo > 0:
            raise ValueError(f"block {lo}")

    with ThreadPoolExecutor(2) as pool, pytest.raises(ValueError, match="block"):
        blocks.run(pool, work)
    assert sorted(done) == [lo for lo, _ in blocks.spans]


def test_threads_parameter_is_validated_and_a_scenario_key():
    assert make_protocol("pdmm-sp", {"threads": 2}).threads == 2
    assert PdmmSP().threads == 1
    for bad in (0, -1, 2.5, True, "two", None):
        with pytest.raises(ConfigError, match="threads must be a positive integer or 'auto'"):
            PdmmSP(threads=bad)
    with pytest.raises(ConfigError, match="threads = 2 splits rounds on the CPU"):
        PdmmSP(threads=2, device="array-api-strict")


def test_auto_threads_follow_the_edges_and_the_usable_cores(monkeypatch):
    topo = _topology(400, 7)
    m = topo.dst.size
    monkeypatch.setattr(engine, "usable_cores", lambda: 4)
    assert engine.thread_count(PdmmSP(threads="auto"), topo) == 1  # far fewer than EDGES_PER_THREAD edges
    monkeypatch.setattr(engine, "EDGES_PER_THREAD", m // 3)
    assert engine.thread_count(PdmmSP(threads="auto"), topo) == 3
    monkeypatch.setattr(engine, "EDGES_PER_THREAD", m // 10)
    assert engine.thread_count(PdmmSP(threads="auto"), topo) == 4  # no more than the cores
    assert engine.thread_count(PdmmSP(threads=7), topo) == 7
    assert engine.thread_count(PdmmSP(device="array-api-strict"), topo) == 1
