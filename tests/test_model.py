"""DistributedGMM honours scikit-learn's estimator contract and agrees with GaussianMixture."""

from __future__ import annotations

import numpy as np
import pytest

from p2pem import DistributedGMM
from p2pem.errors import ConfigError, DataError, NotFittedError
from p2pem.graphs import geometric_graph

from sklearn.base import clone
from sklearn.mixture import GaussianMixture


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(60, 2)), rng.normal(size=(60, 2)) + [5.0, 1.0], rng.normal(size=(60, 2)) * 0.5 - 3.0])
    groups = rng.integers(0, 12, size=X.shape[0])
    groups[:12] = np.arange(12)  # every node holds a row
    return X, groups


@pytest.fixture(scope="module")
def fitted() -> tuple[DistributedGMM, np.ndarray, np.ndarray]:
    X, groups = _data()
    m = DistributedGMM(3, protocol="secure-sum", max_iter=30, random_state=1).fit(X, node_ids=groups, graph=geometric_graph(12, seed=2))
    return m, X, groups


def _twin(m: DistributedGMM) -> GaussianMixture:
    """scikit-learn's mixture holding exactly the fitted parameters."""
    gm = GaussianMixture(n_components=m.n_components, covariance_type="full")
    gm.weights_, gm.means_, gm.covariances_ = m.weights_, m.means_, m.covariances_
    gm.precisions_cholesky_ = np.linalg.cholesky(np.linalg.inv(m.covariances_))
    gm.precisions_ = np.linalg.inv(m.covariances_)
    gm.converged_, gm.n_iter_, gm.n_features_in_ = True, m.n_iter_, m.n_features_in_
    return gm


def test_clone_repr_and_params() -> None:
    m = DistributedGMM(3, protocol="pdmm-sp", max_iter=7, random_state=5)
    c = clone(m)
    assert c is not m and c.get_params() == m.get_params()
    assert repr(m) == "DistributedGMM(n_components=3, max_iter=7, random_state=5)"
    assert m.set_params(tol=0.0) is m and m.tol == 0.0
    with pytest.raises(ConfigError, match="no parameter 'seed'"):
        m.set_params(seed=1)


def test_not_fitted_error_is_clear_and_sklearn_compatible() -> None:
    m = DistributedGMM(2)
    for call in (lambda: m.score(np.zeros((3, 2))), lambda: m.predict(np.zeros((3, 2))), m.bic, lambda: m.sample(3)):
        with pytest.raises(NotFittedError, match="not fitted yet: call fit"):
            call()
    assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)
    # scikit-learn is loaded here, so the error is scikit-learn's class as well
    from sklearn.exceptions import NotFittedError as SklearnNotFittedError

    with pytest.raises(SklearnNotFittedError):
        m.predict_proba(np.zeros((3, 2)))


def test_inference_agrees_with_gaussian_mixture(fitted) -> None:
    m, X, _ = fitted
    gm = _twin(m)
    Xt = np.random.default_rng(9).normal(size=(50, 2)) * 3
    np.testing.assert_allclose(m.score_samples(Xt), gm.score_samples(Xt), rtol=1e-10, atol=0)
    np.testing.assert_allclose(m.predict_proba(Xt), gm.predict_proba(Xt), rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(m.predict(Xt), gm.predict(Xt))
    assert m.score(Xt) == pytest.approx(gm.score(Xt), rel=1e-10)
    assert m.bic(Xt) == pytest.approx(gm.bic(Xt), rel=1e-10)
    assert m.aic(Xt) == pytest.approx(gm.aic(Xt), rel=1e-10)


def test_network_figures_come_from_the_aggregation_and_match_the_pooled_value(fitted) -> None:
    m, X, _ = fitted
    # computed from the aggregated log-likelihood, never from pooled rows; an exact protocol
    # therefore equals the pooled computation to rounding
    assert m.n_rows_ == X.shape[0]
    assert m.network_loglik_ == pytest.approx(_twin(m).score(X) * X.shape[0], rel=1e-10)
    assert m.bic() == pytest.approx(_twin(m).bic(X), rel=1e-10)
    assert m.aic() == pytest.approx(_twin(m).aic(X), rel=1e-10)


def test_sample_is_reproducible_and_follows_the_model(fitted) -> None:
    m, _, _ = fitted
    X1, y1 = m.sample(20_000, rng=np.random.default_rng(3))
    X2, y2 = m.sample(20_000, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    assert X1.shape == (20_000, 2) and np.all(np.diff(y1) >= 0)
    np.testing.assert_allclose(np.bincount(y1, minlength=3) / 20_000, m.weights_, atol=0.02)
    for k in range(3):
        np.testing.assert_allclose(X1[y1 == k].mean(axis=0), m.means_[k], atol=0.1)


def test_sample_agrees_with_gaussian_mixture_given_the_same_random_state(fitted) -> None:
    m, _, _ = fitted
    gm = _twin(m)
    gm.random_state = np.random.RandomState(11)
    X_ref, y_ref = gm.sample(500)
    X, y = m.sample(500, rng=np.random.RandomState(11))
    np.testing.assert_allclose(X, X_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(y, y_ref)


def test_fit_with_node_ids_equals_fit_with_parts() -> None:
    X, groups = _data(1)
    g = geometric_graph(12, seed=2)
    a = DistributedGMM(2, protocol="federated", max_iter=5, random_state=0).fit(X, node_ids=groups, graph=g)
    b = DistributedGMM(2, protocol="federated", max_iter=5, random_state=0).fit([X[groups == i] for i in range(12)], g)
    np.testing.assert_array_equal(a.means_, b.means_)
    # any hashable ids: relabelled in sorted order, the same fit
    names = np.array([f"site-{i:02d}" for i in range(12)])[groups]
    c = DistributedGMM(2, protocol="federated", max_iter=5, random_state=0).fit(X, node_ids=names, graph=g)
    np.testing.assert_array_equal(a.means_, c.means_)
    assert c.node_ids_ == tuple(f"site-{i:02d}" for i in range(12))
    with pytest.raises(DataError, match="must be a 2-D array"):
        DistributedGMM(2).fit(3.0)


# --------------------------------------------------------------------------- the skew-normal estimator


def test_skew_normal_estimator_attributes_inference_and_criteria() -> None:
    import math

    from p2pem import DistributedSkewNormalMixture
    from p2pem.families import SKEW_NORMAL
    from p2pem.snmix import SkewNormalParams

    truth = SkewNormalParams.from_direct([0.4, 0.6], [[0.0, 0.0], [3.0, 1.0]], [np.eye(2), [[1.0, 0.3], [0.3, 0.8]]], [[3.0, 0.0], [-2.0, 1.0]])
    X, _ = SKEW_NORMAL.sample(truth, 240, np.random.default_rng(5))
    parts = np.array_split(X, 12)
    m = DistributedSkewNormalMixture(n_components=2, protocol="secure-sum", max_iter=30, tol=0.0, random_state=3)
    m.fit(parts, geometric_graph(12, seed=2))
    assert m.locations_.shape == (2, 2) and m.scales_.shape == (2, 2, 2) and m.shapes_.shape == (2, 2)
    assert m.weights_.shape == (2,) and m.deltas_.shape == (2, 2)
    np.testing.assert_allclose(m.means_, m.locations_ + math.sqrt(2 / math.pi) * m.deltas_, rtol=1e-14)
    np.testing.assert_allclose(m.covariances_, m.scales_ - (2 / math.pi) * m.deltas_[:, :, None] * m.deltas_[:, None, :], rtol=1e-14)
    assert m.score(X) == pytest.approx(m.loglik_[-1], rel=1e-10)
    d = 2 * (2 * 2 + 3) + 1  # G (2p + p(p+1)/2) + G - 1
    assert m.bic() == pytest.approx(-2 * m.score(X) * len(X) + d * math.log(len(X)), rel=1e-10)
    assert m.aic(X) == pytest.approx(-2 * m.score(X) * len(X) + 2 * d, rel=1e-12)
    proba = m.predict_proba(X)
    assert proba.shape == (len(X), 2) and np.allclose(proba.sum(1), 1.0)
    assert np.array_equal(m.predict(X), proba.argmax(1))
    sample, labels = m.sample(50, rng=1)
    assert sample.shape == (50, 2) and np.array_equal(m.sample(50, rng=1)[0], sample) and labels.shape == (50,)
    assert clone(m).get_params() == m.get_params() and "max_delta" in m.get_params()
    assert repr(DistributedSkewNormalMixture(2, max_delta=0.9)) == "DistributedSkewNormalMixture(n_components=2, max_delta=0.9)"
    with pytest.raises(ConfigError, match="DistributedSkewNormalMixture has no parameter 'shape'"):
        m.set_params(shape=1)
    init = {"weights": m.weights_, "locations": m.locations_, "scales": m.scales_, "shapes": m.shapes_}
    again = DistributedSkewNormalMixture(2, protocol="federated", max_iter=0, init=init).fit(parts, geometric_graph(12, seed=2))
    np.testing.assert_allclose(again.shapes_, m.shapes_, rtol=1e-12)


# --------------------------------------------------------------------------- parties and warnings


def test_graph_over_site_names_is_the_graph_over_their_ids() -> None:
    """fit(X, node_ids=names, graph=nx.cycle_graph(names)): the names label the graph's nodes
    exactly as they label the rows (sorted order), so the fit equals the one over 0..n-1."""
    import networkx as nx

    X, groups = _data(1)
    names = np.array([f"site-{i:02d}" for i in range(12)])
    g = geometric_graph(12, seed=2)
    by_ids = DistributedGMM(2, protocol="federated", max_iter=5, random_state=0).fit(X, node_ids=groups, graph=g)
    labelled = nx.relabel_nodes(g, dict(enumerate(names)))
    by_names = DistributedGMM(2, protocol="federated", max_iter=5, random_state=0).fit(X, node_ids=names[groups], graph=labelled)
    np.testing.assert_array_equal(by_ids.means_, by_names.means_)
    assert sorted(by_names.graph_.edges) == sorted(g.edges)
    stray = nx.relabel_nodes(labelled, {"site-03": "site-3"})
    with pytest.raises(ConfigError, match="graph's nodes must be the 12 parties of node_ids or 0..11; unknown node.*'site-3'"):
        DistributedGMM(2, protocol="federated", max_iter=5).fit(X, node_ids=names[groups], graph=stray)


@pytest.mark.parametrize("missing", [None, float("nan"), np.nan])
def test_a_missing_party_id_is_an_error_naming_its_row(missing) -> None:
    X, groups = _data(1)
    ids = [f"h{g}" for g in groups]
    ids[17] = missing
    with pytest.raises(DataError, match=r"node_ids has no party for row 17 "):
        DistributedGMM(2, max_iter=5).fit(X, node_ids=ids)
    with pytest.raises(DataError, match=r"no party for row 17 "):
        DistributedGMM(2, max_iter=5).fit(X, node_ids=np.array(ids, dtype=object))


def test_a_column_name_as_node_ids_gets_a_hint() -> None:
    pd = pytest.importorskip("pandas")
    X, groups = _data(1)
    frame = pd.DataFrame(X, columns=["a", "b"]).assign(hospital=groups)
    with pytest.raises(DataError, match=r"got the string 'hospital'; it is a column of X: pass node_ids=X\['hospital'\]"):
        DistributedGMM(2, max_iter=5).fit(frame, node_ids="hospital")


def test_convergence_warnings_as_scikit_learn_warns() -> None:
    """EM stopped by max_iter short of tol, and components too light to estimate, warn with
    p2pem's ConvergenceWarning (a UserWarning, as scikit-learn's); a converged fit of
    well-separated components does not."""
    import warnings

    from p2pem import ConvergenceWarning

    X, _ = _data(2)
    with pytest.warns(ConvergenceWarning, match="did not converge in max_iter = 2 EM iterations"):
        DistributedGMM(3, max_iter=2, tol=1e-12, random_state=0, n_nodes=4, protocol="federated").fit(X)
    with pytest.warns(ConvergenceWarning, match=r"components hold fewer rows' weight than n_features \+ 1 = 3"):
        DistributedGMM(60, max_iter=3, tol=0.0, reg_covar=1e-3, random_state=0, n_nodes=4, protocol="federated").fit(X[:90])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = DistributedGMM(3, max_iter=200, tol=1e-3, random_state=0, n_nodes=4, protocol="federated").fit(X)
    assert fit.converged_ and issubclass(ConvergenceWarning, UserWarning)
