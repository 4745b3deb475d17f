"""The public schema of a mixed-type table: ordered columns, their types and public domains.

A schema is what every party may know about a table without seeing its rows: the column
names in order, whether each column is ``continuous`` (with a public range ``[low, high]``,
optionally integer-valued) or ``categorical`` (with a public, ordered list of categories),
and how the CSV files holding the rows are laid out.  Everything p2pem derives from a
domain -- the bins of a marginal, the one-hot width of a column, the range a synthetic value
is clipped to -- comes from here, never from the private rows.

Schema files are TOML (``data/adult.schema.toml``)::

    format = "p2pem-schema"        # optional; if present exactly this
    version = 1                    # optional; if present 1
    description = "..."            # optional, free text
    public = true                  # default true; false marks a schema read off data

    [csv]                          # how the CSV files are laid out (all optional)
    header = false                 # default true: the first line names the columns
    separator = ","                # default ","; one character (", " reads as ","):
                                   # spaces around every field are stripped
    missing = ["?"]                # default ["?"]: cells meaning "no value"; a row with
                                   # one is dropped and counted ("" drops empty cells)
    ignore = ["name"]              # header columns to skip (needs header = true)

    [[columns]]                    # one per column, in file order
    name = "age"
    type = "continuous"
    low = 17                       # the public range, low < high
    high = 90
    integer = true                 # default false: values must be whole numbers
    edges = [17, 20, 25, 90]       # optional: the public bin edges, increasing from low
                                   # to high (or high + 1 for an integer column: a bin
                                   # for the top value alone), whole numbers for an
                                   # integer column; default n_bins equal-width bins
    source = "..."                 # optional: where the range comes from

    [[columns]]
    name = "income"
    type = "categorical"
    categories = ["<=50K", ">50K"] # the public categories, in order (codes 0, 1, ...);
                                   # numbers (e.g. [0, 1]) declare a numeric column
                                   # categorical: cells are then matched by value
    aliases = { "<=50K." = "<=50K", ">50K." = ">50K" }   # optional: other spellings
    source = "..."

The same keys form an inline table (a scenario's ``[data.schema]``), read with
:func:`schema_from_dict`.  Every mistake is a one-line :class:`~p2pem.errors.ConfigError`
naming the file and the dotted key (``data/x.schema.toml: 'columns[2].high' must be
greater than 'low' (17.0), got 10.0``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import tomli_w

from p2pem.errors import ConfigError
from p2pem.tomltable import Table as _TomlTable
from p2pem.tomltable import is_int, is_number, read_toml, show

__all__ = [
    "Categorical",
    "Column",
    "Continuous",
    "CsvLayout",
    "SCHEMA_FORMAT",
    "Schema",
    "SchemaError",
    "load_schema",
    "schema_from_dict",
    "schema_to_toml",
]

#: The ``format`` value of a schema file.
SCHEMA_FORMAT = "p2pem-schema"
_VERSION = 1
_TOP_KEYS = ("format", "version", "description", "public", "csv", "columns")
_CSV_KEYS = ("header", "separator", "missing", "ignore")
_CONTINUOUS_KEYS = ("name", "type", "low", "high", "integer", "edges", "source")
_CATEGORICAL_KEYS = ("name", "type", "categories", "aliases", "source")


class SchemaError(ConfigError):
    """A schema entry is invalid.

    Attributes
    ----------
    key : str
        The entry at fault relative to its column or table (``"high"``, ``"categories"``);
        a caller reading a file prefixes the file and the column's dotted key.
    problem : str
        What is wrong with it.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key!r} {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class Continuous:
    """A continuous column with a public range.

    Parameters
    ----------
    name : str
        The column's name, as in the CSV header.
    low, high : float
        The public range, ``low < high``: every value must lie in it, and marginals are
        taken on equal-width bins over it.
    integer : bool, default False
        Values are whole numbers (read and written as integers).
    source : str, default ""
        Where the range comes from (documentation, a standard); kept for provenance.
    edges : tuple of float, optional
        Public bin edges, strictly increasing from ``low`` to ``high`` (whole numbers for an
        integer column, so that every bin holds one): bin ``b`` is ``[edges[b], edges[b + 1])``
        and the last bin also holds ``high``; an integer column may end at ``high + 1``, so
        that its top value can have a bin of its own.  They replace the equal-width bins of
        ``n_bins`` for this column, so that a heavily zero column can keep 0 in a bin of its
        own (``[0, 1, ...]``) and a small integer domain its own resolution.  Like the
        range, they must come from public knowledge, never from the rows.
    """

    name: str
    low: float
    high: float
    integer: bool = False
    source: str = ""
    edges: tuple[float, ...] | None = None
    kind: ClassVar[str] = "continuous"

    def __post_init__(self) -> None:
        _check_name(self.name)
        for key, value in (("low", self.low), ("high", self.high)):
            if not (is_number(value) and math.isfinite(value)):
                raise SchemaError(key, f"must be a finite number, got {show(value)}")
        if not self.high > self.low:
            raise SchemaError("high", f"must be greater than 'low' ({self.low!r}), got {self.high!r}")
        if self.integer and not (float(self.low).is_integer() and float(self.high).is_integer()):
            raise SchemaError("low", f"and 'high' of an integer column must be whole numbers, got [{self.low!r}, {self.high!r}]")
        if self.edges is not None:
            self._check_edges(self.edges)

    def _check_edges(self, edges: tuple[float, ...]) -> None:
        where = f"of column {self.name!r}"
        if not isinstance(edges, tuple) or len(edges) < 2:
            raise SchemaError("edges", f"{where} must list at least two numbers (one bin), got {show(edges)}")
        if any(not (is_number(e) and math.isfinite(e)) for e in edges):
            raise SchemaError("edges", f"{where} must be finite numbers, holds {show(next(e for e in edges if not (is_number(e) and math.isfinite(e))))}")
        tops = (self.high, self.high + 1) if self.integer else (self.high,)
        if edges[0] != self.low or edges[-1] not in tops:
            raise SchemaError("edges", f"{where} must run from 'low' ({_fmt(self.low)}) to 'high' ({_fmt(self.high)})"
                              + (" or 'high' + 1" if self.integer else "") + f", got {_fmt(edges[0])} .. {_fmt(edges[-1])}")
        for a, b in zip(edges, edges[1:], strict=False):
            if not b > a:
                raise SchemaError("edges", f"{where} must be strictly increasing, got {_fmt(a)} then {_fmt(b)}")
        if self.integer and not all(float(e).is_integer() for e in edges):
            bad = next(e for e in edges if not float(e).is_integer())
            raise SchemaError("edges", f"{where} must be whole numbers (the column is integer), holds {bad!r}")


@dataclass(frozen=True)
class Categorical:
    """A categorical column with a public, ordered list of categories.

    Parameters
    ----------
    name : str
        The column's name, as in the CSV header.
    categories : tuple of str
        The public categories in order; a row's code is the index of its category.  For
        a numeric column declared categorical these are the numbers as written
        (``("0", "1")``) and ``numeric`` is true.
    numeric : bool, default False
        The categories are numbers: a cell is parsed as a number and matched by value
        (``"1.0"`` is category ``"1"``).
    aliases : mapping of str to str, default {}
        Other spellings of a category in the files (``{"<=50K.": "<=50K"}``, the label of
        Adult's test split); each maps to one of ``categories``.
    source : str, default ""
        Where the category list comes from; kept for provenance.
    """

    name: str
    categories: tuple[str, ...]
    numeric: bool = False
    aliases: Mapping[str, str] = field(default_factory=dict, hash=False)
    source: str = ""
    kind: ClassVar[str] = "categorical"

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.categories, tuple):
            raise SchemaError("categories", f"must be a tuple of strings, got {type(self.categories).__name__}")
        if not self.categories:
            raise SchemaError("categories", "must list at least one category")
        if len(set(self.categories)) != len(self.categories):
            twice = next(c for c in self.categories if self.categories.count(c) > 1)
            raise SchemaError("categories", f"lists {twice!r} twice")
        if any(not isinstance(c, str) or not c.strip() or c != c.strip() for c in self.categories):
            bad = next(c for c in self.categories if not isinstance(c, str) or not c.strip() or c != c.strip())
            raise SchemaError("categories", f"holds {bad!r}: a category is a non-empty string without surrounding spaces")
        if self.numeric:
            values = [float(c) for c in self.categories]
            if len(set(values)) != len(values):
                raise SchemaError("categories", "lists the same number twice")
            if self.aliases:
                raise SchemaError("aliases", "are for text categories; a numeric category is matched by value")
        for alias, target in self.aliases.items():
            if target not in self.categories:
                raise SchemaError("aliases", f"map {alias!r} to {target!r}, which is not one of the categories")
            if alias in self.categories:
                raise SchemaError("aliases", f"map {alias!r}, itself a category, to {target!r}")

    @property
    def n_categories(self) -> int:
        """The number of public categories."""
        return len(self.categories)


Column = Continuous | Categorical


@dataclass(frozen=True)
class CsvLayout:
    """How the CSV files of a table are laid out (the ``[csv]`` table of a schema file).

    Parameters
    ----------
    header : bool, default True
        The first non-blank line names the columns (matched by name, any order);
        without a header the fields are the schema's columns in order.
    separator : str, default ","
        The field separator, one character; spaces around every field are stripped.
    missing : tuple of str, default ("?",)
        Cells meaning "no value"; a row holding one is dropped and counted.
    ignore : tuple of str, default ()
        Header columns that are not part of the table (identifiers such as ``name``).
    """

    header: bool = True
    separator: str = ","
    missing: tuple[str, ...] = ("?",)
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.separator) != 1 or self.separator in "\"\r\n" or (self.separator == " "):
            raise SchemaError("separator", f"must be one character other than a quote, newline or space, got {self.separator!r}")
        if self.ignore and not self.header:
            raise SchemaError("ignore", "needs 'header = true': ignored columns are found by name")
        if len(set(self.missing)) != len(self.missing):
            raise SchemaError("missing", "lists a token twice")


@dataclass(frozen=True)
class Schema:
    """The public description of a mixed-type table.

    Parameters
    ----------
    columns : tuple of Continuous or Categorical
        The columns in order.
    csv : CsvLayout, default CsvLayout()
        How the files holding the rows are laid out.
    public : bool, default True
        False for a schema read off the data (:func:`schema_from_data_NOT_PRIVATE`): its
        ranges and categories are not public, so a private release must refuse it.
    description : str, default ""
        Free text.
    where : str, default ""
        The file it was read from (for messages); not part of equality.

    Raises
    ------
    SchemaError
        No columns, a name used twice, an ignored column that is also a column, or a
        category that is also a missing-value token.
    """

    columns: tuple[Column, ...]
    csv: CsvLayout = field(default_factory=CsvLayout)
    public: bool = True
    description: str = ""
    where: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.columns:
            raise SchemaError("columns", "must list at least one column")
        seen: set[str] = set()
        for column in self.columns:
            if column.name in seen:
                raise SchemaError("columns", f"name {column.name!r} twice")
            seen.add(column.name)
        clash = [name for name in self.csv.ignore if name in seen]
        if clash:
            raise SchemaError("csv.ignore", f"names {clash[0]!r}, which is a column of the schema")
        for column in self.categorical:
            tokens = set(column.categories) | set(column.aliases)
            both = sorted(tokens & set(self.csv.missing))
            if both:
                raise SchemaError("csv.missing", f"holds {both[0]!r}, a category of column {column.name!r}")

    @property
    def names(self) -> tuple[str, ...]:
        """The column names in order."""
        return tuple(column.name for column in self.columns)

    @property
    def continuous(self) -> tuple[Continuous, ...]:
        """The continuous columns in order (the columns of a table's ``continuous`` block)."""
        return tuple(c for c in self.columns if isinstance(c, Continuous))

    @property
    def categorical(self) -> tuple[Categorical, ...]:
        """The categorical columns in order (the columns of a table's ``codes`` block)."""
        return tuple(c for c in self.columns if isinstance(c, Categorical))

    def column(self, name: str) -> Column:
        """The column called ``name``; ConfigError naming the known columns if there is none."""
        for column in self.columns:
            if column.name == name:
                return column
        raise ConfigError(f"{self._label()}no column {name!r} (columns: {', '.join(self.names)})")

    def block_index(self, name: str) -> int:
        """Position of column ``name`` within its block (``continuous`` or ``codes``)."""
        column = self.column(name)
        block: tuple[Column, ...] = self.continuous if isinstance(column, Continuous) else self.categorical
        return next(i for i, c in enumerate(block) if c.name == name)

    def select(self, names: Sequence[str]) -> Schema:
        """The schema of the columns ``names``, in that order (same layout and flags)."""
        if isinstance(names, str):
            raise ConfigError("select takes a sequence of column names, not a single string")
        if len(set(names)) != len(names):
            raise ConfigError(f"{self._label()}select names a column more than once: {list(names)!r}")
        return Schema(tuple(self.column(n) for n in names), self.csv, self.public, self.description, self.where)

    def _label(self) -> str:
        return f"{self.where}: " if self.where else ""


def _fmt(value: float) -> str:
    """A number as a schema file writes it: 50, not 50.0."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise SchemaError("name", f"must be a non-empty string without surrounding spaces, got {name!r}")


# ----------------------------------------------------------------------------- reading


def load_schema(path: str | os.PathLike[str]) -> Schema:
    """Read and validate a schema file.

    Parameters
    ----------
    path : str or path-like
        The TOML file (format in the module docstring).

    Returns
    -------
    Schema
        With ``where`` set to ``path``.

    Raises
    ------
    ConfigError
        The file is missing, not TOML, or an entry is wrong: one line naming the file
        and the dotted key.
    """
    where = os.fspath(path)
    return schema_from_dict(read_toml(path, "schema"), where=where)


def schema_from_dict(table: Mapping[str, Any], *, where: str, prefix: str = "") -> Schema:
    """Validate a schema given as a table (a parsed schema file or a scenario's inline table).

    Parameters
    ----------
    table : mapping
        The keys of a schema file (module docstring).
    where : str
        The file it comes from, first word of every error.
    prefix : str, default ""
        The dotted key of ``table`` inside that file (``"data.schema"``), so errors
        name ``'data.schema.columns[2].low'``.

    Raises
    ------
    ConfigError
        One line naming ``where`` and the dotted key at fault.
    """
    top = _TomlTable(where, dict(table), prefix, _TOP_KEYS)
    fmt = top.string("format", default=SCHEMA_FORMAT)
    if fmt != SCHEMA_FORMAT:
        top.fail_key("format", f"must be {SCHEMA_FORMAT!r}, got {fmt!r}")
    version = top.integer("version", default=_VERSION)
    if version != _VERSION:
        top.fail_key("version", f"must be {_VERSION} (the only schema version), got {version}")
    description = top.string("description", default="")
    public = top.boolean("public", default=True)
    layout = _parse_csv(top)
    raw_columns = top.require("columns")
    if not isinstance(raw_columns, list) or not raw_columns:
        top.fail_key("columns", f"must be a non-empty array of tables ([[columns]]), got {show(raw_columns)}")
    columns = tuple(_parse_column(top, i, raw) for i, raw in enumerate(raw_columns))
    try:
        return Schema(columns, layout, public, description, where)
    except SchemaError as exc:
        top.fail_key(exc.key, exc.problem)


def _parse_csv(top: _TomlTable) -> CsvLayout:
    if not top.has("csv"):
        return CsvLayout()
    csv = top.section("csv", _CSV_KEYS)
    header = csv.boolean("header", default=True)
    separator = csv.string("separator", default=",")
    if len(separator) > 1 and separator.rstrip(" ") and len(separator.rstrip(" ")) == 1:
        separator = separator.rstrip(" ")  # ", " as Adult is written: spaces are stripped anyway
    missing = csv.string_list("missing", default=("?",))
    ignore = csv.string_list("ignore", default=())
    try:
        return CsvLayout(header, separator, tuple(missing), tuple(ignore))
    except SchemaError as exc:
        csv.fail_key(exc.key, exc.problem)


def _parse_column(top: _TomlTable, index: int, raw: object) -> Column:
    key = f"columns[{index}]"
    probe = _TomlTable(top.where, raw, top.key(key), None)
    kind = probe.choice("type", ("continuous", "categorical"))
    if kind == "continuous":
        table = _TomlTable(top.where, raw, top.key(key), _CONTINUOUS_KEYS)
        fields: dict[str, Any] = dict(
            name=table.string("name"),
            low=table.number("low"),
            high=table.number("high"),
            integer=table.boolean("integer", default=False),
            source=table.string("source", default=""),
            edges=tuple(table.number_array("edges", ndim=1).tolist()) if table.has("edges") else None,
        )
        make: Any = Continuous
    else:
        table = _TomlTable(top.where, raw, top.key(key), _CATEGORICAL_KEYS)
        categories, numeric = _parse_categories(table)
        aliases = table.free_table("aliases")
        for alias, target in aliases.items():
            if not isinstance(target, str):
                table.fail_key("aliases", f"must map spellings to category names (strings), got {alias!r} = {show(target)}")
        fields = dict(
            name=table.string("name"),
            categories=categories,
            numeric=numeric,
            aliases=dict(aliases),
            source=table.string("source", default=""),
        )
        make = Categorical
    try:
        column: Column = make(**fields)
    except SchemaError as exc:
        table.fail_key(exc.key, exc.problem)
    return column


def _parse_categories(table: _TomlTable) -> tuple[tuple[str, ...], bool]:
    value = table.require("categories")
    if not isinstance(value, list) or not value:
        table.fail_key("categories", f"must be a non-empty array of strings or of numbers, got {show(value)}")
    for v in value:
        if not (isinstance(v, str) or (is_number(v) and math.isfinite(v))):
            table.fail_key("categories", f"must be strings or finite numbers, holds {show(v)}")
    if all(isinstance(v, str) for v in value):
        return tuple(value), False
    if any(isinstance(v, str) for v in value):
        table.fail_key("categories", "mixes strings and numbers: write them all as strings or all as numbers")
    return tuple(str(v) if is_int(v) else repr(float(v)) for v in value), True


# ----------------------------------------------------------------------------- writing


def schema_to_toml(schema: Schema) -> str:
    """The schema as the text of a schema file (readable by :func:`load_schema`).

    A schema that is not public (``public = false``) starts with a comment saying so.
    """
    document: dict[str, Any] = {"format": SCHEMA_FORMAT, "version": _VERSION}
    if schema.description:
        document["description"] = schema.description
    document["public"] = schema.public
    layout = schema.csv
    document["csv"] = {
        "header": layout.header,
        "separator": layout.separator,
        "missing": list(layout.missing),
        **({"ignore": list(layout.ignore)} if layout.ignore else {}),
    }
    document["columns"] = [_column_entry(c) for c in schema.columns]
    text = tomli_w.dumps(document)
    if not schema.public:
        text = (
            "# NOT PUBLIC: the ranges and category lists below were read off the data.\n"
            "# Replace them with public knowledge (documentation, standards) and set\n"
            "# public = true before any private use: published bins that depend on the\n"
            "# rows leak the rows (e.g. the largest value).\n" + text
        )
    return text


def _column_entry(column: Column) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": column.name, "type": column.kind}
    if isinstance(column, Continuous):
        cast = int if column.integer else float
        entry.update(low=cast(column.low), high=cast(column.high))
        if column.integer:
            entry["integer"] = True
        if column.edges is not None:
            entry["edges"] = [cast(e) for e in column.edges]
    else:
        if column.numeric:
            entry["categories"] = [int(c) if re.fullmatch(r"-?[0-9]+", c) else float(c) for c in column.categories]
        else:
            entry["categories"] = list(column.categories)
        if column.aliases:
            entry["aliases"] = dict(column.aliases)
    if column.source:
        entry["source"] = column.source
    return entry
