"""Inputs that are read right or refused: CSV quirks, rows assigned to parties by a column,
graphs from files.  Each quirk is written the way the tool that produces it writes it
(numpy.savetxt, pandas' DataFrame.to_csv, networkx.write_graphml)."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from p2pem.builders import build_graph, em_settings, load_data
from p2pem.cli import main
from p2pem.data import load_table, read_text_column, relabel_ids
from p2pem.errors import ConfigError, DataError, GraphError
from p2pem.registry import make_protocol
from p2pem.runner import run_scenario
from p2pem.scenario import load_scenario
from p2pem.simulate import run_protocol


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def _rows(n: int = 60, d: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.vstack([rng.normal(size=(n // 2, d)), rng.normal(size=(n - n // 2, d)) + 4])


SCENARIO = """
seed = 5
[data]
source = "csv"
path = "{path}"
{data}
[graph]
{graph}
[em]
n_components = 2
max_iter = 4
[[protocols]]
name = "pdmm-sp"
[[protocols]]
name = "centralized"
"""


def _scenario(tmp_path: Path, name: str, path: str, *, data: str = "", graph: str = 'kind = "geometric"\nn_nodes = 6') -> Path:
    file = tmp_path / f"{name}.toml"
    file.write_text(SCENARIO.format(path=path, data=data, graph=graph))
    return file


def _same_runs(a, b) -> None:
    """Two scenario runs equal to the last bit (parameters, log-likelihoods, traffic)."""
    for ra, rb in zip(a.runs, b.runs, strict=True):
        assert ra.protocol == rb.protocol
        np.testing.assert_array_equal(ra.weights, rb.weights)
        np.testing.assert_array_equal(ra.means, rb.means)
        np.testing.assert_array_equal(ra.covariances, rb.covariances)
        assert ra.loglik == rb.loglik and ra.messages == rb.messages


# ------------------------------------------------------------------------ CSV quirks


def test_a_numpy_savetxt_file_is_refused_unless_header_false(tmp_path: Path) -> None:
    X = _rows()
    path = tmp_path / "plain.csv"
    np.savetxt(path, X, delimiter=",")  # no header row: the first row is data
    with pytest.raises(DataError) as exc:
        load_table(path)
    message = one_line(exc)
    assert "line 1" in message and "no header row" in message and "header = false" in message
    read, names = load_table(path, header=False)
    np.testing.assert_array_equal(read, np.loadtxt(path, delimiter=","))  # every row, the first one too
    assert names == ("0", "1", "2")
    sub, names = load_table(path, header=False, columns=["2", "0"])
    np.testing.assert_array_equal(sub, read[:, [2, 0]])
    # the scenario key: all 60 rows reach the nodes
    scenario = load_scenario(_scenario(tmp_path, "plain", "plain.csv", data="header = false"))
    assert sum(len(p) for p in load_data(scenario)) == len(X)
    with pytest.raises(DataError, match="no header row"):
        load_data(load_scenario(_scenario(tmp_path, "plain_hdr", "plain.csv")))


def test_header_false_on_a_file_with_a_header_says_so(tmp_path: Path) -> None:
    path = tmp_path / "named.csv"
    pd.DataFrame(_rows(), columns=["a", "b", "c"]).to_csv(path, index=False)
    with pytest.raises(DataError) as exc:
        load_table(path, header=False)
    assert "line 1" in one_line(exc) and "is it a header row?" in one_line(exc)


def test_a_pandas_index_column_is_refused_with_a_hint(tmp_path: Path) -> None:
    X = _rows()
    path = tmp_path / "indexed.csv"
    pd.DataFrame(X, columns=["a", "b", "c"]).to_csv(path)  # pandas' default: the index as an unnamed first column
    with pytest.raises(DataError) as exc:
        load_table(path)
    message = one_line(exc)
    assert "column 1 has no name" in message and "index=False" in message and 'drop_columns = [""]' in message
    read, names = load_table(path, drop_columns=[""])
    assert names == ("a", "b", "c")
    np.testing.assert_array_equal(read, pd.read_csv(path, index_col=0).to_numpy())
    read, _ = load_table(path, columns=["a", "b", "c"])
    np.testing.assert_array_equal(read, pd.read_csv(path, index_col=0).to_numpy())
    # written again after reading it back without index_col: pandas names the column "Unnamed: 0"
    again = tmp_path / "again.csv"
    pd.read_csv(path).to_csv(again, index=False)
    with pytest.raises(DataError, match="'Unnamed: 0' .pandas' name for a column without one"):
        load_table(again)


def test_pandas_default_column_names_are_names(tmp_path: Path) -> None:
    X = _rows()
    path = tmp_path / "numbered.csv"
    pd.DataFrame(X).to_csv(path, index=False)  # header "0,1,2"
    read, names = load_table(path)
    assert names == ("0", "1", "2")
    np.testing.assert_array_equal(read, pd.read_csv(path).to_numpy())


def test_a_nameless_column_that_is_not_first(tmp_path: Path) -> None:
    path = tmp_path / "gap.csv"
    path.write_text("a,,c\n1,2,3\n4,5,6\n")
    with pytest.raises(DataError, match="column 2 has no name .* name it in the header"):
        load_table(path)


# ----------------------------------------------------------------- node_column


def _sites_csv(tmp_path: Path, sites: list, *, name: str = "sites.csv", seed: int = 0) -> tuple[Path, np.ndarray]:
    X = _rows(len(sites), seed=seed)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    frame.insert(1, "site", sites)
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path, X


def test_relabel_ids_orders_sorted_or_by_first_appearance() -> None:
    codes, labels = relabel_ids(["oslo", "bergen", "oslo", "aarhus"])
    assert labels == ("aarhus", "bergen", "oslo") and codes.tolist() == [2, 1, 2, 0]
    codes, labels = relabel_ids([10, 9, 100, 9])
    assert labels == (9, 10, 100) and codes.tolist() == [1, 0, 2, 0]
    codes, labels = relabel_ids(["b", 3, "b", (1, 2)])  # not comparable: first appearance
    assert labels == ("b", 3, (1, 2)) and codes.tolist() == [0, 1, 0, 2]
    with pytest.raises(ConfigError, match="hashable"):
        relabel_ids([[1], [2]])


def test_node_column_equals_the_same_run_with_explicit_parts(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    names = ["trondheim", "bergen", "oslo", "aarhus", "malmo", "turku"]
    sites = [names[i] for i in rng.integers(len(names), size=60)]
    path, X = _sites_csv(tmp_path, sites)
    scenario = load_scenario(_scenario(tmp_path, "by_site", path.name, data='node_column = "site"', graph='kind = "geometric"'))
    assert scenario.data.node_ids == tuple(sorted(names)) and scenario.graph.n_nodes == 6
    parts = load_data(scenario)
    for i, site in enumerate(sorted(names)):  # node i: the rows of the i-th site in sorted order, in file order
        np.testing.assert_array_equal(parts[i], X[np.array(sites) == site])
    run = run_scenario(scenario)
    graph, settings = build_graph(scenario), em_settings(scenario)
    for got in run.runs:
        ref = run_protocol(parts, graph, make_protocol(got.protocol), settings, seed=scenario.streams()["protocol"])
        np.testing.assert_array_equal(got.means, ref.means)
        np.testing.assert_array_equal(got.covariances, ref.covariances)
        assert got.loglik == ref.loglik


def test_node_column_equals_a_contiguous_split_of_the_same_rows(tmp_path: Path) -> None:
    # 62 rows over 6 nodes: np.array_split gives 11, 11, 10, 10, 10, 10 rows in file order
    sizes = [len(b) for b in np.array_split(np.arange(62), 6)]
    sites = [site for site, size in zip([7, 8, 9, 10, 11, 12], sizes, strict=True) for _ in range(size)]
    path, _ = _sites_csv(tmp_path, sites)
    by_column = run_scenario(load_scenario(_scenario(tmp_path, "col", path.name, data='node_column = "site"')))
    contiguous = run_scenario(load_scenario(_scenario(tmp_path, "cont", path.name, data='drop_columns = ["site"]\nsplit = "contiguous"')))
    _same_runs(by_column, contiguous)


def test_numeric_party_ids_sort_as_numbers(tmp_path: Path) -> None:
    path, X = _sites_csv(tmp_path, [10, 9, 100, 2] * 15)
    scenario = load_scenario(_scenario(tmp_path, "num", path.name, data='node_column = "site"', graph='kind = "geometric"'))
    assert scenario.data.node_ids == (2, 9, 10, 100)
    parts = load_data(scenario)
    np.testing.assert_array_equal(parts[1], X[3::4] * 0 + X[1::4])  # node 1 is party 9: every 4th row from row 1


@pytest.mark.parametrize(
    "data,graph,message",
    [
        ('node_column = "site"\nsplit = "even"', 'kind = "geometric"', "'data.split' is not used with 'data.node_column'"),
        ('node_column = "site"\ncolumns = ["a", "site"]', 'kind = "geometric"', "lists the node column 'site'"),
        ('node_column = "site"', 'kind = "geometric"\nn_nodes = 5', "'graph.n_nodes' = 5 but the data's node column names 3 parties"),
        ('node_column = "place"', 'kind = "geometric"', "unknown column(s) 'place' in node_column"),
        ('node_column = "site"', "edges = [[0, 1], [1, 2], [2, 3], [3, 0]]", "connects 4 nodes but the data's node column names 3"),
    ],
)
def test_node_column_errors(tmp_path: Path, data: str, graph: str, message: str) -> None:
    path, _ = _sites_csv(tmp_path, ["x", "y", "z"] * 10)
    with pytest.raises((ConfigError, DataError)) as exc:
        load_scenario(_scenario(tmp_path, "bad", path.name, data=data, graph=graph))
    assert message in one_line(exc)


def test_read_text_column_names_an_empty_cell(tmp_path: Path) -> None:
    path = tmp_path / "holes.csv"
    path.write_text("a,site\n1,x\n2,\n")
    with pytest.raises(DataError, match="line 3, column 'site': empty cell"):
        read_text_column(path, "site")


# ---------------------------------------------------------------- [graph] path

EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3), (1, 4)]


def _inline(edges) -> str:
    return "edges = [" + ", ".join(f"[{i}, {j}]" for i, j in edges) + "]"


def test_graph_files_equal_the_same_inline_edges(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    pd.DataFrame(_rows(), columns=["a", "b", "c"]).to_csv(path, index=False)
    pd.DataFrame(EDGES, columns=["source", "target"]).to_csv(tmp_path / "graph.csv", index=False)
    nx.write_graphml(nx.Graph(EDGES), tmp_path / "graph.graphml")
    inline = run_scenario(load_scenario(_scenario(tmp_path, "inline", path.name, graph=f'kind = "edges"\n{_inline(EDGES)}')))
    for name in ("graph.csv", "graph.graphml"):
        scenario = load_scenario(_scenario(tmp_path, name.replace(".", "_"), path.name, graph=f'path = "{name}"'))
        assert scenario.graph.kind == "edges" and scenario.graph.n_nodes == 6
        _same_runs(run_scenario(scenario), inline)


def test_a_graph_file_of_party_ids_matches_the_node_column(tmp_path: Path) -> None:
    names = ["aarhus", "bergen", "malmo", "oslo", "trondheim", "turku"]  # sorted: node i is names[i]
    rng = np.random.default_rng(2)
    path, _ = _sites_csv(tmp_path, [names[i] for i in rng.integers(6, size=60)])
    pd.DataFrame([(names[i], names[j]) for i, j in EDGES], columns=["from", "to"]).to_csv(tmp_path / "links.csv", index=False)
    by_name = load_scenario(_scenario(tmp_path, "names", path.name, data='node_column = "site"', graph='path = "links.csv"'))
    by_index = load_scenario(_scenario(tmp_path, "index", path.name, data='node_column = "site"', graph=_inline(EDGES)))
    assert by_name.graph.edges == by_index.graph.edges and by_name.graph.node_ids == tuple(names)
    _same_runs(run_scenario(by_name), run_scenario(by_index))


@pytest.mark.parametrize(
    "text,message",
    [
        ("0,1\n1,2\n2,0\n", "the first row holds node ids, not column names"),
        ("u,v\n0,1\n1,1\n", "line 3: self-loop on node '1'"),
        ("u,v\n0,1\n1,2\n2,0\n1,0\n", "line 5: repeats the edge of line 2"),
        ("u,v\n0,1\n1\n", "line 3: expected two node ids"),
        ("u,v,w\n0,1,2\n", "the header has 3"),
        ("u,v\n0,1\n2,3\n", "disconnected"),
    ],
)
def test_bad_graph_files_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    pd.DataFrame(_rows(), columns=["a", "b", "c"]).to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "g.csv").write_text(text)
    with pytest.raises(GraphError) as exc:
        load_scenario(_scenario(tmp_path, "bad", "rows.csv", graph='path = "g.csv"'))
    assert message in one_line(exc) and "'graph.path'" in one_line(exc)


def test_graph_file_ids_must_be_the_parties(tmp_path: Path) -> None:
    path, _ = _sites_csv(tmp_path, ["x", "y", "z"] * 10)
    (tmp_path / "g.csv").write_text("u,v\nx,y\ny,w\nw,x\n")
    with pytest.raises(ConfigError, match="has node 'w', which no row of the data's node column belongs to"):
        load_scenario(_scenario(tmp_path, "bad", path.name, data='node_column = "site"', graph='path = "g.csv"'))
    (tmp_path / "g.csv").write_text("u,v\nx,y\n")
    with pytest.raises(ConfigError, match=r"lacks the parties \['z'\]"):
        load_scenario(_scenario(tmp_path, "bad", path.name, data='node_column = "site"', graph='path = "g.csv"'))


def test_simulate_records_nothing_new_in_result_json_for_files(tmp_path: Path, capsys) -> None:
    """The CLI end to end: a scenario with a node column and a graph file runs like any other."""
    names = ["a", "b", "c", "d", "e", "f"]
    path, _ = _sites_csv(tmp_path, names * 10)
    pd.DataFrame([(names[i], names[j]) for i, j in EDGES], columns=["from", "to"]).to_csv(tmp_path / "links.csv", index=False)
    scenario = _scenario(tmp_path, "cli", path.name, data='node_column = "site"', graph='path = "links.csv"')
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "out"), "-q"]) == 0
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    assert doc["graph"]["n_nodes"] == 6 and doc["n_rows"] == 60
