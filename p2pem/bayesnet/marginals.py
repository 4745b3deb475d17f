"""MST and AIM across parties: marginals summed by any protocol, Private-PGM inference on the noisy sums.

MST (McKenna, Miklau & Sheldon, "Winning the NIST contest: a scalable and general approach
to differentially private synthetic data", JPC 2021) and AIM (McKenna, Mullins, Sheldon &
Miklau, "AIM: an adaptive and iterative mechanism for differentially private synthetic
data", VLDB 2022) read the data only through marginal count tables, and a count table is a
sum over rows: every node counts its own rows and the scenario's protocol sums the counts,
as for PrivBayes (:mod:`p2pem.bayesnet.task`).  The graphical model is then estimated from
the noisy marginals by Private-PGM (``mbi``'s ``estimation.MirrorDescent``), which is
post-processing: every node runs it on the same noisy sums and gets the same model.

The mechanisms are written as plain sequential generators (:func:`mst`, :func:`aim`) that
*ask* for tables -- exact, or measured with Gaussian noise of a stated scale -- and receive
their sums; :class:`MarginalTask` turns the requests into aggregations (a
:class:`~p2pem.task.Task`, so the same code runs in either simulator engine and in a
deployment).  A request whose tables are already known (exact counts aggregated before,
noise added centrally) costs no aggregation.

Accounting is zero-concentrated DP (Bun & Steinke, TCC 2016), as in both papers, under
p2pem's neighbouring relation: data sets differ by *replacing* one row (n public; the papers
add or remove one), so a count table changes in two cells by one -- L2 sensitivity sqrt(2) --
and a Gaussian measurement of scale sigma costs ``2 / (2 sigma^2)``; an L1 error score changes
by at most 2, and an exponential-mechanism selection at epsilon_t costs ``epsilon_t^2 / 8``
(Cesar & Rogers, "Bounding, concentrating, and truncating: unifying privacy loss composition
for data analytics", ALT 2021).  ``rho`` comes from the (epsilon, delta) budget by Bun &
Steinke's Prop. 1.3 (:mod:`p2pem.dp.accounting`); :class:`Ledger` records every
measurement and selection with its cost.

MST (Sec. 3 of the MST paper)
    a third of rho measures every 1-way marginal, a third selects d - 1 pairs by Kruskal's
    algorithm with an exponential mechanism per edge on the L1 error of the 1-way model's
    pair marginals, a third measures the selected pairs.  ``selection = "noisy"`` instead
    spends the selection third on Gaussian measurements of *every* pair and builds the
    maximum spanning tree on their (bias-corrected) errors: post-processing of noisy sums,
    so no exact table is ever aggregated.
AIM (Algorithm 2 of the AIM paper)
    a workload of every pair, its candidates the downward closure weighted by overlap; 1-way
    marginals first, then rounds of (exponential mechanism on the weighted, bias-corrected
    L1 errors of the current model, among candidates that keep the model below a size that
    grows with the budget spent) and a Gaussian measurement of the chosen one, at 10 % / 90 %
    of each round's rho, with the budget annealing of the paper (halve sigma when the model
    barely moved).

Sums of counts are whole numbers (:func:`~p2pem.bayesnet.counts.whole_counts`), noisy sums
are rounded to whole numbers too: a shared rounding grid, so every node holds the same bits.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

import p2pem.bayesnet.seed as joint
from p2pem.bayesnet.counts import AttrSet, Layout, part_index, table_size, whole_counts
from p2pem.bayesnet.network import Conditional, Network
from p2pem.dp.accounting import _epsilon_for, _rho_for
from p2pem.dp.discrete import snapped_release
from p2pem.dp.mechanisms import exponential_mechanism, noise_share
from p2pem.errors import ConfigError, DataError, ProtocolError
from p2pem.streams import child

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

__all__ = [
    "METHODS", "NOISE", "SELECTIONS", "Ledger", "MarginalSettings", "MarginalTask", "Measurement", "Request", "aim", "estimate",
    "model_networks", "mst",
]

#: The mechanisms by the names ``[synth] model`` takes.
METHODS = ("mst", "aim")
#: Who adds the Gaussian noise: once after the sum, from the shared seed; or every node a share.
NOISE = ("central", "shares")
#: MST's selection: on the exact pair tables (exponential mechanism) or on noisy ones (paid measurements).
SELECTIONS = ("exact", "noisy")

#: L2 sensitivity of a count table when one row is replaced (one cell down, one up).
L2_SENSITIVITY = math.sqrt(2.0)
#: Sensitivity of an L1 error score ``|x - x_hat|_1`` of a count table (x_hat public) under replacement.
SCORE_SENSITIVITY = 2.0

# keys of the shared streams and of a node's private ones
_NOISE, _SELECT = 0, 1
_SHARE, _SECRET = 0, 2


@dataclass(frozen=True)
class MarginalSettings:
    """Public settings of an MST or AIM release (what every node must agree on).

    Parameters
    ----------
    method : {"mst", "aim"}
    epsilon, delta : float
        The budget; ``epsilon = inf`` measures without noise (not private).
    n_bins : int
        Equal-width bins per continuous column over its public range.
    noise : {"central", "shares"}
        Who adds the Gaussian noise (:data:`NOISE`).
    tolerate : int or None
        With ``noise = "shares"``: colluders whose shares may be subtracted (None: n // 2).
    selection : {"exact", "noisy"}
        MST's selection (:data:`SELECTIONS`); AIM selects on exact tables only.
    iters : int
        Mirror-descent iterations of Private-PGM's estimation (AIM: per round).
    rounds : int or None
        AIM: most rounds (None: 16 d, the paper's).
    max_model_size : float
        AIM: largest junction tree, in MB of float64 cells (the paper's default is 80).
    max_cells : int
        AIM: workload pairs with more cells are left out.
    max_categories : int
        Refuse an attribute with more values.
    public_pairs : tuple of (int, int)
        Pairs chosen from public knowledge, measured whatever the selection picks: MST's
        tree starts with them (they must not form a cycle), AIM measures them with the
        1-way marginals.
    """

    method: str = "mst"
    epsilon: float = 1.0
    delta: float = 1e-9
    n_bins: int = 10
    noise: str = "central"
    tolerate: int | None = None
    selection: str = "exact"
    iters: int = 1000
    rounds: int | None = None
    max_model_size: float = 80.0
    max_cells: int = 10000
    max_categories: int = 100
    public_pairs: tuple[AttrSet, ...] = ()

    def __post_init__(self) -> None:
        def bad(message: str) -> ConfigError:
            return ConfigError(f"marginals: {message}")

        if self.method not in METHODS:
            raise bad(f"'method' must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not (self.epsilon > 0):
            raise bad(f"'epsilon' must be > 0 (or \"inf\" for no noise), got {self.epsilon!r}")
        if not (0 < self.delta < 1):
            raise bad(f"'delta' must be in (0, 1), got {self.delta!r}")
        if self.noise not in NOISE:
            raise bad(f"'noise' must be one of {', '.join(NOISE)}, got {self.noise!r}")
        if self.selection not in SELECTIONS:
            raise bad(f"'selection' must be one of {', '.join(SELECTIONS)}, got {self.selection!r}")
        if self.method == "aim" and self.selection != "exact":
            raise bad("'selection' = 'noisy' is an MST setting; AIM selects on the exact candidate tables")
        for key in ("n_bins", "iters", "max_cells", "max_categories"):
            if int(getattr(self, key)) < 1:
                raise bad(f"{key!r} must be >= 1, got {getattr(self, key)!r}")
        if self.rounds is not None and self.rounds < 1:
            raise bad(f"'rounds' must be >= 1, got {self.rounds!r}")
        if self.tolerate is not None and self.tolerate < 0:
            raise bad(f"'tolerate' must be >= 0, got {self.tolerate!r}")
        if not (self.max_model_size > 0):
            raise bad(f"'max_model_size' must be > 0, got {self.max_model_size!r}")
        for pair in self.public_pairs:
            if len(pair) != 2 or pair[0] >= pair[1]:
                raise bad(f"a public pair must be two distinct columns in order, got {pair!r}")

    @property
    def rho(self) -> float:
        """The zCDP budget of (epsilon, delta) (Bun & Steinke, Prop. 1.3 inverted); inf without noise."""
        return math.inf if math.isinf(self.epsilon) else _rho_for(self.epsilon, self.delta)


@dataclass(frozen=True)
class Measurement:
    """A released marginal: its attributes, its noisy counts (whole numbers) and the noise's standard deviation."""

    attrs: AttrSet
    counts: FloatArray
    sigma: float


@dataclass
class Ledger:
    """Every measurement and selection of a release, with its zCDP cost."""

    entries: list[dict[str, Any]] = field(default_factory=list)

    def gaussian(self, what: str, attrs: AttrSet, sigma: float) -> None:
        """A Gaussian measurement of one count table (L2 sensitivity sqrt 2): rho = Delta^2 / (2 sigma^2)."""
        rho = 0.0 if sigma == 0 else 0.5 * L2_SENSITIVITY**2 / sigma**2
        self.entries.append({"what": what, "attrs": list(attrs), "mechanism": "gaussian", "sensitivity": L2_SENSITIVITY, "sigma": sigma,
                             "rho": rho if sigma > 0 else math.inf})

    def exponential(self, what: str, epsilon: float, sensitivity: float, n_candidates: int, chosen: AttrSet) -> None:
        """An exponential-mechanism selection: rho = epsilon^2 / 8 (Cesar & Rogers 2021)."""
        self.entries.append({"what": what, "attrs": list(chosen), "mechanism": "exponential", "sensitivity": sensitivity,
                             "epsilon": epsilon, "candidates": n_candidates, "rho": epsilon**2 / 8.0})

    @property
    def rho(self) -> float:
        """The zCDP of everything recorded (composition adds rho)."""
        return float(sum(e["rho"] for e in self.entries))

    def epsilon(self, delta: float) -> float:
        """(epsilon, delta)-DP of the composition (Bun & Steinke, Prop. 1.3)."""
        rho = self.rho
        return math.inf if math.isinf(rho) else _epsilon_for(rho, delta)


@dataclass(frozen=True)
class Request:
    """What a mechanism asks for: the tables over ``sets``, exact (``sigma`` None) or measured at ``sigma``."""

    sets: tuple[AttrSet, ...]
    sigma: float | None = None


#: A mechanism: yields requests, receives their sums (tables by attribute set), returns its measurements.
Mechanism = Generator[Request, dict[AttrSet, FloatArray], list[Measurement]]


# ------------------------------------------------------------------------------ inference


def _mbi() -> Any:
    """Private-PGM, imported on first use with JAX in float64 (mbi warns, and may stall, in float32)."""
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_enable_compilation_cache", False)  # mbi warns: many small programs make it counterproductive
        import mbi
    except ImportError:
        raise ConfigError("MST and AIM need Private-PGM: pip install 'mbi>=2,<3' (or p2pem's 'synth' extra)") from None
    return mbi


def _domain(sizes: Sequence[int]) -> Any:
    return _mbi().Domain([str(j) for j in range(len(sizes))], [int(s) for s in sizes])


def estimate(sizes: Sequence[int], measurements: Sequence[Measurement], *, iters: int, warm_start: Any = None) -> Any:
    """Private-PGM's estimate (``mbi.estimation.MirrorDescent``) of the model the noisy marginals fit best.

    Post-processing: it reads only the released measurements.  Attribute ``j`` is named
    ``str(j)`` in ``mbi``'s domain.  Measurements without noise (epsilon = inf) are weighted
    as if their standard deviation were 1 (all equal).
    """
    mbi = _mbi()
    domain = _domain(sizes)
    ms = [mbi.LinearMeasurement(np.asarray(m.counts, dtype=np.float64).ravel(), tuple(str(a) for a in m.attrs),
                                stddev=m.sigma if m.sigma > 0 else 1.0) for m in measurements]
    return mbi.estimation.MirrorDescent().estimate(domain, ms, iters=iters, warm_start=warm_start)


def _project(model: Any, attrs: AttrSet) -> FloatArray:
    """The model's table over ``attrs`` (axes in that order, summing to the model's total), float64.

    Inside one of the model's cliques it is the estimated marginal; across cliques it is the
    sum-product of the cliques' potentials, contracted by :func:`numpy.einsum` in the order
    its optimiser picks (variable elimination).  ``mbi``'s own out-of-model marginal compiles
    one JAX program per query, which costs seconds each: hundreds of candidate scores per
    round would take minutes.
    """
    key = tuple(str(a) for a in attrs)
    if model.marginals.supports(key):
        return np.asarray(model.project(key).datavector(flatten=False), dtype=np.float64)
    letters = {name: i for i, name in enumerate(model.domain.attributes)}
    operands: list[Any] = []
    for cl in model.potentials.cliques:
        factor = model.potentials.tables[cl]
        log = np.asarray(factor.values, dtype=np.float64)
        operands += [np.exp(log - log.max()), [letters[a] for a in factor.domain.attributes]]
    table = np.einsum(*operands, [letters[a] for a in key], optimize=True)
    return table * (float(model.total) / table.sum())


def model_networks(model: Any, sizes: Sequence[int]) -> list[Network]:
    """The estimated model as one network of conditionals, in the reverse of its junction tree's elimination order.

    Attribute ``col`` gets as parents the attributes sampled before it that share a maximal
    clique of the triangulated model with it (a clique, by the perfect elimination order);
    its conditional is the model's marginal over (parents, col) normalised -- the order
    ``mbi``'s own ``synthetic_data`` samples in, written into the release so that
    :func:`p2pem.bayesnet.sample_networks` draws rows from the release alone.
    """
    mbi = _mbi()
    jtree, elimination = mbi.junction_tree.make_junction_tree(_domain(sizes), list(model.cliques))
    cliques = [{int(a) for a in cl} for cl in jtree.nodes()]
    used: set[int] = set()
    conds = []
    for col in (int(c) for c in elimination[::-1]):
        near = {a for cl in cliques if col in cl for a in cl}
        parents = tuple(sorted(near & used))
        table = np.maximum(_project(model, (*parents, col)), 0.0)
        size = table.shape[-1]
        mass = table.sum(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            probs = np.where(mass > 0, table / np.where(mass > 0, mass, 1.0), 1.0 / size)
        conds.append(Conditional(col, parents, probs / probs.sum(axis=-1, keepdims=True)))
        used.add(col)
    return [Network(tuple(int(s) for s in sizes), tuple(conds))]


# ------------------------------------------------------------------------------ the mechanisms


def _l1_error(exact: FloatArray, model: Any, attrs: AttrSet) -> float:
    return float(np.abs(exact.ravel() - _project(model, attrs).ravel()).sum())


def mst(sizes: Sequence[int], settings: MarginalSettings, ledger: Ledger, select_rng: Callable[[int], np.random.Generator]) -> Mechanism:
    """MST (module docstring) as a generator of requests; returns the measurements the model is fitted to.

    ``select_rng(t)`` is the shared generator of selection ``t`` (the same on every node).
    """
    d = len(sizes)
    rho = settings.rho
    if d < 2:
        raise DataError("marginals: MST needs at least 2 columns")
    oneway = tuple((j,) for j in range(d))
    sigma1 = 0.0 if math.isinf(rho) else L2_SENSITIVITY * math.sqrt(d / (2.0 * rho / 3.0))  # each of the d tables at rho / (3 d)
    got = yield Request(oneway, sigma1)
    measurements = [Measurement(s, got[s], sigma1) for s in oneway]
    for s in oneway:
        ledger.gaussian("1-way marginal", s, sigma1)
    model = estimate(sizes, measurements, iters=settings.iters)
    pairs: list[AttrSet] = list(itertools.combinations(range(d), 2))
    if settings.selection == "exact":
        exact = yield Request(tuple(pairs))
        scores = {p: _l1_error(exact[p], model, p) for p in pairs}
        n_select = d - 1 - len(settings.public_pairs)
        eps = math.inf if math.isinf(rho) or n_select == 0 else math.sqrt(8.0 * (rho / 3.0) / n_select)
    else:
        sigma_p = 0.0 if math.isinf(rho) else L2_SENSITIVITY * math.sqrt(len(pairs) / (2.0 * rho / 3.0))
        noisy = yield Request(tuple(pairs), sigma_p)
        for p in pairs:
            ledger.gaussian("pair marginal for the selection (not used in the model)", p, sigma_p)
        bias = math.sqrt(2.0 / math.pi) * sigma_p  # E|N(0, sigma^2)| per cell
        scores = {p: _l1_error(noisy[p], model, p) - bias * table_size(p, sizes) for p in pairs}
        eps = math.inf
    tree = _spanning_tree(d, pairs, scores, eps, ledger, select_rng, exponential=settings.selection == "exact", given=settings.public_pairs)
    sigma2 = 0.0 if math.isinf(rho) else L2_SENSITIVITY * math.sqrt((d - 1) / (2.0 * rho / 3.0))
    got = yield Request(tuple(tree), sigma2)
    for p in tree:
        measurements.append(Measurement(p, got[p], sigma2))
        ledger.gaussian("selected pair marginal", p, sigma2)
    return measurements


def _spanning_tree(d: int, pairs: list[AttrSet], scores: dict[AttrSet, float], eps: float, ledger: Ledger,
                   select_rng: Callable[[int], np.random.Generator], *, exponential: bool, given: Sequence[AttrSet] = ()) -> list[AttrSet]:
    """Kruskal's maximum spanning tree from the ``given`` edges; each further edge by the exponential mechanism
    (:data:`SCORE_SENSITIVITY`) or by its score."""
    component = list(range(d))

    def find(a: int) -> int:
        while component[a] != a:
            component[a] = component[component[a]]
            a = component[a]
        return a

    tree: list[AttrSet] = []
    for a, b in given:
        if find(a) == find(b):
            raise ConfigError(f"marginals: the public pairs form a cycle at ({a}, {b}); MST's model is a tree")
        component[find(a)] = find(b)
        tree.append((a, b))
    for t in range(d - 1 - len(tree)):
        candidates = [p for p in pairs if find(p[0]) != find(p[1])]
        utilities = np.array([scores[p] for p in candidates])
        if exponential:
            i = exponential_mechanism(utilities, eps, SCORE_SENSITIVITY, select_rng(t))
            ledger.exponential("MST edge (L1 error of the 1-way model)", eps, SCORE_SENSITIVITY, len(candidates), candidates[i])
        else:
            i = int(np.argmax(utilities))
        a, b = candidates[i]
        component[find(a)] = find(b)
        tree.append(candidates[i])
    return tree


def _workload_weights(d: int, sizes: Sequence[int], max_cells: int) -> dict[AttrSet, float]:
    """AIM's candidates: the downward closure of the workload (every pair of at most ``max_cells`` cells),
    each weighted by its overlap with the workload (Sec. 4 of the AIM paper)."""
    workload = [p for p in itertools.combinations(range(d), 2) if table_size(p, sizes) <= max_cells]
    closure = sorted({s for w in workload for r in (1, 2) for s in itertools.combinations(w, r)}, key=lambda s: (len(s), s))
    return {c: float(sum(len(set(c) & set(w)) for w in workload)) for c in closure}


def aim(sizes: Sequence[int], settings: MarginalSettings, ledger: Ledger, select_rng: Callable[[int], np.random.Generator]) -> Mechanism:
    """AIM (module docstring) as a generator of requests; returns the measurements the model is fitted to."""
    mbi = _mbi()
    d = len(sizes)
    rho = settings.rho
    rounds = settings.rounds or 16 * d
    weights = _workload_weights(d, sizes, settings.max_cells)
    candidates = list(weights)
    answers = yield Request(tuple(candidates))
    oneway = tuple((j,) for j in range(d))
    if math.isinf(rho):
        sigma, eps = 0.0, math.inf
    else:
        sigma, eps = L2_SENSITIVITY * math.sqrt(rounds / (2.0 * 0.9 * rho)), math.sqrt(8.0 * 0.1 * rho / rounds)
    initial = oneway + tuple(settings.public_pairs)
    got = yield Request(initial, sigma)
    measurements = [Measurement(s, got[s], sigma) for s in initial]
    for s in initial:
        ledger.gaussian("1-way marginal" if len(s) == 1 else "public pair marginal", s, sigma)
    used = ledger.rho
    if used >= rho:
        raise ConfigError(f"marginals: rounds = {rounds} is too few: the first {len(initial)} measurements alone spend the whole budget "
                          f"(AIM measures them at the noise of one round; use rounds > {len(initial)})")
    model = estimate(sizes, measurements, iters=settings.iters)
    domain = _domain(sizes)
    t = 0
    while True:
        if not math.isinf(rho) and rho - used < 2.0 * (0.5 * L2_SENSITIVITY**2 / sigma**2 + eps**2 / 8.0):
            remaining = rho - used  # one last round spends what is left
            sigma, eps = L2_SENSITIVITY * math.sqrt(1.0 / (2.0 * 0.9 * remaining)), math.sqrt(8.0 * 0.1 * remaining)
            last = True
        else:
            last = t + 1 >= rounds
        planned = used + (0.5 * L2_SENSITIVITY**2 / sigma**2 + eps**2 / 8.0 if sigma > 0 else 0.0)
        limit = settings.max_model_size * (1.0 if math.isinf(rho) else planned / rho)
        free = {s for cl in model.cliques for r in range(1, len(cl) + 1) for s in itertools.combinations(sorted(int(a) for a in cl), r)}
        small = [c for c in candidates if c in free
                 or mbi.junction_tree.hypothetical_model_size(domain, [*model.cliques, tuple(str(a) for a in c)]) <= limit]
        bias = math.sqrt(2.0 / math.pi) * sigma
        errors = np.array([weights[c] * (_l1_error(answers[c], model, c) - bias * table_size(c, sizes)) for c in small])
        sensitivity = SCORE_SENSITIVITY * max(abs(weights[c]) for c in small)
        i = exponential_mechanism(errors, eps, sensitivity, select_rng(t))
        chosen = small[i]
        ledger.exponential("AIM round (weighted L1 error of the current model)", eps, sensitivity, len(small), chosen)
        got = yield Request((chosen,), sigma)
        measurements.append(Measurement(chosen, got[chosen], sigma))
        ledger.gaussian("AIM measurement", chosen, sigma)
        used = ledger.rho
        before = _project(model, chosen)
        model = estimate(sizes, measurements, iters=settings.iters, warm_start=model)
        t += 1
        if last:
            return measurements
        moved = float(np.abs(_project(model, chosen) - before).sum())
        if sigma > 0 and moved <= sigma * math.sqrt(2.0 / math.pi) * table_size(chosen, sizes):
            sigma, eps = sigma / 2.0, eps * 2.0  # the model barely moved: measure more precisely (annealing)


MECHANISMS: dict[str, Callable[..., Mechanism]] = {"mst": mst, "aim": aim}


# ------------------------------------------------------------------------------ the task


@dataclass
class MarginalTask:
    """One node's (or a batch of nodes') MST or AIM release, as a Task (module docstring).

    Parameters
    ----------
    parts : sequence of (n_i, d) int arrays
        Discretised rows of the nodes this object advances.
    sizes : tuple of int
        Public domain size of every attribute.
    settings : MarginalSettings
    n_nodes : int
        Nodes in the aggregation (an average times ``n_nodes`` is a sum).
    shared : numpy.random.SeedSequence or None
        The seed every node shares (central noise, selections); None generates it by
        commit-and-reveal from ``secrets`` (:mod:`p2pem.bayesnet.seed`).
    secrets : sequence of numpy.random.SeedSequence
        Each part's private seed (its noise shares, its commit-and-reveal secret).
    node_ids : sequence of int, optional
    """

    parts: Sequence[IntArray]
    sizes: tuple[int, ...]
    settings: MarginalSettings
    n_nodes: int
    shared: np.random.SeedSequence | None
    secrets: Sequence[np.random.SeedSequence]
    node_ids: Sequence[int] | None = None
    iteration: int = 0
    finished: bool = False
    ledger: Ledger = field(default_factory=Ledger)
    measurements: list[Measurement] = field(default_factory=list)
    networks: list[Network] = field(default_factory=list)

    def __post_init__(self) -> None:
        d = len(self.sizes)
        self.sizes = tuple(int(s) for s in self.sizes)
        if len(self.secrets) != len(self.parts):
            raise ProtocolError(f"marginals: {len(self.parts)} parts but {len(self.secrets)} secrets")
        ids = tuple(range(len(self.parts))) if self.node_ids is None else tuple(int(i) for i in self.node_ids)
        self.node_ids = ids
        for i, part in enumerate(self.parts):
            if part.ndim != 2 or part.shape[1] != d or not np.issubdtype(part.dtype, np.integer):
                raise DataError(f"node {ids[i]}: discretised rows must be integers of shape (n_rows, {d}), got {part.dtype} {part.shape}")
        if self.settings.noise == "shares":
            self._tolerate()
        self._rows = np.concatenate(list(self.parts)) if self.parts else np.empty((0, d), dtype=np.int64)
        self._part = part_index(np.cumsum([0] + [p.shape[0] for p in self.parts[:-1]]), self._rows.shape[0])
        self._secrets = [joint.secret(child(s, _SECRET)) for s in self.secrets]
        self._commits: list[bytes] = []
        self._cache: dict[AttrSet, FloatArray] = {}
        self._requests = 0
        self._request: Request | None = None
        self._layout: Layout | None = None
        self._stage = "commit" if self.shared is None else "run"
        if self.shared is not None:
            self._start()

    # ------------------------------------------------------------------ Task interface

    def contribution_size(self) -> int:
        if self._stage in ("commit", "reveal"):
            return self.n_nodes * joint.WORDS
        assert self._layout is not None
        return self._layout.size

    def contribution(self) -> FloatArray:
        if self._stage in ("commit", "reveal"):
            values = [joint.commitment(s) if self._stage == "commit" else joint.words(s) for s in self._secrets]
            assert self.node_ids is not None
            return np.stack([joint.slot_vector(i, self.n_nodes, v) for i, v in zip(self.node_ids, values, strict=True)])
        assert self._layout is not None and self._request is not None
        counts = self._layout.contributions(self._rows, self._part, len(self.parts))
        sigma = self._request.sigma
        if sigma is not None and sigma > 0 and self.settings.noise == "shares":
            scale = np.full(self._layout.size, sigma)
            for i, s in enumerate(self.secrets):
                counts[i] += noise_share(np.random.default_rng(child(s, _SHARE, self.iteration)), scale, "gaussian",
                                         self.n_nodes - self._tolerate())
        return counts

    def absorb(self, averages: FloatArray) -> None:
        if self.finished:
            raise ProtocolError("marginals: the release is finished; no aggregation is due")
        sums = self._agreed_sums(averages)
        self.iteration += 1
        if self._stage == "commit":
            self._commits = joint.slots(sums, self.n_nodes)
            self._stage = "reveal"
            return
        if self._stage == "reveal":
            self.shared = joint.joint_seed(self._commits, joint.slots(sums, self.n_nodes))
            self._stage = "run"
            self._start()
            return
        assert self._layout is not None and self._request is not None
        tables = {s: np.array(t) for s, t in self._layout.split(sums).items()}
        if self._request.sigma is None or self._request.sigma == 0 or self.settings.noise == "central":
            self._cache.update(tables)
            self._answer(self._serve(self._request))
        else:
            self._answer(tables)

    def summary(self, part: int = 0) -> FloatArray:
        """SHA-256 of the release (measured attribute sets, their scales and noisy counts) as sixteen 16-bit words."""
        if not self.finished:
            raise ProtocolError("marginals: no release yet")
        h = hashlib.sha256()
        for m in self.measurements:
            h.update(np.asarray([len(m.attrs), *m.attrs], dtype="<i8").tobytes())
            h.update(np.asarray([m.sigma], dtype="<f8").tobytes())
            h.update(np.ascontiguousarray(m.counts, dtype="<f8").tobytes())
        return joint.words(h.digest())

    def summary_size(self) -> int:
        return joint.WORDS

    def max_contribution_size(self) -> int:
        """The longest contribution of the run (public): every pair's table, or the commitments."""
        s = self.sizes
        pairs = sum(s[i] * s[j] for i in range(len(s)) for j in range(i + 1, len(s)))
        return max(self.n_nodes * joint.WORDS, sum(s) + pairs)

    # ------------------------------------------------------------------ driving the mechanism

    def _tolerate(self) -> int:
        t = self.n_nodes // 2 if self.settings.tolerate is None else self.settings.tolerate
        if t >= self.n_nodes:
            raise ConfigError(f"marginals: 'tolerate' = {t} must be below the {self.n_nodes} nodes (the others' shares make the noise)")
        return t

    def _start(self) -> None:
        assert self.shared is not None
        shared = self.shared
        self._mechanism = MECHANISMS[self.settings.method](
            self.sizes, self.settings, self.ledger, lambda t: np.random.default_rng(child(shared, _SELECT, t)))
        self._answer(None)

    def _answer(self, tables: dict[AttrSet, FloatArray] | None) -> None:
        """Hand the mechanism its tables; serve what needs no aggregation; stop at the next that does."""
        while True:
            try:
                request = self._mechanism.send(tables) if tables is not None else next(self._mechanism)
            except StopIteration as stop:
                self._finish(stop.value)
                return
            self._requests += 1
            self._request = request
            needs = request.sigma is not None and request.sigma > 0 and self.settings.noise == "shares"
            missing = tuple(s for s in request.sets if s not in self._cache)
            if needs or missing:
                self._layout = Layout(request.sets if needs else missing, self.sizes)
                return
            tables = self._serve(request)

    def _serve(self, request: Request) -> dict[AttrSet, FloatArray]:
        """Known exact tables, with central noise from the shared seed (one stream per request) when measured."""
        if request.sigma is None:
            return {s: self._cache[s] for s in request.sets}
        assert self.shared is not None
        rng = np.random.default_rng(child(self.shared, _NOISE, self._requests))
        scale = float(request.sigma)
        return {s: np.round(snapped_release(rng, self._cache[s], scale, "gaussian", sensitivity=L2_SENSITIVITY)) for s in request.sets}  # exact discrete noise

    def _finish(self, measurements: list[Measurement]) -> None:
        self.measurements = measurements
        model = estimate(self.sizes, measurements, iters=self.settings.iters)
        self.networks = model_networks(model, self.sizes)
        self.finished = True
        self._layout = None

    def _agreed_sums(self, averages: FloatArray) -> FloatArray:
        """The batch's sums as whole numbers; every part of the batch must hold the same ones."""
        expected = (len(self.parts), self.contribution_size())
        averages = np.asarray(averages, dtype=np.float64)
        if averages.size == expected[0] * expected[1]:
            averages = averages.reshape(expected)
        if averages.shape != expected:
            raise ProtocolError(f"marginals: aggregation {self.iteration} returned shape {averages.shape}, expected {expected}")
        noisy = self._stage == "run" and self._request is not None and self._request.sigma is not None and self.settings.noise == "shares"
        rows = [whole_counts(row * self.n_nodes, what=f"marginal sums (aggregation {self.iteration})", noisy=noisy) for row in averages]
        for i, row in enumerate(rows[1:], start=1):
            if not np.array_equal(row, rows[0]):
                raise ProtocolError(f"marginals: nodes {self.node_ids[0]} and {self.node_ids[i]} hold different sums after aggregation {self.iteration}")  # type: ignore[index]
        return rows[0]
