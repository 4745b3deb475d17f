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

pdmm-sp's ``perturbation_std`` is in the units of the aggregated statistic r X_i, whose
standard deviation here is r = 1/K (K = ``em.n_components``): "std 1" hides less at K = 1
than at K = 3.  ``[leakage] perturbation = "relative"`` reads the protocol's (and the
sweep's) stds as multiples of that scale instead; every record states both
(``perturbation_std`` and ``perturbation_relative``).
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

from p2pem.errors import ConfigError, P2pemError
from p2pem.leakage.config import LeakageConfig, parse_leakage
from p2pem.leakage.estimators import full_disclosure_ceiling, mi_interval
from p2pem.leakage.reduce import estimate_reduction, exact_linear_mi, principal_components
from p2pem.leakage.theory import (
    TopologyReport,
    closed_form_bits,
    describe_group,
    disclosed_groups,
    disclosure_messages,
    topology_report,
)
from p2pem.leakage.views import Adversary, View, build_view
from p2pem.messages import SERVER, Message
from p2pem.protocols import AggregateOutcome, Centralized, PdmmSP, ProtocolSpec, Topology
from p2pem.scenario import Scenario
from p2pem.simulate import protocol_streams

__all__ = [
    "FLOOR_SLACK_BITS",
    "R2_LOW",
    "Estimate",
    "Estimator",
    "ProtocolRun",
    "LeakageReport",
    "LeakageRun",
    "MonteCarlo",
    "Series",
    "analyse_scenario",
    "make_adversary",
    "measure",
    "monte_carlo",
    "monte_carlo_spec",
    "prepare_protocols",
    "run_labels",
]

#: Format name and version of leakage.json (an object with ``runs``) and summary.json.
LEAKAGE_FORMAT = ("p2pem-leakage", 1)
SUMMARY_FORMAT = ("p2pem-leakage-summary", 1)

#: A pdmm-sp run whose exact leakage exceeds the floor by more than this is flagged.
FLOOR_SLACK_BITS = 0.01

#: Below this cross-fitted R^2, a nonlinear multi-dimensional view is also estimated whole.
R2_LOW = 0.5

#: An estimate above this fraction of the full-disclosure ceiling is taken as full disclosure.
SATURATED = 0.95

#: Largest reduced view the full-view KSG fallback is run on (KSG degrades with dimension).
MAX_FULL_VIEW_DIMS = 8

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
        for m in outcome.trace or []:
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
    """The leakage about one node, for one protocol run and adversary, per iteration.

    ``floor_bits`` and the entries of ``exact_bits`` are ``math.inf`` for exact disclosure;
    ``exact_bits`` is None when the view is not linear in the latents.  ``protocol`` is the
    protocol's name, ``label`` tells runs of the same protocol apart and ``params`` holds
    the parameters it ran with.
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
    floor_bits: float | None
    floor: str
    label: str = ""
    params: dict = field(default_factory=dict)
    mi_bias_bits: tuple[float, ...] = ()
    mi_se_bits: tuple[float, ...] = ()
    estimator: tuple[str, ...] = ()
    r2: tuple[float, ...] = ()
    flags: tuple[str, ...] = ()
    perturbation_std: float | None = None
    perturbation_relative: float | None = None
    em_rel_err: float | None = None
    em_unconverged: int | None = None

    def to_json(self) -> dict:
        def finite(v: float | None) -> float | None:
            return None if v is None or math.isinf(v) else float(v)

        out = {
            "protocol": self.protocol,
            "label": self.label or self.protocol,
            "params": self.params,
            "adversary": self.adversary,
            "corrupt": list(self.corrupt),
            "node": self.node,
            "node_label": self.node_label,
            "iterations": list(self.iterations),
            "mi_bits": [float(v) for v in self.mi_bits],
            "mi_ci": [[float(lo), float(hi)] for lo, hi in self.mi_ci],
            "mi_bias_bits": [float(v) for v in self.mi_bias_bits],
            "mi_se_bits": [float(v) for v in self.mi_se_bits],
            "estimator": list(self.estimator),
            "r2": [float(v) for v in self.r2],
            "nmi": [float(v) for v in self.nmi],
            "floor_bits": finite(self.floor_bits),
            "floor": self.floor,
            "full_disclosure": self.floor_bits is not None and math.isinf(self.floor_bits),
            "exact_bits": None if self.exact_bits is None else [finite(v) for v in self.exact_bits],
            "exact_full_disclosure": None if self.exact_bits is None else [math.isinf(v) for v in self.exact_bits],
            "flags": list(self.flags),
        }
        if self.perturbation_std is not None:
            out["perturbation_std"] = self.perturbation_std
            out["perturbation_relative"] = self.perturbation_relative
        if self.em_rel_err is not None:
            out["em_rel_err"] = self.em_rel_err
            out["em_unconverged"] = self.em_unconverged
        return out


@dataclass(frozen=True)
class Estimate:
    """One leakage estimate (bits): bias-corrected value, interval, bias, error, method."""

    bits: float
    lo: float
    hi: float
    nmi: float
    bias: float
    se: float
    r2: float
    method: str


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

    def _linear(self, x: FloatArray, comps: FloatArray, rng: np.random.Generator) -> FloatArray:
        return estimate_reduction(x[:, 0], comps, rng=rng, folds=self.folds)

    def estimate(self, target: FloatArray, components: FloatArray, *, linear: bool = True) -> Estimate:
        """The leakage about ``target`` from the reduced view ``components``.

        The adversary's cross-fitted linear estimate of the target is refitted on every
        batch of the interval (:func:`~p2pem.leakage.estimators.mi_interval`).  When the
        view is not known to be linear in the latents (``linear=False``), has more than one
        component and the linear estimate explains less than :data:`R2_LOW` of the
        target's variance, the linear reduction may miss nonlinear leakage: KSG is also run
        on the whole reduced view (up to :data:`MAX_FULL_VIEW_DIMS` components) and the
        larger estimate is reported, with ``method`` saying which.
        """
        iv = mi_interval(target, components, k=self.k, rng=self.rng, n_batches=self.n_batches, level=self.level, reduce=self._linear)
        fitted = estimate_reduction(target, components, rng=self.rng, folds=self.folds)
        var = float(np.var(target))
        r2 = 1.0 - float(np.var(target - fitted)) / var if var > 0 else 0.0
        method = "linear reduction"
        if not linear and components.shape[1] > 1 and r2 < R2_LOW:
            if components.shape[1] <= MAX_FULL_VIEW_DIMS:
                whole = mi_interval(target, components, k=self.k, rng=self.rng, n_batches=self.n_batches, level=self.level)
                if whole.bits > iv.bits:
                    iv, method = whole, "full view"
                else:
                    method = "linear reduction (full view checked)"
            else:
                method = f"linear reduction (nonlinear view of {components.shape[1]} dimensions: may miss leakage)"
        ceiling = self.ceiling(target.shape[0])
        if iv.raw_bits >= SATURATED * ceiling:
            # full disclosure: the estimate sits at the estimator's ceiling, which grows like
            # log2(n); the 1/n bias model does not apply, so report the raw value alone
            return Estimate(iv.raw_bits, iv.raw_bits, iv.raw_bits, 1.0, 0.0, iv.se_bits, r2, method)
        nmi = min(iv.bits / ceiling, 1.0)
        return Estimate(iv.bits, iv.lo, iv.hi, nmi, iv.bias_bits, iv.se_bits, r2, method)


@dataclass
class Series:
    """One node's leakage over the analysed iterations."""

    estimates: list[Estimate] = field(default_factory=list)
    exact_bits: list[float] | None = field(default_factory=list)

    @property
    def mi_bits(self) -> list[float]:
        return [e.bits for e in self.estimates]

    @property
    def mi_ci(self) -> list[tuple[float, float]]:
        return [(e.lo, e.hi) for e in self.estimates]

    @property
    def nmi(self) -> list[float]:
        return [e.nmi for e in self.estimates]


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
    cache: dict[int | None, tuple[dict[int, Estimate], list[float] | None]] = {}
    for t in iterations:
        key = t if not mc.spec.exact else None
        if key not in cache:
            v = view.until(key)
            comps = principal_components(v)
            exact = exact_linear_mi(mc.latents, mc.latent_sd, v, list(targets))
            estimates = {}
            for i in targets:
                estimates[i] = estimator.estimate(mc.inputs[i], comps, linear=exact is not None)
                if step is not None:
                    step()
            cache[key] = (estimates, exact)
        elif step is not None:
            for _ in targets:
                step()
        estimates, exact = cache[key]
        for pos, i in enumerate(targets):
            s = out[i]
            s.estimates.append(estimates[i])
            if exact is None:
                s.exact_bits = None
            elif s.exact_bits is not None:
                s.exact_bits.append(exact[pos])
    return out


# ------------------------------------------------------------------------ the report


@dataclass(frozen=True, eq=False)
class ProtocolRun:
    """One protocol entry of the scenario as the analysis runs it.

    Attributes
    ----------
    spec : ProtocolSpec
        As given in the scenario (with a relative perturbation already scaled).
    label : str
        Unique among the scenario's runs, e.g. ``"pdmm-sp (std 1)"``.
    topology : Topology
        What the protocol runs on (secure-sum's ring included).
    disclosures : dict
        Per adversary kind, the lines of :func:`~p2pem.leakage.theory.disclosure_messages`.
    arcs : dict
        secure-sum only: per adversary kind, the honest arcs of the ring whose sums are
        disclosed (an arc of one node: its input).
    """

    spec: ProtocolSpec
    label: str
    topology: Topology
    disclosures: dict[str, list[str]]
    arcs: dict[str, list[list[int]]]

    def to_json(self) -> dict:
        out: dict = {"label": self.label, "protocol": self.spec.name, "params": _params(self.spec), "disclosures": self.disclosures}
        if self.topology.ring is not None:
            out["ring"] = list(self.topology.ring)
            out["arcs"] = self.arcs
        return out


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
    protocols: list[ProtocolRun] = field(default_factory=list)

    @property
    def iteration_runs(self) -> list[LeakageRun]:
        return [r for r in self.runs if r.em_rel_err is None]

    @property
    def sweep_runs(self) -> list[LeakageRun]:
        return [r for r in self.runs if r.em_rel_err is not None]

    def warnings(self) -> list[str]:
        seen: list[str] = []
        for p in self.protocols:
            for lines in p.disclosures.values():
                seen += [w for w in lines if w not in seen]
        for r in self.runs:
            seen += [f"{r.label} / {r.adversary}, node {r.node_label}: {f}" for f in r.flags]
        return seen

    def leakage_json(self) -> dict:
        """leakage.json: ``{"format", "version", "scenario", "runs": [...]}``."""
        fmt, version = LEAKAGE_FORMAT
        return {"format": fmt, "version": version, "scenario": self.scenario.name, "runs": [r.to_json() for r in self.runs]}

    def summary_json(self, *, extra_timings: dict[str, float] | None = None, wall_s: float | None = None) -> dict:
        """summary.json: settings, protocols (parameters, secure-sum's ring and arcs), warnings, timings.

        Parameters
        ----------
        extra_timings : dict, optional
            Steps timed outside the analysis (the command's set-up, writing, figures), added to
            ``timings_s`` so that the timings add up to ``wall_s``.
        wall_s : float, optional
            The wall time they add up to (default: the analysis's own).
        """
        from p2pem.runner import graph_summary, output_header

        cfg = self.config
        return {
            **output_header(SUMMARY_FORMAT, self.scenario),
            "graph": graph_summary(self.graph) | {"edges": sorted([sorted(e) for e in self.graph.edges])},
            "statistic": "responsibility-weighted first moment r x_i, X_i ~ N(0, 1), r = 1/n_components",
            "statistic_std": 1.0 / self.scenario.em.n_components,
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
                "perturbation": cfg.perturbation,
            },
            "protocols": [p.to_json() for p in self.protocols],
            "ceiling_bits": self.ceiling_bits,
            "honest_components": {
                kind: [list(c) for c in rep.components] for kind, rep in self.topology.items()
            },
            "warnings": self.warnings(),
            "wall_s": self.wall_s if wall_s is None else wall_s,
            "timings_s": self.timings | (extra_timings or {}),
        }


_SHORT = {"perturbation_std": "std"}


def _params(spec: ProtocolSpec) -> dict:
    return {k: v for k, v in spec.params().items() if isinstance(v, (int, float, str, bool)) or v is None}


def run_labels(specs: Sequence[ProtocolSpec]) -> list[str]:
    """Labels that tell the runs apart: ``"pdmm-sp (std 1)"`` beside ``"pdmm-sp (std 100)"``.

    A protocol that occurs once keeps its plain label; runs of the same protocol are
    suffixed with the parameters in which they differ (and a number if they differ in
    none).
    """
    base = [getattr(s, "label", s.name) for s in specs]
    params = [_params(s) for s in specs]
    labels = list(base)
    for name in set(base):
        same = [i for i, b in enumerate(base) if b == name]
        if len(same) < 2:
            continue
        keys = sorted({k for i in same for k in params[i]})
        differ = [k for k in keys if len({repr(params[i].get(k)) for i in same}) > 1]
        for n, i in enumerate(same, start=1):
            parts = [f"{_SHORT.get(k, k)} {params[i].get(k):g}" if isinstance(params[i].get(k), float) else f"{_SHORT.get(k, k)} {params[i].get(k)}" for k in differ]
            labels[i] = f"{name} ({', '.join(parts) if parts else f'#{n}'})"
    return labels


def prepare_protocols(scenario: Scenario, cfg: LeakageConfig, graph: nx.Graph) -> list[ProtocolRun]:
    """The scenario's network protocols, labelled, validated and with their disclosures.

    Raises
    ------
    ConfigError
        No network protocol, or a protocol that cannot run here; the message starts with
        the protocol's label (e.g. ``"secure-sum: the graph has no Hamiltonian cycle"``).
    """
    from p2pem.runner import protocols

    specs = [s for s in protocols(scenario) if not isinstance(s, Centralized)]
    if not specs:
        raise ConfigError(f"{scenario.path}: no network protocol to analyse")
    if cfg.perturbation == "relative":
        scale = 1.0 / scenario.em.n_components
        specs = [dataclasses.replace(s, perturbation_std=s.perturbation_std * scale) if isinstance(s, PdmmSP) else s for s in specs]
    out = []
    for spec, label in zip(specs, run_labels(specs), strict=True):
        try:
            run_spec = monte_carlo_spec(spec, cfg.iterations)
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
        out.append(ProtocolRun(spec, label, topology, disclosures, arcs))
    return out


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
    threadpoolctl is a declared dependency.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a declared dependency
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _analyse(scenario: Scenario, config: LeakageConfig | None, progress: ProgressFactory | None) -> LeakageReport:
    from p2pem.runner import build_graph

    t_start = time.perf_counter()
    cfg = parse_leakage(scenario) if config is None else config
    streams = scenario.streams()
    input_seq, est_seq = streams["montecarlo"].spawn(2)
    graph = build_graph(scenario)
    n = graph.number_of_nodes()
    prepared = prepare_protocols(scenario, cfg, graph)

    resp = 1.0 / scenario.em.n_components
    inputs = resp * np.random.default_rng(input_seq).standard_normal((n, cfg.runs))
    estimator = Estimator(cfg.k, cfg.n_batches, cfg.level, cfg.folds, np.random.default_rng(est_seq))
    ceiling = estimator.ceiling(cfg.runs)
    topo = {kind: topology_report(graph, make_adversary(kind, cfg).corrupt_nodes) for kind in cfg.adversaries}
    iterations = list(range(1, cfg.iterations + 1))
    timings: dict[str, float] = {"set-up (graph, protocols, estimator ceiling)": time.perf_counter() - t_start}
    runs: list[LeakageRun] = []

    for p in prepared:
        t0 = time.perf_counter()
        mc = monte_carlo(monte_carlo_spec(p.spec, cfg.iterations), graph, inputs, input_sd=resp, seed=streams["protocol"])
        timings[f"monte carlo: {p.label}"] = time.perf_counter() - t0
        for kind in cfg.adversaries:
            t0 = time.perf_counter()
            runs += _runs_for(mc, graph, kind, cfg, iterations, estimator, progress, label=p.label, spec=p.spec)
            timings[f"estimate: {p.label} / {kind}"] = time.perf_counter() - t0

    if cfg.sweep_std:
        runs += _sweep(scenario, cfg, graph, [p.spec for p in prepared], inputs, resp, estimator, progress, timings)

    return LeakageReport(scenario, cfg, graph, topo, runs, ceiling, time.perf_counter() - t_start, timings, prepared)


def _runs_for(
    mc: MonteCarlo,
    graph: nx.Graph,
    kind: str,
    cfg: LeakageConfig,
    iterations: list[int],
    estimator: Estimator,
    progress: ProgressFactory | None,
    *,
    label: str,
    spec: ProtocolSpec,
    accuracy: tuple[float, int] | None = None,
) -> list[LeakageRun]:
    has_server = any(m.sender == SERVER or SERVER in m.receivers for m in mc.trace)
    adversary = make_adversary(kind, cfg, has_server=has_server)
    view = build_view(mc.trace, adversary, inputs=mc.inputs, outputs=mc.outcome.results)
    n_units = len(cfg.targets) * len(iterations)
    step = None if progress is None else progress(f"{label} / {kind}", n_units)
    measured = measure(mc, view, cfg.targets, iterations, estimator, step=step)
    groups = disclosed_groups(mc.spec, mc.topology, graph, adversary)
    std = spec.perturbation_std if isinstance(spec, PdmmSP) else None
    scale = float(mc.latent_sd[0])  # the statistic's standard deviation r = 1/K
    out = []
    for i in cfg.targets:
        series = measured[i]
        est = series.estimates
        floor = closed_form_bits(groups, i)
        exact = None if series.exact_bits is None else tuple(series.exact_bits)
        out.append(
            LeakageRun(
                protocol=spec.name,
                adversary=kind,
                corrupt=tuple(sorted(adversary.corrupt)),
                node=i,
                node_label=cfg.label(i),
                iterations=tuple(iterations),
                mi_bits=tuple(series.mi_bits),
                mi_ci=tuple(series.mi_ci),
                nmi=tuple(series.nmi),
                exact_bits=exact,
                floor_bits=floor,
                floor=describe_group(groups, i, cfg.label),
                label=label,
                params=_params(spec),
                mi_bias_bits=tuple(e.bias for e in est),
                mi_se_bits=tuple(e.se for e in est),
                estimator=tuple(e.method for e in est),
                r2=tuple(e.r2 for e in est),
                flags=_floor_flags(spec, floor, exact, est[-1], scale),
                perturbation_std=std,
                perturbation_relative=None if std is None else std / scale,
                em_rel_err=None if accuracy is None else accuracy[0],
                em_unconverged=None if accuracy is None else accuracy[1],
            )
        )
    return out


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
    inputs: FloatArray,
    resp: float,
    estimator: Estimator,
    progress: ProgressFactory | None,
    timings: dict[str, float],
) -> list[LeakageRun]:
    """Leakage after the last analysed iteration and EM accuracy, per initial-dual std."""
    from p2pem.runner import em_settings
    from p2pem.builders import load_data
    from p2pem.simulate import max_relative_difference, run_protocol

    t0 = time.perf_counter()
    parts = load_data(scenario)
    settings = em_settings(scenario)
    reference = run_protocol(parts, graph, Centralized(), settings)
    streams = scenario.streams()
    timings["perturbation sweep: reference EM"] = time.perf_counter() - t0
    runs: list[LeakageRun] = []
    scale = resp if cfg.perturbation == "relative" else 1.0
    for spec in specs:
        if not isinstance(spec, PdmmSP):
            continue
        for value in cfg.sweep_std:
            t0 = time.perf_counter()
            swept = dataclasses.replace(spec, perturbation_std=value * scale)
            label = f"{getattr(swept, 'label', swept.name)} (std {swept.perturbation_std:g})"
            fit = run_protocol(parts, graph, swept, settings, seed=streams["protocol"])
            accuracy = (max_relative_difference(fit, reference), len(fit.unconverged_iterations))
            mc = monte_carlo(monte_carlo_spec(swept, cfg.iterations), graph, inputs, input_sd=resp, seed=streams["protocol"])
            for kind in cfg.adversaries:
                runs += _runs_for(
                    mc, graph, kind, cfg, [cfg.iterations], estimator, progress, label=label, spec=swept, accuracy=accuracy
                )
            timings[f"perturbation sweep: {label}"] = time.perf_counter() - t0
    return runs
