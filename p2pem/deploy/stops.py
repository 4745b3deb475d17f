"""Accountable stops: every stop round a node acts on is backed by a signed proposal.

In pdmm-sp each node stops at a round its counters justify: node o proposes the stop round
``t + e_o`` when its settled counter reaches ``e_o + 1`` in round t (``e_o`` is its public
eccentricity bound), and the smallest proposal is flooded inside the primal broadcasts.  A
member could announce an early stop round there, and every honest node would stop with it.
So a deployment makes each proposal a signed statement of its origin
(:meth:`Stops.own`), flooded ahead of the broadcasts that announce it, and checks:

* every node checks a proposal's form against the public facts and its own counters
  (:meth:`p2pem.node.Node.check_proposal`): a malformed one convicts the neighbour that
  sent it; one that contradicts what this node's counters allow (the node was not settled
  long enough for anyone to propose that) stops the run naming the proposal's signed origin
  (:attr:`~p2pem.deploy.failures.Reason.STOP`), wherever it is in the graph;
* a broadcast that announces a stop round no signed proposal of this aggregation backs
  convicts its sender (:meth:`Stops.backed`): it arrives after the proposal it relies on,
  because its sender relays the proposal first on the same topic;
* a node that reaches its stop round without being settled stops the run naming the origin
  of that stop round (:class:`~p2pem.protocols.base.StopContradicted`).

Only proposals that lower the smallest stop round known are relayed: the others can never be
announced, so a node relays a handful per aggregation, not one per node.
"""

from __future__ import annotations

from p2pem.deploy.admission import CONTROL
from p2pem.deploy.control import STOP, Signer, describe_payload, violation
from p2pem.messages import Message

__all__ = ["Proposal", "Stops"]

#: ``(proposed_at, stop_round, signature)`` of one origin's proposal.
Proposal = tuple[int, int, tuple[int, int]]


class Stops:
    """The signed stop proposals a node knows, per aggregation attempt ``(iteration, attempt)``.

    ``attempt`` counts the dropouts so far: after a drop the aggregation runs again, and
    proposals of the abandoned attempt no longer count.
    """

    def __init__(self, node_id: int, n_nodes: int, signer: Signer) -> None:
        self.node_id = node_id
        self.n_nodes = n_nodes
        self.signer = signer
        self.known: dict[tuple[int, int], dict[int, Proposal]] = {}

    def own(self, iteration: int, attempt: int, proposed_at: int, stop: int) -> None:
        """Sign and record this node's own proposal."""
        signature = self.signer.sign(STOP, (iteration, attempt, self.node_id, proposed_at, stop))
        self.known.setdefault((iteration, attempt), {})[self.node_id] = (proposed_at, stop, signature)

    def message(self, sender: int, receivers: tuple[int, ...], iteration: int, attempt: int, origin: int) -> Message:
        """Origin ``origin``'s proposal (signed by it), sent or relayed by ``sender``."""
        at, stop, signature = self.known[(iteration, attempt)][origin]
        return Message(sender, receivers, CONTROL, origin, STOP, signature, False, (iteration, attempt, origin, at, stop))

    def parse(self, msg: Message) -> tuple[int, int, int, int, int]:
        """The fields ``(iteration, attempt, origin, proposed_at, stop)`` of a stop message, checked
        for form and signature (a failure convicts its sender)."""
        meta = tuple(msg.meta)
        if len(meta) != 5 or not 0 <= meta[2] < self.n_nodes or msg.round != meta[2] or min(meta[0], meta[1], meta[3]) < 0 or meta[4] <= meta[3]:
            raise violation(msg, "stop", f"meta {meta[:8]} is not (iteration, attempt, origin, proposed_at, stop round)")
        if not (isinstance(msg.payload, tuple) and len(msg.payload) == 2):
            raise violation(msg, "stop", f"payload of {describe_payload(msg.payload)} is not a signature")
        self.signer.check(msg, STOP, meta[2], meta, msg.payload)
        return meta[0], meta[1], meta[2], meta[3], meta[4]

    def record(self, iteration: int, attempt: int, origin: int, proposed_at: int, stop: int, signature: tuple[int, ...]) -> bool:
        """Record a checked proposal; True when it lowers the smallest stop round known (relay it)."""
        box = self.known.setdefault((iteration, attempt), {})
        if origin in box:
            return False
        lowest = min((p[1] for p in box.values()), default=None)
        box[origin] = (proposed_at, stop, (int(signature[0]), int(signature[1])))
        return lowest is None or stop < lowest

    def backed(self, iteration: int, attempt: int, stop: int) -> bool:
        """Is ``stop`` the stop round of a recorded proposal of this aggregation attempt?"""
        return any(p[1] == stop for p in self.known.get((iteration, attempt), {}).values())

    def origin_of(self, iteration: int, attempt: int, stop: int) -> tuple[int, Proposal] | None:
        """The (smallest) origin whose proposal set ``stop``, and the proposal."""
        box = self.known.get((iteration, attempt), {})
        found = sorted(o for o, p in box.items() if p[1] == stop)
        return (found[0], box[found[0]]) if found else None

    def forget_before(self, iteration: int) -> None:
        """Drop the proposals of aggregations before ``iteration`` (bounded memory)."""
        self.known = {k: v for k, v in self.known.items() if k[0] >= iteration}
