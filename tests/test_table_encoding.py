"""A table under a public schema as the mixed family's rows, and back (p2pem.families.encoding)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from p2pem.errors import ConfigError, DataError
from p2pem.families.encoding import TableEncoding
from p2pem.tabular import Continuous, Schema, bin_edges, discretize, load_schema, read_table

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def adult():
    # the shipped schema's edges removed: these tests are about n_bins equal-width bins and atoms
    shipped = load_schema(ROOT / "data" / "adult.schema.toml")
    schema = Schema(tuple(dataclasses.replace(c, edges=None) if isinstance(c, Continuous) else c for c in shipped.columns), shipped.csv)
    return read_table(ROOT / "data" / "adult.test", schema).take(np.arange(3000))


def test_public_edges_set_a_binned_columns_categories():
    shipped = load_schema(ROOT / "data" / "adult.schema.toml")
    enc = TableEncoding(shipped, ("hours-per-week", "capital-gain"), 10, (("capital-gain", (0.0,)),))
    family = enc.family()
    names = enc.names[len(enc.gaussian):]
    hours, gain = shipped.column("hours-per-week"), shipped.column("capital-gain")
    assert family.n_categories[names.index("hours-per-week")] == len(bin_edges(hours, 10)) - 1 == 39  # type: ignore[arg-type]
    assert family.n_categories[names.index("capital-gain")] == 1 + len(bin_edges(gain, 10)) - 1  # type: ignore[arg-type]
    table = read_table(ROOT / "data" / "adult.test", shipped).take(np.arange(2000))
    back = enc.table(enc.rows(table), rng=np.random.default_rng(0))
    j = shipped.names.index("hours-per-week")
    np.testing.assert_array_equal(discretize(back)[:, j], discretize(table)[:, j])
    multiple = table.column("hours-per-week") % 5 == 0  # a multiple of 5 has a bin of its own: it comes back as itself
    np.testing.assert_array_equal(back.column("hours-per-week")[multiple], table.column("hours-per-week")[multiple])


def test_rows_and_back(adult):
    enc = TableEncoding(adult.schema, ("hours-per-week", "capital-gain"), 10, (("capital-gain", (0.0,)), ("hours-per-week", (40.0, 50.0))))
    X = enc.rows(adult)
    p = len(enc.gaussian)
    assert X.shape == (3000, len(adult.schema.names)) and p == 4
    assert np.all(np.abs(X[:, :p]) <= 1)  # Gaussian columns on [-1, 1] by their public ranges
    family = enc.family(stratify="income")
    assert family.n_categories[enc.names[p:].index("hours-per-week")] == 12 and family.stratify == enc.names[p:].index("income")
    back = enc.table(X, rng=np.random.default_rng(0))
    for c in enc.gaussian:  # integer columns come back exactly
        np.testing.assert_array_equal(back.column(c.name), adult.column(c.name))
    np.testing.assert_array_equal(back.codes, adult.codes)
    binned_back, binned_real = discretize(back), discretize(adult)
    for name in ("hours-per-week", "capital-gain"):
        j = adult.schema.names.index(name)
        np.testing.assert_array_equal(binned_back[:, j], binned_real[:, j])  # the same public bin
    hours = adult.column("hours-per-week")
    np.testing.assert_array_equal(back.column("hours-per-week")[hours == 40], 40)  # atoms come back as themselves
    assert np.all(back.column("capital-gain")[adult.column("capital-gain") == 0] == 0)
    other = (hours != 40) & (hours != 50)
    assert np.mean(back.column("hours-per-week")[other] != hours[other]) > 0.5  # the rest is drawn within its bin
    assert enc.describe()["atoms"] == {"capital-gain": [0.0], "hours-per-week": [40.0, 50.0]}


@pytest.mark.parametrize(
    "binned,atoms,words",
    [
        (("sex",), (), "'sex' is categorical already"),
        (("age",), (("fnlwgt", (0.0,)),), "only a binned column has atoms"),
        (("age",), (("age", (10.0,)),), "not a whole number in its public range"),
        (("age",), (("age", (20.5,)),), "not a whole number in its public range"),
        (("age",), (("age", (20.0, 20.0)),), "distinct"),
    ],
)
def test_bad_encodings_are_named(adult, binned, atoms, words):
    with pytest.raises(ConfigError, match=words):
        TableEncoding(adult.schema, binned, 10, atoms)


def test_model_rows_outside_the_codes_are_refused(adult):
    enc = TableEncoding(adult.schema, ("age",))
    X = enc.rows(adult)
    X[5, len(enc.gaussian)] = 10.0  # age has bins 0..9
    with pytest.raises(DataError, match="column 'age', row 5: 10.0 is not a code 0..9"):
        enc.table(X, rng=np.random.default_rng(0))
