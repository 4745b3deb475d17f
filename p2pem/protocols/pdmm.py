"""PDMM average consensus with subspace perturbation (``pdmm-sp``).

Average consensus as the problem min sum_i 1/2 ||x_i - s_i||^2 subject to x_i = x_j on every
edge, solved by PDMM (Zhang & Heusdens 2018).  With B_{i|j} = +1 if i < j else -1 and a dual
z_{i|j} per directed edge, one synchronous round is (eq. (10)-(11) of Li et al. 2022)::

    x_i  <- (s_i - sum_j B_{i|j} z_{i|j}) / (1 + c d_i)
    z_{j|i} <- (1 - theta) z_{j|i} + theta (z_{i|j} + 2 c B_{i|j} x_i)

theta = 1 is PDMM, theta = 1/2 averaged PDMM (ADMM).  Subspace perturbation (Li, Heusdens &
Christensen 2020): the initial duals z^(0) are drawn with a large standard deviation and
exchanged once per aggregation over an encrypted channel; afterwards every node broadcasts
only x_i, and each node tracks both z_{i|j} and z_{j|i} of its edges itself.  The part of
z^(0) in H-perp (the orthogonal complement of span(C) + span(PC)) never converges, which hides
s_i in x_i, while x converges to the exact average because x depends on z only through H.

Stopping (evaluated by each node on what it sees): node i is *locally settled* in round t when
both its own change |x_i(t) - x_i(t-1)| and its disagreement with every neighbour are at most
``tol * max|x_i(t)|`` (infinity norms).  A counter g_i(t) = 1 + min(g_i(t-1), min_j g_j(t-1))
while settled (0 otherwise) rides on the broadcasts; g_i >= D + 1 (D the graph diameter, public)
means every node settled recently.  The node then fixes ``stop_at = t + D`` and floods it, so
every node stops at the same round, or at ``max_iter`` at the latest.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Union

import numpy as np

from p2pem.errors import ConfigError, ProtocolError
from p2pem.messages import Message
from p2pem.protocols.base import AggregateOutcome, Aggregation, NodeContext, ProtocolSpec, ProtocolViolation, Topology, check_vector

if TYPE_CHECKING:
    import networkx as nx

NEVER = 2**62


def dual_update(z: np.ndarray, z_other: np.ndarray, coef: np.ndarray, x_other: np.ndarray, theta: float) -> np.ndarray:
    """z_{i|j} <- (1 - theta) z_{i|j} + theta (z_{j|i} + 2 c B_{j|i} x_j); ``coef`` = 2 c B_{j|i}.

    The one place this formula is written: the node and the vectorised engine both call it,
    elementwise, so they round identically.
    """
    return (1.0 - theta) * z + theta * (z_other + coef * x_other)


def sums_update(u, v, x, nb_sum, two_c, two_cd, theta: float):
    """The synchronous PDMM round on per-node dual sums (no per-edge state needed).

    With u_i = sum_j B_{i|j} z_{i|j} and v_i = sum_j B_{i|j} z_{j|i}, summing the dual update
    over a node's edges (B_{i|j} B_{j|i} = -1) gives::

        u_i <- (1 - theta) u_i + theta (v_i - 2c sum_j x_j)
        v_i <- (1 - theta) v_i + theta (u_i + 2c d_i x_i)

    so a node needs only u_i, v_i and its neighbours' broadcasts; x_i = (s_i - u_i)/(1 + c d_i)
    is the same iterate as with per-edge duals.  (The per-edge parts, including the H-perp
    component that never converges, are still there implicitly: tests run the per-edge
    recursion beside this one.)  Node and batch engine both call this function.
    """
    if theta == 1.0:
        return v - two_c * nb_sum, u + two_cd * x
    return (1.0 - theta) * u + theta * (v - two_c * nb_sum), (1.0 - theta) * v + theta * (u + two_cd * x)


def settled(x, x_prev, nb_sum, degree, tol: float):
    """Local stopping test of node i: max(|x_i - x_i_prev|, |x_i - mean_j x_j|) <= tol max|x_i|.

    Infinity norms over the vector.  When every node passes, x is (close to) harmonic on the
    graph, i.e. (close to) constant on a connected graph: consensus.  The gap term is only
    computed when some node's change already passes (the answer is the same, it is cheaper).
    """
    threshold = tol * np.max(np.abs(x), axis=-1)
    ok = np.max(np.abs(x - x_prev), axis=-1) <= threshold
    if not np.any(ok):
        return ok
    return ok & (np.max(np.abs(x - nb_sum / degree), axis=-1) <= threshold)


def neighbour_sum(x_nb: np.ndarray) -> np.ndarray:
    """sum_j x_j in neighbour order, starting from zero: the order of a CSR product's row."""
    acc = np.zeros(x_nb.shape[1:])
    for row in x_nb:
        acc += row
    return acc


_ZERO = np.zeros(1, dtype=np.intp)


def auto_c(topology: Topology) -> float:
    """Step size c from the graph alone (public): 1 / sqrt(lambda_2 * lambda_max) of the Laplacian.

    A common heuristic for ADMM-type consensus, it balances the slowest and the fastest
    modes; ``sim/bench_consensus.py`` compares it with a grid of fixed values.  Cached by
    the graph's adjacency lists, so repeated runs on the same graph pay for it once.
    """
    return _auto_c(topology.neighbours)


@functools.lru_cache(maxsize=16)
def _auto_c(neighbours: tuple[tuple[int, ...], ...]) -> float:
    topology = Topology(n_nodes=len(neighbours), neighbours=neighbours, diameter=0)
    n = topology.n_nodes
    import scipy.sparse as sp

    adj = sp.csr_matrix((np.ones(topology.src.size), (topology.src, topology.dst)), shape=(n, n))
    lap = sp.diags(topology.degrees.astype(float)) - adj
    if n <= 400:
        ev = np.linalg.eigvalsh(lap.toarray())
        lam2, lmax = ev[1], ev[-1]
    else:
        import scipy.sparse.linalg as spla

        lmax = spla.eigsh(lap, k=1, which="LA", return_eigenvectors=False)[0]
        lam2 = spla.eigsh(lap, k=2, sigma=-1e-3, which="LM", return_eigenvectors=False).max()
    return float(1.0 / math.sqrt(lam2 * lmax))


@dataclass(frozen=True)
class PdmmSP(ProtocolSpec):
    """``pdmm-sp``: PDMM average consensus with subspace perturbation.

    Parameters
    ----------
    mode : {"sync", "async"}
        Synchronous rounds, or one uniformly random node wakes per tick.
    c : float or "auto"
        PDMM step size; "auto" derives it from the (public) graph, see :func:`auto_c`.
    theta : float
        1 for PDMM, 0.5 for averaged PDMM (ADMM).
    perturbation_std : float
        Standard deviation of the initial duals (the privacy noise).
    tol : float or None
        Relative local stopping tolerance (see the module docstring); None picks 1e-10 in
        sync mode and 1e-12 in async mode.
    max_iter : int
        Rounds at most (in async mode: activations per node at most).
    encrypt_duals : bool
        Send the initial duals encrypted (the protocol).  False is an *insecure* variant kept
        only as a labelled comparison for the leakage analysis.
    """

    mode: Literal["sync", "async"] = "sync"
    c: Union[float, str] = "auto"
    theta: float = 1.0
    perturbation_std: float = 100.0
    tol: Union[float, None] = None
    max_iter: int = 5000
    encrypt_duals: bool = True
    name: str = field(init=False, default="pdmm-sp")
    exact: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.mode not in ("sync", "async"):
            raise ConfigError(f"pdmm-sp: mode must be 'sync' or 'async', got {self.mode!r}")
        object.__setattr__(self, "asynchronous", self.mode == "async")
        if isinstance(self.c, str):
            if self.c != "auto":
                raise ConfigError(f"pdmm-sp: c must be a positive number or 'auto', got {self.c!r}")
        elif not (_is_number(self.c) and self.c > 0):
            raise ConfigError(f"pdmm-sp: c must be a positive number or 'auto', got {self.c!r}")
        if not (_is_number(self.theta) and 0 < self.theta <= 1):
            raise ConfigError(f"pdmm-sp: theta must be in (0, 1], got {self.theta!r}")
        if not (_is_number(self.perturbation_std) and self.perturbation_std >= 0):
            raise ConfigError(f"pdmm-sp: perturbation_std must be a number >= 0, got {self.perturbation_std!r}")
        if self.tol is not None and not (_is_number(self.tol) and self.tol >= 0):
            raise ConfigError(f"pdmm-sp: tol must be a number >= 0, got {self.tol!r}")
        if not (isinstance(self.max_iter, int) and not isinstance(self.max_iter, bool) and self.max_iter >= 1):
            raise ConfigError(f"pdmm-sp: max_iter must be a positive integer, got {self.max_iter!r}")
        if not isinstance(self.encrypt_duals, bool):
            raise ConfigError(f"pdmm-sp: encrypt_duals must be true or false, got {self.encrypt_duals!r}")

    @property
    def stop_tol(self) -> float:
        """The stopping tolerance in force: ``tol``, or by default 1e-10 (sync) / 1e-12 (async).

        Asynchronous nodes judge convergence against neighbours' possibly stale broadcasts
        and stop one by one, so they need a tighter threshold for the same final accuracy.
        """
        if self.tol is not None:
            return float(self.tol)
        return 1e-12 if self.asynchronous else 1e-10

    @property
    def label(self) -> str:
        return "pdmm-sp" + ("" if self.encrypt_duals else " (INSECURE: plaintext duals)")

    def validate(self, g: nx.Graph) -> None:
        from p2pem.graphs import require_cycle

        require_cycle(g)

    def step_size(self, topology: Topology) -> float:
        return auto_c(topology) if self.c == "auto" else float(self.c)

    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        return PdmmNode(self, ctx, iteration)

    # -- the batch path -------------------------------------------------------------------

    def aggregate(self, values, topology, rngs, iteration, *, record=False) -> AggregateOutcome:
        if self.asynchronous:
            raise NotImplementedError("asynchronous pdmm-sp runs only at message level")
        t_ = topology
        n, p = values.shape
        c = self.step_size(t_)
        theta = self.theta
        diam = t_.diameter
        trace: list[Message] | None = [] if record else None
        worst = int(np.argmin(np.max(np.abs(values), axis=1))) if n else 0
        check_precision(self, values[worst], worst)
        z = np.empty((t_.src.size, p))
        for i in range(n):
            lo, hi = t_.row_start[i], t_.row_start[i] + t_.degrees[i]
            z[lo:hi] = rngs[i].normal(0.0, self.perturbation_std, size=(hi - lo, p))
        if record:
            for d in range(t_.src.size):
                trace.append(Message(int(t_.src[d]), (int(t_.dst[d]),), iteration, 0, "dual-init", z[d].copy(), self.encrypt_duals))
        dst, starts = t_.dst, t_.row_start
        adjacency = t_.adjacency
        degree = t_.degrees.astype(float)[:, None]
        sign = t_.sign[:, None]
        u = np.add.reduceat(sign * z, starts, axis=0)
        v = np.add.reduceat(sign * z[t_.reverse], starts, axis=0)
        del z
        denom = (1.0 + c * t_.degrees.astype(float))[:, None]
        two_c = 2.0 * c
        two_cd = (two_c * t_.degrees.astype(float))[:, None]
        zeros = np.zeros(n, dtype=np.int64)  # never written to: g_new may alias it
        g = zeros
        stop_at = np.full(n, NEVER, dtype=np.int64)
        flooding = False  # does any node hold a stop round yet?
        x_prev = None
        t = 0
        while True:
            t += 1
            x = (values - u) / denom
            if record:
                for i in range(n):
                    trace.append(Message(i, t_.neighbours[i], iteration, t, "primal", x[i].copy(), False, (int(g[i]), int(stop_at[i]))))
            nb_sum = adjacency @ x
            # the floods below are skipped while there is nothing to flood (same result, cheaper)
            stop_in = np.minimum(stop_at, np.minimum.reduceat(stop_at[dst], starts)) if flooding else stop_at
            g_new = zeros
            if x_prev is not None:
                ok = settled(x, x_prev, nb_sum, degree, self.stop_tol)
                if ok.any():
                    g_new = np.where(ok, 1 + np.minimum(g, np.minimum.reduceat(g[dst], starts)), 0)
                    trigger = g_new >= diam + 1
                    if trigger.any():
                        stop_in = np.where(trigger, np.minimum(stop_in, t + diam), stop_in)
                        flooding = True
            if t >= stop_in[0] or t >= self.max_iter:
                # stop_at is flooded, so at the stopping round every node holds the same value
                if not (t >= stop_in).all() and t < self.max_iter:
                    raise ProtocolError("pdmm-sp: nodes disagree on the stopping round (internal error)")
                converged = bool(t >= stop_in[0])
                break
            g, stop_at = g_new, stop_in
            u, v = sums_update(u, v, x, nb_sum, two_c, two_cd, theta)
            x_prev = x
        n_edges = t_.src.size
        messages = n_edges + n * t
        nbytes = n_edges * 8 * p + n * t * (8 * p + 16)
        return AggregateOutcome(x, t, messages, nbytes, converged, trace)


class PrecisionWarning(UserWarning):
    """The initial duals are so large that float64 rounding exceeds the stopping tolerance."""


def check_precision(spec: PdmmSP, value: np.ndarray, node: int | str) -> None:
    """Warn when eps * perturbation_std exceeds tol * max|s_i|: the float64 floor is reached.

    Consensus then still settles, on a value whose error is about eps * std (times the
    rounding growth of the iteration): the nodes agree, but the average is off.  Runs with
    ``tol = 0`` (a fixed number of rounds) are not checked.
    ``sim/bench_precision.py`` maps the floor.
    """
    scale = float(np.max(np.abs(value))) if value.size else 0.0
    if spec.stop_tol > 0 and scale > 0 and spec.perturbation_std * np.finfo(float).eps > spec.stop_tol * scale:
        warnings.warn(
            f"pdmm-sp: perturbation_std {spec.perturbation_std:g} is too large for float64 at node {node} "
            f"(eps * std > tol * max|input| = {spec.stop_tol * scale:.2g}): the average will be off by about "
            f"{spec.perturbation_std * np.finfo(float).eps:.1g}; lower perturbation_std or raise tol",
            PrecisionWarning,
            stacklevel=3,
        )


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class PdmmNode(Aggregation):
    """One node of pdmm-sp for one aggregation (synchronous or asynchronous)."""

    def __init__(self, spec: PdmmSP, ctx: NodeContext, iteration: int) -> None:
        super().__init__()
        self.spec = spec
        self.ctx = ctx
        self.iteration = iteration
        self.nbrs = ctx.neighbours
        self.index = {j: k for k, j in enumerate(self.nbrs)}
        i = ctx.node_id
        self.c = spec.step_size(ctx.topology)
        sign_out = np.array([1.0 if i < j else -1.0 for j in self.nbrs])
        self.coef_in = (2.0 * self.c) * (-sign_out)[:, None]  # 2 c B_{j|i}
        self.coef_out = (2.0 * self.c) * sign_out[:, None]  # 2 c B_{i|j}
        self.sign_out = sign_out
        self.denom = 1.0 + self.c * float(len(self.nbrs))
        self.two_c = 2.0 * self.c
        self.two_cd = self.two_c * float(len(self.nbrs))
        self.u: np.ndarray | None = None  # sum_j B_{i|j} z_{i|j}   (synchronous mode)
        self.v: np.ndarray | None = None  # sum_j B_{i|j} z_{j|i}
        self.diam = ctx.topology.diameter
        self.z_own: np.ndarray | None = None  # z_{i|j}, one row per neighbour
        self.z_nb: np.ndarray | None = None  # z_{j|i}
        self._inits: dict[int, np.ndarray] = {}
        self._round_msgs: dict[int, dict[int, Message]] = {}
        self.round = 0  # last round whose x was broadcast
        self.g = 0
        self.stop_at = NEVER
        self.x: np.ndarray | None = None
        self.x_prev: np.ndarray | None = None
        # asynchronous bookkeeping
        self._x_nb: list[np.ndarray | None] = [None] * len(self.nbrs)
        self._g_nb = [0] * len(self.nbrs)
        self._stop_nb = False

    # -- shared pieces -----------------------------------------------------------------------

    def _primal(self) -> np.ndarray:
        if not self.spec.asynchronous:
            return (self.s - self.u) / self.denom
        acc = np.zeros(self.s.shape)
        for k in range(len(self.nbrs)):
            acc += self.sign_out[k] * self.z_own[k]
        return (self.s - acc) / self.denom

    def _msg(self, rnd: int, meta: tuple[int, ...]) -> Message:
        return Message(self.ctx.node_id, self.nbrs, self.iteration, rnd, "primal", self.x.copy(), False, meta)

    def start(self, value: np.ndarray) -> list[Message]:
        self.s = value
        check_precision(self.spec, value, self.ctx.node_id)
        p = value.shape[0]
        self.z_own = self.ctx.rng.normal(0.0, self.spec.perturbation_std, size=(len(self.nbrs), p))
        me = self.ctx.node_id
        return [
            Message(me, (j,), self.iteration, 0, "dual-init", self.z_own[k].copy(), self.spec.encrypt_duals)
            for k, j in enumerate(self.nbrs)
        ]

    def check(self, msg: Message) -> None:
        """What an honest neighbour sends in synchronous mode (see the module docstring).

        ``dual-init``: round 0, only to this node, encrypted, no meta.  ``primal``: round
        1..max_iter to all of the sender's neighbours, in clear, meta ``(g, stop_at)`` with
        ``0 <= g < round`` (g grows by at most one per round) and ``stop_at`` either never or
        in ``[round, round - 1 + D]`` (a sender past its stop round has stopped; a stop round
        is fixed at most D rounds ahead).  Both carry a finite float64 vector of this node's
        input length.
        """
        def bad(check: str, detail: str) -> ProtocolViolation:
            return ProtocolViolation(msg.sender, msg.iteration, msg.round, check, f"{msg.kind} message: {detail}")

        j, t = msg.sender, msg.round
        if j not in self.index:
            raise bad("sender", "the sender is not a neighbour")
        if msg.kind == "dual-init":
            if t != 0 or msg.receivers != (self.ctx.node_id,) or msg.meta != () or msg.encrypted != self.spec.encrypt_duals:
                raise bad("header", f"round {t}, receivers {msg.receivers}, meta {msg.meta}, encrypted {msg.encrypted}")
        elif msg.kind == "primal":
            if not 1 <= t <= self.spec.max_iter or msg.encrypted or tuple(msg.receivers) != self.ctx.topology.neighbours[j]:
                raise bad("header", f"round {t} (1..{self.spec.max_iter}), receivers {msg.receivers}, encrypted {msg.encrypted}")
            if len(msg.meta) != 2:
                raise bad("meta", f"{len(msg.meta)} meta fields, expected 2 (g, stop round)")
            g, stop_at = msg.meta
            if not 0 <= g < t:
                raise bad("meta", f"settled counter {g} outside 0..{t - 1}")
            if stop_at != NEVER and not t <= stop_at <= t - 1 + self.diam:
                raise bad("meta", f"stop round {stop_at} outside {t}..{t - 1 + self.diam}")
        else:
            raise bad("kind", "pdmm-sp sends only dual-init and primal messages")
        check_vector(msg, self.s.shape[0])

    def receive(self, msg: Message) -> list[Message]:
        k = self.index.get(msg.sender)
        if k is None:
            raise ProtocolError(f"pdmm-sp: node {self.ctx.node_id} got a message from non-neighbour {msg.sender}")
        if msg.kind == "dual-init":
            if msg.round != 0 or msg.sender in self._inits or len(self._inits) == len(self.nbrs):
                raise ProtocolError(f"pdmm-sp: unexpected dual-init from node {msg.sender}")
            self._inits[msg.sender] = np.asarray(msg.payload)
            if self.spec.asynchronous:
                if self.z_nb is None:
                    self.z_nb = np.full_like(self.z_own, np.nan)
                self.z_nb[k] = self._inits[msg.sender]
            elif len(self._inits) == len(self.nbrs):
                self.z_nb = np.stack([self._inits[j] for j in self.nbrs])
                if not self.spec.asynchronous:
                    sign = self.sign_out[:, None]
                    self.u = np.add.reduceat(sign * self.z_own, _ZERO, axis=0)[0]
                    self.v = np.add.reduceat(sign * self.z_nb, _ZERO, axis=0)[0]
                    self.z_own = self.z_nb = None
                    return self._broadcast_next()
            return []
        if msg.kind != "primal":
            raise ProtocolError(f"pdmm-sp: unexpected message kind {msg.kind!r} from node {msg.sender}")
        if self.spec.asynchronous:
            return self._receive_async(k, msg)
        if self.done or not (self.round <= msg.round <= self.round + 1) or msg.round == 0:
            raise ProtocolError(
                f"pdmm-sp: out-of-round message from node {msg.sender} (round {msg.round}, node {self.ctx.node_id} is in round {self.round})"
            )
        box = self._round_msgs.setdefault(msg.round, {})
        if msg.sender in box:
            raise ProtocolError(f"pdmm-sp: second round-{msg.round} message from node {msg.sender}")
        box[msg.sender] = msg
        if self.u is not None and len(self._round_msgs.get(self.round, ())) == len(self.nbrs):
            return self._complete_round()
        return []

    # -- synchronous --------------------------------------------------------------------------

    def _broadcast_next(self) -> list[Message]:
        meta = (self.g, self.stop_at)
        self.round += 1
        self.x = self._primal()
        out = [self._msg(self.round, meta)]
        if len(self._round_msgs.get(self.round, ())) == len(self.nbrs):
            out += self._complete_round()
        return out

    def _complete_round(self) -> list[Message]:
        t = self.round
        box = self._round_msgs.pop(t)
        msgs = [box[j] for j in self.nbrs]
        nb_sum = neighbour_sum(np.stack([np.asarray(m.payload, dtype=float) for m in msgs]))
        g_nb = min(m.meta[0] for m in msgs)
        stop_at = min(self.stop_at, min(m.meta[1] for m in msgs))
        x = self.x
        if self.x_prev is None:
            g_new = 0
        else:
            g_new = 1 + min(self.g, g_nb) if settled(x, self.x_prev, nb_sum, float(len(self.nbrs)), self.spec.stop_tol) else 0
        if g_new >= self.diam + 1:
            stop_at = min(stop_at, t + self.diam)
        if t >= stop_at or t >= self.spec.max_iter:
            self.done = True
            self.converged = t >= stop_at
            self.result = x
            self.rounds = t
            return []
        self.g, self.stop_at = g_new, stop_at
        self.u, self.v = sums_update(self.u, self.v, x, nb_sum, self.two_c, self.two_cd, self.spec.theta)
        self.x_prev = x
        return self._broadcast_next()

    # -- asynchronous -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return len(self._inits) == len(self.nbrs) and not self.done

    def wake(self) -> list[Message]:
        if not self.ready:
            return []
        self.round += 1
        x = self._primal()
        if self.x is None or any(v is None for v in self._x_nb):
            settled = False
        else:
            change = np.max(np.abs(x - self.x))
            gap = max(np.max(np.abs(x - v)) for v in self._x_nb)
            settled = max(change, gap) <= self.spec.stop_tol * np.max(np.abs(x))
        self.g = 1 + min(self.g, min(self._g_nb)) if settled else 0
        stop = self._stop_nb or self.g >= self.diam + 1 or self.round >= self.spec.max_iter
        self.x = x
        self.z_nb = dual_update(self.z_nb, self.z_own, self.coef_out, x, self.spec.theta)
        out = [self._msg(self.round, (self.g, int(stop)))]
        if stop:
            self.done = True
            self.converged = self.round < self.spec.max_iter or self._stop_nb or self.g >= self.diam + 1
            self.result = x
            self.rounds = self.round
        return out

    def _receive_async(self, k: int, msg: Message) -> list[Message]:
        if msg.sender not in self._inits:
            raise ProtocolError(f"pdmm-sp: primal from node {msg.sender} before its dual-init")
        if self.done:
            return []
        x_j = np.asarray(msg.payload)
        self._x_nb[k] = x_j
        self._g_nb[k] = msg.meta[0]
        self._stop_nb = self._stop_nb or bool(msg.meta[1])
        self.z_own[k] = dual_update(self.z_own[k], self.z_nb[k], self.coef_in[k], x_j, self.spec.theta)
        return []
