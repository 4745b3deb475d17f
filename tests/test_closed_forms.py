"""Tests of p2pem.leakage.closed_forms: the exact Gaussian values, against each other and textbook formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from p2pem.errors import ConfigError, DataError
from p2pem.leakage.closed_forms import gaussian_mi, gaussian_mi_linear, group_sum_leakage_bits, mask_leakage_bits, sum_leakage_bits


@pytest.mark.parametrize("n_h", [2, 3, 4, 7, 50])
def test_gaussian_mi_equals_sum_leakage(n_h: int) -> None:
    # Joint covariance of (X_1, ..., X_nh, S) with S the sum of i.i.d. N(0, 1).
    a = np.vstack([np.eye(n_h), np.ones((1, n_h))])
    cov = a @ a.T
    assert gaussian_mi(cov, 0, n_h) == pytest.approx(sum_leakage_bits(n_h), rel=1e-12)
    assert gaussian_mi_linear(np.eye(n_h), np.ones(n_h), 0.0, target=0) == pytest.approx(
        sum_leakage_bits(n_h), rel=1e-12
    )


@pytest.mark.parametrize("sigma", [1e-3, 0.5, 1.0, 2.0, 100.0])
def test_gaussian_mi_equals_mask_leakage(sigma: float) -> None:
    cov = np.array([[1.0, 1.0], [1.0, 1.0 + sigma**2]])
    assert gaussian_mi(cov, [0], [1]) == pytest.approx(mask_leakage_bits(sigma), rel=1e-9)
    assert gaussian_mi_linear([[1.0]], [[1.0]], sigma**2) == pytest.approx(
        mask_leakage_bits(sigma), rel=1e-9
    )


def test_gaussian_mi_is_the_determinant_formula_when_nonsingular() -> None:
    rng = np.random.default_rng(0)
    b = rng.standard_normal((5, 5))
    cov = b @ b.T + 0.1 * np.eye(5)
    ix, iv = [0, 3], [1, 2, 4]
    det = np.linalg.det
    expected = 0.5 * math.log2(
        det(cov[np.ix_(ix, ix)]) * det(cov[np.ix_(iv, iv)]) / det(cov[np.ix_(ix + iv, ix + iv)])
    )
    assert gaussian_mi(cov, ix, iv) == pytest.approx(expected, rel=1e-9)
    # Symmetric in its two arguments.
    assert gaussian_mi(cov, iv, ix) == pytest.approx(expected, rel=1e-9)


def test_gaussian_mi_singular_and_degenerate_views() -> None:
    # The view repeats the sum twice and adds a constant: still only the sum leaks.
    a = np.array([[1.0, 0, 0], [1, 1, 1], [2, 2, 2], [0, 0, 0]])
    assert gaussian_mi_linear(np.eye(3), a[1:], 0.0, target=0) == pytest.approx(
        sum_leakage_bits(3), rel=1e-12
    )
    # X_1 + X_2 together with X_2 discloses X_1 exactly.
    assert gaussian_mi_linear(np.eye(3), [[1, 1, 0], [0, 1, 0]], 0.0, target=0) == math.inf
    # Overlapping index sets share a component.
    assert gaussian_mi(np.eye(2), [0], [0, 1]) == math.inf
    # Independent, constant or empty sides carry nothing.
    assert gaussian_mi(np.eye(3), [0], [1, 2]) == 0.0
    assert gaussian_mi(np.diag([1.0, 0.0]), 0, 1) == 0.0
    assert gaussian_mi(np.eye(2), [], [1]) == 0.0


def test_leakage_formulas_edge_cases() -> None:
    assert sum_leakage_bits(1) == math.inf
    assert sum_leakage_bits(2) == pytest.approx(0.5)
    assert mask_leakage_bits(0.0) == math.inf
    assert mask_leakage_bits(math.inf) == 0.0
    assert mask_leakage_bits(1.0) == pytest.approx(0.5)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError):
            sum_leakage_bits(bad)  # type: ignore[arg-type]
    for bad_sigma in (-1.0, math.nan, "1"):
        with pytest.raises(ConfigError):
            mask_leakage_bits(bad_sigma)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "cov",
    [
        [[1.0, 0.5], [0.0, 1.0]],  # not symmetric
        [[1.0, 2.0], [2.0, 1.0]],  # not PSD
        [[1.0, np.nan], [np.nan, 1.0]],
        [[1.0, 0.0, 0.0]],  # not square
        [1.0, 2.0],
    ],
)
def test_gaussian_mi_rejects_bad_covariance(cov: list) -> None:
    with pytest.raises(DataError):
        gaussian_mi(cov, 0, 1)


def test_gaussian_mi_rejects_bad_indices() -> None:
    with pytest.raises(DataError):
        gaussian_mi(np.eye(2), [0], [2])
    with pytest.raises(DataError):
        gaussian_mi(np.eye(3), [0, 0], [1])
    with pytest.raises(DataError):
        gaussian_mi_linear(np.eye(3), [[1.0, 1.0]], 0.0)
    with pytest.raises(DataError):
        gaussian_mi_linear(np.eye(2), [[1.0, 1.0]], [1.0, 1.0])


@pytest.mark.parametrize("variances", [[1.0, 1.0, 1.0], [4.0, 1.0], [0.5, 2.0, 7.0, 1.5], [3.0]])
def test_group_sum_leakage_equals_the_gaussian_mi_of_the_sum(variances: list[float]) -> None:
    # I(X_m; sum_j X_j) for independent N(0, v_j), from the joint covariance by gaussian_mi_linear
    for member in range(len(variances)):
        expected = gaussian_mi_linear(np.diag(variances), np.ones((1, len(variances))), 0.0, target=member)
        assert group_sum_leakage_bits(variances, member) == pytest.approx(expected, rel=1e-12)
    if len(set(variances)) == 1:
        assert group_sum_leakage_bits(variances, 0) == pytest.approx(sum_leakage_bits(len(variances)), rel=1e-12)
    assert group_sum_leakage_bits([0.0, 1.0], 0) == 0.0  # a constant input reveals nothing
    for bad in ([-1.0, 1.0], [math.nan, 1.0]):
        with pytest.raises(ConfigError):
            group_sum_leakage_bits(bad, 0)
    with pytest.raises(ConfigError):
        group_sum_leakage_bits(variances, len(variances))
