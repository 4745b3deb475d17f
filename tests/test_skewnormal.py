"""The skew-normal family: its density, its EM against an independent row-wise one, every protocol.

References used by the tests are written here from the formulas of Azzalini & Capitanio
(1999) and Lin (2009) / Cabral, Lachos & Prates (2012), with SciPy's densities, so they
share no code with :mod:`p2pem.snmix`.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

from p2pem import PdmmSP, geometric_graph, make_protocol, run_protocol
from p2pem.em import EMSettings, fit_centralized
from p2pem.errors import ConfigError, InitError
from p2pem.families import GAUSSIAN, SKEW_NORMAL, SkewNormalFamily, make_family
from p2pem.gmm import GMMParams
from p2pem.simulate import max_relative_difference
from p2pem.snmix import BoundaryWarning, SkewNormalParams, params_from_dict

ROOT = Path(__file__).resolve().parents[1]
TWO_D = SkewNormalParams.from_direct(
    [0.35, 0.65],
    [[0.0, 0.5], [2.0, -1.0]],
    [[[1.5, 0.4], [0.4, 0.8]], [[0.7, -0.2], [-0.2, 1.2]]],
    [[3.0, -1.5], [-2.0, 0.5]],
)


def direct_logpdf(X: np.ndarray, params: SkewNormalParams) -> np.ndarray:
    """log f(x) from the direct parametrisation: log sum_k pi_k 2 phi_p(x; xi, Sigma) Phi(alpha^T omega^-1 (x - xi))."""
    comps = []
    for w, xi, sigma, alpha in zip(params.weights, params.locations, params.scales, params.shapes, strict=True):
        omega = np.sqrt(np.diag(sigma))
        comps.append(
            np.log(w) + math.log(2) + stats.multivariate_normal(xi, sigma).logpdf(X) + stats.norm.logcdf((X - xi) @ (alpha / omega))
        )
    return np.logaddexp.reduce(np.stack(comps, axis=1), axis=1)


def rowwise_em(X: np.ndarray, params: SkewNormalParams, n_iter: int, reg_covar: float) -> tuple[SkewNormalParams, list[float]]:
    """Standard EM in (xi, Delta, Gamma), row by row, uncentred sums, as issue 19 writes it (s2 in Delta's denominator)."""
    w, xi, delta, gamma = (np.array(a, dtype=float) for a in (params.weights, params.locations, params.deltas, params.gammas))
    k, d = xi.shape
    logliks = []
    for _ in range(n_iter + 1):
        sigma = gamma + delta[:, :, None] * delta[:, None, :]
        dens = np.zeros((len(X), k))
        r1 = np.zeros((len(X), k))
        r2 = np.zeros((len(X), k))
        for j in range(k):
            ginv = np.linalg.inv(gamma[j])
            m2 = 1.0 / (1.0 + delta[j] @ ginv @ delta[j])
            m = math.sqrt(m2)
            for i, x in enumerate(X):
                mu_tau = m2 * (delta[j] @ ginv @ (x - xi[j]))
                z = mu_tau / m
                ratio = math.exp(stats.norm.logpdf(z) - stats.norm.logcdf(z))
                r1[i, j] = mu_tau + m * ratio
                r2[i, j] = mu_tau**2 + m2 + m * mu_tau * ratio
                dens[i, j] = w[j] * 2 * stats.multivariate_normal(xi[j], sigma[j]).pdf(x) * stats.norm.cdf(z)
        logliks.append(float(np.mean(np.log(dens.sum(1)))))
        if len(logliks) == n_iter + 1:
            break
        r0 = dens / dens.sum(1, keepdims=True)
        for j in range(k):
            s0, s1, s2 = r0[:, j].sum(), (r0[:, j] * r1[:, j]).sum(), (r0[:, j] * r2[:, j]).sum()
            m0 = (r0[:, j, None] * X).sum(0)
            m1 = ((r0[:, j] * r1[:, j])[:, None] * X).sum(0)
            S = (r0[:, j, None] * X).T @ X
            new_xi = (m0 - delta[j] * s1) / s0
            c = m1 - s1 * new_xi
            new_delta = c / s2
            gamma[j] = (
                S - np.outer(new_xi, m0) - np.outer(m0, new_xi) + s0 * np.outer(new_xi, new_xi)
                - np.outer(new_delta, c) - np.outer(c, new_delta) + s2 * np.outer(new_delta, new_delta)
            ) / s0 + reg_covar * np.eye(d)
            xi[j], delta[j] = new_xi, new_delta
        w = r0.sum(0) / len(X)
    return SkewNormalParams.from_working(w, xi, delta, gamma), logliks


def _data(seed: int = 0, n: int = 240) -> np.ndarray:
    X, _ = SKEW_NORMAL.sample(TWO_D, n, np.random.default_rng(seed))
    return X


# --------------------------------------------------------------------------- the density


def test_density_equals_scipy_skewnorm_in_one_dimension() -> None:
    params = SkewNormalParams.from_direct([1.0], [[0.5]], [[[2.0]]], [[-4.0]])
    x = np.linspace(-8, 6, 101)
    got = SKEW_NORMAL.score_samples(x[:, None], params)
    np.testing.assert_allclose(got, stats.skewnorm.logpdf(x, -4.0, loc=0.5, scale=math.sqrt(2.0)), rtol=1e-12, atol=1e-12)
    # far in the light tail both factors underflow in linear space; the log stays finite and exact
    far = SKEW_NORMAL.score_samples(np.array([[40.0]]), params)
    assert np.isfinite(far[0]) and far[0] == pytest.approx(stats.skewnorm.logpdf(40.0, -4.0, loc=0.5, scale=math.sqrt(2.0)), rel=1e-10)


def test_density_equals_the_direct_formula_in_two_dimensions() -> None:
    X = np.random.default_rng(1).normal(size=(200, 2)) * 2
    np.testing.assert_allclose(SKEW_NORMAL.score_samples(X, TWO_D), direct_logpdf(X, TWO_D), rtol=1e-11, atol=1e-11)


def test_density_integrates_to_one() -> None:
    one = SkewNormalParams.from_direct([0.3, 0.7], [[0.0], [3.0]], [[[1.0]]] + [[[2.5]]], [[5.0], [-2.0]])
    total, err = integrate.quad(lambda x: float(np.exp(SKEW_NORMAL.score_samples(np.array([[x]]), one))[0]), -30, 40, limit=200)
    assert total == pytest.approx(1.0, abs=1e-9) and err < 1e-8

    # two dimensions: the trapezoidal rule on a fine grid (spectrally accurate for a smooth
    # density that has decayed to nothing at the edges of the box)
    xs, ys = np.linspace(-12, 14, 901), np.linspace(-12, 12, 801)
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    dens = np.exp(SKEW_NORMAL.score_samples(np.column_stack([gx.ravel(), gy.ravel()]), TWO_D)).reshape(gx.shape)
    total2 = integrate.trapezoid(integrate.trapezoid(dens, ys, axis=1), xs)
    assert total2 == pytest.approx(1.0, abs=1e-8)


def test_parametrisations_round_trip_and_moments() -> None:
    back = SkewNormalParams.from_working(TWO_D.weights, TWO_D.locations, TWO_D.deltas, TWO_D.gammas)
    np.testing.assert_allclose(back.scales, TWO_D.scales, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(back.shapes, TWO_D.shapes, rtol=1e-12)
    # one dimension: E X = xi + omega delta sqrt(2/pi), the textbook moments of sn
    one = SkewNormalParams.from_direct([1.0], [[0.5]], [[[2.0]]], [[3.0]])
    mean, var = stats.skewnorm.stats(3.0, loc=0.5, scale=math.sqrt(2.0), moments="mv")
    assert one.means[0, 0] == pytest.approx(float(mean), rel=1e-13)
    assert one.covariances[0, 0, 0] == pytest.approx(float(var), rel=1e-13)


def test_sampler_moments_match_the_mean_and_covariance() -> None:
    """Sample mean and covariance of each component against E X and Cov X.

    Each entry is checked at 5 standard errors (the standard error from the sample itself):
    under the normal approximation a correct sampler fails one of the 2 x (2 + 3) checks with
    probability below 6e-6.  The seed is fixed, so the test is deterministic.
    """
    X, labels = SKEW_NORMAL.sample(TWO_D, 400_000, np.random.default_rng(3))
    assert np.all(np.diff(labels) >= 0)
    for j in range(2):
        rows = X[labels == j]
        n = len(rows)
        assert abs(n / len(X) - TWO_D.weights[j]) < 5 * math.sqrt(TWO_D.weights[j] * (1 - TWO_D.weights[j]) / len(X))
        centred = rows - rows.mean(0)
        se_mean = rows.std(0) / math.sqrt(n)
        assert np.all(np.abs(rows.mean(0) - TWO_D.means[j]) < 5 * se_mean)
        for a, b in ((0, 0), (0, 1), (1, 1)):
            prod = centred[:, a] * centred[:, b]
            assert abs(prod.mean() - TWO_D.covariances[j, a, b]) < 5 * prod.std() / math.sqrt(n)


# --------------------------------------------------------------------------- the EM


def test_centralized_em_equals_an_independent_rowwise_em() -> None:
    X = _data(2, n=120)
    init = SkewNormalParams.from_direct([0.5, 0.5], [[0.2, 0.3], [1.5, -0.5]], [np.eye(2), np.eye(2)], [[1.0, 1.0], [-1.0, 1.0]])
    state = fit_centralized(X, EMSettings(2, max_iter=8, tol=0.0, reg_covar=1e-6, init=init, family=SKEW_NORMAL))
    ref, ref_ll = rowwise_em(X, init, 8, 1e-6)
    got = state.params()
    for key in ("weights", "locations", "deltas", "gammas", "scales", "shapes"):
        np.testing.assert_allclose(getattr(got, key), getattr(ref, key), rtol=1e-12, atol=1e-12, err_msg=key)
    np.testing.assert_allclose(state.node_loglik(), ref_ll, rtol=1e-12)


def test_with_delta_zero_one_step_is_the_gaussian_step() -> None:
    X = _data(4)
    scales = np.array([[[1.2, 0.3], [0.3, 0.9]], np.eye(2)])
    init = SkewNormalParams.from_direct([0.4, 0.6], [[0.0, 0.0], [2.0, -1.0]], scales, np.zeros((2, 2)))
    sn = fit_centralized(X, EMSettings(2, max_iter=1, tol=0.0, init=init, family=SKEW_NORMAL))
    gauss = fit_centralized(X, EMSettings(2, max_iter=1, tol=0.0, init=GMMParams(init.weights, init.locations, scales)))
    a, b = sn.params(), gauss.params()
    np.testing.assert_allclose(a.weights, b.weights, rtol=1e-13)
    np.testing.assert_allclose(a.locations, b.means, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(a.gammas, b.covariances, rtol=1e-12)
    assert np.max(np.abs(a.deltas)) < 1e-13  # Delta = 0 is a fixed point
    assert sn.node_loglik() == pytest.approx(gauss.node_loglik(), rel=1e-13)


def test_loglik_never_decreases() -> None:
    X = _data(5, n=600)
    state = fit_centralized(X, EMSettings(2, max_iter=150, tol=0.0, init_seed=1, family=SKEW_NORMAL))
    ll = np.array(state.node_loglik())
    assert len(ll) == 151 and ll[-1] > ll[0] + 0.1
    assert np.all(np.diff(ll) >= -1e-12 * np.abs(ll[:-1]))


def test_private_init_reads_the_skew_signs_and_public_shapes() -> None:
    X = _data(6, n=500)
    X = np.column_stack([X[:, 0], -np.exp(X[:, 1] / 2)])  # second column skewed to the left
    state = fit_centralized(X, EMSettings(2, max_iter=0, tol=0.0, init_seed=3, family=SKEW_NORMAL))
    skew = stats.skew(X, axis=0)
    assert np.array_equal(state.params().shapes[0] > 0, skew > 0) and np.all(np.abs(state.params().shapes) > 0)
    fam = make_family("skew-normal", init_shapes=[0.0, 2.0])
    assert fam.init_stats_size(2) == SKEW_NORMAL.init_stats_size(2) - 2
    public = fit_centralized(X, EMSettings(2, max_iter=0, tol=0.0, init_seed=3, family=fam)).params()
    np.testing.assert_allclose(public.shapes, [[0.0, 2.0], [0.0, 2.0]], atol=1e-12)
    # the component means are the Gaussian initialisation's
    gauss = fit_centralized(X, EMSettings(2, max_iter=0, tol=0.0, init_seed=3)).params()
    np.testing.assert_allclose(public.means, gauss.means, rtol=1e-12)


def test_boundary_warning_names_the_component_and_the_cap_holds() -> None:
    """One skew-normal on AIS (BMI, Bfat): the likelihood grows as the shape grows without bound (issue 19)."""
    from p2pem.data import load_table

    X, _ = load_table(ROOT / "data" / "ais.csv", columns=["BMI", "Bfat"])
    with pytest.warns(BoundaryWarning, match=r"^skew-normal component 0 reached the boundary"):
        state = fit_centralized(X, EMSettings(1, max_iter=600, tol=0.0, family=SKEW_NORMAL))
    ll = np.array(state.node_loglik())
    assert np.all(np.diff(ll[-100:]) > 0)  # still climbing: a supremum, not a maximum
    capped = make_family("skew-normal", max_delta=0.99)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryWarning)
        state = fit_centralized(X, EMSettings(1, max_iter=300, tol=0.0, family=capped))
    assert np.max(state.model.delta_norms) == pytest.approx(0.99, abs=1e-12)


# --------------------------------------------------------------------------- every protocol


def _network(seed: int = 0, n_nodes: int = 12):
    X = _data(10 + seed, n=180)
    parts = np.array_split(X, n_nodes)
    return parts, geometric_graph(n_nodes, seed=seed, radius=0.7), EMSettings(2, max_iter=12, tol=0.0, init_seed=seed, family=SKEW_NORMAL)


@pytest.mark.parametrize(
    "protocol,tol",
    # ADMM (theta = 0.5) stops at a looser consensus error, which the shapes (alpha, a ratio
    # of differences) amplify tenfold: 1e-7 there
    [("secure-sum", 1e-10), ("federated", 1e-10), (PdmmSP(), 1e-8), (PdmmSP(mode="async"), 1e-8), (PdmmSP(theta=0.5, c=0.3), 1e-7)],
    ids=["secure-sum", "federated", "pdmm-sync", "pdmm-async", "admm-sync"],
)
def test_every_protocol_equals_centralized(protocol, tol) -> None:
    parts, g, settings = _network(1)
    ref = run_protocol(parts, g, make_protocol("centralized"), settings)
    run = run_protocol(parts, g, make_protocol(protocol), settings, seed=4)
    assert run.n_iter == ref.n_iter == 12 and run.family == SKEW_NORMAL
    assert max_relative_difference(run.params, ref.params, SKEW_NORMAL) <= tol
    np.testing.assert_allclose(run.loglik, ref.loglik, rtol=tol)
    assert run.node_spread <= tol


@pytest.mark.parametrize("protocol", ["secure-sum", "federated", PdmmSP(), PdmmSP(accel="deflated")], ids=["secure-sum", "federated", "pdmm-sp", "pdmm-deflated"])
def test_engines_agree_bit_for_bit(protocol) -> None:
    parts, g, settings = _network(2, n_nodes=15)
    spec = make_protocol(protocol)
    a = run_protocol(parts, g, spec, settings, seed=9, engine="vectorised", record_trace=True)
    b = run_protocol(parts, g, spec, settings, seed=9, engine="messages", record_trace=True)
    assert np.array_equal(SKEW_NORMAL.flatten(a.params), SKEW_NORMAL.flatten(b.params))
    assert a.loglik == b.loglik and (a.messages, a.bytes) == (b.messages, b.bytes)
    assert sorted(m.nbytes for m in a.trace) == sorted(m.nbytes for m in b.trace)


def test_a_node_alone_gets_the_bits_of_the_batch() -> None:
    parts, _, settings = _network(3)
    X = np.concatenate(parts)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])[:-1]]).astype(np.intp)
    batch = SKEW_NORMAL.broadcast(TWO_D, len(parts))
    all_stats = SKEW_NORMAL.statistics(X, offsets, batch)
    for i in (0, 5, 11):
        alone = SKEW_NORMAL.statistics(parts[i], np.zeros(1, dtype=np.intp), SKEW_NORMAL.broadcast(TWO_D, 1))
        assert np.array_equal(alone[0], all_stats[i])


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "change,message",
    [
        ({"shapes": [[1.0, 2.0, 3.0], [0.0, 0.0]]}, "init 'shapes' must be a 2-D array of numbers"),
        ({"shapes": [[1.0], [0.0]]}, "init 'shapes' must have shape (2, 2), got (2, 1)"),
        ({"scales": [[[1.0, 2.0], [2.0, 1.0]], np.eye(2).tolist()]}, "init 'scales[0]' is not positive definite"),
        ({"means": [[0, 0], [1, 1]]}, "init 'means' is not a skew-normal init key (known: weights, locations, scales, shapes)"),
    ],
)
def test_bad_models_are_one_line_errors(change, message) -> None:
    init = {"weights": [0.5, 0.5], "locations": [[0, 0], [1, 1]], "scales": [np.eye(2).tolist()] * 2, "shapes": [[1, 0], [0, 1]]}
    init.update(change)
    with pytest.raises(InitError) as info:
        params_from_dict(init, 2, 2)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_family_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'skew-normal'\?$"):
        make_family("skew_normal")
    with pytest.raises(ConfigError, match=r"max_delta must be a number in \(0, 1\)"):
        make_family("skew-normal", max_delta=1.0)
    with pytest.raises(ConfigError, match=r"init_shapes must be a list of finite numbers"):
        make_family("skew-normal", init_shapes=["a"])
    fam = make_family("skew-normal", init_shapes=[1, -1], max_delta=0.9)
    assert isinstance(fam, SkewNormalFamily) and fam.describe() == {"name": "skew-normal", "init_shapes": [1, -1], "max_delta": 0.9}
    assert make_family(**fam.describe()) == fam
    assert GAUSSIAN.n_parameters(3, 2) == 17 and SKEW_NORMAL.n_parameters(2, 2) == 15
