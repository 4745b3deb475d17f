"""Control messages: the runtime's own conversation beside the protocol's, and signed statements.

Control messages have EM iteration -1 (:data:`~p2pem.deploy.admission.CONTROL`), so the Node
never sees them; they are authenticated per receiver like every other message, and each is
checked field by field here before it counts (a check that fails raises
:class:`~p2pem.protocols.base.ProtocolViolation` naming the authenticated sender).

``hello``   meta ``(epoch, iteration, round, *awaited)``, payload the roster digest and a
            digest of the public step parameters (:mod:`p2pem.deploy.bootstrap`).  Also the
            heartbeat: sent when the node has published nothing for ``heartbeat`` seconds,
            saying where the node is and whom it waits for (:mod:`p2pem.deploy.watchdog`).
``final``   meta ``(n_iter, origin, iteration, *signature)``, round ``origin``, payload the origin's
            final result (the task's summary): flooded to every node
            (:mod:`p2pem.deploy.agreement`).
``bye``     the node has finished; neighbours linger until they have heard every bye.
``abort``   meta ``(reason, iteration, round, origin, n, *culprits, *evidence)``, round
            ``origin``, payload the origin's signature (and, for a contradicted stop, the
            stop's signature): the run is stopped.  Relayed unchanged, published retained.
``stop``    meta ``(iteration, attempt, origin, proposed_at, stop_round)``, round ``origin``,
            payload the origin's signature: an accountable stop proposal
            (:mod:`p2pem.deploy.stops`), flooded.
``drop``    meta ``(victim, iteration, witness)``, round ``victim * n + witness``, payload
            the witness's signature: one vote that the victim fell silent
            (:mod:`p2pem.deploy.eviction`), flooded to every node, the victim included.

A *signed statement* (abort, stop, drop vote, final) is the statement's domain, the run id and
the launch nonce (each length-prefixed), its integer fields as signed 64-bit integers and, for
a final, the SHA-256 of the result's bytes; the signature is Ed25519 by the statement's origin
(:class:`Signer`).  Relays forward statements unchanged, so no member can put words into
another's mouth; an honest node relays only what it checked, so a statement that fails a check
convicts the neighbour that sent it (it signed it, or relayed it unchecked).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from p2pem.deploy.admission import CONTROL
from p2pem.deploy.crypto import CryptoError, Identity
from p2pem.deploy.failures import WIRE_REASONS, Reason
from p2pem.messages import Message
from p2pem.protocols.base import ProtocolViolation

__all__ = [
    "ABORT",
    "BYE",
    "DROP",
    "FINAL",
    "FINAL_PHASE",
    "HELLO",
    "STOP",
    "Abort",
    "Signer",
    "StatementBudget",
    "abort_message",
    "bye_message",
    "check_bye",
    "parse_abort",
    "plausible_receivers",
    "statement_limit",
    "violation",
]

HELLO, FINAL, BYE, ABORT, DROP, STOP = "hello", "final", "bye", "abort", "drop", "stop"
#: The protocol round of an abort signed in the final agreement (after EM).
FINAL_PHASE = -1
_DOMAINS = {
    ABORT: b"p2pem/abort/v2\x00",
    DROP: b"p2pem/drop/v2\x00",
    STOP: b"p2pem/stop/v1\x00",
    FINAL: b"p2pem/final/v1\x00",
}
#: A signature as meta fields: eight signed 64-bit words.
SIGNATURE_WORDS = 8
_WORDS = struct.Struct(">8q")


def violation(msg: Message, check: str, detail: str) -> ProtocolViolation:
    """The violation of a control message ``msg`` by its (authenticated) sender."""
    return ProtocolViolation(msg.sender, msg.iteration, msg.round, check, f"{msg.kind} message: {detail}")


def describe_payload(payload: Any) -> str:
    """``a float64 array of shape (3,)`` or ``2 integers``, for error messages."""
    if isinstance(payload, np.ndarray):
        return f"a {payload.dtype} array of shape {payload.shape}"
    return f"{len(payload)} integers"


def plausible_receivers(full: Sequence[int], receivers: Sequence[int], dropped: Mapping[int, Any]) -> bool:
    """Does a broadcast to ``receivers`` fit a sender whose roster neighbours are ``full``?

    The sender broadcasts to its roster neighbours, less those it dropped (it may not have
    heard of a drop this node knows yet).
    """
    return list(receivers) == sorted(set(receivers)) and set(receivers) <= set(full) and all(k in receivers for k in full if k not in dropped)


def bye_message(node_id: int, neighbours: tuple[int, ...]) -> Message:
    return Message(node_id, neighbours, CONTROL, 0, BYE, (), False)


def check_bye(msg: Message) -> None:
    """Raise ProtocolViolation unless ``msg`` is a well-formed bye."""
    if not isinstance(msg.payload, tuple) or msg.payload or msg.meta != () or msg.round != 0:
        raise violation(msg, "bye", f"round {msg.round}, meta {msg.meta}, payload of {describe_payload(msg.payload)}")


def signature_words(signature: tuple[int, int]) -> tuple[int, ...]:
    """A signature (two 256-bit integers) as :data:`SIGNATURE_WORDS` meta fields."""
    raw = b"".join(int(v).to_bytes(32, "big") for v in signature)
    return _WORDS.unpack(raw)


def words_signature(words: Sequence[int]) -> tuple[int, int]:
    """Inverse of :func:`signature_words`."""
    raw = _WORDS.pack(*words)
    return int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")


def payload_digest(payload: np.ndarray) -> bytes:
    """SHA-256 of a float payload's little-endian bytes (what a signed final covers)."""
    return hashlib.sha256(np.ascontiguousarray(payload, dtype="<f8").tobytes()).digest()


#: Most verified statements a :class:`Signer` remembers (a few per node and aggregation).
VERIFIED_LIMIT = 4096


class Signer:
    """Signed statements of one run and launch: made by this node, checked against any origin.

    Parameters
    ----------
    identity : Identity
        This node's keys (signs).
    public_keys : mapping of int to PublicIdentity
        Every party's pinned keys, by node id (verify).
    run_id : str
    launch : bytes
    """

    def __init__(self, identity: Identity, public_keys: Mapping[int, Any], run_id: str, launch: bytes) -> None:
        self.identity = identity
        self.keys = dict(public_keys)
        self.run = run_id.encode("utf-8")
        self.launch = launch
        # (origin, statement, signature) already verified: a flooded statement reaches a node
        # once per neighbour, and the same bytes verify the same way (bounded: cleared when full)
        self._verified: set[tuple[int, bytes, bytes]] = set()

    def statement(self, kind: str, fields: Sequence[int], extra: bytes = b"") -> bytes:
        return b"".join(
            [_DOMAINS[kind], bytes([len(self.run)]), self.run, bytes([len(self.launch)]), self.launch, struct.pack(f">{len(fields)}q", *fields), extra]
        )

    def sign(self, kind: str, fields: Sequence[int], extra: bytes = b"") -> tuple[int, int]:
        """This node's signature of the statement, as two 256-bit integers."""
        raw = self.identity.sign(self.statement(kind, fields, extra))
        return int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")

    def check(self, msg: Message, kind: str, origin: int, fields: Sequence[int], signature: Sequence[int], extra: bytes = b"") -> None:
        """Raise a violation by ``msg``'s sender unless ``origin`` signed the statement."""
        public = self.keys.get(origin)
        if public is None or len(signature) != 2 or not all(isinstance(v, int) and 0 <= v < 2**256 for v in signature):
            raise violation(msg, kind, f"{kind} in the name of node {origin}: no signature of a member")
        raw = b"".join(int(v).to_bytes(32, "big") for v in signature)
        statement = self.statement(kind, fields, extra)
        key = (origin, statement, raw)
        if key in self._verified:
            return
        try:
            public.verify(statement, raw)
        except CryptoError:
            raise violation(msg, kind, f"{kind} in the name of node {origin} is not signed by node {origin} (forged)") from None
        if len(self._verified) >= VERIFIED_LIMIT:
            self._verified.clear()
        self._verified.add(key)


class StatementBudget:
    """At most ``limit`` signed statements (finals, stops, drop votes, aborts) per sender and EM iteration.

    An honest node sends or relays each statement once: its own final and the first copy of
    every other origin's, the stop proposals that lower the known stop round (at most one per
    origin and aggregation attempt), each new drop vote, an abort.  :func:`statement_limit`
    bounds that count for a run; a sender over it floods (each statement costs its receivers a
    signature check), which convicts it: it authenticated every one of them.
    """

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self._window = -2
        self._spent: dict[int, int] = {}

    def spend(self, msg: Message, iteration: int) -> None:
        """Count one statement of ``msg.sender`` received in EM ``iteration``.

        Raises
        ------
        ProtocolViolation
            Naming the sender: more than ``limit`` statements in this EM iteration.
        """
        if iteration != self._window:
            self._window, self._spent = iteration, {}
        spent = self._spent.get(msg.sender, 0) + 1
        self._spent[msg.sender] = spent
        if spent > self.limit:
            raise violation(msg, "flood", f"more than {self.limit} signed statements in EM iteration {iteration}: no honest node sends or relays as many")


def statement_limit(n_nodes: int, n_edges: int) -> int:
    """Signed statements one honest sender may send a neighbour in one EM iteration, with room.

    Finals: at most ``n`` (its own and one relay per origin).  Stop proposals: at most one per
    origin and attempt, and at most ``n + 1`` attempts (one per dropout).  Drop votes: one per
    (victim, witness) pair, ``2 |E|`` per EM iteration, for the receiver's iteration and its two
    neighbours (votes of the next and the previous iteration count).  Aborts: a few.
    """
    return n_nodes + n_nodes * (n_nodes + 1) + 3 * 2 * n_edges + 16


# ------------------------------------------------------------------------------ aborts


@dataclass(frozen=True)
class Abort:
    """A signed abort: who stops (``origin``), why, where, whom it names, and its evidence.

    ``evidence`` are extra fields of some reasons: for :attr:`Reason.STOP` the contradicted
    proposal's ``(attempt, proposed_at, stop_round)`` (its signature follows the origin's in
    the payload), for :attr:`Reason.SPLIT` the node whose final model differs.
    """

    reason: int
    iteration: int
    round: int
    origin: int
    culprits: tuple[int, ...]
    evidence: tuple[int, ...]
    signature: tuple[int, int]
    extra_signature: tuple[int, ...] = ()

    @property
    def meta(self) -> tuple[int, ...]:
        return (self.reason, self.iteration, self.round, self.origin, len(self.culprits), *self.culprits, *self.evidence)

    @property
    def payload(self) -> tuple[int, ...]:
        return (*self.signature, *self.extra_signature)

    def fields(self) -> tuple[int, ...]:
        """What the origin signs."""
        return self.meta


def make_abort(signer: Signer, reason: Reason, iteration: int, round: int, origin: int, culprits: Sequence[int],
               evidence: Sequence[int] = (), extra_signature: Sequence[int] = ()) -> Abort:
    """This node's signed abort (told as the wire reason)."""
    unsigned = Abort(int(reason.wire), int(iteration), int(round), int(origin), tuple(int(c) for c in culprits), tuple(int(e) for e in evidence), (0, 0))
    signature = signer.sign(ABORT, unsigned.fields())
    return Abort(unsigned.reason, unsigned.iteration, unsigned.round, unsigned.origin, unsigned.culprits, unsigned.evidence, signature, tuple(extra_signature))


def abort_message(node_id: int, neighbours: tuple[int, ...], abort: Abort) -> Message:
    """An abort for ``neighbours`` (made here or relayed unchanged)."""
    return Message(node_id, neighbours, CONTROL, abort.origin, ABORT, abort.payload, False, abort.meta)


#: Extra fields of each reason's abort (after the culprits), and extra signatures in its payload.
_EVIDENCE = {int(Reason.STOP): (3, 1), int(Reason.SPLIT): (1, 0)}


def parse_abort(msg: Message, n_nodes: int, server: bool = False) -> Abort:
    """The abort ``msg`` carries, checked for form (not yet for its signature or plausibility).

    Node ids run over ``0 .. n_nodes - 1``, and -1 (the server) when the run has one.
    """
    meta, payload = tuple(msg.meta), msg.payload
    bad = violation(msg, "abort", f"meta {meta[:8]} is not (reason, iteration, round, origin, n, culprits..., evidence...)")
    if len(meta) < 5 or meta[0] not in WIRE_REASONS or not 0 <= meta[4] <= n_nodes:
        raise bad
    n = meta[4]
    n_evidence, n_signatures = _EVIDENCE.get(meta[0], (0, 0))
    if len(meta) != 5 + n + n_evidence or msg.round != meta[3]:
        raise bad
    if not (isinstance(payload, tuple) and len(payload) == 2 + 2 * n_signatures):
        raise violation(msg, "abort", f"payload of {describe_payload(payload)} is not its signature(s)")
    ids = (meta[3], *meta[5 : 5 + n])
    low = -1 if server else 0
    if not all(low <= v < n_nodes for v in ids):
        raise violation(msg, "abort", f"origin or culprit outside {low}..{n_nodes - 1}")
    return Abort(meta[0], meta[1], meta[2], meta[3], tuple(meta[5 : 5 + n]), tuple(meta[5 + n :]), (payload[0], payload[1]), tuple(payload[2:]))


def implausible(abort: Abort, peers_of, iteration: int, separates) -> str | None:
    """Why no honest node signs ``abort`` (None when it is plausible).

    The rules: the abort's EM iteration lies within two of the receiver's (but for a restart:
    the restarted node is behind by the EM iterations it lost); the culprits of a
    silence, stall, slowness, start-up, mismatch, violation or protocol error are neighbours of
    the origin (it cannot have watched anyone else); a disagreement is signed in the final
    phase and names one neighbour; a contradicted stop names the stop's origin (checked
    against the stop's own signature by the caller); a split names a node that separates the
    origin from the node whose model differs; an interruption, a lost broker, a model error or
    an internal error names nobody.

    Parameters
    ----------
    abort : Abort
    peers_of : callable
        ``peers_of(node)``: whom a node exchanges messages with (its roster neighbours, and a
        server).
    iteration : int
        The receiving node's EM iteration (an honest origin is within two of it).
    separates : callable
        ``separates(v, a, b)``: whether every path between nodes ``a`` and ``b`` of the
        roster's graph passes ``v``.
    """
    reason, origin, culprits = abort.reason, abort.origin, abort.culprits
    # a restarted node signs in the EM iteration it starts again from, however far behind
    if reason != Reason.RESTARTED and not iteration - 2 <= abort.iteration <= iteration + 2:
        return f"it is signed in EM iteration {abort.iteration}, this node is in EM iteration {iteration}"
    near = set(peers_of(origin))
    if reason in (Reason.BROKER, Reason.INTERRUPTED, Reason.INTERNAL, Reason.MODEL):
        return f"it names nodes {list(culprits)} for a failure that names nobody" if culprits else None
    if reason == Reason.DISAGREE:
        if abort.round != FINAL_PHASE:
            return "a disagreement on the final model can only be found in the final phase"
        if len(culprits) != 1 or culprits[0] not in near:
            return "a disagreement on the final model names exactly one neighbour of its origin"
        return None
    if reason in (Reason.STOP, Reason.DROPPED_OUT, Reason.EQUIVOCATION):
        # a stop's origin, a dropped node, a final's origin: anywhere in the graph (the signed
        # stops, the votes and the finals reach every node)
        return None if len(culprits) == 1 else f"a {Reason(reason).name.lower()} abort names exactly one node"
    if reason == Reason.SPLIT:
        (a,) = abort.evidence
        if len(culprits) != 1 or not separates(culprits[0], origin, a):
            return f"node {culprits[0] if culprits else '?'} does not separate node {origin} from node {a}"
        return None
    if not culprits and reason not in (Reason.PROTOCOL, Reason.STALLED):
        return "it names nobody"
    strangers = [c for c in culprits if c not in near]
    if strangers:
        return f"node {origin} cannot have watched node(s) {', '.join(map(str, strangers))}: they are not its neighbours"
    return None
