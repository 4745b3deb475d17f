"""GMM math: the batched E/M-steps against scikit-learn and against themselves."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from p2pem.data import synthetic_mixture
from p2pem.em import EMSettings, EMState, fit_centralized
from p2pem.errors import ConfigError, InitError, ProtocolError
from p2pem.gmm import (
    GMMParams,
    batch_m_step,
    batch_statistics,
    e_step,
    init_from_global,
    init_statistics,
    local_statistics,
    m_step,
    params_from_dict,
    precision_cholesky,
)


def _mixture(seed: int, n: int = 300, d: int = 2, k: int = 3):
    rng = np.random.default_rng(seed)
    X, _, true = synthetic_mixture(n, n_features=d, n_components=k, rng=rng)
    init = GMMParams(np.full(k, 1.0 / k), X[rng.choice(n, k, replace=False)], np.repeat(np.cov(X.T)[None], k, axis=0))
    return X, init


@pytest.mark.parametrize("seed,d", [(0, 2), (1, 3), (2, 5)])
def test_centralized_equals_sklearn(seed, d):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    X, init = _mixture(seed, d=d)
    state = fit_centralized(X, EMSettings(3, max_iter=50, tol=0.0, reg_covar=1e-6, init=init))
    gm = GaussianMixture(
        3, max_iter=50, tol=0, reg_covar=1e-6, weights_init=init.weights, means_init=init.means,
        precisions_init=np.linalg.inv(init.covariances), random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm.fit(X)
    p = state.params()
    assert state.n_iter == gm.n_iter_ == 50
    for ours, theirs in ((p.weights, gm.weights_), (p.means, gm.means_), (p.covariances, gm.covariances_)):
        assert np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)) <= 1e-9
    # sklearn's lower bound after the last M-step is the log-likelihood of the previous parameters
    assert state.node_loglik()[-2] == pytest.approx(gm.lower_bound_, rel=1e-9)


def test_loglik_never_decreases():
    X, init = _mixture(4, n=500)
    state = fit_centralized(X, EMSettings(3, max_iter=80, tol=0.0, init=init))
    ll = np.array(state.node_loglik())
    assert len(ll) == 81
    assert np.all(np.diff(ll) >= -1e-12 * np.abs(ll[:-1]))


def test_statistics_match_direct_formulas():
    X, init = _mixture(5, n=40, d=3)
    s = local_statistics(X, init)
    log_resp, log_norm = e_step(X, init)
    r = np.exp(log_resp)
    k, d = 3, 3
    a = r.sum(0)
    b = np.stack([(r[:, j, None] * (X - init.means[j])).sum(0) for j in range(k)])
    C = np.stack([(r[:, j, None] * (X - init.means[j])).T @ (X - init.means[j]) for j in range(k)])
    iu = np.triu_indices(d)
    expected = np.concatenate([a, b.ravel(), np.stack([c[iu] for c in C]).ravel(), [log_norm.sum()]])
    np.testing.assert_allclose(s, expected, rtol=1e-12, atol=1e-12)


def test_m_step_is_standard_em_update():
    """Sigma_new = C/a - delta delta^T equals the covariance around the new mean."""
    X, init = _mixture(6, n=60)
    params, _ = m_step(local_statistics(X, init), init.means, 0.0)
    r = np.exp(e_step(X, init)[0])
    for j in range(3):
        w = r[:, j]
        mu = (w[:, None] * X).sum(0) / w.sum()
        cov = ((w[:, None] * (X - mu)).T @ (X - mu)) / w.sum()
        np.testing.assert_allclose(params.means[j], mu, rtol=1e-12)
        np.testing.assert_allclose(params.covariances[j], cov, rtol=1e-10, atol=1e-13)
        assert params.weights[j] == pytest.approx(w.sum() / len(X), rel=1e-12)


@pytest.mark.parametrize("block", [1 << 15, 8, 1])
def test_batch_equals_single_node_bit_for_bit(block, monkeypatch):
    """A node computing its own statistics gets exactly the bits of the batch engine, however
    the batch is cut into blocks of whole nodes (8 rows: blocks of a few nodes; 1 row: one
    node per block)."""
    import p2pem.gmm

    monkeypatch.setattr(p2pem.gmm, "ROWS_PER_BLOCK", block)
    rng = np.random.default_rng(7)
    parts = [rng.normal(size=(int(m), 2)) for m in rng.integers(1, 6, size=30)]
    k = 3
    w = rng.dirichlet(np.ones(k), size=30)
    mu = rng.normal(size=(30, k, 2))
    a = rng.normal(size=(30, k, 2, 2))
    cov = a @ np.swapaxes(a, -1, -2) + np.eye(2)
    pc = precision_cholesky(cov)
    X = np.concatenate(parts)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])[:-1]])
    batch = batch_statistics(X, offsets, w, mu, pc)
    for i, part in enumerate(parts):
        single = batch_statistics(part, np.zeros(1, dtype=np.intp), w[i : i + 1], mu[i : i + 1], pc[i : i + 1])[0]
        assert np.array_equal(single, batch[i])
    wm, mm, cm, llm = batch_m_step(batch, mu, 1e-6)
    for i in range(30):
        ws, ms, cs, lls = batch_m_step(batch[i : i + 1], mu[i : i + 1], 1e-6)
        assert np.array_equal(ws[0], wm[i]) and np.array_equal(ms[0], mm[i]) and np.array_equal(cs[0], cm[i])
        assert lls[0] == llm[i]
    assert np.array_equal(precision_cholesky(cov[3]), pc[3])


def test_collapsed_component_is_a_clear_error():
    X = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 0.5]])
    far = GMMParams(np.array([0.5, 0.5]), np.array([[1.0, 0.5], [1e6, 1e6]]), np.repeat(np.eye(2)[None] * 0.01, 2, axis=0))
    with pytest.raises(ProtocolError, match="component 1 collapsed"):
        m_step(local_statistics(X, far), far.means, 1e-6)
    with pytest.raises(ProtocolError, match="not positive definite.*reg_covar"):
        precision_cholesky(np.array([[[1.0, 0.0], [0.0, -1.0]]]))


def test_private_init_is_from_global_moments():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(200, 2)) * [2.0, 0.5] + [3.0, -1.0]
    stats = init_statistics(X)
    assert stats[0] == 200
    p = init_from_global(stats / 7.0, 3, seed=11)  # averages or sums give the same init
    q = init_from_global(stats, 3, seed=11)
    assert all(np.array_equal(a, b) for a, b in ((p.weights, q.weights), (p.means, q.means), (p.covariances, q.covariances)))
    np.testing.assert_allclose(p.covariances[0], np.cov(X.T, bias=True), rtol=1e-5)
    np.testing.assert_allclose(p.weights, 1 / 3)
    # quantised to 6 significant digits: consensus-sized errors do not change the init
    r = init_from_global(stats * (1 + 1e-11), 3, seed=11)
    assert np.array_equal(r.means, q.means)


def _init_one_row(stats, k, seed):
    """The per-row initialisation as it was written before the batch form (the reference)."""

    def quantise(values):
        return np.array([float(f"{v:.5e}") for v in np.ravel(values)]).reshape(np.shape(values))

    d = int(round((-3 + np.sqrt(9 - 8 * (1 - stats.shape[0]))) / 2))
    mean = stats[1 : 1 + d] / stats[0]
    second = np.empty((d, d))
    iu = np.triu_indices(d)
    second[iu] = stats[1 + d :] / stats[0]
    second.T[iu] = stats[1 + d :] / stats[0]
    cov = quantise(second - np.outer(mean, mean))
    mean = quantise(mean)
    cov = (cov + cov.T) / 2
    u = np.random.default_rng(seed).standard_normal((k, d))
    return np.full(k, 1.0 / k), mean + u @ np.linalg.cholesky(cov).T, np.repeat(cov[None], k, axis=0)


@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_batch_init_equals_the_per_row_init_bit_for_bit(d):
    """Rows as n nodes hold one average (equal to 1e-12, so mostly one rounded value, the fast
    path) and rows far enough apart to round differently (the entry-by-entry path)."""
    from p2pem.gmm import init_from_global_batch

    rng = np.random.default_rng(d)
    X = rng.standard_normal((50, d)) @ rng.standard_normal((d, d)) + rng.standard_normal(d)
    stats = init_statistics(X)
    scale = np.array([1e-12, 1e-8, 1e-5])[rng.integers(0, 3, (300, 1))]
    rows = stats * (1 + scale * rng.standard_normal((300, stats.size)))
    for block in (rows[:1], rows[np.ravel(scale) == 1e-12], rows):
        w, m, c = init_from_global_batch(block, 3, 7)
        for i, row in enumerate(block):
            for got, want in zip((w[i], m[i], c[i]), _init_one_row(row, 3, 7), strict=True):
                assert np.array_equal(got, want) and got.tobytes() == want.tobytes()
    assert len(np.unique(init_from_global_batch(rows[np.ravel(scale) == 1e-12], 3, 7)[1], axis=0)) == 1
    with pytest.raises(ProtocolError, match="singular"):
        init_from_global_batch(np.array([[2.0, 2.0, 2.0, 2.0, 2.0, 2.0]]), 3, 7)


def test_em_state_stops_identically_on_tol():
    X, init = _mixture(9, n=200)
    state = fit_centralized(X, EMSettings(3, max_iter=500, tol=1e-4, init=init))
    ll = state.node_loglik()
    assert state.converged and state.n_iter < 500
    assert abs(ll[-2] - ll[-3]) < 1e-4 <= abs(ll[-3] - ll[-4])
    batch = EMState([X[:100], X[100:]], EMSettings(3, max_iter=500, tol=1e-4, init=init), n_nodes=2)
    while not batch.finished:
        contrib = batch.contribution()
        batch.absorb(np.repeat(contrib.sum(0, keepdims=True), 2, axis=0))
    assert batch.n_iter == state.n_iter


_INIT = {"weights": [0.25, 0.75], "means": [[0.0, 1.0], [2.0, 3.0]], "covariances": [np.eye(2), [[2.0, 0.5], [0.5, 1.0]]]}


@pytest.mark.parametrize(
    ("key", "value", "n_features", "named", "problem"),
    [
        ("weights", [0.5, 0.6], None, "weights", "must be positive and sum to 1, got [0.5, 0.6]"),
        ("weights", [-0.25, 1.25], None, "weights", "must be positive and sum to 1"),
        ("weights", [0.2, 0.3, 0.5], None, "weights", "must hold 2 weights (n_components), got 3"),
        ("means", [[0.0, np.nan], [2.0, 3.0]], None, "means", "holds a non-finite value"),
        ("means", [[0.0, 1.0], [2.0]], None, "means", "must be a 2-D array of numbers"),
        ("means", [0.0, 1.0], None, "means", "must be a non-empty 2-D array of numbers, got shape (2,)"),
        ("means", [[0.0, 1.0], [2.0, 3.0]], 3, "means", "has 2 columns but the data will have 3 features"),
        ("covariances", [np.eye(2), [[2.0, 0.5], [0.4, 1.0]]], None, "covariances[1]", "is not symmetric"),
        ("covariances", [[[1.0, 2.0], [2.0, 1.0]], np.eye(2)], None, "covariances[0]", "is not positive definite"),
        ("covariances", [np.eye(3), np.eye(3)], None, "covariances", "must have shape (2, 2, 2), got (2, 3, 3)"),
        ("mean", [[0.0, 1.0]], None, "mean", "is not an init key (known: weights, means, covariances)"),
        ("covariances", None, None, "covariances", "is missing"),
    ],
)
def test_init_validator_names_the_key(key, value, n_features, named, problem):
    init = dict(_INIT)
    if value is None:
        del init[key]
    else:
        init[key] = value
    with pytest.raises(InitError) as info:
        params_from_dict(init, 2, n_features)
    assert isinstance(info.value, ConfigError)
    assert info.value.key == named and info.value.problem.startswith(problem)
    assert str(info.value).startswith(f"init {named!r} {problem}")


def test_init_validator_returns_read_only_copies():
    means = np.array([[0.0, 1.0], [2.0, 3.0]])
    params = params_from_dict({**_INIT, "means": means}, 2, 2)
    np.testing.assert_array_equal(params.means, means)
    assert params.means.dtype == np.float64 and not params.means.flags.writeable
    assert means.flags.writeable  # the caller's array is untouched
    assert params.covariances.shape == (2, 2, 2) and not params.weights.flags.writeable
