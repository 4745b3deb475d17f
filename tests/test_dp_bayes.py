"""The private Bayes classifier: Xi, Kantarcioglu & Inan (2011) as printed, and p2pem's, which is
never worse than the DP majority class it could release instead."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from p2pem import geometric_graph, make_protocol
from p2pem.dp import postprocess
from p2pem.dp.bayes import fit_bayes, fit_xi2011, xi_sensitivity
from p2pem.em import EMSettings


def _query(X: np.ndarray) -> np.ndarray:
    """The paper's query set {mean, covariance (upper triangle, 1/n)} as one vector."""
    mean = X.mean(axis=0)
    cov = (X - mean).T @ (X - mean) / len(X)
    return np.concatenate([mean, cov[np.triu_indices(X.shape[1])]])


def test_xi_sensitivity_bounds_every_replacement_over_the_cube_corners() -> None:
    """Theorems 3.1 and 3.7 (rows in [0, 1]^d, one row replaced): no pair of neighbours among the
    cube's corners moves the query set by more than d/n + (3/n - 3/n^2) d(d+1)/2, and the lower
    bound's configuration (others 0, one row 0 -> 1) moves it by d/n + (1/n - 1/n^2) d(d+1)/2."""
    d, n = 2, 3
    corners = [np.array(c, dtype=float) for c in itertools.product([0.0, 1.0], repeat=d)]
    bound = xi_sensitivity(n, np.ones(d))
    assert bound == pytest.approx(d / n + (3 / n - 3 / n**2) * d * (d + 1) / 2)
    worst = 0.0
    for common in itertools.product(corners, repeat=n - 1):
        for a, b in itertools.combinations(corners, 2):
            moved = np.abs(_query(np.array([*common, a])) - _query(np.array([*common, b]))).sum()
            worst = max(worst, moved)
    assert worst <= bound + 1e-12
    zero = np.zeros((n - 1, d))
    lower = np.abs(_query(np.vstack([zero, np.zeros(d)])) - _query(np.vstack([zero, np.ones(d)]))).sum()
    assert lower == pytest.approx(d / n + (1 / n - 1 / n**2) * d * (d + 1) / 2)
    # ranges scale each attribute: r_i / n and r_k r_l (3/n - 3/n^2)
    assert xi_sensitivity(n, np.array([2.0, 3.0])) == pytest.approx(5 / n + (3 / n - 3 / n**2) * (4 + 6 + 9))


def test_xi_repair_replaces_the_small_eigenvalues_by_the_smallest_positive_one() -> None:
    """Section 5, step 3: V D V^T with each negative eigenvalue replaced by the smallest positive one."""
    rng = np.random.default_rng(0)
    vec, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    lam = np.array([-2.0, -0.1, 0.5, 3.0])
    noisy = (vec * lam) @ vec.T
    fixed = postprocess.repair_covariances(noisy, "xi", 1e-6)
    np.testing.assert_allclose(np.linalg.eigvalsh(fixed), [0.5, 0.5, 0.5, 3.0], rtol=1e-9)
    np.testing.assert_allclose(fixed @ vec[:, 3], 3.0 * vec[:, 3], atol=1e-9)  # eigenvectors kept
    good = (vec * np.array([0.2, 0.5, 1.0, 3.0])) @ vec.T
    good = (good + good.T) / 2
    assert np.array_equal(postprocess.repair_covariances(good, "xi", 1e-6), good)
    shrunk = postprocess.repair_covariances(noisy, "shrink", 1e-3)  # the former "xi": keeps the diagonal where it can
    assert np.linalg.eigvalsh(shrunk)[0] >= 1e-3 - 1e-12


def test_fit_xi2011_without_noise_is_quadratic_discriminant_analysis() -> None:
    rng = np.random.default_rng(1)
    rows = [rng.normal(size=(30, 3)), rng.normal(size=(20, 3)) + 1.0]
    model = fit_xi2011(rows, np.array([0, 1]), epsilon=math.inf, lows=np.full(3, -10.0), highs=np.full(3, 10.0))
    for X, m in zip(rows, model.models, strict=True):
        np.testing.assert_allclose(m.means[0], X.mean(axis=0), rtol=1e-14)
        np.testing.assert_allclose(m.covariances[0], np.cov(X.T, bias=True), rtol=1e-12)
    np.testing.assert_allclose(model.priors, [0.6, 0.4])


def _fig1(n: int, rng: np.random.Generator):
    """Xi et al.'s Fig. 1 mixture (mixing probability 0.7), mapped to [-1, 1] by its public mu +- 6 sigma box."""
    means = [np.array([1.8, 3.2, 3.8, 6.0, 5.5]), np.array([0.5, 1.0, 1.5, 2.5, 3.5])]
    sds = [np.sqrt([0.36, 1.21, 3.24, 5.76, 0.64]), np.sqrt([2.56, 0.64, 4.00, 1.44, 0.16])]
    lo = np.minimum(means[0] - 6 * sds[0], means[1] - 6 * sds[1])
    hi = np.maximum(means[0] + 6 * sds[0], means[1] + 6 * sds[1])
    y = (rng.random(n) >= 0.7).astype(int)
    X = np.stack([means[c] + sds[c] * np.clip(rng.standard_normal(5), -6, 6) for c in y])
    return (X - (lo + hi) / 2) / ((hi - lo) / 2), y


def _laplace_difference_tail(gap: float, b: float) -> float:
    """P(L1 - L2 > gap) for L1, L2 ~ Laplace(0, b) independent: exp(-gap/b) (1 + gap/(2b)) / 2."""
    return 0.5 * math.exp(-gap / b) * (1.0 + gap / (2.0 * b))


def test_dp_classifier_at_n500_eps01_is_no_worse_than_the_majority_class() -> None:
    """Fig. 1's mixture, n = 500, epsilon = 0.1 (where the models are noise: Xi et al. print > 0.3
    error below epsilon 0.1 and p2pem's models gave 0.64 at chance 0.5 before): the classifier
    falls back to the DP majority class, whose error is the majority rate.  Over the noise it fails
    only if the usability rule passes or the combined count release ranks the classes wrongly; that
    probability, integrated below, is <= 1e-3, and 20 noise seeds all succeed."""
    rng = np.random.default_rng(11)
    X, y = _fig1(500, rng)
    Xt, yt = _fig1(5000, rng)
    n_nodes = 5
    parts = [np.array_split(X[y == c], n_nodes) for c in (0, 1)]
    graph = geometric_graph(n_nodes, seed=1, radius=0.9)
    spec = make_protocol("dp-central", {"epsilon": 0.1, "mechanism": "laplace", "accountant": "basic", "delta": 0.0, "bound": 1.0})
    settings = [EMSettings(1, max_iter=1, tol=0.0) for _ in (0, 1)]
    majority_rate = float(np.mean(yt != 0))
    for seed in range(20):
        model = fit_bayes(parts, np.array([0, 1]), graph, spec, settings, seed=seed)
        assert model.fallback == 0 and model.models == ()
        assert model.error(Xt, yt) == majority_rate
    # the failure probability: the rule passes only if both classes' noisy counts reach the size at
    # which a mean's noise is half the bound (far beyond 500 here), and the majority is lost only if
    # D = w X1 + (1 - w) X2 exceeds the gap, X_i the difference of two Laplace(b_i) (class counts of
    # L1 sensitivity 2 under replace-one), w the inverse-variance weight: integrated numerically
    from scipy import integrate

    eps, share = 0.1, 0.2
    b1, b2 = 2 / (eps * share), 2 / (eps * (1 - share))
    w = (1 / b1**2) / (1 / b1**2 + 1 / b2**2)
    gap = float(np.sum(y == 0) - np.sum(y == 1))
    bound_spec, _, _ = dataclasses.replace(spec, epsilon=eps * (1 - share)).bind(settings[0], parts[0], seed=0)
    sum_std = math.sqrt(2) * float(bound_spec.plan.em_scale[1])
    needed = math.sqrt(5) * sum_std / 0.5  # the count at which the rule passes
    p_rule = 0.5 * math.exp(-(needed - np.sum(y == 0)) / b1)

    def density(x: float, b: float) -> float:  # of L1 - L2, L1, L2 ~ Laplace(0, b)
        return (1 + abs(x) / b) * math.exp(-abs(x) / b) / (4 * b)

    def tail(t: float, b: float) -> float:
        return _laplace_difference_tail(t, b) if t >= 0 else 1 - _laplace_difference_tail(-t, b)

    p_rank = integrate.quad(lambda x: density(x, b1) * tail((gap - w * x) / (1 - w), b2), -50 * b1, 50 * b1, points=[0], limit=400)[0]
    assert needed > 4 * 500 and p_rule + p_rank <= 1e-3


def test_dp_classifier_uses_its_models_when_the_counts_can_carry_them() -> None:
    """With budget to spare the rule passes: the models classify, close to the exact classifier."""
    rng = np.random.default_rng(12)
    X, y = _fig1(4000, rng)
    Xt, yt = _fig1(4000, rng)
    parts = [np.array_split(X[y == c], 4) for c in (0, 1)]
    graph = geometric_graph(4, seed=1, radius=0.9)
    settings = [EMSettings(1, max_iter=1, tol=0.0) for _ in (0, 1)]
    spec = make_protocol("dp-central", {"epsilon": 50.0, "mechanism": "laplace", "accountant": "basic", "delta": 0.0, "bound": 1.0})
    model = fit_bayes(parts, np.array([0, 1]), graph, spec, settings, seed=3)
    exact = fit_bayes(parts, np.array([0, 1]), graph, make_protocol("centralized"), settings)
    assert model.fallback is None and len(model.models) == 2
    assert model.error(Xt, yt) < 0.05 and exact.error(Xt, yt) < 0.02
    distributed = make_protocol("dp-distributed", {"epsilon": 0.1, "mechanism": "laplace", "accountant": "basic", "delta": 0.0, "bound": 1.0})
    assert fit_bayes(parts, np.array([0, 1]), graph, distributed, settings, seed=3).fallback == 0
    with pytest.raises(Exception, match="count_share must be in"):
        fit_bayes(parts, np.array([0, 1]), graph, spec, settings, count_share=1.0)
