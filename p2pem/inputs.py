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
from p2pem.errors import ConfigError, DataError, GraphError, P2pemError
from p2pem.graphs import geometric_graph
from p2pem.protocols import ProtocolSpec

__all__ = ["NodeSplit", "NotNumericError", "check_rows", "graph_over_parties", "node_split", "simulated_graph"]

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
        if isinstance(node_ids, str):
            hint = (f"; it is a column of X: pass node_ids=X[{node_ids!r}] and leave the column out of X "
                    f"(X.drop(columns={node_ids!r}))" if names is not None and node_ids in names else "")
            raise DataError(f"node_ids must name the party of every row of X (an array of {n} ids), got the string {node_ids!r}{hint}")
        ids = list(np.asarray(node_ids, dtype=object).ravel()) if not isinstance(node_ids, (list, tuple)) else list(node_ids)
        if len(ids) != n:
            raise DataError(f"node_ids must name the node of every row of X ({n}), got {len(ids)}")
        missing = next((r for r, v in enumerate(ids) if _is_missing(v)), None)
        if missing is not None:
            raise DataError(f"node_ids has no party for row {missing} ({ids[missing]!r}): every row needs the id of the party that holds it")
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


def graph_over_parties(graph: nx.Graph, node_ids: Sequence[Any] | None, n_parts: int) -> nx.Graph:
    """``graph`` over nodes ``0..n-1``: as given, or relabelled from the parties' ids of ``node_ids``.

    Raises
    ------
    GraphError
        The graph's nodes are neither ``0..n-1`` nor exactly the parties of ``node_ids``.
    """
    nodes = set(graph.nodes)
    if nodes == set(range(n_parts)):
        return graph
    if node_ids is not None and nodes == set(node_ids):
        return nx.relabel_nodes(graph, {label: i for i, label in enumerate(node_ids)})
    parties = f"the {n_parts} parties of node_ids or " if node_ids is not None else ""
    stray = sorted(map(repr, nodes - set(range(n_parts)) - set(node_ids or ())))[:5]
    raise GraphError(f"graph's nodes must be {parties}0..{n_parts - 1}; unknown node(s) {', '.join(stray) or '(some missing)'}")


def feature_names(X: Any) -> tuple[str, ...] | None:
    """A DataFrame's column names (scikit-learn's ``feature_names_in_``), when all are strings."""
    columns = getattr(X, "columns", None)
    if columns is None:
        return None
    names = list(columns)
    return tuple(names) if names and all(isinstance(c, str) for c in names) else None


def check_rows(X: Any, *, n_features: int, names: Sequence[str] | None, estimator: str, unnamed_ok: bool = False) -> FloatArray:
    """Rows a fitted model is asked about: numeric, 2-D, finite, ``n_features`` wide.

    Raises a DataError when ``X``'s feature names differ from the fitted ones, or come in
    another order, and warns (``UserWarning``) when only one of them has names, in
    scikit-learn's words; ``unnamed_ok``: rows without names are taken (a model loaded from
    a file, whose names came from a CSV header, scores plain arrays).
    """
    given = feature_names(X)
    if names is not None and given is None and not unnamed_ok:
        warnings.warn(f"X does not have valid feature names, but {estimator} was fitted with feature names", UserWarning, stacklevel=3)
    elif names is None and given is not None:
        warnings.warn(f"X has feature names, but {estimator} was fitted without feature names", UserWarning, stacklevel=3)
    elif names is not None and given is not None and tuple(given) != tuple(names):
        raise DataError(_names_differ(tuple(names), tuple(given)))
    array = _matrix(X, "X", empty_ok=False)
    if array.shape[1] != n_features:
        raise DataError(f"X has {array.shape[1]} features, but {estimator} is expecting {n_features} features as input.")
    return array


# ------------------------------------------------------------------------------ helpers


def _names_differ(fitted: tuple[str, ...], given: tuple[str, ...]) -> str:
    """scikit-learn's error, word for word, for columns other than the fitted ones or the same
    in another order (``BaseEstimator._check_feature_names``): rows are never reordered or
    predicted on silently."""
    unseen = sorted(set(given) - set(fitted))
    gone = sorted(set(fitted) - set(given))
    message = "The feature names should match those that were passed during fit.\n"
    for title, items in (("Feature names unseen at fit time:", unseen), ("Feature names seen at fit time, yet now missing:", gone)):
        if items:
            message += title + "\n" + "".join(f"- {c}\n" for c in items[:5]) + ("- ...\n" if len(items) > 5 else "")
    if not unseen and not gone:
        message += "Feature names must be in the same order as they were in fit.\n"
    return message


def _is_missing(value: Any) -> bool:
    """None, NaN, pandas' NA or NaT: no party at all (not a party named NaN)."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):
        return False



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
