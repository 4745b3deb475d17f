"""The exact baselines: the secure-summation ring and the federated server.

``secure-sum`` is the ring protocol of Lin, Clifton & Zhu (2005): along a Hamiltonian cycle
v_0 -> v_1 -> ... -> v_{n-1} -> v_0 the initiator v_0 sends R + s_0, every node adds its value,
and v_0 removes R from what comes back.  Arithmetic is modular on 2**256 over fixed-point
integers with 96 fractional bits, so the mask R (uniform over the whole ring) hides the partial
sums perfectly and the total is exact: the only rounding is the final conversion to float64.
Every ring hop carries a masked partial sum and must be encrypted: an eavesdropper who sees
both hops around a node subtracts them and gets that node's value.  The result then travels
once more around the ring in the clear (it is the public output).

``federated`` sends every node's statistics in the clear to a server, which sums them with
``math.fsum`` (correctly rounded, independent of order) and sends the average back.  It is the
leaky baseline: the server sees everything.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

import numpy as np

from p2pem.errors import GraphError, ProtocolError
from p2pem.messages import SERVER, Message
from p2pem.protocols.base import AggregateOutcome, Aggregation, NodeContext, ProtocolSpec, ProtocolViolation, Topology

if TYPE_CHECKING:
    import networkx as nx

MODULUS = 1 << 256
FRACTION_BITS = 96


def encode_fixed(values: np.ndarray) -> list[int]:
    """Float64 -> integers mod 2**256 with 96 fractional bits (exact for |v| >= 2**-43)."""
    return [int(math.ldexp(float(v), FRACTION_BITS)) % MODULUS for v in values]


def decode_fixed(values: list[int]) -> np.ndarray:
    """Inverse of :func:`encode_fixed` for a (possibly summed) vector, two's complement."""
    half = MODULUS >> 1
    return np.array([math.ldexp(float(v - MODULUS if v >= half else v), -FRACTION_BITS) for v in values])


def random_mask(rng: np.random.Generator, p: int) -> list[int]:
    raw = rng.bytes(32 * p)
    return [int.from_bytes(raw[32 * k : 32 * (k + 1)], "little") for k in range(p)]


#: Hamiltonian cycles found by :meth:`SecureSum.topology`, per networkx graph (dropped with the graph).
_RINGS: weakref.WeakKeyDictionary[nx.Graph, list[int]] = weakref.WeakKeyDictionary()


def fsum_average(rows: np.ndarray) -> np.ndarray:
    """Correctly rounded column sums divided by the number of rows."""
    n = rows.shape[0]
    return np.array([math.fsum(col) for col in rows.T]) / n


@dataclass(frozen=True)
class SecureSum(ProtocolSpec):
    """``secure-sum``: the ring protocol of Lin, Clifton & Zhu on a Hamiltonian cycle of the graph.

    Parameters
    ----------
    ring_search_s : float
        Time budget for finding the Hamiltonian cycle.
    """

    ring_search_s: float = 10.0
    name: str = field(init=False, default="secure-sum")

    def validate(self, g: nx.Graph | Topology) -> None:
        self.topology(g)

    def topology(self, g: nx.Graph | Topology) -> Topology:
        if isinstance(g, Topology):
            if g.ring is None:
                raise GraphError("secure-sum needs a Hamiltonian cycle: pass a networkx graph, or a Topology built with ring=")
            return g
        # the cycle search is the expensive part: remember it per graph object (here, not in the
        # caller's graph), and search again only if the graph changed so that the remembered
        # cycle no longer is one
        ring = _RINGS.get(g)
        n = g.number_of_nodes()
        if ring is None or len(ring) != n or not all(g.has_edge(ring[i], ring[(i + 1) % n]) for i in range(n)):
            from p2pem.graphs import hamiltonian_cycle  # here: networkx loads only where a graph is given

            ring = _RINGS[g] = hamiltonian_cycle(g, time_budget=self.ring_search_s)
        return Topology.from_graph(g, ring=ring)

    @property
    def message_kinds(self) -> frozenset[str]:
        return frozenset({"ring", "result"})

    @property
    def secret_kinds(self) -> frozenset[str]:
        """The masked partial sums: both hops around a node give its value away."""
        return frozenset({"ring"})

    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        return RingNode(ctx, iteration)

    def aggregate(self, values, topology, rngs, iteration, *, record=False) -> AggregateOutcome:
        ring = topology.ring
        n, p = values.shape
        trace: list[Message] | None = [] if record else None
        mask = random_mask(rngs[ring[0]], p)  # drawn even untraced: the initiator's stream advances as on a node
        if trace is None:
            # the mask cancels and reduction mod 2**256 commutes with the sum: the same total as
            # the ring's, from one exact integer sum per column (ldexp by 2**96 is exact in float64)
            scaled = np.ldexp(np.asarray(values, dtype=float), FRACTION_BITS).T.tolist()
            total = [sum(map(int, col)) % MODULUS for col in scaled]
        else:
            acc = mask
            for hop, v in enumerate(ring):
                acc = [(a + e) % MODULUS for a, e in zip(acc, encode_fixed(values[v]), strict=True)]
                trace.append(Message(v, (ring[(hop + 1) % n],), iteration, hop + 1, "ring", tuple(acc), True))
            total = [(a - r) % MODULUS for a, r in zip(acc, mask, strict=True)]
        average = decode_fixed(total) / n
        if trace is not None:
            for hop in range(n - 1):
                trace.append(Message(ring[hop], (ring[hop + 1],), iteration, n + 1 + hop, "result", average.copy(), False))
        return AggregateOutcome(np.broadcast_to(average, (n, p)), 2 * n - 1, 2 * n - 1, n * 32 * p + (n - 1) * 8 * p, True, trace)


class RingNode(Aggregation):
    def __init__(self, ctx: NodeContext, iteration: int) -> None:
        super().__init__()
        ring = ctx.topology.ring
        if ring is None:
            raise ProtocolError("secure-sum needs a Hamiltonian cycle in the topology")
        self.ctx = ctx
        self.iteration = iteration
        self.n = len(ring)
        self.pos = ring.index(ctx.node_id)
        self.succ = ring[(self.pos + 1) % self.n]
        self.pred = ring[(self.pos - 1) % self.n]
        self.initiator = self.pos == 0
        self.rounds = 2 * self.n - 1

    def start(self, value: np.ndarray) -> list[Message]:
        self.p = value.shape[0]
        self.enc = encode_fixed(value)
        if not self.initiator:
            return []
        self.mask = random_mask(self.ctx.rng, self.p)
        acc = [(a + e) % MODULUS for a, e in zip(self.mask, self.enc, strict=True)]
        return [Message(self.ctx.node_id, (self.succ,), self.iteration, 1, "ring", tuple(acc), True)]

    def receive(self, msg: Message) -> list[Message]:
        me = self.ctx.node_id
        if msg.sender != self.pred or self.done:
            raise ProtocolError(f"secure-sum: node {me} got an unexpected {msg.kind} message from node {msg.sender}")
        if msg.kind == "ring":
            if msg.round != self.pos + (self.n if self.initiator else 0):
                raise ProtocolError(f"secure-sum: ring message from node {msg.sender} in wrong round {msg.round}")
            if len(msg.payload) != self.p:  # zip would silently drop the missing coordinates
                raise ProtocolViolation(
                    msg.sender, msg.iteration, msg.round, "shape", f"ring message: {len(msg.payload)} values, expected {self.p}"
                )
            if not self.initiator:
                acc = [(a + e) % MODULUS for a, e in zip(msg.payload, self.enc, strict=True)]
                return [Message(me, (self.succ,), self.iteration, self.pos + 1, "ring", tuple(acc), True)]
            total = [(a - r) % MODULUS for a, r in zip(msg.payload, self.mask, strict=True)]
            return self._finish(decode_fixed(total) / self.n, self.n + 1)
        if msg.kind == "result" and not self.initiator:
            return self._finish(np.asarray(msg.payload), msg.round + 1)
        raise ProtocolError(f"secure-sum: unexpected message kind {msg.kind!r} from node {msg.sender}")

    def awaiting(self) -> tuple[int, ...]:
        """The ring predecessor (its partial sum, then the result), until done."""
        return () if self.done else (self.pred,)

    def _finish(self, average: np.ndarray, next_round: int) -> list[Message]:
        self.done = True
        self.result = average
        if self.pos == self.n - 1:
            return []
        return [Message(self.ctx.node_id, (self.succ,), self.iteration, next_round, "result", average.copy(), False)]


@dataclass(frozen=True)
class Federated(ProtocolSpec):
    """``federated``: every node uploads its statistics in the clear; a server averages them."""

    name: str = field(init=False, default="federated")

    @property
    def message_kinds(self) -> frozenset[str]:
        return frozenset({"upload", "result"})

    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        return UploadNode(ctx, iteration)

    def server_aggregation(self, topology: Topology, iteration: int) -> Aggregation:
        return ServerNode(topology.n_nodes, iteration)

    def aggregate(self, values, topology, rngs, iteration, *, record=False) -> AggregateOutcome:
        n, p = values.shape
        average = fsum_average(values)
        trace: list[Message] | None = None
        if record:
            trace = [Message(i, (SERVER,), iteration, 1, "upload", values[i].copy(), False) for i in range(n)]
            trace.append(Message(SERVER, tuple(range(n)), iteration, 2, "result", average.copy(), False))
        return AggregateOutcome(np.broadcast_to(average, (n, p)), 2, n + 1, (n + 1) * 8 * p, True, trace)


class UploadNode(Aggregation):
    def __init__(self, ctx: NodeContext, iteration: int) -> None:
        super().__init__()
        self.ctx = ctx
        self.iteration = iteration
        self.rounds = 2

    def start(self, value: np.ndarray) -> list[Message]:
        return [Message(self.ctx.node_id, (SERVER,), self.iteration, 1, "upload", value.copy(), False)]

    def awaiting(self) -> tuple[int, ...]:
        """The server (its result), until done."""
        return () if self.done else (SERVER,)

    def receive(self, msg: Message) -> list[Message]:
        if msg.sender != SERVER or msg.kind != "result" or self.done:
            raise ProtocolError(f"federated: node {self.ctx.node_id} got an unexpected {msg.kind} from {msg.sender}")
        self.done = True
        self.result = np.asarray(msg.payload)
        return []


class ServerNode(Aggregation):
    def __init__(self, n_nodes: int, iteration: int) -> None:
        super().__init__()
        self.n = n_nodes
        self.iteration = iteration
        self.uploads: dict[int, np.ndarray] = {}
        self.rounds = 2

    def start(self, value: np.ndarray) -> list[Message]:
        return []

    def awaiting(self) -> tuple[int, ...]:
        """The nodes whose upload has not arrived."""
        return () if self.done else tuple(i for i in range(self.n) if i not in self.uploads)

    def receive(self, msg: Message) -> list[Message]:
        if msg.kind != "upload" or msg.sender in self.uploads or not 0 <= msg.sender < self.n:
            raise ProtocolError(f"federated server: unexpected {msg.kind} from node {msg.sender}")
        self.uploads[msg.sender] = np.asarray(msg.payload)
        if len(self.uploads) < self.n:
            return []
        self.done = True
        self.result = fsum_average(np.stack([self.uploads[i] for i in range(self.n)]))
        return [Message(SERVER, tuple(range(self.n)), self.iteration, 2, "result", self.result.copy(), False)]
