"""``pdmm-sp``'s user-facing spec: its parameters, their validation and what "auto" resolves to."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Union

from p2pem.errors import ConfigError, GraphError
from p2pem.protocols.base import AggregateOutcome, Aggregation, NodeContext, ProtocolSpec, Topology
import p2pem.protocols.pdmm.engine as engine
from p2pem.protocols.pdmm.node import PdmmNode
from p2pem.protocols.pdmm.schedules import Schedule
from p2pem.protocols.pdmm.steps import (
    DEFLATE_NODES,
    POLYNOMIAL_NODES,
    auto_c,
    deflation_schedule,
    fixed_stop,
    heavy_ball_params,
    polynomial_schedule,
    polynomial_target,
    stops_publicly,
)

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True)
class PdmmSP(ProtocolSpec):
    """``pdmm-sp``: PDMM average consensus with subspace perturbation.

    How it works (the updates, the perturbation subspace, the acceleration schedules, the
    stopping rule) is written once, in the documentation's page *How pdmm-sp works*
    (``docs/explanations/pdmm.md``); what it protects against whom, in *What each protocol
    protects* (``docs/explanations/privacy.md``).

    Parameters
    ----------
    mode : {"sync", "async"}
        Synchronous rounds, or one uniformly random node wakes per tick.
    c : float or "auto"
        Step size.  Plain PDMM: the penalty c of every edge, "auto" = ``auto_c``.
        Heavy ball: the scale of the edge weights c_ij = c / max(d_i, d_j), "auto" =
        ``heavy_ball_params``.
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
    accel : {"auto", "polynomial", "deflated", "heavy-ball", "none"}
        "heavy-ball": the accelerated iteration of ``updates`` (sync, theta = 1 only);
        "polynomial": a polynomial in the Laplacian fitted to its public spectrum, then
        heavy ball (``steps.polynomial_schedule``; c and momentum "auto"); "deflated":
        heavy ball with the three lowest Laplacian modes removed (``steps.deflation_schedule``;
        c and momentum "auto"); "none": plain PDMM; "auto" (default): the polynomial where it
        is predicted to need fewer rounds than heavy ball (with c and momentum "auto"), else
        heavy ball where it applies, else plain.
    momentum : float or "auto"
        Heavy ball's beta in [0, 1); "auto" from the graph (``heavy_ball_params``).
    device : {"cpu", "cuda", "array-api-strict"}
        Where the vectorised engine runs: "cpu" (NumPy/SciPy; bit-identical to the
        message-level engine), "cuda" (CuPy, float64, needs ``p2pem[gpu]``; agrees with the
        CPU to about 1e-12 relative, summation order differs), "array-api-strict" (a test
        device: the portable code path on the strict reference namespace).  The
        message-level engine and deployments always run on the CPU.
    threads : int or "auto"
        Threads of the vectorised engine's rounds on the CPU: each round's sparse product
        and updates run over that many contiguous blocks of nodes at once, with the same
        bits as one thread.  1 (default): on this project's shared 2-core machine a second
        thread gave no measured gain at 10^5 nodes (``sim/bench_rounds.py``, 2026-11-28: 0.73
        times one thread's speed in wall time at a load average of 7-13; with the nodes in a
        locality order one thread's round is already within 1.4 times a streaming copy), and
        the gain is only real where a core is idle.  "auto": one thread per 250 000 directed
        edges, up to the cores this process may use (1 below about 18 000 nodes of a default
        geometric graph); other devices run one.
    stop : {"auto", "adaptive"}
        "auto" (default): where the Leja polynomial runs (3 to 100 000 nodes) and is known to
        be below its target on the whole public spectrum (``steps.fixed_stop``), every node
        stops at its public round, one after the polynomial's last root; elsewhere, and with
        "adaptive", the nodes' settled counters decide (``stopping``).
    """

    mode: Literal["sync", "async"] = "sync"
    c: Union[float, str] = "auto"
    theta: float = 1.0
    perturbation_std: float = 100.0
    tol: Union[float, None] = None
    max_iter: int = 5000
    encrypt_duals: bool = True
    accel: Literal["auto", "polynomial", "deflated", "heavy-ball", "none"] = "auto"
    momentum: Union[float, str] = "auto"
    device: Literal["cpu", "cuda", "array-api-strict"] = "cpu"
    stop: Literal["auto", "adaptive"] = "auto"
    threads: Union[int, str] = 1
    name: str = field(init=False, default="pdmm-sp")
    exact: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.mode not in ("sync", "async"):
            raise ConfigError(f"pdmm-sp: mode must be 'sync' or 'async', got {self.mode!r}")
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
        if self.accel not in ("auto", "polynomial", "deflated", "heavy-ball", "none"):
            raise ConfigError(f"pdmm-sp: accel must be 'auto', 'polynomial', 'deflated', 'heavy-ball' or 'none', got {self.accel!r}")
        if self.accel in ("heavy-ball", "polynomial", "deflated") and (self.asynchronous or self.theta != 1.0):
            raise ConfigError(f"pdmm-sp: accel = {self.accel!r} needs mode = 'sync' and theta = 1 (use accel = 'none')")
        if self.accel in ("polynomial", "deflated") and (self.c != "auto" or self.momentum != "auto"):
            raise ConfigError(f"pdmm-sp: accel = {self.accel!r} takes its steps from the graph: leave c and momentum 'auto'")
        if isinstance(self.momentum, str):
            if self.momentum != "auto":
                raise ConfigError(f"pdmm-sp: momentum must be a number in [0, 1) or 'auto', got {self.momentum!r}")
        elif not (_is_number(self.momentum) and 0 <= self.momentum < 1):
            raise ConfigError(f"pdmm-sp: momentum must be a number in [0, 1) or 'auto', got {self.momentum!r}")
        if self.device not in ("cpu", "cuda", "array-api-strict"):
            raise ConfigError(f"pdmm-sp: device must be 'cpu', 'cuda' or 'array-api-strict', got {self.device!r}")
        if self.stop not in ("auto", "adaptive"):
            raise ConfigError(f"pdmm-sp: stop must be 'auto' or 'adaptive', got {self.stop!r}")
        if isinstance(self.threads, str):
            if self.threads != "auto":
                raise ConfigError(f"pdmm-sp: threads must be a positive integer or 'auto', got {self.threads!r}")
        elif not (isinstance(self.threads, int) and not isinstance(self.threads, bool) and self.threads >= 1):
            raise ConfigError(f"pdmm-sp: threads must be a positive integer or 'auto', got {self.threads!r}")
        elif self.threads > 1 and self.device != "cpu":
            raise ConfigError(f"pdmm-sp: threads = {self.threads} splits rounds on the CPU; with device = {self.device!r} leave it 1 or 'auto'")

    @property
    def asynchronous(self) -> bool:
        """Whether nodes run on wake-ups instead of rounds (``mode = "async"``)."""
        return self.mode == "async"

    @property
    def accelerated(self) -> bool:
        """Whether heavy ball (with a schedule or not) runs (``accel`` resolved)."""
        return self.accel in ("heavy-ball", "polynomial", "deflated") or (
            self.accel == "auto" and not self.asynchronous and self.theta == 1.0)

    def iteration(self, topology: Topology) -> str:
        """What runs on ``topology``: "polynomial", "deflated", "heavy-ball" or "none" (``accel`` resolved).

        "auto" runs the polynomial where ``steps.polynomial_schedule`` finds one that needs
        fewer rounds than heavy ball (3 to 20 000 nodes, c and momentum "auto").
        """
        if not self.accelerated:
            return "none"
        if self.accel == "deflated":
            if topology.n_nodes < DEFLATE_NODES[0]:
                raise ConfigError(f"pdmm-sp: accel = 'deflated' needs at least {DEFLATE_NODES[0]} nodes")
            return "deflated"
        if self.accel == "polynomial":
            if self._polynomial(topology) is None:
                raise ConfigError(f"pdmm-sp: accel = 'polynomial' runs on {POLYNOMIAL_NODES[0]} to {POLYNOMIAL_NODES[1]} "
                                  f"nodes where it needs fewer rounds than heavy ball; this graph has {topology.n_nodes}: "
                                  "use accel = 'auto'")
            return "polynomial"
        if (self.accel == "auto" and self.c == "auto" and self.momentum == "auto"
                and self._polynomial(topology) is not None):
            return "polynomial"
        return "heavy-ball"

    def schedule(self, topology: Topology) -> Schedule | None:
        """The per-round schedule that runs on ``topology`` (None: constant coefficients)."""
        kind = self.iteration(topology)
        if kind == "polynomial":
            return self._polynomial(topology)
        return deflation_schedule(topology) if kind == "deflated" else None

    def _polynomial(self, topology: Topology) -> Schedule | None:
        # the polynomial of a public stop round reduces the error further (steps.fixed_stop)
        return polynomial_schedule(topology, polynomial_target(self.stop_tol, stops_publicly(self)))

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

    @property
    def message_kinds(self) -> frozenset[str]:
        return frozenset({"dual-init", "primal"})

    @property
    def secret_kinds(self) -> frozenset[str]:
        """The initial duals: an observer who knew z_{i|j}(0) could undo the subspace perturbation."""
        return frozenset({"dual-init"})

    @property
    def agreement_rtol(self) -> float:
        """A hundred times the stopping tolerance (1e-8 in sync mode by default): the spread of
        honest nodes' final models stays far below (about 1e-12 relative at the default)."""
        return 100.0 * self.stop_tol if self.stop_tol > 0 else 1e-8

    @property
    def max_ahead(self) -> int:
        """One: a neighbour's dual-init.  Its first primal of an aggregation (in both modes) needs
        every neighbour's dual-init, this node's included, which this node sends when it begins."""
        return 1

    def validate(self, g: nx.Graph | Topology) -> None:
        from p2pem.graphs import require_cycle  # lazily: p2pem.graphs imports networkx, which a node process never needs

        if not isinstance(g, Topology):
            require_cycle(g)
        elif g.dst.size // 2 < g.n_nodes:  # connected by construction; a tree has n - 1 edges
            raise GraphError("the topology has no cycle (it is a tree): pdmm-sp would hide nothing; add edges or use secure-sum")

    def step_size(self, topology: Topology) -> float:
        """Plain PDMM's c (see ``step_parameters`` for the heavy-ball pair)."""
        return auto_c(topology) if self.c == "auto" else float(self.c)

    def step_parameters(self, topology: Topology) -> tuple[float, float]:
        """Heavy ball's (c, beta): from the graph where "auto", else as given."""
        if self.c != "auto" and self.momentum != "auto":
            return float(self.c), float(self.momentum)
        c, beta = heavy_ball_params(topology)
        return (c if self.c == "auto" else float(self.c)), (beta if self.momentum == "auto" else float(self.momentum))

    def public_parameters(self, topology: Topology) -> tuple[float, ...]:
        """Plain PDMM's c; heavy ball's (c, beta); a schedule's first special round and N_t, c_t, K_t."""
        if not self.accelerated:
            return (self.step_size(topology),)
        sched = self.schedule(topology)
        if sched is not None:
            return (float(sched.deflate_at), *sched.denom, *sched.scale, *sched.local)
        return self.step_parameters(topology)

    def resolved_params(self, topology: Topology) -> dict:
        """The iteration that ran (``accel``: "polynomial", "deflated", "heavy-ball" or "none")
        and its step size ``c`` and ``momentum`` (heavy ball's beta; with a schedule those of
        the rounds after its special ones, ``special_rounds``, how many there are, and
        ``stop_round``, the public round every node stops at, or None; for
        deflation also ``deflate_at``, the round of the first deflation step)."""
        kind = self.iteration(topology)
        if kind == "none":
            return {"accel": "none", "c": self.step_size(topology), "momentum": None}
        sched = self.schedule(topology)
        if sched is None:
            c, beta = self.step_parameters(topology)
            return {"accel": "heavy-ball", "c": c, "momentum": beta}
        out = {"accel": kind, "c": sched.scale[-1], "momentum": sched.beta, "special_rounds": sched.end,
               "stop_round": fixed_stop(self, sched)}
        return out | ({"deflate_at": sched.deflate_at} if kind == "deflated" else {})

    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        return PdmmNode(self, ctx, iteration)

    def aggregate(self, values, topology, rngs, iteration, *, record=False) -> AggregateOutcome:
        """All nodes at once on ``device`` (``p2pem.protocols.pdmm.engine.aggregate``): bit for
        bit the message-level nodes on the CPU."""
        return engine.aggregate(self, values, topology, rngs, iteration, record=record)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
