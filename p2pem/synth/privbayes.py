"""PrivBayes and HMPrivBayes across parties: fit a release from rows spread over nodes, sample from it.

:func:`fit_bayesnet` runs a :class:`~p2pem.bayesnet.task.BayesNetTask` on a table whose
rows are spread over the nodes of a graph, with any aggregation protocol and either
simulator engine:

``centralized``
    One curator holds every row (the PrivBayes of the papers): the task runs once over all
    rows, no network.
``pdmm-sp``, ``secure-sum``, ``federated``
    Every node counts its own rows; the protocol sums the counts.  ``engine="vectorised"``
    drives one batch task through the protocol's batch path, ``engine="messages"`` one
    :class:`~p2pem.node.Node` per node over an in-memory FIFO -- the code a deployment runs.
    Both agree to the last bit, and every node ends with the same release (the task's
    summary digests are compared).

:func:`release_document` turns the finished task into a JSON-ready release (the public
schema, the networks with their conditionals, the ledger of every release and the epsilon
against each adversary); :func:`sample_release` draws rows from that document alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.bayesnet import BayesNetSettings, BayesNetTask, Conditional, Network, sample_networks
from p2pem.bayesnet.release import check_schema, release_body
from p2pem.builders import build_graph, load_table_parts
from p2pem.errors import ConfigError, DataError, ProtocolError
from p2pem.protocols import Centralized, ProtocolSpec
from p2pem.protocols.base import Topology
from p2pem.runner import output_header
from p2pem.scenario import Scenario
from p2pem.simulate import Traffic, drive_messages, drive_vectorised
from p2pem.synth.bayesconfig import parse_bayesnet
from p2pem.dp.mechanisms import count_sampler
from p2pem.dp.publication import Publication
from p2pem.synth.synthesizer import RELEASE_FORMAT, Progress, publish, run_seed
from p2pem.streams import bayesnet_child, protocol_streams, scenario_streams
from p2pem.tabular import Schema, Table, discretize, domain_sizes, schema_from_dict, undiscretize
from p2pem.task import Task, drive

__all__ = ["AGGREGATIONS", "RELEASE_PUBLIC", "BayesNetRun", "BayesNetSynthesizer", "assemble_release", "drive_counts", "fit_bayesnet",
           "release_document", "sample_release"]

IntArray = npt.NDArray[np.int64]

#: A Bayesian-network release's fields declared public besides the header's: the bins and settings
#: (public choices), and how the run went (its aggregations' rounds and messages and its wall time:
#: side channels outside epsilon, which the privacy block's ``excluded`` names for pdmm-sp; a deployed
#: release's ``deployment``: its run id).  The clusters, networks, conditionals and selections are
#: post-processing of the noisy releases.
RELEASE_PUBLIC = ("n_bins", "settings", "aggregations", "wall_s", "deployment")

#: The protocols that can sum a release's counts (the private EM protocols add noise of their own).
AGGREGATIONS = ("pdmm-sp", "secure-sum", "federated", "centralized")


@dataclass
class BayesNetRun:
    """A finished release: node 0's task, what the aggregations cost, how long it took.

    Attributes
    ----------
    task : BayesNetTask
        Node 0's task (every node holds the same release; :attr:`agreed`).
    traffic : Traffic
    protocol : str
        The aggregation protocol's label.
    n_nodes : int
    wall_s : float
    agreed : bool
        Every node's summary digest equals node 0's.
    protocol_params : dict
        The aggregation protocol's parameters (:meth:`ProtocolSpec.params`).
    """

    task: BayesNetTask
    traffic: Traffic
    protocol: str
    n_nodes: int
    wall_s: float
    agreed: bool = True
    protocol_params: dict[str, Any] = field(default_factory=dict)


def fit_bayesnet(
    parts: Sequence[Table],
    settings: BayesNetSettings,
    protocol: ProtocolSpec,
    *,
    graph: nx.Graph | Topology | None,
    seed: int,
    engine: str = "vectorised",
    commit_reveal: bool = False,
) -> BayesNetRun:
    """Fit a private Bayesian network to rows spread over the graph's nodes.

    Parameters
    ----------
    parts : sequence of Table
        Node i's training rows at index i, under one public schema
        (:func:`p2pem.builders.split_table`);
        a ``centralized`` run pools them.
    settings : BayesNetSettings
    protocol : ProtocolSpec
        One of :data:`AGGREGATIONS`.
    graph : networkx.Graph or Topology or None
        The nodes and who talks to whom (None only with ``centralized``).
    seed : int
        The scenario seed: the shared seed and every node's private seed come from its
        ``"bayesnet"`` stream, the protocol's randomness from its ``"protocol"`` stream.
    engine : {"vectorised", "messages"}
    commit_reveal : bool
        Generate the shared seed by commit-and-reveal among the nodes (as a deployment
        does) instead of taking it from the scenario seed.

    Raises
    ------
    ConfigError
        A protocol that cannot sum counts, a non-public schema, too many categories, ``k``
        too large, ``noise = "shares"`` without a network, a graph of another size.
    """
    if not parts:
        raise DataError("no rows to release")
    schema = parts[0].schema
    if any(p.schema != schema for p in parts):
        raise DataError("the nodes' rows do not share one schema")
    sizes = check_schema(schema, settings)
    if protocol.name not in AGGREGATIONS:
        raise ConfigError(
            f"protocol {protocol.name!r} cannot aggregate a Bayesian-network release (it adds noise of its own); choose one of "
            f"{', '.join(AGGREGATIONS)} and set noise = 'shares' for per-node noise shares"
        )
    if engine not in ("vectorised", "messages"):
        raise ConfigError(f"engine must be 'vectorised' or 'messages', got {engine!r}")
    binned = [discretize(p, settings.n_bins) for p in parts]
    t0 = time.perf_counter()
    shared = None if commit_reveal else bayesnet_child(seed, 0)

    def make(rows: list[IntArray], n_nodes: int, secrets: list[np.random.SeedSequence], ids: list[int] | None) -> BayesNetTask:
        return BayesNetTask(rows, sizes, settings, n_nodes, shared=shared, secrets=secrets, node_ids=ids)

    task, traffic, n, label = drive_counts(make, binned, protocol, graph, seed=seed, engine=engine, shares=settings.noise == "shares",
                                           what="bayesnet")
    return BayesNetRun(task, traffic, label, n, time.perf_counter() - t0, True, protocol.params())


T = TypeVar("T", bound=Task)


def drive_counts(make: Callable[[list[IntArray], int, list[np.random.SeedSequence], list[int] | None], T], binned: Sequence[IntArray],
                 protocol: ProtocolSpec, graph: nx.Graph | Topology | None, *, seed: int, engine: str, shares: bool,
                 what: str) -> tuple[T, Traffic, int, str]:
    """Run a count-aggregation task over the nodes' discretised rows: (node 0's finished task, traffic, nodes, protocol label).

    ``make(rows, n_nodes, secrets, node_ids)`` builds the task of a batch.  ``centralized``
    pools the rows in one task (no network); otherwise the vectorised engine drives one batch
    of every node, the messages engine one task per node (every node must end with node 0's
    summary digest).  Node i's private seed is the ``"bayesnet"`` stream's ``(1, i)``, the
    protocol's randomness the ``"protocol"`` stream.

    Raises
    ------
    ConfigError
        ``shares`` with ``centralized``, no graph, a graph of another size.
    ProtocolError
        The nodes ended with different results.
    """
    if isinstance(protocol, Centralized):
        if shares:
            raise ConfigError("noise = 'shares' needs an aggregation over nodes; with 'centralized' one curator adds the noise")
        task = make([np.concatenate(list(binned))], 1, [bayesnet_child(seed, 1, 0)], None)
        drive(task, lambda it, values: values)
        return task, Traffic(), 1, protocol.name
    if graph is None:
        raise ConfigError(f"protocol {protocol.name!r} needs a graph of nodes")
    n = graph.n_nodes if isinstance(graph, Topology) else graph.number_of_nodes()
    if n != len(binned):
        raise ConfigError(f"the graph has {n} nodes but the rows are spread over {len(binned)}")
    secrets = [bayesnet_child(seed, 1, i) for i in range(n)]
    protocol.validate(graph)
    topology = protocol.topology(graph)
    rngs = protocol_streams(scenario_streams(seed)["protocol"], n)
    if engine == "vectorised" and not protocol.asynchronous:
        task = make(list(binned), n, secrets, None)
        traffic = drive_vectorised(task, protocol, topology, rngs)
    else:
        tasks = [make([b], n, [s], [i]) for i, (b, s) in enumerate(zip(binned, secrets, strict=True))]
        _, traffic = drive_messages(tasks, protocol, topology, rngs)
        task = tasks[0]
        digest = task.summary()
        if not all(np.array_equal(t.summary(), digest) for t in tasks):
            raise ProtocolError(f"{what}: the nodes ended with different releases")
    return task, traffic, n, getattr(protocol, "label", protocol.name)


# ------------------------------------------------------------------------------ release


def release_document(run: BayesNetRun, schema: Schema, *, scenario: Scenario | None = None, seed: int | None = None) -> dict[str, Any]:
    """The release as a JSON-ready document: everything a sampler needs, and its provenance.

    It starts with the fields every synthetic-data release shares (``format``, ``version``,
    the ``scenario`` it came from, ``model``, ``schema``, ``training_rows``, ``n_nodes``,
    ``protocol``, ``privacy``, ``public``), then the networks with their conditionals
    (:func:`p2pem.bayesnet.release.release_body`).

    Parameters
    ----------
    run : BayesNetRun
    schema : Schema
        The public schema of the rows (written in full: the sampler reads it back).
    scenario : Scenario, optional
        The scenario the release comes from (name, file and seed recorded).
    seed : int, optional
        The seed to record without a scenario.
    """
    header = output_header(RELEASE_FORMAT, scenario)
    if scenario is None:
        header["seed"] = seed
    body = release_body(run.task, schema, protocol=run.protocol, n_nodes=run.n_nodes)
    aggregations = {"count": run.task.iteration, "rounds": list(run.traffic.rounds.values()), "messages": run.traffic.messages,
                    "bytes": run.traffic.nbytes}
    return assemble_release(header, body, {"name": run.protocol, "params": dict(run.protocol_params)}, aggregations, run.wall_s)


def assemble_release(header: Mapping[str, Any], body: Mapping[str, Any], protocol: Mapping[str, Any], aggregations: Mapping[str, Any],
                     wall_s: float) -> dict[str, Any]:
    """A release document from its parts, in the documented key order (``protocol`` after ``n_nodes``)."""
    doc: dict[str, Any] = dict(header)
    for key, value in body.items():
        doc[key] = value
        if key == "n_nodes":
            doc["protocol"] = dict(protocol)
    doc["aggregations"] = dict(aggregations)
    doc["wall_s"] = wall_s
    return doc


def _release_networks(release: Mapping[str, Any], schema: Schema, n_bins: int) -> list[Network]:
    index = {name: j for j, name in enumerate(schema.names)}
    sizes = domain_sizes(schema, n_bins)
    out = []
    try:
        for net in release["networks"]:
            conds = tuple(
                Conditional(index[c["child"]], tuple(index[p] for p in c["parents"]), np.asarray(c["probabilities"], dtype=np.float64))
                for c in net["conditionals"]
            )
            out.append(Network(tuple(sizes), conds))
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"bayesnet release: missing or malformed network ({type(exc).__name__}: {exc})") from None
    return out


def sample_release(release: Mapping[str, Any], n_rows: int, rng: np.random.Generator) -> Table:
    """``n_rows`` rows drawn from a release document alone (:func:`release_document`).

    Ancestral sampling of every network on the public bins, then values drawn within the
    bins (:func:`p2pem.tabular.undiscretize`): post-processing of the release.

    Raises
    ------
    DataError
        Not a Bayesian-network release of a known version, or a malformed one.
    """
    if (release.get("format"), release.get("version")) != RELEASE_FORMAT or release.get("model") not in ("privbayes", "hmprivbayes"):
        raise DataError(f"not a Bayesian-network release ({release.get('format')!r} version {release.get('version')!r}, model {release.get('model')!r})")
    if isinstance(n_rows, bool) or not isinstance(n_rows, (int, np.integer)) or n_rows < 1:
        raise ConfigError(f"the number of rows must be a positive integer, got {n_rows!r}")
    schema = schema_from_dict(release["schema"], where="release", prefix="schema")
    n_bins = int(release["n_bins"])
    binned = sample_networks(_release_networks(release, schema, n_bins), int(n_rows), rng)
    return undiscretize(schema, binned, n_bins=n_bins, rng=rng)


# ------------------------------------------------------------------------------ synthesizer


@contextmanager
def scenario_errors(scenario: Scenario) -> Iterator[None]:
    """Prefix a ConfigError raised inside with the scenario file (a refused setting as ``[bayesnet] ...``)."""
    where = str(scenario.path)
    try:
        yield
    except ConfigError as exc:
        message = str(exc)
        if message.startswith("bayesnet: "):  # a setting the task refused
            message = "[bayesnet] " + message.removeprefix("bayesnet: ")
        raise ConfigError(message if message.startswith(where) else f"{where}: {message}") from None


@dataclass(frozen=True)
class BayesNetSynthesizer:
    """``privbayes`` and ``hmprivbayes``: a private Bayesian network fitted across the scenario's nodes.

    The synthesizer interface of :mod:`p2pem.synth.synthesizer` over :func:`fit_bayesnet`:
    the scenario's ``[data] schema`` gives the public columns, its ``[bayesnet]`` table the
    settings (:mod:`p2pem.synth.bayesconfig`; ``n_bins`` defaults to ``[data] n_bins``), its
    graph and ``"data"`` stream spread the training rows over the nodes exactly as the
    mixture synthesizer's, and the protocol (``[synth] protocol``) sums the counts: one of
    :data:`AGGREGATIONS` (per-node noise shares are ``[bayesnet] noise = "shares"``).  A
    release takes seconds, so ``progress`` is not called.
    """

    name: str = "privbayes"

    def fit(self, scenario: Scenario, protocol: ProtocolSpec, *, progress: Progress | None = None,
            publication: Publication | None = None) -> dict[str, Any]:
        """Fit the scenario's Bayesian network with ``protocol``; the release document (:func:`release_document`).

        The shared seed (noise, exponential-mechanism selections), the nodes' secrets and the
        protocol's randomness come from ``publication`` (None: OS entropy); the scenario seed
        only spreads the rows over the nodes.

        Raises
        ------
        ConfigError
            No ``[data] schema``, a bad ``[bayesnet]`` table, a protocol that cannot sum
            counts, a schema that is not public, too many categories.
        """
        schema, settings = self.settings(scenario)
        with scenario_errors(scenario):
            parts, _ = load_table_parts(scenario)
            graph = None if isinstance(protocol, Centralized) else build_graph(scenario)
            run = fit_bayesnet(parts, settings, protocol, graph=graph, seed=run_seed(publication))
        # central noise: every node repeats the exact discrete draw from the shared seed; noise shares stay numpy's
        return publish(release_document(run, schema, scenario=scenario), publication, RELEASE_PUBLIC, sampler=count_sampler(settings.noise))

    def settings(self, scenario: Scenario) -> tuple[Schema, BayesNetSettings]:
        """The scenario's public schema and ``[bayesnet]`` settings, checked before any row is read.

        Raises
        ------
        ConfigError
            No ``[data] schema``, a bad ``[bayesnet]`` table, a schema that is not public,
            too many categories.
        """
        schema = scenario.data.schema
        if schema is None:
            raise ConfigError(f"{scenario.path}: the {self.name} synthesizer needs a [data] schema (a table of named, typed columns)")
        table = dict(scenario.bayesnet)
        table.setdefault("n_bins", scenario.data.n_bins)
        settings = parse_bayesnet(table, schema, self.name, where=str(scenario.path))
        with scenario_errors(scenario):
            check_schema(schema, settings)
        return schema, settings

    def sample(self, release: Mapping[str, Any], n_rows: int, rng: np.random.Generator) -> Table:
        """``n_rows`` rows drawn from the release alone (:func:`sample_release`).

        Raises
        ------
        DataError
            The document is not a release of this model.
        """
        if release.get("model") != self.name:
            raise DataError(f"not a {self.name!r} release (model {release.get('model')!r})")
        return sample_release(release, n_rows, rng)
