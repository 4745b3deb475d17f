"""Run a leakage analysis: Monte Carlo over one aggregation, views, estimates, closed forms.

The quantity studied is one network aggregation of the M-step: node i contributes its
responsibility-weighted first moment r_ik x_i (the numerator of the mean update) with private
data X_i ~ N(0, 1) and uniform responsibilities normalised to sum to one over the K =
``em.n_components`` components, r_ik = 1/K.  Each component's statistic is then the same
scaled copy of X_i, so one column per run carries everything.

Monte Carlo is one batch call.  Every protocol's batch path treats the columns of its
(n_nodes, p) input independently (the consensus is linear and column-wise; pdmm-sp runs
exactly ``iterations`` rounds with ``tol = 0``, so its column-coupled stopping rule never
fires), so ``runs`` Monte Carlo runs are one call with p = runs, each node drawing its
randomness from its own stream (:func:`p2pem.simulate.protocol_streams`).  The recorded
trace then holds messages whose payloads are vectors over the runs, from which
:func:`p2pem.leakage.views.build_view` builds each adversary's view.

For every (protocol, adversary, target node) and every protocol iteration t (the view after
pdmm-sp round t; an exact protocol finishes in one iteration, so its view is the same at
every t) the analysis reports

* ``mi_bits`` and ``mi_ci``: the KSG estimate, in bits, on the reduced view (a lower bound,
  see :mod:`p2pem.leakage.reduce`), with a confidence interval from disjoint batches;
* ``nmi``: that estimate divided by the estimator's full-disclosure ceiling at the same
  sample size (1 = the input is disclosed; see
  :func:`p2pem.leakage.estimators.full_disclosure_ceiling`);
* ``exact_bits``: the exact mutual information of the view, from its linear structure
  recovered from the trace (:func:`p2pem.leakage.reduce.exact_linear_mi`);
* ``bound_bits``: the closed form of what the protocol discloses by design
  (:mod:`p2pem.leakage.theory`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError
from p2pem.leakage.config import LeakageConfig, parse_leakage
from p2pem.leakage.estimators import full_disclosure_ceiling, mi_with_ci
from p2pem.leakage.reduce import estimate_reduction, exact_linear_mi, principal_components
from p2pem.leakage.theory import (
    TopologyReport,
    closed_form_bits,
    describe_group,
    disclosed_groups,
    topology_report,
)
from p2pem.leakage.views import Adversary, View, build_view
from p2pem.messages import SERVER, Message
from p2pem.protocols import AggregateOutcome, Centralized, PdmmSP, ProtocolSpec, Topology
from p2pem.scenario import Scenario
from p2pem.simulate import protocol_streams

__all__ = [
    "Estimator",
    "LeakageReport",
    "LeakageRun",
    "MonteCarlo",
    "Series",
    "analyse_scenario",
    "make_adversary",
    "measure",
    "monte_carlo",
    "monte_carlo_spec",
]

FloatArray = npt.NDArray[np.float64]

#: ``progress(label, total)`` returns a callable to invoke once per finished unit of work.
ProgressFactory = Callable[[str, int], Callable[[], None]]


# ------------------------------------------------------------------------ Monte Carlo


def monte_carlo_spec(spec: ProtocolSpec, iterations: int) -> ProtocolSpec:
    """The protocol as the Monte Carlo runs it: pdmm-sp for exactly ``iterations`` rounds.

    Raises
    ------
    ConfigError
        For asynchronous pdmm-sp (it has no batch path) and ``centralized`` (no network).
    """
    if isinstance(spec, Centralized):
        raise ConfigError("centralized runs no network protocol: nothing to leak")
    if spec.asynchronous:
        raise ConfigError(f"{spec.name}: the leakage analysis needs the batch path; use mode = 'sync'")
    if isinstance(spec, PdmmSP):
        return dataclasses.replace(spec, tol=0.0, max_iter=iterations)
    return spec


@dataclass(frozen=True, eq=False)
class MonteCarlo:
    """One aggregation run over many Monte Carlo columns, with its trace and latents.

    Attributes
    ----------
    spec : ProtocolSpec
        The protocol as run (see :func:`monte_carlo_spec`).
    topology : Topology
    inputs : numpy.ndarray, shape (n_nodes, n_runs)
        Every node's input in every run.
    outcome : AggregateOutcome
        Results and the recorded trace.
    latents : numpy.ndarray, shape (n_runs, n_latents)
        The independent Gaussians the run is driven by: the inputs, then the protocol's
        recorded Gaussian randomness (pdmm-sp's initial duals, read from the trace).
    latent_sd : numpy.ndarray, shape (n_latents,)
        Their standard deviations under the model.
    """

    spec: ProtocolSpec
    topology: Topology
    inputs: FloatArray
    outcome: AggregateOutcome
    latents: FloatArray
    latent_sd: FloatArray

    @property
    def trace(self) -> list[Message]:
        return self.outcome.trace or []

    @property
    def last_round(self) -> int:
        return max((m.round for m in self.trace), default=0)


def monte_carlo(
    spec: ProtocolSpec,
    graph: nx.Graph,
    inputs: npt.ArrayLike,
    *,
    input_sd: float,
    seed: int | np.random.SeedSequence,
    iteration: int = 1,
) -> MonteCarlo:
    """Run one aggregation on every Monte Carlo column at once and record the trace.

    Parameters
    ----------
    spec : ProtocolSpec
        Run as given (pass it through :func:`monte_carlo_spec` first).
    graph : networkx.Graph
    inputs : array_like, shape (n_nodes, n_runs)
        Column r is Monte Carlo run r.
    input_sd : float
        Standard deviation of every input under the model (for the closed forms).
    seed : int or SeedSequence
        Protocol randomness: node i draws from stream i of
        :func:`p2pem.simulate.protocol_streams`.
    iteration : int
        EM iteration number stamped on the messages.

    Returns
    -------
    MonteCarlo

    Notes
    -----
    Cost: one batch aggregation with p = n_runs (pdmm-sp: O(T m p) floating-point work and
    2m + nT recorded payloads of p floats; secure-sum: O(n p) big-integer operations).
    """
    spec.validate(graph)
    topology = spec.topology(graph)
    values = np.ascontiguousarray(inputs, dtype=np.float64)
    n = topology.n_nodes
    if values.ndim != 2 or values.shape[0] != n:
        raise ConfigError(f"inputs must have shape ({n}, n_runs), got {values.shape}")
    rngs = protocol_streams(seed, n)
    outcome = spec.aggregate(values, topology, rngs, iteration, record=True)
    lat = [values[i] for i in range(n)]
    sd = [float(input_sd)] * n
    if isinstance(spec, PdmmSP):
        for m in outcome.trace:
            if m.kind == "dual-init":
                lat.append(np.asarray(m.payload, dtype=np.float64))
                sd.append(float(spec.perturbation_std))
    return MonteCarlo(spec, topology, values, outcome, np.column_stack(lat), np.asarray(sd))


def make_adversary(kind: str, config: LeakageConfig, *, has_server: bool = False) -> Adversary:
    """The adversary of ``kind`` under ``config``.

    A protocol with a server (``has_server``: its trace has messages to or from
    :data:`~p2pem.messages.SERVER`) adds the server to the corrupt set of the
    honest-but-curious and both adversaries when ``config.server_corrupt``.
    """
    if kind == "eavesdropper":
        return Adversary(kind)
    corrupt = set(config.corrupt)
    if config.server_corrupt and has_server:
        corrupt.add(SERVER)
    return Adversary(kind, frozenset(corrupt))


# ------------------------------------------------------------------------ measuring


@dataclass(frozen=True)
class LeakageRun:
    """The leakage about one node, for one protocol and adversary, per iteration.

    ``bound_bits`` and the entries of ``exact_bits`` are ``math.inf`` for exact disclosure;
    ``exact_bits`` is None when the view is not linear in the latents.
    """

    protocol: str
    adversary: str
    corrupt: tuple[int, ...]
    node: int
    node_label: str
    iterations: tuple[int, ...]
    mi_bits: tuple[float, ...]
    mi_ci: tuple[tuple[float, float], ...]
    nmi: tuple[float, ...]
    exact_bits: tuple[float, ...] | None
    bound_bits: float | None
    bound: str
    perturbation_std: float | None = None
    em_rel_err: float | None = None
    em_unconverged: int | None = None

    def to_json(self) -> dict:
        def finite(v: float | None) -> float | None:
            return None if v is None or math.isinf(v) else float(v)

        out = {
            "protocol": self.protocol,
            "adversary": self.adversary,
            "corrupt": list(self.corrupt),
            "node": self.node,
            "node_label": self.node_label,
            "iterations": list(self.iterations),
            "mi_bits": [float(v) for v in self.mi_bits],
            "mi_ci": [[float(lo), float(hi)] for lo, hi in self.mi_ci],
            "nmi": [float(v) for v in self.nmi],
            "bound_bits": finite(self.bound_bits),
            "bound": self.bound,
            "full_disclosure": self.bound_bits is not None and math.isinf(self.bound_bits),
            "exact_bits": None if self.exact_bits is None else [finite(v) for v in self.exact_bits],
        }
        if self.perturbation_std is not None:
            out["perturbation_std"] = self.perturbation_std
            out["em_rel_err"] = self.em_rel_err
            out["em_unconverged"] = self.em_unconverged
        return out


@dataclass
class Estimator:
    """The KSG pipeline with its settings, and a cache of full-disclosure ceilings.

    Parameters
    ----------
    k : int
        KSG neighbours.
    n_batches : int
        Disjoint batches for the confidence interval.
    level : float
        Confidence level.
    folds : int
        Cross-fitting folds of the adversary's linear estimate.
    rng : numpy.random.Generator
        Source of the folds, the batches and the estimator's tie-breaking.
    """

    k: int = 3
    n_batches: int = 10
    level: float = 0.95
    folds: int = 5
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    ceilings: dict[int, float] = field(default_factory=dict)

    def ceiling(self, n: int) -> float:
        """The estimator's value for full disclosure at ``n`` samples (cached)."""
        if n not in self.ceilings:
            self.ceilings[n] = full_disclosure_ceiling(n, k=self.k, rng=self.rng)
        return self.ceilings[n]

    def estimate(self, target: FloatArray, components: FloatArray) -> tuple[float, float, float, float]:
        """(bits, lo, hi, nmi) for one target against one reduced view."""
        estimate = estimate_reduction(target, components, rng=self.rng, folds=self.folds)
        bits, lo, hi = mi_with_ci(target, estimate, k=self.k, rng=self.rng, n_batches=self.n_batches, level=self.level)
        nmi = min(bits / self.ceiling(target.shape[0]), 1.0)
        return bits, lo, hi, nmi


@dataclass
class Series:
    """One node's leakage over the analysed iterations."""

    mi_bits: list[float] = field(default_factory=list)
    mi_ci: list[tuple[float, float]] = field(default_factory=list)
    nmi: list[float] = field(default_factory=list)
    exact_bits: list[float] | None = field(default_factory=list)


def measure(
    mc: MonteCarlo,
    view: View,
    targets: Sequence[int],
    iterations: Sequence[int],
    estimator: Estimator,
    *,
    step: Callable[[], None] | None = None,
) -> dict[int, Series]:
    """The leakage about each target over ``iterations``.

    For an iterative protocol (pdmm-sp) the view after round t is measured at iteration t;
    an exact protocol completes in one iteration, so its whole view is measured once and
    repeated.  ``exact_bits`` is None when the view is not linear in ``mc.latents``.
    """
    with _single_threaded_blas():
        return _measure(mc, view, targets, iterations, estimator, step)


def _measure(mc, view, targets, iterations, estimator, step) -> dict[int, Series]:
    out = {i: Series() for i in targets}
    cache: dict[int | None, tuple[dict[int, tuple], list[float] | None]] = {}
    for t in iterations:
        key = t if not mc.spec.exact else None
        if key not in cache:
            v = view.until(key)
            comps = principal_components(v)
            exact = exact_linear_mi(mc.latents, mc.latent_sd, v, list(targets))
            estimates = {}
            for i in targets:
                estimates[i] = estimator.estimate(mc.inputs[i], comps)
                if step is not None:
                    step()
            cache[key] = (estimates, exact)
        elif step is not None:
            for _ in targets:
                step()
        estimates, exact = cache[key]
        for pos, i in enumerate(targets):
            bits, lo, hi, nmi = estimates[i]
            s = out[i]
            s.mi_bits.append(bits)
            s.mi_ci.append((lo, hi))
            s.nmi.append(nmi)
            if exact is None:
                s.exact_bits = None
            elif s.exact_bits is not None:
                s.exact_bits.append(exact[pos])
    return out


# ------------------------------------------------------------------------ the report


@dataclass
class LeakageReport:
    """Everything a leakage analysis of one scenario produced."""

    scenario: Scenario
    config: LeakageConfig
    graph: nx.Graph
    topology: dict[str, TopologyReport]
    runs: list[LeakageRun]
    ceiling_bits: float
    wall_s: float
    timings: dict[str, float]

    @property
    def iteration_runs(self) -> list[LeakageRun]:
        return [r for r in self.runs if r.perturbation_std is None]

    @property
    def sweep_runs(self) -> list[LeakageRun]:
        return [r for r in self.runs if r.perturbation_std is not None]

    def warnings(self) -> list[str]:
        seen: list[str] = []
        for rep in self.topology.values():
            for w in rep.warnings(self.config.label):
                if w not in seen:
                    seen.append(w)
        return seen

    def summary_json(self) -> dict:
        from p2pem.runner import graph_summary

        cfg = self.config
        return {
            "scenario": self.scenario.name,
            "scenario_file": str(self.scenario.path),
            "seed": self.scenario.seed,
            "graph": graph_summary(self.graph) | {"edges": sorted([sorted(e) for e in self.graph.edges])},
            "statistic": "responsibility-weighted first moment r x_i, X_i ~ N(0, 1), r = 1/n_components",
            "settings": {
                "adversaries": list(cfg.adversaries),
                "corrupt": list(cfg.corrupt),
                "server_corrupt": cfg.server_corrupt,
                "targets": list(cfg.targets),
                "runs": cfg.runs,
                "iterations": cfg.iterations,
                "k": cfg.k,
                "n_batches": cfg.n_batches,
                "level": cfg.level,
                "folds": cfg.folds,
                "node_labels": list(cfg.node_labels),
                "sweep_std": list(cfg.sweep_std),
            },
            "ceiling_bits": self.ceiling_bits,
            "honest_components": {
                kind: [list(c) for c in rep.components] for kind, rep in self.topology.items()
            },
            "warnings": self.warnings(),
            "wall_s": self.wall_s,
            "timings_s": self.timings,
        }


def _protocol_label(spec: ProtocolSpec) -> str:
    return getattr(spec, "label", spec.name)


def analyse_scenario(
    scenario: Scenario,
    *,
    config: LeakageConfig | None = None,
    progress: ProgressFactory | None = None,
) -> LeakageReport:
    """Measure the leakage of every network protocol of ``scenario``.

    Parameters
    ----------
    scenario : Scenario
        Its ``[leakage]`` table (see :mod:`p2pem.leakage.config`), graph, ``em.n_components``
        (the responsibilities), protocols and seed.  ``[data]`` and the EM settings are used
        only by the perturbation sweep's accuracy runs.
    config : LeakageConfig, optional
        Overrides the scenario's ``[leakage]`` table (e.g. fewer runs).
    progress : callable, optional
        ``progress(label, total)`` returning a callable to invoke per finished estimate.

    Returns
    -------
    LeakageReport

    Notes
    -----
    Random streams, all from the scenario seed: the inputs from the first child of the
    ``"montecarlo"`` stream, the estimator's tie-breaking and splits from the second, the
    protocol randomness from the ``"protocol"`` stream (as :func:`p2pem.runner.run_scenario`
    uses it).  The same scenario gives the same numbers.
    """
    with _single_threaded_blas():
        return _analyse(scenario, config, progress)


@contextmanager
def _single_threaded_blas() -> Iterator[None]:
    """Run the many small SVDs and least-squares fits on one BLAS thread.

    They are far too small to gain from threads, and a multi-threaded OpenBLAS slows them
    down by an order of magnitude as soon as another process competes for the cores.
    threadpoolctl comes with scikit-learn, which npeet-plus requires.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - always installed with npeet-plus
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _analyse(scenario: Scenario, config: LeakageConfig | None, progress: ProgressFactory | None) -> LeakageReport:
    from p2pem.runner import build_graph, protocols

    t_start = time.perf_counter()
    cfg = parse_leakage(scenario) if config is None else config
    streams = scenario.streams()
    input_seq, est_seq = streams["montecarlo"].spawn(2)
    graph = build_graph(scenario)
    n = graph.number_of_nodes()
    specs = [s for s in protocols(scenario) if not isinstance(s, Centralized)]
    if not specs:
        raise ConfigError(f"{scenario.path}: no network protocol to analyse")
    for s in specs:
        monte_carlo_spec(s, cfg.iterations).validate(graph)

    resp = 1.0 / scenario.em.n_components
    inputs = resp * np.random.default_rng(input_seq).standard_normal((n, cfg.runs))
    estimator = Estimator(cfg.k, cfg.n_batches, cfg.level, cfg.folds, np.random.default_rng(est_seq))
    ceiling = estimator.ceiling(cfg.runs)
    topo = {kind: topology_report(graph, make_adversary(kind, cfg).corrupt_nodes) for kind in cfg.adversaries}
    iterations = list(range(1, cfg.iterations + 1))
    timings: dict[str, float] = {}
    runs: list[LeakageRun] = []

    for spec in specs:
        t0 = time.perf_counter()
        mc = monte_carlo(monte_carlo_spec(spec, cfg.iterations), graph, inputs, input_sd=resp, seed=streams["protocol"])
        timings[f"monte carlo {_protocol_label(spec)}"] = time.perf_counter() - t0
        for kind in cfg.adversaries:
            t0 = time.perf_counter()
            runs += _runs_for(mc, graph, kind, cfg, iterations, estimator, progress)
            timings[f"estimate {_protocol_label(spec)} / {kind}"] = time.perf_counter() - t0

    if cfg.sweep_std:
        t0 = time.perf_counter()
        runs += _sweep(scenario, cfg, graph, specs, inputs, resp, estimator, progress)
        timings["perturbation sweep"] = time.perf_counter() - t0

    return LeakageReport(scenario, cfg, graph, topo, runs, ceiling, time.perf_counter() - t_start, timings)


def _runs_for(
    mc: MonteCarlo,
    graph: nx.Graph,
    kind: str,
    cfg: LeakageConfig,
    iterations: list[int],
    estimator: Estimator,
    progress: ProgressFactory | None,
    *,
    perturbation_std: float | None = None,
    accuracy: tuple[float, int] | None = None,
) -> list[LeakageRun]:
    has_server = any(m.sender == SERVER or SERVER in m.receivers for m in mc.trace)
    adversary = make_adversary(kind, cfg, has_server=has_server)
    view = build_view(mc.trace, adversary, inputs=mc.inputs, outputs=mc.outcome.results)
    label = _protocol_label(mc.spec)
    n_units = len(cfg.targets) * len(iterations)
    step = None
    if progress is not None:
        std = f" std={perturbation_std:g}" if perturbation_std is not None else ""
        step = progress(f"{label}{std} / {kind}", n_units)
    measured = measure(mc, view, cfg.targets, iterations, estimator, step=step)
    groups = disclosed_groups(mc.spec, mc.topology, graph, adversary)
    out = []
    for i in cfg.targets:
        series = measured[i]
        out.append(
            LeakageRun(
                protocol=label,
                adversary=kind,
                corrupt=tuple(sorted(adversary.corrupt)),
                node=i,
                node_label=cfg.label(i),
                iterations=tuple(iterations),
                mi_bits=tuple(series.mi_bits),
                mi_ci=tuple(series.mi_ci),
                nmi=tuple(series.nmi),
                exact_bits=None if series.exact_bits is None else tuple(series.exact_bits),
                bound_bits=closed_form_bits(groups, i),
                bound=describe_group(groups, i, cfg.label),
                perturbation_std=perturbation_std,
                em_rel_err=None if accuracy is None else accuracy[0],
                em_unconverged=None if accuracy is None else accuracy[1],
            )
        )
    return out


def _sweep(
    scenario: Scenario,
    cfg: LeakageConfig,
    graph: nx.Graph,
    specs: list[ProtocolSpec],
    inputs: FloatArray,
    resp: float,
    estimator: Estimator,
    progress: ProgressFactory | None,
) -> list[LeakageRun]:
    """Leakage after the last analysed iteration and EM accuracy, per initial-dual std."""
    from p2pem.runner import em_settings
    from p2pem.scenario import load_data
    from p2pem.simulate import run_protocol

    parts = load_data(scenario)
    settings = em_settings(scenario)
    reference = run_protocol(parts, graph, Centralized(), settings)
    streams = scenario.streams()
    runs: list[LeakageRun] = []
    for spec in specs:
        if not isinstance(spec, PdmmSP):
            continue
        for std in cfg.sweep_std:
            swept = dataclasses.replace(spec, perturbation_std=std)
            fit = run_protocol(parts, graph, swept, settings, seed=streams["protocol"])
            accuracy = (_rel_err(fit, reference), len(fit.unconverged_iterations))
            mc = monte_carlo(monte_carlo_spec(swept, cfg.iterations), graph, inputs, input_sd=resp, seed=streams["protocol"])
            for kind in cfg.adversaries:
                runs += _runs_for(
                    mc, graph, kind, cfg, [cfg.iterations], estimator, progress, perturbation_std=std, accuracy=accuracy
                )
    return runs


def _rel_err(run, ref) -> float:
    """Largest relative error of the fitted weights, means and covariances."""
    err = 0.0
    for a, b in ((run.weights, ref.weights), (run.means, ref.means), (run.covariances, ref.covariances)):
        err = max(err, float(np.max(np.abs(a - b)) / np.max(np.abs(b))))
    return err
