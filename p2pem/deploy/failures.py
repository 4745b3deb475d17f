"""Why a deployed node stops: one enum of reasons and one typed failure that carries its facts.

Every way a node process gives up is a :class:`NodeFailure`: the node that failed, the
:class:`Reason`, the culprit node(s) it blames (none when nobody in particular) and a one-line
detail.  The reason decides the exit code (a configuration mismatch is a
:class:`~p2pem.errors.ConfigError`'s 2, a protocol violation a
:class:`~p2pem.errors.ProtocolError`'s 4, a silence or a lost broker a
:class:`~p2pem.errors.TransportError`'s 5, a model that fails on the network average a
:class:`~p2pem.errors.ModelError`'s 6, an internal error 70, an interruption 130) and what
the node tells its neighbours: the reasons numbered below 100 travel in signed aborts
(:mod:`p2pem.deploy.control`), the others are told as the wire reason they map to
(:attr:`Reason.wire`).  :func:`describe_abort` turns an abort's fields into the line every
node that relays it prints.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from p2pem.errors import ConfigError, ModelError, P2pemError, ProtocolError, TransportError

__all__ = ["Reason", "NodeFailure", "describe_abort", "nodes_text"]


class Reason(enum.IntEnum):
    """Why a node stopped.

    The values below 100 are the first meta field of an abort message (a wire format: never
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
    MODEL = 11
    """The model failed on the network average (a collapsed component, a singular covariance):
    nobody in particular is to blame."""
    SLOW = 12
    """A neighbour's awaited message is overdue although the neighbour waits for nobody (or
    for a message this node has sent): it holds its messages back."""
    STOP = 13
    """A signed stop proposal contradicts what this node's own counters allow."""
    SPLIT = 14
    """The final results of nodes behind a cut vertex differ from this node's, or never arrive:
    the cut vertex separates them."""
    DROPPED_OUT = 15
    """A node was dropped (enough of its neighbours signed that it fell silent) and the run
    cannot go on without it (the survivors' graph would expose a node, or be cut)."""
    CANNOT_CONTINUE = 101
    """This node cannot take part in a dropout: the run cannot go on without the dropped node,
    or this node is in another EM iteration than the drop."""
    ABORTED = 104
    """A neighbour relayed another node's signed abort."""
    EVICTED = 105
    """Enough of this node's neighbours signed that it fell silent: the others go on without it
    (it tells nobody: they no longer listen)."""

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
    Reason.CANNOT_CONTINUE: Reason.DROPPED_OUT,
    Reason.EVICTED: Reason.DROPPED_OUT,
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
    Reason.DROPPED_OUT: _TRANSPORT,
    Reason.EVICTED: _TRANSPORT,
    Reason.ABORTED: _TRANSPORT,
    Reason.MISMATCH: _CONFIG,
    Reason.PROTOCOL: _PROTOCOL,
    Reason.VIOLATION: _PROTOCOL,
    Reason.DISAGREE: _PROTOCOL,
    Reason.MODEL: ModelError.exit_code,
    Reason.SLOW: _TRANSPORT,
    Reason.STOP: _PROTOCOL,
    Reason.SPLIT: _PROTOCOL,
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
    relay : Abort, optional
        For :attr:`Reason.ABORTED`: the origin's signed abort, relayed unchanged.
    evidence : tuple of int, optional
        Extra fields of the abort this failure is told as (see
        :class:`~p2pem.deploy.control.Abort`): a contradicted stop's ``(attempt, proposed_at,
        stop_round)``, the node whose result differs in a split.
    extra_signature : tuple of int, optional
        For :attr:`Reason.STOP`: the contradicted stop's own signature.

    Attributes
    ----------
    reason, node, detail, culprits, exit_code, relay, evidence, extra_signature
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
        relay: Any = None,
        evidence: Sequence[int] = (),
        extra_signature: Sequence[int] = (),
    ) -> None:
        self.reason = Reason(reason)
        self.node = int(node)
        self.detail = detail
        self.culprits = tuple(int(c) for c in culprits)
        self.exit_code = self.reason.exit_code if exit_code is None else int(exit_code)
        self.relay = relay
        self.evidence = tuple(int(e) for e in evidence)
        self.extra_signature = tuple(int(e) for e in extra_signature)
        super().__init__(f"node {self.node}: {detail}")


def nodes_text(ids: Sequence[int]) -> str:
    """``node 3`` or ``nodes 1, 4`` (sorted, each once)."""
    ids = sorted(set(ids))
    return ("node " if len(ids) == 1 else "nodes ") + ", ".join(str(i) for i in ids)


def describe_abort(reason: int, iteration: int, round: int, origin: int, culprits: Sequence[int], evidence: Sequence[int] = ()) -> str:
    """One line saying who claims what, for a (relayed) abort's fields.

    The origin signed the abort, so the line is its claim: ``node 0 reports that ...``.
    """
    at = "the final agreement" if round < 0 else f"EM iteration {iteration}, protocol round {round}"
    them = nodes_text(culprits) if culprits else "nobody"
    claims = {
        Reason.SILENT: f"{them} fell silent in {at}",
        Reason.STALLED: f"it made no progress in {at} waiting for {them}",
        Reason.OFFLINE: f"{them} never came online",
        Reason.BROKER: f"it lost the MQTT broker in {at}",
        Reason.INTERRUPTED: f"it was interrupted in {at}",
        Reason.MISMATCH: f"{them} run{'s' if len(set(culprits)) == 1 else ''} with a roster (or step parameters derived from it) that differs from its own",
        Reason.VIOLATION: f"{them} violated the protocol in {at}",
        Reason.DISAGREE: f"{them} finished with a different model than it did",
        Reason.INTERNAL: f"it hit an internal error in {at}",
        Reason.MODEL: f"its model failed on the network average in {at} (nobody in particular is to blame)",
        Reason.SLOW: f"{them} held back the messages it waited for in {at}",
        Reason.STOP: f"the stop proposal signed by {them} in EM iteration {iteration} contradicts its counters",
        Reason.DROPPED_OUT: f"the run cannot go on without {them}",
        Reason.SPLIT: f"{them} separates it from node {evidence[0] if evidence else '?'}, whose final result differs from its own or never arrived",
    }
    text = claims.get(Reason(reason)) if reason in WIRE_REASONS else None
    if text is None:
        text = f"it hit a protocol error in {at}" + (f" (message from {them})" if culprits else "")
    return f"node {origin} reports that {text}"
