"""The mixed-type family: EM against an independent row-wise implementation, every protocol, batch invariance."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from p2pem import PdmmSP, geometric_graph, make_protocol, run_protocol
from p2pem.em import EMSettings, fit_centralized
from p2pem.errors import ConfigError, DataError, InitError, ProtocolError
from p2pem.families import MixedFamily, make_family
from p2pem.simulate import max_relative_difference, relative_error

CATEGORIES = (3, 2, 4)


def mixed_rows(n: int, rng: np.random.Generator, p: int = 2) -> np.ndarray:
    """Rows of a 3-cluster table: p correlated continuous columns, then codes of 3, 2 and 4 categories."""
    label = rng.integers(0, 3, n)
    centre = np.array([[-1.0, 0.5], [1.0, -0.5], [0.0, 1.5]])[:, :p]
    cont = centre[label] + rng.standard_normal((n, p)) @ np.array([[0.6, 0.2], [0.0, 0.4]])[:p, :p]
    theta = [rng.dirichlet(np.ones(c), size=3) for c in CATEGORIES]
    codes = [np.array([rng.choice(len(t[0]), p=t[lab]) for lab in label]) for t in theta]
    return np.column_stack([cont, *codes]).astype(float)


# ------------------------------------------------------------------ the independent reference


def reference_em(X: np.ndarray, family: MixedFamily, init, n_iter: int, reg_covar: float):
    """Plain EM for the mixed model, written row-wise from the model's definition with SciPy densities.

    Uncentred moments, scipy.stats log densities, responsibilities by logsumexp: no code
    shared with p2pem.  Returns the parameters after ``n_iter`` M-steps and the mean
    log-likelihood before each.
    """
    p = family.n_continuous
    cont, codes = X[:, :p], X[:, p:].astype(int)
    offsets = np.concatenate([[0], np.cumsum(family.n_categories)[:-1]])
    w, mu, cov, theta = (np.array(getattr(init, key), dtype=float) for key in ("weights", "means", "covariances", "probabilities"))
    k = len(w)
    logliks = []
    for _ in range(n_iter):
        logf = np.zeros((len(X), k))
        for j in range(k):
            if family.covariance == "diag":
                logf[:, j] = stats.norm.logpdf(cont, mu[j], np.sqrt(cov[j])).sum(axis=1) if p else 0.0
            else:
                logf[:, j] = stats.multivariate_normal.logpdf(cont, mu[j], cov[j])
            with np.errstate(divide="ignore"):
                for c, off in enumerate(offsets):
                    logf[:, j] += np.log(theta[j, off + codes[:, c]])
                logf[:, j] += np.log(w[j])
        norm = logsumexp(logf, axis=1)
        logliks.append(norm.mean())
        resp = np.exp(logf - norm[:, None])
        nk = resp.sum(axis=0)
        mu = (resp.T @ cont) / nk[:, None]
        if family.covariance == "diag":
            cov = np.stack([(resp[:, j, None] * (cont - mu[j]) ** 2).sum(axis=0) / nk[j] + reg_covar for j in range(k)])
        else:
            cov = np.stack([((resp[:, j, None] * (cont - mu[j])).T @ (cont - mu[j])) / nk[j] + reg_covar * np.eye(p) for j in range(k)])
        new_theta = np.zeros_like(theta)
        for c, (off, size) in enumerate(zip(offsets, family.n_categories, strict=True)):
            for cat in range(size):
                new_theta[:, off + cat] = resp[codes[:, c] == cat].sum(axis=0) / nk
        if family.stratify is not None:  # the stratifying column keeps its one-hot
            off, size = offsets[family.stratify], family.n_categories[family.stratify]
            new_theta[:, off : off + size] = theta[:, off : off + size]
        theta = new_theta
        if family.strata_weights is None:
            w = nk / nk.sum()
        else:
            group = family.group(k)
            w = np.array([family.strata_weights[g] * nk[j] / nk[group == g].sum() for j, g in enumerate(group)])
    return w, mu, cov, theta, logliks


FAMILIES = {
    "diag": MixedFamily(2, CATEGORIES),
    "full": MixedFamily(2, CATEGORIES, "full"),
    "stratified": MixedFamily(2, CATEGORIES, stratify=1),
    "public-strata": MixedFamily(2, CATEGORIES, "full", stratify=1, strata_weights=(0.3, 0.7)),
    "categorical-only": MixedFamily(0, CATEGORIES),
}


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return mixed_rows(400, np.random.default_rng(7))


def initial_model(family: MixedFamily, X: np.ndarray, n_components: int, seed: int = 3):
    """The private initialisation computed centrally (what every protocol starts from)."""
    batch = family.init_from_global(family.init_statistics(X, np.zeros(1, dtype=np.intp)), n_components, seed)
    return batch.node(0)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_em_equals_an_independent_implementation(rows, name):
    family = FAMILIES[name]
    X = rows if family.n_continuous else rows[:, 2:]
    k = 4
    init = initial_model(family, X, k)
    settings = EMSettings(k, max_iter=12, tol=0.0, reg_covar=1e-6, init=init, family=family)
    state = fit_centralized(X, settings)
    w, mu, cov, theta, ll = reference_em(X, family, init, 12, 1e-6)
    got = state.params(0)
    for key, ref in zip(("weights", "means", "covariances", "probabilities"), (w, mu, cov, theta), strict=True):
        if ref.size:
            assert relative_error(getattr(got, key), ref) <= 1e-12, key
    np.testing.assert_allclose(state.node_loglik(0)[:12], ll, rtol=1e-12)
    assert np.all(np.diff(state.node_loglik(0)) >= -1e-12)  # EM never lowers the likelihood


def test_stratified_rows_stay_in_their_stratum(rows):
    family = FAMILIES["public-strata"]
    state = fit_centralized(rows, EMSettings(4, max_iter=5, tol=0.0, family=family, init_seed=2))
    model = state.params(0)
    np.testing.assert_allclose(model.weights[:2].sum(), 0.3, rtol=1e-12)  # the public shares hold
    log_resp, _ = family.log_responsibilities(rows, model)
    stratum = rows[:, 3].astype(int)
    assert np.all(np.exp(log_resp)[stratum == 0][:, 2:] == 0) and np.all(np.exp(log_resp)[stratum == 1][:, :2] == 0)
    X, labels = family.sample(model, 500, np.random.default_rng(0))
    np.testing.assert_array_equal(X[:, 3], family.group(4)[labels])  # a sampled row carries its component's stratum


# ------------------------------------------------------------------ protocols and engines


def split(X: np.ndarray, n_nodes: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.array_split(X[rng.permutation(len(X))], n_nodes)


@pytest.mark.parametrize("name", ["diag", "full", "stratified"])
@pytest.mark.parametrize("protocol,tol", [("secure-sum", 1e-10), ("federated", 1e-10), ("pdmm-sp", 1e-8)])
def test_protocols_reproduce_centralized_em(rows, name, protocol, tol):
    family = FAMILIES[name]
    parts = split(rows, 10, 1)
    g = geometric_graph(10, seed=1, radius=0.7)
    settings = EMSettings(4, max_iter=10, tol=0.0, init_seed=5, family=family)
    ref = run_protocol(parts, g, make_protocol("centralized"), settings)
    run = run_protocol(parts, g, make_protocol(protocol), settings, seed=3)
    assert run.n_iter == ref.n_iter == 10
    assert max_relative_difference(run.params, ref.params, family) <= tol
    assert run.node_spread <= tol
    np.testing.assert_allclose(run.loglik, ref.loglik, rtol=tol)


@pytest.mark.parametrize("protocol", [PdmmSP(), PdmmSP(mode="async"), make_protocol("secure-sum")], ids=["pdmm-sync", "pdmm-async", "secure-sum"])
def test_engines_agree_bit_for_bit(rows, protocol):
    family = FAMILIES["full"]
    parts = split(rows, 8, 2)
    g = geometric_graph(8, seed=2, radius=0.8)
    settings = EMSettings(3, max_iter=3 if protocol.asynchronous else 6, tol=0.0, init_seed=1, family=family)
    a = run_protocol(parts, g, protocol, settings, seed=4, engine="vectorised", record_trace=True)
    b = run_protocol(parts, g, protocol, settings, seed=4, engine="messages", record_trace=True)
    np.testing.assert_array_equal(family.flatten(a.params), family.flatten(b.params))
    assert a.loglik == b.loglik
    assert a.trace is not None and b.trace is not None and len(a.trace) == len(b.trace)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_statistics_do_not_depend_on_the_batch(rows, name):
    family = FAMILIES[name]
    X = rows if family.n_continuous else rows[:, 2:]
    parts = split(X, 7, 3)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])[:-1]]).astype(np.intp)
    stacked = np.vstack(parts)
    init_rows = family.init_statistics(stacked, offsets)
    model = family.init_from_global(init_rows.mean(axis=0, keepdims=True), 4, 9)
    batch = family.broadcast(model.node(0), 7)
    family.check(batch)
    together = family.statistics(stacked, offsets, batch)
    for i, part in enumerate(parts):
        one = family.broadcast(model.node(0), 1)
        family.check(one)
        np.testing.assert_array_equal(family.statistics(part, np.zeros(1, dtype=np.intp), one)[0], together[i])
        np.testing.assert_array_equal(family.init_statistics(part, np.zeros(1, dtype=np.intp))[0], init_rows[i])


def test_private_initialisation_is_bit_identical_under_consensus_error(rows):
    family = FAMILIES["full"]
    avg = family.init_statistics(rows, np.zeros(1, dtype=np.intp)) / len(rows)
    noisy = avg * (1 + 1e-11 * np.random.default_rng(0).standard_normal((5, avg.shape[1])))
    batch = family.init_from_global(noisy, 6, 11)
    flat = family.flatten_batch(batch)
    assert np.all(flat == flat[0])
    assert np.allclose(batch.probabilities.reshape(5, 6, -1)[..., :3].sum(axis=-1), 1.0)


# ------------------------------------------------------------------ the model's other methods


def test_sampling_follows_the_model():
    family = MixedFamily(1, (3,), stratify=None)
    model = family.params_from_dict(
        {"weights": [0.25, 0.75], "means": [[-2.0], [3.0]], "covariances": [[0.5], [2.0]], "probabilities": [[0.2, 0.3, 0.5], [0.6, 0.0, 0.4]]},
        2,
    )
    X, labels = family.sample(model, 40_000, np.random.default_rng(1))
    assert X.shape == (40_000, 2) and set(np.unique(X[:, 1])) <= {0.0, 1.0, 2.0}
    for j in range(2):
        rows = X[labels == j]
        assert abs(len(rows) / len(X) - model.weights[j]) < 0.01
        assert abs(rows[:, 0].mean() - model.means[j, 0]) < 0.05 and abs(rows[:, 0].var() / model.covariances[j, 0] - 1) < 0.05
        freq = np.bincount(rows[:, 1].astype(int), minlength=3) / len(rows)
        np.testing.assert_allclose(freq, model.probabilities[j], atol=0.015)
    assert np.all(X[labels == 1, 1] != 1)  # a category of probability 0 never appears
    log_resp, log_p = family.log_responsibilities(X[:5], model)
    assert log_resp.shape == (5, 2) and np.allclose(np.exp(log_resp).sum(axis=1), 1)
    assert family.n_parameters(2, 2) == 1 + 2 + 2 + 2 * 2


def test_bad_models_and_rows_are_named():
    family = MixedFamily(1, (3,))
    good = {"weights": [1.0], "means": [[0.0]], "covariances": [[1.0]], "probabilities": [[0.2, 0.3, 0.5]]}
    family.params_from_dict(good, 1)
    for key, value, words in [
        ("covariances", [[-1.0]], "positive variances"),
        ("probabilities", [[0.5, 0.3, 0.5]], "sum to 1"),
        ("means", [[0.0, 1.0]], "shape"),
    ]:
        with pytest.raises(InitError, match=words) as info:
            family.params_from_dict({**good, key: value}, 1)
        assert info.value.key.startswith(key)
    with pytest.raises(InitError, match="not an init key"):
        family.params_from_dict({**good, "shapes": [0.0]}, 1)
    with pytest.raises(DataError, match="row 1: 3.0 is not a category code 0..2"):
        family.codes(np.array([[0.0, 1.0], [0.0, 3.0]]))
    with pytest.raises(DataError, match="rows have 3 columns"):
        family.stats_size(1, 3)
    with pytest.raises(ConfigError, match="do not split evenly"):
        MixedFamily(1, (3,), stratify=0).stats_size(4, 2)
    for bad in [dict(n_categories=(0,)), dict(covariance="spherical"), dict(stratify=2), dict(strata_weights=(0.5, 0.5))]:
        with pytest.raises(ConfigError):
            MixedFamily(**{"n_continuous": 1, "n_categories": (3,), **bad})
    assert make_family("mixed", **family.config()) == family


def test_a_collapsed_component_is_a_one_line_protocol_error(rows):
    family = FAMILIES["diag"]
    init = initial_model(family, rows, 3)
    dead = dataclasses.replace(init, means=np.array(init.means) + np.array([[0.0, 0.0], [0.0, 0.0], [1e3, 1e3]]))
    with pytest.raises(ProtocolError, match="component 2 collapsed"):
        fit_centralized(rows, EMSettings(3, max_iter=3, tol=0.0, init=dead, family=family))


def test_the_estimator_fits_the_mixed_family(rows):
    """DistributedMixedMixture through secure-sum equals the independent EM; inference through the family."""
    from p2pem import DistributedMixedMixture

    family = FAMILIES["stratified"]
    init = initial_model(family, rows, 4)
    keys = ("weights", "means", "covariances", "probabilities")
    est = DistributedMixedMixture(4, protocol="secure-sum", max_iter=8, tol=0.0, init={key: getattr(init, key) for key in keys},
                                  n_continuous=2, n_categories=CATEGORIES, stratify=1)
    est.fit(split(rows, 10, 1), geometric_graph(10, seed=1, radius=0.7))
    for key, ref in zip(keys, reference_em(rows, family, init, 8, 1e-6)[:4], strict=True):
        assert relative_error(getattr(est, f"{key}_"), ref) <= 1e-10, key
    proba = est.predict_proba(rows)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    stratum = rows[:, 2 + 1].astype(int)  # the stratifying column: each row's posterior stays in its stratum's components
    assert np.all(proba[np.arange(len(rows)), 2 * stratum] + proba[np.arange(len(rows)), 2 * stratum + 1] > 1 - 1e-12)
    assert est.get_params()["n_categories"] == CATEGORIES and "stratify=1" in repr(est)
    with pytest.raises(DataError, match=r"rows have 5 columns but the family has 4 \(1 continuous \+ 3 categorical\)"):
        DistributedMixedMixture(4, protocol="secure-sum", n_continuous=1, n_categories=CATEGORIES).fit(split(rows, 10, 1))
