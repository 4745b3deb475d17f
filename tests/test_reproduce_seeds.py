"""The reproduction scripts of HMPrivBayes (seed 003) and Jälkö et al. (seed 001) run, in a cut-down
quick mode, and write documents in the reproductions page's format."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERDICTS = {"reproduced", "not reproduced", "partly", "explained"}


def script(name: str):
    spec = importlib.util.spec_from_file_location(f"reproduce_{name}", ROOT / "sim" / "reproduce" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def check_document(path: Path, seed: str) -> dict:
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["seed"] == seed and doc["quick"] is True
    for key in ("paper", "setting", "data"):
        assert isinstance(doc[key], str) and doc[key]
    assert doc["rows"] and all(set(r) >= {"claim", "paper", "p2pem", "verdict"} and r["verdict"] in VERDICTS for r in doc["rows"])
    assert all(isinstance(n, str) for n in doc["notes"])
    return doc


@pytest.mark.slow
def test_hmprivbayes_reproduction_runs_and_its_papers_composition_overspends(tmp_path):
    out = tmp_path / "hm.json"
    assert script("hmprivbayes").main(["--quick", "--seeds", "1", "--epsilons", "0.8", "--json", str(out)]) == 0
    doc = check_document(out, "003")
    spent = {v: doc["table"][v]["0.8"]["epsilon_spent"] for v in doc["table"]}
    assert spent["PrivBayes"] <= 0.8 + 1e-9 and spent["HMPrivBayes"] <= 0.8 + 1e-9
    assert spent["HMPrivBayes, paper's composition"] > 0.8 * 1.5  # two clusters: eps_1 + 2 (eps_2 + eps_3)


@pytest.mark.slow
def test_jalko_reproduction_runs_over_independent_fits(tmp_path):
    out = tmp_path / "jalko.json"
    assert script("jalko").main(["--quick", "--releases", "2", "--epsilons", "1", "--bootstrap", "3", "--json", str(out)]) == 0
    doc = check_document(out, "001")
    assert doc["studies"]["stratified eps=1"]["independent_fits"] is True
    assert doc["studies"]["stratified eps=1, samples of one fit"]["independent_fits"] is False
