"""Why a deployed node stops: one enum of reasons and one typed failure that carries its facts.

Every way a node process gives up is a :class:`NodeFailure`: the node that failed, the
:class:`Reason`, the culprit node(s) it blames (none when nobody in particular) and a one-line
detail.  The reason decides the exit code (a configuration mismatch is a
:class:`~p2pem.errors.ConfigError`'s 2, a protocol violation a
:class:`~p2pem.errors.ProtocolError`'s 4, a silence or a lost broker a
:class:`~p2pem.errors.TransportError`'s 5, an internal error 70, an interruption 130) and what
the node tells its neighbours: the reasons numbered below 100 travel in signed aborts
(:mod:`p2pem.deploy.control`), the others are told as the wire reason they map to
(:attr:`Reason.wire`).  :func:`describe_abort` turns an abort's fields into the line every
node that relays it prints.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from p2pem.errors import ConfigError, P2pemError, ProtocolError, TransportError

__all__ = ["Reason", "NodeFailure", "describe_abort", "nodes_text"]


class Reason(enum.IntEnum):
    """Why a node stopped.

    The values 1-10 are the first meta field of an abort message (a wire format: never
    renumbered); the values from 101 are this node's own failures, told to the neighbours as
    :attr:`wire`.
    """

    SILENT = 1
    """A neighbour this node waited for sent nothing, not even a heartbeat, for ``timeout``."""
    STALLED = 2
    """The awaited neighbours are alive but the run makes no progress."""
    OFFLINE = 3
    """Neighbours did not come online within ``startup_timeout``."""
    BROKER = 4
    """The broker stayed unreachable for ``reconnect_timeout``."""
    PROTOCOL = 5
    """A protocol error without a proven culprit."""
    INTERRUPTED = 6
    """A signal (Ctrl-C, SIGTERM from the launcher), or the launcher went away."""
    MISMATCH = 7
    """A neighbour runs with another roster, or derived other public step parameters from it."""
    VIOLATION = 8
    """An authenticated neighbour sent what no honest node sends."""
    DISAGREE = 9
    """Two neighbours finished with different models."""
    INTERNAL = 10
    """A bug: an unexpected exception inside the node."""
    CANNOT_CONTINUE = 101
    """A node dropped out and the run cannot go on without it (or this node was dropped)."""
    DROPOUT_MISMATCH = 102
    """A neighbour drops a node, but this node runs with ``on_dropout = "stop"``."""
    UNUSABLE_AVERAGE = 103
    """The network average of an aggregation is unusable (absurd but valid-looking values)."""
    ABORTED = 104
    """A neighbour relayed another node's signed abort."""

    @property
    def wire(self) -> Reason:
        """The reason this failure is told as in an abort message."""
        return _WIRE.get(self, self)

    @property
    def exit_code(self) -> int:
        """The node process's exit code for this failure."""
        return _EXIT_CODES[self]


#: Reasons this node never sends, and what it sends instead.
_WIRE = {
    Reason.CANNOT_CONTINUE: Reason.SILENT,
    Reason.DROPOUT_MISMATCH: Reason.SILENT,
    Reason.UNUSABLE_AVERAGE: Reason.PROTOCOL,
    Reason.ABORTED: Reason.PROTOCOL,
}
#: Reasons that may appear in an abort message.
WIRE_REASONS = frozenset(r for r in Reason if r < 100)

_CONFIG, _PROTOCOL, _TRANSPORT = ConfigError.exit_code, ProtocolError.exit_code, TransportError.exit_code
_EXIT_CODES = {
    Reason.SILENT: _TRANSPORT,
    Reason.STALLED: _TRANSPORT,
    Reason.OFFLINE: _TRANSPORT,
    Reason.BROKER: _TRANSPORT,
    Reason.CANNOT_CONTINUE: _TRANSPORT,
    Reason.ABORTED: _TRANSPORT,
    Reason.MISMATCH: _CONFIG,
    Reason.DROPOUT_MISMATCH: _CONFIG,
    Reason.PROTOCOL: _PROTOCOL,
    Reason.VIOLATION: _PROTOCOL,
    Reason.DISAGREE: _PROTOCOL,
    Reason.UNUSABLE_AVERAGE: _PROTOCOL,
    Reason.INTERNAL: 70,
    Reason.INTERRUPTED: 130,
}


class NodeFailure(P2pemError):
    """A deployed node stopped: which node, why, whom it blames.

    Parameters
    ----------
    reason : Reason
    node : int
        The node that stops (the message starts with ``node <node>:``).
    detail : str
        One line saying what happened, where (EM iteration, protocol round) and to whom.
    culprits : sequence of int, optional
        Node ids blamed; empty when nobody in particular.
    exit_code : int, optional
        Default :attr:`Reason.exit_code` (an interruption by signal s exits 128 + s).
    relay : (meta, signature), optional
        For :attr:`Reason.ABORTED`: the origin's signed abort, relayed unchanged.

    Attributes
    ----------
    reason, node, detail, culprits, exit_code, relay
        As given.
    """

    def __init__(
        self,
        reason: Reason,
        node: int,
        detail: str,
        culprits: Sequence[int] = (),
        *,
        exit_code: int | None = None,
        relay: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    ) -> None:
        self.reason = Reason(reason)
        self.node = int(node)
        self.detail = detail
        self.culprits = tuple(int(c) for c in culprits)
        self.exit_code = self.reason.exit_code if exit_code is None else int(exit_code)
        self.relay = relay
        super().__init__(f"node {self.node}: {detail}")


def nodes_text(ids: Sequence[int]) -> str:
    """``node 3`` or ``nodes 1, 4`` (sorted, each once)."""
    ids = sorted(set(ids))
    return ("node " if len(ids) == 1 else "nodes ") + ", ".join(str(i) for i in ids)


def describe_abort(meta: Sequence[int]) -> str:
    """One line for the meta fields ``(reason, iteration, round, origin, *culprits)`` of an abort."""
    if len(meta) < 4:
        return "stopped (no reason given)"
    reason, it, rnd, origin, *culprits = (int(v) for v in meta)
    at = f"EM iteration {it}, protocol round {rnd}"
    if reason == Reason.SILENT:
        return f"{nodes_text(culprits)} fell silent in {at} (detected by node {origin})"
    if reason == Reason.STALLED:
        return f"node {origin} made no progress in {at} waiting for {nodes_text(culprits)}"
    if reason == Reason.OFFLINE:
        return f"{nodes_text(culprits)} never came online (noticed by node {origin})"
    if reason == Reason.BROKER:
        return f"node {origin} lost the MQTT broker in {at}"
    if reason == Reason.INTERRUPTED:
        return f"node {origin} was interrupted in {at}"
    if reason == Reason.MISMATCH:
        verb = "runs" if len(set(culprits)) == 1 else "run"
        return f"{nodes_text(culprits)} {verb} with a roster (or step parameters derived from it) that differs from node {origin}'s"
    if reason == Reason.VIOLATION:
        return f"node {origin} caught {nodes_text(culprits)} violating the protocol in {at}"
    if reason == Reason.DISAGREE:
        return f"{nodes_text(culprits)} finished with different models (found by node {origin})"
    if reason == Reason.INTERNAL:
        return f"node {origin} hit an internal error in {at}"
    blame = f" (message from {nodes_text(culprits)})" if culprits else ""
    return f"node {origin} hit a protocol error in {at}{blame}"
