"""Admission: what a node accepts from the wire, decided without any I/O.

:meth:`Admission.admit` takes one received ``(topic, payload)`` and returns a verdict; it
logs nothing, sends nothing and reads no clock, so each rule below is a unit test away.
A message is admitted only if, in this order:

1. it is not empty (a broker delivers an empty payload when someone clears a retained
   message: it carries nothing, :class:`Ignored`);
2. its topic is a topic of this run (:class:`Rejected` ``BadTopic``);
3. it is a well-formed envelope of this run and launch that lists this node among its
   receivers and this node's tag verifies under the edge key of the claimed sender
   (:meth:`~p2pem.deploy.codec.Codec.verify`).  Without a valid tag anyone on the path may
   have made it: :class:`Rejected` with the codec's reason.  A tag that verifies proves that
   the sender wrote every byte, so from here on whatever is wrong convicts it
   (:class:`Convicted`): a payload longer than any message of the run (read from the
   header, before the payload is decoded), more receivers or meta fields than the roster
   allows, an envelope that contradicts itself, a seal that does not open
   (:meth:`~p2pem.deploy.codec.Codec.open`);
4. the topic names the same sender (and receiver) as the authenticated header
   (``TopicMismatch``);
5. it comes from a current neighbour (``NotNeighbour``);
6. it lies in the iteration window: a control message (iteration -1), or a message of EM
   iteration it-1, it or it+1 for a node in EM iteration it.  A message further ahead is a
   violation (no honest neighbour gets two aggregations ahead: each needs this node's part);
   one further back is :class:`Ignored` (``stale``: a replay by anyone on the path, or a
   straggler of an aggregation this node left); any other negative iteration is a
   violation, and so is a protocol message of a kind the protocol does not declare
   (:attr:`~p2pem.protocols.base.ProtocolSpec.message_kinds`).  Checked before the replay
   guard, so nobody can fill the guard with messages for far-away iterations;
7. :class:`ReplayGuard` has not accepted it before (signed statements, :data:`SIGNED_KINDS`,
   are deduplicated by the ledgers that keep them instead): an identical copy
   (MQTT QoS 1 delivers at least once) is :class:`Ignored`, a different message under the
   same identity is a replay or an equivocation by its authenticated sender
   (:class:`Convicted`).

What the message says (its fields, payload and place in the protocol) is checked afterwards
by the protocol's state machine (:meth:`p2pem.node.Node.check`) and by the control messages'
own checks (:mod:`p2pem.deploy.control`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Union

from p2pem.deploy.codec import Codec, InconsistentMessage, InvalidMessage, NotAddressed, ReplayedMessage, TamperedMessage
from p2pem.deploy.crypto import MAC_SIZE
from p2pem.deploy.transports.base import Incoming, parse_topic
from p2pem.errors import TransportError
from p2pem.messages import Message
from p2pem.protocols.base import ProtocolViolation

__all__ = ["CONTROL", "Admission", "Admitted", "Convicted", "Ignored", "Rejected", "ReplayGuard", "Verdict", "replay_key"]

#: Iteration number of control messages (hello, final, bye, abort, drop); the Node never sees them.
CONTROL = -1
#: Control messages that carry a signed statement (:mod:`p2pem.deploy.control`): they are
#: checked by their signature and deduplicated by the ledgers that keep them, not by the
#: replay guard (a relay of one origin's statement in a later EM iteration reuses its key).
SIGNED_KINDS = frozenset({"abort", "stop", "drop", "final"})


@dataclass(frozen=True)
class Admitted:
    """Authentic, fresh, from a neighbour, in the window: hand it on."""

    msg: Message


@dataclass(frozen=True)
class Ignored:
    """Nothing to act on; ``counter`` names the count it adds to.

    ``empty`` (a cleared retained message), ``not_addressed`` (a multicast for other
    neighbours of the sender), ``duplicates`` (an identical copy; ``msg`` is set), ``stale``
    (an authentic message of an EM iteration before the window; ``msg`` is set).
    """

    counter: str
    msg: Message | None = None


@dataclass(frozen=True)
class Rejected:
    """Refused and logged, nobody blamed (no valid tag, so anyone may have made it, or harmless).

    ``sender`` is the node the topic names (None when the topic is not one of this run's).
    """

    reason: str
    detail: str
    sender: int | None = None


@dataclass(frozen=True)
class Convicted:
    """Only the authenticated ``culprit`` can have sent this: a protocol violation.

    ``check`` names the check for the runtime when it matters (``"window"``: a message beyond
    the next EM iteration, which a restarted receiver also sees from honest neighbours).
    """

    culprit: int
    detail: str
    check: str | None = None


Verdict = Union[Admitted, Ignored, Rejected, Convicted]


def replay_key(msg: Message) -> tuple[int, int, int, str, tuple[int, ...]]:
    """The identity of a message: ``(sender, iteration, round, kind, receivers)``.

    An honest sender emits at most one message per key, which is what lets
    :class:`ReplayGuard` tell an MQTT duplicate from an equivocation.
    """
    return (msg.sender, msg.iteration, msg.round, msg.kind, tuple(msg.receivers))


class ReplayGuard:
    """Tell MQTT duplicates from replays and equivocations among verified messages.

    MQTT QoS 1 delivers at least once, so the same envelope may arrive twice; that is
    harmless and :meth:`admit` says "ignore".  A *different* envelope under an already
    accepted :func:`replay_key` is either an old message replayed by an attacker into
    a new context or a sender equivocating (saying different things to the same
    audience); both are rejected.

    Feed it only messages that passed :meth:`~p2pem.deploy.codec.Codec.decode`; otherwise a forger could
    poison a key before the honest message arrives.

    Examples
    --------
    >>> guard = ReplayGuard()
    >>> msg = Message(0, (1,), 0, 0, "primal", (5,))
    >>> guard.admit(msg, b"envelope-bytes"), guard.admit(msg, b"envelope-bytes")
    (True, False)
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int, int, str, tuple[int, ...]], bytes] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, msg: Message, data: bytes) -> bool:
        """Record ``msg`` received as ``data``.

        Parameters
        ----------
        msg : Message
            The decoded message.
        data : bytes
            The envelope it was decoded from.

        Returns
        -------
        bool
            True for a new message (process it), False for a byte-identical
            duplicate (ignore it).

        Raises
        ------
        ReplayedMessage
            If a different envelope was already accepted under the same key.
        """
        key = replay_key(msg)
        # Hash what the tags cover, not the tags: an identical message is identical
        # whatever its authenticator.
        digest = hashlib.sha256(memoryview(data)[: len(data) - MAC_SIZE * len(msg.receivers)]).digest()
        seen = self._seen.get(key)
        if seen is None:
            self._seen[key] = digest
            return True
        if seen == digest:
            return False
        raise ReplayedMessage(
            f"node {msg.sender} sent two different {msg.kind!r} messages for iteration {msg.iteration} "
            f"round {msg.round} to {msg.receivers} (replay or equivocation)"
        )

    def forget_from(self, iteration: int) -> None:
        """Drop the keys of iterations ``iteration`` and later (their aggregation runs again)."""
        self._seen = {k: v for k, v in self._seen.items() if not 0 <= iteration <= k[1]}

    def forget_before(self, iteration: int) -> None:
        """Drop the keys of iterations before ``iteration`` to bound memory in long runs.

        Only safe once no message of those iterations can still be accepted (the
        caller must reject them by iteration number instead).
        """
        self._seen = {k: v for k, v in self._seen.items() if k[1] >= iteration}


class Admission:
    """The admission rules of one node (see the module docstring).

    Parameters
    ----------
    run_id : str
    codec : Codec
        This node's codec (keys, launch nonce, generation).
    node_id : int
    kinds : frozenset of str, optional
        The protocol's message kinds (:attr:`~p2pem.protocols.base.ProtocolSpec.message_kinds`);
        a protocol message of another kind convicts its sender.  None: any kind.
    guard : ReplayGuard, optional
        A fresh one by default.
    max_entries : int, optional
        Most payload entries (floats or ring integers) any message of the run carries; a
        longer payload convicts its sender before it is decoded.  None: no limit.
    max_fields : int, optional
        Most receivers, and most meta fields, a message of the run has (about the number of
        nodes).  None: no limit.
    """

    def __init__(
        self,
        run_id: str,
        codec: Codec,
        node_id: int,
        *,
        kinds: frozenset[str] | None = None,
        guard: ReplayGuard | None = None,
        max_entries: int | None = None,
        max_fields: int | None = None,
    ) -> None:
        self.run_id = run_id
        self.codec = codec
        self.node_id = int(node_id)
        self.kinds = kinds
        self.guard = ReplayGuard() if guard is None else guard
        self.max_entries = max_entries
        self.max_fields = max_fields

    def admit(self, incoming: Incoming, neighbours: frozenset[int], iteration: int) -> Verdict:
        """The verdict on one received message.

        Parameters
        ----------
        incoming : Incoming
            Topic and payload as the link delivered them.
        neighbours : frozenset of int
            The current neighbours (without any dropped node).
        iteration : int
            The EM iteration this node is in (0 before it started).
        """
        if not incoming.payload:
            return Ignored("empty")
        try:
            t_sender, t_receiver = parse_topic(self.run_id, incoming.topic)
        except TransportError as exc:
            return Rejected("BadTopic", str(exc))
        try:
            env = self.codec.verify(incoming.payload)
        except NotAddressed as exc:
            if t_receiver is None:  # a multicast on .../all for some of the sender's neighbours
                return Ignored("not_addressed")
            return Rejected("NotAddressed", str(exc))
        except InconsistentMessage as exc:
            # The tag verified, so the claimed sender wrote this (the tag covers every byte).
            return Convicted(self.codec.parse(incoming.payload).sender, str(exc))
        except InvalidMessage as exc:
            return Rejected(type(exc).__name__, str(exc), t_sender)
        j = env.sender
        if j != t_sender or (t_receiver is not None and tuple(env.receivers) != (t_receiver,)):
            return Rejected("TopicMismatch", f"message authenticated as from node {j} arrived on topic {incoming.topic!r}", t_sender)
        if j not in neighbours:
            return Rejected("NotNeighbour", f"message from node {j}, which is not a neighbour")
        # authentic from here on: what is wrong is the sender's doing
        entries = math.prod(env.shape)
        if self.max_entries is not None and entries > self.max_entries:
            return Convicted(j, f"{env.kind} message from node {j} announces {entries} payload entries; no message of this run has more than {self.max_entries}")
        if self.max_fields is not None and max(len(env.receivers), len(env.meta)) > self.max_fields:
            return Convicted(j, f"{env.kind} message from node {j} has {len(env.receivers)} receivers and {len(env.meta)} meta fields (at most {self.max_fields})")
        if env.iteration < CONTROL:
            return Convicted(j, f"{env.kind} message from node {j} for EM iteration {env.iteration}")
        if env.iteration != CONTROL:
            if self.kinds is not None and env.kind not in self.kinds:
                v = ProtocolViolation(j, env.iteration, env.round, "kind", f"{env.kind!r} is not a message kind of this protocol")
                return Convicted(j, str(v))
            if env.iteration > iteration + 1:
                v = ProtocolViolation(j, env.iteration, env.round, "window", f"{env.kind} message for EM iteration {env.iteration}, this node is in EM iteration {iteration}")
                return Convicted(j, str(v), "window")
        try:
            msg = self.codec.open(env)
        except TamperedMessage as exc:
            return Convicted(j, str(exc))
        if 0 <= env.iteration < iteration - 1:
            return Ignored("stale", msg)
        if env.iteration == CONTROL and env.kind in SIGNED_KINDS:
            return Admitted(msg)
        try:
            fresh = self.guard.admit(msg, incoming.payload)
        except ReplayedMessage as exc:
            # Only the authenticated sender can have written both: it equivocates.
            return Convicted(msg.sender, str(exc))
        if not fresh:
            return Ignored("duplicates", msg)
        return Admitted(msg)
