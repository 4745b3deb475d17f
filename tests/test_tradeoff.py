"""``p2pem tradeoff`` and the private Bayes classifier."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from p2pem.cli import main
from p2pem.errors import ConfigError
from p2pem.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
seed = 4
[data]
source = "csv"
path = "rows.csv"
drop_columns = ["label"]
[graph]
kind = "edges"
edges = [[0, 1], [1, 2], [2, 3], [3, 4], [4, 0], [0, 2]]
[em]
n_components = 2
max_iter = 4
tol = 0.0
[tradeoff]
epsilons = [0.5, 50.0]
n_seeds = 2
test_fraction = 0.25
classify = "label"
class_components = 1
[[protocols]]
name = "dp-central"
bound = 5.0
[[protocols]]
name = "dp-distributed"
mechanism = "laplace"
accountant = "basic"
delta = 0.0
bound = 5.0
[[protocols]]
name = "secure-sum"
[[protocols]]
name = "centralized"
"""


def _scenario(tmp_path: Path, text: str = SCENARIO) -> Path:
    rng = np.random.default_rng(0)
    label = rng.integers(0, 2, 80)
    X = rng.normal(size=(80, 2)) * np.where(label[:, None] == 1, 0.6, 1.0) + 2.5 * label[:, None]
    rows = ["a,b,label"] + [f"{x:.6f},{y:.6f},{c}" for (x, y), c in zip(X, label, strict=True)]
    (tmp_path / "rows.csv").write_text("\n".join(rows) + "\n")
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_tradeoff_writes_versioned_json_and_figure(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["tradeoff", str(_scenario(tmp_path)), "--out", str(out), "-q"]) == 0
    doc = json.loads((out / "tradeoff.json").read_text())
    assert doc["format"] == "p2pem-tradeoff" and doc["version"] == 3
    from test_schemas import validate

    validate(doc)
    runs = doc["runs"]
    # 2 private protocols x 2 epsilons x 2 seeds, secure-sum x 2 seeds, centralized once
    assert len(runs) == 2 * 2 * 2 + 2 + 1
    assert {(r["protocol"], r["epsilon"]) for r in runs} == {
        ("dp-central-gaussian", 0.5), ("dp-central-gaussian", 50.0),
        ("dp-secure-sum-laplace", 0.5), ("dp-secure-sum-laplace", 50.0),
        ("secure-sum", None), ("centralized", None),
    }
    for r in runs:
        assert {"protocol", "epsilon", "seed", "heldout_loglik", "param_error", "heldout_error"} <= set(r)
        assert 0 <= r["heldout_error"] <= 1
    central = next(r for r in runs if r["protocol"] == "centralized")
    assert central["param_error"] == 0.0
    assert max(r["param_error"] for r in runs if r["protocol"] == "secure-sum") < 1e-12
    central = next(r for r in runs if r["protocol"] == "dp-central-gaussian")
    spent = central["epsilon_spent"]["colluders"]
    assert spent["rdp"] == pytest.approx(0.5, rel=1e-6) and spent["basic"] > spent["rdp"]
    assert central["epsilon_outsider"] == central["epsilon_colluders"] == spent["rdp"] and central["colluders"] == 4
    # Laplace shares over 5 nodes tolerate 2 colluders; the outsider's bound is the same (post-processing)
    laplace = next(r for r in runs if r["protocol"] == "dp-secure-sum-laplace" and r["epsilon"] == 0.5)
    assert laplace["colluders"] == 2 and laplace["epsilon_colluders"] == pytest.approx(0.5) == laplace["epsilon_outsider"]
    excluded = " | ".join(laplace["excluded"])
    assert "[-5, 5]" in excluded and "wall_s" in excluded and "priors" not in excluded
    assert all(r["excluded"] is None and r["epsilon_colluders"] is None for r in runs if r["epsilon"] is None)
    assert doc["private_init"] is True and doc["preprocessing"] == "none"
    assert (out / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "dp-secure-sum-laplace" in capsys.readouterr().out


def test_tradeoff_is_reproducible_and_parallel_runs_agree(tmp_path):
    from p2pem.dp.tradeoff import run_tradeoff

    scenario = load_scenario(_scenario(tmp_path))
    a, b = run_tradeoff(scenario), run_tradeoff(scenario, jobs=2)
    strip = lambda doc: [{k: v for k, v in r.items() if k != "wall_s"} for r in doc["runs"]]  # noqa: E731
    assert strip(a) == strip(b)
    # different seeds give different noise, the same seed the same across epsilons' order
    dp = [r for r in a["runs"] if r["protocol"] == "dp-central-gaussian" and r["epsilon"] == 0.5]
    assert dp[0]["heldout_loglik"] != dp[1]["heldout_loglik"]


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("tol = 0.0", "tol = 1e-6", "'em.tol' must be 0"),
        ("n_seeds = 2", "n_seed = 2", "unknown key 'tradeoff.n_seed'"),
        ("epsilons = [0.5, 50.0]", "epsilons = [0.5, -1.0]", "'tradeoff.epsilons' must hold finite numbers > 0"),
        ("test_fraction = 0.25", "test_fraction = 0.99", "leaves"),
        ('classify = "label"', 'classify = "nope"', "nope"),
        ('name = "dp-central"\nbound = 5.0', 'name = "federated"', None),
    ],
)
def test_tradeoff_errors_are_one_line_and_leave_nothing(tmp_path, capsys, old, new, message):
    out = tmp_path / "out"
    assert old in SCENARIO
    text = SCENARIO.replace(old, new)
    if message is None:  # no private protocol left
        text = text.replace('name = "dp-distributed"\nmechanism = "laplace"\naccountant = "basic"\ndelta = 0.0\nbound = 5.0', 'name = "pdmm-sp"')
        message = "no private protocol to sweep"
    code = main(["tradeoff", str(_scenario(tmp_path, text)), "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert code != 0 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def _workload(tmp_path: Path, text: str):
    from p2pem.dp.tradeoff import build_workload

    return build_workload(load_scenario(_scenario(tmp_path, text)))


def test_the_sweep_refuses_preprocessing_fitted_on_private_rows(tmp_path):
    """Its constants would be an uncounted release of the rows: a one-line error naming the key, unless declared public."""
    text = SCENARIO.replace('drop_columns = ["label"]', 'drop_columns = ["label"]\nstandardize = true')
    with pytest.raises(ConfigError, match=r"'data.standardize': preprocessing fitted on the private rows cannot feed a private run"):
        _workload(tmp_path, text)


def test_public_preprocessing_constants_are_applied_as_given(tmp_path):
    public = "[data.public]\ncenter = [1.0, 2.0]\nscale = [2.0, 4.0]\n"
    text = SCENARIO.replace("[graph]", public + "[graph]").replace('drop_columns = ["label"]', 'drop_columns = ["label"]\nstandardize = true')
    work = _workload(tmp_path, text)
    assert work.preprocessing == "public constants" and any("public constants given in the scenario" in e for e in work.excluded)
    raw = np.loadtxt(tmp_path / "rows.csv", delimiter=",", skiprows=1)[:, :2]
    expected = (raw - [1.0, 2.0]) / [2.0, 4.0]
    for row in np.vstack([*work.parts, work.X_test]):
        assert np.any(np.all(row == expected, axis=1))
    # errors name the key
    bad = text.replace("scale = [2.0, 4.0]", "scale = [2.0, 0.0]")
    with pytest.raises(Exception, match=r"'data.public.scale' must hold numbers > 0"):
        _workload(tmp_path, bad)
    with pytest.raises(Exception, match=r"'data.public': the preprocessing expects 3 columns, the data has 2"):
        _workload(tmp_path, text.replace("center = [1.0, 2.0]", "center = [1.0, 2.0, 3.0]").replace("[2.0, 4.0]", "[2.0, 4.0, 1.0]"))


def test_private_runs_of_the_sweep_start_from_the_private_initialisation(tmp_path):
    work = _workload(tmp_path, SCENARIO)
    assert work.settings_for(True).init is None and work.settings_for(False).init is not None
    assert all(s.init is None for s in work.class_settings_for(True))
    init = "[em.init]\nweights = [0.5, 0.5]\nmeans = [[0.0, 0.0], [2.5, 2.5]]\ncovariances = [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]]\n"
    from p2pem.dp.tradeoff import run_one

    work = _workload(tmp_path, SCENARIO.replace("[tradeoff]", init + "[tradeoff]"))
    assert work.settings_for(True).init is not None
    spec = load_scenario(tmp_path / "s.toml").protocols[0]
    from p2pem.registry import make_protocol

    record = run_one(work, make_protocol(spec.name, dict(spec.params)), 1.0, 0)
    assert any("the initial model: public" in e for e in record["excluded"])


def test_bayes_classifier_is_the_gaussian_bayes_rule():
    """One component per class, fitted without noise: the classifier is quadratic discriminant
    analysis with maximum-likelihood covariances and class-size priors; check against scipy."""
    from scipy.stats import multivariate_normal

    from p2pem.data import split_rows
    from p2pem.dp.bayes import fit_bayes
    from p2pem.em import EMSettings
    from p2pem.gmm import init_from_global, init_statistics
    from p2pem.graphs import graph_from_edges
    from p2pem.registry import make_protocol

    rng = np.random.default_rng(2)
    y = rng.integers(0, 3, 150)
    X = rng.normal(size=(150, 2)) * (1 + 0.5 * y[:, None]) + np.array([[0, 0], [2, 1], [-1, 3]])[y]
    g = graph_from_edges([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)])
    classes = np.unique(y)
    parts = [split_rows(X[y == c], 4, rng=rng) for c in classes]
    settings = [EMSettings(1, max_iter=2, tol=0.0, reg_covar=0.0, init=init_from_global(init_statistics(X[y == c]), 1, 0)) for c in classes]
    model = fit_bayes(parts, classes, g, make_protocol("secure-sum"), settings)
    test = rng.normal(size=(400, 2)) * 2 + 1
    scores = np.stack(
        [np.log(np.mean(y == c)) + multivariate_normal(X[y == c].mean(0), np.cov(X[y == c].T, bias=True)).logpdf(test) for c in classes],
        axis=1,
    )
    np.testing.assert_array_equal(model.predict(test), classes[np.argmax(scores, axis=1)])
    np.testing.assert_allclose(model.log_posterior(test), scores, rtol=1e-10)


def test_private_bayes_priors_are_the_noisy_class_count_release():
    """A private classifier's priors are its class-count release (paid from count_share of epsilon),
    post-processed to at least one row and normalised; without noise, the class sizes."""
    import math

    from p2pem.data import split_rows
    from p2pem.dp.bayes import fit_bayes
    from p2pem.em import EMSettings
    from p2pem.graphs import graph_from_edges
    from p2pem.registry import make_protocol

    rng = np.random.default_rng(4)
    y = np.repeat([0, 1], [40, 20])
    X = rng.normal(size=(60, 2)) + 3 * y[:, None]
    g = graph_from_edges([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)])
    parts = [split_rows(X[y == c], 4, rng=rng) for c in (0, 1)]
    settings = [EMSettings(1, max_iter=3, tol=0.0) for _ in (0, 1)]
    exact = fit_bayes(parts, np.array([0, 1]), g, make_protocol("dp-central", {"epsilon": math.inf, "bound": 6.0}), settings)
    np.testing.assert_allclose(exact.priors, [40 / 60, 20 / 60], rtol=1e-12)
    noisy = fit_bayes(parts, np.array([0, 1]), g, make_protocol("dp-central", {"epsilon": 0.5, "bound": 6.0}), settings, seed=1)
    released = np.maximum(noisy.counts, 1.0)
    np.testing.assert_allclose(noisy.priors, released / released.sum())
    assert abs(noisy.priors[0] - 40 / 60) > 1e-6 and any("class counts" in e for e in noisy.excluded)


def test_shipped_tradeoff_scenarios_validate():
    for name in ("tradeoff_parkinsons", "tradeoff_ais"):
        scenario = load_scenario(ROOT / "scenarios" / f"{name}.toml")
        assert scenario.tradeoff is not None and len(scenario.tradeoff.epsilons) == 10
        assert {p.name for p in scenario.protocols} >= {"dp-central", "dp-distributed", "pdmm-sp", "secure-sum", "centralized"}
        assert scenario.data.public is not None  # the preprocessing is declared, not fitted on the rows


def test_parameter_error_matches_components():
    from p2pem.dp.tradeoff import matched_error
    from p2pem.gmm import GMMParams

    rng = np.random.default_rng(0)
    ref = GMMParams(np.array([0.2, 0.3, 0.5]), rng.normal(size=(3, 2)), np.repeat(np.eye(2)[None], 3, axis=0) * [[[1]], [[2]], [[3]]])
    p = [2, 0, 1]
    swapped = GMMParams(ref.weights[p], ref.means[p], ref.covariances[p])
    assert matched_error(swapped, ref) == 0.0
    moved = GMMParams(swapped.weights, swapped.means + 0.1, swapped.covariances)
    assert matched_error(moved, ref) == pytest.approx(0.1 / np.max(np.abs(ref.means)))
