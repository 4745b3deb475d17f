"""Site names are first-class: a scenario's node column and named edge file, the estimator's
``node_ids`` and graph labels, ``[leakage] corrupt`` and ``--targets`` take the same names, and
every output (result.json, leakage.json, summary.json, whole_run.json, a saved model, a
deployment's roster and result) carries one ``parties`` mapping beside the integer ids."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import p2pem
from p2pem import DistributedGMM
from p2pem.cli import main
from p2pem.errors import ConfigError
from p2pem.leakage.config import parse_leakage, parse_targets
from p2pem.leakage.wholerun_analysis import parse_whole_run
from p2pem.scenario import load_scenario

#: Sorted, so node i is SITES[i].
SITES = ["aarhus", "bergen", "malmo", "oslo", "trondheim", "turku"]
EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3), (1, 4)]


def sites_scenario(tmp_path: Path, leakage: str = 'corrupt = ["bergen", "oslo"]\nruns = 400\niterations = 2\nn_batches = 4\n') -> Path:
    """Six named hospitals: rows with a site column (node i holds SITES[i]'s rows), an edge file of names."""
    rng = np.random.default_rng(5)
    sites = [SITES[i] for i in rng.permutation(np.arange(60) % 6)]
    frame = pd.DataFrame(rng.normal(size=(60, 2)) + np.where(rng.random((60, 1)) < 0.5, 3.0, -3.0), columns=["alcohol", "hue"])
    frame.insert(0, "site", sites)
    frame.to_csv(tmp_path / "wine.csv", index=False)
    pd.DataFrame([(SITES[i], SITES[j]) for i, j in EDGES], columns=["a", "b"]).to_csv(tmp_path / "links.csv", index=False)
    path = tmp_path / "sites.toml"
    path.write_text(
        'name = "sites"\nseed = 3\n[data]\nsource = "csv"\npath = "wine.csv"\nnode_column = "site"\n[graph]\npath = "links.csv"\n'
        '[em]\nn_components = 2\nmax_iter = 3\ntol = 0.0\n[[protocols]]\nname = "pdmm-sp"\n[[protocols]]\nname = "secure-sum"\n'
        f"[leakage]\n{leakage}"
    )
    return path


def test_simulate_and_a_saved_model_carry_the_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sites_scenario(tmp_path)
    assert load_scenario(path).parties == tuple(SITES)
    assert main(["simulate", str(path), "--out", str(tmp_path / "sim"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "parties: 0 = aarhus, 1 = bergen, 2 = malmo" in out
    doc = json.loads((tmp_path / "sim" / "result.json").read_text())
    assert doc["parties"] == SITES
    assert main(["model", str(tmp_path / "sim" / "result.json"), "--out", str(tmp_path / "m.json")]) == 0
    assert p2pem.load(tmp_path / "m.json").node_ids_ == tuple(SITES)


def test_estimator_names_round_trip_through_a_saved_model(tmp_path: Path) -> None:
    sites_scenario(tmp_path)
    frame = pd.read_csv(tmp_path / "wine.csv")
    model = DistributedGMM(2, max_iter=3, tol=0.0, random_state=0, protocol="federated").fit(frame[["alcohol", "hue"]], node_ids=frame["site"])
    assert model.node_ids_ == tuple(SITES)
    loaded = p2pem.load(model.save(tmp_path / "m.json"))
    assert loaded.node_ids_ == tuple(SITES) and np.array_equal(loaded.row_nodes_, model.row_nodes_)


def test_leakage_takes_party_names_and_reports_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sites_scenario(tmp_path)
    config = parse_leakage(load_scenario(path))
    assert config.corrupt == (1, 3) and config.node_labels == tuple(SITES)
    assert parse_targets("aarhus,5", config, 6) == (0, 5)
    with pytest.raises(ConfigError, match="--targets names corrupt node 3"):
        parse_targets("oslo", config, 6)
    assert parse_whole_run(load_scenario(path)).corrupt_sets == ((1, 3),)
    bad = sites_scenario(tmp_path, 'corrupt = ["bergen", "stockholm"]\n')
    with pytest.raises(ConfigError, match=r"sites.toml: 'leakage.corrupt' holds 'stockholm', not a party of the scenario \(the parties are 'aarhus', "):
        parse_leakage(load_scenario(bad))
    assert main(["leakage", str(sites_scenario(tmp_path)), "--out", str(tmp_path / "leak"), "--targets", "aarhus", "-q"]) == 0
    leak = json.loads((tmp_path / "leak" / "leakage.json").read_text())
    summary = json.loads((tmp_path / "leak" / "summary.json").read_text())
    assert leak["parties"] == SITES and summary["parties"] == SITES
    assert summary["settings"]["corrupt"] == [1, 3] and {r["node_label"] for r in leak["runs"]} == {"aarhus"}


def test_deployment_roster_carries_the_names(tmp_path: Path) -> None:
    from p2pem.deploy.kit import prepare_kit
    from p2pem.deploy.roster import Roster

    scenario = load_scenario(sites_scenario(tmp_path))
    kit = prepare_kit(scenario, tmp_path / "kit", broker=("127.0.0.1", 1883))
    roster = Roster.load(kit.roster_path)
    assert roster.parties == tuple(SITES) and roster.columns == ("alcohol", "hue")
    text = kit.roster_path.read_text()
    kit.roster_path.write_text(text.replace('name = "bergen"', 'name = "aarhus"'))
    with pytest.raises(ConfigError, match="two \\[\\[nodes\\]\\] have the same 'name'"):
        Roster.load(kit.roster_path)
