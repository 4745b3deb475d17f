"""``p2pem deploy`` of an MST or AIM release: one OS process per node, the marginals summed through a
real Mosquitto broker, every node building its task from the roster's public ``[task]`` and its own
rows -- and, with the insecure reproducible seed, the release and the synthetic rows are the ones
``p2pem synth`` writes for the same scenario, to the byte."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from p2pem.bayesnet.marginalrelease import settings_from_table, settings_table
from p2pem.bayesnet.marginals import MarginalSettings
from p2pem.builders import load_table_parts
from p2pem.cli import main
from p2pem.deploy.bootstrap import load_node
from p2pem.deploy.broker import find_mosquitto
from p2pem.deploy.config import NodeConfig
from p2pem.deploy.kit import Kit
from p2pem.deploy.roster import Roster
from p2pem.deploy.transports.memory import MemoryBroker
from p2pem.dp.publication import Publication
from p2pem.errors import ConfigError
from p2pem.scenario import load_scenario
from p2pem.synth.run import synthesize, write_synthesis
from test_marginal_synth import ais  # noqa: F401  (the fixture: four AIS columns under a public schema)

N_NODES = 4
#: Seconds a node may stay silent: Private-PGM's estimation runs inside the node's step and holds its
#: message loop for as long as it takes (seconds, more on a loaded machine)
TIMEOUT = 120

needs_mosquitto = pytest.mark.skipif(find_mosquitto() is None, reason="mosquitto is not installed (apt-get install mosquitto)")

SCENARIO = """\
name = "marginal-release"
seed = 11
[data]
source = "csv"
path = "{data}"
schema = "{schema}"
n_bins = 3
[graph]
kind = "geometric"
n_nodes = {n_nodes}
radius = 0.9
[em]
n_components = 1
[[protocols]]
name = "pdmm-sp"
[[protocols]]
name = "secure-sum"
[[protocols]]
name = "dp-distributed"
epsilon = 1.0
[marginals]
epsilon = 1.0
iters = 50
{extra}
[synth]
model = "{model}"
protocol = "{protocol}"
rows = 60
"""


def release_scenario(ais: Path, tmp: Path, *, model: str = "mst", protocol: str = "pdmm-sp", extra: str = "") -> Path:  # noqa: F811
    path = tmp / f"{model}.toml"
    path.write_text(SCENARIO.format(data=ais / "ais4.csv", schema=ais / "ais4.schema.toml", n_nodes=N_NODES, model=model,
                                    protocol=protocol, extra=extra))
    return path


@pytest.mark.mqtt
@pytest.mark.slow
@needs_mosquitto
def test_a_seeded_deployed_release_is_the_release_of_p2pem_synth_to_the_byte(ais, tmp_path, capsys):  # noqa: F811
    model, protocol = "mst", "pdmm-sp"
    path = release_scenario(ais, tmp_path, model=model, protocol=protocol)
    out = tmp_path / "deployed"
    assert main(["deploy", str(path), "--out", str(out), "--insecure-reproducible-seed", "--check", "-q", "--timeout", str(TIMEOUT)]) == 0
    printed = capsys.readouterr().out
    assert "every node agreed" in printed and "same release as `p2pem synth`" in printed, printed
    scenario = load_scenario(path)
    reference = synthesize(scenario, publication=Publication.insecure(scenario.seed))
    write_synthesis(tmp_path / "synth", reference, title="reference")
    deployed = json.loads((out / "release" / "release.json").read_text())
    simulated = json.loads((tmp_path / "synth" / "release" / "release.json").read_text())
    assert deployed["model"] == model and deployed["protocol"]["name"] == protocol and deployed["n_nodes"] == N_NODES
    assert deployed["deployment"]["seeded"] is True
    # the same document apart from how long it took and how it ran
    run_fields = {"wall_s", "deployment"}
    assert {k: v for k, v in deployed.items() if k not in run_fields} == {k: v for k, v in simulated.items() if k not in run_fields}
    assert deployed["measurements"] and deployed["networks"] and deployed["aggregations"]["count"] >= 2
    # every node process ended with that release, and the synthetic rows are p2pem synth's, byte for byte
    kit = Kit.load(out)
    outputs = [json.loads(kit.result_path(i).read_text())["output"] for i in range(N_NODES)]
    assert all(o == outputs[0] for o in outputs) and outputs[0]["networks"] == simulated["networks"]
    assert (out / "release" / "synthetic.csv").read_bytes() == (tmp_path / "synth" / "release" / "synthetic.csv").read_bytes()


@pytest.mark.mqtt
@pytest.mark.slow
@needs_mosquitto
def test_a_private_deployment_draws_its_shared_seed_by_commit_and_reveal(ais, tmp_path, capsys):  # noqa: F811
    """OS-entropy secrets, the shared seed by commit-and-reveal, noise shares over secure-sum: the mode members learn only noisy sums in."""
    path = release_scenario(ais, tmp_path, protocol="secure-sum", extra='noise = "shares"\nselection = "noisy"\ntolerate = 1')
    out = tmp_path / "kit"
    assert main(["deploy", str(path), "--out", str(out), "--prepare-only"]) == 0
    assert main(["deploy", "--kit", str(out), "-q", "--timeout", str(TIMEOUT)]) == 0
    release = json.loads((out / "release" / "release.json").read_text())
    reports = [json.loads(Kit.load(out).result_path(i).read_text()) for i in range(N_NODES)]
    assert not any(r["insecure_reproducible_seed"] for r in reports) and release["deployment"]["seeded"] is False
    assert all(r["output"] == reports[0]["output"] for r in reports) and release["networks"] == reports[0]["output"]["networks"]
    assert release["privacy"]["noise"] == "os-entropy" and release["privacy"]["differentially_private"] is True
    assert release["privacy"]["epsilon_spent"]["colluders"]["zcdp"] == release["privacy"]["epsilon_spent"]["outsider"]["zcdp"]
    # two more aggregations than the seeded run: the commitments, then the reveals
    scenario = load_scenario(path)
    simulated = synthesize(scenario, publication=Publication.insecure(scenario.seed)).release
    assert release["aggregations"]["count"] == simulated["aggregations"]["count"] + 2
    assert release["privacy"]["rho_spent"] == pytest.approx(simulated["privacy"]["rho_spent"])


def test_the_kit_carries_the_public_marginals_task_and_each_node_its_own_rows(ais, tmp_path, capsys):  # noqa: F811
    path = release_scenario(ais, tmp_path, extra='pairs = [["Ht", "Wt"]]')
    out = tmp_path / "kit"
    assert main(["deploy", str(path), "--out", str(out), "--prepare-only"]) == 0
    assert "mst release" in capsys.readouterr().out
    kit = Kit.load(out)
    task = Roster.load(kit.roster_path).task
    assert task is not None and task["kind"] == "marginals" and task["protocol"] == "pdmm-sp"
    assert task["settings"]["public_pairs"] == [["Ht", "Wt"]] and task["settings"]["iters"] == 50
    parts, _ = load_table_parts(load_scenario(path))
    setup = load_node(NodeConfig.load(kit.config_path(2)), link=MemoryBroker().link(["#"], name="node2"))
    assert setup.n_rows == parts[2].n_rows and setup.node.task.settings.public_pairs == ((2, 3),)


def test_settings_survive_the_roster_table_and_bad_ones_are_one_line_errors():
    names = ("sex", "sport", "Ht", "Wt")
    settings = MarginalSettings(method="aim", epsilon=math.inf, rounds=4, public_pairs=((0, 2),))
    table = settings_table(settings, names)
    assert table["epsilon"] == "inf" and "tolerate" not in table and table["public_pairs"] == [["sex", "Ht"]]
    assert settings_from_table(table, names, where="roster.toml") == settings
    with pytest.raises(ConfigError, match=r"^roster.toml: \[task.settings\] .*'colour'"):
        settings_from_table(table | {"colour": 1}, names, where="roster.toml")
    with pytest.raises(ConfigError, match=r"^roster.toml: \[task.settings\] public_pairs must be .*'height'"):
        settings_from_table(table | {"public_pairs": [["sex", "height"]]}, names, where="roster.toml")
    with pytest.raises(ConfigError, match=r"^roster.toml: \[task.settings\] 'noise' must be one of central, shares"):
        settings_from_table(table | {"noise": "loud"}, names, where="roster.toml")


def test_a_protocol_that_adds_noise_of_its_own_is_refused_naming_the_release(ais, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "out"
    assert main(["deploy", str(release_scenario(ais, tmp_path)), "--out", str(out), "--protocol", "dp-distributed"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "protocol 'dp-distributed' cannot aggregate a deployed MST release (it adds noise of its own)" in err
    assert not out.exists()
