"""Deciding a leakage analysis before it runs: protocols and skips, inputs, targets, run time.

:func:`plan_analysis` does everything that is cheap and can fail on bad input (reading the
scenario's data, validating every protocol on the graph, choosing the targets) and predicts
the cost of the rest, so the command can say what it will do, and for how long, before any
estimate is computed:

* :func:`prepare_protocols` -- the protocols the Monte Carlo can run, labelled and with what
  they disclose by design; :func:`skipped_protocols` -- the others, each with its reason;
* :func:`p2pem.leakage.inputs.draw_inputs` -- what every node aggregates in every run;
* :func:`default_targets` -- without ``targets``, every honest node up to
  :data:`~p2pem.leakage.config.DEFAULT_MAX_TARGETS` of them, else the most exposed ones and
  the one farthest from the corrupt nodes;
* :func:`estimate_run_time` -- the estimates and views to compute, timed on a probe.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import numpy as np

from p2pem.dp.protocols import DPProtocol
from p2pem.errors import ConfigError, P2pemError
from p2pem.leakage.config import DEFAULT_MAX_TARGETS, LeakageConfig, parse_leakage
from p2pem.leakage.inputs import Inputs, draw_inputs
from p2pem.leakage.measure import Estimator, single_threaded_blas
from p2pem.leakage.montecarlo import analysed_schedule, make_adversary, monte_carlo
from p2pem.leakage.reduce import estimate_reduction, exact_linear_mi, principal_components
from p2pem.leakage.report import ProtocolRun, RunTimeEstimate, Skipped, run_labels
from p2pem.leakage.theory import disclosed_groups, disclosure_messages
from p2pem.leakage.views import build_view
from p2pem.messages import SERVER
from p2pem.protocols import Centralized, PdmmSP, ProtocolSpec
from p2pem.runner import build_graph, protocols
from p2pem.scenario import Scenario

__all__ = [
    "LeakagePlan",
    "default_targets",
    "estimate_run_time",
    "plan_analysis",
    "prepare_protocols",
    "skip_reason",
    "skipped_protocols",
]


def skip_reason(spec: ProtocolSpec) -> str | None:
    """Why the leakage Monte Carlo cannot run ``spec`` (None: it can)."""
    if isinstance(spec, Centralized):
        return "it pools every node's rows at one place: the reference fit, no network protocol to leak from"
    if isinstance(spec, DPProtocol):
        return ("its guarantee is its epsilon over the whole run (its result.json states it); this Monte Carlo measures one "
                "noiseless aggregation: analyse its aggregation protocol (secure-sum or pdmm-sp) instead")
    if spec.asynchronous:
        return "asynchronous mode has no batch path for the Monte Carlo; add the same protocol with mode = 'sync' to analyse it"
    return None


def skipped_protocols(scenario: Scenario) -> list[Skipped]:
    """The scenario's protocols the analysis skips, in file order, each with its reason."""
    out = []
    for spec in protocols(scenario):
        reason = skip_reason(spec)
        if reason is not None:
            out.append(Skipped(getattr(spec, "label", spec.name), spec.name, reason))
    return out


def prepare_protocols(scenario: Scenario, cfg: LeakageConfig, graph: nx.Graph, *, scale: float | None = None) -> list[ProtocolRun]:
    """The scenario's protocols the analysis runs, labelled, validated and with their disclosures.

    Parameters
    ----------
    scale : float, optional
        The statistic's standard deviation, the unit of ``perturbation = "relative"``
        (default 1/K, that of the ``"gaussian"`` inputs).

    Raises
    ------
    ConfigError
        No protocol left to analyse (the message names each skipped one and why), or a
        protocol that cannot run here; the message starts with the protocol's label (e.g.
        ``"secure-sum: the graph has no Hamiltonian cycle"``).
    """
    every = protocols(scenario)
    specs = [s for s in every if skip_reason(s) is None]
    if not specs:
        why = "; ".join(f"{s.label} {s.reason}" for s in skipped_protocols(scenario))
        raise ConfigError(f"{scenario.path}: no network protocol to analyse ({why})")
    if cfg.perturbation == "relative":
        unit = 1.0 / scenario.em.n_components if scale is None else scale
        specs = [dataclasses.replace(s, perturbation_std=s.perturbation_std * unit) if isinstance(s, PdmmSP) else s for s in specs]
    out = []
    for spec, label in zip(specs, run_labels(specs), strict=True):
        try:
            analysed = analysed_schedule(spec, graph, cfg.rounds)
            run_spec = analysed.spec
            run_spec.validate(graph)
            topology = run_spec.topology(graph)
        except P2pemError as exc:
            raise type(exc)(f"{label}: {exc}") from None
        has_server = spec.name == "federated"
        disclosures, arcs = {}, {}
        for kind in cfg.adversaries:
            adversary = make_adversary(kind, cfg, has_server=has_server)
            disclosures[kind] = disclosure_messages(run_spec, label, topology, graph, adversary, cfg.label)
            if topology.ring is not None:
                arcs[kind] = [list(g) for g in disclosed_groups(run_spec, topology, graph, adversary) or []]
        out.append(ProtocolRun(spec, label, topology, disclosures, arcs, analysed))
    # protocols without rounds are drawn along pdmm-sp's rounds (their one value at every round)
    longest = max((p.analysed.rounds for p in out if p.analysed.schedule is not None), default=None)
    if longest is not None:
        out = [p if p.analysed.schedule is not None else dataclasses.replace(p, analysed=dataclasses.replace(p.analysed, rounds=longest))
               for p in out]
    return out


def default_targets(
    graph: nx.Graph, cfg: LeakageConfig, prepared: list[ProtocolRun], *, max_targets: int = DEFAULT_MAX_TARGETS
) -> tuple[tuple[int, ...], str]:
    """The honest nodes to measure when the scenario names none, and how they were chosen.

    Every honest node when there are at most ``max_targets``.  Otherwise the most exposed
    ones first -- the nodes in the smallest groups the protocols disclose by design (a node
    scores 1/|group| per protocol and adversary, so a disclosed input scores 1), ties broken
    by the distance to the nearest corrupt node (pdmm-sp's leakage beyond the floor is
    largest there), then by id -- and, for contrast, the honest node farthest from every
    corrupt node.
    """
    corrupt = set(cfg.corrupt)
    honest = [i for i in sorted(graph.nodes) if i not in corrupt]
    if len(honest) <= max_targets:
        return tuple(honest), "every honest node"
    exposure = dict.fromkeys(honest, 0.0)
    for p in prepared:
        run_spec = p.analysed.spec
        for kind in cfg.adversaries:
            adversary = make_adversary(kind, cfg, has_server=p.spec.name == "federated")
            for group in disclosed_groups(run_spec, p.topology, graph, adversary) or []:
                for i in group:
                    if i in exposure:
                        exposure[i] += 1.0 / len(group)
    distance = nx.multi_source_dijkstra_path_length(graph, corrupt) if corrupt else dict.fromkeys(honest, 0)
    order = sorted(honest, key=lambda i: (-exposure[i], distance[i], i))
    chosen = order[: max_targets - 1]
    farthest = min(honest, key=lambda i: (-distance[i], i))
    chosen.append(farthest if farthest not in chosen and corrupt else order[max_targets - 1])
    how = "the most exposed by design (smallest disclosed groups, nearest a corrupt node)"
    if corrupt:
        how += " and the farthest from the corrupt nodes"
    return tuple(sorted(chosen)), f"{max_targets} of {len(honest)} honest nodes: {how}"


#: Width of the probe view (components) the per-estimate and per-view costs are scaled from.
_PROBE_WIDTH = 32
#: Repeats of the probe; their median is used.
_PROBE_REPEATS = 3
#: A diagonal entry of R below this fraction of the largest adds no direction (rank count only).
_RANK_RTOL = 1e-8


def _prefix_ranks(features: np.ndarray, rounds: np.ndarray) -> Callable[[int | None], int]:
    """``rank(last_round)``: the numerical rank of the view's features up to a round, from one QR.

    Columns sorted by round; in an unpivoted Householder QR, column j adds a direction to the
    span of the columns before it exactly when its diagonal entry of R is not (numerically)
    zero, so one factorisation gives the rank of every prefix -- a cheap stand-in for the
    principal components the analysis computes per round (it only feeds the run-time estimate).
    """
    order = np.argsort(rounds, kind="stable")
    v = features[:, order]
    spread = v.std(axis=0)
    keep = spread > 0
    v = (v[:, keep] - v[:, keep].mean(axis=0)) / spread[keep]
    kept_rounds = rounds[order][keep]
    if v.shape[1] == 0:
        return lambda last_round: 0
    diag = np.abs(np.diag(np.linalg.qr(v, mode="r")))
    new = np.zeros(v.shape[1], dtype=bool)
    new[: diag.size] = diag > _RANK_RTOL * diag.max()
    counts = np.cumsum(new)

    def rank(last_round: int | None) -> int:
        n = v.shape[1] if last_round is None else int(np.sum(kept_rounds <= last_round))
        return int(counts[n - 1]) if n else 0

    return rank


def estimate_run_time(
    cfg: LeakageConfig, graph: nx.Graph, prepared: list[ProtocolRun], *, seed: np.random.SeedSequence
) -> RunTimeEstimate:
    """Predict the wall time of the analysis from its work and a probe on this machine.

    The work is counted exactly: one dry run of every protocol over a few more runs than it
    has latents (inputs and initial duals) gives every view's width f and rank c (one QR per
    view, :func:`_prefix_ranks`), as the real runs will have them; each distinct view is reduced once (principal components and the
    exact value: cost ~ runs (f^2 + L f)) and each target estimated on it (KSG interval plus
    the reductions fitted per batch: cost ~ KSG + runs c^2).  The constants are timed on this
    machine at ``cfg.runs`` samples on one BLAS thread, as the analysis runs: one estimate of
    a one-component view, one cross-fitted reduction and one view reduction of width
    :data:`_PROBE_WIDTH`, the median of :data:`_PROBE_REPEATS` repeats.  The Monte Carlo runs themselves and the perturbation sweep's EM
    runs are not counted (they are cheap next to the estimates).
    """
    dry_seq, probe_seq = seed.spawn(2)
    widths: list[tuple[int, int, int]] = []  # per distinct view: features, latents, rank
    n_estimates = 0
    n = graph.number_of_nodes()
    dry_rng = np.random.default_rng(dry_seq)
    for p in prepared:
        spec = p.analysed.spec
        n_latents = n + (2 * graph.number_of_edges() if isinstance(spec, PdmmSP) else 0)
        runs = min(cfg.runs, n_latents + 16)
        mc = monte_carlo(spec, graph, dry_rng.standard_normal((n, runs)), input_sd=1.0, seed=dry_seq)
        keys = [None] if spec.exact else list(range(1, p.analysed.rounds + 1))
        sweeps = len(cfg.sweep_std) if isinstance(spec, PdmmSP) else 0
        for kind in cfg.adversaries:
            has_server = any(m.sender == SERVER or SERVER in m.receivers for m in mc.trace)
            view = build_view(mc.trace, make_adversary(kind, cfg, has_server=has_server), inputs=mc.inputs, outputs=mc.outcome.results)
            ranks = _prefix_ranks(view.features, view.rounds)
            for key in keys:
                f = int(np.sum(view.rounds <= key)) if key is not None else view.n_features
                widths.append((f, mc.latents.shape[1], ranks(key)))
            n_estimates += len(cfg.targets) * (len(keys) + sweeps)
            widths += [widths[-1]] * sweeps
    rng = np.random.default_rng(probe_seq)
    x = rng.standard_normal(cfg.runs)
    noisy = (x + rng.standard_normal(cfg.runs))[:, None]
    wide = rng.standard_normal((cfg.runs, _PROBE_WIDTH))
    # a known ceiling: the probe times the estimate alone, as the analysis computes the ceiling once
    probe = Estimator(cfg.k, cfg.n_batches, cfg.level, cfg.folds, rng, ceilings={cfg.runs: 1.0})
    times = []
    with single_threaded_blas():
        for _ in range(_PROBE_REPEATS):
            t0 = time.perf_counter()
            probe.estimate(x, noisy)
            t1 = time.perf_counter()
            estimate_reduction(x, wide, rng=rng, folds=cfg.folds)
            t2 = time.perf_counter()
            exact_linear_mi(wide, np.ones(_PROBE_WIDTH), principal_components(wide), [0])
            times.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
    # the median of a few repeats: one probe is at the mercy of whatever else the machine runs
    per_estimate, per_reduction, per_view = (float(v) for v in np.median(times, axis=0))
    probe_cost = 2.0 * _PROBE_WIDTH**2
    seconds = per_estimate / 3  # the estimator's ceiling: one KSG
    per_target = len(cfg.targets)
    for features, latents, rank in widths:
        seconds += per_view * (features**2 + latents * features) / probe_cost
        # the batches and half-batches refit the reduction on three full samples' worth of runs
        seconds += per_target * (per_estimate + 3 * per_reduction * ((rank + 1) / (_PROBE_WIDTH + 1)) ** 2)
    return RunTimeEstimate(seconds, n_estimates, len(widths), cfg.runs)


@dataclass(frozen=True, eq=False)
class LeakagePlan:
    """Everything decided before the estimates run (see :func:`plan_analysis`).

    Attributes
    ----------
    config : LeakageConfig
        As given, with the targets resolved.
    targets_note : str
        How the targets were chosen (``"scenario"``, ``"--targets"`` or the default's rule).
    estimator_seed : numpy.random.SeedSequence
        The estimator's stream (tie-breaking, folds, batches).
    """

    scenario: Scenario
    config: LeakageConfig
    graph: nx.Graph
    protocols: list[ProtocolRun]
    skipped: list[Skipped]
    inputs: Inputs
    targets_note: str
    estimator_seed: np.random.SeedSequence
    estimate: RunTimeEstimate | None
    timings: dict[str, float]


def plan_analysis(
    scenario: Scenario,
    config: LeakageConfig | None = None,
    *,
    targets: tuple[int, ...] | None = None,
    estimate: bool = True,
) -> LeakagePlan:
    """Read the data, validate the protocols, choose the targets and predict the run time.

    Parameters
    ----------
    scenario : Scenario
    config : LeakageConfig, optional
        Overrides the scenario's ``[leakage]`` table.
    targets : tuple of int, optional
        Overrides the targets of both (the ``--targets`` option).
    estimate : bool
        Time the probe and predict the run time (:func:`estimate_run_time`).

    Notes
    -----
    Random streams, all from the scenario seed: the inputs from the first child of the
    ``"montecarlo"`` stream, the estimator's from the second, the run-time probe's from the
    third (it changes no result).
    """
    t0 = time.perf_counter()
    cfg = parse_leakage(scenario) if config is None else config
    graph = build_graph(scenario)
    input_seq, est_seq, probe_seq = scenario.streams()["montecarlo"].spawn(3)
    inputs = draw_inputs(scenario, cfg, graph.number_of_nodes(), np.random.default_rng(input_seq))
    timings = {"plan: inputs, graph": time.perf_counter() - t0}
    t0 = time.perf_counter()
    prepared = prepare_protocols(scenario, cfg, graph, scale=inputs.scale)
    skipped = skipped_protocols(scenario)
    if targets is not None:
        chosen, note = targets, "--targets"
    elif cfg.targets:
        chosen, note = cfg.targets, "scenario"
    else:
        chosen, note = default_targets(graph, cfg, prepared)
    cfg = dataclasses.replace(cfg, targets=chosen)
    timings["plan: protocols, targets"] = time.perf_counter() - t0
    predicted = None
    if estimate:
        t0 = time.perf_counter()
        predicted = estimate_run_time(cfg, graph, prepared, seed=probe_seq)
        timings["plan: run-time estimate"] = time.perf_counter() - t0
    return LeakagePlan(scenario, cfg, graph, prepared, skipped, inputs, note, est_seq, predicted, timings)
