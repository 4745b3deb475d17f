"""Tests of p2pem.scenario: TOML scenario files, random streams and per-node data."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from p2pem.errors import ConfigError, DataError, GraphError
from p2pem.builders import load_data
from p2pem.scenario import (
    STREAMS,
    Scenario,
    load_scenario,
    seed_streams,
)

ROOT = Path(__file__).resolve().parent.parent
PARKINSONS_TOML = ROOT / "scenarios" / "parkinsons.toml"

# A small valid scenario; tests edit one line at a time with ``edit``.
BASE = """\
seed = 7

[data]
source = "synthetic"
n_samples = 60
n_features = 2
n_components = 3
separation = 3.0
split = "even"

[graph]
kind = "geometric"
n_nodes = 10

[em]
n_components = 3
max_iter = 20
tol = 0.0

[[protocols]]
name = "centralized"

[[protocols]]
name = "federated"
"""

CSV_BASE = """\
seed = 1

[data]
source = "csv"
path = "../d.csv"
drop_columns = ["label"]
standardize = true

[graph]
kind = "geometric"
n_nodes = 4

[em]
n_components = 2

[[protocols]]
name = "centralized"
"""


def edit(text: str, old: str, new: str) -> str:
    assert old in text, f"test bug: {old!r} not in scenario"
    return text.replace(old, new, 1)


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def config_error(path: Path) -> str:
    """Load ``path`` expecting a ConfigError; return its one-line message."""
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message[len(f"{path}: ") :]


# ----------------------------------------------------------------- the real scenario


def test_parkinsons_scenario() -> None:
    scenario = load_scenario(PARKINSONS_TOML)
    assert isinstance(scenario, Scenario)
    assert scenario.name == "parkinsons" and scenario.seed == 1
    assert scenario.data.source == "csv"
    assert scenario.data.path == (ROOT / "data" / "parkinsons.data").resolve()
    assert scenario.data.drop_columns == ("name", "status")
    assert scenario.data.standardize and scenario.data.pca == 2 and scenario.data.split == "even"
    assert scenario.graph.kind == "geometric" and scenario.graph.n_nodes == 80
    assert scenario.graph.radius == pytest.approx(np.sqrt(2 * np.log(80) / 80))
    assert (scenario.em.n_components, scenario.em.max_iter, scenario.em.tol) == (3, 100, 0.0)
    assert [p.name for p in scenario.protocols] == ["pdmm-sp", "secure-sum", "federated", "centralized"]
    assert dict(scenario.protocols[0].params) == {"mode": "sync"}
    assert all(not p.params for p in scenario.protocols[1:])
    assert dict(scenario.leakage) == {} and dict(scenario.deploy) == {}


def test_parkinsons_data_over_80_nodes() -> None:
    scenario = load_scenario(PARKINSONS_TOML)
    parts = load_data(scenario)
    assert len(parts) == 80
    assert Counter(len(p) for p in parts) == {3: 35, 2: 45}
    X = np.vstack(parts)
    assert X.shape == (195, 2)
    np.testing.assert_allclose(X.mean(axis=0), 0, atol=1e-12)
    assert X[:, 0].var() > X[:, 1].var()
    again = load_data(load_scenario(PARKINSONS_TOML))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_scenario_is_frozen() -> None:
    scenario = load_scenario(PARKINSONS_TOML)
    with pytest.raises(AttributeError):
        scenario.seed = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        scenario.protocols[0].params["mode"] = "async"  # type: ignore[index]


# ----------------------------------------------------------------------- valid forms


def test_base_scenario_defaults_and_synthetic_data(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, BASE))
    assert scenario.name == "s"  # the file stem
    assert scenario.data.split == "even" and scenario.data.standardize is False and scenario.data.pca is None
    assert scenario.data.path is None and scenario.data.n_samples == 60
    assert scenario.em.reg_covar == 1e-6 and scenario.em.init is None
    parts = load_data(scenario)
    assert [len(p) for p in parts] == [6] * 10
    assert all(p.shape[1] == 2 for p in parts)


def test_relative_data_path_is_resolved_against_the_scenario_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "d.csv").write_text("label,x,y\r\na,1,2\r\nb,2,1\r\nc,3,5\r\nd,4,4\r\ne,5,0\r\n")
    path = write(tmp_path, CSV_BASE, "scenarios/s.toml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    scenario = load_scenario(path)
    assert scenario.data.path == (tmp_path / "d.csv").resolve()
    parts = load_data(scenario)
    assert sorted(len(p) for p in parts) == [1, 1, 1, 2]
    np.testing.assert_allclose(np.vstack(parts).std(axis=0), 1.0)

    absolute = write(tmp_path, edit(CSV_BASE, '"../d.csv"', f'"{tmp_path / "d.csv"}"'), "abs.toml")
    assert load_scenario(absolute).data.path == (tmp_path / "d.csv").resolve()


def test_missing_data_file_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, edit(CSV_BASE, '"../d.csv"', '"../missing.csv"'), "sub/s.toml")
    message = config_error(path)
    assert message.startswith("'data.path' = '../missing.csv' does not exist")
    assert str((tmp_path / "missing.csv").resolve()) in message


def test_edges_graph(tmp_path: Path) -> None:
    text = edit(BASE, 'kind = "geometric"\nn_nodes = 10', 'kind = "edges"\nedges = [[0, 1], [1, 2], [2, 0], [2, 3]]')
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.graph.n_nodes == 4 and scenario.graph.radius is None
    assert scenario.graph.edges == ((0, 1), (1, 2), (2, 0), (2, 3))
    assert len(load_data(scenario)) == 4


def test_explicit_init(tmp_path: Path) -> None:
    init = """
[em.init]
weights = [0.3, 0.3, 0.4]
means = [[0.0, 0.0], [1.0, 1.0], [2, 0]]
covariances = [[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.5], [0.5, 1.0]], [[1, 0], [0, 1]]]
"""
    scenario = load_scenario(write(tmp_path, edit(BASE, "tol = 0.0\n", "tol = 0.0\n" + init)))
    params = scenario.em.init
    assert params is not None
    np.testing.assert_array_equal(params.weights, [0.3, 0.3, 0.4])
    assert params.means.shape == (3, 2) and params.covariances.shape == (3, 2, 2)
    assert params.means.dtype == np.float64
    assert not params.means.flags.writeable
    load_data(scenario)

    bad_pd = edit(init, "[[2.0, 0.5], [0.5, 1.0]]", "[[1.0, 2.0], [2.0, 1.0]]")
    message = config_error(write(tmp_path, edit(BASE, "tol = 0.0\n", "tol = 0.0\n" + bad_pd), "pd.toml"))
    assert message == "'em.init.covariances[1]' is not positive definite"

    bad_shape = edit(init, "[2, 0]]", "[2, 0], [3, 3]]")
    message = config_error(write(tmp_path, edit(BASE, "tol = 0.0\n", "tol = 0.0\n" + bad_shape), "shape.toml"))
    assert message.startswith("'em.init.means' must hold 3 means")

    wide = edit(BASE, "n_features = 2", "n_features = 3")
    message = config_error(write(tmp_path, edit(wide, "tol = 0.0\n", "tol = 0.0\n" + init), "wide.toml"))
    assert message == "'em.init.means' has 2 columns but the data will have 3 features"

    missing = config_error(write(tmp_path, edit(BASE, "tol = 0.0\n", "tol = 0.0\n[em.init]\nweights = [1.0]\n"), "m.toml"))
    assert missing == "missing required key 'em.init.means'"


def test_protocol_parameters_and_free_tables(tmp_path: Path) -> None:
    text = edit(BASE, 'name = "centralized"', 'name = "pdmm-sp"\nmode = "sync"\nc = 0.2\nmax_iter = 2000')
    text += '\n[leakage]\nestimator = "ksg"\nk = [3, 5]\n\n[deploy]\nbroker = "localhost:1883"\n'
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.protocols[0].name == "pdmm-sp"
    assert dict(scenario.protocols[0].params) == {"mode": "sync", "c": 0.2, "max_iter": 2000}
    assert scenario.leakage["estimator"] == "ksg" and scenario.leakage["k"] == [3, 5]
    assert dict(scenario.deploy) == {"broker": "localhost:1883"}


# ------------------------------------------------------------------------ bad files


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("max_iter = 20", "max_iters = 20", "unknown key 'em.max_iters' (known: n_components, max_iter, tol, reg_covar, family, init)"),
        ("seed = 7", "seed = 7\nsed = 1", "unknown key 'sed' (known: name, seed, data, graph, em, protocols, leakage, deploy, tradeoff, synth, bayesnet, marginals)"),
        ('split = "even"', 'split = "even"\nshuffle = true', "unknown key 'data.shuffle' (known: "),
        ("n_nodes = 10", 'n_nodes = "80"', "'graph.n_nodes' must be an integer, got '80' (a string)"),
        ("n_nodes = 10", "n_nodes = true", "'graph.n_nodes' must be an integer, got true (a boolean)"),
        ("n_nodes = 10", "n_nodes = 10.0", "'graph.n_nodes' must be an integer, got 10.0 (a float)"),
        ("seed = 7", "seed = false", "'seed' must be an integer, got false (a boolean)"),
        ("seed = 7", "seed = -1", "'seed' must be >= 0, got -1"),
        ("tol = 0.0", 'tol = "0"', "'em.tol' must be a finite number, got '0' (a string)"),
        ("tol = 0.0", "tol = nan", "'em.tol' must be a finite number, got nan (a float)"),
        ("tol = 0.0", "tol = true", "'em.tol' must be a finite number, got true (a boolean)"),
        ("tol = 0.0", "tol = -1e-3", "'em.tol' must be >= 0.0, got -0.001"),
        ('split = "even"', 'split = "evn"', "'data.split' must be one of 'even', 'contiguous', 'random', got 'evn'"),
        ('source = "synthetic"', 'source = "sql"', "'data.source' must be one of 'csv', 'synthetic', got 'sql'"),
        ('kind = "geometric"', 'kind = "ring"', "'graph.kind' must be one of 'geometric', 'edges', got 'ring'"),
        ('name = "federated"', 'name = "fedavg"', "'protocols[1].name' must be one of 'pdmm-sp', 'secure-sum', 'federated', 'centralized', 'dp-central', 'dp-distributed', 'dp-msnm', got 'fedavg'"),
        ('name = "federated"', "mode = 1", "missing required key 'protocols[1].name'"),
        ("seed = 7\n", "", "missing required key 'seed'"),
        ("n_nodes = 10\n", "", "missing required key 'graph.n_nodes'"),
        ("n_samples = 60\n", "", "missing required key 'data.n_samples'"),
        ("[em]\nn_components = 3\nmax_iter = 20\ntol = 0.0\n", "", "missing required table [em]"),
        ("n_samples = 60", 'n_samples = 60\npath = "x.csv"', "'data.path' is not used with source = 'synthetic'"),
        ("n_nodes = 10", "n_nodes = 10\nedges = [[0, 1]]", "'graph.edges' is not used with kind = 'geometric'"),
        ("n_nodes = 10", "n_nodes = 10\nradius = 0", "'graph.radius' must be > 0, got 0"),
        ("n_nodes = 10", "n_nodes = 1", "'graph.n_nodes' must be >= 2, got 1"),
        ('split = "even"', 'split = "even"\nstandardize = 1', "'data.standardize' must be true or false, got 1 (an integer)"),
        ("n_features = 2", "n_features = 2\npca = 3", "'data.pca' = 3 exceeds 'data.n_features' = 2"),
        ("[graph]", "[graf]", "unknown key 'graf' (known: "),
        ("seed = 7", "seed = 7\nleakage = 1", "'leakage' must be a table, got 1 (an integer)"),
    ],
)
def test_bad_scenario_names_file_and_key(tmp_path: Path, old: str, new: str, expected: str) -> None:
    message = config_error(write(tmp_path, edit(BASE, old, new)))
    assert message.startswith(expected), message


def test_protocols_must_be_an_array_of_tables(tmp_path: Path) -> None:
    without = BASE[: BASE.index("[[protocols]]")]
    message = config_error(write(tmp_path, "protocols = []\n" + without))
    assert message == "'protocols' must be one or more [[protocols]] tables, got an array"
    assert config_error(write(tmp_path, without, "none.toml")) == "missing required key 'protocols'"
    message = config_error(write(tmp_path, without + "[protocols]\nname = 'federated'\n", "one.toml"))
    assert message == "'protocols' must be one or more [[protocols]] tables, got a table"


def test_bad_edges(tmp_path: Path) -> None:
    def graph(edges: str, extra: str = "") -> str:
        return edit(BASE, 'kind = "geometric"\nn_nodes = 10', f'kind = "edges"\nedges = {edges}{extra}')

    cases = [
        ("[[0, 1], [1, 1]]", "", "'graph.edges[1]' is a self-loop [1, 1]"),
        ("[[0, 1], [1, 0]]", "", "'graph.edges[1]' repeats the edge [1, 0]"),
        ("[[0, 1], [1, 3]]", "", "node ids in 'graph.edges' must be 0..n-1 without gaps; missing [2]"),
        ("[[0, 1], [1, true]]", "", "'graph.edges[1]' must be a pair of node ids >= 0, got an array"),
        ("[[0, 1], [1, 2]]", "\nn_nodes = 4", "'graph.n_nodes' = 4 but 'graph.edges' connects 3 nodes"),
        ("[[0, 1], [1, 2]]", "\nradius = 0.5", "'graph.radius' is not used with kind = 'edges'"),
    ]
    for index, (edges, extra, expected) in enumerate(cases):
        message = config_error(write(tmp_path, graph(edges, extra), f"e{index}.toml"))
        assert message.startswith(expected), message

    path = write(tmp_path, graph("[[0, 1], [2, 3]]"), "disconnected.toml")
    with pytest.raises(GraphError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(f"{path}: 'graph.edges': ")


def test_invalid_toml_missing_file_and_directory(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "seed = 1\n[data\nsource = 'csv'\n"))
    assert message.startswith("invalid TOML: ") and "line 2" in message
    missing = tmp_path / "nope.toml"
    assert config_error(missing) == "no such scenario file"
    assert config_error(tmp_path).startswith("is a directory")


def test_csv_only_and_column_checks(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("label,x\na,1\n")
    text = edit(CSV_BASE, "standardize = true", "standardize = true\nn_samples = 5")
    assert config_error(write(tmp_path, text, "sub/a.toml")) == "'data.n_samples' is not used with source = 'csv'"
    text = edit(CSV_BASE, "standardize = true", 'columns = "x"')
    message = config_error(write(tmp_path, text, "sub/b.toml"))
    assert message == "'data.columns' must be an array of strings, got 'x' (a string)"
    text = edit(CSV_BASE, "standardize = true", 'columns = ["x"]\npca = 2')
    assert config_error(write(tmp_path, text, "sub/c.toml")) == "'data.pca' = 2 exceeds the 1 selected columns"


def test_data_errors_name_the_scenario_or_the_data_file(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("label,x,y\na,1,2\nb,2,?\n")
    with pytest.raises(DataError) as exc:
        load_data(load_scenario(write(tmp_path, CSV_BASE, "sub/s.toml")))
    assert str(exc.value) == f"{(tmp_path / 'd.csv').resolve()} line 3, column 'y': '?' is not a number"

    path = write(tmp_path, edit(BASE, "n_samples = 60", "n_samples = 6"))
    with pytest.raises(DataError) as exc:
        load_data(load_scenario(path))
    assert str(exc.value) == f"{path}: cannot split 6 rows over 10 nodes: some node would hold no rows"

    path = write(tmp_path, edit(edit(BASE, "n_samples = 60", "n_samples = 12"), 'split = "even"', 'split = "random"'), "r.toml")
    with pytest.raises(DataError, match=r"s?\.toml: node \d+ holds no rows"):
        load_data(load_scenario(path))


def test_unknown_protocol_parameter_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, edit(BASE, 'name = "centralized"', 'name = "pdmm-sp"\nmode = "sync"\nthetta = 1.0'))
    message = config_error(path)
    assert message.startswith("protocols[0]: unknown parameter 'thetta' for protocol pdmm-sp (known: ")
    path = write(tmp_path, edit(BASE, 'name = "federated"', 'name = "federated"\nsecure = 1'), "f.toml")
    assert config_error(path).startswith("protocols[1]: unknown parameter 'secure' for protocol federated")


# --------------------------------------------------------------------------- streams


def test_seed_streams_are_stable_and_independent() -> None:
    streams = seed_streams(1)
    assert tuple(streams) == STREAMS == ("data", "graph", "init", "protocol", "montecarlo", "synth", "bayesnet")
    draws = {name: np.random.default_rng(seq).random(4) for name, seq in streams.items()}
    # independent: distinct children of one SeedSequence, whose long draws are uncorrelated
    # (|r| within 4 standard errors of zero for 20 000 pairs: 4 / sqrt(20 000) = 0.028)
    assert len({seq.spawn_key for seq in streams.values()}) == len(STREAMS)
    long = [np.random.default_rng(seq).standard_normal(20_000) for seq in streams.values()]
    corr = np.corrcoef(np.vstack(long))
    assert np.max(np.abs(corr[np.triu_indices(len(STREAMS), 1)])) < 0.028
    # same seed, same draws; a different seed, different draws
    again = {name: np.random.default_rng(seq).random(4) for name, seq in seed_streams(1).items()}
    for name in STREAMS:
        np.testing.assert_array_equal(draws[name], again[name])
    other = np.random.default_rng(seed_streams(2)["data"]).random(4)
    assert not np.array_equal(other, draws["data"])
    # documented construction: the i-th child of SeedSequence(seed).spawn
    children = np.random.SeedSequence(1).spawn(len(STREAMS))
    for child, name in zip(children, STREAMS, strict=True):
        np.testing.assert_array_equal(child.generate_state(4), streams[name].generate_state(4))


def test_scenario_streams_and_bad_seeds(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, BASE))
    a = np.random.default_rng(scenario.streams()["protocol"]).random(3)
    b = np.random.default_rng(seed_streams(7)["protocol"]).random(3)
    np.testing.assert_array_equal(a, b)
    for seed in (-1, True, 1.5):
        with pytest.raises(ConfigError):
            seed_streams(seed)  # type: ignore[arg-type]
