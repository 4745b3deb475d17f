"""The privacy-accuracy trade-off, side by side: ``p2pem tradeoff SCENARIO --out DIR``.

Every private protocol of the scenario (``dp-central``, ``dp-distributed``, the ``dp-msnm``
baseline) is run for every epsilon of the ``[tradeoff]`` grid and every seed; every
non-private protocol once per seed (its ``epsilon`` is null): all on the same training rows,
node split, graph and initial parameters, so the only differences are the protocol and its
noise.  With ``[tradeoff] families`` every protocol runs with each model family it fits
(``dp-msnm``: skew-normal only), each family with its own reference; a record names its
``family``.  A run that ends without a model (a component collapsed under the noise) is a
record with ``failed`` set; :func:`summarize` counts it as the worst result.

* Held-out rows: a ``test_fraction`` of the rows, drawn once from the scenario's
  ``"montecarlo"`` stream before anything is fitted and the rest is split over the nodes.
* Preprocessing: the scenario's public constants (``[data.public]``) if it gives them, else
  standardisation / PCA fitted on the *training* rows only (never the held-out ones) and
  listed in every private record's ``excluded`` as not covered by epsilon.
* Init: a private run draws its initial model from the private initialisation (paid from
  the init share of its split) unless the scenario gives ``em.init`` (public constants, then
  listed in ``excluded``); the non-private runs and the reference start from the
  centralized initialisation of the training rows (:func:`p2pem.gmm.init_from_global`).
* ``param_error``: :func:`p2pem.simulate.max_relative_difference` of the weights, component
  means and covariances to centralized EM from that init on the (unclipped) training rows,
  after matching components (:func:`matched_error`);
  ``heldout_loglik``: mean log-likelihood per held-out row.
* ``classify = "column"``: the private Bayes classifier (:mod:`p2pem.dp.bayes`), one mixture
  of ``class_components`` per class, fitted by the same protocol, epsilon and seed; its
  held-out error is ``heldout_error``.
* Privacy, per private record: ``epsilon_outsider`` and ``epsilon_colluders`` (under the
  protocol's accountant; ``colluders`` nodes: ``tolerate`` for dp-distributed),
  ``epsilon_spent`` under every accountant, and ``excluded``: what epsilon does not cover
  (:mod:`p2pem.dp.guarantees`).

Seed s of a protocol run is ``p2pem.streams.montecarlo_child(seed, 1, s)`` (a child of the
``"montecarlo"`` stream), the same for every protocol and epsilon (common random numbers).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from p2pem.builders import build_graph, build_protocols, em_settings, prepare_rows, split_prepared, validate_protocol
from p2pem.data import Preprocessing, fit_preprocessing, split_rows
from p2pem.dp.bayes import fit_bayes
from p2pem.dp.guarantees import check_public_preprocessing, preprocessing_excluded
from p2pem.dp.msnm import DPMSNM
from p2pem.dp.protocols import DPProtocol
from p2pem.em import EMSettings
from p2pem.errors import ConfigError, DataError, ProtocolError
from p2pem.families import MixtureFamily, make_family
from p2pem.families.skewnormal import SkewNormalFamily
from p2pem.gmm import FloatArray, init_from_global, init_statistics, relative_error
from p2pem.parallel import Workers
from p2pem.protocols import ProtocolSpec
from p2pem.registry import make_protocol
from p2pem.runner import output_header
from p2pem.scenario import Scenario, TradeoffConfig
from p2pem.simulate import run_protocol
from p2pem.snmix import BoundaryWarning
from p2pem.streams import montecarlo_child

log = logging.getLogger(__name__)

__all__ = ["FORMAT", "VERSION", "TradeoffConfig", "Workload", "build_workload", "run_tradeoff", "summarize", "tradeoff_figure"]

FORMAT = "p2pem-tradeoff"
#: Version 3: every record names its model ``family`` (a sweep may compare families), a run
#: that failed (a collapsed component) is a record with ``failed`` set and no model.
VERSION = 3


@dataclass(frozen=True, eq=False)
class Workload:
    """Everything the runs share: data, split, graph, settings, reference."""

    parts: list[FloatArray]
    X_test: FloatArray
    graph: Any
    settings: EMSettings
    reference: Any  # the family's single parameters
    seed: int
    classes: FloatArray | None = None
    class_parts: list[list[FloatArray]] | None = None
    class_settings: list[EMSettings] | None = None
    y_test: FloatArray | None = None
    #: what private runs start from: the private initialisation unless em.init is given
    private_settings: EMSettings | None = None
    private_class_settings: list[EMSettings] | None = None
    #: what the sweep itself leaves outside epsilon (the preprocessing), added to every private record
    excluded: tuple[str, ...] = ()
    preprocessing: str = "none"

    def settings_for(self, private: bool) -> EMSettings:
        return self.private_settings if private and self.private_settings is not None else self.settings

    def class_settings_for(self, private: bool) -> list[EMSettings] | None:
        return self.private_class_settings if private and self.private_class_settings is not None else self.class_settings


def build_workload(scenario: Scenario, family: MixtureFamily | None = None) -> Workload:
    """Held-out split, node split, graph, common init and the centralized reference of ``family``
    (default: the scenario's ``[em] family``)."""
    cfg = scenario.tradeoff or TradeoffConfig()
    family = family or scenario.em.family
    if scenario.em.tol != 0:
        raise ConfigError(f"{scenario.path}: 'em.tol' must be 0 for a trade-off (private runs have a fixed number of iterations)")
    data_rng = np.random.default_rng(scenario.streams()["data"])
    data = scenario.data
    fitted = data.public is None and (data.standardize or data.pca is not None)
    check_public_preprocessing(str(scenario.path), data.standardize, data.pca, data.public is not None, ["every private run of the sweep"])
    # the rows as read; a fitted preprocessing waits for the held-out split
    raw = dataclasses.replace(scenario, data=dataclasses.replace(data, standardize=False, pca=None)) if fitted else scenario
    X, labels = prepare_rows(raw, label_column=cfg.classify, rng=data_rng)
    test, train = held_out_split(scenario, len(X))
    if fitted:
        X = training_preprocessing(scenario, X[train]).apply(X)
    excluded = preprocessing_excluded(data.standardize, data.pca, "the training rows" if fitted else None)
    parts = split_prepared(scenario, X[train], data_rng, rows=train)
    graph = build_graph(scenario)
    base = dataclasses.replace(em_settings(scenario), family=family)
    if base.init is not None and family != scenario.em.family:
        base = dataclasses.replace(base, init=None)  # em.init is in the scenario family's parameters
    init = base.init or common_init(family, X[train], base.n_components, base.init_seed)
    settings = dataclasses.replace(base, init=init)
    reference = run_protocol(parts, graph, make_protocol("centralized"), settings).params
    how = "fitted on the training rows" if fitted else "public constants" if data.public is not None else "none"
    work = Workload(parts, X[test], graph, settings, reference, scenario.seed, private_settings=base, excluded=tuple(excluded), preprocessing=how)
    if labels is None:
        return work
    if family.name != "gaussian":
        raise ConfigError(f"{scenario.path}: 'tradeoff.classify': the private Bayes classifier uses Gaussian mixtures, not {family.name!r}")
    classes = np.unique(labels[train])
    class_rng = np.random.default_rng(montecarlo_child(scenario.seed, 2))
    class_parts, class_settings, private_class_settings = [], [], []
    for c in classes:
        Xc = X[train][labels[train] == c]
        if len(Xc) < scenario.graph.n_nodes:
            raise ConfigError(
                f"{scenario.path}: class {c:g} of '{cfg.classify}' has {len(Xc)} training rows, fewer than the "
                f"{scenario.graph.n_nodes} nodes (use fewer nodes)"
            )
        class_parts.append(split_rows(Xc, scenario.graph.n_nodes, how="even", rng=class_rng))
        k = cfg.class_components
        class_settings.append(
            dataclasses.replace(base, n_components=k, init=init_from_global(init_statistics(Xc), k, base.init_seed))
        )
        private_class_settings.append(dataclasses.replace(base, n_components=k, init=None))
    return dataclasses.replace(
        work, classes=classes, class_parts=class_parts, class_settings=class_settings, y_test=labels[test],
        private_class_settings=private_class_settings,
    )


def common_init(family: MixtureFamily, X: FloatArray, n_components: int, seed: int) -> Any:
    """The centralized initialisation of ``X`` in ``family`` (:meth:`~p2pem.families.base.MixtureFamily.init_from_global`
    of its pooled moments): what the non-private runs and the reference start from."""
    if family.name == "gaussian":  # the Gaussian family's as it always was (the same bits)
        return init_from_global(init_statistics(X), n_components, seed)
    stats = family.init_statistics(X, np.zeros(1, dtype=np.intp))
    return family.init_from_global(stats, n_components, seed).node(0)


def held_out_split(scenario: Scenario, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(held-out, training) row indices of the sweep, sorted: a ``test_fraction`` drawn once.

    Raises
    ------
    ConfigError
        Too few held-out or training rows for the nodes.
    """
    cfg = scenario.tradeoff or TradeoffConfig()
    order = np.random.default_rng(montecarlo_child(scenario.seed, 0)).permutation(n_rows)
    n_test = int(round(cfg.test_fraction * n_rows))
    if n_test < 1 or n_rows - n_test < scenario.graph.n_nodes:
        raise ConfigError(
            f"{scenario.path}: 'tradeoff.test_fraction' = {cfg.test_fraction} leaves {n_test} held-out and "
            f"{n_rows - n_test} training rows for {scenario.graph.n_nodes} nodes"
        )
    return np.sort(order[:n_test]), np.sort(order[n_test:])


def training_preprocessing(scenario: Scenario, X_train: FloatArray) -> Preprocessing:
    """The scenario's standardisation / PCA fitted on the training rows (:func:`p2pem.data.fit_preprocessing`).

    What a sweep without public constants applies to every row; ``sim/public_preprocessing.py``
    prints it as a ``[data.public]`` table to declare it public instead.
    """
    try:
        return fit_preprocessing(X_train, standardize=scenario.data.standardize, pca=scenario.data.pca)
    except DataError as exc:
        raise DataError(f"{scenario.path}: {exc}") from exc


def is_private(spec: ProtocolSpec) -> bool:
    """A protocol swept over the epsilon grid: dp-central, dp-distributed and the dp-msnm baseline."""
    return isinstance(spec, (DPProtocol, DPMSNM))


def applies(spec: ProtocolSpec, family: MixtureFamily) -> bool:
    """Whether ``spec`` fits ``family`` (dp-msnm fits skew-normal mixtures only)."""
    return not isinstance(spec, DPMSNM) or isinstance(family, SkewNormalFamily)


def run_one(work: Workload, spec: ProtocolSpec, epsilon: float | None, seed_index: int) -> dict:
    """One record of ``tradeoff.json``: ``spec`` at ``epsilon`` (None: non-private) with seed s."""
    t0 = time.perf_counter()
    private = epsilon is not None
    if private:
        spec = dataclasses.replace(cast(Any, spec), epsilon=epsilon)  # a DP protocol: it has epsilon
    seed = montecarlo_child(work.seed, 1, seed_index)
    settings = work.settings_for(private)
    family = settings.family
    record: dict[str, Any] = {
        "protocol": getattr(spec, "label", spec.name),
        "family": family.name,
        "epsilon": None if epsilon is None else float(epsilon),
        "seed": seed_index,
        "failed": None,
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BoundaryWarning)  # a noisy shape at the boundary: part of what the sweep measures
            run = run_protocol(work.parts, work.graph, spec, settings, seed=seed)
    except ProtocolError as exc:  # e.g. a component collapsed under the noise: no model to score
        privacy = spec.privacy() if isinstance(spec, DPMSNM) else None
        return {**record, "failed": str(exc), "heldout_loglik": None, "param_error": None, "heldout_error": None,
                "epsilon_outsider": None, "epsilon_colluders": None, "colluders": None, "epsilon_spent": None,
                "excluded": None if privacy is None else [*privacy["excluded"], *work.excluded], "wall_s": time.perf_counter() - t0}
    privacy = run.protocol_params.get("privacy")
    excluded = None if privacy is None else [*privacy["excluded"], *work.excluded]
    record |= {
        "heldout_loglik": float(family.score_samples(work.X_test, run.params).mean()),
        "param_error": matched_error(run.params, work.reference, family),
        "heldout_error": None,
        "epsilon_outsider": None if privacy is None else privacy["epsilon"]["outsider"],
        "epsilon_colluders": None if privacy is None else privacy["epsilon"]["colluders"],
        "colluders": None if privacy is None else privacy["colluders"],
        "epsilon_spent": run.protocol_params.get("epsilon_spent"),
        "excluded": excluded,
    }
    if work.class_parts is not None:
        assert work.classes is not None and work.X_test is not None and work.y_test is not None
        class_settings = work.class_settings_for(private)
        assert class_settings is not None
        model = fit_bayes(work.class_parts, work.classes, work.graph, spec, class_settings, seed=montecarlo_child(work.seed, 3, seed_index))
        record["heldout_error"] = model.error(work.X_test, work.y_test)
        if excluded is not None:
            excluded += model.excluded
    record["wall_s"] = time.perf_counter() - t0
    return record


def matched_error(params: Any, reference: Any, family: MixtureFamily | None = None) -> float:
    """:func:`p2pem.simulate.max_relative_difference` after matching components.

    Noise can make a private run end with its components in another order than the
    reference; the error is taken over the permutation of components that minimises it.
    The arrays compared are the weights and each component's mean and covariance (for the
    skew-normal family the derived ones: its shapes grow without bound near |delta| = 1,
    so a relative error of them says little), or the family's ``param_keys`` for a
    family without those.
    """
    moments = ("weights", "means", "covariances")
    keys = list(moments) if all(hasattr(params, k) for k in moments) else [key for key, _ in (family or make_family("gaussian")).param_keys]
    arrays = {key: np.asarray(getattr(params, key)) for key in keys}
    best = math.inf
    for perm in itertools.permutations(range(len(arrays[keys[0]]))):
        p = list(perm)
        best = min(best, max(relative_error(arrays[key][p], getattr(reference, key)) for key in keys))
    return best


def _task(works: dict[str, Workload], args: tuple[str, ProtocolSpec, float | None, int]) -> dict:
    """One run of the sweep, in whichever worker (module level: workers import it)."""
    family, spec, epsilon, seed_index = args
    return run_one(works[family], spec, epsilon, seed_index)


def run_tradeoff(
    scenario: Scenario, *, jobs: int = 1, workers: Workers | None = None, progress: Callable[[int, int], None] | None = None
) -> dict:
    """Run the sweep of a scenario and return the ``tradeoff.json`` document.

    Parameters
    ----------
    scenario : p2pem.scenario.Scenario
    jobs : int
        Local worker processes (1: run here); ignored when ``workers`` is given.
    workers : p2pem.parallel.Workers, optional
        Where the runs go (local processes or a dask cluster); every run draws from its own
        seed, so the records are the same bits wherever they run.
    progress : callable(done, total), optional

    Returns
    -------
    dict
        ``{"format", "version", "scenario", ..., "preprocessing", "private_init", "runs":
        [record, ...]}``; a record per (protocol, epsilon, seed) with ``protocol``,
        ``epsilon`` (null for non-private), ``seed``, ``heldout_loglik``, ``param_error``,
        ``heldout_error`` (null without ``classify``), ``epsilon_outsider``,
        ``epsilon_colluders`` and ``colluders`` (under the protocol's accountant),
        ``epsilon_spent`` (``{outsider, colluders}`` per accountant, at the protocol's
        delta), ``excluded`` (what epsilon does not cover; these five null for
        non-private runs) and ``wall_s``.
    """
    cfg = scenario.tradeoff or TradeoffConfig()
    specs = build_protocols(scenario)
    if not any(is_private(s) for s in specs):
        raise ConfigError(f"{scenario.path}: no private protocol to sweep: add a [[protocols]] entry named dp-central, dp-distributed or dp-msnm")
    families = [scenario.em.family if name == scenario.em.family.name else make_family(name) for name in cfg.families] if cfg.families \
        else [scenario.em.family]
    works = {f.name: build_workload(scenario, f) for f in families}
    tasks: list[tuple[str, ProtocolSpec, float | None, int]] = []
    for family in families:
        for spec in specs:
            if not applies(spec, family):
                continue
            grid = cfg.epsilons if is_private(spec) else (None,)
            n_seeds = 1 if spec.name == "centralized" else cfg.n_seeds
            tasks += [(family.name, spec, eps, s) for eps in grid for s in range(n_seeds)]
            # fail (and warn) before the sweep: bound, tol, graph, a family a protocol cannot fit
            spec.bind(works[family.name].settings_for(is_private(spec)), works[family.name].parts)
            if spec.name != "centralized":
                validate_protocol(scenario, works[family.name].graph, spec)
    if not any(is_private(spec) for _, spec, _, _ in tasks):
        raise ConfigError(f"{scenario.path}: no private protocol fits the families {', '.join(f.name for f in families)}")
    t0 = time.perf_counter()
    workers = workers or Workers(jobs=jobs)
    log.info("%s: %d runs on %s", scenario.name, len(tasks), workers.describe())
    records = workers.map(functools.partial(_task, works), tasks, progress=progress)
    work = works[families[0].name]
    return {
        **output_header((FORMAT, VERSION), scenario),
        "n_train": int(sum(len(p) for p in work.parts)),
        "n_test": int(len(work.X_test)),
        "n_nodes": len(work.parts),
        "epsilons": list(cfg.epsilons),
        "n_seeds": cfg.n_seeds,
        "classify": cfg.classify,
        "preprocessing": work.preprocessing,
        "private_init": work.settings_for(True).init is None,
        "families": [f.describe() for f in families],
        "protocols": [{"protocol": getattr(s, "label", s.name), "name": s.name, "params": _json_params(s)} for s in specs],
        "wall_s": time.perf_counter() - t0,
        "runs": records,
    }


def _json_params(spec: ProtocolSpec) -> dict:
    out = spec.params()
    return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in out.items()}


def summarize(doc: dict) -> list[dict]:
    """Per (protocol, family, epsilon) over seeds: mean, standard deviation, median and quartiles.

    The noisy runs are heavy tailed (one collapsed covariance costs thousands of nats), so
    the median and the interquartile range describe them better than mean and deviation.  A
    failed run (``failed``: no model) counts as the worst possible for the log-likelihood
    (minus infinity) and the parameter error (infinity); a statistic that is not finite is
    None, and ``failed`` counts the failed runs.
    """
    groups: dict[tuple[str, str, float | None], list[dict]] = {}
    for r in doc["runs"]:
        groups.setdefault((r["protocol"], r.get("family", "gaussian"), r["epsilon"]), []).append(r)
    worst = {"heldout_loglik": -math.inf, "param_error": math.inf, "heldout_error": 1.0}
    out = []
    for (proto, family, eps), runs in groups.items():
        row: dict[str, Any] = {"protocol": proto, "family": family, "epsilon": eps, "n": len(runs),
                               "failed": sum(1 for r in runs if r.get("failed"))}
        for key in ("epsilon_outsider", "epsilon_colluders", "colluders"):  # the same for every seed
            row[key] = next((r.get(key) for r in runs if not r.get("failed")), None)
        for key in ("heldout_loglik", "param_error", "heldout_error"):
            measured = [r[key] for r in runs if not r.get("failed") and r[key] is not None]
            vals = np.array(measured + ([worst[key]] * row["failed"] if measured or key != "heldout_error" else []), dtype=float)
            if not vals.size:
                row.update({key + suffix: None for suffix in ("", "_std", "_median", "_q25", "_q75")})
                continue
            finite = bool(np.all(np.isfinite(vals)))
            if finite:
                q25, q75 = np.quantile(vals, 0.25), np.quantile(vals, 0.75)
            else:  # a failed run (an infinity): order statistics, not mixtures of them
                q25, q75 = np.quantile(vals, 0.25, method="lower"), np.quantile(vals, 0.75, method="higher")
            values = {"": np.mean(vals) if finite else None, "_std": np.std(vals) if finite else None, "_median": np.median(vals),
                      "_q25": q25, "_q75": q75}
            for suffix, value in values.items():
                row[key + suffix] = None if value is None or not math.isfinite(value) else float(value)
        out.append(row)
    return out


def tradeoff_figure(doc: dict, path: Path) -> None:
    """Held-out log-likelihood, parameter error (and classification error) against epsilon.

    Private protocols: the median over seeds with the interquartile range as a band; the
    non-private ones: flat reference lines at their median.
    """
    import matplotlib  # here: start-up time (matplotlib loads only for a figure)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # here: after choosing the non-interactive backend

    from p2pem.plots import protocol_styles  # here: with matplotlib, as above

    rows = summarize(doc)
    keys = [("heldout_loglik", "held-out log-likelihood per row", False), ("param_error", "max relative parameter error", True)]
    if doc.get("classify"):
        keys.append(("heldout_error", f"held-out error ({doc['classify']})", False))
    several = len({r["family"] for r in rows}) > 1
    fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 4.6), squeeze=False)
    eps_finite = [e for e in doc["epsilons"] if e is not None]

    def name(r: dict) -> str:
        return f"{r['protocol']} · {r['family']}" if several else r["protocol"]

    private = sorted({(r["protocol"], r["family"]) for r in rows if r["epsilon"] is not None})
    public = [r for r in rows if r["epsilon"] is None]
    # one colour per line across the panels, none shared; a non-private protocol keeps its own
    styles = protocol_styles([*(name(r) if several and r["family"] != rows[0]["family"] else r["protocol"] for r in public),
                              *(name({"protocol": p, "family": f}) for p, f in private)])
    floor = 1e-16  # exact protocols: a parameter error of 0 is drawn here
    for ax, (key, label, log_y) in zip(axes[0], keys, strict=True):
        drawn: list[float] = []
        failed_at: list[tuple[str, np.ndarray]] = []
        for proto, family in private:
            pts = sorted((r for r in rows if (r["protocol"], r["family"]) == (proto, family) and r["epsilon"] is not None), key=lambda r: r["epsilon"])
            x = np.array([r["epsilon"] for r in pts])
            y = np.array([np.nan if r[key + "_median"] is None else r[key + "_median"] for r in pts], dtype=float)
            color = styles[name(pts[0])]["color"]
            ax.plot(x, y, marker="o", ms=3, color=color, label=name(pts[0]))
            q25 = np.array([np.nan if r[key + "_q25"] is None else r[key + "_q25"] for r in pts], dtype=float)
            q75 = np.array([np.nan if r[key + "_q75"] is None else r[key + "_q75"] for r in pts], dtype=float)
            ax.fill_between(x, q25, q75, color=color, alpha=0.15)
            failed_at.append((color, x[np.isnan(y)]))
            drawn += [*y, *q75]
        for r in public:
            if r[key] is not None:
                other = several and r["family"] != rows[0]["family"]
                look = styles[name(r) if other else r["protocol"]]
                dash: Any = (0, (1, 3)) if other else look.get("linestyle", "--")  # the other family's: dotted
                value = max(r[key + "_median"], floor) if log_y else r[key + "_median"]
                ax.axhline(value, color=look["color"], ls=dash, lw=1.2, label=f"{name(r)} (no DP)")
                drawn.append(value)
        ax.set_xscale("log")
        if log_y:
            ax.set_yscale("log")
            ax.set_ylim(bottom=floor / 3)
        elif key == "heldout_error":
            ax.set_ylim(0, 1)
        elif key == "heldout_loglik":
            # noisy covariances at the eigenvalue floor give log-likelihoods of -1e4 and below
            ax.set_yscale("symlog", linthresh=10.0)
            top = max((v for v in drawn if np.isfinite(v)), default=0.0)
            # no axis above the best value: with these data a log-likelihood above it does not occur
            ax.set_ylim(top=top / 2 if top < 0 else top * 2 + 1)
        if eps_finite:
            ax.set_xlim(min(eps_finite) / 1.2, max(eps_finite) * 1.2)
        bottom = ax.get_ylim()[0]
        for color, xs in failed_at:  # most runs failed (a collapsed component): marked at the bottom
            if xs.size:
                ax.plot(xs, np.full(xs.size, bottom), ls="none", marker="x", ms=6, color=color, clip_on=False)
        ax.set_xlabel("epsilon (whole run)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0][0].get_legend_handles_labels()
    # below the panels, where it covers no data
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3 if several else 4), fontsize=8 if not several else 7, frameon=False)
    fig.suptitle(
        f"{doc['scenario']}: {doc['n_train']} training rows on {doc['n_nodes']} nodes; median and interquartile range "
        f"over {doc['n_seeds']} seeds\n(exact protocols' error 0 drawn at 1e-16; x: most runs failed)",
        fontsize=10,
    )
    n_legend_rows = -(-len(labels) // min(max(len(labels), 1), 3 if several else 4))
    fig.tight_layout(rect=(0, 0.045 * n_legend_rows + 0.02, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
