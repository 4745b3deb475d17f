"""The synthetic-data report: every metric against scipy / scikit-learn / statsmodels on the same arrays.

scikit-learn and statsmodels (with pandas) are in the ``test`` extra: a missing one fails here, not skips.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import jsonschema
import numpy as np
import pandas
import pytest
import sklearn.compose as sklearn_compose
import sklearn.linear_model as sklearn_linear
import sklearn.neighbors as sklearn_neighbors
import sklearn.pipeline as sklearn_pipeline
import sklearn.preprocessing as sklearn_preprocessing
import sklearn.svm as sklearn_svm
import statsmodels.formula.api as smf
from scipy import stats

from p2pem.errors import ConfigError, DataError
from p2pem.schemas import load_schema as load_json_schema
from p2pem.synth import ADULT_INCOME_REGRESSION, REPORT_FORMAT, Regression, report_figure, synth_report
from p2pem.synth.metrics import (
    closest_distances,
    correlation_distances,
    dcr_features,
    exact_copy_share,
    ks_distance,
    marginal_tvds,
    tvd,
)
from p2pem.synth.models import fit_regression, require, reproducibility, tstr_accuracy
from p2pem.synth.report import _draw
from p2pem.tabular import Categorical, Continuous, Schema, Table, discretize, domain_sizes, load_schema, read_table


DATA = Path(__file__).resolve().parent.parent / "data"

SCHEMA = Schema(
    (
        Continuous("x", 0.0, 10.0),
        Categorical("colour", ("red", "green", "blue")),
        Continuous("n", 0, 20, integer=True),
        Categorical("label", ("no", "yes")),
    )
)


def random_table(n: int, rng: np.random.Generator, *, signal: float = 2.0) -> Table:
    """Rows whose label depends on x and colour (so a classifier has something to learn)."""
    x = rng.uniform(0, 10, n)
    colour = rng.integers(0, 3, n)
    count = rng.integers(0, 21, n)
    logit = signal * (x - 5) / 3 + (colour == 2) - 0.05 * (count - 10)
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return Table.from_blocks(SCHEMA, np.column_stack([x, count]), np.column_stack([colour, label]))


@pytest.fixture(scope="module")
def adult() -> tuple[Table, Table]:
    schema = load_schema(DATA / "adult.schema.toml")
    return read_table(DATA / "adult.data", schema), read_table(DATA / "adult.test", schema)


# ------------------------------------------------------------------------- marginals


def test_ks_distance_equals_scipy_ks_2samp_with_and_without_ties() -> None:
    rng = np.random.default_rng(0)
    for a, b in [
        (rng.normal(size=300), rng.normal(0.3, 1.2, size=177)),
        (rng.integers(0, 5, 200).astype(float), rng.integers(0, 6, 90).astype(float)),
        (np.array([1.0]), np.array([1.0, 2.0])),
    ]:
        assert ks_distance(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-15)


def test_tvd_of_a_small_table_computed_by_hand() -> None:
    schema = Schema((Categorical("a", ("p", "q")), Continuous("v", 0, 10)))
    # real: (p, low), (p, high), (q, high), (q, high); synthetic: (p, low), (p, low), (q, high), (q, low)
    real = Table.from_blocks(schema, [[1.0], [7.0], [9.0], [6.0]], [[0], [0], [1], [1]])
    synthetic = Table.from_blocks(schema, [[2.0], [3.0], [8.0], [4.0]], [[0], [0], [1], [1]])
    sizes = domain_sizes(schema, 2)
    _, one_way = marginal_tvds(discretize(real, 2), discretize(synthetic, 2), sizes, 1)
    _, two_way = marginal_tvds(discretize(real, 2), discretize(synthetic, 2), sizes, 2)
    # column a: both half p, half q -> 0; column v on bins [0, 5), [5, 10]: real 1/4 low, synthetic 3/4 low -> 1/2
    assert one_way.tolist() == [0.0, 0.5]
    # joint: real {pL: 1/4, pH: 1/4, qH: 1/2}, synthetic {pL: 1/2, qH: 1/4, qL: 1/4} -> (1/4 + 1/4 + 1/4 + 1/4) / 2
    assert two_way.tolist() == [0.5]
    assert tvd([1, 0, 3], [2, 0, 6]) == 0.0 and tvd([1, 0], [0, 5]) == 1.0
    with pytest.raises(DataError):
        tvd([1, 2], [1, 2, 3])


def test_marginal_tvds_match_a_counter_over_tuples() -> None:
    rng = np.random.default_rng(4)
    sizes = (3, 4, 2, 5)
    real = np.column_stack([rng.integers(0, s, 500) for s in sizes])
    synthetic = np.column_stack([rng.integers(0, s, 321) for s in sizes])
    for order in (1, 2, 3):
        subsets, values = marginal_tvds(real, synthetic, sizes, order)
        assert subsets == list(itertools.combinations(range(4), order))
        for subset, value in zip(subsets, values, strict=True):
            p = Counter(tuple(row[list(subset)]) for row in real)
            q = Counter(tuple(row[list(subset)]) for row in synthetic)
            cells = set(p) | set(q)
            expected = 0.5 * sum(abs(p[c] / len(real) - q[c] / len(synthetic)) for c in cells)
            assert value == pytest.approx(expected, abs=1e-14)


def test_correlation_distances_match_numpy_on_an_independent_encoding() -> None:
    rng = np.random.default_rng(5)
    a, b = random_table(400, rng), random_table(300, rng, signal=0.0)

    def encode(table: Table) -> np.ndarray:
        hot = sklearn_preprocessing.OneHotEncoder(categories=[[0, 1, 2], [0, 1]], sparse_output=False).fit_transform(table.codes)
        return np.column_stack([table.continuous[:, 0] / 10, hot[:, :3], table.continuous[:, 1] / 20, hot[:, 3:]])

    got = correlation_distances(a, b)
    assert got["n_features"] == 7
    assert got["covariance_frobenius"] == pytest.approx(np.linalg.norm(np.cov(encode(a).T) - np.cov(encode(b).T)), rel=1e-12)
    assert got["correlation_frobenius"] == pytest.approx(np.linalg.norm(np.corrcoef(encode(a).T) - np.corrcoef(encode(b).T)), rel=1e-12)
    # a category the synthetic rows never use: its correlations count as 0, not NaN
    no_blue = b.take(b.column("colour") != 2)
    assert np.isfinite(correlation_distances(a, no_blue)["correlation_frobenius"])


# ------------------------------------------------------------------------------ TSTR


def direct_pipeline(model: object) -> object:
    """The TSTR classifier built straight from scikit-learn: continuous columns first, then codes."""
    transform = sklearn_compose.ColumnTransformer(
        [
            ("numeric", sklearn_preprocessing.StandardScaler(), [0, 1]),
            ("categories", sklearn_preprocessing.OneHotEncoder(categories=[[0, 1, 2]], sparse_output=False), [2]),
        ]
    )
    return sklearn_pipeline.make_pipeline(transform, model)


@pytest.mark.parametrize(
    "model, estimator",
    [
        ("logistic", lambda: sklearn_linear.LogisticRegression(solver="newton-cholesky", max_iter=1000)),
        ("svm", lambda: sklearn_svm.LinearSVC(dual=False, max_iter=5000)),
    ],
)
def test_tstr_accuracy_equals_a_direct_sklearn_pipeline(model: str, estimator) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(6)
    train, test = random_table(800, rng, signal=1.0), random_table(500, rng)
    got = tstr_accuracy(train, test, "label", model=model)
    pipeline = direct_pipeline(estimator())

    def raw(table: Table) -> np.ndarray:
        return np.column_stack([table.continuous, table.codes[:, 0]])

    pipeline.fit(raw(train), train.column("label"))  # type: ignore[attr-defined]
    expected = float(np.mean(pipeline.predict(raw(test)) == test.column("label")))  # type: ignore[attr-defined]
    assert got["accuracy"] == expected and got["converged"] and got["note"] is None
    assert 0.6 < expected < 1.0


def test_tstr_with_one_class_predicts_that_class() -> None:
    rng = np.random.default_rng(7)
    train, test = random_table(100, rng), random_table(200, rng)
    only_yes = train.take(train.column("label") == 1)
    got = tstr_accuracy(only_yes, test, "label")
    assert got["accuracy"] == float(np.mean(test.column("label") == 1)) and got["note"] == "one class in the training rows"
    with pytest.raises(ConfigError, match="must be categorical"):
        tstr_accuracy(train, test, "x")


# -------------------------------------------------------------------- reproducibility


def test_fit_regression_equals_statsmodels_formula_api() -> None:
    rng = np.random.default_rng(8)
    table = random_table(1500, rng)
    spec = Regression("label", ("x", "colour", "n"), positive="yes")
    fit = fit_regression(table, spec)
    x, n = table.column("x"), table.column("n")
    frame = pandas.DataFrame(
        {
            "y": table.column("label"),
            "x": (x - x.mean()) / x.std(),
            "n": (n - n.mean()) / n.std(),
            "green": table.column("colour") == 1,
            "blue": table.column("colour") == 2,
        }
    ).astype(float)
    result = smf.logit("y ~ x + green + blue + n", frame).fit(disp=0)
    assert fit.names == ("intercept", "x", "colour=green", "colour=blue", "n")
    order = ["Intercept", "x", "green", "blue", "n"]
    assert np.allclose(fit.coefficients, result.params[order].to_numpy(), rtol=1e-8, atol=1e-10)
    assert np.allclose(fit.p_values, result.pvalues[order].to_numpy(), rtol=1e-6, atol=1e-300)


def test_reproducibility_rate_counts_releases_that_keep_signs_and_significance() -> None:
    rng = np.random.default_rng(9)
    real = random_table(2000, rng)
    spec = Regression("label", ("x", "colour"), positive="yes")
    shuffled = Table.from_blocks(SCHEMA, real.continuous, np.column_stack([real.codes[:, 0], rng.permutation(real.codes[:, 1])]))
    no_blue = real.take(real.column("colour") != 2)  # the blue indicator is all zeros: singular
    result = reproducibility(real, [real, shuffled, no_blue, real.take(np.arange(1500))], spec)
    flags = [r["reproduced"] for r in result["releases"]]
    assert flags[0] and not flags[1] and not flags[2]
    assert result["releases"][2]["error"] is not None and "could not be fitted" in result["releases"][2]["error"]
    assert result["rate"] == sum(flags) / 4
    # the real data itself reproduces with zero error; the mean error is over fitted releases and predictors
    truth = np.array([result["real"]["coefficients"][k] for k in ("x", "colour=green", "colour=blue")])
    errors = [
        np.abs(np.array([r["coefficients"][k] for k in ("x", "colour=green", "colour=blue")]) - truth)
        for r in result["releases"]
        if r["coefficients"] is not None
    ]
    assert result["mean_abs_coef_error"] == pytest.approx(float(np.mean(errors)), rel=1e-12)
    assert errors[0].max() == 0.0


# ----------------------------------------------------------------------- privacy risk


def test_closest_distances_equal_sklearn_nearest_neighbors() -> None:
    rng = np.random.default_rng(10)
    train, synthetic = random_table(700, rng), random_table(300, rng)
    reference, queries = dcr_features(train), dcr_features(synthetic)
    got = closest_distances(queries, reference, chunk=64)
    expected, _ = sklearn_neighbors.NearestNeighbors(n_neighbors=1).fit(reference).kneighbors(queries)
    assert np.allclose(got, expected[:, 0], rtol=1e-9, atol=1e-9)
    # the scale: one category apart is distance 1, like the two ends of a continuous range
    a = Table.from_blocks(SCHEMA, [[0.0, 0]], [[0, 0]])
    b = Table.from_blocks(SCHEMA, [[0.0, 0]], [[1, 0]])
    c = Table.from_blocks(SCHEMA, [[10.0, 0]], [[0, 0]])
    assert closest_distances(dcr_features(b), dcr_features(a))[0] == pytest.approx(1.0, abs=1e-15)
    assert closest_distances(dcr_features(c), dcr_features(a))[0] == 1.0


def test_exact_copies_are_counted_and_at_distance_zero() -> None:
    rng = np.random.default_rng(11)
    train = random_table(500, rng)
    copies = train.take([3, 17, 200])
    synthetic = Table.from_blocks(
        SCHEMA, np.vstack([copies.continuous, random_table(7, rng).continuous]), np.vstack([copies.codes, random_table(7, rng).codes])
    )
    assert exact_copy_share(train, synthetic) == pytest.approx(0.3)
    assert closest_distances(dcr_features(copies), dcr_features(train)).tolist() == [0.0, 0.0, 0.0]
    rounded = Table.from_blocks(SCHEMA, [[0.0, -0.3]], [[0, 0]], clip=True)  # -0.3 clips to 0.0, not -0.0
    assert exact_copy_share(Table.from_blocks(SCHEMA, [[0.0, 0.0]], [[0, 0]]), rounded) == 1.0


# --------------------------------------------------------------------------- report


def test_the_report_of_the_training_rows_themselves_is_perfect_and_json(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    train, test = random_table(600, rng), random_table(400, rng)
    spec = Regression("label", ("x", "colour"), positive="yes")
    report = synth_report(train, test, [train, random_table(600, rng)], rng=rng, target="label", regression=spec, three_way=True, dcr_rows=250)
    text = json.dumps(report, allow_nan=False)
    assert json.loads(text)["format"] == REPORT_FORMAT and report["version"] == 1
    assert report["rows"] == {"train": 600, "test": 400, "synthetic": [600, 600]}
    perfect, other = report["releases"]
    assert perfect["marginals"]["2way"]["max"] == 0.0 and perfect["marginals"]["3way"]["max"] == 0.0
    assert all(c["tvd"] == 0.0 for c in perfect["columns"].values()) and perfect["columns"]["x"]["ks"] == 0.0
    assert perfect["correlation"]["covariance_frobenius"] == 0.0
    assert perfect["dcr"]["exact_copies"] == 1.0 and perfect["dcr"]["median"] == 0.0 and perfect["dcr"]["rows"] == 250
    assert perfect["tstr"]["logistic"]["accuracy"] == report["reference"]["train_on_real"]["logistic"]["accuracy"]
    assert len(perfect["marginals"]["2way"]["tvd"]) == 6 and len(perfect["marginals"]["3way"]["tvd"]) == 4
    summary = report["summary"]
    assert summary["2way_tvd_mean"] == pytest.approx(other["marginals"]["2way"]["mean"] / 2, rel=1e-12)
    assert summary["tstr"]["svm"] == pytest.approx((perfect["tstr"]["svm"]["accuracy"] + other["tstr"]["svm"]["accuracy"]) / 2)
    majority = int(np.bincount(train.column("label")).argmax())
    assert report["reference"]["majority_class"] == float(np.mean(test.column("label") == majority))
    assert report["reproducibility"]["releases"][0]["reproduced"]
    # the document validates against its shipped JSON schema, which is not vacuous
    schema = load_json_schema(REPORT_FORMAT)
    jsonschema.validate(json.loads(text), schema, cls=jsonschema.Draft202012Validator)
    broken = json.loads(text)
    broken["releases"][1]["dcr"]["exact_copies"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema, cls=jsonschema.Draft202012Validator)
    report_figure(json.loads(text), tmp_path / "report.png")
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_without_target_or_regression_and_its_errors() -> None:
    rng = np.random.default_rng(13)
    train, test = random_table(100, rng), random_table(50, rng)
    report = synth_report(train, test, train, rng=rng, dcr_rows=None)
    assert "tstr" not in report["releases"][0] and report["reproducibility"] is None
    assert report["releases"][0]["dcr"]["rows"] == 100 and report["reference"]["dcr_test"]["rows"] == 50
    other = Table.from_blocks(Schema(SCHEMA.columns[:2]), train.continuous[:, :1], train.codes[:, :1])
    with pytest.raises(DataError, match="synthetic\\[0\\] table's schema differs"):
        synth_report(train, test, other, rng=rng)
    with pytest.raises(ConfigError, match="no column 'income'"):
        synth_report(train, test, train, rng=rng, target="income")
    with pytest.raises(ConfigError, match="target column 'x' must be categorical"):
        synth_report(train, test, train, rng=rng, target="x")
    with pytest.raises(ConfigError, match="dcr_rows"):
        synth_report(train, test, train, rng=rng, dcr_rows=0)
    with pytest.raises(ConfigError, match="model must be one of"):
        synth_report(train, test, train, rng=rng, target="label", models=("forest",))
    with pytest.raises(DataError, match="not a p2pem-synth-report"):
        report_figure({"format": "x"}, "unused.png")


def test_a_missing_optional_dependency_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^the synthetic-data report needs no_such_module_p2pem: pip install 'p2pem\[synth\]'$"):
        require("no_such_module_p2pem")


@pytest.mark.slow
def test_adult_independent_marginals_learn_nothing_but_the_majority(adult: tuple[Table, Table]) -> None:
    """Sampling every column independently keeps 1-way marginals and destroys every relation."""
    train, test = adult
    rng = np.random.default_rng(14)
    independent = Table.from_blocks(
        train.schema,
        np.column_stack([rng.permutation(c) for c in train.continuous.T]),
        np.column_stack([rng.permutation(c) for c in train.codes.T]),
    )
    report = synth_report(train, test, independent, rng=rng, target="income", regression=ADULT_INCOME_REGRESSION, dcr_rows=500)
    release, reference = report["releases"][0], report["reference"]
    assert release["marginals"]["1way_mean"] == 0.0  # permutations keep each column exactly
    assert abs(release["tstr"]["logistic"]["accuracy"] - reference["majority_class"]) < 0.005
    assert reference["train_on_real"]["logistic"]["accuracy"] > reference["majority_class"] + 0.05
    assert release["marginals"]["2way"]["mean"] > 3 * reference["test_vs_train"]["marginals"]["2way"]["mean"]
    assert report["reproducibility"]["rate"] == 0.0


def test_a_tstr_below_the_majority_class_is_flagged_and_no_legend_hides_a_label() -> None:
    rng = np.random.default_rng(15)
    train, test = random_table(600, rng), random_table(400, rng)
    # a release whose labels are the opposite of the real ones: what it teaches is worse than guessing the majority
    flipped = Table.from_blocks(SCHEMA, train.continuous, np.column_stack([train.codes[:, 0], 1 - train.codes[:, 1]]))
    report = synth_report(train, test, [train, flipped], rng=rng, target="label", dcr_rows=100)
    majority = report["reference"]["majority_class"]
    faithful, wrong = report["releases"]
    assert faithful["tstr_below_majority"] == [] and wrong["tstr_below_majority"] == ["logistic", "svm"]
    for release in report["releases"]:
        assert release["tstr_below_majority"] == [m for m in ("logistic", "svm") if release["tstr"][m]["accuracy"] < majority]
    assert report["summary"]["tstr_below_majority"] == [m for m, v in report["summary"]["tstr"].items() if v < majority]
    jsonschema.validate(json.loads(json.dumps(report)), load_json_schema(REPORT_FORMAT), cls=jsonschema.Draft202012Validator)

    import matplotlib.pyplot as plt
    from matplotlib.transforms import Bbox

    fig = _draw(json.loads(json.dumps({**report, "releases": [wrong], "summary": {**report["summary"], "tstr_below_majority": ["svm"]}})), "t")
    renderer = fig.canvas.get_renderer()
    drawn = 0
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        # no value label, bar (as drawn: clipped to its panel) or tick label of any panel lies under a legend
        for other in fig.axes:
            for artist in [*other.texts, *other.patches, *other.get_xticklabels(), *other.get_yticklabels()]:
                extent = artist.get_window_extent(renderer)
                if artist in other.patches:
                    extent = Bbox.intersection(extent, other.bbox)
                if extent is not None and artist.get_visible() and (artist.get_text() if hasattr(artist, "get_text") else True):
                    assert not box.overlaps(extent), (ax.get_title(), artist)
                    drawn += 1
    assert drawn > 20
    tstr = next(ax for ax in fig.axes if "BELOW the majority class: svm" in ax.get_title())
    hatched = [p for p in tstr.patches if p.get_hatch() == "//"]
    assert len(hatched) == 1 and hatched[0].get_height() == pytest.approx(report["summary"]["tstr"]["svm"])
    plt.close(fig)
