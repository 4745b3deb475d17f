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


# ------------------------------------------------------------------------------ synth


def ais_by_hospital(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    """The AIS table under its public schema, each row held by one of five named hospitals."""
    root = Path(__file__).resolve().parents[1]
    frame = pd.read_csv(root / "data" / "ais.csv")
    rng = np.random.default_rng(11)
    frame.insert(3, "hospital", [f"h-{c}" for c in "abcde"] * (len(frame) // 5) + ["h-a"] * (len(frame) % 5))
    frame["hospital"] = frame["hospital"].to_numpy()[rng.permutation(len(frame))]
    frame.to_csv(tmp_path / "ais-sites.csv", index=False)
    path = tmp_path / "ais-sites.toml"
    path.write_text(
        f'seed = 4\n[data]\nsource = "csv"\npath = "ais-sites.csv"\nschema = "{root}/data/ais.schema.toml"\nnode_column = "hospital"\n'
        '[graph]\nkind = "edges"\nedges = [[0, 1], [1, 2], [2, 3], [3, 4], [4, 0], [0, 2]]\n'  # no [em]: a Bayesian-network release needs none
        '[[protocols]]\nname = "pdmm-sp"\n[bayesnet]\nepsilon = 4.0\nk = 2\nn_bins = 5\n[synth]\nmodel = "privbayes"\nprotocol = 0\nrows = 50\n'
    )
    return path, frame


def test_synth_over_a_node_column_splits_the_rows_as_the_parties_hold_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """[data] node_column with a schema: the party column is not a data column, node i holds
    exactly the rows of the i-th hospital (checked against each hospital's own file read on
    its own), for the Bayesian-network release and the mixture synthesizer alike, and the
    release names the parties."""
    from p2pem.builders import load_data, load_table_parts
    from p2pem.tabular import read_table

    path, frame = ais_by_hospital(tmp_path)
    scenario = load_scenario(path)
    names = sorted(set(frame["hospital"]))
    assert scenario.parties == tuple(names) and scenario.graph.n_nodes == 5 and "hospital" not in scenario.data.schema.names
    parts, _ = load_table_parts(scenario)
    encoded = load_data(scenario)
    for i, name in enumerate(names):
        own = tmp_path / f"{name}.csv"
        frame[frame["hospital"] == name].drop(columns="hospital").to_csv(own, index=False)
        alone = read_table(own, scenario.data.schema)
        np.testing.assert_array_equal(parts[i].codes, alone.codes)
        np.testing.assert_array_equal(parts[i].continuous, alone.continuous)
        np.testing.assert_array_equal(encoded[i], scenario.data.encoding.rows(alone))
    assert main(["synth", str(path), "--out", str(tmp_path / "out"), "-q"]) == 0
    release = json.loads((tmp_path / "out" / "release" / "release.json").read_text())
    assert release["parties"] == names and release["n_nodes"] == 5 and release["training_rows"] == len(frame)
    assert "hospital" not in [c["name"] for c in release["schema"]["columns"]]
    assert "hospital" not in (tmp_path / "out" / "release" / "synthetic.csv").read_text().splitlines()[0].split(",")


def test_a_node_column_under_a_schema_is_checked(tmp_path: Path) -> None:
    path, frame = ais_by_hospital(tmp_path)
    text = path.read_text()
    path.write_text(text.replace('node_column = "hospital"', 'node_column = "sport"'))
    with pytest.raises(ConfigError, match="'data.node_column': .*the party column 'sport' is a column of the schema"):
        load_scenario(path)
    frame.loc[7, "hospital"] = ""
    frame.to_csv(tmp_path / "ais-sites.csv", index=False)
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"'data.node_column': .*ais-sites.csv line 9, column 'hospital': '' names no party"):
        load_scenario(path)
