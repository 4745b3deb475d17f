"""Model choice through the private protocol: log-likelihood, AIC and BIC per family and number of components.

``p2pem select`` fits every (family, G) of a sweep to a scenario's data with one private
protocol (pdmm-sp by default) and compares the fits by the information criteria

    AIC = -2 L + 2 d,    BIC = -2 L + d log n,

with L the network's total log-likelihood of the final model (the last aggregation of the
run delivers it: every node learns it, nobody pools rows) and d the family's free parameters
(:meth:`~p2pem.families.base.MixtureFamily.n_parameters`; skew-normal:
G (2p + p(p+1)/2) + G - 1).  EM finds local maxima; as scikit-learn's ``n_init``, each
(family, G) is fitted from ``n_init`` private initialisations (public init seeds: the
scenario's, then children of its ``"init"`` stream) and the best log-likelihood is kept.
Everything a fit releases is what a run of the protocol releases, so a sweep of m fits
releases m runs' worth.

**Over a differentially private protocol** (``dp-central``, ``dp-distributed``, ``dp-msnm``:
Wu 2021's Table 2 compares DP fits by AIC and BIC) a run releases no log-likelihood, so each
fit pays for one more release: the network's total log-likelihood of the final (public,
noisy) model, every row's log-density clipped to the public range ``loglik_range`` (per row,
nats), with Laplace noise of scale (hi - lo) / ``loglik_epsilon`` (replacing a row, p2pem's
neighbouring relation, moves the clipped sum by at most hi - lo).  Every fit of the sweep sees the same rows, so
the budgets add up (sequential composition): the document's ``privacy`` block gives each
fit's epsilon and delta, the log-likelihood's, the number of fits and the totals, and lists
as public the row count (n of BIC) and the clipping range.  The information criteria and the
choice of the best restart are post-processing of those releases.

A skew-normal fit that reaches the boundary of its parameter space (|delta| -> 1, e.g. one
component on data it cannot otherwise follow) is recorded with ``boundary = true``: its
likelihood is a supremum approached, not a maximum.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from p2pem.builders import build_graph, build_protocols, em_settings, load_data
from p2pem.em import EMSettings
from p2pem.errors import ConfigError, ProtocolError
from p2pem.families import FAMILIES, make_family
from p2pem.parallel import Workers
from p2pem.registry import make_protocol
from p2pem.runner import output_header
from p2pem.scenario import Scenario
from p2pem.simulate import run_protocol
from p2pem.snmix import BoundaryWarning
from p2pem.streams import child, init_seed, scenario_streams

__all__ = ["SELECT_FORMAT", "SelectionRow", "parse_components", "run_selection"]

#: Format name and version of ``select.json``.
SELECT_FORMAT = ("p2pem-select", 1)


@dataclass(frozen=True)
class SelectionRow:
    """The best of ``n_init`` fits of one (family, G).

    ``loglik`` is the network's total log-likelihood of the final model, ``mean_loglik`` per
    row; ``restart`` says which initialisation gave it (0: the scenario's init seed).
    """

    family: str
    n_components: int
    loglik: float
    mean_loglik: float
    n_parameters: int
    aic: float
    bic: float
    n_iter: int
    converged: bool
    restart: int
    boundary: bool
    failed_restarts: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_components(text: str) -> list[int]:
    """``"1..5"``, ``"2,3,5"`` or ``"3"`` as a sorted list of component counts >= 1.

    Raises
    ------
    ConfigError
        Anything else (one line, naming the text).
    """
    values: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)\s*(?:\.\.|-)\s*(\d+)", part)
        if match:
            lo, hi = int(match[1]), int(match[2])
            if lo > hi:
                raise ConfigError(f"--components: range {part!r} runs backwards")
            values.update(range(lo, hi + 1))
        elif part.isdigit():
            values.add(int(part))
        else:
            raise ConfigError(f"--components must look like 1..5 or 2,3,4, got {text!r}")
    if not values or min(values) < 1:
        raise ConfigError(f"--components needs counts >= 1, got {text!r}")
    return sorted(values)


def _family(scenario: Scenario, name: str):
    """The scenario's own family when it has that name (its settings kept), else the default one.

    Raises
    ------
    ConfigError
        The family cannot fit the scenario's rows: a family of continuous rows for a table
        with categorical or binned columns, or ``mixed`` without a schema.
    """
    if scenario.em.family.name == name:
        return scenario.em.family
    encoding = scenario.data.encoding
    if encoding is not None and encoding.discrete:
        raise ConfigError(
            f"--families: {name!r} cannot fit the categorical or binned columns of {scenario.path.name} "
            f"({', '.join(c.name for c in encoding.discrete)}); such a table is fitted by the 'mixed' family"
        )
    if name == "mixed":
        raise ConfigError(f"--families: 'mixed' needs a public schema of the columns ([data] schema in {scenario.path.name})")
    return make_family(name)


def _protocol(scenario: Scenario, protocol: str | None):
    if protocol is not None:
        return make_protocol(protocol)
    for spec in build_protocols(scenario):
        if spec.name != "centralized":
            return spec
    return make_protocol("pdmm-sp")


def restart_seed(scenario: Scenario, restart: int) -> int:
    """Public init seed of restart ``restart``: the scenario's for 0, else ``child("init", restart)``'s first word."""
    streams = scenario.streams()
    return init_seed(streams) if restart == 0 else int(child(streams["init"], restart).generate_state(1)[0])


@dataclass(frozen=True)
class PrivateLoglik:
    """How a private fit's log-likelihood is released: clipping range per row and epsilon (module docstring)."""

    low: float
    high: float
    epsilon: float

    @property
    def scale(self) -> float:
        return (self.high - self.low) / self.epsilon  # replace-one: a row's clipped term moves by at most hi - lo


def _fit(parts, graph, spec, base: EMSettings, scenario_seed: int, private: PrivateLoglik | None, task) -> dict[str, Any] | None:  # noqa: ANN001
    """One fit of the selection, in whichever worker: what the table needs, or None when it failed.

    Every fit draws its protocol randomness from a fresh copy of the scenario's protocol stream
    (as a run of the scenario does), so a fit's numbers do not depend on the fits before it;
    a private fit's log-likelihood noise comes from the ``"montecarlo"`` stream's child for
    that (family, G, restart).
    """
    family, k, restart, seed = task
    settings = dataclasses.replace(base, n_components=k, family=family, init_seed=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run = run_protocol(parts, graph, spec, settings, seed=scenario_streams(scenario_seed)["protocol"])
        except ProtocolError:  # e.g. a collapsed component: this restart fails, the sweep goes on
            return None
    if private is None:
        mean_loglik = float(run.loglik[-1])
    else:
        # each node sums its rows' clipped log-densities under the released model; the sum gets the noise
        total = float(sum(np.clip(family.score_samples(p, run.params), private.low, private.high).sum() for p in parts))
        key = (list(FAMILIES).index(family.name), k, restart)
        rng = np.random.default_rng(child(scenario_streams(scenario_seed)["montecarlo"], *key))
        mean_loglik = (total + float(rng.laplace(0.0, private.scale))) / int(sum(len(p) for p in parts))
    return {
        "mean_loglik": mean_loglik,
        "n_iter": run.n_iter,
        "converged": run.converged,
        "boundary": any(issubclass(w.category, BoundaryWarning) for w in caught),
        "warnings": [str(w.message) for w in caught if not issubclass(w.category, BoundaryWarning)],
    }


def run_selection(
    scenario: Scenario,
    components: Sequence[int],
    families: Sequence[str],
    *,
    protocol: str | None = None,
    n_init: int = 1,
    progress: Callable[[str, int, int], None] | None = None,
    workers: Workers | None = None,
    loglik_epsilon: float | None = None,
    loglik_range: tuple[float, float] = (-30.0, 5.0),
) -> dict[str, Any]:
    """Fit every (family, G) through one protocol and return the ``select.json`` document.

    Parameters
    ----------
    scenario : Scenario
        Its data, graph, EM settings (``max_iter``, ``tol``, ``reg_covar``; its ``init`` is
        not used: every fit starts from the private initialisation) and seed.
    components : sequence of int
    families : sequence of str
        Names in :data:`p2pem.families.FAMILIES`.
    protocol : str, optional
        A protocol name; default: the scenario's first protocol other than ``centralized``.
    n_init : int
        Private initialisations per (family, G); the best final log-likelihood is kept.
    progress : callable(family, G, restart), optional
        Called as each fit ends.
    workers : p2pem.parallel.Workers, optional
        Where the fits run (each from its own public seeds: the same numbers wherever they
        run); default here.
    loglik_epsilon : float, optional
        A private protocol's log-likelihood release per fit (module docstring); default a
        tenth of the protocol's epsilon.
    loglik_range : (float, float)
        Public clipping range of one row's log-density for that release (nats).

    Returns
    -------
    dict
        ``format`` / ``version`` (:data:`SELECT_FORMAT`), the scenario header, ``protocol``,
        ``n_rows``, ``n_init``, ``rows`` (:class:`SelectionRow` as JSON, families in the
        given order, G ascending) and ``best``: per family the G of smallest BIC and of
        smallest AIC, and overall the (family, G) of smallest BIC.

    Raises
    ------
    ConfigError
        An unknown family (with "did you mean"), ``n_init`` < 1, a private protocol that
        needs a fixed number of iterations while the scenario has ``tol`` > 0, or a private
        protocol with no noise (epsilon = inf) or a bad ``loglik_epsilon`` / ``loglik_range``.
    """
    if not isinstance(n_init, int) or n_init < 1:
        raise ConfigError(f"--n-init must be a positive integer, got {n_init!r}")
    fams = [_family(scenario, name) for name in families]
    spec = _protocol(scenario, protocol)
    private: PrivateLoglik | None = None
    if hasattr(spec, "epsilon"):  # dp-central, dp-distributed, dp-msnm: each fit pays for its log-likelihood
        epsilon = float(spec.epsilon)
        if not math.isfinite(epsilon):
            raise ConfigError(f"{spec.name}: epsilon = inf adds no noise: compare exact fits with pdmm-sp, secure-sum or federated (--protocol)")
        ll_eps = epsilon / 10 if loglik_epsilon is None else float(loglik_epsilon)
        if not (math.isfinite(ll_eps) and ll_eps > 0):
            raise ConfigError(f"--loglik-epsilon must be a finite number > 0, got {loglik_epsilon!r}")
        low, high = (float(v) for v in loglik_range)
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ConfigError(f"--loglik-range must be two finite numbers LO < HI, got {loglik_range!r}")
        private = PrivateLoglik(low, high, ll_eps)
    parts = load_data(scenario)
    n_rows = int(sum(len(p) for p in parts))
    d = int(parts[0].shape[1])
    g = build_graph(scenario)
    spec.validate(g)
    base = dataclasses.replace(em_settings(scenario), init=None)
    rows: list[SelectionRow] = []
    t0 = time.perf_counter()
    tasks = [(family, k, restart, restart_seed(scenario, restart)) for family in fams for k in components for restart in range(n_init)]

    def step(done: int, total: int) -> None:
        if progress is not None:
            family, k, restart, _ = tasks[done - 1]
            progress(family.name, k, restart)

    if private is not None:
        spec.check_settings(dataclasses.replace(base, family=fams[0]))  # e.g. tol > 0: one line before any fit
    fit = functools.partial(_fit, parts, g, spec, base, scenario.seed, private)
    fits = (workers or Workers()).map(fit, tasks, progress=step)
    for text in dict.fromkeys(t for f in fits if f is not None for t in f["warnings"]):  # each once, here
        warnings.warn(text, UserWarning, stacklevel=2)
    for i, family in enumerate(fams):
        for j, k in enumerate(components):
            restarts = fits[(i * len(components) + j) * n_init:][:n_init]
            ok = [(f, restart) for restart, f in enumerate(restarts) if f is not None]
            if not ok:
                raise ProtocolError(f"every initialisation of {family.name} with {k} components failed (a component collapsed): drop that count")
            best, restart = max(ok, key=lambda pair: (pair[0]["mean_loglik"], -pair[1]))  # the first of equal ones
            total = best["mean_loglik"] * n_rows
            n_par = family.n_parameters(k, d)
            rows.append(
                SelectionRow(
                    family=family.name,
                    n_components=k,
                    loglik=total,
                    mean_loglik=best["mean_loglik"],
                    n_parameters=n_par,
                    aic=-2 * total + 2 * n_par,
                    bic=-2 * total + n_par * math.log(n_rows),
                    n_iter=best["n_iter"],
                    converged=best["converged"],
                    restart=restart,
                    boundary=best["boundary"],
                    failed_restarts=n_init - len(ok),
                )
            )
    best_by_family = {}
    for family in fams:
        mine = [r for r in rows if r.family == family.name]
        best_by_family[family.name] = {
            "bic": min(mine, key=lambda r: r.bic).n_components,
            "aic": min(mine, key=lambda r: r.aic).n_components,
        }
    overall = min(rows, key=lambda r: r.bic)
    return {
        **output_header(SELECT_FORMAT, scenario),
        "protocol": getattr(spec, "label", spec.name),
        "protocol_params": spec.params(),
        "n_rows": n_rows,
        "n_features": d,
        "n_nodes": len(parts),
        "n_init": n_init,
        "em": {"max_iter": base.max_iter, "tol": base.tol, "reg_covar": base.reg_covar},
        "families": {f.name: f.describe() for f in fams},
        "rows": [r.to_json() for r in rows],
        "best": {"by_family": best_by_family, "bic": {"family": overall.family, "n_components": overall.n_components}},
        "wall_s": time.perf_counter() - t0,
        **({} if private is None else {"privacy": _privacy(spec, private, len(tasks))}),
    }


def _privacy(spec, private: PrivateLoglik, n_fits: int) -> dict[str, Any]:  # noqa: ANN001 - a private ProtocolSpec
    """The sweep's budget: every fit's run and log-likelihood release, composed sequentially over the fits."""
    epsilon, delta = float(spec.epsilon), float(getattr(spec, "delta", 0.0))
    claimed_only = spec.name == "dp-msnm"
    return {
        "accountant": "basic (sequential composition over the fits, which all see the same rows)",
        "epsilon_per_fit": epsilon,
        "delta_per_fit": delta,
        "loglik_epsilon": private.epsilon,
        "loglik_range": [private.low, private.high],
        "fits": n_fits,
        "epsilon_total": n_fits * (epsilon + private.epsilon),
        "delta_total": n_fits * delta,
        "public": ["n_rows", "n_features", "n_nodes", "loglik_range"],
        "excluded": [
            *(["the fits' epsilon is DP-MSNM's claim, not a guarantee (p2pem.dp.msnm)"] if claimed_only else []),
            "what each fit's own privacy block excludes (its protocol_params)",
        ],
    }


def known_families() -> str:
    """The family names, for help texts."""
    return ", ".join(FAMILIES)
