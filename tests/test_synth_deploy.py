"""``p2pem deploy`` of a Bayesian-network release: one OS process per node, the counts summed
through a real Mosquitto broker, every node building its task from the public roster and its
own rows -- and the release it writes is the one ``p2pem synth`` computes for the same
scenario and seed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from p2pem.dp.publication import Publication
from p2pem.builders import load_table_parts
from p2pem.cli import main
from p2pem.deploy.bootstrap import load_node
from p2pem.deploy.broker import find_mosquitto
from p2pem.deploy.config import NodeConfig
from p2pem.deploy.kit import Kit
from p2pem.deploy.roster import Roster
from p2pem.deploy.transports.memory import MemoryBroker
from p2pem.errors import ConfigError, DataError
from p2pem.scenario import load_scenario
from p2pem.synth.run import synthesize, write_synthesis
from p2pem.tabular import read_table

ROOT = Path(__file__).resolve().parents[1]
N_NODES = 4

needs_mosquitto = pytest.mark.skipif(find_mosquitto() is None, reason="mosquitto is not installed (apt-get install mosquitto)")


def release_scenario(tmp: Path, *, model: str = "privbayes", extra: str = "") -> Path:
    """3000 rows of Adult under its public schema on 4 nodes; pdmm-sp, secure-sum and dp-distributed listed."""
    rows = (ROOT / "data" / "adult.data").read_text().splitlines()[:3000]
    (tmp / "adult.data").write_text("\n".join(rows) + "\n")
    hm = 'eta = 0.02\nnoise = "shares"\n' if model == "hmprivbayes" else ""
    text = f"""name = "release"
seed = 7

[data]
source = "csv"
path = "adult.data"
schema = {json.dumps(str(ROOT / "data" / "adult.schema.toml"))}

[graph]
kind = "geometric"
n_nodes = {N_NODES}

[em]
n_components = 1

[[protocols]]
name = "pdmm-sp"

[[protocols]]
name = "secure-sum"

[[protocols]]
name = "dp-distributed"
epsilon = 1.0

[[protocols]]
name = "federated"

[bayesnet]
epsilon = 1.0
{hm}
[synth]
model = "{model}"
{extra}"""
    path = tmp / "release.toml"
    path.write_text(text)
    return path


@pytest.mark.mqtt
@pytest.mark.slow
@needs_mosquitto
@pytest.mark.parametrize(("model", "protocol"), [("privbayes", "pdmm-sp"), ("hmprivbayes", "secure-sum")], ids=["privbayes-pdmm-sp", "hmprivbayes-secure-sum"])
def test_a_deployed_release_is_the_release_of_p2pem_synth(tmp_path, model, protocol, capsys):
    path = release_scenario(tmp_path, model=model, extra=f'protocol = "{protocol}"\n')
    out = tmp_path / "deployed"
    assert main(["deploy", str(path), "--out", str(out), "--insecure-reproducible-seed", "--check", "-q"]) == 0  # [synth] protocol
    printed = capsys.readouterr().out
    assert "every node agreed" in printed and "same release as `p2pem synth`" in printed
    deployed = json.loads((out / "release" / "release.json").read_text())
    scenario = load_scenario(path)
    reference = synthesize(scenario, publication=Publication.insecure(scenario.seed))
    simulated = json.loads(json.dumps(reference.release))  # as written to release.json
    assert simulated["protocol"]["name"] == deployed["protocol"]["name"] == protocol
    # the same document apart from how long it took and how it ran (ids, the deployment's own files)
    assert deployed["deployment"]["seeded"] is True and deployed["deployment"]["run_id"].startswith("release-")
    run_fields = {"wall_s", "deployment"}
    assert {k: v for k, v in deployed.items() if k not in run_fields} == {k: v for k, v in simulated.items() if k not in run_fields}
    assert deployed["aggregations"]["count"] >= 4 and deployed["networks"]
    # every node process ended with that release (the launcher also checked their digests)
    kit = Kit.load(out)
    outputs = [json.loads(kit.result_path(i).read_text())["output"] for i in range(N_NODES)]
    assert all(o == outputs[0] for o in outputs) and outputs[0]["networks"] == simulated["networks"]
    # and the synthetic rows are those `p2pem synth` samples from it
    write_synthesis(tmp_path / "synth", reference, title="reference")
    assert (out / "release" / "synthetic.csv").read_bytes() == (tmp_path / "synth" / "release" / "synthetic.csv").read_bytes()
    assert read_table(out / "release" / "synthetic.csv", scenario.data.schema, header=True, separator=",").n_rows == deployed["training_rows"]


@pytest.mark.mqtt
@pytest.mark.slow
@needs_mosquitto
def test_a_private_deployment_draws_its_seed_jointly_and_every_node_agrees(tmp_path, capsys):
    """Without the insecure seed: secrets from the OS, the shared seed by commit-and-reveal, a kit run later with --kit."""
    path = release_scenario(tmp_path)
    out = tmp_path / "kit"
    assert main(["deploy", str(path), "--out", str(out), "--prepare-only"]) == 0
    assert main(["deploy", "--kit", str(out), "-q"]) == 0
    release = json.loads((out / "release" / "release.json").read_text())
    reports = [json.loads(Kit.load(out).result_path(i).read_text()) for i in range(N_NODES)]
    assert not any(r["insecure_reproducible_seed"] for r in reports) and release["deployment"]["seeded"] is False
    assert all(r["output"] == reports[0]["output"] for r in reports) and release["networks"] == reports[0]["output"]["networks"]
    # fresh noise, not the scenario seed's: the conditionals differ from the simulated release's
    scenario = load_scenario(path)
    simulated = synthesize(scenario, publication=Publication.insecure(scenario.seed)).release
    assert release["privacy"]["noise"] == "os-entropy" and release["privacy"]["differentially_private"] is True
    assert release["privacy"]["epsilon"] == simulated["privacy"]["epsilon"] == 1.0
    assert release["networks"] != simulated["networks"]
    assert (out / "release" / "synthetic.csv").exists() and (out / "result.json").exists()


def test_the_kit_carries_the_public_task_and_each_node_only_its_own_rows(tmp_path, capsys):
    path = release_scenario(tmp_path)
    out = tmp_path / "kit"
    assert main(["deploy", str(path), "--out", str(out), "--prepare-only"]) == 0
    kit = Kit.load(out)
    roster = Roster.load(kit.roster_path)
    assert roster.task is not None and set(roster.task) == {"kind", "protocol", "schema", "settings"}
    assert roster.task["kind"] == "bayesnet" and roster.task["protocol"] == "pdmm-sp" and roster.task["settings"]["epsilon"] == 1.0
    scenario = load_scenario(path)
    parts, _ = load_table_parts(scenario)
    for i, part in enumerate(parts):
        mine = read_table(kit.node_dir(i) / "data.csv", scenario.data.schema, header=True, separator=",")
        assert mine.n_rows == part.n_rows and (mine.codes == part.codes).all() and (mine.continuous == part.continuous).all()
    # each node builds its task from the roster and its file: with its own rows only
    setup = load_node(NodeConfig.load(kit.config_path(1)), link=MemoryBroker().link(["#"], name="node1"))
    assert setup.n_rows == parts[1].n_rows and not hasattr(setup.node.task, "loglik")


def test_a_roster_naming_an_unknown_task_is_refused_at_the_node(tmp_path, capsys):
    out = tmp_path / "kit"
    assert main(["deploy", str(release_scenario(tmp_path)), "--out", str(out), "--prepare-only"]) == 0
    roster = out / "roster.toml"
    roster.write_text(roster.read_text().replace('kind = "bayesnet"', 'kind = "nope"'))
    with pytest.raises(ConfigError, match=r"roster.toml: unknown task kind 'nope' \(known: bayesnet, marginals\)"):
        load_node(NodeConfig.load(Kit.load(out).config_path(0)), link=MemoryBroker().link(["#"], name="node0"))


@pytest.mark.parametrize(
    ("protocol", "message"),
    [
        ("dp-distributed", r"release.toml: protocol 'dp-distributed' cannot aggregate a deployed Bayesian-network release \(it adds noise of its own\); deploy one of pdmm-sp, secure-sum"),
        ("federated", r"release.toml: protocol 'federated' cannot aggregate a deployed Bayesian-network release \(its server process runs EM only\)"),
        ("centralized", r"release.toml: no protocol 'centralized' in the scenario"),
    ],
)
def test_a_protocol_that_cannot_sum_the_counts_is_refused_before_anything_is_written(tmp_path, capsys, protocol, message):
    out = tmp_path / "out"
    assert main(["deploy", str(release_scenario(tmp_path)), "--out", str(out), "--protocol", protocol]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("p2pem: error: ")
    assert re.search(message, err), err
    assert not out.exists()


def test_a_schema_that_is_not_public_is_refused(tmp_path, capsys):
    path = release_scenario(tmp_path)
    schema = (ROOT / "data" / "adult.schema.toml").read_text()
    (tmp_path / "schema.toml").write_text(schema.replace("\n[csv]", "\npublic = false\n\n[csv]", 1))
    path.write_text(path.read_text().replace(json.dumps(str(ROOT / "data" / "adult.schema.toml")), '"schema.toml"'))
    assert main(["deploy", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "is not public (public = false" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_node_whose_rows_break_the_public_schema_fails_naming_its_file_line_and_column(tmp_path, capsys):
    out = tmp_path / "kit"
    assert main(["deploy", str(release_scenario(tmp_path)), "--out", str(out), "--prepare-only"]) == 0
    data = Kit.load(out).node_dir(2) / "data.csv"
    lines = data.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("workclass")] = "Martian"
    data.write_text("\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n")
    with pytest.raises(DataError, match=r"node2/data.csv line 2, column 'workclass': 'Martian' is not a public category"):
        load_node(NodeConfig.load(Kit.load(out).config_path(2)), link=MemoryBroker().link(["#"], name="node2"))
