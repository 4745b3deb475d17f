"""The whole-run privacy analysis of a scenario: views, exact reduction, attacks, report.

For every network protocol of the scenario and every adversary (honest-but-curious corrupt
sets, the eavesdropper, both), :func:`analyse_whole_run` runs EM once on the scenario's real
data with traces recorded (:func:`p2pem.leakage.wholerun.record_whole_run`), reduces each
adversary's view to the group sums it determines, and attacks them: for each group of honest
nodes and each number T of EM iterations seen, :func:`p2pem.leakage.attack.reconstruct_rows`
fits the group's rows to the disclosed sums of aggregations 0..T given the public models.
One record per (protocol, adversary, corrupt set, honest node) holds the RMS distance of the
node's rows to their best-matching estimates and the fraction recovered within the
tolerance, next to the baseline of an adversary who only draws rows from the public model.

The exact reduction takes any model family's statistics vector (it is linear algebra on the
messages, whatever they carry).  The attack inverts the Gaussian family's statistics
(:mod:`p2pem.leakage.attack`): for another family (skew-normal) it is not run, and
``whole_run.json`` says so in its ``attack`` field; the disclosures are reported as always.

Settings come from the optional ``[leakage.whole_run]`` table of the scenario::

    [leakage.whole_run]
    corrupt_sets = [[1, 3], [0, 2]]     # honest-but-curious / both corrupt sets (default: leakage.corrupt)
    adversary = ["honest-but-curious", "eavesdropper", "both"]   # default: all three
    server_corrupt = true               # federated: the server joins every corrupt set
    iterations_seen = [0, 1, 2, 5, 10]  # EM iterations seen by the attack (0: the initialisation only)
    tolerance = 1e-3                    # a row counts as recovered within this distance (data units)
    starts = 3                          # random starts of the attack per group and T
    rank_check = true                   # rank structure check (default: graphs of <= 30 nodes)
    max_minutes = 30                    # refuse, with the estimate, an attack estimated to take longer

Every error names the file and the dotted key.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from p2pem.builders import build_graph, build_protocols, em_settings, load_data
from p2pem.errors import ConfigError
from p2pem.leakage.attack import match_rows, public_guess_error, reconstruct_rows
from p2pem.leakage.theory import topology_report
from p2pem.leakage.views import ADVERSARIES, Adversary
from p2pem.leakage.wholerun import WholeRunView, disclosure_rank, record_whole_run
from p2pem.messages import SERVER
from p2pem.parallel import Workers
from p2pem.protocols import PdmmSP, ProtocolSpec
from p2pem.scenario import Scenario
from p2pem.streams import child

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "WHOLE_RUN_FORMAT",
    "WHOLE_RUN_KEYS",
    "WholeRunConfig",
    "WholeRunReport",
    "analyse_whole_run",
    "parse_whole_run",
]

WHOLE_RUN_FORMAT = "p2pem-whole-run"
WHOLE_RUN_VERSION = 1
WHOLE_RUN_KEYS = ("corrupt_sets", "adversary", "server_corrupt", "iterations_seen", "tolerance", "starts", "rank_check", "max_minutes")

#: Attack budget by group size: (largest group rows, random starts (None: config.starts),
#: solver evaluations per start).  Bigger groups get fewer, shorter fits, so the whole
#: Parkinsons analysis stays within minutes: for them the numbers say what this budget
#: achieves, not that no attack could do better.
BUDGETS = ((10, None, 200), (40, 2, 80), (math.inf, 1, 10))
#: Why the attack is not run for a family other than the Gaussian one (whole_run.json's ``attack``).
ATTACK_GAUSSIAN_ONLY = (
    "the reconstruction attack fits rows to the Gaussian family's statistics; for this family only the exact reduction "
    "(the disclosed group sums, 'disclosures') is reported"
)
#: Default size limit (nodes) of the rank-structure check.
RANK_CHECK_NODES = 30

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class WholeRunConfig:
    """Validated ``[leakage.whole_run]`` settings (see the module docstring)."""

    corrupt_sets: tuple[tuple[int, ...], ...] = ()
    adversaries: tuple[str, ...] = ADVERSARIES
    server_corrupt: bool = True
    iterations_seen: tuple[int, ...] = (0, 1, 2, 5, 10, 20, 50, 100)
    tolerance: float = 1e-3
    starts: int = 3
    rank_check: bool | None = None
    max_minutes: float = 30.0


def _fail(where: str, key: str, message: str):
    raise ConfigError(f"{where}: 'leakage.whole_run.{key}' {message}")


def _int_list(where: str, key: str, value: Any, lo: int, hi: int | None) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        _fail(where, key, f"must be an array of integers, got {value!r}")
    for v in value:
        if v < lo or (hi is not None and v > hi):
            _fail(where, key, f"holds {v}, outside {lo}..{hi if hi is not None else ''}")
    if len(set(value)) != len(value):
        _fail(where, key, "names a value more than once")
    return tuple(sorted(value))


def _by_name(scenario: Scenario, key: str, values: Any) -> Any:
    """A list of node ids whose text entries are parties' names, as node ids (others unchanged)."""
    if not isinstance(values, list):
        return values
    out = []
    for v in values:
        if isinstance(v, str):
            i = scenario.node_index(v)
            if i is None:
                raise ConfigError(f"{scenario.path}: '{key}' holds {v!r}, not a party of the scenario (parties: "
                                  f"{', '.join(repr(str(p)) for p in (scenario.parties or ())[:12]) or 'none named'})")
            v = i
        out.append(v)
    return out


def parse_whole_run(scenario: Scenario) -> WholeRunConfig:
    """Validate ``scenario.leakage["whole_run"]`` (all keys optional) into a WholeRunConfig.

    Raises
    ------
    ConfigError
        One line naming the file and the dotted key.
    """
    where = str(scenario.path)
    leak = scenario.leakage or {}
    raw: Mapping[str, Any] = leak.get("whole_run", {})
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: 'leakage.whole_run' must be a table")
    unknown = [k for k in raw if k not in WHOLE_RUN_KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown key 'leakage.whole_run.{unknown[0]}' (known: {', '.join(WHOLE_RUN_KEYS)})")
    n = scenario.graph.n_nodes
    adv = raw.get("adversary", list(ADVERSARIES))
    if isinstance(adv, str):
        adv = [adv]
    if not (isinstance(adv, list) and adv and all(a in ADVERSARIES for a in adv)) or len(set(adv)) != len(adv):
        _fail(where, "adversary", f"must be distinct names from {', '.join(map(repr, ADVERSARIES))}, got {adv!r}")
    if "corrupt_sets" in raw:
        sets = raw["corrupt_sets"]
        if not isinstance(sets, list) or not sets:
            _fail(where, "corrupt_sets", f"must be a non-empty array of arrays of node ids, got {sets!r}")
        corrupt = tuple(_int_list(where, "corrupt_sets", _by_name(scenario, "leakage.whole_run.corrupt_sets", s), 0, n - 1) for s in sets)
    elif leak.get("corrupt"):
        base = _by_name(scenario, "leakage.corrupt", leak["corrupt"])
        if not (isinstance(base, list) and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n for v in base)):
            raise ConfigError(f"{where}: 'leakage.corrupt' must be an array of node ids 0..{n - 1}, got {base!r}")
        corrupt = (tuple(sorted(set(base))),)
    else:
        corrupt = ()
    for s in corrupt:
        if not s:
            _fail(where, "corrupt_sets", "holds an empty set")
        if len(s) >= n:
            _fail(where, "corrupt_sets", "holds a set that leaves no honest node")
    if any(a != "eavesdropper" for a in adv) and not corrupt:
        _fail(where, "corrupt_sets", "is needed for the honest-but-curious and both adversaries (or set leakage.corrupt)")
    server = raw.get("server_corrupt", leak.get("server_corrupt", True))
    if not isinstance(server, bool):
        _fail(where, "server_corrupt", f"must be true or false, got {server!r}")
    seen = _int_list(where, "iterations_seen", raw.get("iterations_seen", list(WholeRunConfig.iterations_seen)), 0, None)
    if not seen:
        _fail(where, "iterations_seen", "must name at least one iteration count")
    tol = raw.get("tolerance", 1e-3)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol <= 0:
        _fail(where, "tolerance", f"must be a number > 0, got {tol!r}")
    starts = raw.get("starts", 3)
    if isinstance(starts, bool) or not isinstance(starts, int) or starts < 1:
        _fail(where, "starts", f"must be an integer >= 1, got {starts!r}")
    rank = raw.get("rank_check")
    if rank is not None and not isinstance(rank, bool):
        _fail(where, "rank_check", f"must be true or false, got {rank!r}")
    limit = raw.get("max_minutes", 30.0)
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit <= 0:
        _fail(where, "max_minutes", f"must be a number of minutes > 0, got {limit!r}")
    return WholeRunConfig(corrupt, tuple(adv), server, seen, float(tol), starts, rank, float(limit))


# ------------------------------------------------------------------------ the analysis


@dataclass(frozen=True)
class NodeRecord:
    """What the attack achieves against one honest node (one ``runs`` entry of whole_run.json)."""

    protocol: str
    adversary: str
    corrupt: tuple[int, ...]
    server_corrupt: bool
    node: int
    rows: int
    group: tuple[int, ...]
    group_rows: int
    iterations_seen: tuple[int, ...]
    reconstruction_error: tuple[float, ...]
    rows_recovered: tuple[float, ...]
    baseline_error: float
    baseline_recovered: float
    reduction_error: float

    def to_json(self) -> dict:
        return {
            "protocol": self.protocol,
            "adversary": self.adversary,
            "corrupt": list(self.corrupt),
            "server_corrupt": self.server_corrupt,
            "node": self.node,
            "rows": self.rows,
            "disclosed_group": list(self.group),
            "group_rows": self.group_rows,
            "attributable": len(self.group) == 1,
            "iterations_seen": list(self.iterations_seen),
            "reconstruction_error": list(self.reconstruction_error),
            "rows_recovered": list(self.rows_recovered),
            "baseline_error": self.baseline_error,
            "baseline_recovered": self.baseline_recovered,
            "reduction_error": self.reduction_error,
        }


@dataclass
class WholeRunReport:
    """Everything :func:`analyse_whole_run` measured; :meth:`to_json` is whole_run.json."""

    scenario: str
    config: WholeRunConfig
    n_nodes: int
    n_rows: int
    n_features: int
    n_components: int
    records: list[NodeRecord] = field(default_factory=list)
    disclosures: list[dict] = field(default_factory=list)
    protocols: list[dict] = field(default_factory=list)
    family: dict = field(default_factory=lambda: {"name": "gaussian"})
    #: None when the attack ran; else why not
    attack_skipped: str | None = None
    #: the parties' names of nodes 0..n-1 (the scenario's), None when the nodes are only numbered
    parties: list | None = None

    def to_json(self) -> dict:
        return {
            "format": WHOLE_RUN_FORMAT,
            "version": WHOLE_RUN_VERSION,
            "scenario": self.scenario,
            "parties": self.parties,
            "family": self.family,
            "attack": "run" if self.attack_skipped is None else f"not run: {self.attack_skipped}",
            "n_nodes": self.n_nodes,
            "n_rows": self.n_rows,
            "n_features": self.n_features,
            "n_components": self.n_components,
            "tolerance": self.config.tolerance,
            "error_units": "data units (after the scenario's standardisation / PCA)",
            "protocols": self.protocols,
            "disclosures": self.disclosures,
            "runs": [r.to_json() for r in self.records],
        }


def _schedule(spec: ProtocolSpec, graph: nx.Graph) -> dict | None:
    """pdmm-sp's schedule as this whole run ran it (the run itself: a real run's), or None."""
    inner = getattr(spec, "inner", spec)  # dp-distributed sums with its inner protocol
    if not isinstance(inner, PdmmSP):
        return None
    resolved = inner.resolved_params(inner.topology(graph))
    stop_round = resolved.get("stop_round")
    return {"schedule": resolved["accel"], "stop": "public round" if stop_round is not None else "adaptive", "stop_round": stop_round}


def adversaries_for(spec_name: str, config: WholeRunConfig) -> list[Adversary]:
    """The adversaries analysed for one protocol: one per (kind, corrupt set)."""
    out = []
    for kind in config.adversaries:
        if kind == "eavesdropper":
            out.append(Adversary(kind))
            continue
        for s in config.corrupt_sets:
            corrupt = set(s)
            if spec_name in ("federated", "dp-central") and config.server_corrupt:  # protocols with a server
                corrupt.add(SERVER)
            out.append(Adversary(kind, frozenset(corrupt)))
    return out


def attack_group(
    view: WholeRunView,
    group_index: int,
    rows: np.ndarray,
    iterations_seen: tuple[int, ...],
    *,
    rng: np.random.Generator,
    starts: int,
) -> list[np.ndarray]:
    """Per T in ``iterations_seen``: the distance of each of the group's true rows to its matched estimate.

    The attack sees the group sums of aggregations 0..T (the continue flag dropped: it
    counts nodes, not rows) and the public models they were computed at.
    """
    return _attack([view.observations(group_index, t) for t in iterations_seen], rows, rng=rng, starts=starts)


def _attack(observed: list[list[Any]], rows: np.ndarray, *, rng: np.random.Generator, starts: int) -> list[np.ndarray]:
    """:func:`attack_group` on the observations of each T, gathered beforehand."""
    m = rows.shape[0]
    _, n_starts, nfev = next(b for b in BUDGETS if m <= b[0])
    n_starts = n_starts or starts
    out = []
    previous = None
    for obs in observed:
        if not obs:
            out.append(np.full(m, np.nan))
            continue
        # the fit to fewer aggregations is the first start: once the rows are found, every
        # later aggregation is consistent with them and the fit stops at once
        fit = reconstruct_rows(obs, m, rng=rng, starts=n_starts, max_nfev=nfev, initial=previous)
        previous = fit.rows
        out.append(match_rows(rows, fit.rows))
    return out


@dataclass(frozen=True, eq=False)
class _GroupAttack:
    """One group's attack as a task a worker can run: what the adversary observed, the true rows, the seed."""

    observed: list[list[Any]]
    rows: np.ndarray
    seed: np.random.SeedSequence
    starts: int
    final: Any

    def run(self) -> list[np.ndarray]:
        """The distances per T, then the public-guess baseline's (one stream, as before: attack first)."""
        rng = np.random.default_rng(self.seed)
        dists = _attack(self.observed, self.rows, rng=rng, starts=self.starts)
        return [*dists, public_guess_error(self.final, self.rows, rng=rng)]


def _run_attack(task: _GroupAttack) -> list[np.ndarray]:
    return task.run()


def _attack_tasks(views: list[WholeRunView], parts: list[np.ndarray], seen: tuple[int, ...], seed: np.random.SeedSequence,
                  starts: int) -> dict[tuple[int, ...], _GroupAttack]:
    """Every group disclosed to any adversary of one protocol, attacked once, as one task."""
    tasks: dict[tuple[int, ...], _GroupAttack] = {}
    for view in views:
        for k, group in enumerate(view.groups):
            if group not in tasks:
                rows = _group_rows(parts, group, view.data_bound)
                assert view.final is not None  # record_whole_run sets it at the end of the run
                tasks[group] = _GroupAttack([view.observations(k, t) for t in seen], rows, child(seed, *group), starts, view.final)
    return tasks


def estimate_whole_run(scenario: Scenario, config: WholeRunConfig | None = None) -> dict[str, float]:
    """Estimate of each protocol's attack SVD time (seconds, here and now; :func:`attack_seconds`), without attacking:
    the EM runs are recorded (cheap), the attacks' solves counted (:func:`attack_solves`) and
    priced by one timed SVD (:func:`svd_seconds_per_unit`)."""
    config = config or parse_whole_run(scenario)
    parts, graph, settings = load_data(scenario), build_graph(scenario), em_settings(scenario)
    per_unit = svd_seconds_per_unit()
    out = {}
    for spec in build_protocols(scenario):
        if spec.name == "centralized" or getattr(spec, "asynchronous", False):
            continue
        views = record_whole_run(parts, graph, spec, settings, adversaries_for(spec.name, config), seed=scenario.streams()["protocol"])
        last = views[0].iterations[-1]
        seen = tuple(sorted({min(t, last) for t in config.iterations_seen if t >= views[0].iterations[0]})) or (last,)
        tasks = _attack_tasks(views, parts, seen, np.random.SeedSequence(0), config.starts)
        out[views[0].protocol] = attack_seconds(attack_solves(list(tasks.values())), per_unit)
    return out


def attack_solves(tasks: list[_GroupAttack]) -> list[tuple[int, int, int]]:
    """The least-squares solves the attacks may run, as ``(residuals, unknowns, evaluations)``:
    per group and T, at most starts x max_nfev trust-region steps, each one SVD of the
    Jacobian (``scipy.optimize.least_squares``' exact ``trf`` solver), which is what the time goes to."""
    out = []
    for task in tasks:
        m, d = task.rows.shape
        _, n_starts, nfev = next(b for b in BUDGETS if m <= b[0])
        for obs in task.observed:
            if obs:
                out.append((int(sum(np.size(o.sums) for o in obs)), m * d, (n_starts or task.starts) * nfev))
    return out


def svd_seconds_per_unit(*, rng: np.random.Generator | None = None) -> float:
    """Seconds per unit of :func:`attack_seconds`' cost model (``max(r, u) min(r, u)^2``),
    measured here and now on one SVD of a 1200 x 600 matrix (this machine, its load, its BLAS)."""
    from scipy.linalg import svd

    a = (rng or np.random.default_rng(0)).normal(size=(1200, 600))
    t0 = time.perf_counter()
    svd(a, full_matrices=False)
    return (time.perf_counter() - t0) / (1200 * 600**2)


def attack_seconds(solves: list[tuple[int, int, int]], per_unit: float) -> float:
    """Estimate of the attacks' SVD time, every solve running its evaluations to the end: the
    term that dominates a large attack (93 % of a 13-feature group's time in a profile); a small
    attack's fixed costs (Jacobians, matching, the baseline) are left out, so there the measured
    time is well above it (``sim/bench_wholerun_scaling.py`` prints both)."""
    return float(sum(e * max(r, u) * min(r, u) ** 2 for r, u, e in solves) * per_unit)


def analyse_whole_run(
    scenario: Scenario, config: WholeRunConfig | None = None, *, progress: Progress | None = None, workers: Workers | None = None
) -> WholeRunReport:
    """Run the whole-run analysis of ``scenario`` (see the module docstring).

    Parameters
    ----------
    scenario : Scenario
    config : WholeRunConfig, optional
        Default: :func:`parse_whole_run` of the scenario.
    progress : callable(label, done, total), optional
    workers : p2pem.parallel.Workers, optional
        Where the attacks run (one task per disclosed group and protocol, each with its own
        seed: the same numbers wherever they run); default here.

    Returns
    -------
    WholeRunReport

    Notes
    -----
    Cost: one EM run per protocol with traces (the vectorised engine's work plus the
    reduction, linear in the observed messages), then one attack per (protocol, disclosed
    group, T) -- groups disclosed to several adversaries are attacked once.
    """
    config = config or parse_whole_run(scenario)
    workers = workers or Workers()
    parts = load_data(scenario)
    graph = build_graph(scenario)
    settings = em_settings(scenario)
    specs = [s for s in build_protocols(scenario) if s.name != "centralized" and not getattr(s, "asynchronous", False)]
    if not specs:
        raise ConfigError(f"{scenario.path}: no synchronous network protocol to analyse")
    n = len(parts)
    report = WholeRunReport(scenario.name, config, n, int(sum(len(p) for p in parts)), int(parts[0].shape[1]), settings.n_components,
                            family=settings.family.describe(), attack_skipped=None if settings.family.name == "gaussian" else ATTACK_GAUSSIAN_ONLY,
                            parties=None if scenario.parties is None else list(scenario.parties))
    attack_ss = scenario.streams()["montecarlo"].spawn(2)[1]
    rank_on = config.rank_check if config.rank_check is not None else n <= RANK_CHECK_NODES
    for p_index, spec in enumerate(specs):
        advs = adversaries_for(spec.name, config)
        report_step = None
        if progress is not None:
            label = f"{spec.name}: EM run"

            def report_step(it: int, total: int, label=label) -> None:
                progress(label, it, total)

        t0 = time.perf_counter()
        views = record_whole_run(parts, graph, spec, settings, advs, seed=scenario.streams()["protocol"], progress=report_step)
        t_run = time.perf_counter() - t0
        last = views[0].iterations[-1]
        # T counts EM iterations seen; with a public init there is no aggregation 0 to see
        seen = tuple(sorted({min(t, last) for t in config.iterations_seen if t >= views[0].iterations[0]})) or (last,)
        report.protocols.append(
            {
                "protocol": views[0].protocol,
                "aggregations": len(views[0].iterations),
                "n_iter": len(views[0].loglik) - 1,
                "protocol_params": _json_safe(spec.params()),
                "final_loglik": None if math.isnan(views[0].loglik[-1]) else views[0].loglik[-1],  # private runs release none
                "max_rounds": max(views[0].rounds),
                "adversaries": len(views),
                "schedule": _schedule(spec, graph),
            }
        )
        tasks = _attack_tasks(views if report.attack_skipped is None else [], parts, seen, child(attack_ss, p_index), config.starts)

        estimate = attack_seconds(attack_solves(list(tasks.values())), svd_seconds_per_unit()) if tasks else 0.0
        if estimate > 60 * config.max_minutes:
            largest = max(t.rows.shape[0] for t in tasks.values())
            raise ConfigError(
                f"{scenario.path}: the whole-run attack on {spec.name} would take about {estimate / 60:.0f} min here "
                f"({len(tasks)} disclosed group(s) of up to {largest} rows x {parts[0].shape[1]} features, T = {', '.join(map(str, seen))}; "
                f"limit 'leakage.whole_run.max_minutes' = {config.max_minutes:g}): see fewer iterations "
                "('leakage.whole_run.iterations_seen'), fewer features ([data] pca), or raise max_minutes"
            )

        def step(done: int, total: int, name: str = spec.name, minutes: float = estimate / 60) -> None:
            if progress is not None:
                progress(f"{name}: attacks (~{minutes:.1f} min est.)", done, total)

        cache = dict(zip(tasks, workers.map(_run_attack, list(tasks.values()), progress=step), strict=True))
        for view in views:
            adv = view.adversary
            err = view.reduction_error()
            rank = None
            if rank_on and view.observe is None:  # a private run's rank structure is its aggregation's
                rank = disclosure_rank(spec, graph, adv, rounds=max(view.rounds), seed=scenario.streams()["montecarlo"]).to_json()
            corrupt = adv.corrupt_nodes
            server = SERVER in adv.corrupt
            report.disclosures.append(
                {
                    "protocol": view.protocol,
                    "adversary": adv.kind,
                    "corrupt": list(corrupt),
                    "server_corrupt": server,
                    "aggregations": len(view.iterations),
                    "messages_observed": int(sum(view.messages_observed)),
                    "quantities": "per aggregation (0: initialisation, t: E-step at the model of iteration t-1) and group: "
                    + ("sums of a_k, b_k, C_k, log-likelihood and continue flag (aggregation 0: count, sum x, sum x x^T)"
                       if settings.family.name == "gaussian" else f"the {settings.family.name} family's statistics vector, log-likelihood "
                       "and continue flag (aggregation 0: its initialisation moments)")
                    + "; every intermediate model is public",
                    "groups": [
                        {"nodes": list(g), "rows": view.rows[k], "max_reduction_error": float(err[:, k].max())}
                        for k, g in enumerate(view.groups)
                    ],
                    "rank_check": rank,
                    "topology_warnings": topology_report(graph, corrupt).warnings() if corrupt else [],
                }
            )
            for k, group in enumerate(view.groups):
                if report.attack_skipped is not None:
                    continue
                *dists, base = cache[group]
                offset = 0
                for node in group:
                    m = len(parts[node])
                    sl = slice(offset, offset + m)
                    offset += m
                    report.records.append(
                        NodeRecord(
                            protocol=view.protocol,
                            adversary=adv.kind,
                            corrupt=corrupt,
                            server_corrupt=server,
                            node=node,
                            rows=m,
                            group=group,
                            group_rows=view.rows[k],
                            iterations_seen=seen,
                            reconstruction_error=tuple(_rms(d[sl]) for d in dists),
                            rows_recovered=tuple(float(np.mean(d[sl] <= config.tolerance)) for d in dists),
                            baseline_error=_rms(base[sl]),
                            baseline_recovered=float(np.mean(base[sl] <= config.tolerance)),
                            reduction_error=float(err[:, k].max()),
                        )
                    )
        report.protocols[-1]["run_and_reduction_s"] = t_run
        report.protocols[-1]["attack_estimate_s"] = estimate
        report.protocols[-1]["attack_s"] = time.perf_counter() - t0 - t_run
        report.protocols[-1]["groups_attacked"] = len(cache)
    return report


def _group_rows(parts: list[np.ndarray], group: tuple[int, ...], data_bound: float | None) -> np.ndarray:
    """The group's true rows, in node order; a private run's statistics come from the clipped rows."""
    rows = np.vstack([parts[i] for i in group])
    return rows if data_bound is None else np.clip(rows, -data_bound, data_bound)


def _json_safe(params: dict) -> dict:
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in params.items()}


def _rms(d: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(d))))
