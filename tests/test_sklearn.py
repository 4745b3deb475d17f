"""The distributed estimators in scikit-learn's own tools: its estimator checks, Pipeline,
cross_val_score (with parties as groups) and GridSearchCV over components and protocol
parameters; and a plain fit(X) is the same run as the scenario of the same rows and seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

import p2pem.model
from p2pem import DistributedGMM, DistributedSkewNormalMixture, PdmmSP
from p2pem.errors import ConfigError, DataError, GraphError
from p2pem.runner import run_scenario
from p2pem.scenario import load_scenario

#: Every estimator class of p2pem (one per model family), with the parameters that keep its checks fast.
ESTIMATORS = [cls(max_iter=20) for cls in p2pem.model.ESTIMATORS.values()]

#: Checks expected to fail, with the reason (none today).
EXPECTED_FAILED: dict[str, str] = {}


def _blobs(n: int = 240, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [6.0, 1.0], [-4.0, 5.0]])
    return centres[rng.integers(3, size=n)] + rng.normal(size=(n, 2))


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
# scikit-learn warns that the class does not inherit its BaseEstimator: p2pem does not import
# scikit-learn, so it cannot; the checks below are what that inheritance would promise
@pytest.mark.filterwarnings("ignore:Estimator .* does not inherit from `sklearn.base.BaseEstimator`:UserWarning")
def test_check_estimator_passes(estimator) -> None:
    results = check_estimator(estimator, expected_failed_checks=EXPECTED_FAILED, on_fail=None, on_skip=None)
    failed = [(r["check_name"], repr(r["exception"])[:200]) for r in results if r["status"] == "failed"]
    assert not failed, failed
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    # array API input is checked only with SCIPY_ARRAY_API set in the environment (scikit-learn's own skip)
    assert skipped <= {"check_array_api_input"}, skipped
    assert len([r for r in results if r["status"] == "passed"]) >= 40


def test_every_family_has_its_estimator() -> None:
    from p2pem.families import FAMILIES

    assert set(p2pem.model.ESTIMATORS) == set(FAMILIES)
    assert p2pem.model.ESTIMATORS["gaussian"] is DistributedGMM and p2pem.model.ESTIMATORS["skew-normal"] is DistributedSkewNormalMixture


def test_tags_without_importing_scikit_learn() -> None:
    code = "import p2pem, sys; m = p2pem.DistributedGMM(); print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    tags = DistributedGMM().__sklearn_tags__()
    assert tags.estimator_type == "density_estimator" and tags.target_tags.required is False


def test_fit_on_plain_rows_is_the_scenario_of_the_same_rows_and_seed(tmp_path: Path) -> None:
    """fit(X) spreads the rows as a scenario with split = "even" over n_nodes geometric nodes."""
    X = _blobs()
    lines = ["a,b"] + [f"{a!r},{b!r}" for a, b in X.tolist()]  # repr: every bit
    (tmp_path / "rows.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "s.toml").write_text(
        'seed = 7\n[data]\nsource = "csv"\npath = "rows.csv"\nsplit = "even"\n[graph]\nkind = "geometric"\nn_nodes = 15\n'
        '[em]\nn_components = 3\nmax_iter = 12\ntol = 0.0\nreg_covar = 1e-6\n[[protocols]]\nname = "pdmm-sp"\n'
    )
    run = run_scenario(load_scenario(tmp_path / "s.toml")).runs[0]
    model = DistributedGMM(3, max_iter=12, tol=0.0, random_state=7, n_nodes=15).fit(X)
    np.testing.assert_array_equal(model.means_, run.means)
    np.testing.assert_array_equal(model.covariances_, run.covariances)
    assert model.loglik_ == run.loglik and model.graph_.number_of_nodes() == 15
    assert np.bincount(model.row_nodes_).tolist() == [16] * 15


def test_a_pipeline_on_plain_rows() -> None:
    X = _blobs() * [100.0, 0.01]
    pipe = make_pipeline(StandardScaler(), DistributedGMM(3, max_iter=30, random_state=0, n_nodes=8))
    pipe.fit(X)
    model = pipe[-1]
    assert model.n_features_in_ == 2 and model.graph_.number_of_nodes() == 8
    scaled = StandardScaler().fit_transform(X)
    np.testing.assert_array_equal(pipe.predict(X), model.predict(scaled))
    assert pipe.score(X) == model.score(scaled)
    # the model found the three blobs
    assert sorted(np.bincount(pipe.predict(X), minlength=3) / len(X)) == pytest.approx(sorted(model.weights_), abs=0.05)


def test_cross_val_score_with_parties_as_groups() -> None:
    X = _blobs(300)
    rng = np.random.default_rng(1)
    for ids in (
        np.array([f"hospital-{i}" for i in rng.integers(9, size=300)]),  # text ids
        100 + rng.integers(9, size=300),  # ids that do not start at 0
    ):
        scores = cross_val_score(
            DistributedGMM(3, max_iter=20, random_state=0), X, groups=ids, cv=GroupKFold(n_splits=3), params={"node_ids": ids}
        )
        assert scores.shape == (3,) and np.all(np.isfinite(scores))
        # each fold is the fit on the other parties' rows, scored on the held-out parties' rows
        train, test = next(GroupKFold(n_splits=3).split(X, groups=ids))
        fold = DistributedGMM(3, max_iter=20, random_state=0).fit(X[train], node_ids=ids[train])
        assert fold.score(X[test]) == scores[0]
        assert len(fold.node_ids_) == 6
    # plain K-fold without parties: rows spread over the simulated nodes
    scores = cross_val_score(DistributedGMM(3, max_iter=20, random_state=0), X, cv=KFold(4))
    assert scores.shape == (4,) and np.all(np.isfinite(scores))


def test_one_party_fits_locally_and_two_cannot_run_pdmm_sp() -> None:
    X = _blobs(60)
    one = DistributedGMM(2, max_iter=10, random_state=0).fit(X, node_ids=["only"] * 60)
    assert one.protocol_["name"] == "centralized" and one.graph_.number_of_nodes() == 1
    with pytest.raises(GraphError, match="pdmm-sp cannot run over 2 simulated nodes"):
        DistributedGMM(2, max_iter=10).fit(X, node_ids=["a", "b"] * 30)
    two = DistributedGMM(2, max_iter=10, protocol="federated").fit(X, node_ids=["a", "b"] * 30)
    assert two.graph_.number_of_nodes() == 2


def test_grid_search_over_components_and_protocol_parameters() -> None:
    X = _blobs(180)
    grid = GridSearchCV(
        DistributedGMM(max_iter=25, random_state=0, n_nodes=6),
        {"n_components": [1, 2, 3], "protocol_params": [{"perturbation_std": 10.0}, {"perturbation_std": 1000.0}]},
        cv=3,
    )
    grid.fit(X)
    assert grid.best_params_["n_components"] == 3  # three blobs
    assert len(grid.cv_results_["params"]) == 6
    assert grid.best_estimator_.protocol_["params"]["perturbation_std"] in (10.0, 1000.0)
    # protocol objects are parameters too
    grid = GridSearchCV(DistributedGMM(3, max_iter=10, random_state=0, n_nodes=6),
                        {"protocol": [PdmmSP(theta=0.5), "secure-sum", "federated"]}, cv=2).fit(X)
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))


@pytest.mark.parametrize("cls", list(p2pem.model.ESTIMATORS.values()), ids=lambda c: c.__name__)
def test_every_estimator_in_pipeline_cross_validation_and_grid_search(cls) -> None:
    """What the Gaussian estimator does in scikit-learn's tools, every family's does (shorter runs)."""
    X = _blobs(150)
    pipe = make_pipeline(StandardScaler(), cls(3, max_iter=10, random_state=0, n_nodes=6)).fit(X)
    scaled = StandardScaler().fit_transform(X)
    np.testing.assert_array_equal(pipe.predict(X), pipe[-1].predict(scaled))
    ids = np.array([f"site-{i}" for i in np.random.default_rng(2).integers(6, size=150)])
    scores = cross_val_score(cls(2, max_iter=8, random_state=0), X, groups=ids, cv=GroupKFold(n_splits=3), params={"node_ids": ids})
    train, test = next(GroupKFold(n_splits=3).split(X, groups=ids))
    assert cls(2, max_iter=8, random_state=0).fit(X[train], node_ids=ids[train]).score(X[test]) == scores[0]
    grid = GridSearchCV(cls(max_iter=10, random_state=0, n_nodes=5),
                        {"n_components": [1, 3], "protocol_params": [{"perturbation_std": 10.0}, {"perturbation_std": 1000.0}]}, cv=2)
    grid.fit(X)
    assert grid.best_params_["n_components"] == 3 and type(grid.best_estimator_) is cls
    assert len(grid.cv_results_["params"]) == 4


def test_protocol_params_are_checked() -> None:
    X = _blobs(60)
    with pytest.raises(ConfigError, match="did you mean 'perturbation_std'"):
        DistributedGMM(2, protocol_params={"perturbation_sd": 1.0}).fit(X)
    with pytest.raises(ConfigError, match="protocol object carries its own parameters"):
        DistributedGMM(2, protocol=PdmmSP(), protocol_params={"theta": 0.5}).fit(X)


def test_dataframe_feature_names_and_their_warnings() -> None:
    frame = pd.DataFrame(_blobs(90), columns=["height", "weight"])
    model = DistributedGMM(3, max_iter=10, random_state=0, n_nodes=5).fit(frame)
    assert list(model.feature_names_in_) == ["height", "weight"]
    with pytest.raises(DataError, match="(?s)feature names should match.*unseen at fit time:\n- mass.*yet now missing:\n- weight"):
        model.score(frame.rename(columns={"weight": "mass"}))
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        model.score(frame.to_numpy())
    unnamed = DistributedGMM(3, max_iter=10, random_state=0, n_nodes=5).fit(frame.to_numpy())
    with pytest.warns(UserWarning, match="X has feature names, but DistributedGMM was fitted without"):
        unnamed.score(frame)


@pytest.mark.parametrize(
    "X,message",
    [
        (np.zeros((1, 2)), "at least 2 rows, got n_samples = 1"),
        (np.zeros(5), "Reshape your data"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN or infinity"),
    ],
)
def test_bad_rows_are_value_errors(X, message: str) -> None:
    with pytest.raises(DataError, match=message) as info:
        DistributedGMM().fit(X)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("method", ["predict", "predict_proba", "score_samples", "score"])
def test_shuffled_columns_raise_as_scikit_learn_raises(method: str, tmp_path: Path) -> None:
    """The newcomer's case: ``predict(df[reversed columns])`` once warned and then predicted on
    the wrong columns.  Now it raises exactly where scikit-learn's own GaussianMixture raises
    (same exception type, same first line), for a fitted and for a saved-and-loaded model."""
    from sklearn.mixture import GaussianMixture

    import p2pem

    frame = pd.DataFrame(_blobs(90), columns=["alcohol", "ash", "hue"][:2])
    shuffled = frame[list(reversed(frame.columns))]
    reference = GaussianMixture(3, random_state=0).fit(frame)
    with pytest.raises(ValueError) as theirs:
        getattr(reference, method)(shuffled)
    model = DistributedGMM(3, max_iter=5, random_state=0, n_nodes=5).fit(frame)
    loaded = p2pem.load(model.save(tmp_path / "m.json"))
    for fitted in (model, loaded):
        with pytest.raises(DataError) as ours:
            getattr(fitted, method)(shuffled)
        assert str(ours.value) == str(theirs.value)
    assert np.array_equal(model.predict(frame), loaded.predict(frame))  # the right order still predicts
