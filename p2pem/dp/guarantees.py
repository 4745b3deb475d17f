"""Against whom a private run's epsilon holds, and what it leaves out.

A private run calibrates one noise draw per release, Gaussian N(0, sigma^2) or Laplace(b)
per coordinate (:mod:`p2pem.dp.accounting`), so that the released sums are (epsilon,
delta)-DP under the run's accountant.  Who adds that noise decides against whom the
guarantee holds; this module turns that into numbers.  Neighbouring data sets differ by one
added or removed row; every adversary below knows every row but the one in question.

``dp-central`` (one draw, added by the aggregator)
    *Outsider*, *curious node*, *any set of colluding nodes* (up to all n - 1 others): they
    see the noisy sums only, so epsilon holds.  *The aggregator* (and an eavesdropper on the
    uploads) sees every node's exact statistics: no guarantee (reported as null).
``dp-distributed`` with ``tolerate = t`` (n shares, any n - t of which make one draw)
    Node i adds a share xi_i to its statistics before the aggregation sums them
    (:func:`p2pem.dp.mechanisms.noise_share`).  An adversary that knows the shares of c
    colluding nodes (c = 0: an outsider) subtracts them from the released sum; what is left
    is the sum of the n - c shares it does not know:

    * Gaussian, xi_i ~ N(0, sigma^2 / (n - t)): the residual is N(0, (n - c) sigma^2 / (n - t)),
      the calibrated mechanism with its scale multiplied by sqrt((n - c) / (n - t)).  For
      c <= t that is at least sigma: epsilon holds (for the outsider, c = 0, the run is
      the mechanism at sigma sqrt(n / (n - t)) and the accountant certifies less).  For
      c > t the scale is below sigma and the epsilon the accountant certifies for it grows
      (sigma / sqrt(n - t) for a node left alone with its own share, c = n - 1).
    * Laplace, xi_i = G_i - G'_i with G ~ Gamma(1 / (n - t), b): a sum of m shares is the
      difference of two Gamma(m / (n - t), b) variables.  For c <= t, m = n - c >= n - t and
      the residual is Laplace(b) plus an independent symmetric term (the other m - (n - t)
      shares): post-processing of the calibrated mechanism, so epsilon holds (the number
      reported for the outsider is this bound, not a tighter one).  For c > t, m < n - t and
      the Gamma shape m / (n - t) < 1: the density of the difference behaves like
      |x|^(2 m / (n - t) - 1) near 0, unbounded for m <= (n - t) / 2, and the likelihood
      ratio of neighbouring data sets is no longer bounded by e^(L1 / b): not covered.
    * A *curious node* is c = 1: covered iff t >= 1.  The default t = floor(n / 2) covers any
      colluding minority (and exactly half of an even n) at a cost of at most twice the
      central noise variance in the released sums (n / (n - t) <= 2).

    The aggregation protocol hides a node's individual share-plus-statistics from passive
    peers and eavesdroppers.  Where it does not (both ring neighbours of an arc colluding in
    ``secure-sum``, an honest pdmm-sp component cut off by corrupt nodes), the adversary
    learns the sum over the h honest nodes of that group, whose residual is h shares: the
    guarantee for those rows is the one for m = h above (:func:`epsilon_left` with
    ``unknown = h``), and the defence against whole-run reconstruction holds only for groups
    of h >= n - t nodes.

Where the t colluders sit (:func:`smallest_honest_group`)
    ``tolerate = t`` holds for *any* t colluders only while every honest node keeps an
    honest neighbour the aggregation hides it behind.  Placed worst, t colluders cut off the
    smallest honest group they can: two colluders at the ring positions either side of a
    ``secure-sum`` node read that node's input, the colluders around a ``pdmm-sp`` node of
    degree <= t read its own.  That group carries h shares, and its rows get the guarantee of
    m = h above, whatever the run's t promises.  Every ``dp-distributed`` run computes h from
    its ring or graph and reports that epsilon (``privacy.epsilon.colluders_worst_placement``,
    with the placement under ``privacy.worst_placement``); ``calibrate = "worst-placement"``
    sizes the shares so that h of them make the calibrated draw (at h = 1 every node adds
    the whole calibrated noise), so the configured epsilon holds against t colluders
    anywhere, at n / h times the central noise variance in the released sums.

Excluded from epsilon, whatever the adversary (listed in every output's ``privacy`` block):
the public data domain (``bound``), a public initial model, the preprocessing the scenario
declares public, and what the run reveals besides the noisy sums: its timing and, over
``pdmm-sp``, the data-dependent round counts, message counts and node spread
(:func:`side_channels`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from p2pem.dp import accounting
from p2pem.errors import ConfigError

#: result.json fields of a run whose values do not depend on the data beyond the released sums
#: for every aggregation protocol but pdmm-sp, whose stopping rule reads the data
PDMM_SIDE_CHANNELS = ("consensus_iterations", "init_consensus_iterations", "unconverged_iterations", "messages", "bytes", "node_spread")


def residual_factor(mechanism: str, shares: int, unknown: int) -> float | None:
    """What the calibrated noise scale becomes for an adversary who does not know ``unknown`` shares.

    Parameters
    ----------
    mechanism : {"gaussian", "laplace"}
    shares : int
        How many shares make one calibrated draw (n - t; 1 for a single central draw).
    unknown : int
        Shares in the adversary's view that it does not know (n - c for c colluders).

    Returns
    -------
    float or None
        The factor on every scale (Gaussian: sqrt(unknown / shares); Laplace with
        ``unknown >= shares``: 1, an upper bound on epsilon by post-processing), or None
        where the residual has no finite pure-DP bound (Laplace, ``unknown < shares``).
    """
    if unknown < 1:
        return 0.0
    if mechanism == "gaussian":
        return math.sqrt(unknown / shares)
    return 1.0 if unknown >= shares else None


def epsilon_left(
    mechanism: str,
    delta: float,
    releases: Sequence[accounting.Release],
    scales: Sequence[float],
    *,
    shares: int,
    unknown: int,
) -> dict[str, float | None]:
    """Epsilon at ``delta`` under every accountant for an adversary missing ``unknown`` of the shares.

    None: no guarantee (zero residual noise, or a residual that is not covered, see
    :func:`residual_factor`).  ``unknown = shares`` gives the configured guarantee.
    """
    factor = residual_factor(mechanism, shares, unknown)
    out: dict[str, float | None] = {}
    for name in accounting.ACCOUNTANTS:
        if factor is None or factor == 0:
            out[name] = None
            continue
        eps = accounting.spent(mechanism, name, delta, releases, [s * factor for s in scales])
        out[name] = None if math.isinf(eps) else eps
    return out


#: How many connected node sets :func:`smallest_honest_group` examines before it settles for a bound.
PLACEMENT_BUDGET = 50_000


@dataclass(frozen=True)
class Placement:
    """The worst placement of ``colluders`` nodes: the smallest honest group they can cut off.

    Attributes
    ----------
    colluders : int
        t, the colluding nodes placed.
    size : int
        h, the nodes of the smallest honest group the aggregation cannot hide from them (the
        group's statistics plus its h noise shares are disclosed).  At most n - t: any t
        colluders leave honest groups no larger than that.
    group, placed : tuple of int
        One such group and one placement of t colluders that cuts it off (empty when
        ``exact`` is False and no group of ``size`` nodes was found).
    exact : bool
        False when the search stopped at :data:`PLACEMENT_BUDGET` sets: no group smaller than
        ``size`` exists, but one of ``size`` may not either (``size`` is then a lower bound,
        and the epsilon reported for it an upper bound).
    """

    colluders: int
    size: int
    group: tuple[int, ...]
    placed: tuple[int, ...]
    exact: bool = True


#: Placements found, by (adjacency digest, colluders, budget): a sweep's runs share their graph.
_PLACEMENTS: dict[tuple[bytes, int, int], Placement] = {}


def ring_neighbours(ring: Sequence[int]) -> list[tuple[int, ...]]:
    """Adjacency lists of a Hamiltonian cycle ``ring`` (node ids 0..n-1): what ``secure-sum`` hides a node behind."""
    n = len(ring)
    out: list[tuple[int, ...]] = [()] * n
    for k, v in enumerate(ring):
        out[v] = tuple(sorted({ring[(k - 1) % n], ring[(k + 1) % n]} - {v}))
    return out


def smallest_honest_group(neighbours: Sequence[Sequence[int]], colluders: int, *, budget: int = PLACEMENT_BUDGET) -> Placement:
    """The fewest honest nodes whose summed statistics any ``colluders`` nodes can isolate.

    The aggregations hide an honest node's contribution inside its honest component of the
    graph the protocol talks over once the colluders are removed (``secure-sum``: its ring;
    ``pdmm-sp``: its graph; :mod:`p2pem.leakage.theory`), and disclose that component's sum.
    A connected set S of nodes is such a component for some placement of t colluders iff
    its outer boundary has at most t nodes and |S| <= n - t (the colluders fill the
    boundary and sit anywhere outside S).  This returns the smallest such S: h = 1 as soon
    as some node has at most t neighbours (two colluders either side of a ring node).

    Connected sets are enumerated by increasing size (each once, Wernicke's ESU), which is
    exponential in h; the search stops after ``budget`` sets and reports the size it had
    reached as a lower bound (``exact`` False).

    Parameters
    ----------
    neighbours : sequence of sequences of int
        Adjacency lists of the nodes 0..n-1.
    colluders : int
        t, with 0 <= t < n.

    Returns
    -------
    Placement
    """
    n = len(neighbours)
    t = int(colluders)
    if not 0 <= t < n:
        raise ValueError(f"colluders must be in 0..{n - 1}, got {colluders}")
    digest = hashlib.sha256(repr([sorted(nb) for nb in neighbours]).encode()).digest()
    key = (digest, t, budget)
    if key not in _PLACEMENTS:
        _PLACEMENTS[key] = _search([frozenset(nb) for nb in neighbours], t, budget)
    return _PLACEMENTS[key]


def _search(adj: list[frozenset[int]], t: int, budget: int) -> Placement:
    n = len(adj)
    seen = 0
    for size in range(1, n - t):
        for s in _connected_sets(adj, size):
            seen += 1
            boundary = set().union(*(adj[v] for v in s)) - s
            if len(boundary) <= t:
                rest = sorted(set(range(n)) - s - boundary)
                placed = tuple(sorted(boundary | set(rest[: t - len(boundary)])))
                return Placement(t, size, tuple(sorted(s)), placed)
            if seen >= budget:
                return Placement(t, size, (), (), exact=False)
    # no smaller group: any t colluders leave n - t honest nodes, here the first n - t
    return Placement(t, n - t, tuple(range(n - t)), tuple(range(n - t, n)))


def _connected_sets(adj: Sequence[frozenset[int]], size: int) -> Iterator[frozenset[int]]:
    """Every connected node set of ``size`` nodes, once each (ESU: Wernicke, IEEE/ACM TCBB 2006)."""

    def extend(sub: frozenset[int], ext: frozenset[int], closed: frozenset[int], root: int) -> Iterator[frozenset[int]]:
        if len(sub) == size:
            yield sub
            return
        pending = sorted(ext)
        while pending:
            w = pending.pop()
            more = frozenset(u for u in adj[w] if u > root and u not in closed)
            yield from extend(sub | {w}, frozenset(pending) | more, closed | more | {w}, root)

    for v in range(len(adj)):
        nb = frozenset(u for u in adj[v] if u > v)
        yield from extend(frozenset({v}), nb, adj[v] | {v}, v)


def side_channels(aggregation: str) -> tuple[str, ...]:
    """result.json fields of a private run that epsilon does not cover.

    ``wall_s`` always (timing); over ``pdmm-sp`` also its round and message counts and the
    spread between nodes' models, which depend on the data through the stopping rule (they
    differ between neighbouring data sets with identical noise).
    """
    return (*(PDMM_SIDE_CHANNELS if aggregation == "pdmm-sp" else ()), "wall_s")


def preprocessing_excluded(standardize: bool, pca: int | None, fitted_on: str | None) -> list[str]:
    """What the ``privacy`` block says about the scenario's preprocessing (nothing if there is none).

    Parameters
    ----------
    standardize : bool
    pca : int or None
    fitted_on : str or None
        The rows the preprocessing was fitted on (e.g. "all rows", "the training rows"), or
        None when it applies public constants given in the scenario.
    """
    steps = [s for s, on in (("standardisation", standardize), (f"PCA to {pca} components", pca is not None)) if on]
    if not steps:
        return []
    what = " and ".join(steps)
    if fitted_on is None:
        return [f"the preprocessing ({what}): public constants given in the scenario"]
    return [f"the preprocessing ({what}) fitted on {fitted_on}: NOT covered (its constants depend on every row; "
            "give public constants in the scenario to declare them)"]


def check_public_preprocessing(where: str, standardize: bool, pca: int | None, public: bool, private: Sequence[str]) -> None:
    """Refuse preprocessing fitted on the private rows in a private run (its constants would be an uncounted release).

    Parameters
    ----------
    where : str
        The scenario file, for the message.
    standardize, pca
        The scenario's ``data.standardize`` and ``data.pca``.
    public : bool
        The constants are given in the scenario (``[data.public]``), so declared public.
    private : sequence of str
        The private protocols of the run (none: nothing to refuse).

    Raises
    ------
    ConfigError
        One line naming the key.
    """
    if not private or public or not (standardize or pca is not None):
        return
    key = "data.standardize" if standardize else "data.pca"
    raise ConfigError(
        f"{where}: '{key}': preprocessing fitted on the private rows cannot feed a private run ({', '.join(private)}): its constants "
        "depend on every row and no epsilon covers them; give them in [data.public] (declared public) or drop the preprocessing"
    )


def add_excluded(protocol_params: dict, items: Sequence[str]) -> None:
    """Append ``items`` to the ``privacy.excluded`` list of a private run's ``protocol_params`` (no-op otherwise)."""
    privacy = protocol_params.get("privacy")
    if privacy is not None:
        privacy["excluded"] = [*privacy["excluded"], *items]


__all__ = [
    "PDMM_SIDE_CHANNELS",
    "PLACEMENT_BUDGET",
    "Placement",
    "add_excluded",
    "check_public_preprocessing",
    "epsilon_left",
    "preprocessing_excluded",
    "residual_factor",
    "ring_neighbours",
    "side_channels",
    "smallest_honest_group",
]
