"""Privacy budgets: how (epsilon, delta) is split over EM iterations and blocks, and what it costs.

A private EM run makes R releases: the three blocks of every one of its T iterations
(``weights``, ``means``, ``covariances``) and, when the initialisation is private, the three
init blocks once.  A *split* gives each kind of release a fraction of the budget; an EM
block's fraction is shared by its T iterations, the init fraction by the three init blocks.
An *accountant* then turns the total (epsilon, delta) into one noise scale per release:

``basic``
    Sequential composition (Dwork & Roth 2014, Thm. 3.16): release r gets
    ``(f_r epsilon, f_r delta)``; Laplace with ``b = L1 / (f_r epsilon)``, Gaussian with the
    analytic calibration of Balle & Wang (ICML 2018) for ``(f_r epsilon, f_r delta)``.
``zcdp``
    Zero-concentrated DP (Bun & Steinke, TCC 2016): the total rho with
    ``epsilon = rho + 2 sqrt(rho ln(1/delta))`` (their Prop. 1.3) is split as ``rho_r = f_r rho``;
    Gaussian ``sigma = L2 / sqrt(2 rho_r)`` (Prop. 1.6), Laplace via pure DP:
    epsilon_r-DP implies ``epsilon_r^2 / 2``-zCDP (Prop. 1.4).
``rdp``
    Renyi DP (Mironov, CSF 2017) with dp-accounting's :class:`RdpAccountant`: the noise
    multipliers ``z / sqrt(f_r)`` (Gaussian) or ``z / f_r`` (Laplace) keep the split, and
    the common ``z`` is found by bisection on the accountant's epsilon.

This is the composition across EM iterations of Park et al. (AISTATS 2017, Sec. 3: linear,
zCDP and moments accounting) with the per-parameter splits of Wu et al. (DPGMM).
:func:`spent` reports the epsilon of a calibrated plan under every accountant at the run's
delta, so the looseness of basic composition is visible next to the tight ones.

Besides the two noise mechanisms, :func:`spent` and :func:`spent_composed` account for the
exponential mechanism of a private selection (mechanism ``"exponential"``,
:func:`p2pem.dp.mechanisms.exponential_mechanism`): its "scale" is the Gumbel scale
``2 Delta u / epsilon_r`` of its report-noisy-max form, so one selection is
``2 Delta u / scale``-DP (pure; ``Block.l1`` holds Delta u).  Under zCDP it is
``epsilon_r^2 / 8``-zCDP, the bounded-range bound of Cesar & Rogers (ALT 2021, Lemma 3.2),
tighter than the ``epsilon_r^2 / 2`` of a generic pure-DP mechanism; the RDP accountant
receives that as a zCDP event.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from p2pem.dp.mechanisms import Block
from p2pem.errors import ConfigError

ACCOUNTANTS = ("basic", "zcdp", "rdp")

#: Named budget splits: fractions for (weights, means, covariances, init).
SPLITS: dict[str, tuple[float, float, float, float]] = {
    # Wu et al., DPGMM: 4 % weights, 16 % means, 70 % covariances, 10 % for the DP init
    "wu": (0.04, 0.16, 0.70, 0.10),
    # every parameter kind the same share
    "equal": (0.25, 0.25, 0.25, 0.25),
}
#: What the four fractions of a split pay for, in order.
SPLIT_BLOCKS = ("weights", "means", "covariances", "init")


def parse_split(split: str, presets: Mapping[str, tuple[float, ...]] = SPLITS, names: Sequence[str] | None = SPLIT_BLOCKS) -> tuple[float, ...]:
    """A preset name from ``presets``, or comma-separated fractions, each > 0.

    The fractions pay, in order, for ``names``: a model family's released block kinds, then
    the init (the Gaussian family's :data:`SPLIT_BLOCKS`; the mixed family's in
    :mod:`p2pem.dp.releases.mixed`); ``names = None`` accepts any number of at least two (a syntax
    check).  A zero fraction is refused rather than read as "release that block without
    noise" or "do not release it": every block of every iteration is released, so every
    block must be paid for.  The fractions need not sum to one (they are normalised).

    Raises
    ------
    ConfigError
        Unknown name, not one number per name, or a fraction that is zero, negative or not finite.
    """
    if split in presets:
        return presets[split]
    try:
        parts = tuple(float(v) for v in split.split(","))
    except ValueError:
        parts = ()
    if len(parts) < 2 if names is None else len(parts) != len(names):
        what = "comma-separated fractions" if names is None else f"{len(names)} fractions '{','.join(names)}'"
        raise ConfigError(f"'split' must be one of {', '.join(presets)} or {what}, got {split!r}")
    labels = list(names) if names is not None else [f"fraction {i + 1}" for i in range(len(parts))]
    bad = next((name for name, v in zip(labels, parts, strict=True) if not (math.isfinite(v) and v > 0)), None)
    if bad is not None:
        raise ConfigError(f"'split': the {bad} fraction must be a finite number > 0 (every released block is paid for), got {split!r}")
    return parts


@dataclass(frozen=True)
class Release:
    """One release of a run: a block, how often it repeats, and its share of the budget."""

    block: Block
    count: int  # T for EM blocks, 1 for init blocks
    share: float  # f_r of ONE release; sum over releases of count * share = 1


def releases(
    em_blocks: Sequence[Block], init_blocks: Sequence[Block], n_iter: int, split: tuple[float, ...], names: Sequence[str] = SPLIT_BLOCKS
) -> list[Release]:
    """The releases of a run with its split; shares renormalised over what is actually released.

    Each block is paid from the fraction of its kind (:attr:`p2pem.dp.mechanisms.Block.split_kind`),
    shared equally by the blocks of that kind; ``names`` says what the fractions of ``split``
    pay for, in order (the family's kinds, then "init":
    :attr:`p2pem.dp.releases.PrivateFamily.names`).  When the initialisation is public
    (``init_blocks`` empty) the init fraction is not spent and the others are scaled up to
    the whole budget (likewise the EM fractions when ``n_iter`` is 0, or a kind no block has,
    or one whose blocks release nothing, e.g. the means of a model without Gaussian columns).
    """
    fractions = dict(zip(names, split, strict=True))
    em_blocks = [b for b in em_blocks if b.stop > b.start]  # a family may release nothing of a kind
    init_blocks = [b for b in init_blocks if b.stop > b.start]
    kinds = [b.split_kind for b in em_blocks]
    unknown = next((b.name for b in [*em_blocks, *init_blocks] if b.split_kind not in fractions), None)
    if unknown is not None:
        raise ConfigError(f"released block {unknown!r} has no budget kind (one of {', '.join(names)})")
    parts: list[tuple[Block, int, float]] = []
    if n_iter > 0:
        # a kind's fraction is shared by its blocks (the Gaussian family has one block per
        # kind); blocks of a kind the run does not release leave their fraction unspent
        parts += [(b, n_iter, fractions[k] / kinds.count(k)) for b, k in zip(em_blocks, kinds, strict=True)]
    if init_blocks:
        parts += [(b, 1, fractions["init"] / len(init_blocks)) for b in init_blocks]
    total = sum(f for _, _, f in parts)
    if any(not f > 0 for _, _, f in parts):
        raise ConfigError("the budget split gives no share to a block this run releases")
    return [Release(b, cnt, f / total / cnt) for b, cnt, f in parts]


def _rho_for(epsilon: float, delta: float) -> float:
    """Largest rho with rho + 2 sqrt(rho ln(1/delta)) <= epsilon (Bun & Steinke Prop. 1.3, inverted)."""
    lg = math.log(1.0 / delta)
    return (math.sqrt(epsilon + lg) - math.sqrt(lg)) ** 2


def _epsilon_for(rho: float, delta: float) -> float:
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def check_budget(mechanism: str, accountant: str, epsilon: float, delta: float) -> None:
    """Raise ConfigError for an unknown accountant or a budget it cannot account for."""
    if accountant not in ACCOUNTANTS:
        raise ConfigError(f"accountant must be one of {list(ACCOUNTANTS)}, got {accountant!r}")
    if not epsilon > 0:
        raise ConfigError(f"epsilon must be > 0, got {epsilon!r}")
    if not 0 <= delta < 1:
        raise ConfigError(f"delta must be in [0, 1), got {delta!r}")
    if delta == 0 and (mechanism == "gaussian" or accountant != "basic"):
        raise ConfigError(f"delta = 0 needs mechanism 'laplace' with accountant 'basic' (got {mechanism}, {accountant})")


def _events(mechanism: str, rel: Sequence[Release], scales: Sequence[float]):
    import dp_accounting as dpa

    out = []
    for r, s in zip(rel, scales, strict=True):
        if mechanism == "gaussian":
            event = dpa.GaussianDpEvent(s / r.block.l2)
        elif mechanism == "exponential":
            event = dpa.ZCDpEvent(_pure_epsilon(mechanism, r, s) ** 2 / 8.0)
        else:
            event = dpa.LaplaceDpEvent(s / r.block.l1)
        out.append(dpa.SelfComposedDpEvent(event, r.count) if r.count > 1 else event)
    return dpa.ComposedDpEvent(out)


def calibrate(mechanism: str, accountant: str, epsilon: float, delta: float, rel: Sequence[Release]) -> list[float]:
    """Noise scale of every release so that the run is (epsilon, delta)-DP under ``accountant``.

    Returns the Gaussian standard deviation or the Laplace scale b, one per release.
    ``epsilon = inf`` gives zero noise (the non-private limit).  Cached: a sweep calibrates
    each (epsilon, layout) once however many seeds it runs.
    """
    check_budget(mechanism, accountant, epsilon, delta)
    return list(_calibrate(mechanism, accountant, epsilon, delta, tuple(rel)))


@functools.lru_cache(maxsize=256)
def _calibrate(mechanism: str, accountant: str, epsilon: float, delta: float, rel: tuple[Release, ...]) -> tuple[float, ...]:
    return tuple(_calibrate_uncached(mechanism, accountant, epsilon, delta, rel))


def _calibrate_uncached(mechanism, accountant, epsilon, delta, rel) -> list[float]:
    if math.isinf(epsilon) or not rel:
        return [0.0] * len(rel)
    if accountant == "basic":
        if mechanism == "laplace":
            return [r.block.l1 / (r.share * epsilon) for r in rel]
        import dp_accounting as dpa

        return [r.block.l2 * dpa.get_sigma_gaussian(r.share * epsilon, r.share * delta) for r in rel]
    if accountant == "zcdp":
        rho = _rho_for(epsilon, delta)
        if mechanism == "gaussian":
            return [r.block.l2 / math.sqrt(2.0 * r.share * rho) for r in rel]
        return [r.block.l1 / math.sqrt(2.0 * r.share * rho) for r in rel]
    from dp_accounting import rdp

    power = 0.5 if mechanism == "gaussian" else 1.0
    sens = [r.block.l2 if mechanism == "gaussian" else r.block.l1 for r in rel]

    def scales(z: float) -> list[float]:
        return [s * z / r.share**power for s, r in zip(sens, rel, strict=True)]

    def eps_of(z: float) -> float:
        acc = rdp.RdpAccountant()
        acc.compose(_events(mechanism, rel, scales(z)))
        return float(acc.get_epsilon(delta))

    # bisection on log z (epsilon falls as z grows); dp-accounting's own calibrate_dp_mechanism
    # does the same but cannot bracket the very large epsilons of the non-private limit
    lo, hi = 1e-3, 1e3
    for _ in range(60):
        if eps_of(lo) > epsilon:
            break
        lo /= 10
    for _ in range(60):
        if eps_of(hi) <= epsilon:
            break
        hi *= 10
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps_of(mid) <= epsilon else (mid, hi)
        if hi / lo - 1 < 1e-10:
            break
    return scales(hi)  # the side that spends at most epsilon


def spent(mechanism: str, accountant: str, delta: float, rel: Sequence[Release], scales: Sequence[float]) -> float:
    """The epsilon at ``delta`` that ``accountant`` certifies for releases with these scales.

    ``basic`` for the Gaussian mechanism charges release r the analytic-Gaussian epsilon at
    ``f_r delta`` (the delta split :func:`calibrate` uses).  Returns ``inf`` for zero noise.
    """
    return _spent(mechanism, accountant, delta, tuple(rel), tuple(scales))


@functools.lru_cache(maxsize=1024)
def _spent(mechanism: str, accountant: str, delta: float, rel: tuple[Release, ...], scales: tuple[float, ...]) -> float:
    if not rel:
        return 0.0
    if any(s == 0 for s in scales) or (delta == 0 and accountant != "basic"):
        return math.inf
    if accountant == "basic":
        if mechanism != "gaussian":
            return sum(r.count * _pure_epsilon(mechanism, r, s) for r, s in zip(rel, scales, strict=True))
        import dp_accounting as dpa

        return sum(r.count * dpa.get_epsilon_gaussian(s / r.block.l2, r.share * delta) for r, s in zip(rel, scales, strict=True))
    if accountant == "zcdp":
        return _epsilon_for(_rho(mechanism, rel, scales), delta)
    if accountant == "rdp":
        from dp_accounting import rdp

        acc = rdp.RdpAccountant()
        acc.compose(_events(mechanism, rel, scales))
        return float(acc.get_epsilon(delta))
    raise ConfigError(f"accountant must be one of {list(ACCOUNTANTS)}, got {accountant!r}")


def _pure_epsilon(mechanism: str, r: Release, scale: float) -> float:
    """Pure epsilon of one Laplace release (L1 / b) or one exponential-mechanism selection (2 Delta u / scale)."""
    return (2.0 if mechanism == "exponential" else 1.0) * r.block.l1 / scale


def _rho(mechanism: str, rel: Sequence[Release], scales: Sequence[float]) -> float:
    """zCDP rho of releases: Gaussian L2^2 / (2 sigma^2), Laplace eps^2 / 2, exponential eps^2 / 8."""
    if mechanism == "gaussian":
        return sum(r.count * r.block.l2**2 / (2 * s * s) for r, s in zip(rel, scales, strict=True))
    divisor = 8.0 if mechanism == "exponential" else 2.0
    return sum(r.count * _pure_epsilon(mechanism, r, s) ** 2 / divisor for r, s in zip(rel, scales, strict=True))


def spent_composed(
    groups: Sequence[tuple[str, Sequence[Release], Sequence[float]]], accountant: str, delta: float
) -> float:
    """The epsilon at ``delta`` of releases of several mechanisms together, under ``accountant``.

    Parameters
    ----------
    groups : sequence of (mechanism, releases, scales)
        Each as for :func:`spent`; mechanism ``"gaussian"``, ``"laplace"`` or
        ``"exponential"``.
    accountant : {"basic", "zcdp", "rdp"}
        ``basic`` adds the groups' epsilons (their deltas too, so a run without a Gaussian
        group is pure epsilon-DP at ``delta = 0``); ``zcdp`` adds their rho; ``rdp`` composes
        all events in one accountant.

    Returns
    -------
    float
        ``inf`` when some release has no noise; 0 for no releases.
    """
    groups = [(m, tuple(rel), tuple(sc)) for m, rel, sc in groups if rel]
    if not groups:
        return 0.0
    if any(s == 0 for _, _, scales in groups for s in scales):
        return math.inf
    if accountant == "basic":
        return sum(_spent(m, "basic", delta, rel, sc) for m, rel, sc in groups)
    if delta == 0:
        return math.inf
    if accountant == "zcdp":
        return _epsilon_for(sum(_rho(m, rel, sc) for m, rel, sc in groups), delta)
    if accountant == "rdp":
        import dp_accounting as dpa
        from dp_accounting import rdp

        acc = rdp.RdpAccountant()
        acc.compose(dpa.ComposedDpEvent([_events(m, rel, sc) for m, rel, sc in groups]))
        return float(acc.get_epsilon(delta))
    raise ConfigError(f"accountant must be one of {list(ACCOUNTANTS)}, got {accountant!r}")
