"""Model choice (p2pem select): AIS BMI/Bfat in raw units picks 2 skew-normal and 3 Gaussian components (issue 19)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from p2pem.cli import main
from p2pem.errors import ConfigError
from p2pem.scenario import load_scenario
from p2pem.selection import parse_components, run_selection

ROOT = Path(__file__).resolve().parents[1]
AIS = ROOT / "scenarios" / "ais_skew.toml"


def test_ais_bic_picks_two_skew_normal_and_three_gaussian_components() -> None:
    """The conclusion of Wu (2021), Table 2, from private fits (federated: the same EM as every
    exact protocol, fast); the docs' table comes from pdmm-sp (scenarios/ais_skew.toml)."""
    doc = run_selection(load_scenario(AIS), [1, 2, 3, 4], ["gaussian", "skew-normal"], protocol="federated", n_init=2)
    assert doc["best"]["by_family"]["skew-normal"]["bic"] == 2
    assert doc["best"]["by_family"]["gaussian"]["bic"] == 3
    assert doc["best"]["bic"] == {"family": "skew-normal", "n_components": 2}
    rows = {(r["family"], r["n_components"]): r for r in doc["rows"]}
    # the log-likelihoods issue 19 quotes (mixsmsn and scikit-learn's best fits)
    assert rows["skew-normal", 2]["loglik"] == pytest.approx(-1069.41, abs=0.01)
    assert rows["gaussian", 3]["loglik"] == pytest.approx(-1072.05, abs=0.01)
    for r in doc["rows"]:
        d = r["n_components"] * (2 * 2 + 3) + r["n_components"] - 1 if r["family"] == "skew-normal" else r["n_components"] * 5 + r["n_components"] - 1
        assert r["n_parameters"] == d
        assert r["bic"] == pytest.approx(-2 * r["loglik"] + d * math.log(202), rel=1e-12)
        assert r["aic"] == pytest.approx(-2 * r["loglik"] + 2 * d, rel=1e-12)
    assert rows["skew-normal", 1]["boundary"] and not rows["skew-normal", 2]["boundary"]


def test_select_cli_through_pdmm_sp_writes_a_valid_document_and_a_figure(tmp_path: Path, capsys) -> None:
    from test_schemas import validate

    out = tmp_path / "sel"
    code = main(["select", str(AIS), "--components", "2", "--families", "skew-normal", "--n-init", "1", "--out", str(out), "-q"])
    assert code == 0
    doc = json.loads((out / "select.json").read_text())
    validate(doc)
    assert doc["protocol"] == "pdmm-sp" and doc["rows"][0]["family"] == "skew-normal"
    assert (out / "select.png").stat().st_size > 10_000
    table = capsys.readouterr().out
    assert "skew-normal   2" in table and "smallest BIC overall" in table


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--components", "3..1"], "--components: range '3..1' runs backwards"),
        (["--components", "two"], "--components must look like 1..5 or 2,3,4, got 'two'"),
        (["--families", "gausian"], "did you mean 'gaussian'?"),
        (["--protocol", "dp-central", "--components", "1", "--families", "gaussian", "--n-init", "1"],
         "a private run has a fixed number of EM iterations: set tol = 0"),
        (["--protocol", "dp-central", "--loglik-range=5,-30"], "--loglik-range must be two finite numbers LO < HI, got '5,-30'"),
        (["--families", "mixed"], "--families: 'mixed' needs a public schema of the columns ([data] schema in ais_skew.toml)"),
        (["scenario:synth_ais.toml", "--families", "mixed,gaussian"],
         "--families: 'gaussian' cannot fit the categorical or binned columns of synth_ais.toml (sex, sport)"),
    ],
)
def test_select_errors_are_one_line_and_write_nothing(tmp_path: Path, capsys, argv, message) -> None:
    out = tmp_path / "sel"
    scenario = AIS
    if argv and argv[0].startswith("scenario:"):
        scenario, argv = ROOT / "scenarios" / argv[0].removeprefix("scenario:"), argv[1:]
    assert main(["select", str(scenario), *argv, "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("p2pem: error: ") and message in err and "\n" not in err
    assert not out.exists()


def test_parse_components() -> None:
    assert parse_components("1..3,5") == [1, 2, 3, 5]
    assert parse_components(" 4 ") == [4]
    with pytest.raises(ConfigError):
        parse_components("0..2")


def test_a_table_with_categorical_columns_is_selected_among_mixed_models(tmp_path: Path, capsys) -> None:
    """Without --families, a scenario fitted by the mixed family compares mixed models only."""
    out = tmp_path / "sel"
    assert main(["select", str(ROOT / "scenarios" / "synth_ais.toml"), "--components", "2,4", "--n-init", "1", "--out", str(out), "-q"]) == 0
    doc = json.loads((out / "select.json").read_text())
    assert list(doc["families"]) == ["mixed"] and doc["families"]["mixed"]["stratify"] == 0
    assert sorted(row["n_components"] for row in doc["rows"]) == [2, 4]


DP_SELECT = """
name = "dp_select"
seed = 3
[data]
source = "csv"
path = "PATH"
columns = ["BMI", "Bfat"]
standardize = true
split = "even"
[data.public]
center = [22.9498, 13.5177]
scale = [3.0114, 6.13878]
[graph]
kind = "geometric"
n_nodes = 10
[em]
n_components = 2
max_iter = 5
tol = 0.0
[[protocols]]
name = "dp-central"
mechanism = "laplace"
accountant = "basic"
delta = 0.0
bound = 4.0
epsilon = 1000.0
"""


def test_select_over_a_private_protocol_pays_for_every_fit_and_its_loglikelihood(tmp_path: Path) -> None:
    """Wu (2021)'s Table 2 compares DP fits by AIC/BIC: each fit releases its clipped log-likelihood
    with Laplace noise, and the sweep's epsilon is the sum over its fits.  With a huge
    log-likelihood budget the released value is the clipped log-likelihood of the fit's model."""
    import dataclasses

    import numpy as np

    from p2pem.builders import build_graph, build_protocols, em_settings, load_data
    from p2pem.families import make_family
    from p2pem.selection import restart_seed
    from p2pem.simulate import run_protocol
    from p2pem.streams import scenario_streams

    (tmp_path / "s.toml").write_text(DP_SELECT.replace("PATH", str(ROOT / "data" / "ais.csv")))
    scenario = load_scenario(tmp_path / "s.toml")
    doc = run_selection(scenario, [1, 2], ["gaussian", "skew-normal"], n_init=2, loglik_epsilon=1e12, loglik_range=(-30.0, 5.0))
    from test_schemas import validate

    validate(doc)
    pr = doc["privacy"]
    assert pr["fits"] == 8 and pr["epsilon_total"] == pytest.approx(8 * (1000.0 + 1e12)) and pr["delta_total"] == 0.0
    assert "n_rows" in pr["public"] and doc["protocol"] == "dp-central-laplace"
    parts, g = load_data(scenario), build_graph(scenario)
    spec = build_protocols(scenario)[0]
    row = next(r for r in doc["rows"] if r["family"] == "gaussian" and r["n_components"] == 2)
    family = make_family("gaussian")
    settings = dataclasses.replace(em_settings(scenario), n_components=2, family=family, init=None, init_seed=restart_seed(scenario, row["restart"]))
    run = run_protocol(parts, g, spec, settings, seed=scenario_streams(scenario.seed)["protocol"])
    clipped = sum(np.clip(family.score_samples(p, run.params), -30.0, 5.0).sum() for p in parts)
    assert row["loglik"] == pytest.approx(clipped, abs=1e-6)
    noisy = run_selection(scenario, [2], ["gaussian"], n_init=1, loglik_epsilon=0.01)
    assert noisy["privacy"]["loglik_epsilon"] == 0.01 and abs(noisy["rows"][0]["loglik"] - row["loglik"]) > 1.0
