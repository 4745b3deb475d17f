"""What a distributed estimator's ``fit`` and ``predict`` take, checked as scikit-learn checks it.

:func:`node_split` turns any of ``fit``'s three forms into per-node parts:

* one array per node (``fit([X0, X1, ...])``);
* all rows and the node of each (``fit(X, node_ids=site)``): ids of any hashable kind,
  relabelled to nodes ``0..n-1`` by :func:`p2pem.data.relabel_ids` (sorted ids);
* all rows alone (``fit(X)``): spread evenly over ``n_nodes`` simulated nodes with the
  ``"data"`` stream of the seed, as a scenario with ``split = "even"`` spreads them.

:func:`simulated_graph` draws the graph a fit uses when it is given none; :func:`check_rows`
validates the rows a fitted model is asked about, with scikit-learn's messages and warnings
(so its estimator checks and model-selection tools recognise them).  Everything raises
p2pem's errors, which are ``ValueError`` s as scikit-learn expects.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.data import relabel_ids, split_indices
from p2pem.errors import ConfigError, DataError, P2pemError
from p2pem.graphs import geometric_graph
from p2pem.protocols import ProtocolSpec

__all__ = ["NodeSplit", "NotNumericError", "check_rows", "node_split", "simulated_graph"]

FloatArray = npt.NDArray[np.float64]


class NotNumericError(DataError, TypeError):
    """Rows that hold something other than numbers (a dict, an object): a ``TypeError`` too, as numpy's."""


@dataclass(frozen=True, eq=False)
class NodeSplit:
    """Per-node parts and where every input row went.

    Attributes
    ----------
    parts : list of (n_i, d) arrays
        Node ``i``'s rows.
    row_nodes : (n_rows,) int array
        The node of every input row, in input order (parts given: their rows concatenated).
    node_ids : tuple or None
        The ids given for nodes ``0..n-1`` (``node_ids=``), None otherwise.
    feature_names : tuple of str or None
        Column names of a DataFrame ``X``.
    """

    parts: list[FloatArray]
    row_nodes: npt.NDArray[np.int64]
    node_ids: tuple[Any, ...] | None = None
    feature_names: tuple[str, ...] | None = None


def node_split(X: Any, *, node_ids: Any = None, n_nodes: int, rng: np.random.Generator, estimator: str) -> NodeSplit:
    """``fit``'s input as per-node parts (see the module docstring).

    Raises
    ------
    DataError
        Not numeric, not 2-D, complex, NaN or infinite, empty, one row, or ``node_ids`` of
        the wrong length (scikit-learn's wording where its checks look for it).
    ConfigError
        ``n_nodes`` is not a positive integer.
    """
    if _is_parts(X):
        if node_ids is not None:
            raise DataError("node_ids names each row's node; with one array per node the nodes are given already")
        parts = [_matrix(p, f"node {i}'s rows") for i, p in enumerate(X)]
        rows = np.repeat(np.arange(len(parts), dtype=np.int64), [len(p) for p in parts])
        return NodeSplit(parts, rows)
    names = feature_names(X)
    array = _matrix(X, "X")
    n = array.shape[0]
    if n < 2:
        raise DataError(f"{estimator} needs at least 2 rows, got n_samples = {n}")
    if node_ids is not None:
        ids = list(np.asarray(node_ids, dtype=object).ravel()) if not isinstance(node_ids, (list, tuple)) else list(node_ids)
        if len(ids) != n:
            raise DataError(f"node_ids must name the node of every row of X ({n}), got {len(ids)}")
        codes, labels = relabel_ids(ids)
        parts = [array[codes == i] for i in range(len(labels))]
        return NodeSplit(parts, codes, labels, names)
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1:
        raise ConfigError(f"n_nodes must be a positive integer, got {n_nodes!r}")
    blocks = split_indices(n, min(int(n_nodes), n), how="even", rng=rng)
    rows = np.empty(n, dtype=np.int64)
    for node, block in enumerate(blocks):
        rows[block] = node
    return NodeSplit([array[b] for b in blocks], rows, None, names)


def simulated_graph(n_nodes: int, spec: ProtocolSpec, rng: np.random.Generator, *, tries: int = 20) -> nx.Graph:
    """A random geometric graph over ``n_nodes`` that ``spec`` can run on, drawn from ``rng``.

    The first draw is a scenario's graph of the same seed (``kind = "geometric"``); a draw
    the protocol refuses (pdmm-sp needs a cycle, secure-sum a Hamiltonian cycle) is drawn
    again from the same stream.

    Raises
    ------
    GraphError
        The protocol refuses ``tries`` draws (e.g. pdmm-sp over 2 nodes: no graph has a cycle).
    """
    if n_nodes == 1:
        g = nx.Graph()
        g.add_node(0)
        return g
    error: P2pemError | None = None
    for _ in range(tries):
        g = geometric_graph(n_nodes, rng=rng)
        try:
            spec.validate(g)
            return g
        except ConfigError as exc:
            error = exc
    assert error is not None
    raise type(error)(f"{spec.name} cannot run over {n_nodes} simulated nodes ({error}): use more nodes, or another protocol")


def feature_names(X: Any) -> tuple[str, ...] | None:
    """A DataFrame's column names (scikit-learn's ``feature_names_in_``), when all are strings."""
    columns = getattr(X, "columns", None)
    if columns is None:
        return None
    names = list(columns)
    return tuple(names) if names and all(isinstance(c, str) for c in names) else None


def check_rows(X: Any, *, n_features: int, names: Sequence[str] | None, estimator: str, unnamed_ok: bool = False) -> FloatArray:
    """Rows a fitted model is asked about: numeric, 2-D, finite, ``n_features`` wide.

    Warns (``UserWarning``) when ``X``'s feature names and the fitted ones disagree, in
    scikit-learn's words; ``unnamed_ok``: rows without names are taken (a model loaded from
    a file, whose names came from a CSV header, scores plain arrays).
    """
    given = feature_names(X)
    if names is not None and given is None and not unnamed_ok:
        warnings.warn(f"X does not have valid feature names, but {estimator} was fitted with feature names", UserWarning, stacklevel=3)
    elif names is None and given is not None:
        warnings.warn(f"X has feature names, but {estimator} was fitted without feature names", UserWarning, stacklevel=3)
    elif names is not None and given is not None and tuple(given) != tuple(names):
        warnings.warn("The feature names should match those that were passed during fit.", UserWarning, stacklevel=3)
    array = _matrix(X, "X", empty_ok=False)
    if array.shape[1] != n_features:
        raise DataError(f"X has {array.shape[1]} features, but {estimator} is expecting {n_features} features as input.")
    return array


# ------------------------------------------------------------------------------ helpers


def _is_parts(X: Any) -> bool:
    """One array per node: a list or tuple whose items are 2-D (a list of rows is 2-D data)."""
    if not isinstance(X, (list, tuple)) or not X:
        return False
    first = X[0]
    return getattr(first, "ndim", None) == 2 or (isinstance(first, (list, tuple)) and bool(first) and isinstance(first[0], (list, tuple)))


def _matrix(X: Any, what: str, *, empty_ok: bool = False) -> FloatArray:
    """``X`` as a finite 2-D float64 array, with the messages scikit-learn's checks look for."""
    if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
        raise DataError(f"{what}: sparse data is not supported; pass a dense array")
    raw = np.asarray(X)
    if np.iscomplexobj(raw):
        raise DataError(f"{what}: Complex data not supported")
    try:
        array = np.asarray(raw, dtype=np.float64)
    except TypeError as exc:
        raise NotNumericError(f"{what} holds something that is not a number ({exc})") from None
    except ValueError as exc:
        raise DataError(f"{what} is not a numeric array ({exc})") from None
    if array.ndim != 2:
        hint = ": Reshape your data with X.reshape(-1, 1) (a single feature) or X.reshape(1, -1) (a single row)" if array.ndim == 1 else ""
        raise DataError(f"{what} must be a 2-D array (n_samples, n_features), got shape {array.shape}{hint}")
    if array.shape[1] == 0:
        raise DataError(f"{what} has 0 feature(s) (shape={array.shape}) while a minimum of 1 is required.")
    if array.shape[0] == 0 and not empty_ok:
        raise DataError(f"{what} has 0 sample(s) (shape={array.shape}) while a minimum of 1 is required.")
    if not np.all(np.isfinite(array)):
        row, col = np.argwhere(~np.isfinite(array))[0]
        raise DataError(f"{what} holds NaN or infinity (row {row}, column {col})")
    return array
