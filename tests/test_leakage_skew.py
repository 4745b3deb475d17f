"""Privacy analyses of skew-normal runs: one aggregation and the whole run's exact reduction."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from p2pem.builders import build_graph, build_protocols, em_settings, load_data
from p2pem.cli import main
from p2pem.leakage.views import Adversary
from p2pem.leakage.wholerun import record_whole_run
from p2pem.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
name = "ais-skew-leakage"
seed = 7
[data]
source = "csv"
path = "{path}"
columns = ["BMI", "Bfat"]
[graph]
kind = "geometric"
n_nodes = 12
[em]
n_components = 2
family = "skew-normal"
max_iter = 3
tol = 0.0
[[protocols]]
name = "pdmm-sp"
[[protocols]]
name = "secure-sum"
[leakage]
corrupt = [0, 1]
[leakage.whole_run]
adversary = ["honest-but-curious", "eavesdropper"]
corrupt_sets = [[0, 1, 2]]
iterations_seen = [0, 1, 4]
"""


def _scenario(tmp_path: Path) -> Path:
    path = tmp_path / "skew.toml"
    path.write_text(SCENARIO.format(path=ROOT / "data" / "ais.csv"))
    return path


def test_whole_run_reduction_is_exact_on_the_skew_normal_vector(tmp_path: Path) -> None:
    """The disclosed group sums of every aggregation, computed from the observed messages
    alone, equal the sums of the honest groups' skew-normal statistics (10 numbers per
    component, the log-likelihood and the flag)."""
    sc = load_scenario(_scenario(tmp_path))
    parts, graph, settings = load_data(sc), build_graph(sc), em_settings(sc)
    for spec in build_protocols(sc):
        advs = [Adversary("honest-but-curious", frozenset({0, 1, 2})), Adversary("eavesdropper")]
        views = record_whole_run(parts, graph, spec, settings, advs, seed=sc.streams()["protocol"])
        for view in views:
            assert len(view.iterations) == 5  # the init and 4 E-steps (3 M-steps and the final log-likelihood)
            assert view.sums[1].shape[1] == 2 * 10 + 2
            assert np.max(view.reduction_error()) <= 1e-9, (spec.name, view.adversary.kind)
            assert view.final.shapes.shape == (2, 2)


def test_whole_run_command_says_the_attack_is_gaussian_only(tmp_path: Path, capsys) -> None:
    from test_schemas import validate

    out = tmp_path / "wr"
    assert main(["leakage", str(_scenario(tmp_path)), "--whole-run", "--out", str(out), "-q"]) == 0
    doc = json.loads((out / "whole_run.json").read_text())
    validate(doc)
    assert doc["family"] == {"name": "skew-normal"} and doc["attack"].startswith("not run: the reconstruction attack fits rows to the Gaussian")
    assert doc["runs"] == [] and doc["disclosures"]
    assert all(g["max_reduction_error"] <= 1e-9 for d in doc["disclosures"] for g in d["groups"])
    printed = capsys.readouterr().out
    assert "attack: not run (skew-normal family)" in printed


def test_one_aggregation_leakage_runs_on_a_skew_normal_scenario(tmp_path: Path) -> None:
    """The Monte Carlo studies one coordinate of the aggregated vector, the first moment r x (the
    skew-normal family's m0 as the Gaussian family's b): the same analysis, whatever the family."""
    out = tmp_path / "leak"
    assert main(["leakage", str(_scenario(tmp_path)), "--out", str(out), "--runs", "400", "--rounds", "3", "-q"]) == 0
    doc = json.loads((out / "leakage.json").read_text())
    assert doc["format"] == "p2pem-leakage" and {r["protocol"] for r in doc["runs"]} == {"pdmm-sp", "secure-sum"}
