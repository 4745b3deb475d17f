"""Encodings of a mixed-type table: public bins, and one-hot design matrices for models.

* :func:`discretize` -- every column as a small integer: a categorical column keeps its
  code, a continuous column gets the index of its bin among the public edges its schema
  declares, or else among ``n_bins`` equal-width bins over its **public** range
  (:func:`bin_edges`), so the bins reveal nothing about the rows.  Marginals, contingency counts (PrivBayes) and the report's α-way distances are
  taken on this form; :func:`undiscretize` draws values back from bin indices.
* :func:`design_matrix` -- the numeric matrix a regression or classifier reads: continuous
  columns as they are (or scaled to [0, 1] by the public range), each categorical column
  as one-hot indicators (:func:`one_hot`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError
from p2pem.tabular.schema import Categorical, Continuous, Schema
from p2pem.tabular.table import Table

__all__ = [
    "DEFAULT_BINS",
    "Design",
    "bin_edges",
    "design_matrix",
    "discretize",
    "domain_sizes",
    "one_hot",
    "undiscretize",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Equal-width bins per continuous column unless told otherwise (the PrivBayes papers' and
#: issue 20's convention for Adult).
DEFAULT_BINS = 10


def _check_bins(n_bins: int) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ConfigError(f"n_bins must be a positive integer, got {n_bins!r}")


def bin_edges(column: Continuous, n_bins: int = DEFAULT_BINS) -> FloatArray:
    """The edges of the column's public bins.

    The schema's own ``edges`` where it declares them (``n_bins`` is then ignored for this
    column), otherwise the ``n_bins + 1`` edges of equal-width bins over the public range.
    Bin ``b`` is ``[edges[b], edges[b + 1])``; the last bin also holds ``high``.
    """
    _check_bins(n_bins)
    if column.edges is not None:
        return np.asarray(column.edges, dtype=np.float64)
    return np.linspace(column.low, column.high, n_bins + 1)


def domain_sizes(schema: Schema, n_bins: int = DEFAULT_BINS) -> tuple[int, ...]:
    """The number of values of each column of :func:`discretize`, in schema order."""
    _check_bins(n_bins)
    return tuple(len(bin_edges(c, n_bins)) - 1 if isinstance(c, Continuous) else c.n_categories for c in schema.columns)


def discretize(table: Table, n_bins: int = DEFAULT_BINS) -> IntArray:
    """Every column as a small integer, in schema order (public bins for continuous columns).

    Parameters
    ----------
    table : Table
        The rows.
    n_bins : int, default 10
        Equal-width bins per continuous column over its public range, for the columns whose
        schema declares no ``edges`` (:func:`bin_edges`).

    Returns
    -------
    numpy.ndarray of shape (n_rows, n_columns), int64
        Column ``j`` holds values ``0 .. domain_sizes(schema, n_bins)[j] - 1``: the bin
        index of a continuous column, the code of a categorical one.
    """
    out = np.empty((table.n_rows, len(table.schema.columns)), dtype=np.int64)
    for j, column in enumerate(table.schema.columns):
        values = table.column(column.name)
        if isinstance(column, Continuous):
            inner = bin_edges(column, n_bins)[1:-1]
            out[:, j] = np.searchsorted(inner, values, side="right")
        else:
            out[:, j] = values
    return out


def undiscretize(schema: Schema, binned: npt.ArrayLike, *, n_bins: int = DEFAULT_BINS, rng: np.random.Generator) -> Table:
    """Rows drawn back from :func:`discretize`'s form (a sampler's output) as a table.

    A categorical column's value is its code; a continuous column's value is drawn
    uniformly within its bin (:func:`bin_edges`: the schema's public edges, or equal width) -- among the whole numbers inside the bin for an integer
    column (the nearest whole number to the bin's centre if the bin holds none, which
    happens only when bins are narrower than 1).  Only public information is used.

    Parameters
    ----------
    schema : Schema
        The columns.
    binned : array_like of shape (n_rows, n_columns)
        Values ``0 .. domain_sizes(schema, n_bins)[j] - 1`` per column.
    n_bins : int, default 10
        The bins ``binned`` was made with.
    rng : numpy.random.Generator
        The only source of randomness.

    Raises
    ------
    DataError
        Wrong shape, or a value outside a column's domain.
    """
    sizes = domain_sizes(schema, n_bins)
    array = np.asarray(binned)
    if array.ndim != 2 or array.shape[1] != len(sizes) or not np.issubdtype(array.dtype, np.integer):
        raise DataError(f"binned rows must be integers of shape (n_rows, {len(sizes)}), got {array.dtype} {array.shape}")
    out_of_range = (array < 0) | (array >= np.asarray(sizes))
    if np.any(out_of_range):
        row, j = (int(v) for v in np.argwhere(out_of_range)[0])
        raise DataError(f"binned rows: column {schema.columns[j].name!r}, row {row}: {int(array[row, j])} is not in 0..{sizes[j] - 1}")
    continuous = np.empty((array.shape[0], len(schema.continuous)))
    codes = np.empty((array.shape[0], len(schema.categorical)), dtype=np.int64)
    i_cont = i_cat = 0
    for j, column in enumerate(schema.columns):
        if isinstance(column, Categorical):
            codes[:, i_cat] = array[:, j]
            i_cat += 1
            continue
        edges = bin_edges(column, n_bins)
        lower, upper = edges[array[:, j]], edges[array[:, j] + 1]
        if column.integer:
            first = np.ceil(lower)
            # whole numbers in [lower, upper), and upper itself in the last bin unless it lies above
            # the range (an integer column's edges may end at high + 1)
            last = np.where(array[:, j] == len(edges) - 2, np.minimum(np.floor(upper), column.high), np.ceil(upper) - 1)
            count = last - first + 1
            draw = first + np.floor(rng.random(len(first)) * np.maximum(count, 1))
            values = np.where(count >= 1, draw, np.clip(np.round((lower + upper) / 2), column.low, column.high))
        else:
            values = lower + rng.random(len(lower)) * (upper - lower)
        continuous[:, i_cont] = values
        i_cont += 1
    return Table(schema, continuous, codes)


def one_hot(codes: npt.ArrayLike, n_categories: int) -> FloatArray:
    """Indicator matrix of integer codes: row ``i`` has a 1 in column ``codes[i]``."""
    values = np.asarray(codes, dtype=np.int64)
    if values.size and (values.min() < 0 or values.max() >= n_categories):
        raise DataError(f"one_hot: codes must lie in 0..{n_categories - 1}")
    out = np.zeros((values.shape[0], n_categories))
    out[np.arange(values.shape[0]), values] = 1.0
    return out


class Design(NamedTuple):
    """A design matrix and what its columns are (:func:`design_matrix`)."""

    X: FloatArray
    """Shape (n_rows, n_features)."""
    feature_names: tuple[str, ...]
    """``"age"`` for a continuous column, ``"sex=Male"`` for an indicator."""
    is_continuous: npt.NDArray[np.bool_]
    """True for the features that come from continuous columns (those to standardise)."""


def design_matrix(
    table: Table,
    columns: Sequence[str] | None = None,
    *,
    drop_first: bool = False,
    unit_range: bool = False,
) -> Design:
    """The numeric matrix of some columns: continuous values and one-hot categories.

    Parameters
    ----------
    table : Table
        The rows.
    columns : sequence of str, optional
        The columns to encode, in this order; default every column of the schema.
    drop_first : bool, default False
        Leave out the indicator of each categorical column's first public category
        (the reference level of a regression with an intercept).
    unit_range : bool, default False
        Map each continuous column to [0, 1] by its public range, ``(x - low) / (high - low)``.

    Returns
    -------
    Design
        ``X``, ``feature_names`` and ``is_continuous``; features in column order, a
        categorical column expanded into one indicator per (kept) category.
    """
    names = table.schema.names if columns is None else tuple(columns)
    blocks: list[FloatArray] = []
    feature_names: list[str] = []
    continuous: list[bool] = []
    for name in names:
        column = table.schema.column(name)
        values = table.column(name)
        if isinstance(column, Continuous):
            x = values.astype(np.float64)
            if unit_range:
                x = (x - column.low) / (column.high - column.low)
            blocks.append(x[:, np.newaxis])
            feature_names.append(name)
            continuous.append(True)
        else:
            start = 1 if drop_first else 0
            blocks.append(one_hot(values, column.n_categories)[:, start:])
            feature_names.extend(f"{name}={c}" for c in column.categories[start:])
            continuous.extend([False] * (column.n_categories - start))
    X = np.hstack(blocks) if blocks else np.empty((table.n_rows, 0))
    return Design(X, tuple(feature_names), np.asarray(continuous, dtype=bool))
