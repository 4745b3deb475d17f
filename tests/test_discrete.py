"""The exact discrete samplers (:mod:`p2pem.dp.discrete`) against their closed-form pmfs.

Each distribution test is a chi-square goodness-of-fit test at level 1e-6: a correct sampler
fails it with probability 1e-6 for a random seed (the seeds here are fixed, so the tests are
deterministic); a sampler with the wrong scale, a biased Bernoulli or a lost sign fails it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from p2pem.dp.discrete import (
    GRID_BITS,
    bernoulli,
    bernoulli_exp,
    discrete_gaussian,
    discrete_laplace,
    grid,
    snapped_release,
)

ALPHA = 1e-6
N = 8000


def _chi_square(draws: np.ndarray, pmf, lo: int, hi: int) -> float:
    """p-value of ``draws`` against ``pmf`` on {lo..hi}, with both tails pooled into one bin each."""
    support = np.arange(lo, hi + 1)
    p = np.array([pmf(z) for z in support])
    total = sum(pmf(z) for z in range(lo - 400, hi + 401))  # the tails beyond are below 1e-30
    expected = np.concatenate([[total * 0 + (1 - p.sum() / total) / 2], p / total, [(1 - p.sum() / total) / 2]]) * draws.size
    observed = np.concatenate([[np.sum(draws < lo)], [np.sum(draws == z) for z in support], [np.sum(draws > hi)]])
    keep = expected > 5  # pool nothing else: the chosen range keeps every inner bin above 5
    return float(stats.chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()).pvalue)


@pytest.mark.parametrize("t", [1, 3])
def test_discrete_laplace_matches_its_pmf(t: int) -> None:
    draws = np.array(discrete_laplace(np.random.default_rng(11), t, N), dtype=np.int64)
    assert _chi_square(draws, lambda z: math.exp(-abs(z) / t), -4 * t, 4 * t) > ALPHA


@pytest.mark.parametrize("sigma", [1, 4])
def test_discrete_gaussian_matches_its_pmf(sigma: int) -> None:
    draws = np.array(discrete_gaussian(np.random.default_rng(12), sigma, N), dtype=np.int64)
    assert _chi_square(draws, lambda z: math.exp(-z * z / (2 * sigma * sigma)), -3 * sigma, 3 * sigma) > ALPHA


def test_a_wrong_scale_is_detected() -> None:
    """The test above has power: draws of scale 3 are rejected as scale 4 (and a sign-less sampler would be too)."""
    draws = np.array(discrete_laplace(np.random.default_rng(13), 3, N), dtype=np.int64)
    assert _chi_square(draws, lambda z: math.exp(-abs(z) / 4), -12, 12) < ALPHA
    assert _chi_square(np.abs(draws), lambda z: math.exp(-abs(z) / 3), -12, 12) < ALPHA


def test_outputs_are_python_integers() -> None:
    rng = np.random.default_rng(14)
    for z in (discrete_laplace(rng, 2**40, 200), discrete_gaussian(rng, 2**40, 200)):
        assert z.dtype == object and all(type(v) is int for v in z)


def test_large_scales_have_the_right_spread() -> None:
    """sigma = 2^40 (far beyond int64 squares): exact integer arithmetic, variance within 6 standard errors."""
    sigma = 2**40
    z = np.array(discrete_gaussian(np.random.default_rng(15), sigma, N), dtype=np.float64) / sigma
    assert abs(z.var() - 1.0) < 6 * math.sqrt(2.0 / N)


def test_batch_coordinates_are_independent() -> None:
    """Rejection in batches must not couple neighbouring coordinates: a contingency test of (z_2i, z_2i+1) signs and sizes."""
    z = np.array(discrete_laplace(np.random.default_rng(16), 2, 2 * N), dtype=np.int64)
    cls = np.clip(z, -3, 3) + 3  # 7 classes
    table = np.zeros((7, 7))
    np.add.at(table, (cls[0::2], cls[1::2]), 1)
    assert stats.chi2_contingency(table).pvalue > ALPHA
    # and the first and second halves of one batch have the same law
    assert stats.chi2_contingency(np.array([np.bincount(cls[:N], minlength=7), np.bincount(cls[N:], minlength=7)])).pvalue > ALPHA


@pytest.mark.parametrize(("num", "den"), [(0, 1), (1, 3), (5, 2), (7, 1)])
def test_bernoulli_exp_rate(num: int, den: int) -> None:
    hits = int(bernoulli_exp(np.random.default_rng(17), num, den, N).sum())
    assert stats.binomtest(hits, N, math.exp(-num / den)).pvalue > ALPHA


def test_bernoulli_with_huge_integers() -> None:
    """a / b with b = 3 * 2^100: the 62-bit comparison and its tie continue exactly."""
    b = 3 * 2**100
    hits = int(bernoulli(np.random.default_rng(18), b // 3, b, N).sum())
    assert stats.binomtest(hits, N, 1 / 3).pvalue > ALPHA
    assert bernoulli(np.random.default_rng(0), b, b, 100).all() and not bernoulli(np.random.default_rng(0), 0, b, 100).any()


def test_same_generator_state_same_noise() -> None:
    """Every node repeats the central draw from the shared seed."""
    a = discrete_gaussian(np.random.default_rng(19), 7, 500)
    b = discrete_gaussian(np.random.default_rng(19), 7, 500)
    assert list(a) == list(b)


def test_snapped_release_is_on_the_grid_and_never_below_the_calibration() -> None:
    scale = 3.7
    gamma, units = grid(scale)
    assert gamma == 2.0 ** (math.floor(math.log2(scale)) - GRID_BITS) and units * gamma >= scale
    assert grid(1e9) == (1.0, 10**9)  # integers stay on the grid
    counts = np.array([[3.0, 0.0], [12.0, 5.0]])
    out = snapped_release(np.random.default_rng(20), counts, scale, "laplace")
    assert out.shape == counts.shape and np.all(out / gamma == np.rint(out / gamma))
    with pytest.raises(ValueError, match="on the grid"):
        snapped_release(np.random.default_rng(20), counts + 0.1, scale, "laplace")
    floats = snapped_release(np.random.default_rng(20), counts + 0.1, scale, "laplace", sensitivity=2.0)
    assert np.all(floats / gamma == np.rint(floats / gamma))
    assert np.array_equal(snapped_release(np.random.default_rng(20), counts, 0.0, "gaussian"), counts)


def test_bad_parameters_are_refused() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        discrete_laplace(rng, 0, 3)
    with pytest.raises(ValueError):
        discrete_gaussian(rng, 0, 3)
    with pytest.raises(ValueError):
        grid(float("nan"))
    with pytest.raises(ValueError):
        snapped_release(rng, np.zeros(2), 1.0, "cauchy")
