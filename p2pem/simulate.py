"""Run distributed EM on one machine, with either of two engines that agree to the last bit.

``engine="vectorised"``
    Per-node E-/M-steps (the same functions the Node calls) and one batch call per EM
    iteration into the protocol's :meth:`~p2pem.protocols.ProtocolSpec.aggregate`, which
    runs the consensus over sparse edge arrays.  Fast; the default.
``engine="messages"``
    The real :class:`~p2pem.node.Node` state machines exchanging :class:`Message` objects
    over an in-memory FIFO transport: the code a deployment runs.  Asynchronous pdmm-sp
    always runs here (one node per tick leaves nothing to vectorise).

Both engines draw every random number from the same per-node generators, derived from one
protocol seed by :func:`p2pem.streams.protocol_streams` (the last stream schedules the
asynchronous wake-ups), so for the same seed they produce identical parameters, logs and
message traces.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import networkx as nx
import numpy as np

from p2pem.em import EMSettings, EMState, fit_centralized
from p2pem.errors import ConfigError, ProtocolError
from p2pem.graphs import check_connected
from p2pem.families import GAUSSIAN, MixtureFamily
from p2pem.gmm import FloatArray, relative_error
from p2pem.messages import SERVER, Message
from p2pem.node import Node, Server
from p2pem.protocols import Centralized, NodeContext, ProtocolSpec
from p2pem.protocols.base import Topology
from p2pem.data import check_parts
from p2pem.streams import protocol_streams as protocol_streams  # re-exported: callers import it from here
from p2pem.task import Task, drive

Progress = Callable[[int, int], None]


@dataclass
class RunResult:
    """What one protocol run produced (the per-protocol entry of ``result.json``)."""

    protocol: str
    protocol_params: dict
    #: the fitted model as node 0 holds it (the family's single parameters, e.g. GMMParams)
    params: Any
    loglik: list[float]
    n_iter: int
    converged: bool
    consensus_iterations: list[float]
    init_consensus_iterations: float | None
    messages: int
    bytes: int
    wall_s: float
    node_spread: float = 0.0
    unconverged_iterations: list[int] = field(default_factory=list)
    trace: list[Message] | None = None
    #: what "auto" parameters became on this graph (:meth:`ProtocolSpec.resolved_params`)
    resolved_params: dict = field(default_factory=dict)
    #: the total soft count of the last EM aggregation as node 0 received it (noisy when private)
    released_rows: float = math.nan
    #: the model family of ``params``
    family: MixtureFamily = GAUSSIAN

    # every family's weights and component means and covariances (the skew-normal family's
    # are derived from its own parameters); a family's other arrays: ``params`` itself
    @property
    def weights(self) -> FloatArray:
        return self.params.weights

    @property
    def means(self) -> FloatArray:
        return self.params.means

    @property
    def covariances(self) -> FloatArray:
        return self.params.covariances

    def to_json(self) -> dict:
        return {
            "protocol": self.protocol,
            "protocol_params": self.protocol_params,
            "resolved_params": self.resolved_params,
            "loglik": [None if v != v else v for v in self.loglik],  # NaN (not released: private runs) -> null
            **self.family.to_dict(self.params),
            **self.family.derived(self.params),
            "n_iter": self.n_iter,
            "converged": self.converged,
            "consensus_iterations": list(self.consensus_iterations),
            "init_consensus_iterations": self.init_consensus_iterations,
            "messages": self.messages,
            "bytes": self.bytes,
            "wall_s": self.wall_s,
            "node_spread": self.node_spread,
            "unconverged_iterations": list(self.unconverged_iterations),
        }


def max_relative_difference(run, ref, family: MixtureFamily = GAUSSIAN) -> float:
    """Largest relative difference of the model's arrays (each relative to ``ref``'s max).

    ``run`` and ``ref`` are models of ``family`` (or anything with its arrays as attributes,
    such as a :class:`RunResult` of the Gaussian family).
    """
    return max(relative_error(getattr(run, key), getattr(ref, key)) for key, _ in family.param_keys)


def run_protocol(
    parts: Sequence[FloatArray],
    graph: nx.Graph | Topology,
    protocol: ProtocolSpec,
    settings: EMSettings,
    *,
    seed: int | np.random.SeedSequence = 0,
    engine: str = "vectorised",
    record_trace: bool = False,
    progress: Progress | None = None,
    device: str | None = None,
) -> RunResult:
    """Fit one GMM to the union of ``parts`` with ``protocol`` over ``graph``.

    Parameters
    ----------
    parts : list of (n_i, d) arrays
        Node i's private rows; ``len(parts)`` must equal the number of graph nodes.
    graph : networkx.Graph or Topology
        Connected graph over nodes ``0..n-1`` (ignored by ``centralized``).  At 10⁵–10⁶
        nodes pass a :class:`~p2pem.protocols.base.Topology` instead (from
        :func:`p2pem.graphs.geometric_edges` and ``Topology.from_edges``): a networkx graph
        costs about 1 KB per edge.  ``secure-sum`` needs a Topology with a ``ring``.
    protocol : ProtocolSpec
        See :func:`p2pem.registry.make_protocol`.
    settings : EMSettings
    seed : int or SeedSequence
        Protocol randomness (initial duals, ring masks, wake-up schedule).
    engine : {"vectorised", "messages"}
    record_trace : bool
        Keep every message in ``RunResult.trace`` (for the leakage analysis).
    progress : callable(iteration, max_iter), optional
    device : {"cpu", "cuda", "array-api-strict"}, optional
        Run the vectorised engine's consensus there (protocols with a ``device`` parameter,
        i.e. ``pdmm-sp``; the others ignore it); None keeps the protocol's own setting.

    Returns
    -------
    RunResult
    """
    check_parts(parts, settings.n_components)
    parts = [np.ascontiguousarray(part, dtype=float) for part in parts]
    protocol, settings, parts = protocol.bind(settings, parts, seed=seed)  # e.g. a private protocol's noise and EM hook
    if engine not in ("vectorised", "messages"):
        raise ConfigError(f"engine must be 'vectorised' or 'messages', got {engine!r}")
    if device is not None and hasattr(protocol, "device"):
        protocol = dataclasses.replace(cast(Any, protocol), device=device)  # protocols with a device field
    t0 = time.perf_counter()
    if isinstance(protocol, Centralized):
        state = fit_centralized(np.vstack(parts), settings)
        return _result(protocol, state, state.flat_models(), Traffic(), time.perf_counter() - t0)
    _check_graph(graph, len(parts))
    protocol.validate(graph)
    topology = protocol.topology(graph)
    protocol = protocol.placed(topology)  # e.g. a private protocol's worst placement of colluders
    rngs = protocol_streams(seed, len(parts))
    if engine == "messages" or protocol.asynchronous:
        run = _run_messages(parts, topology, protocol, settings, rngs, record_trace, progress, t0)
    else:
        run = _run_vectorised(parts, topology, protocol, settings, rngs, record_trace, progress, t0)
    run.resolved_params = protocol.resolved_params(topology)
    return run


def _check_graph(graph: nx.Graph | Topology, n_parts: int) -> None:
    if isinstance(graph, Topology):  # 0..n-1 and connected by construction
        if graph.n_nodes != n_parts:
            raise ConfigError(f"the topology has {graph.n_nodes} nodes but the data is split over {n_parts}")
        return
    if not isinstance(graph, nx.Graph):
        raise ConfigError("graph must be a networkx.Graph or a p2pem Topology")
    if sorted(graph.nodes) != list(range(graph.number_of_nodes())):
        raise ConfigError("graph nodes must be 0..n-1")
    if graph.number_of_nodes() != n_parts:
        raise ConfigError(f"the graph has {graph.number_of_nodes()} nodes but the data is split over {n_parts}")
    check_connected(graph)


@dataclass
class Traffic:
    """What the aggregations of one run cost and recorded (any task, any protocol).

    Attributes
    ----------
    rounds : dict of int to float
        Protocol rounds of every aggregation (mean over nodes in a message-level run).
    unconverged : list of int
        Aggregations the protocol stopped before it converged.
    messages, nbytes : int
        Messages sent and their payload bytes.
    trace : list of Message or None
        Every message, when recorded.
    """

    rounds: dict[int, float] = field(default_factory=dict)
    unconverged: list[int] = field(default_factory=list)
    messages: int = 0
    nbytes: int = 0
    trace: list[Message] | None = None


def drive_vectorised(
    task: Task, protocol: ProtocolSpec, topology: Topology, rngs: list[np.random.Generator], *, record: bool = False, after=None
) -> Traffic:
    """Drive a batch ``task`` (one row per node) through the protocol's batch path (:func:`p2pem.task.drive`).

    ``after(iteration, values, averages)`` is called after every aggregation.
    """
    traffic = Traffic(trace=[] if record else None)

    def aggregate(it: int, values: FloatArray) -> FloatArray:
        out = protocol.aggregate(values, topology, rngs, it, record=record)
        traffic.rounds[it] = out.rounds
        traffic.messages += out.messages
        traffic.nbytes += out.nbytes
        if not out.converged:
            traffic.unconverged.append(it)
        if traffic.trace is not None and out.trace is not None:
            traffic.trace.extend(out.trace)
        return out.results

    drive(task, aggregate, after=after)
    return traffic


def drive_messages(
    tasks: Sequence[Task],
    protocol: ProtocolSpec,
    topology: Topology,
    rngs: list[np.random.Generator],
    *,
    record: bool = False,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[Node], Traffic]:
    """Run one :class:`~p2pem.node.Node` per task (node i holds ``tasks[i]``) over an in-memory FIFO.

    Asynchronous protocols wake a node drawn from ``rngs[n]`` whenever no message is in flight.
    ``progress(iteration)`` is called when node 0 has finished another aggregation.

    Returns
    -------
    nodes : list of Node
        Every node, finished.
    traffic : Traffic
    """
    n = len(tasks)
    nodes = [Node(NodeContext(i, topology, rngs[i]), task, protocol) for i, task in enumerate(tasks)]
    server = Server(protocol, topology) if protocol.server_aggregation(topology, 0) is not None else None
    schedule = rngs[n]
    queue: deque[tuple[int, Message]] = deque()
    trace: list[Message] | None = [] if record else None
    last_reported = 0

    def post(msgs: list[Message]) -> None:
        for m in msgs:
            if trace is not None:
                trace.append(m)
            for r in m.receivers:
                queue.append((r, m))

    for node in nodes:
        post(node.start())
    while True:
        while queue:
            r, m = queue.popleft()
            target = server if r == SERVER else nodes[r]
            if target is None:
                raise ProtocolError(f"message to unknown receiver {r}")
            post(target.receive(m))
        if all(node.done for node in nodes):
            break
        if not protocol.asynchronous:
            stuck = next(node for node in nodes if not node.done)
            raise ProtocolError(f"deadlock: node {stuck.node_id} waits ({stuck.waiting_for()}) but no message is in flight")
        post(nodes[int(schedule.integers(n))].wake())
        if progress is not None and nodes[0].iteration - 1 > last_reported:
            last_reported = nodes[0].iteration - 1
            progress(last_reported)
    traffic = Traffic(
        rounds={it: float(np.mean([node.rounds[it] for node in nodes])) for it in nodes[0].rounds},
        unconverged=sorted(set().union(*(node.unconverged for node in nodes))),
        messages=sum(node.sent_messages for node in nodes) + (server.sent_messages if server else 0),
        nbytes=sum(node.sent_bytes for node in nodes) + (server.sent_bytes if server else 0),
        trace=trace,
    )
    return nodes, traffic


def _run_vectorised(parts, topology, protocol, settings, rngs, record, progress, t0) -> RunResult:
    def report(it: int, values: FloatArray, averages: FloatArray) -> None:
        if progress is not None and it > 0:
            progress(it, settings.max_iter)

    state = EMState(parts, settings, len(parts))
    traffic = drive_vectorised(state, protocol, topology, rngs, record=record, after=report)
    return _result(protocol, state, state.flat_models(), traffic, time.perf_counter() - t0)


def _run_messages(parts, topology, protocol, settings, rngs, record, progress, t0) -> RunResult:
    tasks = [EMState([X], settings, len(parts)) for X in parts]
    report = None if progress is None else (lambda it: progress(it, settings.max_iter))
    nodes, traffic = drive_messages(tasks, protocol, topology, rngs, record=record, progress=report)
    states = [node.em for node in nodes]
    if any(s.n_iter != states[0].n_iter for s in states):
        raise ProtocolError("nodes ended after different numbers of EM iterations (internal error)")
    flat = np.concatenate([s.flat_models() for s in states])
    return _result(protocol, states[0], flat, traffic, time.perf_counter() - t0)


def _result(protocol, state: EMState, flat: FloatArray, traffic: Traffic, wall: float) -> RunResult:
    """The run's summary from node 0's state and every node's flattened model ``flat``."""
    rounds = traffic.rounds
    its = sorted(k for k in rounds if k > 0)
    return RunResult(
        protocol=getattr(protocol, "label", protocol.name),
        protocol_params=protocol.params(),
        params=state.params(0),
        family=state.family,
        loglik=state.node_loglik(0),
        n_iter=state.n_iter,
        converged=state.converged,
        consensus_iterations=[rounds[k] for k in its],
        init_consensus_iterations=rounds.get(0),
        messages=traffic.messages,
        bytes=traffic.nbytes,
        wall_s=wall,
        node_spread=relative_error(flat, flat[0]),
        unconverged_iterations=list(traffic.unconverged),
        trace=traffic.trace,
        released_rows=float(state.released_rows[0]),
    )
