"""The settings of a private Bayesian-network release, its budget, and every release it pays for.

Neighbouring data sets differ in one row (bounded DP: the number of rows n is public), the
relation of PrivBayes (Zhang et al., SIGMOD 2014 / TODS 2017) under which its sensitivities
hold (:mod:`p2pem.bayesnet.scores`).  A count table changes in two cells by one when a
row changes, so its L1 sensitivity is 2.

What a run releases, and what it costs (pure epsilon, sequential composition):

==========================  =====================================  =============================
release                     mechanism                              budget
==========================  =====================================  =============================
every structure selection   exponential mechanism on I(X; P),      ``beta epsilon`` over the
(PrivBayes: d - 1, the      Lemma 1 sensitivity                    selections, equally
root is uniform; HM: d)
HMPrivBayes: each network's exponential mechanism on H(X),        one of those selections
root                        sensitivity of the entropy
HMPrivBayes: attribute      Laplace on all 1-way counts            ``entropy_share epsilon``
entropies (for the noise    (L1 = 2 d)
weights)
HMPrivBayes: similarity     Laplace on every pair's normalised     ``cluster_share epsilon``
matrix (for clustering      MI, each pair ``1/m`` of the share     (eps_1; only with clustering
and pruning)                (m = d(d-1)/2 pairs)                   or pruning)
noisy conditionals          Laplace on the counts of every         the rest, equally over the
                            maximal table (L1 = 2 each)            tables (PrivBayes) or in
                                                                   proportion to e^(-OE_j)
                                                                   (HMPrivBayes)
==========================  =====================================  =============================

A :class:`Ledger` records every release as it happens -- name, mechanism, how often,
sensitivity and noise scale -- and :meth:`Ledger.epsilon` composes them with the project's
accountant (:func:`p2pem.dp.accounting.spent_composed`), so the reported epsilon counts
every release actually made, not a planned split.

HMPrivBayes as printed (张小玉, 沈国华, 杨阳, 计算机系统应用 2022, Algorithms 2-5): the budget
is eps_1 + eps_2 + eps_3 = eps, for the clustering (``cluster_share``), the networks
(``beta``) and the conditionals (the rest).  Its DPSC (Algorithm 3) adds Laplace noise to
every pair's MIC, each draw paying part of eps_1 ("每次加噪都需要消耗部分隐私预算"): here the
m = d(d-1)/2 pairs pay eps_1 / m each, and spectral clustering of the released matrix is
post-processing.  Each network's root and attribute-parent pairs are |C_i| selections
(eq. 10's ``eps_2 / |C_i|``), and the conditionals' noise is weighted by e^(-OE_j) (eq. 12).

Two choices of the paper are not DP at eps, and are changed here:

* it computes the entropies OE_j behind the noise weights from the exact data: here they
  come from noisy 1-way counts, paid from ``entropy_share``;
* it gives **every cluster** the whole eps_2 and eps_3 (eq. 10 divides by |C_i|, eq. 12
  normalises within C_i) after splitting the table into column blocks D_1..D_k, i.e. it
  composes the clusters in parallel.  Parallel composition needs disjoint *rows*; the
  blocks share every row, so k networks cost k (eps_2 + eps_3).  ``composition =
  "sequential"`` (the default) splits eps_2 over all d selections and eps_3 over all
  tables; ``composition = "paper"`` runs the printed per-cluster budgets for comparison,
  and the ledger then reports what they really cost (eps_1 + k (eps_2 + eps_3) + the
  entropies), more than ``epsilon``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from p2pem.dp import accounting, guarantees
from p2pem.dp.mechanisms import Block
from p2pem.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_CATEGORIES",
    "MODELS",
    "NOISE",
    "SCORES",
    "COMPOSITIONS",
    "BayesNetSettings",
    "Budget",
    "Ledger",
    "Spend",
]

#: The models by the names users type.
MODELS = ("privbayes", "hmprivbayes")
#: Structure scores: mutual information (PrivBayes SIGMOD 2014) or R (TODS 2017).
SCORES = ("mi", "r")
#: How HMPrivBayes' networks share eps_2 and eps_3 (module docstring): "sequential" (DP at
#: epsilon) or "paper" (every cluster the whole of both, as printed; not DP at epsilon).
COMPOSITIONS = ("sequential", "paper")
#: Who adds the Laplace noise of count releases: once, from the randomness every node shares
#: ("central"), or every node a share before the aggregation ("shares").
NOISE = ("central", "shares")
#: Most categories (or bins) an attribute may have unless ``max_categories`` says otherwise:
#: tables grow as products of domain sizes, and an attribute of thousands of values (an
#: identifier) carries no distribution a network could learn privately.
DEFAULT_MAX_CATEGORIES = 100
#: delta at which the zCDP and RDP accountants report their (epsilon, delta) next to the pure
#: epsilon of basic composition.
REPORT_DELTA = 1e-5


def _positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not value > 0:
        raise ConfigError(f"bayesnet: '{name}' must be a number > 0, got {value!r}")
    if math.isinf(value) and not allow_inf:
        raise ConfigError(f"bayesnet: '{name}' must be finite, got {value!r}")
    return float(value)


def _fraction(name: str, value: Any, *, zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (0 <= value < 1 if zero else 0 < value < 1)
    if not ok:
        raise ConfigError(f"bayesnet: '{name}' must be a number in {'[0, 1)' if zero else '(0, 1)'}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class BayesNetSettings:
    """Public settings of a release (what every node must agree on).

    Parameters
    ----------
    model : {"privbayes", "hmprivbayes"}
        PrivBayes (uniform root, one network) or HMPrivBayes (attribute clusters, roots by
        entropy, parent pruning, noise weighted by entropy).
    epsilon : float
        The whole budget; ``inf`` releases without noise (then ``k`` is required).
    beta : float
        Share of the budget for the structure (PrivBayes' beta, default 0.3).
    score : {"r", "mi"}
        What the exponential mechanism ranks attribute-parent pairs by: the R score (TODS
        2017; sensitivity 3/n) or mutual information (Lemma 1).
    theta : float
        theta-usefulness: a noisy table has at most ``n eps_2 / (2 d theta)`` cells.
    k : int or None
        Most parents of an attribute; None lets theta alone bound the tables.
    n_bins : int
        Equal-width bins per continuous column over its public range.
    noise : {"central", "shares"}
        Who adds the Laplace noise of count releases (see :data:`NOISE`).
    tolerate : int or None
        With ``noise = "shares"``: the colluding nodes whose shares may be subtracted while
        the rest still make the calibrated noise; None is floor(n / 2).
    clustering : bool
        HMPrivBayes: split the attributes into ``n_clusters`` groups (False: one network).
    n_clusters : int
        HMPrivBayes: number of attribute groups.
    eta : float
        HMPrivBayes' pruning (eq. 9): a parent P is no candidate for X where the released
        similarity S(X, P) is at most eta times the largest similarity of X, or of P, to any
        other attribute (0 keeps all).
    clusters : tuple of tuple of int, optional
        HMPrivBayes: public attribute groups (domain knowledge) instead of the clustering;
        then no similarity matrix is released for them (only for pruning, eta > 0).
    composition : {"sequential", "paper"}
        HMPrivBayes: how the networks share the budget (:data:`COMPOSITIONS`).
    cluster_share, entropy_share : float
        HMPrivBayes: budget shares of the similarity matrix and of the attribute entropies.
    max_categories : int
        Refuse an attribute with more values (:data:`DEFAULT_MAX_CATEGORIES`).
    network : tuple of tuple of int, optional
        A public network instead of a learned one (PrivBayes only): one tuple
        ``(child, *parents)`` per attribute, in sampling order.  Then the whole budget goes
        to the conditionals, and the nodes aggregate nothing but the row count and the
        conditionals' tables (with ``noise = "shares"``: noisy sums only).
    """

    model: str = "privbayes"
    epsilon: float = 0.8
    beta: float = 0.3
    score: str = "r"
    theta: float = 4.0
    k: int | None = None
    n_bins: int = 10
    noise: str = "central"
    tolerate: int | None = None
    clustering: bool = True
    n_clusters: int = 2
    eta: float = 0.0
    cluster_share: float = 0.1
    entropy_share: float = 0.05
    max_categories: int = DEFAULT_MAX_CATEGORIES
    network: tuple[tuple[int, ...], ...] | None = None
    clusters: tuple[tuple[int, ...], ...] | None = None
    composition: str = "sequential"

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ConfigError(f"bayesnet: 'model' must be one of {', '.join(MODELS)}, got {self.model!r}")
        if self.score not in SCORES:
            raise ConfigError(f"bayesnet: 'score' must be one of {', '.join(SCORES)}, got {self.score!r}")
        if self.composition not in COMPOSITIONS:
            raise ConfigError(f"bayesnet: 'composition' must be one of {', '.join(COMPOSITIONS)}, got {self.composition!r}")
        if self.noise not in NOISE:
            raise ConfigError(f"bayesnet: 'noise' must be one of {', '.join(NOISE)}, got {self.noise!r}")
        _positive("epsilon", self.epsilon, allow_inf=True)
        _fraction("beta", self.beta)
        _positive("theta", self.theta)
        for name in ("n_bins", "n_clusters", "max_categories") + (("k",) if self.k is not None else ()):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"bayesnet: '{name}' must be an integer >= 1, got {value!r}")
        if self.tolerate is not None and (isinstance(self.tolerate, bool) or not isinstance(self.tolerate, int) or self.tolerate < 0):
            raise ConfigError(f"bayesnet: 'tolerate' must be an integer >= 0 (colluding nodes), got {self.tolerate!r}")
        if not isinstance(self.clustering, bool):
            raise ConfigError(f"bayesnet: 'clustering' must be true or false, got {self.clustering!r}")
        if isinstance(self.eta, bool) or not isinstance(self.eta, (int, float)) or not 0 <= self.eta <= 1:
            raise ConfigError(f"bayesnet: 'eta' must be a number in [0, 1], got {self.eta!r}")
        _fraction("cluster_share", self.cluster_share, zero=True)
        _fraction("entropy_share", self.entropy_share, zero=True)
        if self.hm and self.network is None and self.entropy_share == 0:
            raise ConfigError("bayesnet: 'entropy_share' = 0 leaves nothing for the attribute entropies, which HMPrivBayes releases to "
                              "weight the noise: give a share > 0")
        if self.clusters_paid and self.network is None and self.cluster_share == 0:
            raise ConfigError("bayesnet: 'cluster_share' = 0 leaves nothing for the similarity matrix, which clustering "
                              f"(n_clusters = {self.n_clusters}) or pruning (eta = {self.eta}) releases: give a share > 0, or set "
                              "clustering = false and eta = 0")
        if self.hm and self.beta + self.cluster_share * self.clusters_paid + self.entropy_share >= 1:
            raise ConfigError("bayesnet: beta, cluster_share and entropy_share leave no budget for the conditionals (their sum must be < 1)")
        if math.isinf(self.epsilon) and self.k is None and self.network is None:
            raise ConfigError("bayesnet: epsilon = inf (no noise) bounds no table by theta: give a degree 'k'")

    @property
    def hm(self) -> bool:
        return self.model == "hmprivbayes"

    @property
    def clusters_paid(self) -> bool:
        """HMPrivBayes releases a similarity matrix (clustering on with more than one group and no public groups, or pruning)."""
        return self.hm and ((self.clustering and self.n_clusters > 1 and self.clusters is None) or self.eta > 0)

    def check_attributes(self, n_attributes: int) -> None:
        """Raise ConfigError when ``k`` or ``n_clusters`` does not fit ``n_attributes``."""
        if n_attributes < 2:
            raise ConfigError(f"bayesnet: a network needs at least 2 attributes, got {n_attributes}")
        if self.k is not None and self.k >= n_attributes:
            raise ConfigError(f"bayesnet: 'k' = {self.k} must be less than the number of attributes ({n_attributes})")
        if self.hm and self.clustering and self.n_clusters > n_attributes:
            raise ConfigError(f"bayesnet: 'n_clusters' = {self.n_clusters} exceeds the {n_attributes} attributes")
        if self.network is not None:
            self._check_network(n_attributes)
        if self.clusters is not None:
            covered = sorted(a for c in self.clusters for a in c)
            if not self.hm or any(not c for c in self.clusters) or covered != list(range(n_attributes)):
                raise ConfigError(f"bayesnet: 'clusters' must be HMPrivBayes groups that cover each of the {n_attributes} attributes once")

    def _check_network(self, d: int) -> None:
        assert self.network is not None
        if self.hm:
            raise ConfigError("bayesnet: a public 'network' replaces the structure search; HMPrivBayes is a structure search")
        seen: set[int] = set()
        for i, entry in enumerate(self.network):
            if not entry or any(isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < d for a in entry):
                raise ConfigError(f"bayesnet: 'network[{i}]' must list an attribute and its parents, each in 0..{d - 1}, got {list(entry)}")
            child, *parents = entry
            if child in seen or not set(parents) <= seen or len(set(parents)) != len(parents):
                raise ConfigError(f"bayesnet: 'network[{i}]': attribute {child} comes twice, or before one of its parents {parents}")
            seen.add(child)
        if len(seen) != d:
            raise ConfigError(f"bayesnet: 'network' covers {len(seen)} of the {d} attributes; give every attribute once")

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if self.network is not None:
            out["network"] = [list(entry) for entry in self.network]
        if self.clusters is not None:
            out["clusters"] = [list(c) for c in self.clusters]
        if math.isinf(self.epsilon):
            out["epsilon"] = None  # JSON has no infinity; null = no noise
        return out


@dataclass(frozen=True)
class Budget:
    """The budget of every kind of release (pure epsilon), fixed before the run (public).

    Attributes
    ----------
    selection : float
        One exponential-mechanism selection (structure and HMPrivBayes' roots).
    n_selections : int
    marginals : float
        HMPrivBayes' noisy 1-way counts (0 for PrivBayes).
    similarity : float
        HMPrivBayes' noisy similarity matrix (0 when none is released).
    conditionals : float
        All noisy conditional tables together (eps_3).
    structure : float
        All structure selections together (eps_2).
    """

    selection: float
    n_selections: int
    marginals: float
    similarity: float
    conditionals: float
    structure: float = 0.0

    @classmethod
    def plan(cls, settings: BayesNetSettings, n_attributes: int) -> Budget:
        """Split ``settings.epsilon`` (module docstring)."""
        eps, d = settings.epsilon, n_attributes
        if settings.network is not None:  # nothing to search: every epsilon for the conditionals
            return cls(0.0, 0, 0.0, 0.0, eps)
        if math.isinf(eps):
            paid = math.inf if settings.hm else 0.0
            return cls(math.inf, d if settings.hm else d - 1, paid, paid if settings.clusters_paid else 0.0, math.inf, math.inf)
        if settings.hm:
            n_sel = d  # every network's root is chosen too
            marginals = settings.entropy_share * eps
            similarity = settings.cluster_share * eps if settings.clusters_paid else 0.0
        else:
            n_sel, marginals, similarity = d - 1, 0.0, 0.0
        structure = settings.beta * eps
        rest = eps - structure - marginals - similarity
        return cls(structure / n_sel, n_sel, marginals, similarity, rest, structure)

    def max_cells(self, n_rows: int, n_attributes: int, theta: float) -> float:
        """theta-usefulness: the most cells of a noisy table, ``n eps_2 / (2 d theta)`` (inf without noise)."""
        if math.isinf(self.conditionals):
            return math.inf
        return n_rows * self.conditionals / (2.0 * n_attributes * theta)


@dataclass(frozen=True)
class Spend:
    """One kind of release: ``count`` releases of a mechanism with sensitivity ``l1`` and noise ``scale``.

    ``scale`` is the Laplace scale b, or the Gumbel scale ``2 Delta u / epsilon`` of an
    exponential-mechanism selection (:mod:`p2pem.dp.accounting`); 0 means no noise.
    """

    name: str
    mechanism: str
    count: int
    l1: float
    scale: float

    @property
    def epsilon(self) -> float:
        """Pure epsilon of all ``count`` releases (inf without noise)."""
        if self.scale == 0:
            return math.inf if self.l1 > 0 else 0.0
        return self.count * (2.0 if self.mechanism == "exponential" else 1.0) * self.l1 / self.scale

    def to_dict(self) -> dict[str, Any]:
        eps = self.epsilon
        return {"name": self.name, "mechanism": self.mechanism, "count": self.count, "sensitivity": self.l1,
                "scale": self.scale, "epsilon": None if math.isinf(eps) else eps}


@dataclass
class Ledger:
    """Every release of a run, in the order it happened."""

    spends: list[Spend] = field(default_factory=list)

    def add(self, name: str, mechanism: str, l1: float, scale: float, count: int = 1) -> None:
        """Record ``count`` releases (a release whose sensitivity is 0 costs nothing and is skipped)."""
        if l1 > 0 and count > 0:
            self.spends.append(Spend(name, mechanism, count, float(l1), float(scale)))

    def epsilon(self, accountant: str = "basic", delta: float = 0.0) -> float:
        """The epsilon of everything released, under ``accountant`` at ``delta``."""
        groups = []
        for s in self.spends:
            block = Block(s.name, 0, 1, s.l1, s.l1)
            groups.append((s.mechanism, [accounting.Release(block, s.count, 1.0 / s.count)], [s.scale]))
        return accounting.spent_composed(groups, accountant, delta)

    def epsilons(self) -> dict[str, float | None]:
        """Epsilon under every accountant: ``basic`` (pure, delta 0), ``zcdp`` and ``rdp`` at :data:`REPORT_DELTA`; None when infinite."""
        out: dict[str, float | None] = {}
        for name in accounting.ACCOUNTANTS:
            eps = self.epsilon(name, 0.0 if name == "basic" else REPORT_DELTA)
            out[name] = None if math.isinf(eps) else eps
        return out

    def shared_noise_epsilons(self, shares: int, unknown: int) -> dict[str, float | None]:
        """Epsilon under every accountant for an adversary who knows all but ``unknown`` of the noise shares.

        For releases whose Laplace noise is split into shares, any ``shares`` of which make
        the calibrated noise (:func:`p2pem.dp.mechanisms.noise_share`): the analysis of
        :func:`p2pem.dp.guarantees.epsilon_left` (``unknown >= shares``: the configured
        epsilon; fewer: no guarantee, None).  Only Laplace releases can be split so; a
        ledger holding another mechanism gives None.
        """
        if any(s.mechanism != "laplace" for s in self.spends):
            return dict.fromkeys(accounting.ACCOUNTANTS)
        releases = [accounting.Release(Block(s.name, 0, 1, s.l1, s.l1), s.count, 1.0 / s.count) for s in self.spends]
        return guarantees.epsilon_left("laplace", REPORT_DELTA, releases, [s.scale for s in self.spends], shares=shares, unknown=unknown)

    def to_list(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.spends]
