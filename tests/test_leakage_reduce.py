"""Tests of p2pem.leakage.reduce's one-split linear reduction (best_linear_estimate)."""

from __future__ import annotations

import numpy as np
import pytest

from p2pem.errors import ConfigError, DataError
from p2pem.leakage.closed_forms import gaussian_mi_linear
from p2pem.leakage.estimators import mutual_information
from p2pem.leakage.reduce import LinearEstimate, best_linear_estimate

N = 10_000
TOL_BITS = 0.05


def test_best_linear_estimate_recovers_known_map_and_mi() -> None:
    rng = np.random.default_rng(23)
    n_inputs, n_view = 4, 10
    mix = rng.standard_normal((n_view, n_inputs))
    noise_sd = 0.7
    inputs = rng.standard_normal((N, n_inputs))
    view = inputs @ mix.T + noise_sd * rng.standard_normal((N, n_view))

    result = best_linear_estimate(inputs[:, 0], view, rng=rng)
    assert isinstance(result, LinearEstimate)
    assert result.target.shape == result.estimate.shape == (N // 2,)
    np.testing.assert_array_equal(result.target, inputs[result.test_index, 0])

    # OLS converges to the Gaussian regression coefficients S_vv^-1 S_vx.
    cov_vv = mix @ mix.T + noise_sd**2 * np.eye(n_view)
    expected_coef = np.linalg.solve(cov_vv, mix[:, 0])
    np.testing.assert_allclose(result.coef[:, 0], expected_coef, atol=0.03)
    assert abs(result.intercept[0]) < 0.03

    # For a Gaussian linear view the reduction loses nothing: I(X; E[X|V]) = I(X; V).
    exact = gaussian_mi_linear(np.eye(n_inputs), mix, noise_sd**2, target=0)
    reduced = mutual_information(result.target, result.estimate, rng=rng)
    assert reduced == pytest.approx(exact, abs=TOL_BITS)


def test_best_linear_estimate_multi_target_and_validation() -> None:
    rng = np.random.default_rng(24)
    t = rng.standard_normal((300, 2))
    view = np.c_[t, rng.standard_normal(300)]
    result = best_linear_estimate(t, view, train_fraction=0.8, rng=rng)
    assert result.estimate.shape == (60, 2)
    np.testing.assert_allclose(result.estimate, result.target, atol=1e-10)
    with pytest.raises(ConfigError):
        best_linear_estimate(t, view, train_fraction=1.0, rng=rng)
    with pytest.raises(DataError):
        best_linear_estimate(t, view[:-1], rng=rng)
    with pytest.raises(DataError):
        best_linear_estimate(t[:4], view[:4], rng=rng)  # 2 training rows, 4 coefficients
