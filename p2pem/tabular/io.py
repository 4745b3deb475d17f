"""Reading and writing mixed-type CSV files under a public schema.

:func:`read_table` checks every cell against the schema -- a category outside the public
list, a number outside the public range, text in a numeric column are one-line
:class:`~p2pem.errors.DataError` messages naming the file, line, column and value -- and
drops (and counts) the rows with a missing value.  :func:`write_csv` writes a table back
with its original column names, order and types, atomically.
:func:`schema_from_data_NOT_PRIVATE` suggests a schema from a file, and says that the
result is not public.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError
from p2pem.files import atomic_write, csv_records, read_csv
from p2pem.tabular.schema import Categorical, Column, Continuous, CsvLayout, Schema, SchemaError
from p2pem.tabular.table import Table

__all__ = ["read_table", "read_table_parties", "schema_from_data_NOT_PRIVATE", "write_csv"]

_SHOWN_CATEGORIES = 8


def read_table(
    path: str | os.PathLike[str],
    schema: Schema,
    *,
    header: bool | None = None,
    separator: str | None = None,
) -> Table:
    """Read a CSV file into a :class:`~p2pem.tabular.Table`, checking it against ``schema``.

    Parameters
    ----------
    path : str or path-like
        The file (UTF-8, a byte-order mark is ignored; LF or CRLF; blank lines skipped;
        fields may be quoted; spaces around fields are stripped).
    schema : Schema
        The public columns and the file layout (``schema.csv``).
    header, separator : optional
        Override ``schema.csv.header`` / ``schema.csv.separator``, e.g. to read back a
        file :func:`write_csv` wrote (header, comma) under a schema whose source files
        have no header.

    Returns
    -------
    Table
        The rows without a missing value, in file order; ``n_dropped`` counts the others.

    Raises
    ------
    DataError
        One line naming the file (and line, column and value where there is one): the
        file is missing or unreadable; a header lacks a schema column or holds a column
        the schema neither has nor ignores; a row has the wrong number of fields; a
        category is not in the public list; a number is not a number, not whole in an
        integer column, or outside the public range; no row is left.
    """
    layout = schema.csv
    try:
        layout = CsvLayout(
            layout.header if header is None else header,
            layout.separator if separator is None else separator,
            layout.missing,
            layout.ignore,
        )
    except SchemaError as exc:
        raise ConfigError(f"read_table: {exc}") from None
    return read_csv(
        path, lambda reader, where: _read(reader, where, schema, layout)[0], delimiter=layout.separator, skipinitialspace=True
    )


def read_table_parties(path: str | os.PathLike[str], schema: Schema, column: str) -> tuple[Table, tuple[str, ...]]:
    """:func:`read_table`, and the party of every row it keeps, from ``column`` (not a schema column).

    A distributed synthesizer's input: the table of all rows and, row for row, the text of
    the party that holds it (a node column, e.g. the hospital), so that each party's rows
    are exactly its own.  The party column is read beside the schema's columns and is not
    one of them; a row dropped for a missing value is dropped with its party.

    Raises
    ------
    DataError
        As :func:`read_table`; also the schema's file layout has no header row (the column
        is found by its name), ``column`` is a schema column or not in the header, or a
        kept row has no party (naming the line).
    """
    if column in schema.names:
        raise DataError(f"{path}: the party column {column!r} is a column of the schema; it names parties, it is not data")
    if not schema.csv.header:
        raise DataError(f"{path}: a party column needs a header row (the schema's csv.header is false)")
    return read_csv(path, lambda reader, where: _read(reader, where, schema, schema.csv, party=column), delimiter=schema.csv.separator,
                    skipinitialspace=True)


def _read(reader: Any, where: str, schema: Schema, layout: CsvLayout, *, party: str | None = None) -> tuple[Table, tuple[str, ...]]:
    records = csv_records(reader)
    n_fields, positions = _positions(records, where, schema, layout, party)
    missing = set(layout.missing)
    lines: list[int] = []
    rows: list[list[str]] = []
    owners: list[str] = []
    n_dropped = 0
    for line, record in records:
        if len(record) != n_fields:
            expected = "as in the header" if layout.header else f"one per schema column ({', '.join(schema.names)})"
            raise DataError(f"{where} line {line}: expected {n_fields} fields {expected}, got {len(record)}")
        cells = [record[p].strip() for p in positions[: len(schema.names)]]
        if missing.intersection(cells):
            n_dropped += 1
            continue
        if party is not None:
            owner = record[positions[-1]].strip()
            if not owner or owner in missing:
                raise DataError(f"{where} line {line}, column {party!r}: {owner!r} names no party (every row needs the party that holds it)")
            owners.append(owner)
        lines.append(line)
        rows.append(cells)
    if not rows:
        raise DataError(f"{where}: no data rows" + (f" ({n_dropped} dropped for a missing value)" if n_dropped else ""))
    line_numbers = np.asarray(lines)
    continuous = np.empty((len(rows), len(schema.continuous)))
    codes = np.empty((len(rows), len(schema.categorical)), dtype=np.int64)
    i_cont = i_cat = 0
    for j, column in enumerate(schema.columns):
        cells = [row[j] for row in rows]
        if isinstance(column, Continuous):
            continuous[:, i_cont] = _parse_numbers(cells, column, where, line_numbers)
            i_cont += 1
        else:
            codes[:, i_cat] = _parse_categories(cells, column, where, line_numbers, set(layout.missing))
            i_cat += 1
    return Table(schema, continuous, codes, n_dropped), tuple(owners)


def _positions(
    records: Iterator[tuple[int, list[str]]], where: str, schema: Schema, layout: CsvLayout, party: str | None = None
) -> tuple[int, list[int]]:
    """The number of fields per record and, per schema column, its field index (reads the
    header); with ``party``, that column's index last."""
    if not layout.header:
        return len(schema.columns), list(range(len(schema.columns)))
    first = next(records, None)
    if first is None:
        raise DataError(f"{where}: file is empty (expected a header row)")
    line, header = first[0], [name.strip() for name in first[1]]
    for i, name in enumerate(header):
        if name in header[:i]:
            raise DataError(f"{where} line {line}: column {name!r} appears twice in the header")
        if name not in schema.names and name not in layout.ignore and name != party:
            raise DataError(
                f"{where} line {line}: column {name!r} is not in the schema (add it to csv.ignore to skip it; "
                f"schema columns: {', '.join(schema.names)})"
            )
    absent = [name for name in (*schema.names, *(() if party is None else (party,))) if name not in header]
    if absent:
        raise DataError(f"{where} line {line}: the header lacks the schema's column(s) {', '.join(map(repr, absent))}")
    return len(header), [header.index(name) for name in (*schema.names, *(() if party is None else (party,)))]


def _parse_numbers(cells: list[str], column: Continuous, where: str, lines: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    try:
        values = np.array(cells, dtype=np.float64)
    except ValueError:
        values = np.empty(len(cells))
        for i, cell in enumerate(cells):
            try:
                values[i] = float(cell)
            except ValueError:
                raise _cell_error(where, lines[i], column, cell, "is not a number") from None
    bad = ~np.isfinite(values)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise _cell_error(where, lines[i], column, cells[i], "is not a finite number")
    if column.integer:
        bad = values != np.round(values)
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise _cell_error(where, lines[i], column, cells[i], "is not a whole number (the column is integer)")
    bad = (values < column.low) | (values > column.high)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise _cell_error(where, lines[i], column, cells[i], f"is outside the public range [{_num(column.low)}, {_num(column.high)}]")
    return values


def _parse_categories(
    cells: list[str], column: Categorical, where: str, lines: npt.NDArray[Any], missing: set[str]
) -> npt.NDArray[np.int64]:
    lookup = {label: code for code, label in enumerate(column.categories)}
    lookup.update({alias: lookup[target] for alias, target in column.aliases.items()})
    by_value = {float(label): code for code, label in enumerate(column.categories)} if column.numeric else {}
    codes = np.empty(len(cells), dtype=np.int64)
    for i, cell in enumerate(cells):
        code = lookup.get(cell)
        if code is None and column.numeric:
            try:
                code = by_value.get(float(cell))
            except ValueError:
                raise _cell_error(where, lines[i], column, cell, "is not a number (the categories are numbers)") from None
        if code is None:
            if not cell and "" not in missing:
                raise _cell_error(where, lines[i], column, cell, "is empty (list \"\" in csv.missing to drop such rows)")
            shown = ", ".join(map(repr, column.categories[:_SHOWN_CATEGORIES]))
            more = f", ... ({column.n_categories} in all)" if column.n_categories > _SHOWN_CATEGORIES else ""
            raise _cell_error(where, lines[i], column, cell, f"is not a public category (categories: {shown}{more})")
        codes[i] = code
    return codes


def _cell_error(where: str, line: int, column: Column, cell: str, problem: str) -> DataError:
    return DataError(f"{where} line {int(line)}, column {column.name!r}: {cell!r} {problem}")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# ----------------------------------------------------------------------------- writing


def write_csv(table: Table, path: str | os.PathLike[str], *, header: bool = True) -> None:
    """Write ``table`` as a comma-separated file with its original columns, atomically.

    Columns appear under their schema names and in schema order; integer columns are
    written as integers, other continuous values as the shortest text that reads back
    to the same float, categories as their labels.  The file appears whole or not at
    all (:func:`p2pem.files.atomic_write`).

    Parameters
    ----------
    table : Table
        The rows.
    path : str or path-like
        The target file; its folder must exist.
    header : bool, default True
        Write a first line with the column names.
    """
    schema = table.schema
    columns: list[list[str]] = []
    for column in schema.columns:
        values = table.column(column.name)
        if isinstance(column, Categorical):
            columns.append(np.asarray(column.categories)[values].tolist())
        elif column.integer:
            columns.append([str(v) for v in values.astype(np.int64).tolist()])
        else:
            columns.append([repr(v) for v in values.tolist()])
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(schema.names)
    writer.writerows(zip(*columns, strict=True))
    try:
        atomic_write(path, buffer.getvalue())
    except OSError as exc:
        raise DataError(f"{os.fspath(path)}: cannot write ({exc.strerror or exc})") from None


# ---------------------------------------------------------------------- not private


def schema_from_data_NOT_PRIVATE(
    path: str | os.PathLike[str],
    *,
    header: bool = True,
    names: Sequence[str] | None = None,
    separator: str = ",",
    missing: Sequence[str] = ("?",),
) -> Schema:
    """Suggest a schema by reading the data: NOT a public schema.

    Every column whose cells all parse as numbers becomes continuous with the observed
    minimum and maximum as its range (integer when every value is whole); every other
    column becomes categorical with the observed values, sorted, as its categories.
    Those ranges and category lists are functions of the private rows -- publishing
    them (or bins derived from them) can reveal an individual, e.g. the one largest
    value -- so the result has ``public=False`` and every column's ``source`` says
    so.  Use it as a draft: replace each range and list by public knowledge, then set
    ``public = true`` (:func:`p2pem.tabular.schema_to_toml` writes the file).

    Parameters
    ----------
    path : str or path-like
        A CSV file.
    header : bool, default True
        The first line names the columns; otherwise give ``names``.
    names : sequence of str, optional
        The column names of a file without a header.
    separator : str, default ","
        The field separator.
    missing : sequence of str, default ("?",)
        Cells meaning "no value" (ignored when suggesting).

    Returns
    -------
    Schema
        With ``public=False``.
    """
    where = os.fspath(path)
    if not header and names is None:
        raise ConfigError("schema_from_data_NOT_PRIVATE: a file without a header needs names=[...]")
    delimiter = separator.strip() or separator
    records = read_csv(path, lambda reader, _: [r for _, r in csv_records(reader)], delimiter=delimiter, skipinitialspace=True)
    if header:
        if not records:
            raise DataError(f"{where}: file is empty")
        names = [n.strip() for n in records[0]]
        records = records[1:]
    assert names is not None
    if any(len(r) != len(names) for r in records) or not records:
        raise DataError(f"{where}: rows must each have {len(names)} fields, and there must be at least one")
    columns: list[Column] = []
    note = "read off the data by schema_from_data_NOT_PRIVATE: NOT public"
    for j, name in enumerate(names):
        cells = [r[j].strip() for r in records if r[j].strip() not in missing]
        numbers = _all_numbers(cells)
        if numbers is not None and numbers.size and np.ptp(numbers) > 0:
            integer = bool(np.all(numbers == np.round(numbers)))
            columns.append(Continuous(name, float(numbers.min()), float(numbers.max()), integer, note))
        else:
            columns.append(Categorical(name, tuple(sorted(set(cells))), source=note))
    layout = CsvLayout(header, delimiter, tuple(missing))
    return Schema(tuple(columns), layout, public=False, description=f"suggested from {where}; NOT public", where=where)


def _all_numbers(cells: list[str]) -> npt.NDArray[np.float64] | None:
    try:
        values = np.array(cells, dtype=np.float64)
    except ValueError:
        return None
    return values if all(math.isfinite(v) for v in values.tolist()) else None
