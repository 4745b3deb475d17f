"""The final agreement: one result across the whole graph before any node exits 0.

When its task has finished, every node signs its final result (the task's summary: for EM the
flattened model and its final log-likelihood) and sends it to its neighbours
(:meth:`Agreement.message`); every node relays the first copy of each origin's signed final to
its own neighbours, so each final reaches every node, and compares each with its own:

* the same number of EM iterations, the parameters within ``rtol`` (relative, infinity norm)
  and the log-likelihood within ``rtol`` (relative to its magnitude, at least 1);
  ``rtol`` is the protocol's :attr:`~p2pem.protocols.base.ProtocolSpec.agreement_rtol`
  (pdmm-sp: a hundred times its consensus tolerance; exact protocols: 1e-12);
* a *neighbour* whose final differs: :attr:`~p2pem.deploy.failures.Reason.DISAGREE` naming
  it, at once;
* a remote origin whose final differs: the boundary between the two results runs between two
  neighbours somewhere, which find it themselves and stop the run; this node only refuses to
  finish, and if no abort arrives within the timeout (a cut vertex keeps it from this side) it
  names the node that separates it from that origin
  (:attr:`~p2pem.deploy.failures.Reason.SPLIT`, see :meth:`Agreement.overdue`).

A node finishes (:meth:`Agreement.done`) once the finals of every node still in the run have
arrived and agree with its own.  An origin that signs two different finals shows each to
different neighbours, whose relays bring the other one to them: two signed values for one slot
are proof (:attr:`~p2pem.deploy.failures.Reason.EQUIVOCATION`, naming the origin).  A
different final model is evidence only (:attr:`~p2pem.deploy.failures.Reason.DISAGREE`: the
boundary between the two results runs between this node and that neighbour, and either side
may have been fed a perturbed broadcast): the run stops, unattributable, naming the neighbour
as a suspect.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from p2pem.deploy.admission import CONTROL
from p2pem.deploy.control import FINAL, SIGNATURE_WORDS, Signer, payload_digest, signature_words, violation, words_signature
from p2pem.deploy.failures import NodeFailure, Reason, nodes_text
from p2pem.messages import Message
from p2pem.protocols.base import check_vector

__all__ = ["Agreement"]


def relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max(max |b|, tiny); equal NaNs count as equal (a private run's log-likelihood)."""
    both_nan = np.isnan(a) & np.isnan(b)
    a, b = np.where(both_nan, 0.0, a), np.where(both_nan, 0.0, b)
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return diff / max(scale, np.finfo(float).tiny) if diff == diff else float("inf")


class Agreement:
    """This node's part of the final agreement (module docstring).

    Parameters
    ----------
    node_id : int
    n_nodes : int
    neighbours : sequence of sequence of int
        The roster's adjacency lists.
    size : int
        Length of a final result (:meth:`~p2pem.task.Task.summary_size`).
    rtol : float
        Largest relative difference that counts as the same result.
    signer : Signer

    Attributes
    ----------
    mine : ndarray or None
        This node's final result, once fixed.
    finals : dict
        Origin to the ``(n_iter, result)`` versions of its finals that arrived (checked and signed).
    """

    def __init__(self, node_id: int, n_nodes: int, neighbours: Sequence[Sequence[int]], size: int, rtol: float, signer: Signer) -> None:
        self.node_id = node_id
        self.n_nodes = n_nodes
        self.neighbours = neighbours
        self.size = size
        self.rtol = float(rtol)
        self.signer = signer
        self.mine: np.ndarray | None = None
        self.n_iter = 0
        self.finals: dict[int, list[tuple[int, np.ndarray]]] = {}
        self.agreed: set[int] = set()
        #: a remote origin whose final differs from this node's, and since when
        self.conflict: tuple[int, float] | None = None

    # -- sending ---------------------------------------------------------------------------

    def message(self, receivers: tuple[int, ...], result: np.ndarray, n_iter: int, iteration: int) -> Message:
        """Fix this node's result; return its signed ``final`` for ``receivers``.

        ``n_iter`` counts the M-steps, ``iteration`` is the task's last aggregation.
        """
        self.mine, self.n_iter = np.array(result, dtype=float), int(n_iter)
        fields = (self.node_id, self.n_iter, int(iteration))
        signature = self.signer.sign(FINAL, fields, payload_digest(self.mine))
        return Message(self.node_id, receivers, CONTROL, self.node_id, FINAL, self.mine.copy(), False, (self.n_iter, self.node_id, int(iteration), *signature_words(signature)))

    # -- receiving -------------------------------------------------------------------------

    def receive(self, msg: Message, now: float) -> bool:
        """Check a (relayed) final; True if it is the first of its origin (relay it then).

        Raises
        ------
        ProtocolViolation
            A malformed or forged final (convicts the neighbour that sent it).
        NodeFailure
            A neighbour's final differs from this node's (:attr:`Reason.DISAGREE`).
        """
        meta = tuple(msg.meta)
        if len(meta) != 3 + SIGNATURE_WORDS or not 0 <= meta[1] < self.n_nodes or msg.round != meta[1] or meta[0] < 0 or meta[2] < 0:
            raise violation(msg, "final", f"round {msg.round}, meta {meta[:4]}... is not (n_iter, origin, iteration, signature)")
        check_vector(msg, self.size, allow_nan=True)
        n_iter, origin, iteration = int(meta[0]), int(meta[1]), int(meta[2])
        result = np.asarray(msg.payload)
        self.signer.check(msg, FINAL, origin, (origin, n_iter, iteration), words_signature(meta[3:]), payload_digest(result))
        if origin == self.node_id:
            return False  # our own, relayed back
        versions = self.finals.setdefault(origin, [])
        if any(n == n_iter and np.array_equal(r, result, equal_nan=True) for n, r in versions):
            return False
        if versions:
            # an honest node signs one final: two signed values for one slot prove equivocation
            n_first, _ = versions[0]
            raise NodeFailure(
                Reason.EQUIVOCATION, self.node_id,
                f"node {origin} signed two different final results (after {n_first} and {n_iter} EM iterations; relayed by node {msg.sender})",
                (origin,),
            )
        versions.append((n_iter, result))
        if self.mine is not None:
            self._compare(origin, n_iter, result, now)
        return len(versions) == 1

    def settle(self, now: float) -> None:
        """Compare the finals that arrived before this node's own was fixed."""
        for origin, versions in list(self.finals.items()):
            for n_iter, result in versions:
                self._compare(origin, n_iter, result, now)

    def _compare(self, origin: int, n_iter: int, result: np.ndarray, now: float) -> None:
        assert self.mine is not None
        if n_iter != self.n_iter:
            why = f"finished after {n_iter} EM iterations, this node after {self.n_iter}"
        else:
            model_gap = relative_gap(result[:-1], self.mine[:-1])
            ll, own = result[-1], self.mine[-1]
            ll_gap = abs(ll - own) / max(1.0, abs(own)) if not (np.isnan(ll) and np.isnan(own)) else 0.0
            if model_gap <= self.rtol and ll_gap <= self.rtol:
                self.agreed.add(origin)
                return
            why = (f"finished with a different result (relative difference {model_gap:.3g} in the model, "
                   f"{ll_gap:.3g} in the log-likelihood; at most {self.rtol:g})")
        self.agreed.discard(origin)
        if origin in self.neighbours[self.node_id]:
            raise NodeFailure(Reason.DISAGREE, self.node_id, f"neighbour node {origin} {why}", (origin,))
        if self.conflict is None:
            self.conflict = (origin, now)

    # -- state -----------------------------------------------------------------------------

    def missing(self, present: Sequence[int]) -> list[int]:
        """Nodes of ``present`` (those still in the run) whose agreeing final has not arrived."""
        return [k for k in present if k != self.node_id and k not in self.agreed]

    def done(self, present: Sequence[int]) -> bool:
        """This node's result is fixed and every node still in the run showed the same."""
        return self.mine is not None and self.conflict is None and not self.missing(present)

    def overdue(self, present: Sequence[int], separator: Callable[[Sequence[int]], int | None], where: str) -> NodeFailure:
        """The failure of a final phase that did not end within the timeout.

        ``separator(targets)`` is a node whose removal cuts this node off every node of
        ``targets`` (None if there is none).  A remote conflict names the node that separates
        this node from the origin that finished otherwise; missing finals name the node that
        separates this node from all of them (it withholds them), else nobody.
        """
        if self.conflict is not None:
            origin = self.conflict[0]
            v = separator([origin])
            if v is not None:
                return NodeFailure(Reason.SPLIT, self.node_id, f"node {origin}'s signed final result differs from this node's and every path between them passes node {v} ({where})", (v,), evidence=(origin,))
            return NodeFailure(Reason.PROTOCOL, self.node_id, f"node {origin}'s signed final result differs from this node's, and no neighbours found the boundary within the timeout ({where})")
        missing = self.missing(present)
        v = separator(missing)
        if v is not None:
            return NodeFailure(Reason.SPLIT, self.node_id, f"the final results of {nodes_text(missing)} never arrived, and every path to them passes node {v} ({where})", (v,), evidence=(missing[0],))
        return NodeFailure(Reason.STALLED, self.node_id, f"the final results of {nodes_text(missing)} never arrived ({where})")
