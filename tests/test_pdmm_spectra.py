"""pdmm-sp's public spectra and schedules (p2pem.protocols.pdmm.spectra, .schedules) against dense references."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from p2pem.graphs import geometric_graph
from p2pem.protocols import Topology
from p2pem.protocols.pdmm import dense_laplacian, heavy_ball_params, leja_roots, low_eigenvalues, metropolis_weights
from p2pem.protocols.pdmm.spectra import sparse_laplacian, top_eigenvalue


def _dense_spectrum(topo: Topology) -> np.ndarray:
    return np.linalg.eigvalsh(dense_laplacian(topo, metropolis_weights(topo)))


def test_shift_invert_eigenvalues_equal_the_dense_ones():
    """Above 400 nodes the lowest eigenvalues come from a sparse LU and ARPACK."""
    topo = Topology.from_graph(geometric_graph(600, seed=4))
    low = low_eigenvalues(topo, 21)
    ref = _dense_spectrum(topo)[1:22]
    np.testing.assert_allclose(low, ref, rtol=1e-11, atol=0)


@pytest.mark.parametrize("graph", [geometric_graph(600, seed=1), nx.convert_node_labels_to_integers(nx.grid_2d_graph(25, 20))])
def test_lanczos_estimates_lambda_max_from_above_within_a_percent(graph):
    topo = Topology.from_graph(graph)
    lap = sparse_laplacian(topo, metropolis_weights(topo)).tocsr()
    exact = _dense_spectrum(topo)[-1]
    estimate = top_eigenvalue(lap)
    assert exact <= estimate <= 1.01 * exact


def test_lambda_2_falls_back_to_a_safe_bound_where_lobpcg_cannot_resolve_it():
    """A 600-node ring: lambda_2 ~ 5e-5 is below LOBPCG's residual tolerance; heavy ball then
    takes Mohar's bound 4 w_min / (n D), a lower bound, so it stays stable (main crashed here)."""
    n = 600
    ring = Topology.from_edges(n, np.array([(i, (i + 1) % n) for i in range(n)]))
    c, beta = heavy_ball_params(ring)
    exact = 1.0 - math.cos(2 * math.pi / n)  # Metropolis weights 1/2 on a ring: L_g = L / 2
    from p2pem.protocols.pdmm import metropolis_extremes

    lam2, _ = metropolis_extremes(ring)
    assert 0 < lam2 <= exact and 0 < beta < 1 and c > 0


def test_leja_roots_reach_the_target_on_their_points():
    rng = np.random.default_rng(3)
    points = np.concatenate([[0.01, 0.012, 0.03], np.sort(rng.uniform(0.2, 1.5, 400))])
    roots = leja_roots(points, 1e-10, 200)
    assert roots is not None and roots[0] == points[0] and {0.01, 0.012, 0.03} <= set(roots)
    log_p = np.log(np.abs(1.0 - points[:, None] / np.array(roots)[None, :]) + 1e-300).sum(axis=1)
    assert np.max(log_p) <= math.log(1e-10)
    assert leja_roots(points, 1e-10, len(roots) - 1) is None
    assert leja_roots(np.full(5, 0.7), 1e-10, 10) == [0.7]  # all eigenvalues equal: one root is exact


@pytest.mark.parametrize("n", [20, 600])
def test_leja_polynomial_is_below_its_target_on_the_whole_spectrum(n):
    """Up to 400 nodes it is built on the exact spectrum; above, on the 20 lowest eigenvalues
    and a grid on the rest: checked against every eigenvalue of a dense decomposition."""
    from p2pem.protocols.pdmm import polynomial_schedule

    topo = Topology.from_graph(geometric_graph(n, seed=2))
    sched = polynomial_schedule(topo, 1e-13)
    roots = np.array([1.0 / sched.scale[t - 2] for t in range(3, sched.end)])
    ev = np.linalg.eigvalsh(dense_laplacian(topo, metropolis_weights(topo)))[1:]
    log_p = np.log(np.abs(1.0 - ev[:, None] / roots[None, :])).sum(axis=1)
    assert np.max(log_p) < np.log(1e-13) + np.log(5.0)
    # partial products stay small: the Leja order keeps rounding harmless
    partial = np.maximum.accumulate(np.cumsum(np.log(np.abs(1.0 - ev[:, None] / roots[None, :])), axis=1).max(axis=0))
    assert partial[-1] < np.log(1e4)


