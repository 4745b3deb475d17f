"""Run a leakage analysis of a scenario: protocols, Monte Carlo, views, estimates, floors.

The quantity studied is one network aggregation of the M-step: node i contributes its
responsibility-weighted first moment, computed from the scenario's own rows or from the
paper's Gaussian model (:mod:`p2pem.leakage.inputs`).  What runs, on which inputs, for which
targets and for about how long is decided first (:mod:`p2pem.leakage.plan`).

The runs are one batch call per protocol (:mod:`p2pem.leakage.montecarlo`); each adversary's
view is built from the recorded trace (:mod:`p2pem.leakage.views`), measured
(:mod:`p2pem.leakage.measure`) and gathered into a report (:mod:`p2pem.leakage.report`).

For every (protocol, adversary, target node) and every protocol iteration t (the view after
pdmm-sp round t; an exact protocol finishes in one iteration, so its view is the same at
every t) the analysis reports

* ``mi_bits``, ``mi_bias_bits``, ``mi_se_bits`` and ``mi_ci``: the KSG estimate, in bits,
  on the reduced view, corrected for its estimated bias, the bias and the sampling error
  stated separately, and a confidence interval that includes both
  (:func:`p2pem.leakage.estimators.mi_interval`).  The *population* value of KSG on a
  reduction of the view is a lower bound on the leakage (data processing, see
  :mod:`p2pem.leakage.reduce`); the estimate itself can sit above or below the truth;
* ``estimator`` and ``r2``: which reduction the estimate used and how much of the target
  the adversary's linear estimate explains.  A view that is not linear in the latents and
  whose linear estimate explains little (``r2`` below :data:`R2_LOW`) is also estimated on
  the full reduced view, and the larger of the two is reported;
* ``nmi``: that estimate divided by the estimator's full-disclosure ceiling at the same
  sample size (1 = the input is disclosed; see
  :func:`p2pem.leakage.estimators.full_disclosure_ceiling`);
* ``exact_bits``: the exact mutual information of the view, from its linear structure
  recovered from the trace (:func:`p2pem.leakage.reduce.exact_linear_mi`);
* ``floor_bits``: the *floor*, what any exact protocol discloses by design to this
  adversary (:mod:`p2pem.leakage.theory`), and ``flags``: for pdmm-sp, a run whose exact
  leakage at the configured perturbation exceeds the floor by more than
  :data:`FLOOR_SLACK_BITS` is flagged (the perturbation is too small for the floor to hold).

pdmm-sp's ``perturbation_std`` is in the units of the aggregated statistic, whose standard
deviation is r = 1/K (K = ``em.n_components``) for the Gaussian inputs and r sqrt(n_i)
std(x) for the data's: "std 1" hides less of a statistic of larger spread.
``[leakage] perturbation = "relative"`` reads the protocol's (and the sweep's) stds as
multiples of that scale instead; every record states both (``perturbation_std`` and
``perturbation_relative``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.leakage.config import LeakageConfig
from p2pem.leakage.inputs import Inputs
from p2pem.leakage.measure import Estimate, Estimator, measure, single_threaded_blas
from p2pem.leakage.montecarlo import MonteCarlo, analysed_schedule, make_adversary, monte_carlo
from p2pem.leakage.plan import LeakagePlan, plan_analysis
from p2pem.leakage.report import LeakageReport, LeakageRun, protocol_params
from p2pem.leakage.theory import closed_form_bits, describe_group, disclosed_groups, topology_report
from p2pem.leakage.views import build_view
from p2pem.messages import SERVER
from p2pem.parallel import Workers
from p2pem.protocols import Centralized, PdmmSP, ProtocolSpec
from p2pem.builders import em_settings, load_data
from p2pem.scenario import Scenario
from p2pem.simulate import max_relative_difference, run_protocol
from p2pem.streams import child

__all__ = ["FLOOR_SLACK_BITS", "ProgressFactory", "analyse_scenario", "run_plan"]

#: A pdmm-sp run whose exact leakage exceeds the floor by more than this is flagged.
FLOOR_SLACK_BITS = 0.01

FloatArray = npt.NDArray[np.float64]

#: ``progress(label, total)`` returns a callable to invoke once per finished unit of work.
ProgressFactory = Callable[[str, int], Callable[[], None]]


def analyse_scenario(
    scenario: Scenario,
    *,
    config: LeakageConfig | None = None,
    progress: ProgressFactory | None = None,
    workers: Workers | None = None,
) -> LeakageReport:
    """Measure the leakage of every network protocol of ``scenario``.

    Parameters
    ----------
    scenario : Scenario
        Its ``[leakage]`` table (see :mod:`p2pem.leakage.config`), data (unless
        ``inputs = "gaussian"``), graph, ``em.n_components`` (the responsibilities),
        protocols and seed.  The EM settings are used only by the perturbation sweep's
        accuracy runs.
    config : LeakageConfig, optional
        Overrides the scenario's ``[leakage]`` table (e.g. fewer runs).
    progress : callable, optional
        ``progress(label, total)`` returning a callable to invoke per finished estimate.
    workers : p2pem.parallel.Workers, optional
        Where the estimates run (default here); every estimate has its own seed, so the
        numbers are the same wherever they run.

    Returns
    -------
    LeakageReport

    Notes
    -----
    :func:`~p2pem.leakage.plan.plan_analysis` then :func:`run_plan`.  Random streams, all
    from the scenario seed: the inputs from the first child of the ``"montecarlo"`` stream,
    the estimator's tie-breaking and splits from the second, the protocol randomness from
    the ``"protocol"`` stream (as :func:`p2pem.runner.run_scenario` uses it).  The same
    scenario gives the same numbers.
    """
    return run_plan(plan_analysis(scenario, config), progress, workers=workers)


def run_plan(plan: LeakagePlan, progress: ProgressFactory | None = None, *, workers: Workers | None = None) -> LeakageReport:
    """Run the Monte Carlo and the estimates that ``plan`` decided (:func:`~p2pem.leakage.plan.plan_analysis`).

    Parameters
    ----------
    plan : LeakagePlan
    progress : callable, optional
        ``progress(label, total)`` returning a callable to invoke per finished estimate.
    workers : p2pem.parallel.Workers, optional
        Where the estimates run (default here).  Each measured view's estimates are one
        task; estimate (protocol p, adversary a, target i, view k) draws from
        ``child(plan.estimator_seed, 0, p, a)``'s child ``(i, k)`` (the perturbation sweep's
        from ``(1, p, value, a)``), so the numbers do not depend on where or in which order
        the tasks run.

    Returns
    -------
    LeakageReport
    """
    with single_threaded_blas():
        return _run(plan, progress, workers or Workers())


def _run(plan: LeakagePlan, progress: ProgressFactory | None, workers: Workers) -> LeakageReport:
    t_start = time.perf_counter()
    scenario, cfg, graph, inputs = plan.scenario, plan.config, plan.graph, plan.inputs
    streams = scenario.streams()
    estimator = Estimator(cfg.k, cfg.n_batches, cfg.level, cfg.folds, np.random.default_rng(plan.estimator_seed))
    ceiling = estimator.ceiling(cfg.runs)
    topo = {kind: topology_report(graph, make_adversary(kind, cfg).corrupt_nodes) for kind in cfg.adversaries}
    timings: dict[str, float] = dict(plan.timings)
    timings["set-up (estimator ceiling)"] = time.perf_counter() - t_start
    runs: list[LeakageRun] = []

    for p_index, p in enumerate(plan.protocols):
        t0 = time.perf_counter()
        mc = monte_carlo(p.analysed.spec, graph, inputs.values, input_sd=inputs.sd, seed=streams["protocol"])
        rounds = list(range(1, p.analysed.rounds + 1))
        timings[f"monte carlo: {p.label}"] = time.perf_counter() - t0
        for a_index, kind in enumerate(cfg.adversaries):
            t0 = time.perf_counter()
            stream = Stream(child(plan.estimator_seed, 0, p_index, a_index), workers)
            runs += _runs_for(mc, graph, kind, cfg, rounds, estimator, progress, inputs, label=p.label, spec=p.spec, stream=stream)
            timings[f"estimate: {p.label} / {kind}"] = time.perf_counter() - t0

    if cfg.sweep_std:
        runs += _sweep(scenario, cfg, graph, [p.spec for p in plan.protocols], inputs, estimator, progress, timings,
                       Stream(child(plan.estimator_seed, 1), workers))

    wall = sum(plan.timings.values()) + time.perf_counter() - t_start
    return LeakageReport(
        scenario, cfg, graph, topo, runs, ceiling, wall, timings, plan.protocols,
        inputs=inputs, skipped=plan.skipped, targets_note=plan.targets_note, estimate=plan.estimate,
    )


def _runs_for(
    mc: MonteCarlo,
    graph: nx.Graph,
    kind: str,
    cfg: LeakageConfig,
    rounds: list[int],
    estimator: Estimator,
    progress: ProgressFactory | None,
    inputs: Inputs,
    *,
    label: str,
    spec: ProtocolSpec,
    stream: Stream,
    accuracy: tuple[float, int] | None = None,
) -> list[LeakageRun]:
    has_server = any(m.sender == SERVER or SERVER in m.receivers for m in mc.trace)
    adversary = make_adversary(kind, cfg, has_server=has_server)
    view = build_view(mc.trace, adversary, inputs=mc.inputs, outputs=mc.outcome.results)
    n_units = len(cfg.targets) * len(rounds)
    step = None if progress is None else progress(f"{label} / {kind}", n_units)
    measured = measure(mc, view, cfg.targets, rounds, estimator, stream=stream.seed, workers=stream.workers, step=step)
    groups = disclosed_groups(mc.spec, mc.topology, graph, adversary)
    std = spec.perturbation_std if isinstance(spec, PdmmSP) else None
    scale = inputs.scale  # the statistic's standard deviation (r = 1/K for the Gaussian inputs)
    out = []
    for i in cfg.targets:
        series = measured[i]
        est = series.estimates
        floor = closed_form_bits(groups, i, inputs.variances)
        exact = None if series.exact_bits is None else tuple(series.exact_bits)
        out.append(
            LeakageRun(
                protocol=spec.name,
                adversary=kind,
                corrupt=tuple(sorted(adversary.corrupt)),
                node=i,
                node_label=cfg.label(i),
                rounds=tuple(rounds),
                mi_bits=tuple(series.mi_bits),
                mi_ci=tuple(series.mi_ci),
                nmi=tuple(series.nmi),
                exact_bits=exact,
                floor_bits=floor,
                floor=describe_group(groups, i, cfg.label),
                label=label,
                params=protocol_params(spec),
                mi_bias_bits=tuple(e.bias for e in est),
                mi_se_bits=tuple(e.se for e in est),
                estimator=tuple(e.method for e in est),
                r2=tuple(e.r2 for e in est),
                flags=_floor_flags(spec, floor, exact, est[-1], float(inputs.sd[i])),
                perturbation_std=std,
                perturbation_relative=None if std is None else std / scale,
                em_rel_err=None if accuracy is None else accuracy[0],
                em_unconverged=None if accuracy is None else accuracy[1],
            )
        )
    return out


@dataclass(frozen=True)
class Stream:
    """Where the estimates of one (protocol, adversary) draw from, and where they run."""

    seed: np.random.SeedSequence
    workers: Workers


def _floor_flags(spec: ProtocolSpec, floor: float | None, exact: tuple[float, ...] | None, last: Estimate, scale: float) -> tuple[str, ...]:
    """pdmm-sp: flag a run whose leakage at the configured perturbation exceeds the floor."""
    if not isinstance(spec, PdmmSP) or floor is None or math.isinf(floor):
        return ()
    if exact is not None:
        leak, how = exact[-1], "exact"
    else:
        leak, how = last.lo, "KSG lower end"
    if leak <= floor + FLOOR_SLACK_BITS:
        return ()
    shown = "inf" if math.isinf(leak) else f"{leak:.3f}"
    return (
        f"perturbation too small for the floor to hold: leaks {shown} bits ({how}) against the floor {floor:.3f}; "
        f"perturbation_std {spec.perturbation_std:g} is {spec.perturbation_std / scale:g} times the statistic's "
        f"standard deviation {scale:g}: raise it",
    )


def _sweep(
    scenario: Scenario,
    cfg: LeakageConfig,
    graph: nx.Graph,
    specs: list[ProtocolSpec],
    inputs: Inputs,
    estimator: Estimator,
    progress: ProgressFactory | None,
    timings: dict[str, float],
    stream: Stream,
) -> list[LeakageRun]:
    """Leakage after the last analysed iteration and EM accuracy, per initial-dual std."""
    t0 = time.perf_counter()
    parts = load_data(scenario)
    settings = em_settings(scenario)
    reference = run_protocol(parts, graph, Centralized(), settings)
    streams = scenario.streams()
    timings["perturbation sweep: reference EM"] = time.perf_counter() - t0
    runs: list[LeakageRun] = []
    scale = inputs.scale if cfg.perturbation == "relative" else 1.0
    for p_index, spec in enumerate(specs):
        if not isinstance(spec, PdmmSP):
            continue
        for v_index, value in enumerate(cfg.sweep_std):
            t0 = time.perf_counter()
            swept = dataclasses.replace(spec, perturbation_std=value * scale)
            label = f"{getattr(swept, 'label', swept.name)} (std {swept.perturbation_std:g})"
            fit = run_protocol(parts, graph, swept, settings, seed=streams["protocol"])
            accuracy = (max_relative_difference(fit, reference), len(fit.unconverged_iterations))
            analysed = analysed_schedule(swept, graph, cfg.rounds)
            mc = monte_carlo(analysed.spec, graph, inputs.values, input_sd=inputs.sd, seed=streams["protocol"])
            for a_index, kind in enumerate(cfg.adversaries):
                runs += _runs_for(
                    mc, graph, kind, cfg, [analysed.rounds], estimator, progress, inputs, label=label, spec=swept, accuracy=accuracy,
                    stream=Stream(child(stream.seed, p_index, v_index, a_index), stream.workers),
                )
            timings[f"perturbation sweep: {label}"] = time.perf_counter() - t0
    return runs
