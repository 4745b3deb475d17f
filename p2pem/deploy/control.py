"""Control messages: the runtime's own conversation beside the protocol's.

Control messages have EM iteration -1 (:data:`~p2pem.deploy.admission.CONTROL`), so the Node
never sees them; they are authenticated like every other message, and each is checked field
by field here before it counts (a check that fails raises
:class:`~p2pem.protocols.base.ProtocolViolation` naming the authenticated sender).

``hello``   meta ``(epoch,)``, payload the roster digest and a digest of the public step
            parameters (:mod:`p2pem.deploy.bootstrap`).  Also the heartbeat: sent when the
            node has published nothing for ``heartbeat`` seconds.
``final``   meta ``(n_iter,)``, payload the node's fitted model: every neighbour must hold
            the same (:class:`Agreement`).
``bye``     the node has finished; neighbours linger until they have heard every bye, so a
            broker restart in the last round can still be repaired.
``abort``   meta ``(reason, iteration, round, origin, *culprits)``, payload the origin's
            Ed25519 signature of those fields: the run is stopped.  A node that gives up
            sends one, every node that receives one stops with an error naming the culprits
            and relays it unchanged, so all nodes exit promptly naming the same node.  Aborts
            are published *retained*: the broker hands the last one of each node to whoever
            subscribes later, so a neighbour that comes online after this node already
            stopped learns why at once instead of waiting out its start-up timeout.  A
            retained abort outlives the run on the broker, one more reason for a new run id
            per run (and the launch nonce keeps an old launch's abort from authenticating).
``drop``    meta ``(node, iteration, origin)``, round ``node``, payload the origin's
            signature: with ``on_dropout = "continue"`` the survivors go on without a node
            that fell silent (see :meth:`p2pem.deploy.runtime.NodeRuntime.drop`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from p2pem.deploy.admission import CONTROL
from p2pem.deploy.crypto import CryptoError, Identity
from p2pem.deploy.failures import WIRE_REASONS, NodeFailure, Reason
from p2pem.gmm import relative_error
from p2pem.messages import Message
from p2pem.protocols.base import ProtocolViolation, check_vector

__all__ = [
    "ABORT",
    "AGREEMENT_RTOL",
    "BYE",
    "DROP",
    "FINAL",
    "HELLO",
    "Agreement",
    "Signer",
    "bye_message",
    "check_bye",
    "plausible_receivers",
    "violation",
]

HELLO, FINAL, BYE, ABORT, DROP = "hello", "final", "bye", "abort", "drop"
#: Largest relative difference between two neighbours' final models that counts as agreement
#: (consensus stops at a relative tolerance of 1e-10; EM amplifies it a little).
AGREEMENT_RTOL = 1e-6
_ABORT_DOMAIN = b"p2pem/abort/v1\x00"
_DROP_DOMAIN = b"p2pem/drop/v1\x00"


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
        raise violation(msg, "bye", f"payload of {describe_payload(msg.payload)}, meta {msg.meta}")


class Signer:
    """Signed statements of one run and launch: aborts and drops, made and checked.

    A statement is the domain, the run id and the launch nonce (each length-prefixed) and the
    meta fields as signed 64-bit integers; the signature is Ed25519 by the origin, sent as
    two 256-bit integers.

    Parameters
    ----------
    identity : Identity
        This node's keys (signs).
    public_keys : sequence of PublicIdentity
        Every node's pinned keys, by node id (verify).
    run_id : str
    launch : bytes
    neighbours : sequence of sequence of int
        The roster's adjacency lists (a drop's origin must neighbour the dropped node).
    """

    def __init__(self, identity: Identity, public_keys: Sequence[Any], run_id: str, launch: bytes, neighbours: Sequence[Sequence[int]]) -> None:
        self.identity = identity
        self.keys = tuple(public_keys)
        self.run = run_id.encode("utf-8")
        self.launch = launch
        self.neighbours = neighbours

    @property
    def n_nodes(self) -> int:
        return len(self.keys)

    def statement(self, meta: Sequence[int], domain: bytes = _ABORT_DOMAIN) -> bytes:
        return b"".join([domain, bytes([len(self.run)]), self.run, bytes([len(self.launch)]), self.launch, struct.pack(f">{len(meta)}q", *meta)])

    def sign(self, meta: Sequence[int], domain: bytes = _ABORT_DOMAIN) -> tuple[int, int]:
        raw = self.identity.sign(self.statement(meta, domain))
        return int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")

    def abort(self, node_id: int, neighbours: tuple[int, ...], reason: Reason, iteration: int, round: int, culprits: Sequence[int]) -> Message:
        """This node's signed abort, for its neighbours."""
        meta = (int(reason.wire), iteration, round, node_id, *culprits)
        return abort_message(node_id, neighbours, meta, self.sign(meta))

    def drop(self, node_id: int, neighbours: tuple[int, ...], meta: tuple[int, int, int], signature: tuple[int, ...] | None) -> tuple[Message, tuple[int, ...]]:
        """The drop ``meta = (node, iteration, origin)``, signed now unless ``signature`` (the origin's) is given."""
        if signature is None:
            signature = self.sign(meta, _DROP_DOMAIN)
        return Message(node_id, neighbours, CONTROL, meta[0], DROP, signature, False, meta), signature

    def _verify(self, msg: Message, what: str, origin: int, meta: Sequence[int], domain: bytes) -> tuple[int, ...]:
        payload = msg.payload
        if not (isinstance(payload, tuple) and len(payload) == 2):
            raise violation(msg, what, f"payload of {describe_payload(payload)} is not a signature")
        signature = b"".join(int(v).to_bytes(32, "big") for v in payload)
        try:
            self.keys[origin].verify(self.statement(meta, domain), signature)
        except CryptoError:
            raise violation(msg, what, f"{what} in the name of node {origin} is not signed by node {origin} (forged)") from None
        return tuple(int(v) for v in payload)

    def verify_abort(self, msg: Message) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Check an abort's fields and its origin's signature; return (meta, signature)."""
        meta, n = tuple(msg.meta), self.n_nodes
        if len(meta) < 4 or len(meta) > 4 + n or meta[0] not in WIRE_REASONS:
            raise violation(msg, "abort", f"meta {meta[:8]} is not (reason, iteration, round, origin, culprits...)")
        if not all(0 <= v < n for v in meta[3:]):
            raise violation(msg, "abort", f"origin or culprit outside 0..{n - 1}")
        return meta, self._verify(msg, "abort", meta[3], meta, _ABORT_DOMAIN)

    def verify_drop(self, msg: Message) -> tuple[tuple[int, int, int], tuple[int, ...]]:
        """Check a drop ``(node, EM iteration, origin)`` and its origin's signature."""
        meta, n = tuple(msg.meta), self.n_nodes
        if len(meta) != 3 or not (0 <= meta[0] < n and 0 <= meta[2] < n and 0 <= meta[1] <= 2**31) or msg.round != meta[0]:
            raise violation(msg, "drop", f"meta {meta[:8]} is not (node, iteration, origin)")
        if meta[2] not in self.neighbours[meta[0]]:
            raise violation(msg, "drop", f"node {meta[2]} cannot see node {meta[0]} fall silent: they are not neighbours")
        return (meta[0], meta[1], meta[2]), self._verify(msg, "drop", meta[2], meta, _DROP_DOMAIN)


def abort_message(node_id: int, neighbours: tuple[int, ...], meta: tuple[int, ...], signature: tuple[int, ...]) -> Message:
    """An abort: ``meta`` and its origin's signature (unchanged when relayed)."""
    return Message(node_id, neighbours, CONTROL, 0, ABORT, signature, False, meta)


class Agreement:
    """The final agreement: every neighbour must finish with this node's model.

    Each node sends its fitted parameters (public output) to its neighbours and waits until
    each neighbour's model arrived and agrees within :data:`AGREEMENT_RTOL` (relative,
    infinity norm).  The graph is connected, so if every node passes, all honest nodes hold
    the same model; a node that finished differently (e.g. misled by a forged stop round) is
    found by a neighbour, and the run aborts everywhere naming the two.

    Parameters
    ----------
    node_id : int
    model_size : int
        Length of the flat model vector.
    """

    def __init__(self, node_id: int, model_size: int) -> None:
        self.node_id = node_id
        self.model_size = model_size
        self.mine: np.ndarray | None = None
        self.n_iter = 0
        self.agreed: set[int] = set()
        self._waiting: dict[int, tuple[int, np.ndarray]] = {}

    def message(self, neighbours: tuple[int, ...], model: np.ndarray, n_iter: int) -> Message:
        """Fix this node's model; return the ``final`` message that shows it to the neighbours."""
        self.mine, self.n_iter = model, n_iter
        return Message(self.node_id, neighbours, CONTROL, 0, FINAL, model.copy(), False, (n_iter,))

    def settle(self) -> None:
        """Compare the models that arrived before this node's own was fixed (raises as :meth:`receive`)."""
        for j in list(self._waiting):
            self._compare(j)

    def done(self, neighbours: frozenset[int]) -> bool:
        """Every neighbour's model arrived and agrees."""
        return neighbours <= self.agreed

    def receive(self, msg: Message, plausible: bool) -> bool:
        """Check and record neighbour ``msg.sender``'s final model; True if it was new.

        Raises
        ------
        ProtocolViolation
            A malformed final message.
        NodeFailure
            :attr:`~p2pem.deploy.failures.Reason.DISAGREE`: the models differ.
        """
        j = msg.sender
        if j in self.agreed or j in self._waiting:
            return False
        if msg.round != 0 or len(msg.meta) != 1 or not plausible:
            raise violation(msg, "final", f"round {msg.round}, meta {msg.meta}, receivers {msg.receivers}")
        check_vector(msg, self.model_size)
        self._waiting[j] = (int(msg.meta[0]), np.asarray(msg.payload))
        if self.mine is not None:
            self._compare(j)
        return True

    def _compare(self, j: int) -> None:
        n_iter, model = self._waiting.pop(j)
        mine = self.mine
        assert mine is not None
        if n_iter != self.n_iter:
            raise self._disagree(j, f"neighbour node {j} finished after {n_iter} EM iterations, this node after {self.n_iter}")
        diff = relative_error(model, mine)
        if not diff <= AGREEMENT_RTOL:
            raise self._disagree(j, f"neighbour node {j} finished with a different model (relative difference {diff:.3g} > {AGREEMENT_RTOL:g})")
        self.agreed.add(j)

    def _disagree(self, j: int, text: str) -> NodeFailure:
        return NodeFailure(Reason.DISAGREE, self.node_id, text, (self.node_id, j))
