"""Measuring the leakage of a view: the KSG pipeline per target and iteration.

:class:`Estimator` holds the settings of the estimate (k, batches, level, folds) and its
random stream; :meth:`Estimator.estimate` reduces the view to the adversary's cross-fitted
linear estimate (:func:`p2pem.leakage.reduce.estimate_reduction`), runs the KSG interval on
it (:func:`p2pem.leakage.estimators.mi_interval`) and, for a view that is not linear in the
latents and whose linear estimate explains little, the whole reduced view as well.
:func:`measure` does that for every target over the analysed iterations, beside the exact
value from the view's linear structure (:func:`p2pem.leakage.reduce.exact_linear_mi`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from p2pem.leakage.estimators import full_disclosure_ceiling, mi_interval
from p2pem.leakage.montecarlo import MonteCarlo
from p2pem.leakage.reduce import estimate_reduction, exact_linear_mi, principal_components
from p2pem.leakage.views import View
from p2pem.parallel import Workers
from p2pem.streams import child

__all__ = ["MAX_FULL_VIEW_DIMS", "R2_LOW", "SATURATED", "Estimate", "Estimator", "Series", "measure", "single_threaded_blas"]

#: Below this cross-fitted R^2, a nonlinear multi-dimensional view is also estimated whole.
R2_LOW = 0.5

#: An estimate above this fraction of the full-disclosure ceiling is taken as full disclosure.
SATURATED = 0.95

#: Largest reduced view the full-view KSG fallback is run on (KSG degrades with dimension).
MAX_FULL_VIEW_DIMS = 8

FloatArray = npt.NDArray[np.float64]


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

    def estimate(self, target: FloatArray, components: FloatArray, *, linear: bool = True, rng: np.random.Generator | None = None) -> Estimate:
        """The leakage about ``target`` from the reduced view ``components``.

        The adversary's cross-fitted linear estimate of the target is refitted on every
        batch of the interval (:func:`~p2pem.leakage.estimators.mi_interval`).  When the
        view is not known to be linear in the latents (``linear=False``), has more than one
        component and the linear estimate explains less than :data:`R2_LOW` of the
        target's variance, the linear reduction may miss nonlinear leakage: KSG is also run
        on the whole reduced view (up to :data:`MAX_FULL_VIEW_DIMS` components) and the
        larger estimate is reported, with ``method`` saying which.  ``rng``: the estimate's
        own stream (folds, batches, tie-breaking); default the estimator's.
        """
        rng = self.rng if rng is None else rng
        iv = mi_interval(target, components, k=self.k, rng=rng, n_batches=self.n_batches, level=self.level, reduce=self._linear)
        fitted = estimate_reduction(target, components, rng=rng, folds=self.folds)
        var = float(np.var(target))
        r2 = 1.0 - float(np.var(target - fitted)) / var if var > 0 else 0.0
        method = "linear reduction"
        if not linear and components.shape[1] > 1 and r2 < R2_LOW:
            if components.shape[1] <= MAX_FULL_VIEW_DIMS:
                whole = mi_interval(target, components, k=self.k, rng=rng, n_batches=self.n_batches, level=self.level)
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
    stream: np.random.SeedSequence | None = None,
    workers: Workers | None = None,
    step: Callable[[], None] | None = None,
) -> dict[int, Series]:
    """The leakage about each target over ``iterations``.

    For an iterative protocol (pdmm-sp) the view after round t is measured at iteration t;
    an exact protocol completes in one iteration, so its whole view is measured once and
    repeated.  ``exact_bits`` is None when the view is not linear in ``mc.latents``.

    Every estimate draws from its own stream, ``child(stream, target, k)`` for the k-th
    measured view, so the estimates of one view are one task that ``workers`` may run
    anywhere (:class:`p2pem.parallel.Workers`) with the same result.  Without ``stream``,
    one is drawn from the estimator's generator.
    """
    if stream is None:
        stream = np.random.SeedSequence(int(estimator.rng.integers(2**63)))
    keys: list[int | None] = []
    for t in iterations:
        key = t if not mc.spec.exact else None
        if key not in keys:
            keys.append(key)
    tasks = []
    for index, key in enumerate(keys):
        v = view.until(key)
        with single_threaded_blas():
            comps = principal_components(v)
            exact = exact_linear_mi(mc.latents, mc.latent_sd, v, list(targets))
        seeds = [child(stream, i, index) for i in targets]
        tasks.append(_ViewEstimates(estimator, np.stack([mc.inputs[i] for i in targets]), comps, exact is not None, seeds, exact))

    def progress(done: int, total: int) -> None:
        if step is not None:
            for _ in targets:
                step()

    results = (workers or Workers()).map(_estimate_view, tasks, progress=progress)
    cache = dict(zip(keys, zip(results, (task.exact for task in tasks), strict=True), strict=True))
    out = {i: Series() for i in targets}
    for t in iterations:
        estimates, exact = cache[t if not mc.spec.exact else None]
        for pos, i in enumerate(targets):
            s = out[i]
            s.estimates.append(estimates[pos])
            if exact is None:
                s.exact_bits = None
            elif s.exact_bits is not None:
                s.exact_bits.append(exact[pos])
    return out


@dataclass(frozen=True, eq=False)
class _ViewEstimates:
    """The estimates about every target from one reduced view: a task any worker can run."""

    estimator: Estimator
    targets: FloatArray  # (n_targets, runs)
    components: FloatArray
    linear: bool
    seeds: list[np.random.SeedSequence]
    exact: list[float] | None


def _estimate_view(task: _ViewEstimates) -> list[Estimate]:
    with single_threaded_blas():
        return [
            task.estimator.estimate(target, task.components, linear=task.linear, rng=np.random.default_rng(seed))
            for target, seed in zip(task.targets, task.seeds, strict=True)
        ]


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run the many small SVDs and least-squares fits on one BLAS thread.

    They are far too small to gain from threads, and a multi-threaded OpenBLAS slows them
    down by an order of magnitude as soon as another process competes for the cores.
    threadpoolctl is a declared dependency.
    """
    with threadpool_limits(limits=1, user_api="blas"):
        yield
