"""What a leakage analysis produced, and the JSON a script reads back.

:class:`LeakageRun` is the leakage about one node, for one protocol run and adversary, per
iteration; :class:`ProtocolRun` one protocol entry of the scenario as the analysis runs it;
:class:`LeakageReport` everything, with ``leakage.json`` (:meth:`LeakageReport.leakage_json`)
and ``summary.json`` (:meth:`LeakageReport.summary_json`).  :func:`run_labels` names runs of
the same protocol apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx

from p2pem.leakage.config import LeakageConfig
from p2pem.leakage.inputs import Inputs
from p2pem.leakage.montecarlo import AnalysedSchedule
from p2pem.leakage.theory import TopologyReport
from p2pem.protocols import ProtocolSpec, Topology
from p2pem.runner import graph_summary, output_header
from p2pem.scenario import Scenario

__all__ = [
    "LEAKAGE_FORMAT",
    "SUMMARY_FORMAT",
    "LeakageReport",
    "LeakageRun",
    "ProtocolRun",
    "RunTimeEstimate",
    "SCOPE",
    "SCOPE_SHORT",
    "Skipped",
    "protocol_params",
    "run_labels",
]

#: Format name and version of leakage.json (an object with ``runs``) and summary.json.
LEAKAGE_FORMAT = ("p2pem-leakage", 2)
SUMMARY_FORMAT = ("p2pem-leakage-summary", 3)

#: What every leakage output says about its scope (the table, leakage.json, summary.json, the figure).
SCOPE = ("one aggregation: what the view of a single consensus (one EM iteration's statistics) discloses about a node's input. "
         "A whole EM run aggregates once per iteration, every time new equations about the same rows, and discloses far more "
         "(honest groups cut off by the corrupt nodes can be reconstructed exactly within a few iterations); "
         "measure a whole run with: p2pem leakage --whole-run SCENARIO --out DIR")
SCOPE_SHORT = "one aggregation shown; a whole EM run discloses far more: p2pem leakage --whole-run SCENARIO --out DIR"


@dataclass(frozen=True)
class LeakageRun:
    """The leakage about one node, for one protocol run and adversary, per round of one aggregation.

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
    rounds: tuple[int, ...]
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
            "rounds": list(self.rounds),
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
    analysed: AnalysedSchedule

    def to_json(self) -> dict:
        out: dict = {"label": self.label, "protocol": self.spec.name, "params": protocol_params(self.spec), "disclosures": self.disclosures,
                     "analysed": self.analysed.to_json()}
        if self.topology.ring is not None:
            out["ring"] = list(self.topology.ring)
            out["arcs"] = self.arcs
        return out


@dataclass(frozen=True)
class Skipped:
    """A protocol of the scenario the analysis does not run, and why."""

    label: str
    protocol: str
    reason: str

    def to_json(self) -> dict:
        return {"label": self.label, "protocol": self.protocol, "reason": self.reason}


@dataclass(frozen=True)
class RunTimeEstimate:
    """The predicted wall time of an analysis, and the work it counts."""

    seconds: float
    n_estimates: int
    n_views: int
    runs: int

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "estimates": self.n_estimates, "views": self.n_views, "runs": self.runs}

    def describe(self) -> str:
        if self.seconds < 1:
            shown = "less than a second"
        else:
            shown = f"about {self.seconds:.0f} s" if self.seconds < 120 else f"about {self.seconds / 60:.0f} min"
        return f"{shown} ({self.n_estimates} estimates on {self.n_views} views of {self.runs} runs)"


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
    inputs: Inputs | None = None
    skipped: list[Skipped] = field(default_factory=list)
    targets_note: str = ""
    estimate: RunTimeEstimate | None = None

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
        """leakage.json: ``{"format", "version", "scenario", "parties", "scope", "analysed", "runs": [...]}``.

        ``parties``: node ``i`` is ``parties[i]`` (None when the nodes are only numbered);
        ``scope`` says that one aggregation is analysed and how to measure a whole run;
        ``analysed`` names, per protocol label, the schedule and stop round the Monte Carlo ran
        (:class:`~p2pem.leakage.montecarlo.AnalysedSchedule`); each run's ``rounds`` are the
        rounds of that aggregation its leakage is given after.
        """
        fmt, version = LEAKAGE_FORMAT
        parties = self.scenario.parties
        return {"format": fmt, "version": version, "scenario": self.scenario.name, "parties": None if parties is None else list(parties),
                "scope": SCOPE, "analysed": {p.label: p.analysed.to_json() for p in self.protocols},
                "runs": [r.to_json() for r in self.runs]}

    def summary_json(self, *, extra_timings: dict[str, float] | None = None, wall_s: float | None = None) -> dict:
        """summary.json: settings, inputs, protocols (parameters, secure-sum's ring and arcs) and the
        skipped ones, warnings, the run-time estimate and timings.

        Parameters
        ----------
        extra_timings : dict, optional
            Steps timed outside the analysis (the command's set-up, writing, figures), added to
            ``timings_s`` so that the timings add up to ``wall_s``.
        wall_s : float, optional
            The wall time they add up to (default: the analysis's own).
        """
        cfg = self.config
        return {
            **output_header(SUMMARY_FORMAT, self.scenario),
            "scope": SCOPE,
            "graph": graph_summary(self.graph) | {"edges": sorted([sorted(e) for e in self.graph.edges])},
            "statistic": "responsibility-weighted first moment r x_i, X_i ~ N(0, 1), r = 1/n_components"
            if self.inputs is None or self.inputs.kind == "gaussian"
            else "responsibility-weighted first moment r * sum of one feature over the node's rows, r = 1/n_components",
            "statistic_std": 1.0 / self.scenario.em.n_components if self.inputs is None else self.inputs.scale,
            "inputs": None if self.inputs is None else self.inputs.to_json(),
            "settings": {
                "adversaries": list(cfg.adversaries),
                "corrupt": list(cfg.corrupt),
                "server_corrupt": cfg.server_corrupt,
                "targets": list(cfg.targets),
                "targets_chosen": self.targets_note,
                "inputs": cfg.inputs,
                "feature": cfg.feature,
                "runs": cfg.runs,
                "rounds": cfg.rounds,
                "k": cfg.k,
                "n_batches": cfg.n_batches,
                "level": cfg.level,
                "folds": cfg.folds,
                "node_labels": list(cfg.node_labels),
                "sweep_std": list(cfg.sweep_std),
                "perturbation": cfg.perturbation,
            },
            "protocols": [p.to_json() for p in self.protocols],
            "skipped": [p.to_json() for p in self.skipped],
            "ceiling_bits": self.ceiling_bits,
            "honest_components": {
                kind: [list(c) for c in rep.components] for kind, rep in self.topology.items()
            },
            "warnings": self.warnings(),
            "estimate": None if self.estimate is None else self.estimate.to_json(),
            "wall_s": self.wall_s if wall_s is None else wall_s,
            "timings_s": self.timings | (extra_timings or {}),
        }


_SHORT = {"perturbation_std": "std"}


def protocol_params(spec: ProtocolSpec) -> dict:
    """The protocol's scalar parameters, as the JSON records them."""
    return {k: v for k, v in spec.params().items() if isinstance(v, (int, float, str, bool)) or v is None}


def run_labels(specs: Sequence[ProtocolSpec]) -> list[str]:
    """Labels that tell the runs apart: ``"pdmm-sp (std 1)"`` beside ``"pdmm-sp (std 100)"``.

    A protocol that occurs once keeps its plain label; runs of the same protocol are
    suffixed with the parameters in which they differ (and a number if they differ in
    none).
    """
    base = [getattr(s, "label", s.name) for s in specs]
    params = [protocol_params(s) for s in specs]
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
