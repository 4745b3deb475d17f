"""What every aggregation protocol provides: a per-node state machine and a fast batch path.

An *aggregation* turns one vector per node into the network average at every node.  A
protocol spec (a frozen dataclass holding the user's parameters) makes one
:class:`Aggregation` per node and EM iteration; the Node feeds it messages and collects what
it sends.  The same spec also offers :meth:`ProtocolSpec.aggregate`, which computes all
nodes at once with the same arithmetic in the same order, so the vectorised simulator and
the message-level one agree to the last bit (a test checks it, traces included).
"""

from __future__ import annotations

import abc
import dataclasses
from itertools import chain
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from typing import TYPE_CHECKING

import numpy as np

from p2pem.errors import ProtocolError
from p2pem.messages import Message

if TYPE_CHECKING:  # networkx and scipy.sparse load lazily: a node process needs neither
    import networkx as nx
    import scipy.sparse as sp

    from p2pem.em import EMSettings


def _csr_from_lists(neighbours: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of adjacency lists, without a Python loop per edge."""
    counts = np.fromiter((len(nb) for nb in neighbours), dtype=np.int64, count=len(neighbours))
    indptr = np.zeros(len(neighbours) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.fromiter(chain.from_iterable(neighbours), dtype=np.int64, count=int(indptr[-1]))
    return indptr, indices


def _unit_csr(indptr: np.ndarray, indices: np.ndarray):
    import scipy.sparse as sp  # here: start-up time (a node process of a small graph never loads SciPy)

    n = indptr.size - 1
    return sp.csr_matrix((np.ones(indices.size, dtype=np.int8), indices, indptr), shape=(n, n))


def _bfs(adj, v: int) -> np.ndarray:
    from scipy.sparse.csgraph import shortest_path  # here: start-up time, as above

    return shortest_path(adj, unweighted=True, indices=[v])[0]


def double_sweep(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hop distances from the two ends b, c of a long shortest path (BFS 0 -> b -> c).

    The classic double sweep: dist(b, c) is a lower bound on the diameter, usually close to
    it.  Disconnected graphs give infinite distances.
    """
    adj = _unit_csr(indptr, indices)
    db = _bfs(adj, int(np.argmax(_bfs(adj, 0))))
    if not np.all(np.isfinite(db)):
        return db, db
    return db, _bfs(adj, int(np.argmax(db)))


#: Up to this many nodes the eccentricities are found by plain breadth-first searches here
#: instead of SciPy's, so that a node process of a deployment never imports SciPy (a third of
#: its start-up).
SMALL_GRAPH = 200


def _small_eccentricities(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray | None:
    """Exact eccentricities by one breadth-first search per node (O(n m)); None when disconnected."""
    n = indptr.size - 1
    ptr, ind = indptr.tolist(), indices.tolist()
    nbrs = [ind[ptr[i] : ptr[i + 1]] for i in range(n)]
    ecc = np.zeros(n, dtype=np.int64)
    for source in range(n):
        seen = {source}
        frontier = [source]
        depth = 0
        while True:
            nxt = [j for i in frontier for j in nbrs[i] if j not in seen and not seen.add(j)]  # type: ignore[func-returns-value]  # set.add marks j seen inside the filter
            if not nxt:
                break
            frontier = nxt
            depth += 1
        if len(seen) < n:
            return None
        ecc[source] = depth
    return ecc


def eccentricity_bounds(indptr: np.ndarray, indices: np.ndarray, sweep=None) -> np.ndarray | None:
    """Per-node upper bounds on the eccentricity (exact up to 2000 nodes); None when disconnected.

    Up to 2000 nodes all shortest paths are computed, so the values are the eccentricities.
    Larger graphs use the :func:`double_sweep` (given as ``sweep`` if already computed) and
    one more BFS from the middle node m of the path b - c it finds: ecc(i) <= dist(i, l) +
    ecc(l) for each landmark l in {b, c, m} (triangle inequality), and the smallest of the
    three bounds is kept.  The largest bound is at most 2 ecc(m).  O(n + m) time and memory.
    """
    n = indptr.size - 1
    if n <= SMALL_GRAPH:
        return _small_eccentricities(indptr, indices)
    from scipy.sparse.csgraph import shortest_path  # here: start-up time (small graphs never load SciPy)

    adj = _unit_csr(indptr, indices)
    if n <= 2000:
        dist = shortest_path(adj, unweighted=True)
        if not np.all(np.isfinite(dist)):
            return None
        return np.max(dist, axis=1).astype(np.int64)
    db, dc = double_sweep(indptr, indices) if sweep is None else sweep
    if not np.all(np.isfinite(db)):
        return None
    lower = int(np.max(db))
    on_path = np.flatnonzero((db + dc) == lower)
    middle = int(on_path[np.argmin(np.abs(db[on_path] - lower / 2))])
    bound = np.full(n, np.inf)
    for dist in (db, dc, _bfs(adj, middle)):
        bound = np.minimum(bound, dist + np.max(dist))
    return bound.astype(np.int64)


def diameter_bound(neighbours: Sequence[Sequence[int]]) -> int | None:
    """The diameter of the graph given by its adjacency lists for up to 2000 nodes, else a
    tight upper bound; None when the graph is disconnected.

    The largest of :func:`eccentricity_bounds`: exact up to 2000 nodes; above, at most 2 ecc(m)
    for the middle node m of a longest shortest path found by a double sweep, at the cost of
    four BFS instead of n.  pdmm-sp's
    stopping rule only needs upper bounds.  The roster of a deployment is checked with this
    same function, so both sides agree on the bound.
    """
    ecc = eccentricity_bounds(*_csr_from_lists(neighbours))
    return None if ecc is None else int(np.max(ecc))


class Topology:
    """Public facts about the graph that every node may know (from the roster).

    Directed edges ``(i, j)`` are numbered in lexicographic order, so a node's outgoing edges
    are contiguous and sorted by neighbour: the order every per-node sum runs in.  Held as
    CSR arrays (``row_start``, ``dst``); the tuple-of-tuples ``neighbours`` is built only when
    asked for, so a topology of 10^6 nodes built with :meth:`from_edges` costs O(m) memory in
    NumPy arrays, not Python objects.

    Parameters
    ----------
    n_nodes : int
    neighbours : tuple of tuples of int, optional
        Sorted adjacency lists (give these or ``indptr`` and ``indices``).
    diameter : int
        A public upper bound on the diameter (pdmm-sp's stopping rule).
    ring : tuple of int, optional
        A Hamiltonian cycle (secure-sum).
    indptr, indices : numpy arrays, optional
        CSR adjacency with sorted column indices per row.
    """

    def __init__(
        self,
        n_nodes: int,
        neighbours: Sequence[Sequence[int]] | None = None,
        diameter: int = 0,
        ring: Sequence[int] | None = None,
        *,
        indptr: np.ndarray | None = None,
        indices: np.ndarray | None = None,
    ) -> None:
        self.n_nodes = int(n_nodes)
        self.diameter = int(diameter)
        self.ring = None if ring is None else tuple(ring)
        if neighbours is not None:
            self.__dict__["neighbours"] = tuple(tuple(nb) for nb in neighbours)
            indptr, indices = _csr_from_lists(self.neighbours)
        elif indptr is None or indices is None:
            raise ProtocolError("Topology needs neighbours or indptr and indices")
        self._indptr = np.asarray(indptr, dtype=np.int64)
        self._indices = np.asarray(indices, dtype=np.int64)

    def __repr__(self) -> str:
        return f"Topology(n_nodes={self.n_nodes}, directed_edges={self._indices.size}, diameter={self.diameter})"

    @classmethod
    def from_graph(cls, g: nx.Graph, *, ring: list[int] | None = None) -> Topology:
        n = g.number_of_nodes()
        edges = np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2)
        return cls.from_edges(n, edges, ring=ring)

    @classmethod
    def from_edges(cls, n_nodes: int, edges: np.ndarray, *, ring: list[int] | None = None) -> Topology:
        """From an (m, 2) array of undirected edges over ``0..n-1`` (each edge once, no loops).

        O(m log m) in NumPy; raises ProtocolError when the graph is disconnected.
        """
        import scipy.sparse as sp  # here: start-up time (a node process builds its topology from lists)

        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        rows = np.concatenate([edges[:, 0], edges[:, 1]])
        cols = np.concatenate([edges[:, 1], edges[:, 0]])
        # CSR conversion is a counting sort by row in C; then columns sorted within rows
        adj = sp.csr_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=(n_nodes, n_nodes))
        del rows, cols
        adj.sort_indices()
        indptr, indices = adj.indptr.astype(np.int64), adj.indices.astype(np.int64)
        if adj.nnz != 2 * len(edges) or np.any(indices == np.repeat(np.arange(n_nodes), np.diff(indptr))):
            raise ProtocolError("edges must be listed once each, without self-loops")
        del adj
        topo = cls(n_nodes, diameter=0, ring=ring, indptr=indptr, indices=indices)
        ecc = topo.eccentricity
        topo.diameter = int(np.max(ecc))
        return topo

    @cached_property
    def neighbours(self) -> tuple[tuple[int, ...], ...]:
        """Sorted adjacency lists (built on first use from the CSR arrays)."""
        ind = self._indices.tolist()
        ptr = self._indptr.tolist()
        return tuple(tuple(ind[ptr[i] : ptr[i + 1]]) for i in range(self.n_nodes))

    @cached_property
    def sweep(self) -> tuple[np.ndarray, np.ndarray]:
        """:func:`double_sweep` distances (cached: the eccentricity bounds and pdmm-sp's eigensolver start share them)."""
        return double_sweep(self._indptr, self._indices)

    @cached_property
    def eccentricity(self) -> np.ndarray:
        """Per-node upper bounds on the eccentricity, never above ``diameter`` (see :func:`eccentricity_bounds`).

        pdmm-sp's stopping rule waits ecc(i) rather than the diameter at node i (public, like the graph).
        """
        sweep = self.sweep if self.n_nodes > 2000 else None
        ecc = eccentricity_bounds(self._indptr, self._indices, sweep)
        if ecc is None:
            raise ProtocolError("the graph is disconnected")
        return np.minimum(ecc, self.diameter) if self.diameter > 0 else ecc

    def distances(self, source: int) -> tuple[int, ...]:
        """Hop distances from node ``source`` to every node (one breadth-first search, remembered).

        pdmm-sp checks a stop proposal against the counters it implies at this node's distance
        from the proposer (:meth:`Aggregation.check_proposal`).
        """
        cache = self.__dict__.setdefault("_distances", {})
        found = cache.get(source)
        if found is None:
            nbrs = self.neighbours
            dist = [-1] * self.n_nodes
            dist[source] = 0
            frontier = [source]
            while frontier:
                nxt = []
                for i in frontier:
                    for j in nbrs[i]:
                        if dist[j] < 0:
                            dist[j] = dist[i] + 1
                            nxt.append(j)
                frontier = nxt
            found = cache[source] = tuple(dist)
        return found

    @cached_property
    def degrees(self) -> np.ndarray:
        return np.diff(self._indptr)

    @cached_property
    def src(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_nodes), self.degrees)

    @property
    def dst(self) -> np.ndarray:
        return self._indices

    @property
    def indptr(self) -> np.ndarray:
        """CSR row pointer: node i's edges are ``indptr[i]:indptr[i + 1]``."""
        return self._indptr

    @cached_property
    def row_start(self) -> np.ndarray:
        return self._indptr[:-1]

    @cached_property
    def reverse(self) -> np.ndarray:
        """Index of edge (j, i) for every edge (i, j)."""
        key = self.src * self.n_nodes + self.dst
        rev_key = self.dst * self.n_nodes + self.src
        return np.searchsorted(key, rev_key)

    @cached_property
    def sign(self) -> np.ndarray:
        """B_{i|j} = +1 if i < j else -1, per directed edge (i, j)."""
        return np.where(self.src < self.dst, 1.0, -1.0)

    @cached_property
    def adjacency(self) -> sp.csr_matrix:
        """n x n 0/1 adjacency in CSR with sorted columns: ``adjacency @ x`` sums neighbours in id order."""
        return self.weighted_adjacency(np.ones(self.dst.size))

    def weighted_adjacency(self, weights: np.ndarray) -> sp.csr_matrix:
        """n x n CSR matrix with ``weights`` (one per directed edge, in edge order) as entries."""
        import scipy.sparse as sp  # here: start-up time, as above

        n = self.n_nodes
        return sp.csr_matrix((weights, self.dst, self._indptr), shape=(n, n))


@dataclass(frozen=True, eq=False)
class NodeContext:
    """What one node knows when it runs a protocol: itself, the public topology, its own RNG."""

    node_id: int
    topology: Topology
    rng: np.random.Generator

    @property
    def neighbours(self) -> tuple[int, ...]:
        return self.topology.neighbours[self.node_id]

    @property
    def n_nodes(self) -> int:
        return self.topology.n_nodes


@dataclass
class AggregateOutcome:
    """Result of a batch aggregation over all nodes."""

    results: np.ndarray  # (n_nodes, p): the average as every node holds it
    rounds: float
    messages: int
    nbytes: int
    converged: bool = True
    trace: list[Message] | None = None


class ProtocolViolation(ProtocolError):
    """An authenticated message that an honest sender never sends: the sender broke the protocol.

    Parameters
    ----------
    sender : int
        Who sent it (authenticated, so the blame is certain).
    iteration, round : int
        The message's EM iteration and protocol round.
    check : str
        Short name of the failed check (``kind``, ``dtype``, ``shape``, ``finite``, ``meta``, ...).
    detail : str
        One line saying what was wrong.
    """

    def __init__(self, sender: int, iteration: int, round: int, check: str, detail: str) -> None:
        self.sender = int(sender)
        self.iteration = int(iteration)
        self.round = int(round)
        self.check = check
        self.detail = detail
        super().__init__(
            f"protocol violation by node {sender} (EM iteration {iteration}, round {round}, check '{check}'): {detail}"
        )


class StopContradicted(ProtocolError):
    """This node reached a stop round that its own state contradicts (it is not settled): the
    stop was proposed early.  A deployment names the node that signed the proposal.

    Attributes
    ----------
    stop_round : int
    """

    def __init__(self, stop_round: int, detail: str) -> None:
        super().__init__(detail)
        self.stop_round = int(stop_round)


#: Largest magnitude accepted in a float payload.  Honest values (sufficient statistics,
#: perturbed duals) stay far below; larger ones would overflow float64 in the sums of a round.
MAX_PAYLOAD_ABS = 1e100


def check_vector(msg: Message, length: int, *, allow_nan: bool = False) -> None:
    """Raise :class:`ProtocolViolation` unless ``msg.payload`` is a finite float64 vector of ``length``.

    ``allow_nan``: NaN entries pass (a private run's final log-likelihood); infinities and
    magnitudes beyond :data:`MAX_PAYLOAD_ABS` still fail.
    """
    payload = msg.payload

    def bad(check: str, detail: str) -> ProtocolViolation:
        return ProtocolViolation(msg.sender, msg.iteration, msg.round, check, f"{msg.kind} message: {detail}")

    if not isinstance(payload, np.ndarray):
        raise bad("dtype", f"payload is {type(payload).__name__}, not a float64 array")
    if payload.dtype != np.float64:
        raise bad("dtype", f"payload dtype {payload.dtype}, not float64")
    if payload.shape != (length,):
        raise bad("shape", f"payload shape {payload.shape}, expected ({length},)")
    # one reduction for both checks (NaN fails the comparison): this runs for every message
    if length and not np.abs(payload).max() <= MAX_PAYLOAD_ABS:
        values = payload[~np.isnan(payload)] if allow_nan else payload
        if not np.all(np.isfinite(values)):
            raise bad("finite", "payload holds NaN or infinite values")
        if values.size and not np.abs(values).max() <= MAX_PAYLOAD_ABS:
            raise bad("range", f"payload holds values beyond {MAX_PAYLOAD_ABS:g} in magnitude")


class Aggregation(abc.ABC):
    """One node's part of one aggregation (one EM iteration)."""

    #: the EM iteration this aggregation belongs to (set by every subclass)
    iteration: int
    #: the protocol round this node's part is in, for progress and error messages (0 where a
    #: protocol counts no rounds)
    round: int = 0

    def __init__(self) -> None:
        self.done = False
        self.result: np.ndarray | None = None
        self.rounds: float = 0
        self.converged = True

    @abc.abstractmethod
    def start(self, value: np.ndarray) -> list[Message]:
        """Begin with this node's input vector; returns the messages to send."""

    @abc.abstractmethod
    def receive(self, msg: Message) -> list[Message]:
        """Consume one message addressed to this node; returns the messages to send."""

    def check(self, msg: Message) -> None:
        """Raise :class:`ProtocolViolation` if ``msg`` is not a message an honest peer sends now.

        Called by a deployment before :meth:`receive`, after :meth:`start`, for every
        authenticated message of this aggregation, so that nothing malformed touches the state.
        The default accepts everything (protocols that are not deployed).
        """

    def awaiting(self) -> tuple[int, ...]:
        """The senders whose next message this state machine needs before it can go on.

        A deployment waits for exactly these: one that sends nothing (not even a heartbeat)
        for its timeout is named as fallen silent, and a stall names them.  Empty once done,
        and by default (a protocol that does not say is only watched for stalls).
        """
        return ()

    def wake(self) -> list[Message]:
        """One asynchronous activation (only asynchronous protocols override this)."""
        raise ProtocolError(f"{type(self).__name__} is not asynchronous")

    # -- accountable stops: what a protocol whose nodes decide to stop together declares --

    def proposal(self) -> tuple[int, int] | None:
        """``(proposed_at, stop_round)`` once, when this node itself has just proposed to stop.

        A deployment signs it and floods it before the messages that announce it, so every
        node can check it against its own counters (:meth:`check_proposal`) and every
        announced stop round is backed by a signed proposal (:meth:`claimed_stop`).  None by
        default (a protocol without a distributed stopping decision).
        """
        return None

    def claimed_stop(self, msg: Message) -> int | None:
        """The stop round ``msg`` announces (None when it announces none)."""
        return None

    def check_proposal(self, origin: int, proposed_at: int, stop: int) -> tuple[str, str] | None:
        """Check node ``origin``'s proposal to stop at ``stop``, made in round ``proposed_at``.

        Returns None when it is consistent with this node's own state, else ``(kind, why)``:
        kind ``"form"`` when no honest node can make such a proposal at all (its fields
        contradict the public facts), ``"counters"`` when it contradicts what this node's
        own counters allow.
        """
        return ("form", f"{type(self).__name__} makes no stop proposals")

    @property
    def ready(self) -> bool:
        """True when a wake would do something (asynchronous protocols)."""
        return False

    def may_wake(self) -> bool:
        """Whether a deployment may wake this node now (asynchronous protocols): by default
        when it is :attr:`ready`; a protocol whose neighbours must not wake at once says so."""
        return self.ready


def parameter_fields(spec: type | object) -> tuple[dataclasses.Field, ...]:
    """The user-settable parameters of a protocol spec (class or instance): its ``__init__``
    fields, less those marked ``metadata={"bound": True}`` (state a run binds, see
    :meth:`ProtocolSpec.bind`)."""
    return tuple(f for f in dataclasses.fields(spec) if f.init and not f.metadata.get("bound"))  # type: ignore[arg-type]


@dataclass(frozen=True)
class ProtocolSpec(abc.ABC):
    """A protocol and its parameters; frozen, so it can be shared by every node."""

    name: str = field(init=False, default="")
    exact: bool = field(init=False, default=True)

    @property
    def asynchronous(self) -> bool:
        """Whether nodes run on wake-ups (:meth:`Aggregation.wake`) instead of rounds."""
        return False

    def bind(
        self, settings: EMSettings, parts: list[np.ndarray], *, seed: int | np.random.SeedSequence = 0
    ) -> tuple[ProtocolSpec, EMSettings, list[np.ndarray]]:
        """Bind the spec to one run before anything runs: ``(spec, settings, parts)`` to run with.

        :func:`p2pem.simulate.run_protocol` calls it with the run's data and protocol
        ``seed`` (the seed of :func:`p2pem.streams.protocol_streams`).  A protocol that needs
        the run (a private one clips the data to its public box, calibrates its noise to the
        number of iterations and hooks the EM loop through ``settings.privacy``) returns a new
        frozen spec (``dataclasses.replace`` of a field marked ``metadata={"bound": True}``,
        see :func:`parameter_fields`), new settings and the parts to use; the caller's objects
        are never changed.  The default binds nothing.

        Raises
        ------
        ConfigError
            The run does not suit the protocol (e.g. a private run with ``tol`` > 0).
        """
        return self, settings, parts

    def check_settings(self, settings: EMSettings) -> None:
        """Refuse settings this protocol cannot run with, before anything of the scenario runs.

        :func:`p2pem.runner.run_scenario` calls it for every protocol before the first one
        starts, and :meth:`bind` of a protocol that overrides it calls it again, so a scenario
        whose last protocol cannot run writes nothing.  The default accepts everything.

        Raises
        ------
        ConfigError
            The settings do not suit the protocol (e.g. a private run with ``tol`` > 0).
        """

    @property
    def message_kinds(self) -> frozenset[str] | None:
        """Every kind of message this protocol's nodes send each other; None when not declared.

        A deployment refuses an authenticated message of another kind before it reaches the
        state machine, naming its sender.
        """
        return None

    @property
    def secret_kinds(self) -> frozenset[str]:
        """Kinds whose payload is a secret of its sender: they travel sealed per edge, and a
        deployment refuses to publish one in clear.  None by default."""
        return frozenset()

    @property
    def agreement_rtol(self) -> float:
        """Largest relative difference between two nodes' final results that counts as the same.

        A deployment's final agreement compares every node's result with every other's at
        this tolerance.  1e-12 by default: an exact protocol hands every node the same average,
        so only the hosts' own arithmetic of the task can differ.  A protocol with a
        consensus error ties it to its own tolerance.
        """
        return 1e-12

    @property
    def max_ahead(self) -> int:
        """Most messages one neighbour can send for an aggregation before this node begins it.

        A node keeps them until then (:class:`p2pem.node.Node`); in a deployment a neighbour
        that sends more is convicted of a violation, so a member cannot make a node queue
        without limit.  4 unless the protocol knows better.
        """
        return 4

    def validate(self, g: nx.Graph | Topology) -> None:
        """Raise GraphError when the protocol cannot run on ``g``."""

    def topology(self, g: nx.Graph | Topology) -> Topology:
        """The public topology of ``g``; a :class:`Topology` is taken as it is (large graphs
        built with :func:`p2pem.graphs.geometric_edges` + :meth:`Topology.from_edges` need no
        networkx graph)."""
        return g if isinstance(g, Topology) else Topology.from_graph(g)

    @abc.abstractmethod
    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        """The per-node state machine for one aggregation."""

    def server_aggregation(self, topology: Topology, iteration: int) -> Aggregation | None:
        """The state machine of a server, for protocols that have one."""
        return None

    def aggregate(
        self,
        values: np.ndarray,
        topology: Topology,
        rngs: list[np.random.Generator],
        iteration: int,
        *,
        record: bool = False,
    ) -> AggregateOutcome:
        """All nodes at once; must match the per-node state machines bit for bit."""
        raise NotImplementedError

    def public_parameters(self, topology: Topology) -> tuple[float, ...]:
        """The numbers every node derives from the public topology (step sizes, schedules).

        Nodes compute them themselves; where that takes floating-point linear algebra, other
        hosts' libraries may differ in the last digits, and a deployment compares these
        before it starts (:mod:`p2pem.deploy.runtime`).  None by default.
        """
        return ()

    def placed(self, topology: Topology) -> ProtocolSpec:
        """This bound spec on ``topology``, for what its guarantee reads off the graph (default: itself).

        Called once the topology is known (after :meth:`bind`, before the run): a private
        protocol finds where colluders would sit worst (:mod:`p2pem.dp.guarantees`) and may
        size its noise shares for it.  Returns a new frozen spec, or ``self``.
        """
        return self

    def resolved_params(self, topology: Topology) -> dict:
        """What the "auto" parameters became on ``topology`` (for result files); empty by default."""
        return {}

    def params(self) -> dict:
        """The user-settable parameters (:func:`parameter_fields`), for result files."""
        return {f.name: getattr(self, f.name) for f in parameter_fields(self)}
