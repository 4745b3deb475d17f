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


def diameter_bound(neighbours: Sequence[Sequence[int]]) -> int | None:
    """The diameter of the graph given by its adjacency lists for up to 2000 nodes, else a
    tight upper bound; None when the graph is disconnected.

    Larger graphs use two breadth-first sweeps: from the middle node m of a longest shortest
    path found by a double sweep, diameter <= 2 ecc(m); on geometric graphs that is within a
    few hops of the exact value and costs three BFS instead of n.  pdmm-sp's stopping rule
    only needs an upper bound (it waits that many rounds for flags to flood).  The roster of
    a deployment is checked with this same function, so both sides agree on the bound.
    """
    import scipy.sparse as sp
    from scipy.sparse.csgraph import shortest_path

    n = len(neighbours)
    indptr = np.concatenate([[0], np.cumsum([len(nb) for nb in neighbours])])
    indices = np.array([j for nb in neighbours for j in nb], dtype=np.int64)
    adj = sp.csr_matrix((np.ones(indices.size), indices, indptr), shape=(n, n))

    def bfs(v: int) -> np.ndarray:
        return shortest_path(adj, unweighted=True, indices=[v])[0]

    d0 = bfs(0)
    if not np.all(np.isfinite(d0)):
        return None
    if n <= 2000:
        return int(np.max(shortest_path(adj, unweighted=True)))
    b = int(np.argmax(d0))
    db = bfs(b)
    c = int(np.argmax(db))
    lower = int(db[c])
    dc = bfs(c)
    on_path = np.flatnonzero((db + dc) == lower)
    middle = int(on_path[np.argmin(np.abs(db[on_path] - lower / 2))])
    return max(lower, 2 * int(np.max(bfs(middle))))


@dataclass(frozen=True, eq=False)
class Topology:
    """Public facts about the graph that every node may know (from the roster).

    Directed edges ``(i, j)`` are numbered in lexicographic order, so a node's outgoing edges
    are contiguous and sorted by neighbour: the order every per-node sum runs in.
    """

    n_nodes: int
    neighbours: tuple[tuple[int, ...], ...]
    diameter: int
    ring: tuple[int, ...] | None = None

    @classmethod
    def from_graph(cls, g: nx.Graph, *, ring: list[int] | None = None) -> Topology:
        n = g.number_of_nodes()
        nbrs = tuple(tuple(sorted(int(v) for v in g.neighbors(i))) for i in range(n))
        diameter = diameter_bound(nbrs)
        if diameter is None:
            raise ProtocolError("the graph is disconnected")
        return cls(n_nodes=n, neighbours=nbrs, diameter=diameter, ring=None if ring is None else tuple(ring))

    @cached_property
    def degrees(self) -> np.ndarray:
        return np.array([len(nb) for nb in self.neighbours], dtype=np.int64)

    @cached_property
    def src(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_nodes), self.degrees)

    @cached_property
    def dst(self) -> np.ndarray:
        return np.array([j for nb in self.neighbours for j in nb], dtype=np.int64)

    @cached_property
    def row_start(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.degrees)[:-1]])

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
        import scipy.sparse as sp

        n = self.n_nodes
        return sp.csr_matrix((np.ones(self.src.size), self.dst, np.append(self.row_start, self.src.size)), shape=(n, n))


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


#: Largest magnitude accepted in a float payload.  Honest values (sufficient statistics,
#: perturbed duals) stay far below; larger ones would overflow float64 in the sums of a round.
MAX_PAYLOAD_ABS = 1e100


def check_vector(msg: Message, length: int) -> None:
    """Raise :class:`ProtocolViolation` unless ``msg.payload`` is a finite float64 vector of ``length``."""
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
        if not np.all(np.isfinite(payload)):
            raise bad("finite", "payload holds NaN or infinite values")
        raise bad("range", f"payload holds values beyond {MAX_PAYLOAD_ABS:g} in magnitude")


class Aggregation(abc.ABC):
    """One node's part of one aggregation (one EM iteration)."""

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

    def wake(self) -> list[Message]:
        """One asynchronous activation (only asynchronous protocols override this)."""
        raise ProtocolError(f"{type(self).__name__} is not asynchronous")

    @property
    def ready(self) -> bool:
        """True when a wake would do something (asynchronous protocols)."""
        return False


@dataclass(frozen=True)
class ProtocolSpec(abc.ABC):
    """A protocol and its parameters; frozen, so it can be shared by every node."""

    name: str = field(init=False, default="")
    exact: bool = field(init=False, default=True)
    asynchronous: bool = field(init=False, default=False)

    def validate(self, g: nx.Graph) -> None:
        """Raise GraphError when the protocol cannot run on ``g``."""

    def topology(self, g: nx.Graph) -> Topology:
        return Topology.from_graph(g)

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

    def params(self) -> dict:
        """The user-settable parameters, for result files."""
        from dataclasses import asdict

        out = asdict(self)
        for key in ("name", "exact", "asynchronous"):
            out.pop(key, None)
        return out
