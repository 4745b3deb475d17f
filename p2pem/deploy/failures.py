"""Why a deployed node stops: one enum of reasons and one typed failure that carries its facts.

Every way a node process gives up is a :class:`NodeFailure`: the node that failed, the
:class:`Reason`, the nodes it names and a one-line detail.

**A node is named a culprit only on proof** (docs/threats.md, "Accusations only with proof").
Proof is a statement the culprit itself authenticated or signed that contradicts the protocol
(a malformed or out-of-range message, a forged relay, a stop proposal of a form no honest
node makes, two different signed values for one slot, more signed statements than an honest
node sends) or that contradicts another signed statement of its own: the reasons in
:data:`PROOF`.  Everything else (a silence, a stall, a slow neighbour, a different final
model, a split, an eviction's votes, another node's abort) is *evidence*: the nodes it names
are :attr:`NodeFailure.suspects`, the edge or boundary where it was observed, and the outcome
is *unattributable*; nobody is convicted.  The reason decides the exit code (a configuration mismatch is a
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

__all__ = ["PROOF", "Reason", "NodeFailure", "describe_abort", "nodes_text"]


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
    """Two neighbours finished with different models (evidence: a perturbed broadcast leaves
    honest nodes apart)."""
    INTERNAL = 10
    """A bug: an unexpected exception inside the node."""
    MODEL = 11
    """The model failed on the network average (a collapsed component, a singular covariance):
    nobody in particular is to blame."""
    SLOW = 12
    """A neighbour's awaited message is overdue although the neighbour waits for nobody (or
    it waits for a message this node has sent): the edge is slow (evidence: the neighbour
    holds its messages back, or the path delays them)."""
    STOP = 13
    """A signed stop proposal contradicts what this node's own counters allow (evidence: a
    member between two honest nodes can skew their counters apart)."""
    SPLIT = 14
    """The final results of nodes behind a cut vertex differ from this node's, or never arrive:
    the cut vertex separates them."""
    DROPPED_OUT = 15
    """A node was dropped (enough of its neighbours signed that it fell silent) and the run
    cannot go on without it (the survivors' graph would expose a node, or be cut)."""
    EQUIVOCATION = 16
    """A node signed two different final results (one slot, two signed values): proof."""
    RESTARTED = 17
    """A neighbour started afresh (a new incarnation) while the run was under way, or says it
    is further than an honest neighbour can be (this node restarted): nobody can prove which."""
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

    @property
    def proves(self) -> bool:
        """Whether a failure of this reason rests on a statement of the named node itself (:data:`PROOF`)."""
        return self in PROOF


#: Reasons this node never sends, and what it sends instead.
_WIRE = {
    Reason.CANNOT_CONTINUE: Reason.DROPPED_OUT,
    Reason.EVICTED: Reason.DROPPED_OUT,
    Reason.ABORTED: Reason.PROTOCOL,
}
#: Reasons whose named nodes are culprits: the node that stops holds a statement each of them
#: authenticated or signed and that no honest node makes whatever the others do (a malformed
#: or impossible message, a forged relay, a stop proposal of impossible form, two signed
#: finals, a flood of statements).  Every other reason names suspects: a stop round that
#: contradicts this node's counters (a member between two honest nodes can skew their
#: counters apart), a hello with another roster (which side's roster is wrong?), a silence.
PROOF = frozenset({Reason.VIOLATION, Reason.EQUIVOCATION})
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
    Reason.EQUIVOCATION: _PROTOCOL,
    Reason.RESTARTED: _TRANSPORT,
    Reason.INTERNAL: 70,
    Reason.INTERRUPTED: 130,
}


class NodeFailure(P2pemError):
    """A deployed node stopped: which node, why, whom it convicts on proof and whom it suspects.

    Parameters
    ----------
    reason : Reason
    node : int
        The node that stops (the message starts with ``node <node>:``).
    detail : str
        One line saying what happened, where (EM iteration, protocol round) and to whom.
    named : sequence of int, optional
        The nodes the failure names: its culprits when the reason :attr:`~Reason.proves`,
        else its suspects (the edge or boundary where the failure was observed).
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
    reason, node, detail, exit_code, relay, evidence, extra_signature
        As given.
    named : tuple of int
        As given (what an abort of this failure carries).
    culprits : tuple of int
        The named nodes when this node holds proof against them (:data:`PROOF`), else empty.
    suspects : tuple of int
        The named nodes when the failure is only evidence, else empty.
    attributable : bool
        Whether the failure convicts anyone.
    """

    def __init__(
        self,
        reason: Reason,
        node: int,
        detail: str,
        named: Sequence[int] = (),
        *,
        exit_code: int | None = None,
        relay: Any = None,
        evidence: Sequence[int] = (),
        extra_signature: Sequence[int] = (),
    ) -> None:
        self.reason = Reason(reason)
        self.node = int(node)
        self.detail = detail
        self.named = tuple(int(c) for c in named)
        proved = self.reason.proves
        self.culprits = self.named if proved else ()
        self.suspects = () if proved else self.named
        self.attributable = bool(self.culprits)
        self.exit_code = self.reason.exit_code if exit_code is None else int(exit_code)
        self.relay = relay
        self.evidence = tuple(int(e) for e in evidence)
        self.extra_signature = tuple(int(e) for e in extra_signature)
        super().__init__(f"node {self.node}: {detail}")


def nodes_text(ids: Sequence[int]) -> str:
    """``node 3`` or ``nodes 1, 4`` (sorted, each once); ``no node`` for none."""
    ids = sorted(set(ids))
    if not ids:
        return "no node"
    return ("node " if len(ids) == 1 else "nodes ") + ", ".join(str(i) for i in ids)


def describe_abort(reason: int, iteration: int, round: int, origin: int, culprits: Sequence[int], evidence: Sequence[int] = ()) -> str:
    """One line saying who claims what, for a (relayed) abort's fields.

    The origin signed the abort, so the line is its claim: ``node 0 reports that ...``.  For
    the node that reads it the claim is evidence, not proof (module docstring): the origin's
    proof, if it has one, is a statement made to the origin.
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
        Reason.SLOW: f"the messages of {them} it waited for in {at} were overdue (a slow edge)",
        Reason.STOP: f"the stop proposal signed by {them} in EM iteration {iteration} contradicts its counters",
        Reason.DROPPED_OUT: f"the run cannot go on without {them}",
        Reason.EQUIVOCATION: f"{them} signed two different final results",
        Reason.RESTARTED: f"it or {them} restarted (a new process under the same key and launch) by {at}",
        Reason.SPLIT: f"{them} separates it from node {evidence[0] if evidence else '?'}, whose final result differs from its own or never arrived",
    }
    text = claims.get(Reason(reason)) if reason in WIRE_REASONS else None
    if text is None:
        text = f"it hit a protocol error in {at}" + (f" (message from {them})" if culprits else "")
    return f"node {origin} reports that {text}"
