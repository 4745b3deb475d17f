"""One node of pdmm-sp: the state machine the message-level simulator and a deployment both run.

Messages.  ``dual-init`` (round 0, encrypted, one per directed edge: z_{i|j}); then one
``primal`` broadcast per round t >= 1 with payload x_i(t) and ``meta = (g, stop_at)``: the
settled counter g_i(t - 1) and the stop round known to i before round t (``NEVER`` = 2**62
while none), both integers >= 0 (``stopping``; asynchronous mode: ``meta = (g, stop_flag)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from p2pem.errors import ProtocolError
from p2pem.messages import Message
from p2pem.protocols.base import Aggregation, NodeContext, ProtocolViolation, check_vector
from p2pem.protocols.pdmm.steps import Options, step_params
from p2pem.protocols.pdmm.stopping import NEVER, StopRule, check_precision
from p2pem.protocols.pdmm.updates import dual_update, neighbour_sum, sums_update


#: An honest initial dual is a normal draw of standard deviation ``perturbation_std``; one
#: beyond this many of them has probability below 1e-800: it convicts its sender.
DUAL_SIGMAS = 64


class PdmmNode(Aggregation):
    """One node of pdmm-sp for one aggregation (synchronous or asynchronous)."""

    def __init__(self, spec: Options, ctx: NodeContext, iteration: int) -> None:
        super().__init__()
        self.spec = spec
        self.ctx = ctx
        self.iteration = iteration
        self.nbrs = ctx.neighbours
        self.index = {j: k for k, j in enumerate(self.nbrs)}
        i = ctx.node_id
        sign_out = np.array([1.0 if i < j else -1.0 for j in self.nbrs])
        self.sign_out = sign_out
        self.diam = ctx.topology.diameter
        if spec.asynchronous:
            self.c = spec.step_size(ctx.topology)
            self.coef_in = (2.0 * self.c) * (-sign_out)[:, None]  # 2 c B_{j|i}
            self.coef_out = (2.0 * self.c) * sign_out[:, None]  # 2 c B_{i|j}
            self.denom: Any = 1.0 + self.c * float(len(self.nbrs))
            self.rule = StopRule(self.diam, tol=spec.stop_tol, max_iter=spec.max_iter)
        else:
            self.prm = step_params(spec, ctx.topology, i)
            self.denom = self.prm.denom
            ecc = int(ctx.topology.eccentricity[i])
            self.rule = StopRule(ecc, tol=spec.stop_tol, max_iter=spec.max_iter, settle_after=self.prm.settle_after,
                                 fixed_stop=self.prm.fixed_stop)
        self.u: np.ndarray | None = None  # sum_j B_{i|j} z_{i|j}   (synchronous mode)
        self.v: np.ndarray | None = None  # sum_j B_{i|j} z_{j|i}
        # set by start() and the dual-inits before any primal is handled (the state machine's order)
        self.z_own: Any = None  # z_{i|j}, one row per neighbour
        self.z_nb: Any = None  # z_{j|i}
        self._inits: dict[int, np.ndarray] = {}
        self._round_msgs: dict[int, dict[int, Message]] = {}
        self.round = 0  # last round whose x was broadcast
        self.x: Any = None  # set by the first broadcast, before any round completes
        self.x_prev: np.ndarray | None = None
        # asynchronous bookkeeping: the neighbours' last broadcasts
        self._x_nb: list[np.ndarray | None] = [None] * len(self.nbrs)
        self._g_nb = [0] * len(self.nbrs)
        self._stop_nb = False
        # accountable stops (synchronous mode): this node's counter g(t) of every completed
        # round t (g(0) = 0), the last counter each neighbour announced, and whether this
        # node's own proposal was handed out
        self.g_hist: list[int] = [0]
        # asynchronous mode in a deployment: primals received from each neighbour (edge tokens)
        self._received = [0] * len(self.nbrs)
        self._g_last: dict[int, tuple[int, int]] = {}
        self._announced = False

    # -- shared pieces -----------------------------------------------------------------------

    def _primal(self) -> np.ndarray:
        if not self.spec.asynchronous:
            return (self.s - self.u) / self.prm.at(self.round)[0]
        acc = np.zeros(self.s.shape)
        for k in range(len(self.nbrs)):
            acc += self.sign_out[k] * self.z_own[k]
        return (self.s - acc) / self.denom

    def _msg(self, rnd: int, meta: tuple[int, ...]) -> Message:
        return Message(self.ctx.node_id, self.nbrs, self.iteration, rnd, "primal", self.x.copy(), False, meta)

    def awaiting(self) -> tuple[int, ...]:
        """The neighbours whose dual-init has not arrived; then (synchronous mode) those whose
        primal of the current round has not, or (asynchronous mode, in a deployment) those
        whose edge token it waits for (see :meth:`may_wake`)."""
        if self.done:
            return ()
        if len(self._inits) < len(self.nbrs):
            return tuple(j for j in self.nbrs if j not in self._inits)
        if self.spec.asynchronous:
            i, t = self.ctx.node_id, self.round
            return tuple(j for k, j in enumerate(self.nbrs) if self._received[k] + (i < j) <= t)
        box = self._round_msgs.get(self.round, {})
        return tuple(j for j in self.nbrs if j not in box)

    def _finish(self, x: np.ndarray) -> None:
        self.done = True
        self.converged = self.rule.converged
        self.result = x
        self.rounds = self.round

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
        ``0 <= g < round`` (g grows by at most one per round; with a schedule
        ``g <= round - 1 - end``, as no node settles before the schedule's end) and ``stop_at`` either never or
        in ``[round, round - 1 + D]`` (a sender past its stop round has stopped; a stop round
        is fixed at most D rounds ahead).  In synchronous mode the counter must also follow
        from the counters it is a minimum of: g_j(t-1) = 1 + min(g_j(t-2), min over j's
        neighbours of g(t-2)) when settled, so ``g_j(t-1) <= 1 + min(g_j(t-2), g_i(t-2))`` for
        this node i (a member cannot inflate its counter, on which the others' stop
        proposals rest).  Asynchronous mode: meta ``(g, stop flag)``, flag 0 or 1.  Both kinds
        carry a finite float64 vector of this node's input length.
        """
        def bad(check: str, detail: str) -> ProtocolViolation:
            return ProtocolViolation(msg.sender, msg.iteration, msg.round, check, f"{msg.kind} message: {detail}")

        j, t = msg.sender, msg.round
        if j not in self.index:
            raise bad("sender", "the sender is not a neighbour")
        if msg.kind == "dual-init":
            if t != 0 or msg.receivers != (self.ctx.node_id,) or msg.meta != () or msg.encrypted != self.spec.encrypt_duals:
                raise bad("header", f"round {t}, receivers {msg.receivers}, meta {msg.meta}, encrypted {msg.encrypted}")
            check_vector(msg, self.s.shape[0])
            limit = DUAL_SIGMAS * self.spec.perturbation_std
            if not np.abs(msg.payload).max(initial=0.0) <= limit:
                raise bad("range", f"initial dual beyond {DUAL_SIGMAS} times perturbation_std ({limit:g}): no normal draw gets there")
            return
        elif msg.kind == "primal":
            if not 1 <= t <= self.spec.max_iter or msg.encrypted or tuple(msg.receivers) != self.ctx.topology.neighbours[j]:
                raise bad("header", f"round {t} (1..{self.spec.max_iter}), receivers {msg.receivers}, encrypted {msg.encrypted}")
            if len(msg.meta) != 2:
                raise bad("meta", f"{len(msg.meta)} meta fields, expected 2 (g, stop round)")
            g, stop_at = msg.meta
            if self.spec.asynchronous:
                if not 0 <= g <= t - 1 or stop_at not in (0, 1):
                    raise bad("meta", f"settled counter {g} outside 0..{t - 1} or stop flag {stop_at} not 0 or 1")
            elif self.prm.fixed_stop is not None:
                if t > self.prm.fixed_stop or (g, stop_at) != (0, NEVER):
                    raise bad("meta", f"round {t}, settled counter {g}, stop round {stop_at}: with the public stop round "
                                      f"{self.prm.fixed_stop} a node sends rounds up to it, counter 0 and no stop round")
            else:
                # g rides one round late and counts settled rounds, which start after settle_after
                g_max = max(0, t - 1 - self.prm.settle_after) if self.prm.schedule is not None else t - 1
                if not 0 <= g <= g_max:
                    raise bad("meta", f"settled counter {g} outside 0..{g_max}")
                if stop_at != NEVER and not t <= stop_at <= t - 1 + self.diam:
                    raise bad("meta", f"stop round {stop_at} outside {t}..{t - 1 + self.diam}")
                last = self._g_last.get(j)
                previous = 0 if t == 1 else last[1] if last is not None and last[0] == t - 1 else g
                own = self.g_hist[t - 2] if 2 <= t < len(self.g_hist) + 2 else 0 if t < 2 else previous
                if g > 1 + min(previous, own):
                    raise bad("meta", f"settled counter {g} exceeds 1 + min(its own {previous} and this node's {own} of round {t - 2})")
                self._g_last[j] = (t, g)
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
                self.u = neighbour_sum(self.z_own, self.sign_out)
                self.v = neighbour_sum(self.z_nb, self.sign_out)
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
        meta = (self.rule.g, self.rule.stop_at)
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
        nb_sum = neighbour_sum(np.stack([np.asarray(m.payload, dtype=float) for m in msgs]), self.prm.weights)
        g_nb = min(m.meta[0] for m in msgs)
        stop_nb = min(m.meta[1] for m in msgs)
        x = self.x
        if self.rule.advance(t, x, self.x_prev, nb_sum, self.prm.degree,
                             lambda g: min(g, g_nb), lambda stop_at: min(stop_at, stop_nb)):
            self._finish(x)
            return []
        self.g_hist.append(self.rule.g)
        _, two_c, two_cd, w = self.prm.at(t)
        self.u, self.v = sums_update(self.u, self.v, x, nb_sum, two_c, two_cd, self.spec.theta, w)
        self.x_prev = x
        return self._broadcast_next()

    # -- accountable stops (synchronous mode) -------------------------------------------------

    def proposal(self) -> tuple[int, int] | None:
        """This node's own stop proposal ``(t, t + e_i)``, once (see ``StopRule.proposed``)."""
        if self._announced or self.spec.asynchronous or self.rule.proposed is None:
            return None
        self._announced = True
        return self.rule.proposed

    def claimed_stop(self, msg: Message) -> int | None:
        """The stop round of a synchronous primal (None while it announces none)."""
        if self.spec.asynchronous or msg.kind != "primal" or len(msg.meta) != 2 or msg.meta[1] == NEVER:
            return None
        return int(msg.meta[1])

    def check_proposal(self, origin: int, proposed_at: int, stop: int) -> tuple[str, str] | None:
        """Node ``origin``'s proposal against the public facts and this node's counters.

        Form: the stop round is ``proposed_at + e_origin`` (its public eccentricity bound),
        and ``proposed_at`` leaves room for e_origin + 1 settled rounds after the schedule's
        special ones.  Counters: a proposal means g_origin(proposed_at) >= e_origin + 1, and
        g drops by at most one per hop and round, so this node, at distance d, must have had
        g(proposed_at - d) >= e_origin + 1 - d, in a round it has completed.
        """
        if self.spec.asynchronous:
            return ("form", "asynchronous pdmm-sp makes no stop proposals")
        if self.prm.fixed_stop is not None:
            return ("form", f"the stop round is public ({self.prm.fixed_stop}): nobody proposes one")
        topo = self.ctx.topology
        if not 0 <= origin < topo.n_nodes:
            return ("form", f"node {origin} is not in this aggregation")
        e = int(topo.eccentricity[origin])
        if stop != proposed_at + e:
            return ("form", f"stop round {stop} is not the proposal round {proposed_at} plus node {origin}'s eccentricity {e}")
        if not self.prm.settle_after + e + 1 <= proposed_at <= self.spec.max_iter:
            return ("form", f"no node settles {e + 1} rounds by round {proposed_at} (rounds up to {self.prm.settle_after} never count)")
        d = topo.distances(origin)[self.ctx.node_id]
        need, r = e + 1 - d, proposed_at - d
        completed = len(self.g_hist) - 1
        if r > completed:
            return ("counters", f"it needs this node (at distance {d}) to have completed round {r}, but it has completed {completed}")
        if self.g_hist[r] < need:
            return ("counters", f"it needs this node's settled counter in round {r} to be at least {need} (distance {d}), it was {self.g_hist[r]}")
        return None

    # -- asynchronous -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return len(self._inits) == len(self.nbrs) and not self.done

    def wake(self) -> list[Message]:
        if not self.ready:
            return []
        self.round += 1
        x = self._primal()
        stop = self.rule.advance_async(self.round, x, self.x, self._x_nb, self._g_nb, self._stop_nb)
        self.x = x
        self.z_nb = dual_update(self.z_nb, self.z_own, self.coef_out, x, self.spec.theta)
        out = [self._msg(self.round, (self.rule.g, int(stop)))]
        if stop:
            self._finish(x)
        return out

    def may_wake(self) -> bool:
        """Whether a deployment may wake this node now: it holds the token of every edge.

        Asynchronous PDMM updates both ends of an edge's duals from one broadcast, so two
        neighbours must never wake while each other's broadcast is in flight (the simulator
        delivers every broadcast before the next wake).  A deployment orders them by
        scheduling by edge reversal (Barbosa & Gafni, 1989): the token of edge {i, j} starts
        at the smaller id, a node wakes only when it holds all of its tokens, and its broadcast
        hands each of them to the neighbour.  The holders' orientation stays acyclic, so some
        node can always wake, every node wakes again after each of its neighbours, and every
        wake sees its neighbours' latest broadcasts.  Node i holds the token of edge {i, j}
        when the primals it received from j, plus one if it started with it, exceed its own
        wakes.
        """
        if not self.ready:
            return False
        i, t = self.ctx.node_id, self.round
        return all(self._received[k] + (i < j) > t for k, j in enumerate(self.nbrs))

    def _receive_async(self, k: int, msg: Message) -> list[Message]:
        if msg.sender not in self._inits:
            raise ProtocolError(f"pdmm-sp: primal from node {msg.sender} before its dual-init")
        self._received[k] += 1
        if self.done:
            return []
        x_j = np.asarray(msg.payload)
        self._x_nb[k] = x_j
        self._g_nb[k] = msg.meta[0]
        self._stop_nb = self._stop_nb or bool(msg.meta[1])
        self.z_own[k] = dual_update(self.z_own[k], self.z_nb[k], self.coef_in[k], x_j, self.spec.theta)
        return []
