"""Whole-run views: the exact reduction, the rank structure and the reconstruction attack."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from p2pem.em import EMSettings
from p2pem.gmm import GMMParams, batch_statistics, init_statistics, precision_cholesky
from p2pem.leakage.attack import init_row_statistics, match_rows, reconstruct_rows, row_statistics
from p2pem.leakage.views import Adversary
from p2pem.leakage.wholerun import disclosure_rank, record_whole_run
from p2pem.messages import SERVER
from p2pem.registry import make_protocol

#: The graph of Fig. 1 of Li et al. (ICASSP 2022), ids 0..4 for the paper's nodes 1..5.
FIG1 = nx.Graph([(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (2, 4)])


def _parts(n_nodes: int, rows: int, d: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(rows, d)) + 3.0 * (i % 2) for i in range(n_nodes)]


def _spec(name: str):
    return make_protocol(name, {"tol": 1e-12} if name == "pdmm-sp" else {})


# ------------------------------------------------------------------------ the attack's model


def test_row_statistics_match_the_e_step_and_their_jacobian():
    rng = np.random.default_rng(0)
    k, d = 3, 2
    a = rng.normal(size=(k, d, d))
    model = GMMParams(np.array([0.2, 0.3, 0.5]), rng.normal(size=(k, d)), a @ a.transpose(0, 2, 1) + np.eye(d))
    X = rng.normal(size=(4, d))
    n = len(X)
    ref = batch_statistics(
        X, np.arange(n), np.repeat(model.weights[None], n, 0), np.repeat(model.means[None], n, 0), np.repeat(precision_cholesky(model.covariances)[None], n, 0)
    )
    stats, jac = row_statistics(X, model)
    np.testing.assert_allclose(stats, ref, rtol=0, atol=1e-13)
    np.testing.assert_allclose(init_row_statistics(X)[0].sum(axis=0), init_statistics(X), atol=1e-13)
    eps = 1e-6
    for col in range(d):
        step = np.zeros(d)
        step[col] = eps
        fd = (row_statistics(X + step, model)[0] - row_statistics(X - step, model)[0]) / (2 * eps)
        np.testing.assert_allclose(jac[..., col], fd, atol=1e-8)


# ------------------------------------------------------------------------ exact reduction


@pytest.mark.parametrize("name", ["pdmm-sp", "secure-sum", "federated"])
def test_reduction_is_exact_for_every_adversary_on_fig1(name):
    """The group sums computed from the views equal the inputs' sums to 1e-9 (relative)."""
    parts = _parts(5, 3, 2, seed=1)
    settings = EMSettings(2, max_iter=4, tol=0.0)
    corrupt = {1, 3} | ({SERVER} if name == "federated" else set())
    advs = [Adversary("honest-but-curious", corrupt), Adversary("eavesdropper"), Adversary("both", corrupt), Adversary("honest-but-curious", {1, 3})]
    views = record_whole_run(parts, FIG1, _spec(name), settings, advs, seed=3)
    expected = {
        "pdmm-sp": [((0, 2, 4),), ((0, 1, 2, 3, 4),), ((0, 2, 4),), ((0, 2, 4),)],
        "secure-sum": [((2,), (0, 4)), ((0, 1, 2, 3, 4),), ((2,), (0, 4)), ((2,), (0, 4))],
        "federated": [((0,), (2,), (4,)), ((0,), (1,), (2,), (3,), (4,)), ((0,), (2,), (4,)), ((0, 2, 4),)],
    }[name]
    for view, groups in zip(views, expected, strict=True):
        assert view.groups == groups
        assert view.iterations == list(range(6))  # initialisation, 4 M-steps, the final log-likelihood
        assert view.reduction_error().max() < 1e-9
        assert view.continue_flags[:4] == pytest.approx([5.0] * 4) and view.continue_flags[-1] == pytest.approx(0.0, abs=1e-9)


def test_pdmm_reduction_with_unobserved_interior_nodes():
    """Honest nodes with no corrupt neighbour: their last broadcasts are not observed, the sum still is."""
    g = nx.cycle_graph(8)
    g.add_edges_from([(0, 4), (2, 6)])
    parts = _parts(8, 2, 2, seed=2)
    adv = Adversary("honest-but-curious", {0})
    (view,) = record_whole_run(parts, g, _spec("pdmm-sp"), EMSettings(2, max_iter=3, tol=0.0), [adv], seed=5)
    assert view.groups == ((1, 2, 3, 4, 5, 6, 7),)
    assert view.reduction_error().max() < 1e-9


def test_secure_sum_reduction_for_every_pair_of_corrupt_nodes():
    """Arcs that pass the initiator, start at it, or end at it are all reduced exactly."""
    g = nx.cycle_graph(6)
    parts = _parts(6, 2, 1, seed=4)
    advs = [Adversary("honest-but-curious", set(pair)) for pair in itertools.combinations(range(6), 2)]
    views = record_whole_run(parts, g, _spec("secure-sum"), EMSettings(2, max_iter=1, tol=0.0), advs, seed=6)
    for view in views:
        assert sum(len(gr) for gr in view.groups) == 4
        assert view.reduction_error().max() < 1e-12


@pytest.mark.parametrize(
    ("kind", "corrupt", "n_groups"),
    [("honest-but-curious", {1, 3}, 1), ("eavesdropper", set(), 1), ("both", {1, 3}, 1)],
)
def test_rank_structure_pdmm_discloses_only_the_component_sums(kind, corrupt, n_groups):
    rank = disclosure_rank(_spec("pdmm-sp"), FIG1, Adversary(kind, corrupt), rounds=30, seed=4)
    assert rank.disclosed == n_groups and rank.matches_groups
    # at perturbation_std = 100 the next most revealed direction carries almost nothing
    assert rank.next_bits < 1e-3


def test_rank_structure_secure_sum_discloses_node_3_and_the_pair():
    rank = disclosure_rank(_spec("secure-sum"), FIG1, Adversary("honest-but-curious", {1, 3}), rounds=1, seed=4)
    assert rank.disclosed == 2 and rank.matches_groups and rank.next_bits == 0.0


def test_insecure_pdmm_discloses_every_input_to_an_eavesdropper():
    spec = make_protocol("pdmm-sp", {"encrypt_duals": False, "tol": 1e-12})
    parts = _parts(5, 2, 2, seed=7)
    (view,) = record_whole_run(parts, FIG1, spec, EMSettings(2, max_iter=2, tol=0.0), [Adversary("eavesdropper")], seed=1)
    assert view.groups == ((0,), (1,), (2,), (3,), (4,))
    assert view.reduction_error().max() < 1e-9


# ------------------------------------------------------------------------ attacks


def _attack(view, group_index, parts, t_seen):
    obs = view.observations(group_index, t_seen)
    rows = np.vstack([parts[i] for i in view.groups[group_index]])
    fit = reconstruct_rows(obs, len(rows), rng=np.random.default_rng(11), starts=4)
    return rows, match_rows(rows, fit.rows)


def test_two_honest_nodes_with_one_row_each_are_recovered_after_one_iteration():
    """d = 2, honest component {0, 1} of one row each: both rows to 1e-6 under pdmm-sp."""
    g = nx.cycle_graph(6)
    g.add_edges_from([(0, 3), (1, 4)])
    rng = np.random.default_rng(8)
    parts = [rng.normal(size=(1 if i < 2 else 4, 2)) + 3.0 * (i % 2) for i in range(6)]
    adv = Adversary("honest-but-curious", {2, 3, 4, 5})
    settings = EMSettings(2, max_iter=1, tol=0.0, init=GMMParams(np.array([0.5, 0.5]), np.array([[0.0, 0.0], [3.0, 3.0]]), np.repeat(np.eye(2)[None], 2, 0)))
    (view,) = record_whole_run(parts, g, _spec("pdmm-sp"), settings, [adv], seed=2)
    assert view.groups == ((0, 1),) and view.iterations[0] == 1  # public init: no aggregation 0
    rows, dist = _attack(view, 0, parts, t_seen=1)
    assert dist.max() < 1e-6


def _seen(observations, X):
    """What the adversary saw about rows X, and its Jacobian (n_equations, m d), from the per-row
    E-step statistics (tested against p2pem.gmm's E-step above): the initialisation's count,
    sum x and sum x x^T, then the group's sums at every public model."""
    m, d = X.shape
    values, jacobians = [], []
    for o in observations:
        stats, jac = init_row_statistics(X) if o.model is None else row_statistics(X, o.model)
        values.append(stats.sum(axis=0))
        jacobians.append(jac.transpose(1, 0, 2).reshape(jac.shape[1], m * d))
    return np.concatenate(values), np.vstack(jacobians)


def _independent_equations(n_iterations: int, k: int, d: int) -> int:
    """An upper bound on the rank of that Jacobian, by counting.

    The initialisation discloses the count (a constant: no information about the rows), sum x
    and sum x x^T: d + d(d+1)/2 equations.  At each public model the K responsibility sums add
    up to the count, the K first moments sum to sum x - sum_k a_k mu_k and the K second
    moments to a function of sum x x^T and the first moments, so 1 + d + d(d+1)/2 of the
    K (1 + d + d(d+1)/2) + 1 sums (the last: the log-likelihood) repeat what is known:
    (K - 1)(1 + d + d(d+1)/2) + 1 new equations per iteration seen.
    """
    moments = 1 + d + d * (d + 1) // 2
    return (moments - 1) + n_iterations * ((k - 1) * moments + 1)


def test_a_large_honest_component_is_not_identifiable_from_what_the_adversary_sees():
    """The rows of a large honest component are not identified by its sums: the Jacobian of
    the map from the group's rows to everything the adversary saw about them has rank below
    the number of unknowns, so near the true rows a manifold of other row sets (of that
    dimension deficit) gives the adversary exactly the same view; one is constructed.  The
    isolated honest node next to it has a full-rank Jacobian after one iteration, and the
    attack recovers its rows exactly in the same run: the argument can tell the two apart.
    """
    g = nx.random_geometric_graph(20, 0.45, seed=3)
    assert nx.is_connected(g)
    corrupt = set(g.neighbors(19))
    parts = _parts(20, 3, 2, seed=9)
    seen_iterations, k, d = 4, 2, 2
    adv = Adversary("honest-but-curious", corrupt)
    (view,) = record_whole_run(parts, g, _spec("pdmm-sp"), EMSettings(k, max_iter=seen_iterations, tol=0.0), [adv], seed=2)
    sizes = sorted(len(gr) for gr in view.groups)
    assert sizes[0] == 1 and sizes[-1] >= 12
    big = max(range(len(view.groups)), key=lambda i: len(view.groups[i]))
    rows = np.vstack([parts[i] for i in view.groups[big]])
    obs = view.observations(big, seen_iterations)
    values, jac = _seen(obs, rows)
    # the map is what the adversary saw: at the true rows it reproduces the disclosed sums
    disclosed = np.concatenate([o.sums for o in obs])
    assert np.abs(values - disclosed).max() < 1e-12 * np.abs(disclosed).max()
    rank = np.linalg.matrix_rank(jac)  # tolerance: largest singular value x max(shape) x machine epsilon
    unknowns = rows.size
    assert rank == _independent_equations(seen_iterations, k, d) < unknowns  # 33 < 96 for 16 nodes of 3 rows
    # the rank is the largest the count allows, so it is constant near the true rows and the row
    # sets with the same view form a manifold of dimension unknowns - rank there (constant rank
    # theorem): walk along it from the true rows, correcting back onto it by Gauss-Newton
    direction = np.random.default_rng(1).standard_normal(unknowns)
    X = rows.ravel().copy()
    for _ in range(40):
        null = np.linalg.svd(_seen(obs, X.reshape(rows.shape))[1])[2][rank:]
        tangent = null.T @ (null @ direction)
        direction = tangent / np.linalg.norm(tangent)
        X = X + 0.05 * direction
        for _ in range(8):
            v, j = _seen(obs, X.reshape(rows.shape))
            X = X - np.linalg.lstsq(j, v - disclosed, rcond=None)[0]
    other = X.reshape(rows.shape)
    assert np.linalg.norm(_seen(obs, other)[0] - disclosed) < 1e-12 * np.linalg.norm(disclosed)
    assert match_rows(rows, other).max() > 0.1  # another row set, not a reordering of the true one
    # the isolated node: 3 rows, 6 unknowns, full rank after one iteration; the attack recovers them
    alone = view.groups.index((19,))
    own = view.observations(alone, 1)
    assert np.linalg.matrix_rank(_seen(own, parts[19])[1]) == parts[19].size <= _independent_equations(1, k, d)
    _, dist = _attack(view, alone, parts, t_seen=1)
    assert dist.max() < 1e-6


@pytest.mark.parametrize("accel", ["deflated", "polynomial"])
def test_reduction_follows_the_schedule(accel):
    """pdmm-sp's schedules (per-round divisor, edge scale and local term; the polynomial is the
    default): the group sums are still exact (the boundary duals are replayed through the
    special rounds)."""
    from p2pem.graphs import geometric_graph
    from p2pem.protocols import PdmmSP

    g = geometric_graph(12, seed=3)
    parts = _parts(12, 2, 2, seed=4)
    settings = EMSettings(2, max_iter=2, tol=0.0)
    advs = [Adversary("eavesdropper"), Adversary("honest-but-curious", {1, 5, 8})]
    for view in record_whole_run(parts, g, PdmmSP(accel=accel, tol=1e-12), settings, advs, seed=3):
        assert view.reduction_error().max() < 1e-9


@pytest.mark.parametrize("accel", ["deflated", "polynomial"])
@pytest.mark.parametrize("kind", ["honest-but-curious", "eavesdropper"])
def test_rank_structure_of_a_schedule_discloses_what_heavy_ball_does(kind, accel):
    """The deflated schedule and the polynomial reveal the same group sums as heavy ball, and no more."""
    from p2pem.graphs import geometric_graph
    from p2pem.protocols import PdmmSP, Topology

    g = geometric_graph(10, seed=3)
    spec = PdmmSP(accel=accel, tol=1e-12)
    assert spec.schedule(Topology.from_graph(g)).end < 40  # the view covers the special rounds
    adv = Adversary(kind, {1, 5, 8} if kind == "honest-but-curious" else set())
    ranks = [disclosure_rank(s, g, adv, rounds=40, seed=4) for s in (PdmmSP(accel="heavy-ball", tol=1e-12), spec)]
    assert ranks[0].disclosed == ranks[1].disclosed and ranks[1].matches_groups
    assert ranks[1].next_bits < 1e-3
