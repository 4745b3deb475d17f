"""Deployment documents without a broker: roster, node config, data files, CLI wiring."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from p2pem.cli import main
from p2pem.deploy.crypto import Identity
from p2pem.scenario import parse_broker_address
from p2pem.deploy.config import BrokerConfig, NodeConfig, Timeouts, load_node_data, toml_dumps, write_node_data
from p2pem.deploy.roster import Roster, check_deployable
from p2pem.em import EMSettings
from p2pem.errors import ConfigError
from p2pem.protocols import Topology
from p2pem.registry import make_protocol
from p2pem.protocols.pdmm import auto_c
from p2pem.builders import build_graph, em_settings
from p2pem.scenario import load_scenario
from p2pem.simulate import protocol_streams

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "parkinsons-20.toml"


def keys(n: int) -> list:
    return [Identity.generate().public for _ in range(n)]


def ring_with_chord(n: int) -> nx.Graph:
    g = nx.cycle_graph(n)
    g.add_edge(0, n // 2)
    return g


# ------------------------------------------------------------------------------ roster


def test_roster_topology_equals_the_simulators(tmp_path):
    scenario = load_scenario(SCENARIO)
    g = build_graph(scenario)
    spec = make_protocol("pdmm-sp", {"mode": "sync"})
    settings = em_settings(scenario)
    path = Roster.build("run-1", g, settings, spec, keys(20), n_features=2).save(tmp_path / "roster.toml")
    roster = Roster.load(path)
    ref = Topology.from_graph(g)
    topo = roster.topology()
    assert (topo.n_nodes, topo.neighbours, topo.diameter, topo.ring) == (ref.n_nodes, ref.neighbours, ref.diameter, ref.ring)
    assert auto_c(topo) == auto_c(ref)  # so c = "auto" is the same step size at every node
    got = roster.em_settings()
    assert (got.n_components, got.max_iter, got.tol, got.reg_covar, got.init_seed) == (
        settings.n_components,
        settings.max_iter,
        settings.tol,
        settings.reg_covar,
        settings.init_seed,
    )
    assert roster.protocol_spec() == spec
    # the digest is a property of the content, not of the file
    assert Roster.load(path).digest() == roster.digest()
    other = Roster.build("run-2", g, settings, spec, list(roster.keys), n_features=2)
    assert other.digest() != roster.digest()


def test_roster_schema_and_each_nodes_own_check_of_its_data(tmp_path):
    """The roster records the public schema (width, column names); a node reads the roster's
    columns from its own file by name, and a file or node config that does not fit is this
    node's error, naming its own file, before it goes online.  An EM roster without a width
    (written by an older p2pem) is refused: a node could not tell its own wrong file from a
    peer's wrong message."""
    from p2pem.deploy.bootstrap import own_rows
    from p2pem.errors import DataError

    columns = ("alcohol", "ash", "hue")
    roster = Roster.load(
        Roster.build("r", ring_with_chord(4), EMSettings(2, 3), make_protocol("pdmm-sp"), keys(4), n_features=3, columns=columns)
        .save(tmp_path / "roster.toml")
    )
    assert (roster.n_features, roster.columns) == (3, columns)
    rows = np.arange(12.0).reshape(4, 3)

    def node(text: str, columns=None) -> NodeConfig:
        (tmp_path / "data.csv").write_text(text)
        return NodeConfig(2, roster.path, tmp_path / "k", tmp_path / "data.csv", tmp_path / "x", BrokerConfig("h"), columns=columns,
                          path=tmp_path / "node.toml")

    shuffled = "site,hue,alcohol,ash\n" + "".join(f"h3,{r[2]},{r[0]},{r[1]}\n" for r in rows)
    assert np.array_equal(own_rows(node(shuffled), roster), rows)  # read by name, in the roster's order
    with pytest.raises(DataError) as info:
        own_rows(node("alcohol,ash\n1,2\n"), roster)
    assert str(info.value).startswith(f"node 2: {tmp_path / 'data.csv'} has no column(s) 'hue' of the run's public schema")
    with pytest.raises(DataError, match=r"^node 2: .*node.toml reads columns 'hue', 'ash', 'alcohol' of .*data.csv, but the run's public schema"):
        own_rows(node(shuffled, columns=("hue", "ash", "alcohol")), roster)
    unnamed = Roster.load(Roster.build("r", ring_with_chord(4), EMSettings(2, 3), make_protocol("pdmm-sp"), keys(4), n_features=3)
                          .save(tmp_path / "unnamed.toml"))
    with pytest.raises(DataError, match=r"^node 2: .*data.csv has 2 columns, but the roster .* says every node's data has 3"):
        own_rows(node("a,b\n1,2\n"), unnamed)
    text = (tmp_path / "unnamed.toml").read_text()
    (tmp_path / "unnamed.toml").write_text(text.replace("n_features = 3\n", ""))
    with pytest.raises(ConfigError, match="missing required key 'em.n_features'.*`p2pem keys roster`"):
        Roster.load(tmp_path / "unnamed.toml")
    with pytest.raises(ConfigError, match="needs n_features"):
        Roster.build("r", ring_with_chord(4), EMSettings(2, 3), make_protocol("pdmm-sp"), keys(4))


def test_roster_carries_an_explicit_init_bit_for_bit(tmp_path):
    from p2pem.gmm import GMMParams

    init = GMMParams(np.array([0.25, 0.75]), np.array([[0.1, -1 / 3], [2.0, 1e-300]]), np.array([np.eye(2), 2 * np.eye(2)]))
    settings = EMSettings(2, 5, 0.0, 1e-6, init, 7)
    roster = Roster.build("r", ring_with_chord(5), settings, make_protocol("pdmm-sp"), keys(5), n_features=2)
    back = Roster.load(roster.save(tmp_path / "r.toml")).em_settings()
    assert back.init.means.tobytes() == init.means.tobytes()
    assert back.init.covariances.tobytes() == init.covariances.tobytes()


def test_roster_init_errors_name_the_file_and_key(tmp_path):
    """A roster's [em.init] goes through the scenario's validator: one line, file and dotted key."""
    from p2pem.gmm import GMMParams

    init = GMMParams(np.array([0.25, 0.75]), np.array([[0.0, 1.0], [2.0, 3.0]]), np.array([np.eye(2), 2 * np.eye(2)]))
    path = Roster.build("r", ring_with_chord(5), EMSettings(2, 5, 0.0, 1e-6, init, 7), make_protocol("pdmm-sp"), keys(5), n_features=2).save(tmp_path / "r.toml")
    text = path.read_text()
    path.write_text(text.replace("0.25,", "0.35,", 1))
    with pytest.raises(ConfigError) as info:
        Roster.load(path)
    assert str(info.value) == f"{path}: 'em.init.weights' must be positive and sum to 1, got [0.35, 0.75]"
    path.write_text(text.replace("            2.0,", "            -2.0,", 1))  # covariances[1][0][0]
    with pytest.raises(ConfigError, match=r"'em\.init\.covariances\[1\]' is not positive definite$"):
        Roster.load(path)


def _array(key: str, *values: int) -> str:
    """``key = [...]`` as the TOML writer (tomli-w) lays out an array: one element a line."""
    return f"{key} = [\n" + "".join(f"    {v},\n" for v in values) + "]"


def _edit_roster(tmp_path: Path, old: str, new: str, count: int = 1) -> str:
    path = Roster.build("run-1", ring_with_chord(6), EMSettings(2, 3), make_protocol("pdmm-sp"), keys(6), n_features=2).save(tmp_path / "r.toml")
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, count))
    with pytest.raises(ConfigError) as info:
        Roster.load(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message
    return message


def test_roster_rejects_inconsistent_topologies(tmp_path):
    assert "does not list node 0" in _edit_roster(tmp_path, _array("neighbours", 1, 3, 5), _array("neighbours", 1, 3, 5, 2))
    assert "give 3" in _edit_roster(tmp_path, "diameter = 3", "diameter = 4")
    assert "unknown key 'topology.radius'" in _edit_roster(tmp_path, "diameter = 3", "diameter = 3\nradius = 0.3")
    assert "invalid run id" in _edit_roster(tmp_path, 'run_id = "run-1"', 'run_id = "a/b"')
    assert "insecure" in _edit_roster(tmp_path, "encrypt_duals = true", "encrypt_duals = false")
    assert "lists itself" in _edit_roster(tmp_path, _array("neighbours", 1, 3, 5), _array("neighbours", 0, 1, 3, 5))


def test_roster_rejects_shared_keys(tmp_path):
    k = keys(1)[0]
    roster = Roster.build("r", ring_with_chord(4), EMSettings(2, 3), make_protocol("pdmm-sp"), [k, *keys(3)], n_features=2)
    path = roster.save(tmp_path / "r.toml")
    text = path.read_text()
    first = text.index(k.signing_key)
    second_entry = text.index("[[nodes]]", first)
    end = text.index("\n", text.index("signing_key", second_entry))
    start = text.index("signing_key", second_entry)
    path.write_text(text[:start] + f'signing_key = "{k.signing_key}"' + text[end:])
    with pytest.raises(ConfigError, match="share a public key"):
        Roster.load(path)


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("pdmm-sp", {"encrypt_duals": False}, "insecure"),
        ("dp-distributed", {"aggregation": "pdmm-sp"}, "dp-distributed needs a public 'bound'"),
        ("dp-central", {}, "dp-central needs a public 'bound'"),
        ("centralized", {}, "'centralized' cannot be deployed"),
    ],
)
def test_every_protocol_but_centralized_is_deployable(name, params, expected):
    with pytest.raises(ConfigError, match=expected) as info:
        check_deployable(make_protocol(name, params))
    assert "\n" not in str(info.value)
    for name, params in [("pdmm-sp", {"mode": "sync"}), ("pdmm-sp", {"mode": "async"}), ("secure-sum", {}), ("federated", {}),
                         ("dp-central", {"bound": 5.0}), ("dp-distributed", {"bound": 5.0, "aggregation": "pdmm-sp"})]:
        check_deployable(make_protocol(name, params))


# ------------------------------------------------------------------------- node config


def test_node_config_round_trip_and_seed_matches_the_simulator(tmp_path):
    (tmp_path / "n").mkdir()
    config = NodeConfig(
        node_id=4,
        roster=tmp_path / "roster.toml",
        key_file=tmp_path / "n" / "node.key",
        data=tmp_path / "n" / "data.csv",
        result=tmp_path / "n" / "result.json",
        broker=BrokerConfig("10.0.0.1", 1884, "node4", tmp_path / "n" / "pw"),
        timeouts=Timeouts(timeout=3.0),
        seed=1,
        spawn_key=(3, 4),
    )
    path = config.save(tmp_path / "n" / "node.toml")
    text = path.read_text()
    assert 'roster = "../roster.toml"' in text and "TESTING ONLY" in text
    back = NodeConfig.load(path)
    assert back.node_id == 4 and back.broker == config.broker and back.timeouts == config.timeouts
    assert back.roster.resolve() == config.roster.resolve() and back.seed == 1 and back.spawn_key == (3, 4)
    # the generator p2pem deploy writes is the one p2pem simulate gives node 4
    sim = protocol_streams(load_scenario(SCENARIO).streams()["protocol"], 20)[4]
    assert np.array_equal(back.protocol_rng().normal(size=5), sim.normal(size=5))
    # without a seed the noise comes from OS entropy
    unseeded = NodeConfig.load(path.parent / NodeConfig(**{**config.__dict__, "seed": None, "spawn_key": ()}).save(path).name)
    assert unseeded.seed is None and "reproducibility" not in path.read_text()


def test_node_config_errors_name_the_file_and_key(tmp_path):
    path = tmp_path / "node.toml"
    base = 'node_id = 0\nroster = "r"\nkey_file = "k"\ndata = "d"\nresult = "x"\n[broker]\nhost = "h"\n'
    for extra, expected in [
        ("port = 0\n", "'broker.port' must be >= 1"),
        ("prot = 1\n", "unknown key 'broker.prot'"),
        ("[timeouts]\ntimeout = -1\n", "timeout 'timeout' must be a positive number"),
        ("[timeouts]\ntimeout = 2\nheartbeat = 5\n", "heartbeat (5 s) must be shorter"),
    ]:
        path.write_text(base + extra)
        with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")) as info:
            NodeConfig.load(path)
        assert str(info.value).startswith(str(path))
    path.write_text(base.replace("node_id = 0\n", ""))
    with pytest.raises(ConfigError, match="missing required key 'node_id'"):
        NodeConfig.load(path)


def test_timeouts_defaults():
    t = Timeouts(timeout=8)
    assert (t.heartbeat, t.reconnect_timeout, t.stall) == (1.0, 8.0, 24.0)
    assert Timeouts(timeout=2).heartbeat == 0.5


def test_broker_address():
    assert parse_broker_address("example.org:8883") == ("example.org", 8883)
    assert parse_broker_address("[::1]:1883") == ("::1", 1883)
    for bad in ("example.org", "h:0", "h:x", ":1883"):
        with pytest.raises(ConfigError):
            parse_broker_address(bad)


def test_node_data_files_read_back_bit_for_bit(tmp_path):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.standard_normal((20, 3)) * 10.0 ** rng.integers(-300, 300, (20, 3)), [[0.1, -0.0, 5e-324]]])
    back = load_node_data(write_node_data(tmp_path / "d.csv", X))
    assert back.tobytes() == X.tobytes()


def test_toml_writer_round_trips():
    doc = {"a": 1, "b": 0.1, "c": [1e-300, -2.5, 3.0], "s": 'q"uote\\', "t": {"x": True, "y": [[1, 2], [3, 4]]}, "n": [{"id": 0}, {"id": 1}]}
    assert tomllib.loads(toml_dumps(doc, header="h")) == doc
    with pytest.raises(ConfigError):
        toml_dumps({"x": math.inf})


# ---------------------------------------------------------------------------- scenario


def test_parkinsons_20_scenario_and_deploy_table(tmp_path):
    scenario = load_scenario(SCENARIO)
    assert scenario.graph.n_nodes == 20 and [p.name for p in scenario.protocols] == [
        "pdmm-sp", "secure-sum", "federated", "dp-central", "dp-distributed", "dp-distributed", "pdmm-sp"]
    assert scenario.em.max_iter == 30
    assert Timeouts.from_mapping(scenario.deploy).timeout == 20.0
    text = SCENARIO.read_text().replace("../data", str(ROOT / "data"))
    for old, new, expected in [
        ("timeout = 20.0", "timeuot = 20.0", "unknown key 'deploy.timeuot'"),
        ("timeout = 20.0", "timeout = -1.0", "'deploy.timeout' must be > 0"),
        ("timeout = 20.0", 'timeout = 20.0\nbroker = "nohost"', "'deploy.broker' must be HOST:PORT"),
    ]:
        path = tmp_path / "s.toml"
        path.write_text(text.replace(old, new, 1))
        with pytest.raises(ConfigError, match=expected):
            load_scenario(path)


# --------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("command", [["node"], ["deploy"], ["keys"], ["keys", "new"], ["keys", "roster"]])
def test_help_texts(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: p2pem" in out and len(out) > 300


def test_keys_new_show_and_roster(tmp_path, capsys):
    pubs = tmp_path / "pubs"
    pubs.mkdir()
    for i in range(4):
        assert main(["keys", "new", "--out", str(tmp_path / f"node{i}.key"), "--node-id", str(i)]) == 0
        (tmp_path / f"node{i}.pub").rename(pubs / f"node{i}.pub")
    out = capsys.readouterr().out
    assert "signing_key" in out and "never copy it off this host" in out
    assert (tmp_path / "node0.key").stat().st_mode & 0o077 == 0
    assert main(["keys", "new", "--out", str(tmp_path / "node0.key")]) == 2  # refuses to overwrite
    assert "already exists" in capsys.readouterr().err
    assert main(["keys", "show", str(tmp_path / "node1.key")]) == 0
    assert Identity.load(tmp_path / "node1.key").public.signing_key in capsys.readouterr().out

    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'seed = 3\n[data]\nsource = "synthetic"\nn_samples = 40\n[graph]\nkind = "edges"\n'
        "edges = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]\n[em]\nn_components = 2\nmax_iter = 4\n"
        '[[protocols]]\nname = "pdmm-sp"\n'
    )
    roster_path = tmp_path / "roster.toml"
    argv = ["keys", "roster", str(scenario), "--public", str(pubs), "--out", str(roster_path), "--run-id", "study-1", "--broker-dir", str(tmp_path / "broker")]
    assert main(argv) == 0
    roster = Roster.load(roster_path)
    assert roster.run_id == "study-1" and roster.neighbours == ((1, 2, 3), (0, 2), (0, 1, 3), (0, 2))
    assert roster.keys[2] == Identity.load(tmp_path / "node2.key").public
    acl = (tmp_path / "broker" / "acl").read_text()
    assert "user node3\ntopic write p2pem/study-1/from/3/#" in acl
    assert (tmp_path / "broker" / "node3.password").stat().st_mode & 0o077 == 0
    (pubs / "node3.pub").unlink()
    assert main([*argv[:-2], "--force"]) == 2
    assert "no public key for node(s) 3" in capsys.readouterr().err


def test_keys_default_names_fingerprints_and_tls(tmp_path, capsys, monkeypatch):
    """Every host's `keys new --node-id I` writes nodeI.key/.pub (distinct names for the
    coordinator); `keys roster` prints each node's fingerprint and `keys show` prints the same
    for a .pub file or the roster (no complaint about a public file's mode); `keys tls` makes a
    broker certificate that names the broker's address and verifies against its CA."""
    import ssl

    monkeypatch.chdir(tmp_path)
    for i in range(4):
        assert main(["keys", "new", "--node-id", str(i)]) == 0
    printed = capsys.readouterr().out
    fingerprints = [Identity.load(tmp_path / f"node{i}.key").public.fingerprint for i in range(4)]
    assert all(f'fingerprint = "{f}"' in printed for f in fingerprints) and (tmp_path / "node3.pub").exists()
    assert main(["keys", "new"]) == 2 and "give --node-id I" in capsys.readouterr().err
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'seed = 3\n[data]\nsource = "synthetic"\nn_samples = 40\n[graph]\nkind = "edges"\n'
        "edges = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]\n[em]\nn_components = 2\nmax_iter = 4\n"
        '[[protocols]]\nname = "pdmm-sp"\n'
    )
    assert main(["keys", "roster", str(scenario), "--public", *(f"node{i}.pub" for i in range(4)), "--out", "roster.toml"]) == 0
    out = capsys.readouterr().out
    assert all(f"node {i}: {f}" in out for i, f in enumerate(fingerprints))
    (tmp_path / "roster.toml").chmod(0o644)
    assert main(["keys", "show", "roster.toml"]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("node ")] == [f"node {i}: {f}" for i, f in enumerate(fingerprints)]
    assert main(["keys", "show", "node2.pub"]) == 0 and f'fingerprint = "{fingerprints[2]}"' in capsys.readouterr().out
    assert main(["keys", "tls", "--host", "10.20.0.7", "--host", "broker.example.org", "--out", "tls"]) == 0
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == ["ca.crt", "server.crt", "server.key"]
    assert (tmp_path / "tls" / "server.key").stat().st_mode & 0o077 == 0
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((tmp_path / "tls" / "server.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["10.20.0.7"]
    assert names.get_values_for_type(x509.DNSName) == ["broker.example.org"]
    context = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.crt"))
    context.load_verify_locations(cafile=str(tmp_path / "tls" / "ca.crt"))  # the CA a node trusts loads


def test_keys_roster_warns_about_cut_vertices_and_lonely_nodes(tmp_path, caplog):
    """A roster whose graph a single member could split (a cut vertex) or whose node has one
    neighbour (it learns that node's statistics) is written, with a warning saying why (logged:
    the CLI's logging prints it on stderr)."""
    pubs = tmp_path / "pubs"
    pubs.mkdir()
    for i in range(5):
        assert main(["keys", "new", "--out", str(pubs / f"node{i}.key"), "--node-id", str(i)]) == 0
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'seed = 3\n[data]\nsource = "synthetic"\nn_samples = 40\n[graph]\nkind = "edges"\n'
        "edges = [[0, 1], [1, 2], [2, 0], [2, 3], [3, 4], [4, 2]]\n[em]\nn_components = 2\nmax_iter = 4\n"
        '[[protocols]]\nname = "pdmm-sp"\n'
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="p2pem.deploy"):
        assert main(["keys", "roster", str(scenario), "--public", str(pubs), "--out", str(tmp_path / "r.toml")]) == 0
    err = caplog.text
    assert (tmp_path / "r.toml").is_file()
    assert "node 2 is a cut vertex: every path between the parts {0, 1}; {3, 4} passes it" in err
    from p2pem.deploy.cuts import cut_warnings

    lonely = cut_warnings(((1,), (0, 2, 3), (1, 3), (1, 2)))
    assert any("node 0 has a single neighbour (node 1)" in w for w in lonely)
    assert any("node 1 is a cut vertex" in w for w in lonely)
    assert cut_warnings(((1, 2), (0, 2), (0, 1))) == []


def test_assemble_roster_names_the_public_file_at_fault(tmp_path):
    from p2pem.deploy.keys import public_toml
    from p2pem.deploy.assemble import assemble_roster

    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'seed = 3\n[data]\nsource = "synthetic"\nn_samples = 40\n[graph]\nkind = "edges"\n'
        "edges = [[0, 1], [1, 2], [2, 3], [3, 0]]\n[em]\nn_components = 2\nmax_iter = 4\n"
        '[[protocols]]\nname = "pdmm-sp"\n'
    )
    pubs = tmp_path / "pubs"
    pubs.mkdir()
    identities = keys(4)
    for i, ident in enumerate(identities):
        (pubs / f"node{i}.pub").write_text(public_toml(ident, i))
    roster, _ = assemble_roster(scenario, [pubs], tmp_path / "roster.toml")
    assert roster.keys == tuple(identities)

    def refused(path: Path, text: str) -> str:
        original = path.read_text()
        path.write_text(text)
        try:
            with pytest.raises(ConfigError) as info:
                assemble_roster(scenario, [pubs], tmp_path / "roster.toml")
        finally:
            path.write_text(original)
        message = str(info.value)
        assert message.startswith(f"{path}: ") and "\n" not in message
        return message[len(f"{path}: ") :]

    pub = pubs / "node2.pub"
    other = public_toml(keys(1)[0], 2)
    swapped = pub.read_text().replace(identities[2].signing_key, keys(1)[0].signing_key)  # fingerprint left as it was
    assert refused(pub, swapped) == "'fingerprint' is not the fingerprint of these keys (the file was edited or damaged)"
    assert refused(pub, other.replace("id = 2", "id = 1")) == "a second public key for node 1"
    assert refused(pub, other.replace("id = 2", "id = 4")) == "node id 4 outside 0..3 (the scenario's graph has 4 nodes)"
    assert refused(pub, other.replace("id = 2", 'id = "2"')) == "'id' must be an integer, got '2' (a string)"
    assert refused(pub, other.replace("id = 2\n", "")).startswith("no node id")
    assert refused(pub, "id = [").startswith("invalid TOML")


def test_deploy_refuses_undeployable_protocols_in_one_line(tmp_path):
    text = SCENARIO.read_text().replace("../data", str(ROOT / "data")).replace('name = "pdmm-sp"', 'name = "centralized"', 1)
    text = text.replace("mode = \"sync\"", "", 1)
    path = tmp_path / "central.toml"
    path.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "p2pem", "deploy", str(path), "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "'centralized' cannot be deployed" in result.stderr
    assert not (tmp_path / "out").exists()


def test_kit_templates(tmp_path):
    text = (ROOT / "nodes" / "node.toml.template").read_text()
    text = text.replace("<I>", "3").replace("<broker.example.org>", "broker.example.org")
    text = text.replace("# [reproducibility]", "[reproducibility]").replace("# seed = 1", "seed = 1").replace("# spawn_key", "spawn_key")
    (tmp_path / "node.toml").write_text(text)
    config = NodeConfig.load(tmp_path / "node.toml")
    assert config.node_id == 3 and config.broker.tls and config.broker.username == "node3"
    assert config.timeouts.startup_timeout == 600.0 and config.spawn_key == (3, 3)
    conf = (ROOT / "nodes" / "mosquitto.conf.template").read_text()
    settings = [line for line in conf.splitlines() if line.strip() and not line.startswith("#")]
    assert all("#" not in line for line in settings)  # Mosquitto allows no trailing comments
    assert {"allow_anonymous false", "persistence false", "max_queued_messages 0", "set_tcp_nodelay true"} <= set(settings)
    script = ROOT / "nodes" / "launch.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_every_deploy_key_reaches_the_node_configs(tmp_path):
    """[deploy] timeouts (reconnect_timeout included), on_dropout; --timeout overrides keep the rest;
    secrets come from OS entropy unless the insecure seed is asked for."""
    from p2pem.deploy.kit import deploy_settings, prepare_kit

    text = SCENARIO.read_text().replace("../data", str(ROOT / "data"))
    text = text.replace("[deploy]\n", '[deploy]\nreconnect_timeout = 33.0\non_dropout = "continue"\n', 1)
    path = tmp_path / "s.toml"
    path.write_text(text)
    scenario = load_scenario(path)
    timeouts, _, _ = deploy_settings(scenario, {"timeout": 12.0})
    kit = prepare_kit(scenario, tmp_path / "kit", broker=("127.0.0.1", 1883), timeouts=timeouts)
    config = NodeConfig.load(kit.config_path(5))
    assert config.timeouts == Timeouts(timeout=12.0, startup_timeout=60.0, heartbeat=1.0, reconnect_timeout=33.0)
    assert Roster.load(kit.roster_path).on_dropout == "continue" and config.seed is None and not kit.seeded  # the run's, in the roster
    roster = Roster.load(kit.roster_path)
    assert roster.n_features == 2
    seeded = prepare_kit(scenario, tmp_path / "seeded", broker=("127.0.0.1", 1883), seeded=True)
    assert NodeConfig.load(seeded.config_path(5)).seed == scenario.seed and seeded.seeded
    bad = text.replace('on_dropout = "continue"', 'on_dropout = "maybe"')
    path.write_text(bad)
    with pytest.raises(ConfigError, match="on_dropout"):
        load_scenario(path)


def test_toml_writer_round_trips_text_outside_the_basic_multilingual_plane() -> None:
    import tomllib

    from p2pem.deploy.config import toml_dumps

    doc = {"name": "clinic 🏥 Ω \"quoted\"\\ \t", "x": 0.1 + 0.2, "n": [1, 2], "t": {"deep": [{"a": 1.5e-300}]}, "skip": None}
    text = toml_dumps(doc, header="a header\nof two lines")
    assert text.startswith("# a header\n# of two lines\n")
    back = tomllib.loads(text)
    assert back == {k: v for k, v in doc.items() if v is not None}


def test_keys_roster_without_data_takes_the_schema_from_options(tmp_path, capsys):
    """The coordinator needs no sample file: a scenario without [data] gives the nodes' public
    schema as --columns (or --n-features), and the roster is the one a [data] sample file with
    that header gives; without either, one line says what to give."""
    from p2pem.deploy.assemble import assemble_roster
    from p2pem.deploy.keys import public_toml

    pubs = tmp_path / "pubs"
    pubs.mkdir()
    for i, ident in enumerate(keys(4)):
        (pubs / f"node{i}.pub").write_text(public_toml(ident, i))
    rest = ('seed = 3\n[graph]\nkind = "edges"\nedges = [[0, 1], [1, 2], [2, 3], [3, 0]]\n[em]\nn_components = 2\nmax_iter = 4\n'
            '[[protocols]]\nname = "pdmm-sp"\n')
    bare, sampled = tmp_path / "bare.toml", tmp_path / "sampled.toml"
    bare.write_text(rest)
    (tmp_path / "sample.csv").write_text("age,bmi,hue\n1,2,3\n4,5,6\n")
    sampled.write_text(rest + '[data]\nsource = "csv"\npath = "sample.csv"\n')
    reference, _ = assemble_roster(sampled, [pubs], tmp_path / "ref.toml", run_id="r")
    roster, _ = assemble_roster(bare, [pubs], tmp_path / "roster.toml", run_id="r", columns=["age", "bmi", "hue"])
    assert (roster.n_features, roster.columns) == (reference.n_features, reference.columns) == (3, ("age", "bmi", "hue"))
    assert (tmp_path / "roster.toml").read_text() == (tmp_path / "ref.toml").read_text()  # the same roster, byte for byte
    unnamed, _ = assemble_roster(bare, [pubs], tmp_path / "unnamed.toml", run_id="r", n_features=5)
    assert (unnamed.n_features, unnamed.columns) == (5, None)

    def refused(scenario: Path, *options: str) -> str:
        code = main(["keys", "roster", str(scenario), "--public", str(pubs), "--out", str(tmp_path / "x.toml"), *options])
        err = capsys.readouterr().err.strip()
        assert code == 2 and "\n" not in err and not (tmp_path / "x.toml").exists()
        return err

    assert "bare.toml: no [data] table: give the public schema of the nodes' data files with --columns" in refused(bare)
    assert "has a [data] table, which gives the nodes' public schema" in refused(sampled, "--columns", "age,bmi,hue")
    assert "--n-features 2 disagrees with the 3 names of --columns" in refused(bare, "--columns", "a,b,c", "--n-features", "2")
    assert "--columns must name distinct" in refused(bare, "--columns", "a,a")
