"""Drops that need evidence: signed votes that a node fell silent, and when they suffice.

With ``on_dropout = "continue"`` (in the roster, so every node runs with the same) a node that
sees a neighbour fall silent signs a *vote* ``(victim, EM iteration, witness)`` and sends it to
its neighbours, the victim included; every node checks it and relays it once, so every vote
reaches every node, and the victim learns who declared it silent.  A vote is evidence, not
proof (a member can sign that an alive node fell silent), so a node drops the victim only on
a quorum of the victim's neighbours voting for the same EM iteration (:func:`quorum`): more
than the run's ``tolerate`` colluders (the protocol's ``tolerate`` where it has one, else
floor(n / 2)), or all of the victim's neighbours when it has no more.  Up to ``tolerate``
colluding members therefore cannot evict an honest, alive node: their votes are not enough,
and the victim's other neighbours, hearing them, do not vote.  A node that voted and sees no
quorum within the timeout stops the run as unattributable (it names the silent node as a
suspect); the launcher checks every eviction's witnesses against the same quorum.

A vote convicts the neighbour that sent it (it signed it, or relayed it unchecked) when it is
forged, comes from a node that is not the victim's neighbour, is cast in a run whose roster
says ``on_dropout = "stop"``, or names an EM iteration beyond the next one.
"""

from __future__ import annotations

from collections.abc import Sequence

from p2pem.deploy.admission import CONTROL
from p2pem.deploy.control import DROP, Signer, describe_payload, violation
from p2pem.messages import Message

__all__ = ["Eviction", "colluders", "quorum"]


def colluders(spec, n_nodes: int) -> int:
    """The run's ``tolerate``: the protocol's own bound on colluding members where it has one
    (dp-distributed), else floor(n / 2)."""
    t = getattr(spec, "tolerate", None)
    return n_nodes // 2 if t is None else int(t)


def quorum(neighbours: Sequence[Sequence[int]], victim: int, tolerate: int) -> int:
    """Votes needed to drop ``victim``: ``tolerate + 1`` of its neighbours, or all of them when it has no more."""
    return min(tolerate + 1, len(neighbours[victim]))


class Eviction:
    """The votes this node has seen (module docstring).

    Parameters
    ----------
    node_id : int
    neighbours : sequence of sequence of int
        The roster's adjacency lists.
    on_dropout : {"stop", "continue"}
        The roster's setting.
    signer : Signer
    tolerate : int
        Colluding members the quorum must outnumber (:func:`colluders`).

    Attributes
    ----------
    votes : dict
        ``(victim, iteration)`` to ``{witness: signature}``.
    """

    def __init__(self, node_id: int, neighbours: Sequence[Sequence[int]], on_dropout: str, signer: Signer, tolerate: int = 1) -> None:
        self.node_id = node_id
        self.tolerate = int(tolerate)
        self.neighbours = neighbours
        self.n_nodes = len(neighbours)
        self.on_dropout = on_dropout
        self.signer = signer
        self.votes: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}

    def threshold(self, victim: int) -> int:
        """Votes needed to drop ``victim`` (:func:`quorum`)."""
        return quorum(self.neighbours, victim, self.tolerate)

    def message(self, sender: int, receivers: tuple[int, ...], victim: int, iteration: int, witness: int) -> Message:
        """The vote of ``witness`` (signed by it), sent or relayed by ``sender``."""
        signature = self.votes[(victim, iteration)][witness]
        return Message(sender, receivers, CONTROL, victim * self.n_nodes + witness, DROP, signature, False, (victim, iteration, witness))

    def vote(self, victim: int, iteration: int) -> None:
        """Sign this node's vote that neighbour ``victim`` fell silent in EM ``iteration``."""
        signature = self.signer.sign(DROP, (victim, iteration, self.node_id))
        self.votes.setdefault((victim, iteration), {})[self.node_id] = signature

    def receive(self, msg: Message, iteration: int) -> tuple[int, int, int] | None:
        """Check a vote; return ``(victim, iteration, witness)`` if it is new (relay it then).

        Raises
        ------
        ProtocolViolation
            Naming the sender: a malformed or forged vote, a witness that is not the
            victim's neighbour, a vote in a run with ``on_dropout = "stop"``, or one for an EM
            iteration after ``iteration + 1`` (one before ``iteration - 1`` is ignored).
        """
        meta, n = tuple(msg.meta), self.n_nodes
        if len(meta) != 3 or not (0 <= meta[0] < n and 0 <= meta[2] < n and meta[1] >= 0) or msg.round != meta[0] * n + meta[2]:
            raise violation(msg, "drop", f"meta {meta[:8]} is not (victim, iteration, witness)")
        victim, it, witness = meta
        if not (isinstance(msg.payload, tuple) and len(msg.payload) == 2):
            raise violation(msg, "drop", f"payload of {describe_payload(msg.payload)} is not a signature")
        if witness not in self.neighbours[victim]:
            raise violation(msg, "drop", f"node {witness} cannot see node {victim} fall silent: they are not neighbours")
        self.signer.check(msg, DROP, witness, meta, msg.payload)
        if self.on_dropout != "continue":
            raise violation(msg, "drop", f"node {witness} votes to drop node {victim}, but the roster says on_dropout = 'stop'")
        if it > iteration + 1:
            raise violation(msg, "drop", f"a vote for EM iteration {it}, this node is in EM iteration {iteration}")
        if it < iteration - 1:
            return None  # a vote the run has left behind (its victim went on): relayed late, harmless
        box = self.votes.setdefault((victim, it), {})
        if witness in box:
            return None
        box[witness] = (int(msg.payload[0]), int(msg.payload[1]))
        return victim, it, witness

    def witnesses(self, victim: int, iteration: int) -> tuple[int, ...]:
        """Who voted to drop ``victim`` in ``iteration``, sorted."""
        return tuple(sorted(self.votes.get((victim, iteration), {})))

    def decided(self, victim: int, iteration: int) -> bool:
        """Enough votes to drop ``victim`` in ``iteration``."""
        return len(self.votes.get((victim, iteration), {})) >= self.threshold(victim)
