"""Scenario files: one TOML file describes one reproducible experiment.

A scenario names the data and how it is preprocessed and split over nodes, the
communication graph, the EM settings, the protocols to run (in order) and the one
seed from which every random stream is derived.  :func:`load_scenario` turns the
file into frozen dataclasses and rejects anything it does not understand with a
one-line :class:`~p2pem.errors.ConfigError` naming the file and the dotted key
(``scenarios/x.toml: unknown key 'em.max_iters' (known: ...)``).  This module only
*parses*; :mod:`p2pem.builders` builds the data, graph, settings and protocols of a
scenario.

Schema (keys not listed are errors; ``[leakage]`` is free-form)::

    name = "parkinsons"            # optional, default: the file's stem
    seed = 1                       # required integer >= 0

    [data]
    source = "csv"                 # required: "csv" | "synthetic"
    path = "../data/x.csv"         # csv, required; relative to this file's folder
    columns = ["a", "b"]           # csv, optional: keep these columns
    drop_columns = ["name"]        # csv, optional: drop these columns
    header = true                  # csv, default true: the first row names the columns;
                                   #   false: no header row, columns named "0", "1", ...
    node_column = "site"           # csv, optional: the party of each row (ids of any
                                   #   kind; nodes 0..n-1 in sorted id order, see
                                   #   p2pem.data.relabel_ids); not a feature; no split;
                                   #   with a schema too (not a schema column): each
                                   #   party's rows are exactly its own
    standardize = true             # optional, default false
    pca = 2                        # optional: keep that many principal components
    [data.public]                  # optional: public preprocessing constants (standardize = true)
    center = [...]                 #   per column, subtracted
    scale = [...]                  #   per column (> 0), divided by
    components = [[...], ...]      #   with pca = k: k directions over the columns
    split = "even"                 # optional, default "even": "even" | "contiguous" | "random"
    n_samples = 600                # synthetic, required
    n_features = 2                 # synthetic, default 2
    n_components = 3               # synthetic, default 3 (true number of clusters)
    separation = 3.0               # synthetic, default 3.0
    schema = "../data/x.schema.toml"  # csv, optional: a public schema of mixed-type columns
                                   # (p2pem.tabular), or an inline table [data.schema];
                                   # the rows are then read under it and fitted by the
                                   # "mixed" family (no columns/standardize/pca)
    test = "../data/x.test"        # schema, optional: held-out real rows (same schema)
    test_fraction = 0.2            # schema, optional: or hold out this share of the rows
    binned = ["hours"]             # schema, optional: continuous columns modelled as
                                   # categorical over their public bins
    atoms = { gain = [0] }         # schema, optional: public values of binned columns
                                   # modelled as categories of their own
    n_bins = 10                    # schema, default 10: bins per binned column

    [graph]
    kind = "geometric"             # "geometric" | "edges"; default "edges" with edges/path
    n_nodes = 80                   # geometric: required, >= 2 (default with node_column:
                                   #   the number of parties); edges: optional check
    radius = 0.3                   # geometric, optional, default sqrt(2 log n / n)
    edges = [[0, 1], [1, 2]]       # edges: ids 0..n-1, connected, no repeats
    path = "graph.csv"             # edges, or this instead: a CSV edge list (header row,
                                   #   two node ids per row) or a .graphml file; ids as in
                                   #   data.node_column when it is given, else any ids
                                   #   (nodes 0..n-1 in sorted id order)

    [em]
    n_components = 3               # required
    max_iter = 100                 # default 100 (0 allowed: initialise only)
    tol = 0.0                      # default 0.0
    reg_covar = 1e-6               # default 1e-6
    family = "gaussian"            # default "gaussian" ("mixed" with a [data] schema): any
                                   # name of p2pem.families.FAMILIES, or a table [em.family]
                                   # with name = ... and its settings; "mixed":
                                   # covariance = "diag" | "full", stratify = "column",
                                   # strata_weights = [public shares] (see MixedFamily)
    [em.init]                      # optional; all of the family's keys together
    weights = [...]                #   gaussian: weights, means, covariances
    means = [[...], ...]           #   skew-normal: weights, locations, scales, shapes
                                   #   mixed: weights, means, covariances, probabilities
    covariances = [[[...]], ...]

    [[protocols]]                  # one or more, run in order
    name = "pdmm-sp"               # any name of p2pem.registry.PROTOCOLS
    mode = "sync"                  # every other key is a protocol parameter,
                                   # checked by p2pem.registry.make_protocol

    [tradeoff]                     # optional: settings of `p2pem tradeoff`
    epsilons = [0.1, 1.0, 10.0]    #   epsilon grid of the private protocols
    n_seeds = 10                   #   protocol seeds per (protocol, epsilon)
    test_fraction = 0.2            #   held-out rows (drawn from the "montecarlo" stream)
    classify = "status"            #   optional: label column of the Bayes classifier
    class_components = 2           #   mixture components per class
    families = ["gaussian", "skew-normal"]  # optional: sweep these families (default [em]'s)
                                   #   (see TradeoffConfig)

    [leakage]                      # optional, free-form
    [synth]                        # optional, free-form: settings of `p2pem synth`
                                   #   (validated by p2pem.synth.config)
    [bayesnet]                     # optional, free-form: a Bayesian-network release's settings
                                   #   ([synth] model = "privbayes" | "hmprivbayes";
                                   #   validated by p2pem.synth.bayesconfig)
    [marginals]                    # optional, free-form: an MST or AIM release's settings
                                   #   ([synth] model = "mst" | "aim";
                                   #   validated by p2pem.synth.marginalconfig)
    [deploy]                       # optional: settings of `p2pem deploy`
    timeout = 20.0                 #   s a node waits for a silent neighbour
    startup_timeout = 60.0         #   s for the neighbours to come online
    heartbeat = 1.0                #   s between "alive" messages of an idle node
    reconnect_timeout = 20.0       #   s of reconnect attempts after losing the broker
    max_node_spread = 1e-6         #   largest accepted disagreement between nodes
    broker = "host:1883"           #   use a running broker instead of starting one
    on_dropout = "stop"            #   "continue": go on without a node that falls silent

Integer keys reject booleans and floats; number keys accept integers and floats
(not booleans, not NaN or infinity).
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from p2pem.data import SPLITS, Preprocessing, parse_ids, read_text_column, relabel_ids
from p2pem.errors import ConfigError, DataError, GraphError
from p2pem.families import GAUSSIAN, MixtureFamily, make_family
from p2pem.families.encoding import TableEncoding
from p2pem.families.toml import parse_family
from p2pem.families.toml import parse_init as parse_family_init
from p2pem.graphs import default_radius, graph_from_edges, read_graph_file
from p2pem.registry import PROTOCOLS as _REGISTRY
from p2pem.registry import make_protocol
from p2pem.streams import STREAMS as _STREAMS
from p2pem.streams import scenario_streams
from p2pem.tabular import DEFAULT_BINS, Schema, load_schema, read_table_parties, schema_from_dict
from p2pem.tomltable import REQUIRED, Table, is_int, read_toml, show

__all__ = [
    "GRAPH_KINDS",
    "PROTOCOLS",
    "SOURCES",
    "STREAMS",
    "DataConfig",
    "EMConfig",
    "GraphConfig",
    "ProtocolConfig",
    "Scenario",
    "TradeoffConfig",
    "load_scenario",
    "parse_tradeoff",
    "seed_streams",
]

#: Protocol names, as the user types them (the registry's, private ones included).
PROTOCOLS = tuple(_REGISTRY)
#: Where the data comes from.
SOURCES = ("csv", "synthetic")
#: How the communication graph is given.
GRAPH_KINDS = ("geometric", "edges")
#: The scenario's random streams (see :mod:`p2pem.streams`).
STREAMS = _STREAMS
#: The scenario's streams from its seed: :func:`p2pem.streams.scenario_streams`.
seed_streams = scenario_streams

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def empty_table() -> Mapping[str, Any]:
    """An absent table: empty and read-only (the default of a dataclass field)."""
    return _EMPTY


# ------------------------------------------------------------------------ dataclasses


@dataclass(frozen=True)
class DataConfig:
    """The ``[data]`` table: where the rows come from and how they are prepared.

    Parameters
    ----------
    source : {"csv", "synthetic"}
        Read a CSV file or draw from :func:`p2pem.data.synthetic_mixture`.
    path : pathlib.Path or None
        Absolute path of the CSV file (csv only).
    columns : tuple of str or None
        Columns to keep, in order (csv only); None keeps all.
    drop_columns : tuple of str
        Columns to drop (csv only).
    standardize : bool
        Scale every column to zero mean and unit variance.
    pca : int or None
        Keep that many principal components (after standardising).
    split : {"even", "contiguous", "random"}
        How rows are spread over nodes, see :func:`p2pem.data.split_rows` (not used with
        ``node_column``).
    public : p2pem.data.Preprocessing or None
        Public preprocessing constants (``[data.public]``): standardisation and projection
        use them instead of statistics of the rows, so the map is the same for every data
        set (what differential privacy needs; the constants themselves are outside any
        epsilon, and private runs say so).
    n_samples, n_features, n_components : int or None
        Size of the synthetic data set (synthetic only, else None).
    separation : float or None
        Separation of the synthetic clusters (synthetic only, else None).
    header : bool
        Whether the CSV file's first row names the columns (csv only); without one the
        columns are named ``"0"``, ``"1"``, ... by position.
    node_column : str or None
        The CSV column naming each row's party (csv only): node ``i`` holds the rows of
        ``node_ids[i]``, in file order.
    node_ids : tuple or None
        The parties' ids in node order (with ``node_column``): sorted, integers when every
        id is one (:func:`p2pem.data.relabel_ids`).
    schema : p2pem.tabular.Schema or None
        The public schema of a mixed-type table (csv only): the rows are read under it
        (:func:`p2pem.tabular.read_table`) and encoded by :attr:`encoding`.
    test : pathlib.Path or None
        Held-out real rows under the same schema (the synthetic-data report's test split).
    test_fraction : float or None
        Or the share of the rows held out (drawn from the ``"data"`` stream before the
        split over nodes).
    binned : tuple of str
        Continuous schema columns modelled as categorical over their public bins.
    n_bins : int
        Bins per binned column.
    atoms : tuple of (str, tuple of float)
        Per binned column, public values modelled as categories of their own.
    """

    source: str
    path: Path | None = None
    columns: tuple[str, ...] | None = None
    drop_columns: tuple[str, ...] = ()
    standardize: bool = False
    pca: int | None = None
    split: str = "even"
    public: Preprocessing | None = None
    n_samples: int | None = None
    n_features: int | None = None
    n_components: int | None = None
    separation: float | None = None
    header: bool = True
    node_column: str | None = None
    node_ids: tuple[Any, ...] | None = None
    schema: Schema | None = None
    test: Path | None = None
    test_fraction: float | None = None
    binned: tuple[str, ...] = ()
    n_bins: int = DEFAULT_BINS
    atoms: tuple[tuple[str, tuple[float, ...]], ...] = ()

    @property
    def encoding(self) -> TableEncoding | None:
        """How the schema's rows become model rows (:class:`p2pem.families.encoding.TableEncoding`); None without a schema."""
        return None if self.schema is None else TableEncoding(self.schema, self.binned, self.n_bins, self.atoms)


@dataclass(frozen=True)
class GraphConfig:
    """The ``[graph]`` table: the communication graph.

    Parameters
    ----------
    kind : {"geometric", "edges"}
        A random geometric graph in the unit square, or an explicit edge list.
    n_nodes : int
        Number of nodes (for ``"edges"``: the number of distinct node ids).
    radius : float or None
        Connection radius (geometric only); the default ``sqrt(2 log n / n)`` is
        filled in by :func:`load_scenario`.
    edges : tuple of (int, int) or None
        Undirected edges over nodes ``0 .. n_nodes-1`` (edges only).
    path : pathlib.Path or None
        The graph file the edges were read from (``[graph] path``), else None.
    node_ids : tuple or None
        With ``path``: the file's node ids in node order (the data's ``node_ids`` when
        the data has a node column).
    """

    kind: str
    n_nodes: int
    radius: float | None = None
    edges: tuple[tuple[int, int], ...] | None = None
    path: Path | None = None
    node_ids: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class EMConfig:
    """The ``[em]`` table.

    Parameters
    ----------
    n_components : int
        Number of mixture components to fit.
    max_iter : int
        Number of EM iterations at most.
    tol : float
        Stop when the log-likelihood gain falls below it (0 runs ``max_iter``).
    reg_covar : float
        Added to the diagonal of every covariance estimate.
    init : the family's single parameters or None
        Explicit initial parameters (read-only arrays; GMMParams for the Gaussian family),
        or None.
    family : p2pem.families.MixtureFamily
        The model family (``[em] family``): Gaussian by default, the mixed family of the
        schema's columns when ``[data]`` has a schema.
    """

    n_components: int
    max_iter: int = 100
    tol: float = 0.0
    reg_covar: float = 1e-6
    init: Any = None
    family: MixtureFamily = GAUSSIAN


@dataclass(frozen=True)
class ProtocolConfig:
    """One ``[[protocols]]`` entry: a protocol name and its parameters.

    Parameters
    ----------
    name : {"pdmm-sp", "secure-sum", "federated", "centralized"}
        Which protocol.
    params : Mapping
        Every other key of the table, read-only, as parsed from TOML.
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=empty_table)


#: epsilon grid of ``[tradeoff]`` when the scenario gives none: 10 values from 0.1 to 100
DEFAULT_EPSILONS = tuple(float(f"{v:.3g}") for v in np.logspace(-1, 2, 10))
TRADEOFF_KEYS = ("epsilons", "n_seeds", "test_fraction", "classify", "class_components", "families")


@dataclass(frozen=True)
class TradeoffConfig:
    """The ``[tradeoff]`` table of a scenario (settings of ``p2pem tradeoff``, :mod:`p2pem.dp.tradeoff`).

    Parameters
    ----------
    epsilons : tuple of float
        The grid (each finite and > 0).
    n_seeds : int
        Protocol seeds per (protocol, epsilon).
    test_fraction : float
        Share of rows held out, in (0, 1).
    classify : str or None
        Label column for the Bayes classifier (CSV data only).
    class_components : int
        Mixture components per class.
    families : tuple of str or None
        Model families to sweep every protocol with (each where it applies); None: the
        scenario's ``[em] family``.
    """

    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    n_seeds: int = 10
    test_fraction: float = 0.2
    classify: str | None = None
    class_components: int = 2
    families: tuple[str, ...] | None = None


def parse_tradeoff(sec: Table) -> TradeoffConfig:
    """Validate a ``[tradeoff]`` table (errors name the file and the dotted key)."""
    sec = Table(sec.where, sec.table, sec.prefix, TRADEOFF_KEYS)
    epsilons = DEFAULT_EPSILONS
    if sec.has("epsilons"):
        raw = sec.require("epsilons")
        if not (isinstance(raw, list) and raw and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw)):
            sec.fail(f"{sec.key('epsilons')!r} must be a non-empty array of numbers > 0")
        if any(not (math.isfinite(v) and v > 0) for v in raw):
            sec.fail(f"{sec.key('epsilons')!r} must hold finite numbers > 0, got {raw}")
        epsilons = tuple(sorted(float(v) for v in raw))
    test_fraction = sec.number("test_fraction", default=0.2, positive=True)
    if test_fraction >= 1:
        sec.fail(f"{sec.key('test_fraction')!r} must be < 1, got {test_fraction}")
    families = sec.string_list("families", default=None)
    for name in families or ():
        try:
            make_family(name)
        except ConfigError as exc:
            sec.fail_key("families", str(exc))
    return TradeoffConfig(
        epsilons=epsilons,
        n_seeds=sec.integer("n_seeds", default=10, minimum=1),
        test_fraction=test_fraction,
        classify=sec.string("classify", default=None),
        class_components=sec.integer("class_components", default=2, minimum=1),
        families=families,
    )


@dataclass(frozen=True)
class Scenario:
    """A whole scenario file.

    Parameters
    ----------
    name : str
        Scenario name (default: the file's stem).
    seed : int
        The only seed; see :meth:`streams`.
    path : pathlib.Path
        The scenario file, as given to :func:`load_scenario`.
    data : DataConfig
    graph : GraphConfig
    em : EMConfig
    protocols : tuple of ProtocolConfig
        Run in this order.
    leakage : Mapping
        The free-form ``[leakage]`` table (read-only at top level; empty if absent).
    deploy : Mapping
        The ``[deploy]`` table (keys :data:`DEPLOY_KEYS`, validated; read-only at top
        level; empty if absent).
    tradeoff : TradeoffConfig or None
        The ``[tradeoff]`` table of ``p2pem tradeoff`` (validated), None if absent.
    synth : Mapping
        The free-form ``[synth]`` table of ``p2pem synth`` (validated by
        :func:`p2pem.synth.config.parse_synth`; empty if absent).
    bayesnet : Mapping
        The free-form ``[bayesnet]`` table of a Bayesian-network release (validated by
        :func:`p2pem.synth.bayesconfig.parse_bayesnet` when the release is fitted; empty if
        absent).
    marginals : Mapping
        The free-form ``[marginals]`` table of an MST or AIM release (validated by
        :func:`p2pem.synth.marginalconfig.parse_marginals` when the release is fitted; empty
        if absent).
    """

    name: str
    seed: int
    path: Path
    data: DataConfig
    graph: GraphConfig
    em: EMConfig
    protocols: tuple[ProtocolConfig, ...]
    leakage: Mapping[str, Any] = field(default_factory=empty_table)
    deploy: Mapping[str, Any] = field(default_factory=empty_table)
    tradeoff: TradeoffConfig | None = None
    synth: Mapping[str, Any] = field(default_factory=empty_table)
    bayesnet: Mapping[str, Any] = field(default_factory=empty_table)
    marginals: Mapping[str, Any] = field(default_factory=empty_table)

    def streams(self) -> dict[str, np.random.SeedSequence]:
        """The independent random streams of this scenario, see :func:`p2pem.streams.scenario_streams`."""
        return scenario_streams(self.seed)

    @property
    def parties(self) -> tuple[Any, ...] | None:
        """The parties' own ids (site names) of nodes ``0..n-1``: the data's node column, else
        the edge file's node names; None when the nodes are only numbered.  Every output
        about the scenario writes this one mapping (``parties``: node ``i`` is ``parties[i]``)."""
        return self.data.node_ids or self.graph.node_ids

    def node_index(self, name: Any) -> int | None:
        """Node id of party ``name`` (compared as text, as a file writes it), or None."""
        parties = self.parties
        if parties is None:
            return None
        text = [str(p) for p in parties]
        return text.index(str(name)) if str(name) in text else None


# ---------------------------------------------------------------------------- loading


def load_scenario(path: str | os.PathLike[str], *, stand_in_data: Mapping[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario file.

    Parameters
    ----------
    path : str or path-like
        The TOML file.  A relative ``data.path`` inside it is resolved against
        the folder of this file.
    stand_in_data : mapping, optional
        The ``[data]`` table to use when the file has none, for a command that reads
        no data (``p2pem keys roster`` given the data's public schema as options).
        Ignored when the file has a ``[data]`` table.

    Returns
    -------
    Scenario

    Raises
    ------
    ConfigError
        With one line naming the file and the dotted key: the file is missing or
        is not valid TOML (the parser's message); a key is unknown, missing,
        of the wrong type or out of range; an enum value is not allowed; the
        data file does not exist; ``em.init`` has the wrong shapes; or a
        protocol rejects its parameters.
    GraphError
        (a ConfigError) An explicit edge list describes a disconnected graph.

    Examples
    --------
    >>> scenario = load_scenario("scenarios/parkinsons.toml")
    >>> scenario.graph.n_nodes, [p.name for p in scenario.protocols]
    (80, ['pdmm-sp', 'secure-sum', 'federated', 'centralized'])
    """
    file = Path(path)
    where = os.fspath(path)
    document = read_toml(file, "scenario")
    if stand_in_data is not None and "data" not in document:
        document = {**document, "data": dict(stand_in_data)}

    top = Table(where, document, "", ("name", "seed", "data", "graph", "em", "protocols", "leakage", "deploy", "tradeoff", "synth", "bayesnet", "marginals"))
    name = top.string("name", default=file.stem)
    if not name:
        top.fail("'name' must not be empty")
    seed = top.integer("seed", minimum=0)
    data = _parse_data(top.section("data", _DATA_KEYS), file.parent)
    graph = _parse_graph(top.section("graph", ("kind", "n_nodes", "radius", "edges", "path")), file.parent, data.node_ids)
    em_keys = ("n_components", "max_iter", "tol", "reg_covar", "family", "init")
    synth_model = document.get("synth", {}).get("model") if isinstance(document.get("synth"), dict) else None
    if not top.has("em") and (top.has("bayesnet") or synth_model in ("privbayes", "hmprivbayes")):
        # a Bayesian-network release fits no mixture: its [em] would be unused (one component stands in)
        em = _parse_em(Table(where, {"n_components": 1}, "em", em_keys), data)
    else:
        em = _parse_em(top.section("em", em_keys), data)
    protocols = _parse_protocols(top)
    leakage = top.free_table("leakage")
    deploy = _parse_deploy(top)
    tradeoff = parse_tradeoff(top.section("tradeoff", None)) if top.has("tradeoff") else None
    return Scenario(
        name=name,
        seed=seed,
        path=file,
        data=data,
        graph=graph,
        em=em,
        protocols=protocols,
        leakage=leakage,
        deploy=deploy,
        tradeoff=tradeoff,
        synth=top.free_table("synth"),
        bayesnet=top.free_table("bayesnet"),
        marginals=top.free_table("marginals"),
    )


# ------------------------------------------------------------------ section parsers

_DATA_KEYS = (
    "source",
    "path",
    "columns",
    "drop_columns",
    "standardize",
    "pca",
    "split",
    "public",
    "n_samples",
    "n_features",
    "n_components",
    "separation",
    "header",
    "node_column",
    "schema",
    "test",
    "test_fraction",
    "binned",
    "n_bins",
    "atoms",
)
_SCHEMA_ONLY = ("test", "test_fraction", "binned", "n_bins", "atoms")
_CSV_ONLY = ("path", "columns", "drop_columns", "header", "node_column", "schema", *_SCHEMA_ONLY)
_SYNTHETIC_ONLY = ("n_samples", "n_features", "n_components", "separation")
#: [data] keys of float tables that a schema replaces (it names the columns; the encoding scales them)
_NOT_WITH_SCHEMA = ("columns", "drop_columns", "standardize", "pca", "header")


def _parse_data(sec: Table, folder: Path) -> DataConfig:
    source = sec.choice("source", SOURCES)
    forbidden = _SYNTHETIC_ONLY if source == "csv" else _CSV_ONLY
    for key in forbidden:
        if sec.has(key):
            sec.fail(f"{sec.key(key)!r} is not used with source = {source!r}")
    common: dict[str, Any] = {
        "source": source,
        "standardize": sec.boolean("standardize", default=False),
        "pca": sec.integer("pca", default=None, minimum=1),
        "split": sec.choice("split", SPLITS, default="even"),
    }
    if sec.has("public"):
        common["public"] = _parse_public(sec, common["standardize"], common["pca"])
    if source == "synthetic":
        n_features = sec.integer("n_features", default=2, minimum=1)
        if common["pca"] is not None and common["pca"] > n_features:
            sec.fail(f"{sec.key('pca')!r} = {common['pca']} exceeds {sec.key('n_features')!r} = {n_features}")
        return DataConfig(
            **common,
            n_samples=sec.integer("n_samples", minimum=1),
            n_features=n_features,
            n_components=sec.integer("n_components", default=3, minimum=1),
            separation=sec.number("separation", default=3.0, minimum=0.0),
        )

    resolved = _existing_file(sec, "path", folder)
    if sec.has("schema"):
        return _parse_schema_data(sec, folder, common, resolved)
    for key in _SCHEMA_ONLY:
        if sec.has(key):
            sec.fail(f"{sec.key(key)!r} needs a schema ({sec.key('schema')!r})")
    columns = sec.string_list("columns", default=None)
    if columns is not None and not columns:
        sec.fail(f"{sec.key('columns')!r} must not be empty")
    drop_columns = sec.string_list("drop_columns", default=()) or ()
    if columns is not None and common["pca"] is not None:
        width = len([c for c in columns if c not in drop_columns])
        if common["pca"] > width:
            sec.fail(f"{sec.key('pca')!r} = {common['pca']} exceeds the {width} selected columns")
    header = sec.boolean("header", default=True)
    node_column = sec.string("node_column", default=None)
    node_ids = None
    if node_column is not None:
        if sec.has("split"):
            sec.fail(f"{sec.key('split')!r} is not used with {sec.key('node_column')!r} (the column assigns every row to its node)")
        if columns is not None and node_column in columns:
            sec.fail(f"{sec.key('columns')!r} lists the node column {node_column!r}: it names parties, it is not a feature")
        _, labels = relabel_ids(parse_ids(read_text_column(resolved, node_column, header=header)))
        node_ids = labels
    return DataConfig(
        **common, path=resolved, columns=columns, drop_columns=tuple(drop_columns), header=header, node_column=node_column, node_ids=node_ids
    )


def _existing_file(sec: Table, key: str, folder: Path) -> Path:
    """The file ``sec[key]`` names (relative to ``folder``), resolved; it must exist."""
    raw = sec.string(key)
    resolved = Path(raw)
    if not resolved.is_absolute():
        resolved = folder / resolved
    resolved = resolved.resolve()
    if not resolved.is_file():
        what = "is not a file" if resolved.exists() else "does not exist"
        sec.fail(f"{sec.key(key)!r} = {raw!r} {what} (resolved to {resolved})")
    return resolved


def _parse_schema_data(sec: Table, folder: Path, common: dict[str, Any], path: Path) -> DataConfig:
    """A CSV table under a public schema: the schema (a file or an inline table), its test split and encoding."""
    for key in _NOT_WITH_SCHEMA:
        if sec.has(key) and (key != "standardize" or common["standardize"]):
            sec.fail(f"{sec.key(key)!r} is not used with a schema (the schema names the columns; the encoding scales them by their public ranges)")
    raw = sec.require("schema")
    if isinstance(raw, str):
        schema = load_schema(_existing_file(sec, "schema", folder))
    elif isinstance(raw, dict):
        schema = schema_from_dict(raw, where=sec.where, prefix=sec.key("schema"))
    else:
        sec.fail(f"{sec.key('schema')!r} must be a schema file's path or an inline table [data.schema], got {show(raw)}")
    if sec.has("test") and sec.has("test_fraction"):
        sec.fail(f"give {sec.key('test')!r} or {sec.key('test_fraction')!r}, not both")
    test = _existing_file(sec, "test", folder) if sec.has("test") else None
    test_fraction = sec.number("test_fraction", default=None, positive=True)
    if test_fraction is not None and test_fraction >= 1:
        sec.fail(f"{sec.key('test_fraction')!r} must be < 1, got {test_fraction}")
    binned = sec.string_list("binned", default=()) or ()
    n_bins = sec.integer("n_bins", default=DEFAULT_BINS, minimum=2)
    atoms: list[tuple[str, tuple[float, ...]]] = []
    if sec.has("atoms"):
        table = sec.section("atoms", None)
        atoms = [(name, tuple(table.number_array(name, ndim=1).tolist())) for name in table.table]
    node_column = sec.string("node_column", default=None)
    node_ids = None
    if node_column is not None:
        # the party of every row, read beside the schema's columns (it is not one of them)
        if sec.has("split"):
            sec.fail(f"{sec.key('split')!r} is not used with {sec.key('node_column')!r} (the column assigns every row to its node)")
        try:
            node_ids = relabel_ids(parse_ids(read_table_parties(path, schema, node_column)[1]))[1]
        except DataError as exc:
            sec.fail(f"{sec.key('node_column')!r}: {exc}")
    data = DataConfig(
        **common, path=path, schema=schema, test=test, test_fraction=test_fraction, binned=tuple(binned), n_bins=n_bins, atoms=tuple(atoms),
        node_column=node_column, node_ids=node_ids,
    )
    try:
        data.encoding  # noqa: B018  (validates the binned names and atoms against the schema)
    except ConfigError as exc:
        sec.fail(f"{sec.key('atoms' if 'atom' in str(exc) else 'binned')!r}: {exc}")
    return data


def _parse_public(sec: Table, standardize: bool, n_pca: int | None) -> Preprocessing:
    pub = sec.section("public", ("center", "scale", "components"))
    if not standardize:
        pub.fail(f"[{pub.prefix}] needs {sec.key('standardize')!r} = true (its constants standardise the columns)")
    center, scale = pub.number_array("center", ndim=1), pub.number_array("scale", ndim=1)
    if scale.shape != center.shape:
        pub.fail_key("scale", f"has {scale.size} entries, 'center' {center.size}")
    if np.any(scale <= 0):
        pub.fail_key("scale", "must hold numbers > 0")
    components = None
    if n_pca is not None:
        components = pub.number_array("components", ndim=2)
        if components.shape != (n_pca, center.size):
            pub.fail_key("components", f"must be {n_pca} arrays (pca = {n_pca}) of {center.size} numbers, got shape {components.shape}")
    elif pub.has("components"):
        pub.fail_key("components", f"is used only with {sec.key('pca')!r}")
    return Preprocessing(center, scale, components)


def _static_width(data: DataConfig) -> int | None:
    """Width of the prepared data when the scenario alone determines it."""
    if data.encoding is not None:
        return len(data.encoding.names)
    if data.pca is not None:
        return data.pca
    if data.source == "synthetic":
        return data.n_features
    if data.columns is not None:
        return len([c for c in data.columns if c not in data.drop_columns])
    return None


def _parse_graph(sec: Table, folder: Path, node_ids: tuple[Any, ...] | None) -> GraphConfig:
    """``[graph]``; ``node_ids``: the parties of the data's node column (they fix the number of nodes)."""
    kind = sec.choice("kind", GRAPH_KINDS, default="edges" if sec.has("edges") or sec.has("path") else REQUIRED)
    if kind == "geometric":
        for key in ("edges", "path"):
            if sec.has(key):
                sec.fail(f"{sec.key(key)!r} is not used with kind = 'geometric'")
        n_nodes = sec.integer("n_nodes", minimum=2, default=REQUIRED if node_ids is None else len(node_ids))
        if node_ids is not None and n_nodes != len(node_ids):
            sec.fail(f"{sec.key('n_nodes')!r} = {n_nodes} but the data's node column names {len(node_ids)} parties")
        radius = sec.number("radius", default=default_radius(n_nodes), positive=True)
        return GraphConfig(kind=kind, n_nodes=n_nodes, radius=radius)

    if sec.has("radius"):
        sec.fail(f"{sec.key('radius')!r} is not used with kind = 'edges'")
    if sec.has("path"):
        if sec.has("edges"):
            sec.fail(f"give {sec.key('edges')!r} or {sec.key('path')!r}, not both")
        return _graph_file(sec, folder, node_ids)
    raw = sec.require("edges")
    key = sec.key("edges")
    if not isinstance(raw, list) or not raw:
        sec.fail(f"{key!r} must be a non-empty array of [i, j] pairs, got {show(raw)}")
    edges: list[tuple[int, int]] = []
    seen: set[frozenset[int]] = set()
    for index, pair in enumerate(raw):
        if not (isinstance(pair, list) and len(pair) == 2 and all(is_int(v) and v >= 0 for v in pair)):
            sec.fail(f"'{key}[{index}]' must be a pair of node ids >= 0, got {show(pair)}")
        i, j = pair
        if i == j:
            sec.fail(f"'{key}[{index}]' is a self-loop [{i}, {j}]")
        if frozenset(pair) in seen:
            sec.fail(f"'{key}[{index}]' repeats the edge [{i}, {j}]")
        seen.add(frozenset(pair))
        edges.append((i, j))
    nodes = {v for edge in edges for v in edge}
    count = len(nodes)
    missing = sorted(set(range(count)) - nodes)
    if missing:
        sec.fail(f"node ids in {key!r} must be 0..n-1 without gaps; missing {missing[:5]} (largest id {max(nodes)})")
    n_nodes = sec.integer("n_nodes", default=None, minimum=2)
    if n_nodes is not None and n_nodes != count:
        sec.fail(f"{sec.key('n_nodes')!r} = {n_nodes} but {key!r} connects {count} nodes")
    if node_ids is not None and count != len(node_ids):
        sec.fail(f"{key!r} connects {count} nodes but the data's node column names {len(node_ids)} parties")
    try:
        graph_from_edges(edges)  # connectivity, the one check left
    except GraphError as exc:
        raise GraphError(f"{sec.where}: {key!r}: {exc}") from exc
    return GraphConfig(kind=kind, n_nodes=count, edges=tuple(edges))


def _graph_file(sec: Table, folder: Path, node_ids: tuple[Any, ...] | None) -> GraphConfig:
    """``[graph] path``: an edge list or GraphML file, its ids relabelled as the data's node column's."""
    path = sec.path("path", folder).resolve()
    key = sec.key("path")
    try:
        nodes, pairs = read_graph_file(path)
    except GraphError as exc:
        raise GraphError(f"{sec.where}: {key!r}: {exc}") from exc
    ids = parse_ids(nodes)
    labels = relabel_ids(ids)[1] if node_ids is None else node_ids
    text = dict(zip(nodes, map(str, ids), strict=True))  # ids compared as the data's are: "07" is party 7
    index = {str(label): i for i, label in enumerate(labels)}
    unknown = [v for v in text.values() if v not in index]
    if unknown:
        sec.fail(f"{key!r} = {str(path)!r} has node {unknown[0]!r}, which no row of the data's node column belongs to")
    if len(text) != len(index):
        missing = sorted(set(index) - set(text.values()))
        sec.fail(f"{key!r} = {str(path)!r} lacks the parties {missing[:5]} of the data's node column")
    edges = tuple((index[text[u]], index[text[v]]) for u, v in pairs)
    n_nodes = sec.integer("n_nodes", default=None, minimum=2)
    if n_nodes is not None and n_nodes != len(labels):
        sec.fail(f"{sec.key('n_nodes')!r} = {n_nodes} but {key!r} has {len(labels)} nodes")
    try:
        graph_from_edges(edges, len(labels))
    except GraphError as exc:
        raise GraphError(f"{sec.where}: {key!r}: {exc}") from exc
    return GraphConfig(kind="edges", n_nodes=len(labels), edges=edges, path=path, node_ids=tuple(labels))


def _parse_em(sec: Table, data: DataConfig) -> EMConfig:
    n_components = sec.integer("n_components", minimum=1)
    max_iter = sec.integer("max_iter", default=100, minimum=0)
    tol = sec.number("tol", default=0.0, minimum=0.0)
    reg_covar = sec.number("reg_covar", default=1e-6, minimum=0.0)
    family = _parse_family(sec, data)
    if data.schema is not None:
        try:
            family.stats_size(n_components, _static_width(data) or 0)
        except ConfigError as exc:
            sec.fail(f"{sec.key('n_components')!r}: {exc}")
    init = None
    if sec.has("init"):
        init = parse_init(sec.section("init", None), n_components, _static_width(data), family)
    return EMConfig(n_components=n_components, max_iter=max_iter, tol=tol, reg_covar=reg_covar, init=init, family=family)


#: Keys of ``[em.family]`` for the mixed family of a schema (its column layout comes from the schema).
_MIXED_KEYS = ("name", "covariance", "stratify", "strata_weights")


def _parse_family(sec: Table, data: DataConfig) -> MixtureFamily:
    """``[em] family`` (:func:`p2pem.families.toml.parse_family`).

    A table under a schema is fitted by the ``mixed`` family of its columns (the default), or,
    when every column is continuous and none binned, by any family of continuous rows
    (``gaussian``, ``skew-normal``).
    """
    encoding = data.encoding
    raw = sec.table.get("family", "mixed" if encoding is not None else "gaussian")
    name = raw.get("name") if isinstance(raw, dict) else raw
    if encoding is None:
        if name == "mixed":
            sec.fail(f"{sec.key('family')!r}: the mixed family needs a public schema of the columns ([data] schema)")
        return parse_family(sec)
    if not isinstance(raw, (str, dict)):
        sec.fail(f"{sec.key('family')!r} must be a model family name or a table with a 'name', got {show(raw)}")
    table = sec.section("family", _MIXED_KEYS) if isinstance(raw, dict) else Table(sec.where, {"name": raw}, sec.key("family"), None)
    if table.string("name") != "mixed":
        if not encoding.discrete:  # every column Gaussian-modelled: any family of continuous rows
            return parse_family(sec)
        sec.fail(
            f"{sec.key('family')!r} = {name!r}: a table under a schema with categorical or binned columns "
            f"({', '.join(c.name for c in encoding.discrete)}) is fitted by the 'mixed' family"
        )
    stratify = table.string("stratify", default=None)
    weights = None
    if table.has("strata_weights"):
        weights = table.number_array("strata_weights", ndim=1).tolist()
    try:
        return encoding.family(covariance=table.choice("covariance", ("diag", "full"), default="diag"), stratify=stratify, strata_weights=weights)
    except ConfigError as exc:
        table.fail(f"{table.prefix!r}: {exc}")


def parse_init(sec: Table, n_components: int, n_features: int | None, family: MixtureFamily = GAUSSIAN) -> Any:
    """An ``init`` table as the family's single parameters (:func:`p2pem.families.toml.parse_init`).

    Errors are one line naming the file and the dotted key, e.g.
    ``s.toml: 'em.init.covariances[1]' is not positive definite``.  Rosters
    (:mod:`p2pem.deploy.roster`) read their ``[em.init]`` through it too.
    """
    return parse_family_init(sec, family, n_components, n_features)


def _parse_protocols(top: Table) -> tuple[ProtocolConfig, ...]:
    raw = top.require("protocols")
    if not (isinstance(raw, list) and raw and all(isinstance(t, dict) for t in raw)):
        top.fail(f"'protocols' must be one or more [[protocols]] tables, got {show(raw)}")
    protocols = []
    for index, table in enumerate(raw):
        prefix = f"protocols[{index}]"
        sec = Table(top.where, table, prefix, None)
        name = sec.choice("name", tuple(_REGISTRY))  # read now: a protocol registered later is known too
        params = {key: copy.deepcopy(value) for key, value in table.items() if key != "name"}
        _validate_protocol(top.where, prefix, params, name)
        protocols.append(ProtocolConfig(name=name, params=MappingProxyType(params)))
    return tuple(protocols)


#: Keys of the ``[deploy]`` table (used by :mod:`p2pem.deploy`), all optional.
DEPLOY_KEYS = ("timeout", "startup_timeout", "heartbeat", "reconnect_timeout", "max_node_spread", "broker", "on_dropout")


def parse_broker_address(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> ``(host, port)``; ``[v6]:port`` is accepted too.

    Raises
    ------
    ConfigError
        If it is not ``HOST:PORT`` with a port in 1..65535.
    """
    if not isinstance(text, str) or ":" not in text:
        raise ConfigError(f"broker address must be HOST:PORT, got {text!r}")
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"broker address must be HOST:PORT, got {text!r}") from None
    if not host or not 0 < port < 65536:
        raise ConfigError(f"broker address must be HOST:PORT with a port in 1-65535, got {text!r}")
    return host, port


def _parse_deploy(top: Table) -> Mapping[str, Any]:
    """The ``[deploy]`` table: positive numbers of seconds, a spread, a ``host:port`` broker."""
    table = top.free_table("deploy")
    sec = Table(top.where, dict(table), "deploy", DEPLOY_KEYS)
    for key in DEPLOY_KEYS[:5]:
        sec.number(key, default=None, positive=True)
    sec.choice("on_dropout", ("stop", "continue"), default="stop")
    broker = sec.string("broker", default=None)
    if broker is not None:
        try:
            parse_broker_address(broker)
        except ConfigError as exc:
            sec.fail(f"'deploy.broker' {str(exc).removeprefix('broker address ')}")
    return table


def _validate_protocol(where: str, prefix: str, params: dict[str, Any], name: str) -> None:
    """Let the protocol itself reject unknown or invalid parameters."""
    try:
        make_protocol(name, dict(params))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {prefix}: {exc}") from exc
