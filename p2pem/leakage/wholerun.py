"""Whole-run views: what an adversary holds after a complete EM run, reduced exactly.

A real run performs one aggregation for the private initialisation and one per EM iteration
(plus the last, which only delivers the final log-likelihood), each over the whole statistics
vector (a_k, b_k, C_k, log-likelihood, continue flag; see :mod:`p2pem.gmm`), with fresh
protocol randomness each time; every node also knows every intermediate model.
:func:`record_whole_run` runs EM exactly as :func:`p2pem.simulate.run_protocol` does with the
vectorised engine (the same :class:`~p2pem.em.EMState`, the same ``aggregate`` calls, the same
per-node streams, so the same bits), records the message trace of each aggregation, and
reduces it at once, for each adversary, to what that adversary can compute from the messages
it observes (:func:`disclosed_sums`); only the reduction is kept, so a run of 10^6 messages
needs no more memory than one aggregation.

The reduction is exact linear algebra on the observed messages, per protocol:

``pdmm-sp``
    With x_i(t) the broadcast of round t and z^(t) the duals after t updates, every node
    satisfies s_i = (1 + c d_i) x_i(t) + sum_j B_{i|j} z_{i|j}^(t-1) (eq. (10) of Li et al.
    2022).  (Heavy ball, the default: N x_i(t) instead of (1 + c d_i) x_i(t), step 2 c_ij per
    edge instead of 2c, and a node-local accumulator a_i with a_i(t) + a_i(t-1) = -w_i x_i(t),
    which adds w_i to the inner coefficient below; see :mod:`p2pem.protocols.pdmm`.)  Summed over an honest component H the duals of edges inside H pair up, and the
    dual update (eq. (11)) makes each pair obey y(t+1) = (1 - 2 theta) y(t) - 2 c theta
    (x_i(t) + x_j(t)); eliminating them between two rounds gives

        2 theta S_H = A(t+1) - (1 - 2 theta) A(t) - 2 c theta sum_{i in H} d_i^H x_i(t),
        A(t) = sum_{i in H} (1 + c d_i) x_i(t) + sum_{i in H, j not in H} B_{i|j} z_{i|j}^(t-1),

    with d_i^H the number of i's neighbours inside H.  The boundary duals are tracked by the
    corrupt node at the other end from the initial duals it sent and received and the
    broadcasts it sees (the update of :func:`p2pem.protocols.pdmm.dual_update`).  Broadcasts
    of honest nodes with no corrupt neighbour are not observed by honest-but-curious nodes;
    at the last two rounds they equal the consensus value up to the stopping tolerance, and
    the observed broadcasts' mean stands in for them (an eavesdropping adversary sees them
    all and the formula is exact in every round).
``secure-sum``
    The corrupt nodes around an arc of honest ring nodes subtract the ring value they passed
    on from the one they received (modular fixed point, exact); an arc across the initiator
    additionally adds the public total.
``federated``
    A corrupt server or an eavesdropper reads each upload; corrupt clients alone learn the
    total minus their own inputs.

The groups are those of :func:`p2pem.leakage.theory.disclosed_groups`.
:func:`disclosure_rank` checks, for graphs small enough, from the rank structure of the
recorded view of one aggregation (the linear map from inputs and initial duals to every
observed number), that these group sums are *all* the view determines and how much the next
most revealed direction leaks at the configured perturbation.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.em import EMSettings, EMState
from p2pem.errors import ConfigError, DataError
from p2pem.leakage.attack import Observation
from p2pem.leakage.montecarlo import monte_carlo, monte_carlo_spec
from p2pem.leakage.private import bind_for_whole_run
from p2pem.leakage.theory import disclosed_groups
from p2pem.leakage.views import Adversary, build_view
from p2pem.messages import Message
from p2pem.protocols import Centralized, Federated, PdmmSP, ProtocolSpec, SecureSum, Topology
from p2pem.protocols.exact import MODULUS, decode_fixed
from p2pem.protocols.pdmm import dual_update, step_params
from p2pem.streams import as_seed_sequence, protocol_streams
from p2pem.task import drive

__all__ = [
    "DisclosureRank",
    "WholeRunView",
    "disclosed_sums",
    "disclosure_rank",
    "record_whole_run",
]

FloatArray = npt.NDArray[np.float64]


@dataclass(eq=False)
class WholeRunView:
    """One adversary's view of a complete run, reduced to what it determines.

    Attributes
    ----------
    protocol : str
    adversary : Adversary
    groups : tuple of tuple of int
        Groups of honest nodes whose sums the view discloses (a group of one: that node's
        statistics themselves).
    rows : tuple of int
        Rows held by each group (disclosed: the count of the initialisation, or sum_k a_k).
    iterations : list of int
        Aggregation numbers: 0 is the initialisation (absent with a given ``init``), t >= 1
        the E-step statistics at the model of iteration t - 1.
    models : list of models or None
        The public model each aggregation's statistics were computed at (None for 0): the
        family's single parameters (GMMParams for the Gaussian family).
    sums : list of (n_groups, P_t) arrays
        Per aggregation, the group sums computed from the observed messages only.
    truth : list of (n_groups, P_t) arrays
        The same sums computed from the private inputs: **not** part of the view, kept to
        check the reduction.
    continue_flags : list of float
        Per aggregation t >= 1, how many nodes asked to continue (public: every node gets it).
    loglik : list of float
        The public mean log-likelihood per row after every M-step and at the end.
    final : model
        The public final model (the family's single parameters).
    messages_observed : list of int
        Messages the adversary observed in each aggregation.
    rounds : list of int
        Protocol rounds of each aggregation (public).
    observe : callable or None
        A private run's reading of a group's sums for the attack (noise and released
        coordinates, :meth:`p2pem.leakage.private.PrivateWholeRun.observer`); None: exact sums.
    data_bound : float or None
        A private run's public bound: the rows were clipped to [-bound, bound].
    """

    protocol: str
    adversary: Adversary
    groups: tuple[tuple[int, ...], ...]
    rows: tuple[int, ...] = ()
    iterations: list[int] = field(default_factory=list)
    models: list[Any] = field(default_factory=list)
    sums: list[FloatArray] = field(default_factory=list)
    truth: list[FloatArray] = field(default_factory=list)
    continue_flags: list[float] = field(default_factory=list)
    loglik: list[float] = field(default_factory=list)
    final: Any = None
    messages_observed: list[int] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    observe: Callable[..., Observation] | None = None
    data_bound: float | None = None

    def reduction_error(self) -> FloatArray:
        """(n_aggregations, n_groups): max |view sum - true sum| / max |true sum|."""
        out = np.empty((len(self.sums), len(self.groups)))
        for t, (s, ref) in enumerate(zip(self.sums, self.truth, strict=True)):
            scale = np.maximum(np.max(np.abs(ref), axis=1), np.finfo(float).tiny)
            out[t] = np.max(np.abs(s - ref), axis=1) / scale
        return out

    def observations(self, group_index: int, t_seen: int) -> list[Observation]:
        """What the attack reads about one group: its sums of aggregations 0..``t_seen``.

        The continue flag is dropped: it counts nodes, not rows.
        """
        if self.observe is not None:
            size = len(self.groups[group_index])
            return [
                self.observe(it, model, sums[group_index], size)
                for it, model, sums in zip(self.iterations, self.models, self.sums, strict=True)
                if it <= t_seen
            ]
        return [
            Observation(model, sums[group_index] if model is None else sums[group_index][:-1])
            for it, model, sums in zip(self.iterations, self.models, self.sums, strict=True)
            if it <= t_seen
        ]

    def group_of(self, node: int) -> int | None:
        """Index of the group holding ``node`` (None if the view discloses nothing about it)."""
        for g, members in enumerate(self.groups):
            if node in members:
                return g
        return None


# ------------------------------------------------------------------------- reductions


def _observed(trace: Sequence[Message], adversary: Adversary) -> list[Message]:
    """The messages ``adversary`` observes (memoised by link: a broadcast repeats every round)."""
    memo: dict[tuple[int, tuple[int, ...], bool], bool] = {}
    out = []
    for m in trace:
        key = (m.sender, m.receivers, m.encrypted)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = adversary.observes(m)
        if hit:
            out.append(m)
    return out


def disclosed_sums(
    spec: ProtocolSpec,
    topology: Topology,
    graph: nx.Graph,
    adversary: Adversary,
    trace: Sequence[Message],
    own_inputs: dict[int, FloatArray],
    *,
    observed: Sequence[Message] | None = None,
    pdmm_index: _PdmmTrace | None = None,
) -> tuple[tuple[tuple[int, ...], ...], FloatArray]:
    """The group sums of one aggregation, computed from the messages the adversary observes.

    Parameters
    ----------
    spec, topology, graph
        The protocol as run and its (public) topology.
    adversary : Adversary
    trace : sequence of Message
        The recorded trace of one aggregation; only the messages ``adversary`` observes are
        read.
    own_inputs : dict of int to (P,) array
        The corrupt nodes' own inputs (part of their view).
    observed : sequence of Message, optional
        The messages of ``trace`` the adversary observes, if already selected.
    pdmm_index : optional
        pdmm-sp only: the trace indexed once for several adversaries (``_pdmm_index``).

    Returns
    -------
    groups : tuple of tuple of int
        From :func:`p2pem.leakage.theory.disclosed_groups`.
    sums : (n_groups, P) array

    Raises
    ------
    DataError
        The observed messages do not determine a group's sum (a message the reduction needs
        is not observed): the trace does not match the protocol.
    ConfigError
        A protocol without a whole-run reduction (asynchronous pdmm-sp, centralized).
    """
    groups = disclosed_groups(spec, topology, graph, adversary)
    if groups is None or isinstance(spec, Centralized):
        raise ConfigError(f"{spec.name}: no whole-run reduction (use synchronous pdmm-sp, secure-sum or federated)")
    if isinstance(spec, PdmmSP):
        index = pdmm_index if pdmm_index is not None else _pdmm_index(trace, topology.n_nodes)
        return tuple(groups), _pdmm_sums(spec, topology, groups, index, adversary)
    seen = list(observed) if observed is not None else _observed(trace, adversary)
    if isinstance(spec, SecureSum):
        sums = _ring_sums(topology, groups, seen)
    elif isinstance(spec, Federated):
        sums = _federated_sums(topology, groups, seen, adversary, own_inputs)
    else:
        raise ConfigError(f"{spec.name}: no whole-run reduction")
    return tuple(groups), sums


@dataclass(frozen=True, eq=False)
class _PdmmTrace:
    """One pdmm-sp aggregation's trace, indexed: broadcasts by round and node, initial duals by edge.

    ``links`` keeps one message per link (sender, receivers) and how many messages used it:
    whether an adversary observes a link does not change between rounds, so it is asked
    once per link.
    """

    x: FloatArray  # (last + 1, n, P); row 0 unused
    z0: dict[tuple[int, int], FloatArray]
    links: dict[tuple[int, tuple[int, ...]], Message]
    counts: dict[tuple[int, tuple[int, ...]], int]

    @property
    def last(self) -> int:
        return self.x.shape[0] - 1

    def observed_count(self, adversary: Adversary) -> int:
        return sum(k for link, k in self.counts.items() if adversary.observes(self.links[link]))


def _pdmm_index(trace: Sequence[Message], n_nodes: int) -> _PdmmTrace:
    primal = [m for m in trace if m.kind == "primal"]
    if not primal:
        raise DataError("pdmm-sp: the trace holds no broadcast")
    last = max(m.round for m in primal)
    x = np.full((last + 1, n_nodes, np.asarray(primal[0].payload).shape[0]), np.nan)
    links: dict[tuple[int, tuple[int, ...]], Message] = {}
    counts: dict[tuple[int, tuple[int, ...]], int] = {}
    z0: dict[tuple[int, int], FloatArray] = {}
    for m in trace:
        if m.kind == "primal":
            x[m.round, m.sender] = m.payload
        elif m.kind == "dual-init":
            z0[(m.sender, m.receivers[0])] = np.asarray(m.payload, dtype=float)
        key = (m.sender, m.receivers)
        links.setdefault(key, m)
        counts[key] = counts.get(key, 0) + 1
    return _PdmmTrace(x, z0, links, counts)


def _pdmm_sums(spec: PdmmSP, topology: Topology, groups, index: _PdmmTrace, adversary: Adversary) -> FloatArray:
    theta = float(spec.theta)
    prm = step_params(spec, topology)
    n = topology.n_nodes
    nbrs = topology.neighbours
    seen_x = np.array([adversary.observes(index.links[(i, nbrs[i])]) for i in range(n)])
    if not seen_x.any():
        raise DataError("pdmm-sp: the adversary observed no broadcast")
    last = index.last
    if last < 2:
        raise DataError("pdmm-sp: the reduction needs the broadcasts of two rounds")
    x = index.x
    # an unobserved interior broadcast at the last two rounds is the consensus value up to
    # the stopping tolerance: the mean of the observed broadcasts stands in for it
    consensus = x[last - 1 :, seen_x].mean(axis=1)
    degree = topology.degrees.astype(float)
    row_start = topology.row_start

    def two_c(i: int, j: int, t: int) -> float:
        """2 c_ij of edge (i, j) in round t: 2c for plain PDMM, heavy ball's weighted step
        otherwise (scaled by the round's c_t on the deflated schedule)."""
        scale = prm.at(t)[1]
        return scale if prm.weights is None else scale * float(prm.weights[row_start[i] + nbrs[i].index(j)])

    out = []
    for group in groups:
        members = set(group)
        g = np.array(group)
        bnd = [(i, j) for i in group for j in nbrs[i] if j not in members]
        for e in bnd:
            for a, b in (e, e[::-1]):
                if not adversary.observes(index.links[(a, (b,))]):
                    raise DataError(f"pdmm-sp: the initial dual {a}->{b} is not observed, the sum of {list(group)} is not determined")
            if not (seen_x[e[0]] and seen_x[e[1]]):
                raise DataError(f"pdmm-sp: the broadcasts on edge {e[0]}-{e[1]} are not observed, the sum of {list(group)} is not determined")
        last_two = np.where(seen_x[g][None, :, None], x[last - 1 :, g], consensus[:, None, :])  # (2, |H|, P)
        # the primal's divisor in the last two rounds, and per node sum_{j in H} 2 c_ij (+ heavy
        # ball's local w_i) of the round between them
        def divisor(t: int, g=g):
            denom = prm.at(t)[0]
            if prm.weights is None:
                return 1.0 + prm.c * degree[g]
            return np.broadcast_to(np.asarray(denom, dtype=float).reshape(-1), (n,))[g]

        inner = np.array([sum(two_c(i, j, last - 1) for j in nbrs[i] if j in members) for i in group])
        w = prm.at(last - 1)[3]
        if w is not None:
            inner = inner + np.broadcast_to(np.asarray(w, dtype=float).reshape(-1), (n,))[g]
        a_prev = divisor(last - 1) @ last_two[0]
        a_last = divisor(last) @ last_two[1]
        if bnd:
            sign = np.array([1.0 if i < j else -1.0 for i, j in bnd])[:, None]
            unit = np.array([1.0 if prm.weights is None else float(prm.weights[row_start[i] + nbrs[i].index(j)]) for i, j in bnd])[:, None]
            steps = [prm.at(t)[1] * unit for t in range(1, last)]  # two_c(i, j, t) for every boundary edge
            z_prev, z_last = _boundary_duals(bnd, sign, steps, index, theta)
            a_prev = a_prev + np.sum(sign * z_prev, axis=0)
            a_last = a_last + np.sum(sign * z_last, axis=0)
        total = a_last - (1.0 - 2.0 * theta) * a_prev - theta * (inner @ last_two[0])
        out.append(total / (2.0 * theta))
    return np.array(out)


def _boundary_duals(bnd, sign, steps, index: _PdmmTrace, theta: float) -> tuple[FloatArray, FloatArray]:
    """z_{i|j}^(last-2) and z_{i|j}^(last-1) of the boundary edges (i in H, j outside).

    The node j at the other end replays the dual update of both directions of its edge from
    the initial duals and the two nodes' broadcasts (eq. (11) of Li et al. 2022, with heavy
    ball's step 2 c_ij per edge, of round t in ``steps[t - 1]``).
    """
    z_in = np.array([index.z0[e] for e in bnd])  # z_{i|j}
    z_out = np.array([index.z0[e[::-1]] for e in bnd])  # z_{j|i}
    ii = np.array([i for i, _ in bnd])
    jj = np.array([j for _, j in bnd])
    xi, xj = index.x[:, ii], index.x[:, jj]
    prev = z_in
    for t in range(1, index.last):
        prev = z_in
        coef_in, coef_out = steps[t - 1] * (-sign), steps[t - 1] * sign  # 2 c_ij B_{j|i}, 2 c_ij B_{i|j}
        z_in, z_out = dual_update(z_in, z_out, coef_in, xj[t], theta), dual_update(z_out, z_in, coef_out, xi[t], theta)
    return prev, z_in


def _ring_sums(topology: Topology, groups, seen: list[Message]) -> FloatArray:
    ring = topology.ring
    assert ring is not None  # secure-sum's topology carries its ring
    n = len(ring)
    pos = {v: k for k, v in enumerate(ring)}
    sent = {m.sender: m.payload for m in seen if m.kind == "ring"}
    results = [m.payload for m in seen if m.kind == "result"]
    if not results:
        raise DataError("secure-sum: the adversary observed no result")
    total = np.asarray(results[0], dtype=float) * n
    out = []
    for group in groups:
        members = set(group)
        if len(members) == n:  # no corrupt node: the output is all there is
            out.append(total)
            continue
        # the arc runs from the corrupt node before it to the corrupt node after it
        first = next(v for v in group if ring[(pos[v] - 1) % n] not in members)
        k = pos[first]
        arc = []
        while ring[k % n] in members:
            arc.append(ring[k % n])
            k += 1
        before, last = ring[(pos[first] - 1) % n], arc[-1]
        if before not in sent or last not in sent:
            raise DataError(f"secure-sum: the ring values around {sorted(arc)} are not observed")
        diff = decode_fixed([(b - a) % MODULUS for a, b in zip(sent[before], sent[last], strict=True)])
        # a value that passes the initiator (ring position 0) lost the total on the way
        out.append(diff + total if pos[first] > pos[last] or pos[first] == 0 else diff)
    return np.array(out)


def _federated_sums(topology: Topology, groups, seen: list[Message], adversary: Adversary, own_inputs) -> FloatArray:
    uploads = {m.sender: np.asarray(m.payload, dtype=float) for m in seen if m.kind == "upload"}
    out = []
    for group in groups:
        if all(i in uploads for i in group):
            out.append(sum(uploads[i] for i in group))
            continue
        results = [m.payload for m in seen if m.kind == "result"]
        if not results:
            raise DataError(f"federated: neither the uploads of {list(group)} nor the result are observed")
        total = np.asarray(results[0], dtype=float) * topology.n_nodes
        out.append(total - sum((own_inputs[c] for c in adversary.corrupt_nodes), np.zeros_like(total)))
    return np.array(out)


# ------------------------------------------------------------------------- the run


def record_whole_run(
    parts: Sequence[FloatArray],
    graph: nx.Graph,
    spec: ProtocolSpec,
    settings: EMSettings,
    adversaries: Sequence[Adversary],
    *,
    seed: int | np.random.SeedSequence,
    progress: Callable[[int, int], None] | None = None,
) -> list[WholeRunView]:
    """Run EM over ``graph`` with ``spec`` and reduce every aggregation's trace per adversary.

    Parameters
    ----------
    parts : list of (n_i, d) arrays
        Node i's private rows.
    graph : networkx.Graph
    spec : ProtocolSpec
        Synchronous ``pdmm-sp``, ``secure-sum`` or ``federated``, or a private protocol
        (``dp-distributed`` over one of the first two, ``dp-central``: see
        :mod:`p2pem.leakage.private`).
    settings : EMSettings
    adversaries : sequence of Adversary
    seed : int or SeedSequence
        The protocol seed, as for :func:`p2pem.simulate.run_protocol` (same streams, same run).
    progress : callable(iteration, max_iter), optional

    Returns
    -------
    list of WholeRunView
        One per adversary, in order.

    Raises
    ------
    ConfigError
        A protocol without a reduction (centralized, asynchronous pdmm-sp).

    Notes
    -----
    The loop is the vectorised engine's (:func:`p2pem.simulate.run_protocol`): each
    aggregation runs with ``record=True``, its trace is reduced by :func:`disclosed_sums` for
    every adversary and dropped.  The public models are those of the adversary's first corrupt
    node (node 0 for an eavesdropper); nodes' models differ by consensus error only.
    """
    if isinstance(spec, Centralized) or getattr(spec, "asynchronous", False):
        raise ConfigError(f"{spec.name}: the whole-run analysis needs a synchronous network protocol")
    spec.validate(graph)
    spec, settings, parts, private = bind_for_whole_run(spec, settings, parts, seed=seed)
    topology = spec.topology(graph)
    if private is not None:  # the shares as the run sizes them for its colluders' worst placement
        placed = private.spec.placed(topology)
        spec, private = placed, dataclasses.replace(private, spec=placed)
    reduced = private.reduction if private is not None else spec  # whose trace the reduction reads
    n = len(parts)
    rngs = protocol_streams(seed, n)
    state = EMState([np.ascontiguousarray(p, dtype=float) for p in parts], settings, n)
    label = getattr(spec, "label", spec.name)
    views = [
        WholeRunView(label, adv, (), observe=None if private is None else private.observer(adv), data_bound=None if private is None else private.bound)
        for adv in adversaries
    ]
    refs = [adv.corrupt_nodes[0] if adv.corrupt_nodes else 0 for adv in adversaries]
    models: list[Any] = []

    def public_models(it: int, values: FloatArray) -> None:
        """The models every node holds while computing aggregation ``it``'s statistics."""
        models[:] = [None if it == 0 else _copy_params(state.params(r)) for r in refs]

    def aggregate(it: int, values: FloatArray) -> FloatArray:
        """The vectorised engine's aggregation, its trace reduced per adversary and dropped."""
        if private is not None:  # what the protocol sums: values plus noise shares (dp-distributed)
            inputs, outcome = private.aggregate(values, topology, rngs, it)
        else:
            inputs, outcome = values, spec.aggregate(values, topology, rngs, it, record=True)
        trace = outcome.trace or []
        index = _pdmm_index(trace, n) if isinstance(reduced, PdmmSP) else None
        for view, adv, model in zip(views, adversaries, models, strict=True):
            own = {c: inputs[c] for c in adv.corrupt_nodes}
            seen = None if index is not None else _observed(trace, adv)
            groups, sums = disclosed_sums(reduced, topology, graph, adv, trace, own, observed=seen, pdmm_index=index)
            view.groups = groups
            view.iterations.append(it)
            view.models.append(model)
            view.sums.append(sums)
            view.truth.append(private.truth(inputs, outcome, groups, adv) if private is not None else np.array([inputs[list(g)].sum(axis=0) for g in groups]))
            view.messages_observed.append(len(seen) if seen is not None else index.observed_count(adv) if index is not None else 0)
            view.rounds.append(int(outcome.rounds))
            if it > 0:
                view.continue_flags.append(float(np.asarray(outcome.results)[refs[0], -1] * n))
        return outcome.results

    def report(it: int, values: FloatArray, averages: FloatArray) -> None:
        if progress is not None and it > 0:
            progress(it, settings.max_iter)

    drive(state, aggregate, before=public_models, after=report)
    for view, r in zip(views, refs, strict=True):
        view.loglik = state.node_loglik(r)
        view.final = _copy_params(state.params(r))
        view.rows = tuple(int(sum(len(parts[i]) for i in g)) for g in view.groups)
    return views


def _copy_params(p: Any) -> Any:
    """A copy of one node's model (any family's single parameters), independent of the run's arrays."""
    return copy.deepcopy(p)


# ------------------------------------------------------------------------- rank structure


@dataclass(frozen=True)
class DisclosureRank:
    """What the rank structure of one aggregation's view says about the honest inputs.

    Attributes
    ----------
    cosines : tuple of float
        Cosines of the principal angles between the honest inputs and the part of the
        (standardised) latent space the view determines, largest first; 1 is a functional
        of the inputs the view determines exactly.
    disclosed : int
        Cosines within ``tol`` of 1.
    matches_groups : bool
        Those exactly disclosed directions span exactly the indicator vectors of the groups.
    next_bits : float
        Gaussian mutual information (bits, unit-variance inputs) of the most revealed
        direction beyond them: -1/2 log2(1 - cos^2) at the configured perturbation.
    """

    cosines: tuple[float, ...]
    disclosed: int
    matches_groups: bool
    next_bits: float

    def to_json(self) -> dict:
        return {
            "cosines": list(self.cosines),
            "disclosed_directions": self.disclosed,
            "matches_groups": self.matches_groups,
            "next_direction_bits": self.next_bits,
        }


def disclosure_rank(
    spec: ProtocolSpec,
    graph: nx.Graph,
    adversary: Adversary,
    *,
    rounds: int,
    seed: int | np.random.SeedSequence,
    tol: float = 1e-6,
) -> DisclosureRank:
    """Check from the view's rank structure which functionals of the honest inputs it determines.

    Parameters
    ----------
    spec : ProtocolSpec
    graph : networkx.Graph
    adversary : Adversary
    rounds : int
        pdmm-sp rounds (as many as the run's aggregations took).
    seed : int or SeedSequence
        Protocol and probe randomness.
    tol : float
        A cosine above 1 - ``tol`` counts as exact disclosure.

    Returns
    -------
    DisclosureRank

    Notes
    -----
    The protocol is linear in the inputs and its Gaussian randomness, and acts on every
    payload coordinate alike, so one aggregation over L + 40 random coordinates (L latents:
    inputs and initial duals) recorded by :func:`p2pem.leakage.montecarlo.monte_carlo` gives
    the whole linear map W from standardised latents to the view of
    :func:`p2pem.leakage.views.build_view` (least squares, exact up to rounding).  The view
    determines U^T z with U an orthonormal basis of range(W); the singular values of U's
    honest-input rows are the cosines.  Cost: O((L + 40) L f) for f view features; meant for
    graphs of a few dozen nodes.
    """
    n = graph.number_of_nodes()
    mc_spec = monte_carlo_spec(spec, rounds)
    n_latents = n + (2 * graph.number_of_edges() if isinstance(spec, PdmmSP) else 0)
    probe, proto = as_seed_sequence(seed).spawn(2)
    inputs = np.random.default_rng(probe).standard_normal((n, n_latents + 40))
    mc = monte_carlo(mc_spec, graph, inputs, input_sd=1.0, seed=proto)
    view = build_view(mc.trace, adversary, inputs=mc.inputs, outputs=np.asarray(mc.outcome.results))
    z = mc.latents / mc.latent_sd
    v = view.features
    w, *_ = np.linalg.lstsq(z, v, rcond=None)
    scale = np.maximum(np.abs(v).max(axis=0), np.finfo(float).tiny)
    if float(np.max(np.abs(v - z @ w) / scale)) > 1e-6:
        raise DataError(f"{spec.name}: the view is not linear in the inputs and duals; no rank structure")
    u, s, _ = np.linalg.svd(w, full_matrices=False)
    basis = u[:, : int(np.sum(s > 1e-12 * s[0]))] if s.size and s[0] > 0 else u[:, :0]
    honest = [i for i in range(n) if i not in adversary.corrupt]
    left, cos, _ = np.linalg.svd(basis[honest], full_matrices=False)
    cos = np.clip(cos, 0.0, 1.0)
    exact = int(np.sum(cos > 1.0 - tol))
    groups = disclosed_groups(spec, mc.topology, graph, adversary) or []
    ind = np.array([[1.0 if i in g else 0.0 for i in honest] for g in groups]).reshape(len(groups), len(honest))
    span = left[:, :exact]
    matches = exact == len(groups) and bool(np.allclose(span @ (span.T @ ind.T), ind.T, atol=1e-6 * max(1, len(honest))))
    rest = cos[exact:]
    nxt = max(0.0, float(-0.5 * math.log2(1.0 - rest[0] ** 2))) if rest.size and rest[0] < 1 else 0.0
    return DisclosureRank(tuple(float(c) for c in cos), exact, matches, nxt)
