"""A mixed-type table held as two blocks: continuous values and categorical codes.

Row ``i`` of a :class:`Table` is ``continuous[i]`` (one float per continuous column of the
schema, in schema order) together with ``codes[i]`` (one integer per categorical column:
the index of its category in the schema's public list).  This is the form the model
families work with -- a Gaussian block and count statistics -- and
:func:`p2pem.tabular.io.write_csv` turns it back into the original columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError
from p2pem.tabular.schema import Categorical, Continuous, Schema

__all__ = ["Table", "concat_tables"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Table:
    """Rows of a mixed-type table under a public schema.

    Build one with :meth:`from_blocks` (which converts and may clip), read one with
    :func:`p2pem.tabular.read_table`; the constructor itself only checks.

    Parameters
    ----------
    schema : Schema
        The columns.
    continuous : numpy.ndarray of shape (n_rows, n_continuous), float64
        The continuous columns, in the order of ``schema.continuous``; every value
        finite, inside its public range, and whole for an integer column.
    codes : numpy.ndarray of shape (n_rows, n_categorical), int64
        The categorical columns, in the order of ``schema.categorical``; column ``j``
        holds codes ``0 .. n_categories_j - 1``.
    n_dropped : int, default 0
        Rows dropped for a missing value when the table was read (provenance only).

    Raises
    ------
    DataError
        A block has the wrong shape or dtype, or a value outside its column's domain
        (the message names the column, row and value).
    """

    schema: Schema
    continuous: FloatArray
    codes: IntArray
    n_dropped: int = 0

    def __post_init__(self) -> None:
        n_cont, n_cat = len(self.schema.continuous), len(self.schema.categorical)
        for label, block, dtype, width in (
            ("continuous", self.continuous, np.float64, n_cont),
            ("codes", self.codes, np.int64, n_cat),
        ):
            if not isinstance(block, np.ndarray) or block.dtype != dtype or block.ndim != 2 or block.shape[1] != width:
                shape = getattr(block, "shape", None)
                got = f"{getattr(block, 'dtype', type(block).__name__)} of shape {shape}"
                raise DataError(f"table block {label!r} must be {np.dtype(dtype).name} of shape (n_rows, {width}), got {got}")
        if self.continuous.shape[0] != self.codes.shape[0]:
            raise DataError(f"table blocks disagree on the number of rows: {self.continuous.shape[0]} and {self.codes.shape[0]}")
        _check_continuous(self.schema.continuous, self.continuous)
        _check_codes(self.schema.categorical, self.codes)

    @classmethod
    def from_blocks(
        cls,
        schema: Schema,
        continuous: npt.ArrayLike | None,
        codes: npt.ArrayLike | None,
        *,
        clip: bool = False,
    ) -> Table:
        """A table from its two blocks (copied), e.g. the rows a synthesizer drew.

        Parameters
        ----------
        schema : Schema
            The columns.
        continuous : array_like of shape (n_rows, n_continuous) or None
            Values of the continuous columns in schema order (None when there are none).
        codes : array_like of shape (n_rows, n_categorical) or None
            Category codes in schema order (None when there are none).
        clip : bool, default False
            Clip each continuous value to its public range and round integer columns to
            the nearest whole number -- post-processing that uses public information only,
            for values drawn from a model with unbounded support.  Without it such values
            are a DataError.

        Raises
        ------
        DataError
            Wrong shapes, a non-finite value, or (without ``clip``) a value outside its
            domain; codes out of range always.
        """
        n_rows = _rows_of(continuous, codes)
        cont = _as_block(continuous, n_rows, "continuous")
        code_block = _as_block(codes, n_rows, "codes")
        if not np.all(np.isfinite(code_block) & (code_block == np.round(code_block))):
            raise DataError("codes must be whole numbers")
        if clip and cont.ndim == 2 and cont.shape[1] == len(schema.continuous):
            for j, column in enumerate(schema.continuous):
                values = np.clip(cont[:, j], column.low, column.high)
                cont[:, j] = np.round(values) if column.integer else values
        return cls(schema, cont, code_block.astype(np.int64))

    @property
    def n_rows(self) -> int:
        """The number of rows."""
        return int(self.continuous.shape[0])

    def __len__(self) -> int:
        return self.n_rows

    def column(self, name: str) -> npt.NDArray[np.float64] | IntArray:
        """The values of column ``name``: floats for a continuous column, codes for a categorical one."""
        column = self.schema.column(name)
        j = self.schema.block_index(name)
        return self.continuous[:, j] if isinstance(column, Continuous) else self.codes[:, j]

    def labels(self, name: str) -> npt.NDArray[np.str_]:
        """The categories of categorical column ``name``, as their labels (one string per row)."""
        column = self.schema.column(name)
        if not isinstance(column, Categorical):
            raise ConfigError(f"column {name!r} is continuous: it has values, not labels")
        return np.asarray(column.categories)[self.codes[:, self.schema.block_index(name)]]

    def take(self, rows: npt.ArrayLike) -> Table:
        """The rows selected by ``rows`` (indices or a boolean mask), as a new table."""
        index = np.asarray(rows)
        return Table(self.schema, self.continuous[index], self.codes[index])

    def select(self, names: Sequence[str]) -> Table:
        """The columns ``names``, in that order, as a table of :meth:`Schema.select`."""
        schema = self.schema.select(names)
        cont = [self.schema.block_index(c.name) for c in schema.continuous]
        cat = [self.schema.block_index(c.name) for c in schema.categorical]
        return Table(schema, self.continuous[:, cont], self.codes[:, cat], self.n_dropped)


def concat_tables(tables: Sequence[Table]) -> Table:
    """The rows of ``tables`` one after the other; all must share one schema."""
    if not tables:
        raise DataError("no tables to concatenate")
    schema = tables[0].schema
    for i, table in enumerate(tables[1:], start=1):
        if table.schema != schema:
            raise DataError(f"table {i} has another schema than table 0")
    return Table(
        schema,
        np.concatenate([t.continuous for t in tables]),
        np.concatenate([t.codes for t in tables]),
    )


def _rows_of(continuous: npt.ArrayLike | None, codes: npt.ArrayLike | None) -> int:
    if continuous is None and codes is None:
        raise DataError("a table needs a continuous block, a codes block, or both")
    block = np.asarray(continuous if continuous is not None else codes)
    if block.ndim == 0:
        raise DataError("a table block must be 2-D (n_rows, n_columns), got a scalar")
    return int(block.shape[0])


def _as_block(block: npt.ArrayLike | None, n_rows: int, label: str) -> FloatArray:
    if block is None:
        return np.empty((n_rows, 0))
    try:
        return np.array(block, dtype=np.float64, order="C")
    except (TypeError, ValueError) as exc:
        raise DataError(f"table block {label!r} is not numeric ({exc})") from None


def _check_continuous(columns: tuple[Continuous, ...], block: FloatArray) -> None:
    for j, column in enumerate(columns):
        values = block[:, j]
        bad = ~np.isfinite(values) | (values < column.low) | (values > column.high)
        if column.integer:
            bad |= values != np.round(values)
        if np.any(bad):
            row = int(np.flatnonzero(bad)[0])
            value = float(values[row])
            what = "a whole number" if column.integer else "a finite number"
            raise DataError(
                f"column {column.name!r}, row {row}: {value!r} is not {what} in the public range [{column.low!r}, {column.high!r}]"
            )


def _check_codes(columns: tuple[Categorical, ...], block: IntArray) -> None:
    for j, column in enumerate(columns):
        codes = block[:, j]
        bad = (codes < 0) | (codes >= column.n_categories)
        if np.any(bad):
            row = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"column {column.name!r}, row {row}: code {int(codes[row])} is not one of the "
                f"{column.n_categories} public categories (codes 0..{column.n_categories - 1})"
            )
