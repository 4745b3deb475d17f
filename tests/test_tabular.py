"""Mixed-type tables under a public schema: schema files, the reader, the encodings, the writer."""

from __future__ import annotations

import csv
import tomllib
from pathlib import Path

import numpy as np
import pytest
import sklearn.preprocessing as sklearn_preprocessing

from p2pem.errors import ConfigError, DataError
from p2pem.tabular import (
    Categorical,
    Continuous,
    CsvLayout,
    Schema,
    Table,
    bin_edges,
    concat_tables,
    design_matrix,
    discretize,
    domain_sizes,
    load_schema,
    one_hot,
    read_table,
    schema_from_data_NOT_PRIVATE,
    schema_from_dict,
    schema_to_toml,
    undiscretize,
    write_csv,
)

DATA = Path(__file__).resolve().parent.parent / "data"

SMALL = """
[csv]
header = true
missing = ["?"]

[[columns]]
name = "age"
type = "continuous"
low = 0
high = 100
integer = true

[[columns]]
name = "colour"
type = "categorical"
categories = ["red", "green", "blue"]
aliases = { "RED" = "red" }

[[columns]]
name = "weight"
type = "continuous"
low = 0.0
high = 10.0

[[columns]]
name = "flag"
type = "categorical"
categories = [0, 1]
"""


@pytest.fixture
def small_schema(tmp_path: Path) -> Schema:
    path = tmp_path / "small.schema.toml"
    path.write_text(SMALL)
    return load_schema(path)


def write(tmp_path: Path, text: str, name: str = "rows.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return path


def one_line_error(kind: type[Exception], call, *fragments: str) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


# ------------------------------------------------------------------------- data files


def test_adult_rows_without_missing_values_are_the_papers_30162_and_15060() -> None:
    schema = load_schema(DATA / "adult.schema.toml")
    train = read_table(DATA / "adult.data", schema)
    test = read_table(DATA / "adult.test", schema)
    assert (train.n_rows, train.n_dropped) == (30162, 32561 - 30162)
    assert (test.n_rows, test.n_dropped) == (15060, 16281 - 15060)
    # the first row of adult.data, column by column
    assert train.continuous[0].tolist() == [39, 77516, 13, 2174, 0, 40]
    assert [train.labels(n)[0] for n in ("workclass", "education", "sex", "native-country", "income")] == [
        "State-gov",
        "Bachelors",
        "Male",
        "United-States",
        "<=50K",
    ]
    # the test split's "<=50K." / ">50K." are the same two classes (its first row is "<=50K.")
    assert test.labels("income")[0] == "<=50K"
    assert set(np.unique(test.column("income")).tolist()) == {0, 1}
    with open(DATA / "adult.test", encoding="utf-8") as handle:
        raw = [r[-1].strip() for r in csv.reader(handle) if r and "?" not in [c.strip() for c in r]]
    assert np.array_equal(test.labels("income"), np.array([label.rstrip(".") for label in raw]))


def test_ais_and_parkinsons_schema_files_read_their_data() -> None:
    ais = read_table(DATA / "ais.csv", load_schema(DATA / "ais.schema.toml"))
    assert ais.n_rows == 202 and ais.schema.names[:2] == ("sex", "sport")
    assert ais.codes.shape == (202, 2) and ais.continuous.shape == (202, 11)
    parkinsons = read_table(DATA / "parkinsons.data", load_schema(DATA / "parkinsons.schema.toml"))
    assert parkinsons.n_rows == 195 and "name" not in parkinsons.schema.names
    status = parkinsons.schema.column("status")
    assert isinstance(status, Categorical) and status.numeric and status.categories == ("0", "1")
    assert np.bincount(parkinsons.column("status")).tolist() == [48, 147]


@pytest.mark.parametrize("name", ["adult", "ais", "parkinsons"])
def test_schema_files_survive_a_round_trip_through_schema_to_toml(name: str, tmp_path: Path) -> None:
    schema = load_schema(DATA / f"{name}.schema.toml")
    path = tmp_path / "again.toml"
    path.write_text(schema_to_toml(schema))
    assert load_schema(path) == schema


# ----------------------------------------------------------------------------- reader


def test_header_in_any_order_and_no_header_read_the_same_rows(small_schema: Schema, tmp_path: Path) -> None:
    a = read_table(write(tmp_path, "age,colour,weight,flag\n30,red,1.5,1\n41,blue,2.25,0\n"), small_schema)
    b = read_table(write(tmp_path, "flag,weight,colour,age\n1,1.5,red,30\n0,2.25,blue,41\n", "b.csv"), small_schema)
    c = read_table(write(tmp_path, "30, red, 1.5, 1\n\n41, blue, 2.25, 0\n", "c.csv"), small_schema, header=False)
    for table in (b, c):
        assert np.array_equal(table.continuous, a.continuous) and np.array_equal(table.codes, a.codes)
    assert a.continuous.tolist() == [[30, 1.5], [41, 2.25]] and a.codes.tolist() == [[0, 1], [2, 0]]


def test_missing_values_drop_rows_and_are_counted(small_schema: Schema, tmp_path: Path) -> None:
    table = read_table(write(tmp_path, "age,colour,weight,flag\n30,red,1.5,1\n?,red,1,1\n41,?,2,0\n42,green,3,0\n"), small_schema)
    assert table.n_rows == 2 and table.n_dropped == 2
    assert table.column("age").tolist() == [30, 42]


def test_an_empty_cell_is_an_error_unless_declared_missing(small_schema: Schema, tmp_path: Path) -> None:
    path = write(tmp_path, "age,colour,weight,flag\n30,,1.5,1\n31,red,1,1\n")
    one_line_error(DataError, lambda: read_table(path, small_schema), "rows.csv line 2", "'colour'", "is empty")
    lenient = Schema(small_schema.columns, CsvLayout(missing=("?", "")))
    assert read_table(path, lenient).n_dropped == 1


def test_aliases_quotes_crlf_bom_and_other_separators(small_schema: Schema, tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_bytes('\ufeffage;colour;weight;flag\r\n"30";RED;1.5;1.0\r\n'.encode())
    table = read_table(path, small_schema, separator=";")
    assert table.labels("colour").tolist() == ["red"] and table.labels("flag").tolist() == ["1"]
    quoted = Schema((Categorical("city", ("Paris, TX", "Rome")),))
    assert read_table(write(tmp_path, 'city\n"Paris, TX"\nRome\n', "q.csv"), quoted).codes.ravel().tolist() == [0, 1]


@pytest.mark.parametrize(
    "row, fragments",
    [
        ("30,purple,1.5,1", ["line 3", "column 'colour'", "'purple' is not a public category", "'red', 'green', 'blue'"]),
        ("30,red,11,1", ["line 3", "column 'weight'", "'11' is outside the public range [0, 10]"]),
        ("30,red,heavy,1", ["line 3", "column 'weight'", "'heavy' is not a number"]),
        ("30.5,red,1,1", ["line 3", "column 'age'", "'30.5' is not a whole number"]),
        ("30,red,nan,1", ["line 3", "column 'weight'", "is not a finite number"]),
        ("30,red,1,2", ["line 3", "column 'flag'", "'2' is not a public category"]),
        ("30,red,1,yes", ["line 3", "column 'flag'", "'yes' is not a number (the categories are numbers)"]),
        ("30,red,1", ["line 3", "expected 4 fields as in the header, got 3"]),
    ],
)
def test_bad_cells_are_one_line_errors_naming_file_line_column_and_value(
    small_schema: Schema, tmp_path: Path, row: str, fragments: list[str]
) -> None:
    path = write(tmp_path, f"age,colour,weight,flag\n20,red,1,0\n{row}\n")
    one_line_error(DataError, lambda: read_table(path, small_schema), "rows.csv", *fragments)


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("", ["file is empty"]),
        ("age,colour,weight,flag\n", ["no data rows"]),
        ("age,colour,weight,flag\n?,red,1,1\n", ["no data rows (1 dropped for a missing value)"]),
        ("age,colour,weight\n1,red,1\n", ["header lacks the schema's column(s) 'flag'"]),
        ("age,colour,weight,flag,name\n1,red,1,1,x\n", ["column 'name' is not in the schema", "csv.ignore"]),
        ("age,colour,weight,flag,age\n", ["column 'age' appears twice"]),
    ],
)
def test_bad_files_are_one_line_errors(small_schema: Schema, tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = write(tmp_path, text)
    one_line_error(DataError, lambda: read_table(path, small_schema), "rows.csv", *fragments)


def test_line_numbers_count_blank_lines_and_quoted_line_breaks(tmp_path: Path) -> None:
    schema = Schema((Categorical("note", ("a\nb", "c")),))
    path = write(tmp_path, 'note\n\n"a\nb"\n   \nc\nd\n')
    one_line_error(DataError, lambda: read_table(path, schema), "rows.csv line 7, column 'note': 'd'")
    assert read_table(write(tmp_path, 'note\n"a\nb"\nc\n', "ok.csv"), schema).codes.ravel().tolist() == [0, 1]


def test_a_missing_file_is_a_data_error(small_schema: Schema, tmp_path: Path) -> None:
    one_line_error(DataError, lambda: read_table(tmp_path / "nope.csv", small_schema), "nope.csv: no such file")


# ------------------------------------------------------------------------ schema files


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("[[columns]]\nname = 'a'\ntype = 'continuous'\nlow = 0\nhigh = 1\nlo = 3\n", ["unknown key 'columns[0].lo'"]),
        ("[[columns]]\nname = 'a'\ntype = 'continuous'\nlow = 5\nhigh = 1\n", ["'columns[0].high' must be greater than 'low'"]),
        ("[[columns]]\nname = 'a'\ntype = 'continuous'\nlow = 'x'\nhigh = 1\n", ["'columns[0].low' must be a finite number"]),
        ("[[columns]]\nname = 'a'\ntype = 'continuous'\nlow = 0.5\nhigh = 3\ninteger = true\n", ["'columns[0].low'", "whole numbers"]),
        ("[[columns]]\nname = 'a'\ntype = 'ordinal'\n", ["'columns[0].type' must be one of 'continuous', 'categorical'"]),
        ("[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['x', 'x']\n", ["'columns[0].categories' lists 'x' twice"]),
        ("[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['x', 1]\n", ["'columns[0].categories' mixes strings and numbers"]),
        ("[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = []\n", ["'columns[0].categories' must be a non-empty array"]),
        (
            "[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['x']\naliases = { 'y' = 'z' }\n",
            ["'columns[0].aliases' map 'y' to 'z', which is not one of the categories"],
        ),
        ("[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['?']\n", ["'csv.missing' holds '?', a category of column 'a'"]),
        (
            "[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['x']\n[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['y']\n",
            ["'columns' name 'a' twice"],
        ),
        ("[csv]\nseparator = '::'\n[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['x']\n", ["'csv.separator' must be one character"]),
        ("[csv]\nheader = false\nignore = ['id']\n[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['x']\n", ["'csv.ignore' needs"]),
        ("format = 'csv'\n[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['x']\n", ["'format' must be 'p2pem-schema'"]),
        ("version = 2\n[[columns]]\nname = 'a'\ntype = 'categorical'\ncategories = ['x']\n", ["'version' must be 1"]),
        ("columns = []\n", ["'columns' must be a non-empty array of tables"]),
        ("description = 'no columns'\n", ["missing required key 'columns'"]),
        ("[[columns]\n", ["invalid TOML"]),
        ("[[columns]]\nname = 'gain'\ntype = 'continuous'\nlow = 0\nhigh = 100\ninteger = true\nedges = [0, 50, 40, 100]\n", ["'columns[0].edges' of column 'gain' must be strictly increasing, got 50 then 40"]),
        ("[[columns]]\nname = 'gain'\ntype = 'continuous'\nlow = 0\nhigh = 100\ninteger = true\nedges = [1, 50, 100]\n", ["'columns[0].edges' of column 'gain' must run from 'low' (0) to 'high' (100)"]),
        ("[[columns]]\nname = 'gain'\ntype = 'continuous'\nlow = 0\nhigh = 100\ninteger = true\nedges = [0, 50, 102]\n", ["'columns[0].edges' of column 'gain'", "or 'high' + 1, got 0 .. 102"]),
        ("[[columns]]\nname = 'gain'\ntype = 'continuous'\nlow = 0\nhigh = 100\ninteger = true\nedges = [0, 0.5, 100]\n", ["'columns[0].edges' of column 'gain' must be whole numbers", "0.5"]),
        ("[[columns]]\nname = 'gain'\ntype = 'continuous'\nlow = 0\nhigh = 100\ninteger = true\nedges = [0]\n", ["'columns[0].edges' of column 'gain' must list at least two numbers"]),
        ("[[columns]]\nname = 'gain'\ntype = 'continuous'\nlow = 0\nhigh = 100\ninteger = true\nedges = ['a', 100]\n", ["'columns[0].edges' must be an array of numbers"]),
        ("[[columns]]\nname = 'w'\ntype = 'continuous'\nlow = 0\nhigh = 1\nedges = [0, 0.5, 2]\n", ["'columns[0].edges' of column 'w' must run from", "0 .. 2"]),
    ],
)
def test_schema_mistakes_are_one_line_errors_naming_file_and_key(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = tmp_path / "bad.schema.toml"
    path.write_text(text)
    message = one_line_error(ConfigError, lambda: load_schema(path), *fragments)
    assert message.startswith(str(path))


def test_an_inline_schema_names_its_dotted_key_in_the_scenario(tmp_path: Path) -> None:
    table = tomllib.loads("[data.schema]\n[[data.schema.columns]]\nname = 'a'\ntype = 'continuous'\nlow = 3\nhigh = 3\n")
    one_line_error(
        ConfigError,
        lambda: schema_from_dict(table["data"]["schema"], where="scenarios/x.toml", prefix="data.schema"),
        "scenarios/x.toml: 'data.schema.columns[0].high' must be greater",
    )
    good = tomllib.loads(SMALL)
    assert schema_from_dict(good, where="inline").names == ("age", "colour", "weight", "flag")


def test_schema_from_data_is_marked_not_public(tmp_path: Path) -> None:
    path = write(tmp_path, "x,y,k\n1,2.5,a\n3,?,b\n2,0.5,a\n")
    schema = schema_from_data_NOT_PRIVATE(path)
    assert not schema.public
    x, y, k = schema.columns
    assert isinstance(x, Continuous) and (x.low, x.high, x.integer) == (1, 3, True)
    assert isinstance(y, Continuous) and (y.low, y.high, y.integer) == (0.5, 2.5, False)
    assert isinstance(k, Categorical) and k.categories == ("a", "b")
    assert all("NOT public" in c.source for c in schema.columns)
    text = schema_to_toml(schema)
    assert text.startswith("# NOT PUBLIC")
    again = tmp_path / "suggested.toml"
    again.write_text(text)
    assert load_schema(again).public is False


# ---------------------------------------------------------------------------- writer


def test_write_csv_reads_back_bit_for_bit_with_original_names_and_types(small_schema: Schema, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    table = Table.from_blocks(
        small_schema,
        np.column_stack([rng.integers(0, 101, 50), rng.uniform(0, 10, 50)]),
        np.column_stack([rng.integers(0, 3, 50), rng.integers(0, 2, 50)]),
    )
    path = tmp_path / "out.csv"
    write_csv(table, path)
    lines = path.read_text().splitlines()
    assert lines[0] == "age,colour,weight,flag"
    age, colour, weight, flag = lines[1].split(",")
    assert age == str(int(table.continuous[0, 0])) and colour in ("red", "green", "blue") and flag in ("0", "1")
    assert float(weight) == table.continuous[0, 1]
    back = read_table(path, small_schema)
    assert np.array_equal(back.continuous, table.continuous) and np.array_equal(back.codes, table.codes)


def test_adult_written_and_read_back_is_the_same_table(tmp_path: Path) -> None:
    schema = load_schema(DATA / "adult.schema.toml")
    train = read_table(DATA / "adult.data", schema).take(np.arange(500))
    write_csv(train, tmp_path / "adult.csv")
    assert (tmp_path / "adult.csv").read_text().splitlines()[1].startswith("39,State-gov,77516,Bachelors,13,")
    back = read_table(tmp_path / "adult.csv", schema, header=True, separator=",")
    assert np.array_equal(back.continuous, train.continuous) and np.array_equal(back.codes, train.codes)


def test_write_csv_into_a_missing_folder_fails_and_leaves_nothing(small_schema: Schema, tmp_path: Path) -> None:
    table = Table.from_blocks(small_schema, [[1, 1.0]], [[0, 0]])
    one_line_error(DataError, lambda: write_csv(table, tmp_path / "no" / "out.csv"), "cannot write")
    assert not (tmp_path / "no").exists()


# ------------------------------------------------------------------------- the table


def test_from_blocks_checks_domains_and_clips_on_request(small_schema: Schema) -> None:
    one_line_error(DataError, lambda: Table.from_blocks(small_schema, [[101, 1.0]], [[0, 0]]), "column 'age', row 0", "public range [0.0, 100.0]")
    one_line_error(DataError, lambda: Table.from_blocks(small_schema, [[1, 1.0]], [[3, 0]]), "column 'colour', row 0: code 3")
    one_line_error(DataError, lambda: Table.from_blocks(small_schema, [[1, 1.0, 2.0]], [[0, 0]]), "'continuous' must be float64 of shape (n_rows, 2)")
    one_line_error(DataError, lambda: Table.from_blocks(small_schema, [[1, 1.0]], [[0.5, 0]]), "codes must be whole numbers")
    clipped = Table.from_blocks(small_schema, [[-3.0, 12.0], [40.6, 5.5]], [[0, 0], [1, 1]], clip=True)
    assert clipped.continuous.tolist() == [[0.0, 10.0], [41.0, 5.5]]


def test_take_select_concat_and_labels(small_schema: Schema) -> None:
    table = Table.from_blocks(small_schema, [[1, 1.0], [2, 2.0], [3, 3.0]], [[0, 0], [1, 1], [2, 0]])
    assert table.take([2, 0]).column("age").tolist() == [3, 1]
    assert table.take(np.array([False, True, False])).labels("colour").tolist() == ["green"]
    sub = table.select(["flag", "age"])
    assert sub.schema.names == ("flag", "age") and sub.continuous.tolist() == [[1], [2], [3]] and sub.codes.ravel().tolist() == [0, 1, 0]
    both = concat_tables([table, table.take([0])])
    assert both.n_rows == 4 and both.column("weight").tolist() == [1.0, 2.0, 3.0, 1.0]
    one_line_error(ConfigError, lambda: table.labels("age"), "is continuous")
    one_line_error(ConfigError, lambda: table.column("height"), "no column 'height'")
    one_line_error(DataError, lambda: concat_tables([table, sub]), "another schema")


# -------------------------------------------------------------------------- encoding


def test_discretize_uses_equal_width_public_bins_right_open_last_closed(small_schema: Schema) -> None:
    weights = np.array([0.0, 0.999, 1.0, 4.5, 9.999, 10.0])
    table = Table.from_blocks(small_schema, np.column_stack([np.zeros(6), weights]), np.zeros((6, 2)))
    binned = discretize(table, n_bins=10)
    assert binned[:, 2].tolist() == [0, 0, 1, 4, 9, 9]
    assert np.array_equal(bin_edges(small_schema.column("weight"), 10), np.linspace(0, 10, 11))  # type: ignore[arg-type]
    # an independent reference: numpy.digitize on the inner edges
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 10, 1000)
    table = Table.from_blocks(small_schema, np.column_stack([np.zeros(1000), values]), np.zeros((1000, 2)))
    assert np.array_equal(discretize(table, 7)[:, 2], np.digitize(values, np.linspace(0, 10, 8)[1:-1]))
    assert domain_sizes(small_schema, 7) == (7, 3, 7, 2)
    one_line_error(ConfigError, lambda: discretize(table, 0), "n_bins must be a positive integer")


def test_undiscretize_draws_inside_the_bin_and_discretizes_back(small_schema: Schema) -> None:
    rng = np.random.default_rng(1)
    n = 2000
    binned = np.column_stack([rng.integers(0, 10, n), rng.integers(0, 3, n), rng.integers(0, 10, n), rng.integers(0, 2, n)])
    table = undiscretize(small_schema, binned, n_bins=10, rng=rng)
    assert np.array_equal(discretize(table, 10), binned)
    assert np.all(table.column("age") == np.round(table.column("age")))
    # every whole number of an age bin is drawn (bins of width 10 hold 10 of them, the last 11)
    ages = table.column("age")[binned[:, 0] == 9]
    assert set(ages.tolist()) == set(range(90, 101))
    with pytest.raises(DataError, match="column 'colour', row 0: 3 is not in 0..2"):
        undiscretize(small_schema, [[0, 3, 0, 0]], rng=rng)


def test_public_edges_bin_draw_within_and_round_trip_through_the_schema_file(tmp_path: Path) -> None:
    # a heavily zero column with 0 in a bin of its own and its top value alone (edges end at high + 1)
    text = ("[[columns]]\nname = 'gain'\ntype = 'continuous'\nlow = 0\nhigh = 99\ninteger = true\nedges = [0, 1, 10, 50, 99, 100]\n"
            "[[columns]]\nname = 'w'\ntype = 'continuous'\nlow = 0\nhigh = 1\nedges = [0, 0.1, 0.5, 1]\n")
    path = tmp_path / "edges.schema.toml"
    path.write_text(text)
    schema = load_schema(path)
    assert schema.columns[0].edges == (0, 1, 10, 50, 99, 100)  # type: ignore[union-attr]
    # the edges survive the schema's own writer (a release carries its schema this way)
    again = tmp_path / "again.schema.toml"
    again.write_text(schema_to_toml(schema))
    assert load_schema(again) == schema
    assert domain_sizes(schema, 7) == (5, 3)  # n_bins does not apply to a column with edges
    assert np.array_equal(bin_edges(schema.columns[1], 7), [0, 0.1, 0.5, 1])  # type: ignore[arg-type]
    gains = np.array([0, 1, 9, 10, 49, 50, 98, 99], dtype=float)
    weights = np.array([0, 0.0999, 0.1, 0.4999, 0.5, 0.9, 1.0, 1.0])
    table = Table.from_blocks(schema, np.column_stack([gains, weights]), np.zeros((8, 0), dtype=np.int64))
    # an independent reference: numpy.digitize on the inner edges (the last bin closed at high)
    assert discretize(table)[:, 0].tolist() == np.digitize(gains, [1, 10, 50, 99]).tolist() == [0, 1, 1, 2, 2, 3, 3, 4]
    assert discretize(table)[:, 1].tolist() == [0, 0, 1, 1, 2, 2, 2, 2]
    # values drawn back: uniform among the whole numbers of the bin, every one of them reached, none outside
    rng = np.random.default_rng(3)
    binned = np.column_stack([rng.integers(0, 5, 4000), rng.integers(0, 3, 4000)])
    drawn = undiscretize(schema, binned, rng=rng)
    assert np.array_equal(discretize(drawn), binned)
    gain = drawn.column("gain")
    for b, whole in enumerate([{0}, set(range(1, 10)), set(range(10, 50)), set(range(50, 99)), {99}]):
        assert set(gain[binned[:, 0] == b].tolist()) == whole
    w = drawn.column("w")[binned[:, 1] == 1]
    assert w.min() >= 0.1 and w.max() < 0.5


def test_the_adult_schema_declares_public_edges_for_every_numeric_column() -> None:
    schema = load_schema(Path(__file__).resolve().parents[1] / "data" / "adult.schema.toml")
    edges = {c.name: c.edges for c in schema.continuous}
    assert all(e is not None for e in edges.values()), edges
    # no capital gain or loss, the field's default, and the top code 99999 each have a bin of their own
    for name in ("capital-gain", "capital-loss"):
        assert edges[name][:2] == (0, 1) and edges[name][-2:] == (99999, 100000)  # type: ignore[index]
    assert edges["education-num"] == tuple(range(1, 18))


def test_design_matrix_matches_sklearn_one_hot_encoder(small_schema: Schema) -> None:
    rng = np.random.default_rng(2)
    codes = np.column_stack([rng.integers(0, 3, 40), rng.integers(0, 2, 40)])
    cont = np.column_stack([rng.integers(0, 101, 40), rng.uniform(0, 10, 40)])
    table = Table.from_blocks(small_schema, cont, codes)
    design = design_matrix(table)
    encoder = sklearn_preprocessing.OneHotEncoder(categories=[[0, 1, 2], [0, 1]], sparse_output=False)
    hot = encoder.fit_transform(codes)
    expected = np.column_stack([cont[:, 0], hot[:, :3], cont[:, 1], hot[:, 3:]])
    assert np.array_equal(design.X, expected)
    assert design.feature_names == ("age", "colour=red", "colour=green", "colour=blue", "weight", "flag=0", "flag=1")
    assert design.is_continuous.tolist() == [True, False, False, False, True, False, False]
    dropped = design_matrix(table, ["flag", "weight"], drop_first=True, unit_range=True)
    assert dropped.feature_names == ("flag=1", "weight")
    assert np.array_equal(dropped.X, np.column_stack([codes[:, 1], cont[:, 1] / 10]))
    assert np.array_equal(one_hot([2, 0], 3), [[0, 0, 1], [1, 0, 0]])
