"""Build what a scenario describes: the per-node data, the graph, the EM settings, the protocols.

:mod:`p2pem.scenario` parses a scenario file into frozen dataclasses; the functions here turn
those into the objects a run needs, each from the scenario's own random stream
(:mod:`p2pem.streams`), so the result depends only on the scenario (and the data file).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.data import check_parts, load_table, parse_ids, pca, read_text_column, relabel_ids, split_rows, standardize, synthetic_mixture
from p2pem.data import split_indices as data_split_indices
from p2pem.dp.protocols import DPProtocol
from p2pem.em import EMSettings
from p2pem.errors import ConfigError, DataError, GraphError
from p2pem.graphs import geometric_graph, graph_from_edges
from p2pem.protocols import ProtocolSpec
from p2pem.registry import make_protocol
from p2pem.scenario import Scenario
from p2pem.streams import init_seed
from p2pem.tabular import Table, read_table, read_table_parties

log = logging.getLogger(__name__)

__all__ = [
    "build_graph", "build_protocols", "em_settings", "feature_columns", "load_data", "load_table_parts", "load_tables", "prepare_rows", "row_nodes", "split_indices",
    "split_prepared", "split_table", "validate_protocol", "with_public_box",
]


def load_data(scenario: Scenario) -> list[npt.NDArray[np.float64]]:
    """Build the per-node data of a scenario.

    Reads the CSV file (or draws the synthetic mixture from the ``"data"``
    stream), standardises, projects on principal components, splits the rows
    over ``scenario.graph.n_nodes`` nodes with the same ``"data"`` stream and
    validates the parts with :func:`p2pem.data.check_parts`.  The result depends
    only on the scenario (and the data file).

    Parameters
    ----------
    scenario : Scenario

    Returns
    -------
    list of numpy.ndarray
        Node ``i``'s rows at index ``i``, each of shape (n_i, n_features).

    Raises
    ------
    DataError
        The data cannot be read or prepared, or a node ends up without rows
        (prefixed with the scenario file unless it already names the data file).
    ConfigError
        ``em.init`` does not match the width of the prepared data.
    """
    rng = np.random.default_rng(scenario.streams()["data"])
    X, _ = prepare_rows(scenario, rng=rng)
    parts = split_prepared(scenario, X, rng)
    sizes = [len(p) for p in parts]
    how = f"by column {scenario.data.node_column!r}" if scenario.data.node_column else f"split {scenario.data.split!r}"
    log.info("%s: %d rows x %d features over %d nodes (%s, %d..%d rows per node)", scenario.name, len(X), X.shape[1], len(parts), how,
             min(sizes), max(sizes))
    return parts


def prepare_rows(
    scenario: Scenario, *, label_column: str | None = None, rng: np.random.Generator | None = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64] | None]:
    """The scenario's rows, read (or drawn) and prepared, before they are split over nodes.

    Parameters
    ----------
    scenario : Scenario
    label_column : str, optional
        Also return this CSV column (e.g. a class label), row-aligned with the features.
    rng : numpy.random.Generator, optional
        The ``"data"`` stream's generator (synthetic data is drawn from it); a fresh one
        from the scenario when omitted.

    Returns
    -------
    X : (n_samples, n_features) array
    labels : (n_samples,) array or None
    """
    cfg = scenario.data
    if rng is None:
        rng = np.random.default_rng(scenario.streams()["data"])
    names: Sequence[str] | None = None
    labels = None
    if cfg.encoding is not None:
        if label_column is not None:
            raise ConfigError(f"{scenario.path}: a label column of a table under a schema is one of its categorical columns")
        train, _ = _tables(scenario, rng)
        return cfg.encoding.rows(train), None
    if cfg.source == "csv":
        assert cfg.path is not None
        drop = cfg.drop_columns if cfg.node_column is None else (*cfg.drop_columns, cfg.node_column)
        X, names = load_table(cfg.path, columns=cfg.columns, drop_columns=drop, header=cfg.header)
        if label_column is not None:
            labels = load_table(cfg.path, columns=[label_column], header=cfg.header)[0][:, 0]
    else:
        if label_column is not None:
            raise ConfigError(f"{scenario.path}: a label column needs csv data")
        assert cfg.n_samples is not None and cfg.n_features is not None and cfg.n_components is not None
        assert cfg.separation is not None
        X, _, _ = synthetic_mixture(
            cfg.n_samples,
            n_features=cfg.n_features,
            n_components=cfg.n_components,
            separation=cfg.separation,
            rng=rng,
        )
    log.info("%s: read %s: %d rows x %d columns", scenario.name, cfg.path if cfg.source == "csv" else "synthetic mixture", *X.shape)
    try:
        if cfg.public is not None:
            X = cfg.public.apply(X)
        else:
            if cfg.standardize:
                X = standardize(X, column_names=names)
            if cfg.pca is not None:
                X = pca(X, cfg.pca)
    except DataError as exc:
        where = "'data.public': " if cfg.public is not None else ""
        raise DataError(f"{scenario.path}: {where}{exc}") from exc
    return X, labels


def feature_columns(scenario: Scenario) -> tuple[int, tuple[str, ...] | None]:
    """The public width of the rows the model sees, and their column names where they have them.

    What a deployment's roster records so that every node can check its own data file before
    it goes online: CSV data that is read, and at most standardised, keeps its column names
    (the kept columns, the node column left out); a projection (``pca``), a schema's
    encoding or synthetic data gives the width alone (names ``None``).

    Raises
    ------
    DataError
        The data file cannot be read.
    """
    cfg = scenario.data
    projected = cfg.pca is not None or (cfg.public is not None and cfg.public.components is not None)
    if cfg.source == "csv" and cfg.encoding is None and not projected:
        assert cfg.path is not None
        drop = cfg.drop_columns if cfg.node_column is None else (*cfg.drop_columns, cfg.node_column)
        X, names = load_table(cfg.path, columns=cfg.columns, drop_columns=drop, header=cfg.header)
        return int(X.shape[1]), tuple(names)
    X, _ = prepare_rows(scenario)
    return int(X.shape[1]), None


def load_tables(scenario: Scenario) -> tuple[Table, Table | None]:
    """The training rows and the held-out test rows of a scenario whose data has a schema.

    The training rows are what :func:`load_data` encodes and spreads over the nodes (the
    same rows, in the same order); the test rows are ``[data] test`` read under the schema,
    or the ``test_fraction`` of the rows held out with the ``"data"`` stream (drawn before
    the split over nodes), or None.

    Raises
    ------
    ConfigError
        The scenario's data has no schema.
    DataError
        A file cannot be read under the schema (naming the file, line, column and value).
    """
    if scenario.data.schema is None:
        raise ConfigError(f"{scenario.path}: the data has no schema ([data] schema): it is not a table of named, typed columns")
    return _tables(scenario, np.random.default_rng(scenario.streams()["data"]))


def load_table_parts(scenario: Scenario) -> tuple[list[Table], Table | None]:
    """Every node's training rows and the held-out test rows of a scenario whose data has a schema.

    The same rows on the same nodes as :func:`load_data` (the ``"data"`` stream draws the
    test split, then the split over nodes), as tables under the schema: what a synthesizer
    that reads tables rather than encoded rows (a Bayesian-network release) fits.

    Raises
    ------
    ConfigError, DataError
        As :func:`load_tables`; a node without rows.
    """
    if scenario.data.schema is None:
        raise ConfigError(f"{scenario.path}: the data has no schema ([data] schema): it is not a table of named, typed columns")
    rng = np.random.default_rng(scenario.streams()["data"])
    train, test, owners = _tables_owned(scenario, rng)
    if owners is not None:  # a node column: each party's own rows, in file order
        parts = [train.take(np.flatnonzero(owners == node)) for node in range(scenario.graph.n_nodes)]
        empty = [str(scenario.data.node_ids[i]) for i, p in enumerate(parts) if p.n_rows == 0] if scenario.data.node_ids else []
        if empty:
            raise DataError(f"{scenario.path}: parties {', '.join(map(repr, empty[:5]))} of 'data.node_column' keep no training row")
        return parts, test
    try:
        return split_table(train, scenario.graph.n_nodes, how=scenario.data.split, rng=rng), test
    except DataError as exc:
        raise DataError(f"{scenario.path}: {exc}") from exc


def _tables(scenario: Scenario, rng: np.random.Generator) -> tuple[Table, Table | None]:
    train, test, _ = _tables_owned(scenario, rng)
    return train, test


def _tables_owned(scenario: Scenario, rng: np.random.Generator) -> tuple[Table, Table | None, npt.NDArray[np.int64] | None]:
    """The training rows, the test rows and, with a node column, the node of every training row."""
    cfg = scenario.data
    assert cfg.path is not None and cfg.schema is not None  # a schema needs csv data
    owners = None
    if cfg.node_column is not None:
        rows, parties = read_table_parties(cfg.path, cfg.schema, cfg.node_column)
        owners, labels = relabel_ids(parse_ids(parties))
        if labels != cfg.node_ids:
            raise DataError(f"{cfg.path}: the parties of column {cfg.node_column!r} changed since {scenario.path} was loaded")
    else:
        rows = read_table(cfg.path, cfg.schema)
    if cfg.test is not None:
        return rows, read_table(cfg.test, cfg.schema), owners
    if cfg.test_fraction is None:
        return rows, None, owners
    n_test = int(round(cfg.test_fraction * rows.n_rows))
    if not 0 < n_test < rows.n_rows:
        raise DataError(f"{scenario.path}: 'data.test_fraction' = {cfg.test_fraction} of {rows.n_rows} rows leaves no test or no training row")
    held = np.zeros(rows.n_rows, dtype=bool)
    held[rng.permutation(rows.n_rows)[:n_test]] = True
    return rows.take(~held), rows.take(held), None if owners is None else owners[~held]


def split_prepared(
    scenario: Scenario, X: npt.NDArray[np.float64], rng: np.random.Generator, *, rows: npt.NDArray[np.intp] | None = None
) -> list[npt.NDArray[np.float64]]:
    """Split prepared rows over the scenario's nodes and validate them (see :func:`load_data`).

    ``rows``: which of the scenario's rows ``X`` holds (default: all, in file order); with a
    node column they keep their parties.
    """
    try:
        parts = [X[indices] for indices in split_indices(scenario, len(X), rng, rows=rows)]
        check_parts(parts, scenario.em.n_components)
    except DataError as exc:
        raise DataError(f"{scenario.path}: {exc}") from exc
    init, family = scenario.em.init, scenario.em.family
    if init is not None and scenario.data.encoding is None:  # under a schema the family checks its columns when parsed
        key = next(key for key, ndim in family.param_keys if ndim == 2)  # the first (K, d) array: means, locations
        width = np.asarray(getattr(init, key)).shape[1]
        if width != X.shape[1]:
            raise ConfigError(f"{scenario.path}: 'em.init.{key}' has {width} columns but the prepared data has {X.shape[1]} features")
    return parts


def split_indices(
    scenario: Scenario, n_rows: int, rng: np.random.Generator, *, rows: npt.NDArray[np.intp] | None = None
) -> list[npt.NDArray[np.int64]]:
    """Which of ``n_rows`` prepared rows each node holds (node ``i``: rows ``indices[i]``, in that order).

    By the scenario's node column (rows in file order; under a schema, the training rows), else :func:`p2pem.data.split_indices`
    with the scenario's ``split`` (drawing from ``rng``, the ``"data"`` stream after the rows).
    ``rows``: which of the scenario's rows the ``n_rows`` are (default: all, in file order).
    """
    owners = row_nodes(scenario)
    if owners is None:
        return data_split_indices(n_rows, scenario.graph.n_nodes, how=scenario.data.split, rng=rng)
    owners = owners if rows is None else owners[rows]
    return [np.flatnonzero(owners == node) for node in range(scenario.graph.n_nodes)]


def row_nodes(scenario: Scenario) -> npt.NDArray[np.int64] | None:
    """The node of every data row by the scenario's ``[data] node_column``; None without one.

    Node ``i`` is the party ``scenario.data.node_ids[i]`` (:func:`p2pem.data.relabel_ids`).
    """
    cfg = scenario.data
    if cfg.node_column is None:
        return None
    if cfg.schema is not None:  # the training rows under the schema (rows with a missing value and test rows left out)
        return _tables_owned(scenario, np.random.default_rng(scenario.streams()["data"]))[2]
    assert cfg.path is not None and cfg.node_ids is not None
    codes, labels = relabel_ids(parse_ids(read_text_column(cfg.path, cfg.node_column, header=cfg.header)))
    if labels != cfg.node_ids:
        raise DataError(f"{cfg.path}: the parties of column {cfg.node_column!r} changed since {scenario.path} was loaded")
    return codes


def build_graph(scenario: Scenario) -> nx.Graph:
    """The scenario's communication graph (drawn from its "graph" stream when geometric)."""
    cfg = scenario.graph
    if cfg.kind == "edges":
        assert cfg.edges is not None  # the scenario loader requires edges for kind = "edges"
        return graph_from_edges(cfg.edges, cfg.n_nodes)
    try:
        return geometric_graph(cfg.n_nodes, radius=cfg.radius, rng=np.random.default_rng(scenario.streams()["graph"]))
    except GraphError as exc:
        raise GraphError(f"{scenario.path}: 'graph.radius' = {cfg.radius:.4g}: {exc}") from None


def validate_protocol(scenario: Scenario, graph: nx.Graph, spec: ProtocolSpec) -> None:
    """``spec.validate(graph)``, its error naming the scenario file and the protocol's table.

    ``FILE: 'protocols[0]' (pdmm-sp): the graph has no cycle ...``: the graph and the
    protocol are both the scenario's choice, so the message points at both.
    """
    try:
        spec.validate(graph)
    except ConfigError as exc:
        index = next((i for i, p in enumerate(scenario.protocols) if p.name == spec.name), None)
        where = f"'protocols[{index}]' ({spec.name})" if index is not None else spec.name
        graph_key = "'graph.path'" if scenario.graph.path is not None else "'graph.edges'" if scenario.graph.kind == "edges" else "'graph'"
        raise type(exc)(f"{scenario.path}: {where} on {graph_key}: {exc}") from None


def em_settings(scenario: Scenario) -> EMSettings:
    """Public EM settings; the init seed comes from the scenario's "init" stream."""
    em = scenario.em
    return EMSettings(em.n_components, em.max_iter, em.tol, em.reg_covar, em.init, init_seed(scenario.streams()), family=em.family)


def build_protocols(scenario: Scenario) -> list[ProtocolSpec]:
    """The scenario's protocol specs, in order (a private one under a schema: :func:`with_public_box`)."""
    return [with_public_box(scenario, make_protocol(p.name, dict(p.params))) for p in scenario.protocols]


def with_public_box(scenario: Scenario, spec: ProtocolSpec) -> ProtocolSpec:
    """``spec``, with ``bound = 1`` when it is private, gives no bound and the data has a schema.

    A schema's encoding maps every Gaussian-modelled column onto [-1, 1] by its public range
    (:class:`p2pem.families.encoding.TableEncoding`), so that box is public knowledge; reading
    a bound off the data instead would make the run not differentially private.
    """
    if scenario.data.encoding is not None and isinstance(spec, DPProtocol) and spec.bound is None:
        return dataclasses.replace(spec, bound=1.0)
    return spec


def split_table(train: Table, n_nodes: int, *, how: str = "even", rng: np.random.Generator) -> list[Table]:
    """The rows of ``train`` spread over ``n_nodes`` nodes, as :func:`p2pem.data.split_rows` spreads rows.

    Raises
    ------
    DataError
        A node would hold no rows.
    """
    index = split_rows(np.arange(train.n_rows)[:, None], n_nodes, how=how, rng=rng)
    parts = [train.take(rows[:, 0].astype(np.int64)) for rows in index]
    if any(p.n_rows == 0 for p in parts):
        raise DataError(f"a node holds no rows ({train.n_rows} rows over {n_nodes} nodes, split {how!r})")
    return parts
