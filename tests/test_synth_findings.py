"""Jälkö et al.'s reproducibility protocol in the report: findings graded strong or weak by a
bootstrap of the real rows, and rates per grade over releases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from p2pem.synth.models import STRONG, Regression, finding_strength, fit_regression, reproducibility
from p2pem.tabular import Categorical, Continuous, Schema, Table

SCHEMA = Schema((Continuous("x", 0.0, 10.0), Categorical("colour", ("red", "green")), Categorical("label", ("no", "yes"))))
SPEC = Regression("label", ("x", "colour"), positive="yes")


def table(n: int, seed: int, effect: float) -> Table:
    """label depends strongly on x and weakly (``effect`` log-odds) on colour = green."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 10, n)
    colour = rng.integers(0, 2, n)
    label = (rng.random(n) < 1 / (1 + np.exp(-(2 * (x - 5) / 3 + effect * colour)))).astype(int)
    return Table.from_blocks(SCHEMA, x[:, None], np.column_stack([colour, label]))


def test_bootstrap_rate_of_a_finding_follows_its_wald_statistic_and_grades_it():
    """A resample reproduces a finding with probability about Phi(|z| - 1.96) (the resampled
    coefficient is about normal around the real one with the real standard error): 1 for
    the strong x, in between for the weak colour."""
    real = table(2000, 1, 0.3)
    truth = fit_regression(real, SPEC)
    assert truth.p_values[1] < 1e-20 and 0.001 < truth.p_values[2] < 0.05  # x strong, colour a weak finding
    strength = finding_strength(real, SPEC, rng=np.random.default_rng(0), n_boot=80)
    assert set(strength) == {"x", "colour=green"}
    z = stats.norm.isf(truth.p_values[2] / 2)
    expected = stats.norm.cdf(z - stats.norm.isf(0.025))
    assert strength["x"] == 1.0
    assert abs(strength["colour=green"] - expected) < 0.15  # 80 draws: standard error < 0.056
    assert strength["colour=green"] < STRONG


def test_rates_per_grade_count_releases_that_keep_sign_and_significance_of_each_finding():
    real = table(2000, 1, 0.3)
    rng = np.random.default_rng(1)
    shuffled = Table.from_blocks(SCHEMA, real.continuous, np.column_stack([real.codes[:, 0], rng.permutation(real.codes[:, 1])]))
    flipped = Table.from_blocks(SCHEMA, real.continuous, np.column_stack([1 - real.codes[:, 0], real.codes[:, 1]]))  # colour's sign reversed
    result = reproducibility(real, [real, shuffled, flipped, real], SPEC, rng=np.random.default_rng(0), n_boot=50, independent_fits=True)
    grades = {f["name"]: f["grade"] for f in result["findings"]}
    assert grades == {"x": "strong", "colour=green": "weak"}
    assert result["strong"] == {"findings": ["x"], "rate": 0.75}  # the shuffled labels lose x
    assert result["weak"] == {"findings": ["colour=green"], "rate": 0.5}  # shuffled and flipped lose colour
    assert result["independent_fits"] is True and result["note"] is None
    one_fit = reproducibility(real, [real], SPEC, strength={"x": 1.0}, independent_fits=False)
    assert one_fit["independent_fits"] is False and "sampling noise" in one_fit["note"]
    assert one_fit["strong"] == {"findings": ["x"], "rate": 1.0} and one_fit["weak"] == {"findings": [], "rate": None}


def test_a_report_over_independent_fits_grades_its_findings_and_validates_against_the_schema():
    import json

    import jsonschema

    from p2pem.schemas import load_schema as load_json_schema
    from p2pem.synth import REPORT_FORMAT, synth_report

    real, test = table(600, 1, 1.0), table(300, 2, 1.0)
    report = synth_report(real, test, [real, table(600, 4, 1.0)], rng=np.random.default_rng(0), target="label", regression=SPEC,
                          dcr_rows=100, models=("logistic",), independent_fits=True, n_bootstrap=10)
    rep = json.loads(json.dumps(report, allow_nan=False))["reproducibility"]
    assert rep["independent_fits"] is True and {f["grade"] for f in rep["findings"]} <= {"strong", "weak"} and rep["findings"]
    schema = load_json_schema(REPORT_FORMAT)
    jsonschema.validate(json.loads(json.dumps(report)), schema, cls=jsonschema.Draft202012Validator)
    rep["findings"][0]["grade"] = "medium"
    broken = {**json.loads(json.dumps(report)), "reproducibility": rep}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema, cls=jsonschema.Draft202012Validator)
    # samples of one fit: no grades unless asked, and the note says why
    plain = synth_report(real, test, real, rng=np.random.default_rng(0), regression=SPEC, dcr_rows=100)["reproducibility"]
    assert plain["independent_fits"] is False and "findings" not in plain and "sampling noise" in plain["note"]
