"""The models of the report: classifiers trained on synthetic rows, and a named regression.

* :func:`tstr_accuracy` -- train on one table (synthetic), test on the real test split
  (TSTR; "train on real, test on real" with the real training split), a logistic
  regression or a linear SVM on one-hot categoricals and standardised numerics;
* :func:`fit_regression` and :func:`reproducibility` -- whether a finding on the real data
  (the signs and significance of a regression's coefficients) is reproduced on each of
  several synthetic releases, and :func:`finding_strength`, which grades each finding strong
  or weak by how often the real data's own bootstrap reproduces it: the protocol of Jälkö,
  Lagerspetz, Haukka, Tarkoma, Honkela & Kaski, "Privacy-preserving data sharing via
  probabilistic modelling", *Patterns* 2021 (Figs. 3, 5 and 6).

scikit-learn and statsmodels are optional dependencies (``pip install 'p2pem[synth]'``):
they are imported inside the functions, and a missing one is a one-line ConfigError.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from p2pem.errors import ConfigError, DataError
from p2pem.tabular import Categorical, Continuous, Table, design_matrix

__all__ = [
    "ADULT_INCOME_RACE_REGRESSION",
    "ADULT_INCOME_REGRESSION",
    "MODELS",
    "Regression",
    "RegressionFit",
    "N_BOOTSTRAP",
    "STRONG",
    "finding_strength",
    "fit_regression",
    "reproducibility",
    "require",
    "single_threaded",
    "tstr_accuracy",
]

FloatArray = npt.NDArray[np.float64]

#: The classifiers of :func:`tstr_accuracy`.
MODELS = ("logistic", "svm")
_SIGNIFICANCE = 0.05


def single_threaded() -> AbstractContextManager[Any]:
    """Run BLAS and OpenMP on one thread inside the block (restored after it).

    The report's problems are small and dense (Adult: 30 162 x 107): one thread fits a
    logistic regression in half a second, while two threads on a busy two-core machine were
    measured 30 times slower, spinning on each other.  threadpoolctl is a core dependency.
    """
    return cast(AbstractContextManager[Any], threadpool_limits(limits=1))


def require(module: str) -> ModuleType:
    """Import an optional dependency of the report, or fail with a one-line ConfigError."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = {"sklearn": "scikit-learn"}.get(module.split(".")[0], module.split(".")[0])
        raise ConfigError(f"the synthetic-data report needs {package}: pip install 'p2pem[synth]'") from None


# ----------------------------------------------------------------------------- TSTR


def _features(table: Table, target: str) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Every column but ``target``: continuous columns first, then one-hot categories."""
    others = [c for c in table.schema.columns if c.name != target]
    order = [c.name for c in others if isinstance(c, Continuous)] + [c.name for c in others if isinstance(c, Categorical)]
    design = design_matrix(table, order)
    return design.X, design.is_continuous


def _classes(table: Table, target: str) -> npt.NDArray[np.int64]:
    if not isinstance(table.schema.column(target), Categorical):
        raise ConfigError(f"target column {target!r} must be categorical to be classified")
    return np.asarray(table.column(target), dtype=np.int64)


def tstr_accuracy(train: Table, test: Table, target: str, *, model: str = "logistic") -> dict[str, Any]:
    """Accuracy on ``test`` of a classifier of ``target`` trained on ``train``.

    The features are every other column: continuous columns standardised with the mean
    and (population) standard deviation of ``train`` -- the data being evaluated -- and
    each categorical column one-hot over its public categories.  With synthetic rows as
    ``train`` this is "train on synthetic, test on real" (TSTR); with the real training
    split it is the train-on-real reference.

    Parameters
    ----------
    train, test : Table
        Same schema.
    target : str
        A categorical column.
    model : {"logistic", "svm"}, default "logistic"
        ``sklearn.linear_model.LogisticRegression(max_iter=1000)`` (L2, C = 1) or
        ``sklearn.svm.LinearSVC(dual=False)`` (squared hinge, L2, C = 1).

    Returns
    -------
    dict
        ``accuracy``; ``converged`` (False when the solver warned that it stopped early);
        ``note`` (None, or why no model was fitted: a training set with one class
        predicts that class).
    """
    if model not in MODELS:
        raise ConfigError(f"model must be one of {', '.join(map(repr, MODELS))}, got {model!r}")
    if train.schema != test.schema:
        raise DataError("tstr_accuracy: the training and test tables have different schemas")
    y_train, y_test = _classes(train, target), _classes(test, target)
    present = np.unique(y_train)
    if present.size == 1:
        return {"accuracy": float(np.mean(y_test == present[0])), "converged": True, "note": "one class in the training rows"}
    X_train, continuous = _features(train, target)
    X_test, _ = _features(test, target)
    mean = X_train[:, continuous].mean(axis=0)
    std = X_train[:, continuous].std(axis=0)
    std[std == 0] = 1.0
    X_train[:, continuous] = (X_train[:, continuous] - mean) / std
    X_test[:, continuous] = (X_test[:, continuous] - mean) / std
    require("sklearn")  # optional dependency: the report's classifiers
    exceptions = importlib.import_module("sklearn.exceptions")
    if model == "logistic":
        estimator = importlib.import_module("sklearn.linear_model").LogisticRegression(solver="newton-cholesky", max_iter=1000)
    else:
        estimator = importlib.import_module("sklearn.svm").LinearSVC(dual=False, max_iter=5000)
    with single_threaded(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", exceptions.ConvergenceWarning)
        estimator.fit(X_train, y_train)
    converged = not any(issubclass(w.category, exceptions.ConvergenceWarning) for w in caught)
    accuracy = float(np.mean(estimator.predict(X_test) == y_test))
    return {"accuracy": accuracy, "converged": converged, "note": None}


# ----------------------------------------------------------------------- regression


@dataclass(frozen=True)
class Regression:
    """A named regression whose finding should survive synthesis.

    Parameters
    ----------
    target : str
        The response: a categorical column for ``kind="logistic"``, continuous for
        ``"linear"``.
    predictors : tuple of str
        The explanatory columns.  Continuous ones are standardised with the real
        training data's mean and standard deviation (the same transform for every
        release, so coefficients are comparable: log-odds per real standard deviation);
        categorical ones enter as indicators of every category but the first.
    positive : str or None, default None
        For ``"logistic"``: the category modelled as 1 (every other is 0); default the
        last public category.
    kind : {"logistic", "linear"}, default "logistic"
        ``statsmodels`` Logit or OLS, with an intercept.
    """

    target: str
    predictors: tuple[str, ...]
    positive: str | None = None
    kind: str = "logistic"

    def __post_init__(self) -> None:
        if self.kind not in ("logistic", "linear"):
            raise ConfigError(f"regression kind must be 'logistic' or 'linear', got {self.kind!r}")
        if not self.predictors or self.target in self.predictors:
            raise ConfigError("a regression needs predictors, and its target is not one of them")

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "predictors": list(self.predictors), "positive": self.positive, "kind": self.kind}


#: p2pem's Adult finding: logistic regression of income > 50K on education-num, sex, age and
#: hours-per-week.  It is p2pem's choice, not Jälkö et al.'s: their Adult study measures
#: classification accuracy (their Fig. 7b) and fits no regression on Adult.
ADULT_INCOME_REGRESSION = Regression("income", ("education-num", "sex", "age", "hours-per-week"), positive=">50K")
#: The same with race (White the reference): p2pem's Adult regression with weak findings too,
#: the small race groups, as Jälkö et al.'s ARD study has small medication subgroups.
ADULT_INCOME_RACE_REGRESSION = Regression("income", ("education-num", "sex", "age", "hours-per-week", "race"), positive=">50K")


@dataclass(frozen=True)
class RegressionFit:
    """Coefficients and Wald p-values of one fit (intercept first)."""

    names: tuple[str, ...]
    coefficients: FloatArray
    p_values: FloatArray


def _regression_data(table: Table, spec: Regression, center: FloatArray, scale: FloatArray) -> tuple[FloatArray, FloatArray, tuple[str, ...]]:
    design = design_matrix(table, spec.predictors, drop_first=True)
    X = design.X.copy()
    X[:, design.is_continuous] = (X[:, design.is_continuous] - center) / scale
    target = table.schema.column(spec.target)
    if spec.kind == "logistic":
        if not isinstance(target, Categorical):
            raise ConfigError(f"a logistic regression needs a categorical target, {spec.target!r} is continuous")
        positive = spec.positive if spec.positive is not None else target.categories[-1]
        if positive not in target.categories:
            raise ConfigError(f"regression positive class {positive!r} is not a category of {spec.target!r}")
        y = (table.column(spec.target) == target.categories.index(positive)).astype(np.float64)
    else:
        if not isinstance(target, Continuous):
            raise ConfigError(f"a linear regression needs a continuous target, {spec.target!r} is categorical")
        y = np.asarray(table.column(spec.target), dtype=np.float64)
    X = np.hstack([np.ones((X.shape[0], 1)), X])
    return X, y, ("intercept", *design.feature_names)


def _standardisation(real: Table, spec: Regression) -> tuple[FloatArray, FloatArray]:
    design = design_matrix(real, spec.predictors, drop_first=True)
    block = design.X[:, design.is_continuous]
    scale = block.std(axis=0)
    scale[scale == 0] = 1.0
    return block.mean(axis=0), scale


def fit_regression(table: Table, spec: Regression, *, standardize_with: Table | None = None) -> RegressionFit:
    """Fit ``spec`` on ``table`` with statsmodels (maximum likelihood, Wald p-values).

    Parameters
    ----------
    table : Table
        The rows.
    spec : Regression
        The model.
    standardize_with : Table, optional
        The table whose continuous predictors' mean and standard deviation standardise
        them (the real training data when fitting a release); default ``table``.

    Raises
    ------
    DataError
        The fit failed (a singular design, e.g. a category no row uses; perfect
        separation); the message says which.
    """
    sm = require("statsmodels.api")  # optional dependency: p-values of the named regression
    failures = (np.linalg.LinAlgError, ValueError, Warning, importlib.import_module("statsmodels.tools.sm_exceptions").PerfectSeparationError)
    center, scale = _standardisation(standardize_with if standardize_with is not None else table, spec)
    X, y, names = _regression_data(table, spec, center, scale)
    model = sm.Logit(y, X) if spec.kind == "logistic" else sm.OLS(y, X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a non-converged or separated fit is a failure, not a finding
        try:
            result = model.fit(disp=0) if spec.kind == "logistic" else model.fit()
            coefficients, p_values = np.asarray(result.params, dtype=np.float64), np.asarray(result.pvalues, dtype=np.float64)
        except failures as exc:
            raise DataError(f"the regression of {spec.target!r} could not be fitted ({type(exc).__name__}: {exc})") from None
    if not (np.all(np.isfinite(coefficients)) and np.all(np.isfinite(p_values))):
        raise DataError(f"the regression of {spec.target!r} has non-finite coefficients or p-values (a singular design?)")
    return RegressionFit(names, coefficients, p_values)


#: Resamples of the real rows that grade a finding (Jälkö et al. bootstrap the real data 100 times, Fig. 6).
N_BOOTSTRAP = 100
#: A finding is strong when at least this share of the bootstrap resamples of the real rows
#: reproduces it, else weak.  Jälkö et al. call the female ARD signal weak because about 30 %
#: of 100 resamples miss significance (Fig. 6) and give no number; 0.95 is p2pem's.
STRONG = 0.95


def _holds(fit: RegressionFit, index: npt.NDArray[np.int64], sign: FloatArray) -> npt.NDArray[np.bool_]:
    """Which findings (coefficients ``index`` with real signs ``sign``) a fit reproduces: same sign, p < 0.05."""
    return (np.sign(fit.coefficients[index]) == sign) & (fit.p_values[index] < _SIGNIFICANCE)


def finding_strength(real: Table, spec: Regression, *, rng: np.random.Generator, n_boot: int = N_BOOTSTRAP) -> dict[str, float]:
    """For every finding of ``spec`` on ``real``, the share of bootstrap resamples that reproduce it.

    A finding is a predictor whose coefficient is significant (p < 0.05) on the real rows;
    a resample (``real.n_rows`` rows drawn with replacement from ``rng``) reproduces it when
    its coefficient has the same sign and p < 0.05 (Jälkö et al. 2021, Fig. 6: the real
    data's own sampling noise, before any synthesis).  A resample that cannot be fitted
    reproduces nothing.
    """
    truth = fit_regression(real, spec)
    index = np.flatnonzero(truth.p_values[1:] < _SIGNIFICANCE) + 1
    hits = np.zeros(index.size)
    for _ in range(n_boot):
        sample = real.take(np.sort(rng.integers(0, real.n_rows, real.n_rows)))
        try:
            hits += _holds(fit_regression(sample, spec, standardize_with=real), index, np.sign(truth.coefficients[index]))
        except DataError:
            continue
    return {truth.names[i]: float(h / n_boot) for i, h in zip(index, hits, strict=True)}


def reproducibility(
    real: Table,
    releases: Sequence[Table],
    spec: Regression,
    *,
    rng: np.random.Generator | None = None,
    n_boot: int = N_BOOTSTRAP,
    independent_fits: bool = False,
    strength: dict[str, float] | None = None,
) -> dict[str, Any]:
    """How often a regression finding on the real data holds on synthetic releases.

    A release reproduces the finding when every predictor's coefficient (the intercept
    aside) has the sign it has on the real data and is significant (p < 0.05) exactly
    when it is on the real data.  A release on which the model cannot be fitted does not
    reproduce it.

    With ``rng`` and ``n_boot > 0`` (or a ready ``strength``), also Jälkö et al.'s protocol
    (*Patterns* 2021): every finding (a predictor significant on the real rows) is graded strong or weak by :func:`finding_strength`
    (:data:`STRONG`), and reproduced by a release when its coefficient has the real sign and
    p < 0.05; ``strong`` and ``weak`` give the share of releases that reproduce all findings
    of that grade.  Their protocol fits every release afresh (independent DP noise); say so
    with ``independent_fits`` -- releases sampled from one fitted model share its noise, and
    their rates measure sampling noise alone.  ``strength`` (:func:`finding_strength` of the
    same ``real`` and ``spec``) skips the bootstrap when one study judges several sets of
    releases.

    Returns
    -------
    dict
        ``regression`` (the spec), ``real`` (coefficients and p-values by feature name),
        ``releases`` (the same per release, with ``reproduced`` and ``error``),
        ``rate`` (the fraction of releases that reproduce), ``per_coefficient_rate``,
        and ``mean_abs_coef_error`` (the mean over fitted releases and predictors of
        ``|beta_release - beta_real|``; None when none could be fitted).
    """
    truth = fit_regression(real, spec)
    predictors = slice(1, None)
    real_sign = np.sign(truth.coefficients[predictors])
    real_significant = truth.p_values[predictors] < _SIGNIFICANCE
    per_release: list[dict[str, Any]] = []
    hits = np.zeros(len(truth.names) - 1)
    errors: list[float] = []
    for release in releases:
        try:
            fit = fit_regression(release, spec, standardize_with=real)
        except DataError as exc:
            per_release.append({"reproduced": False, "error": str(exc), "coefficients": None, "p_values": None})
            continue
        same = (np.sign(fit.coefficients[predictors]) == real_sign) & ((fit.p_values[predictors] < _SIGNIFICANCE) == real_significant)
        hits += same
        errors.extend(np.abs(fit.coefficients[predictors] - truth.coefficients[predictors]).tolist())
        per_release.append(
            {
                "reproduced": bool(np.all(same)),
                "error": None,
                "coefficients": dict(zip(fit.names, fit.coefficients.tolist(), strict=True)),
                "p_values": dict(zip(fit.names, fit.p_values.tolist(), strict=True)),
            }
        )
    n = len(per_release)
    if strength is None and rng is not None and n_boot > 0:
        strength = finding_strength(real, spec, rng=rng, n_boot=n_boot)
    graded = {
        "independent_fits": bool(independent_fits),
        "note": None if independent_fits else "the releases are samples of one fitted model: they share its DP noise, so the rates measure "
                                              "sampling noise alone (Jälkö et al. fit every release afresh)",
        **(_graded(truth, per_release, strength, n_boot) if strength is not None else {}),
    }
    return {
        **graded,
        "regression": spec.to_dict(),
        "real": {
            "coefficients": dict(zip(truth.names, truth.coefficients.tolist(), strict=True)),
            "p_values": dict(zip(truth.names, truth.p_values.tolist(), strict=True)),
        },
        "releases": per_release,
        "rate": sum(r["reproduced"] for r in per_release) / n if n else None,
        "per_coefficient_rate": dict(zip(truth.names[1:], (hits / n).tolist(), strict=True)) if n else None,
        "mean_abs_coef_error": float(np.mean(errors)) if errors else None,
    }


def _graded(truth: RegressionFit, per_release: list[dict[str, Any]], strength: dict[str, float], n_boot: int) -> dict[str, Any]:
    """The strong/weak part of :func:`reproducibility` (Jälkö et al.'s protocol)."""
    sign = {name: float(np.sign(truth.coefficients[truth.names.index(name)])) for name in strength}

    def reproduced(release: dict[str, Any], name: str) -> bool:
        if release["coefficients"] is None:
            return False
        return bool(np.sign(release["coefficients"][name]) == sign[name] and release["p_values"][name] < _SIGNIFICANCE)

    findings: list[dict[str, Any]] = [
        {"name": name, "sign": sign[name], "bootstrap_rate": share, "grade": "strong" if share >= STRONG else "weak",
         "rate": float(np.mean([reproduced(r, name) for r in per_release])) if per_release else None}
        for name, share in strength.items()
    ]
    grades: dict[str, Any] = {}
    for grade in ("strong", "weak"):
        names = [str(f["name"]) for f in findings if f["grade"] == grade]
        rate = float(np.mean([all(reproduced(r, x) for x in names) for r in per_release])) if names and per_release else None
        grades[grade] = {"findings": names, "rate": rate}
    return {
        "protocol": (f"Jälkö et al. 2021: a finding is a predictor with p < 0.05 on the real rows; a release reproduces it with the "
                     f"real sign and p < 0.05; strong when >= {STRONG:g} of {n_boot} bootstrap resamples of the real rows reproduce it"),
        "findings": findings,
        **grades,
    }
