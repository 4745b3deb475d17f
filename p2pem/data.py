"""Tabular data in, per-node parts out: loading, preprocessing, splitting, validating.

Everything here is pure: functions take arrays (or a file path) and return new
arrays, randomness comes only from an explicit ``rng`` keyword, and every problem
with the input becomes a :class:`~p2pem.errors.DataError` whose one-line message
says where the problem is (file, line, column, node).

The usual pipeline, as run by :func:`p2pem.builders.load_data`, is::

    X, names = load_table(path, drop_columns=("name", "status"))
    X = pca(standardize(X, column_names=names), 2)
    parts = split_rows(X, 80, how="even", rng=rng)
    check_parts(parts, n_components=3)
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError
from p2pem.files import csv_records, is_number, read_csv
from p2pem.gmm import GMMParams

__all__ = [
    "SPLITS",
    "Preprocessing",
    "check_parts",
    "fit_preprocessing",
    "load_table",
    "parse_ids",
    "pca",
    "read_header",
    "read_text_column",
    "relabel_ids",
    "split_indices",
    "split_rows",
    "standardize",
    "synthetic_mixture",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: The ways :func:`split_rows` spreads rows over nodes.
SPLITS = ("even", "contiguous", "random")


# --------------------------------------------------------------------------- loading


def load_table(
    path: str | os.PathLike[str],
    *,
    columns: Sequence[str] | None = None,
    drop_columns: Iterable[str] = (),
    header: bool = True,
) -> tuple[FloatArray, tuple[str, ...]]:
    """Read a comma-separated file with a header row into a float matrix.

    Parameters
    ----------
    path : str or path-like
        The CSV file.  Its first non-blank line names the columns.  Line endings
        may be LF or CRLF, fields may be quoted, a UTF-8 byte-order mark is
        ignored.  Blank lines are skipped.
    columns : sequence of str, optional
        Keep only these columns, in this order.  Default: every column.
    drop_columns : iterable of str, default ()
        Remove these columns (applied after ``columns``).  Use it for
        identifiers and labels such as ``name`` and ``status``.
    header : bool, default True
        False: the file has no header row (what ``numpy.savetxt`` writes); its columns
        are named by position, ``"0"``, ``"1"``, ... (as pandas numbers them).

    Returns
    -------
    X : numpy.ndarray of shape (n_samples, n_features), float64
        One row per data line, one column per kept column.
    column_names : tuple of str
        Names of the kept columns, in the order of the columns of ``X``
        (surrounding whitespace stripped).

    Raises
    ------
    DataError
        The file is missing, unreadable, empty or holds only a header; a row has
        a different number of fields than the header; the header repeats a
        name; ``columns`` or ``drop_columns`` name unknown columns (the message
        lists the available ones); nothing is left to keep; or a kept cell is
        empty, non-numeric, NaN or infinite (the message names the file, the
        1-based line number and the column).  Two quirks are refused rather than
        read wrong: a first row of numbers where the header should be (a file
        without a header would silently lose its first row: pass ``header=False``),
        and a kept column without a name (a pandas index written by
        ``DataFrame.to_csv`` would silently become a feature).

    Examples
    --------
    >>> X, names = load_table("data/parkinsons.data", drop_columns=["name", "status"])
    >>> X.shape
    (195, 22)
    """
    if isinstance(columns, str) or isinstance(drop_columns, str):
        raise ConfigError("columns and drop_columns must be sequences of names, not a single string")
    drop = tuple(drop_columns)
    return read_csv(path, lambda reader, where: _read_table(reader, where, columns, drop, header))


def read_text_column(path: str | os.PathLike[str], column: str, *, header: bool = True) -> tuple[str, ...]:
    """One column of a CSV file as text, one entry per data row (surrounding whitespace stripped).

    For identifiers that are not numbers, such as the party a row belongs to
    (``[data] node_column``).  The file is read under the rules of :func:`load_table`.

    Raises
    ------
    DataError
        As :func:`load_table`; also an empty cell in the column (naming the line).
    """

    def parse(reader: Any, where: str) -> tuple[str, ...]:
        records, names = _header(reader, where, header)
        _check_known(where, names, "node_column", [column])
        j = names.index(column)
        values = []
        for line, record in records:
            if len(record) != len(names):
                raise DataError(f"{where} line {line}: expected {len(names)} fields as in the header, got {len(record)}")
            value = record[j].strip()
            if not value:
                raise DataError(f"{where} line {line}, column {column!r}: empty cell")
            values.append(value)
        if not values:
            raise DataError(f"{where}: no data rows after the header")
        return tuple(values)

    return read_csv(path, parse)


def read_header(path: str | os.PathLike[str], *, header: bool = True) -> tuple[str, ...]:
    """The column names of a CSV file (its header row; without one ``"0"``, ``"1"``, ... by position).

    Raises
    ------
    DataError
        As :func:`load_table` for the file and its first row.
    """

    def parse(reader: Any, where: str) -> tuple[str, ...]:
        return tuple(_header(reader, where, header)[1])

    return read_csv(path, parse)


#: A column name pandas gives an unnamed column when it reads a file back (``Unnamed: 0``).
_PANDAS_UNNAMED = re.compile(r"Unnamed: \d+")


def _header(reader: Any, where: str, header: bool) -> tuple[Iterator[tuple[int, list[str]]], list[str]]:
    """The data records and the column names of a CSV file (its header row, or positions)."""
    records = csv_records(reader)
    first = next(records, None)
    if first is None:
        raise DataError(f"{where}: file is empty (expected a header row)" if header else f"{where}: file is empty")
    line, row = first
    if not header:
        return itertools.chain([first], records), [str(j) for j in range(len(row))]
    names = [name.strip() for name in row]
    if all(is_number(name) for name in names) and names != [str(j) for j in range(len(names))]:
        # pandas' default column names 0..d-1 are names; any other row of numbers is data
        raise DataError(
            f"{where} line {line}: the first row holds numbers, not column names: the file has no header row "
            "(numpy.savetxt writes none); add one, or declare header = false in [data] (columns are then named "
            '"0", "1", ... by position)'
        )
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise DataError(f"{where} line {line}: column name {name!r} appears twice in the header")
        seen.add(name)
    return records, names


def _check_known(where: str, header: Sequence[str], label: str, names: Iterable[str]) -> None:
    unknown = [name for name in names if name not in header]
    if unknown:
        listed = ", ".join(repr(name) for name in unknown)
        available = ", ".join(repr(name) for name in header)
        raise DataError(f"{where}: unknown column(s) {listed} in {label} (available: {available})")


def _read_table(
    reader: Any,
    where: str,
    columns: Sequence[str] | None,
    drop_columns: tuple[str, ...],
    has_header: bool = True,
) -> tuple[FloatArray, tuple[str, ...]]:
    records, header = _header(reader, where, has_header)
    for label, names in (("columns", columns or ()), ("drop_columns", drop_columns)):
        _check_known(where, header, label, names)
    if columns is not None and len(set(columns)) != len(columns):
        raise DataError(f"{where}: columns names a column more than once: {list(columns)!r}")

    kept = [name for name in (header if columns is None else columns) if name not in set(drop_columns)]
    if not kept:
        raise DataError(f"{where}: no columns left to read after selecting and dropping")
    for name in kept:
        if not name or _PANDAS_UNNAMED.fullmatch(name):
            position = header.index(name) + 1
            what = "has no name" if not name else f"is named {name!r} (pandas' name for a column without one)"
            hint = (
                "a pandas index written by DataFrame.to_csv? write the file with index=False, or"
                if position == 1
                else "name it in the header, or"
            )
            raise DataError(
                f"{where}: column {position} {what} and would be read as a feature: {hint} leave it out with "
                f'drop_columns = ["{name}"] or columns = [...]'
            )
    index = [header.index(name) for name in kept]

    rows: list[list[float]] = []
    for line, record in records:
        if len(record) != len(header):
            raise DataError(
                f"{where} line {line}: expected {len(header)} fields as in the header, got {len(record)}"
            )
        try:
            rows.append([_parse_cell(record[j], where, line, header[j]) for j in index])
        except DataError as exc:
            if has_header or rows:
                raise
            raise DataError(f"{exc} (the first row is read as data because header = false: is it a header row?)") from None
    if not rows:
        raise DataError(f"{where}: no data rows after the header")
    return np.array(rows, dtype=np.float64), tuple(kept)


def _parse_cell(cell: str, where: str, line: int, column: str) -> float:
    text = cell.strip()
    if not text:
        raise DataError(f"{where} line {line}, column {column!r}: empty cell (p2pem imputes nothing: drop incomplete rows "
                        "first, or give [data] a schema whose csv.missing lists \"\", and such rows are dropped and counted)")
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{where} line {line}, column {column!r}: {cell!r} is not a number") from None
    if not math.isfinite(value):
        raise DataError(f"{where} line {line}, column {column!r}: {cell!r} is not a finite number")
    return value


# --------------------------------------------------------------------- preprocessing


def _as_matrix(X: npt.ArrayLike, what: str = "X") -> FloatArray:
    try:
        array = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{what} is not a numeric array ({exc})") from None
    if array.ndim != 2:
        raise DataError(f"{what} must be 2-D (n_samples, n_features), got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise DataError(f"{what} is empty (shape {array.shape})")
    if not np.all(np.isfinite(array)):
        row, col = np.argwhere(~np.isfinite(array))[0]
        raise DataError(f"{what} holds a non-finite value at row {row}, column {col}")
    return array


def standardize(X: npt.ArrayLike, *, column_names: Sequence[str] | None = None) -> FloatArray:
    """Centre every column and scale it to unit (population) variance.

    Parameters
    ----------
    X : array_like of shape (n_samples, n_features)
        Finite data.
    column_names : sequence of str, optional
        Names of the columns, used only to name a constant column in the error.

    Returns
    -------
    numpy.ndarray of shape (n_samples, n_features)
        ``(X - mean) / std`` with ``std`` computed with ``ddof=0``; a new array.

    Raises
    ------
    DataError
        ``X`` is not a finite non-empty 2-D array, or a column is constant (every
        value equal), which would divide by zero.
    """
    array = _as_matrix(X)
    _check_not_constant(array, column_names)
    mean = array.mean(axis=0)
    std = array.std(axis=0)
    return (array - mean) / std


def _check_not_constant(array: FloatArray, column_names: Sequence[str] | None) -> None:
    constant = np.flatnonzero(np.ptp(array, axis=0) == 0)
    if constant.size:
        j = int(constant[0])
        label = f"column {j}" + (f" ({column_names[j]!r})" if column_names is not None else "")
        raise DataError(f"cannot standardize: {label} is constant (every value is {float(array[0, j])!r})")


def pca(X: npt.ArrayLike, n_components: int) -> FloatArray:
    """Project data on its first principal components.

    The components are the leading right singular vectors of the centred data
    ``X - mean``; the returned scores are the centred data projected on them, so
    each output column has mean zero and the column variances are the squared
    singular values over ``n_samples``, in descending order.

    Parameters
    ----------
    X : array_like of shape (n_samples, n_features)
        Finite data (usually standardised first).
    n_components : int
        Number of components to keep, ``1 <= n_components <= min(n_samples, n_features)``.

    Returns
    -------
    numpy.ndarray of shape (n_samples, n_components)
        Principal component scores.

    Raises
    ------
    ConfigError
        ``n_components`` is not a positive integer.
    DataError
        ``X`` is not a finite non-empty 2-D array, or has fewer rows or columns
        than ``n_components``.

    Notes
    -----
    A singular vector is defined only up to sign.  To make the output
    deterministic across LAPACK builds, each component is flipped so that its
    largest-magnitude loading is positive (the first one if several tie).
    Cost: one thin SVD, O(n_samples * n_features * min(n_samples, n_features)).
    """
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) or n_components < 1:
        raise ConfigError(f"pca n_components must be a positive integer, got {n_components!r}")
    array = _as_matrix(X)
    n_samples, n_features = array.shape
    if n_components > min(n_samples, n_features):
        raise DataError(
            f"cannot keep {n_components} principal components of data with "
            f"{n_samples} rows and {n_features} columns"
        )
    centred = array - array.mean(axis=0)
    return centred @ _principal_axes(centred, n_components).T


def _principal_axes(centred: FloatArray, n_components: int) -> FloatArray:
    """(n_components, n_features) leading right singular vectors, largest loading positive."""
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    components = vt[:n_components]
    pivots = np.argmax(np.abs(components), axis=1)
    signs = np.sign(components[np.arange(n_components), pivots])
    return components * signs[:, np.newaxis]


@dataclass(frozen=True, eq=False)
class Preprocessing:
    """A fixed affine map of rows: standardise with given constants, then project.

    ``apply(X) = ((X - center) / scale - pca_center) @ components.T`` (each step only where
    its constants are given).  Fitted on some rows by :func:`fit_preprocessing`, or public
    constants from a scenario's ``[data.public]`` table: either way the same map for every
    row, so adding or removing one row moves no other row (which a map re-fitted on the
    rows themselves does, outside any differential privacy accounting).

    Attributes
    ----------
    center, scale : (d,) arrays or None
        Standardisation constants (scale > 0); None: no standardisation.
    components : (k, d) array or None
        Projection on k directions; None: no projection.
    pca_center : (d,) array or None
        Subtracted before projecting (the fitted rows' mean after standardising; None: 0).
    """

    center: FloatArray | None = None
    scale: FloatArray | None = None
    components: FloatArray | None = None
    pca_center: FloatArray | None = None

    @property
    def n_input(self) -> int | None:
        """Columns the map expects (None: it has no constants)."""
        for a in (self.center, self.pca_center):
            if a is not None:
                return int(a.shape[0])
        return None if self.components is None else int(self.components.shape[1])

    def apply(self, X: npt.ArrayLike) -> FloatArray:
        """Map rows (n, d) -> (n, k); DataError when the width does not match."""
        array = _as_matrix(X)
        width = self.n_input
        if width is not None and array.shape[1] != width:
            raise DataError(f"the preprocessing expects {width} columns, the data has {array.shape[1]}")
        if self.center is not None and self.scale is not None:
            array = (array - self.center) / self.scale
        if self.components is not None:
            if self.pca_center is not None:
                array = array - self.pca_center
            array = array @ self.components.T
        return array


def fit_preprocessing(
    X: npt.ArrayLike, *, standardize: bool, pca: int | None, column_names: Sequence[str] | None = None
) -> Preprocessing:
    """The map :func:`standardize` and :func:`pca` would apply to ``X``, fitted once, to apply to other rows.

    ``fit_preprocessing(X, ...).apply(X)`` equals ``pca(standardize(X), k)`` bit for bit.

    Raises
    ------
    DataError
        As :func:`standardize` and :func:`pca`.
    """
    array = _as_matrix(X)
    center = scale = components = pca_center = None
    if standardize:
        _check_not_constant(array, column_names)
        center, scale = array.mean(axis=0), array.std(axis=0)
        array = (array - center) / scale
    if pca is not None:
        if pca > min(array.shape):
            raise DataError(f"cannot keep {pca} principal components of data with {array.shape[0]} rows and {array.shape[1]} columns")
        pca_center = array.mean(axis=0)
        components = _principal_axes(array - pca_center, pca)
    return Preprocessing(center, scale, components, pca_center)


# ------------------------------------------------------------------------- splitting


def split_rows(
    X: npt.ArrayLike,
    n_nodes: int,
    *,
    how: str = "even",
    rng: np.random.Generator | None = None,
) -> list[FloatArray]:
    """Spread the rows of ``X`` over ``n_nodes`` nodes.

    Parameters
    ----------
    X : array_like of shape (n_samples, n_features)
        The data.
    n_nodes : int
        Number of nodes, at least 1.
    how : {"even", "contiguous", "random"}, default "even"
        ``"even"``: shuffle the rows with ``rng``, then cut them into ``n_nodes``
        blocks whose sizes differ by at most one (the first
        ``n_samples % n_nodes`` nodes get one row more).
        ``"contiguous"``: the same blocks without shuffling, in file order; does
        not use ``rng``.
        ``"random"``: every row goes to a node drawn uniformly at random, so
        sizes vary and a node may end up with no rows (which
        :func:`check_parts` then rejects).
    rng : numpy.random.Generator, optional
        Required for ``"even"`` and ``"random"``.

    Returns
    -------
    list of numpy.ndarray
        ``n_nodes`` arrays of shape (n_i, n_features), copies of the rows of ``X``.

    Raises
    ------
    ConfigError
        Unknown ``how``, ``n_nodes < 1``, or no ``rng`` where one is needed.
    DataError
        ``X`` is not 2-D, or holds fewer rows than nodes with ``"even"`` or
        ``"contiguous"``.

    Examples
    --------
    >>> parts = split_rows(np.zeros((195, 2)), 80, rng=np.random.default_rng(0))
    >>> sorted({len(p) for p in parts}), sum(len(p) == 3 for p in parts)
    ([2, 3], 35)
    """
    array = np.asarray(X, dtype=np.float64)
    if array.ndim != 2:
        raise DataError(f"X must be 2-D (n_samples, n_features), got shape {array.shape}")
    return [array[rows] for rows in split_indices(array.shape[0], n_nodes, how=how, rng=rng)]


def split_indices(n_samples: int, n_nodes: int, *, how: str = "even", rng: np.random.Generator | None = None) -> list[IntArray]:
    """Which rows :func:`split_rows` gives each node: node ``i`` holds ``X[indices[i]]``, in that order.

    The same draws from ``rng`` as :func:`split_rows` (which calls it), so a saved model can
    record the node of every row.  Raises as :func:`split_rows`.
    """
    if how not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {how!r}")
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1:
        raise ConfigError(f"n_nodes must be a positive integer, got {n_nodes!r}")
    if how != "contiguous" and rng is None:
        raise ConfigError(f"split {how!r} is random: pass rng=numpy.random.Generator")
    if how in ("even", "contiguous") and n_samples < n_nodes:
        raise DataError(f"cannot split {n_samples} rows over {n_nodes} nodes: some node would hold no rows")
    if how == "random":
        assert rng is not None
        owner = rng.integers(n_nodes, size=n_samples)
        return [np.flatnonzero(owner == node) for node in range(n_nodes)]
    order = np.arange(n_samples)
    if how == "even":
        assert rng is not None
        order = rng.permutation(n_samples)
    return list(np.array_split(order, n_nodes))


def relabel_ids(ids: Iterable[Hashable]) -> tuple[IntArray, tuple[Hashable, ...]]:
    """Number arbitrary node ids 0..n-1: ``(codes, labels)`` with ``labels[codes[r]] == ids[r]``.

    The order is documented because it decides which party is node 0: the distinct ids
    sorted (numbers numerically, text alphabetically), or, when they cannot be compared
    with each other (a mix of numbers and text), in order of first appearance.  Text that
    reads as integers (``"10"``, ``"2"``) is compared as integers (:func:`parse_ids`).

    Examples
    --------
    >>> codes, labels = relabel_ids(["b", "a", "b", "c"])
    >>> codes.tolist(), labels
    ([1, 0, 1, 2], ('a', 'b', 'c'))
    """
    values = list(ids)
    first: dict[Hashable, int] = {}
    for value in values:
        try:
            first.setdefault(value, len(first))
        except TypeError:
            raise ConfigError(f"node ids must be hashable, got {type(value).__name__}") from None
    labels: list[Hashable] = list(first)
    try:
        labels = sorted(labels)  # type: ignore[type-var]
    except TypeError:
        pass  # ids of mixed types: order of first appearance
    index = {label: i for i, label in enumerate(labels)}
    return np.fromiter((index[v] for v in values), dtype=np.int64, count=len(values)), tuple(labels)


def parse_ids(texts: Sequence[str]) -> list[int] | list[str]:
    """Node ids read from a file: integers when every one is an integer literal, else the text."""
    try:
        return [int(t) for t in texts]
    except ValueError:
        return list(texts)


def check_parts(parts: Sequence[npt.ArrayLike], n_components: int) -> None:
    """Check that per-node data can run a distributed EM with ``n_components`` components.

    Parameters
    ----------
    parts : sequence of array_like
        One array of shape (n_i, n_features) per node, node ``i`` at index ``i``.
    n_components : int
        Number of mixture components to be fitted.

    Raises
    ------
    DataError
        No nodes; a node's data is not a numeric 2-D array, holds no rows, no
        columns, or a NaN/infinite value; a node's width differs from node 0's
        (the message names the first such node and both widths); or all nodes
        together hold fewer rows than ``n_components``.
    """
    if len(parts) == 0:
        raise DataError("no nodes: the data was split over zero parts")
    width: int | None = None
    total = 0
    for node, part in enumerate(parts):
        try:
            array = np.asarray(part, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"node {node}: data is not a numeric array ({exc})") from None
        if array.ndim != 2:
            raise DataError(f"node {node}: data must be 2-D (n_samples, n_features), got shape {array.shape}")
        if array.shape[0] == 0:
            raise DataError(f"node {node} holds no rows")
        if array.shape[1] == 0:
            raise DataError(f"node {node} holds rows with no columns")
        if width is None:
            width = array.shape[1]
        elif array.shape[1] != width:
            raise DataError(f"node {node} has {array.shape[1]} columns but node 0 has {width}")
        if not np.all(np.isfinite(array)):
            row = int(np.argwhere(~np.isfinite(array))[0][0])
            raise DataError(f"node {node} holds a non-finite value (in its row {row})")
        total += array.shape[0]
    if total < n_components:
        raise DataError(f"all nodes together hold {total} rows, fewer than the {n_components} components to fit")


# ------------------------------------------------------------------------- synthetic


def synthetic_mixture(
    n_samples: int,
    *,
    n_features: int = 2,
    n_components: int = 3,
    separation: float = 3.0,
    rng: np.random.Generator,
) -> tuple[FloatArray, IntArray, GMMParams]:
    """Draw a data set from a random, well separated Gaussian mixture.

    Parameters
    ----------
    n_samples : int
        Number of rows, at least 1.
    n_features : int, default 2
        Dimension.
    n_components : int, default 3
        Number of clusters.
    separation : float, default 3.0
        Minimum distance between any two means, in units of the largest
        standard deviation a component can have along any direction (every
        covariance eigenvalue lies in [0.25, 1]).
    rng : numpy.random.Generator
        The only source of randomness.

    Returns
    -------
    X : numpy.ndarray of shape (n_samples, n_features)
        The samples, in random order.
    labels : numpy.ndarray of shape (n_samples,), int64
        The component each row was drawn from.
    params : p2pem.gmm.GMMParams
        The true mixture.

    Raises
    ------
    ConfigError
        A size is not a positive integer or ``separation`` is negative or not finite.

    Notes
    -----
    Covariances are ``Q diag(lambda) Q^T`` with ``Q`` a random orthogonal matrix
    (QR of a Gaussian matrix) and ``lambda ~ U[0.25, 1]``.  Means are drawn one at
    a time uniformly in a cube, rejecting a draw closer than ``separation`` to an
    earlier mean; the cube grows when draws keep being rejected.  Weights are
    ``1/(2 K) + Dirichlet(1, ..., 1) / 2``, so none is below ``1/(2 K)``.  A
    component may still receive no rows when ``n_samples`` is small.
    """
    for label, value in (("n_samples", n_samples), ("n_features", n_features), ("n_components", n_components)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"synthetic_mixture: {label} must be a positive integer, got {value!r}")
    if not (math.isfinite(separation) and separation >= 0):
        raise ConfigError(f"synthetic_mixture: separation must be a finite number >= 0, got {separation!r}")

    covariances = np.empty((n_components, n_features, n_features))
    for k in range(n_components):
        q, r = np.linalg.qr(rng.standard_normal((n_features, n_features)))
        q = q * np.sign(np.diag(r))  # Haar-distributed rotation
        eigenvalues = rng.uniform(0.25, 1.0, size=n_features)
        cov = (q * eigenvalues) @ q.T
        covariances[k] = (cov + cov.T) / 2

    means = _separated_points(n_components, n_features, separation, rng)
    weights = 0.5 / n_components + 0.5 * rng.dirichlet(np.ones(n_components))

    labels = rng.choice(n_components, size=n_samples, p=weights).astype(np.int64)
    noise = rng.standard_normal((n_samples, n_features))
    chol = np.linalg.cholesky(covariances)
    X = means[labels] + np.einsum("nij,nj->ni", chol[labels], noise)
    return X, labels, GMMParams(weights=weights, means=means, covariances=covariances)


def _separated_points(n_points: int, n_features: int, separation: float, rng: np.random.Generator) -> FloatArray:
    side = max(separation, 1.0) * 1.5 * max(1.0, n_points ** (1.0 / n_features))
    points = np.empty((n_points, n_features))
    placed = 0
    while placed < n_points:
        for _ in range(100):
            candidate = rng.uniform(-side / 2, side / 2, size=n_features)
            if placed == 0 or np.min(np.linalg.norm(points[:placed] - candidate, axis=1)) >= separation:
                points[placed] = candidate
                placed += 1
                break
        else:
            side *= 1.25
    return points
