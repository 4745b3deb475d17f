"""PrivBayes and HMPrivBayes as a :class:`~p2pem.task.Task`: counts aggregated by any protocol.

Every number the algorithms read from the rows is a contingency count, so each node counts
its own rows and the network sums the counts with the scenario's protocol; the algorithm
itself then runs identically on every node, from the same sums and the same shared
randomness.  The aggregations, in order (each a vector of public length):

==============  ===========================================  =================================
stage           what each node contributes                   when
==============  ===========================================  =================================
commit          the head of its hash chain                   no shared seed given (a
                (:mod:`p2pem.bayesnet.seed`)                 deployment), before any count
totals          the 1-way counts of every attribute          always (n and the entropies)
marginals       1-way counts plus its Laplace noise share    HMPrivBayes, ``noise = "shares"``
pairs           the 2-way counts of every pair               HMPrivBayes with a similarity
step s          the tables of step s's candidate pairs not   GreedyBayes, one per step for all
                aggregated before (all networks at once)     networks; none if all are known
conditionals    the maximal noisy tables plus its Laplace    ``noise = "shares"``
                noise share
reveal          the next link of its hash chain              after every count stage but
                                                             ``conditionals`` when committed
==============  ===========================================  =================================

Without a shared seed, each count stage is followed by a ``reveal`` before anything is drawn
from it: the seed of the draws that act on a stage's sums is generated jointly *after* those
sums are fixed (:func:`p2pem.bayesnet.seed.joint_seed` of every node's next chain link), so no
member knows it while it still chooses its counts, and none can steer a selection by
fabricating them.  What a member can still do is abort once it has seen the reveals.

Sums of counts are rounded to whole numbers (:func:`~p2pem.bayesnet.counts.whole_counts`),
noisy sums too, so every node holds the same bits after every aggregation and makes the
same choices; a batch (the vectorised engine) checks that all its nodes do.  Central noise
and every exponential-mechanism draw come from the shared seed, one child stream per
decision (:func:`shared_stream`), so the draws do not depend on how many came before.

The task's :meth:`~BayesNetTask.summary` is a SHA-256 digest of the release (structure and
noisy counts, whole numbers), sixteen 16-bit words: nodes that agree on it hold the same
network.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

import p2pem.bayesnet.seed as joint
from p2pem.bayesnet.cluster import spectral_clusters
from p2pem.bayesnet.counts import AttrSet, Layout, attr_set, part_index, table_size, whole_counts
from p2pem.bayesnet.greedy import Candidate, Greedy
from p2pem.bayesnet.network import Conditional, Network, conditional_from_counts, noisy_sets
from p2pem.bayesnet.privacy import BayesNetSettings, Budget, Ledger
from p2pem.bayesnet.scores import (
    entropy,
    entropy_sensitivity,
    mi_sensitivity,
    mutual_information,
    normalized_mi,
    normalized_mi_sensitivity,
    r_score,
    r_score_sensitivity,
)
from p2pem.dp.mechanisms import exponential_mechanism, noise, noise_share
from p2pem.errors import ConfigError, DataError, ProtocolError
from p2pem.streams import child

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

__all__ = ["MAX_ENTRIES", "BayesNetTask", "Selection", "shared_stream"]

# keys of the shared streams (first element of the spawn key) and of a node's private ones
_ROOT, _STEP, _CONDITIONALS, _SIMILARITY, _MARGINALS, _CLUSTERS = 0, 1, 2, 3, 4, 5
_SHARE_CONDITIONALS, _SHARE_MARGINALS, _SECRET = 0, 1, 2


#: The most counts of a structure step or of the conditionals a deployed node accepts in one
#: message (8 MiB of float64, half the packet a deployment kit's broker carries).
MAX_ENTRIES = 2**20


def shared_stream(seed: np.random.SeedSequence, *key: int) -> np.random.Generator:
    """The generator of one decision: a child of the shared seed at ``key`` (same on every node)."""
    return np.random.default_rng(child(seed, *key))


@dataclass(frozen=True)
class Selection:
    """One structure decision, for the record: which pair won among how many, at what budget."""

    network: int
    step: int
    chosen: Candidate
    n_candidates: int
    utility: float
    sensitivity: float
    epsilon: float


@dataclass
class _Stage:
    kind: str  # "commit", "reveal", "totals", "marginals", "pairs", "step", "tables", "conditionals"
    layout: Layout | None = None  # count stages
    size: int = 0  # other stages
    noisy_scale: FloatArray | None = None  # per-entry Laplace scale of a shares stage
    share_key: int = 0


@dataclass
class BayesNetTask:
    """One node's (or a batch of nodes') private Bayesian-network release, as a Task.

    Parameters
    ----------
    parts : sequence of (n_i, d) int arrays
        Discretised rows of the nodes this object advances (one for a Node; every node for
        the vectorised engine; all rows for a central run).
    sizes : tuple of int
        Public domain size of every attribute.
    settings : BayesNetSettings
    n_nodes : int
        Nodes in the aggregation (an average times ``n_nodes`` is a sum).
    shared : numpy.random.SeedSequence or None
        The seed every node shares; None generates it by commit-and-reveal from ``secrets``.
    secrets : sequence of numpy.random.SeedSequence
        Each part's private seed (noise shares, its commit-and-reveal secret).
    node_ids : sequence of int, optional
        The nodes' ids (their slots in commit-and-reveal); default ``0 .. len(parts) - 1``.
    """

    parts: Sequence[IntArray]
    sizes: tuple[int, ...]
    settings: BayesNetSettings
    n_nodes: int
    shared: np.random.SeedSequence | None
    secrets: Sequence[np.random.SeedSequence]
    node_ids: Sequence[int] | None = None
    iteration: int = 0
    finished: bool = False
    # results
    n_rows: int = 0
    clusters: list[tuple[int, ...]] = field(default_factory=list)
    networks: list[Network] = field(default_factory=list)
    greedy: list[Greedy] = field(default_factory=list)
    selections: list[Selection] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)
    noisy_counts: dict[AttrSet, FloatArray] = field(default_factory=dict)
    similarity: FloatArray | None = None
    weights: FloatArray | None = None  # HMPrivBayes: per-attribute noise weights e^(-OE)
    budget: Budget | None = None

    def __post_init__(self) -> None:
        d = len(self.sizes)
        self.settings.check_attributes(d)
        if len(self.secrets) != len(self.parts):
            raise ProtocolError(f"bayesnet: {len(self.parts)} parts but {len(self.secrets)} secrets")
        self.sizes = tuple(int(s) for s in self.sizes)
        ids = tuple(range(len(self.parts))) if self.node_ids is None else tuple(int(i) for i in self.node_ids)
        self.node_ids = ids
        for i, part in enumerate(self.parts):
            if part.ndim != 2 or part.shape[1] != d or not np.issubdtype(part.dtype, np.integer):
                raise DataError(f"node {ids[i]}: discretised rows must be integers of shape (n_rows, {d}), got {part.dtype} {part.shape}")
        self._rows = np.concatenate(list(self.parts)) if self.parts else np.empty((0, d), dtype=np.int64)
        self._part = part_index(np.cumsum([0] + [p.shape[0] for p in self.parts[:-1]]), self._rows.shape[0])
        self._cache: dict[AttrSet, FloatArray] = {}
        # committed: one hash chain per part, long enough for a reveal after every count stage
        self._committed = self.shared is None
        self._chains = [joint.hash_chain(joint.secret(child(s, _SECRET)), self.max_reveals()) for s in self.secrets] if self._committed else []
        self._commits: list[bytes] = []  # every node's last revealed link (its chain head after the commit)
        self.reveals = 0  # reveals absorbed: each a fresh shared seed
        self._held: tuple[str, dict[AttrSet, FloatArray]] | None = None  # a count stage's sums awaiting their reveal
        self._step = 0
        self._pending: dict[int, list[Candidate]] = {}
        self._scales: dict[AttrSet, float] = {}
        self._stage = _Stage("commit", size=self.n_nodes * joint.WORDS) if self.shared is None else self._totals_stage()
        if self.settings.noise == "shares":
            self._tolerate()  # a bad 'tolerate' fails now, not at the first noisy aggregation

    # ------------------------------------------------------------------ Task interface

    def contribution_size(self) -> int:
        stage = self._stage
        return stage.layout.size if stage.layout is not None else stage.size

    def contribution(self) -> FloatArray:
        stage = self._stage
        n_parts = len(self.parts)
        if stage.kind in ("commit", "reveal"):
            link = 0 if stage.kind == "commit" else self.reveals + 1
            values = [joint.words(chain[link]) for chain in self._chains]
            assert self.node_ids is not None
            return np.stack([joint.slot_vector(i, self.n_nodes, v) for i, v in zip(self.node_ids, values, strict=True)])
        assert stage.layout is not None
        counts = stage.layout.contributions(self._rows, self._part, n_parts)
        if stage.noisy_scale is not None:
            n_shares = self.n_nodes - self._tolerate()
            for i, s in enumerate(self.secrets):
                rng = np.random.default_rng(child(s, stage.share_key, self.iteration))
                counts[i] += noise_share(rng, stage.noisy_scale, "laplace", n_shares)
        return counts

    def absorb(self, averages: FloatArray) -> None:
        if self.finished:
            raise ProtocolError("bayesnet: the release is finished; no aggregation is due")
        sums = self._agreed_sums(averages)
        stage = self._stage
        self.iteration += 1
        if stage.kind == "commit":
            self._commits = joint.slots(sums, self.n_nodes)
            self._stage = self._totals_stage()
            return
        if stage.kind == "reveal":
            links = joint.slots(sums, self.n_nodes)
            self.shared = joint.joint_seed(self._commits, links)  # checks every link against the last one
            self._commits = links
            self.reveals += 1
            assert self._held is not None
            kind, tables = self._held
            self._held = None
            getattr(self, f"_after_{kind}")(tables)
            return
        assert stage.layout is not None
        tables = stage.layout.split(sums)
        if stage.noisy_scale is None:
            self._cache.update(tables)
        if self._committed and stage.kind != "conditionals":  # nothing is drawn after the conditionals' shares
            if self.reveals >= self.max_reveals():
                raise ProtocolError(f"bayesnet: more than {self.max_reveals()} count stages; the hash chains are spent")
            self._held = (stage.kind, tables)
            self._stage = _Stage("reveal", size=self.n_nodes * joint.WORDS)
            return
        getattr(self, f"_after_{stage.kind}")(tables)

    def summary(self, part: int = 0) -> FloatArray:
        """SHA-256 of the release (structure and whole-number noisy counts) as sixteen 16-bit words."""
        if not self.finished:
            raise ProtocolError("bayesnet: no release yet")
        h = hashlib.sha256()
        for g in self.greedy:
            for a in g.order:
                h.update(np.asarray([a, len(g.parents[a]), *g.parents[a]], dtype="<i8").tobytes())
        for s in sorted(self.noisy_counts):
            h.update(np.asarray(s, dtype="<i8").tobytes())
            h.update(np.ascontiguousarray(self.noisy_counts[s], dtype="<f8").tobytes())
        return joint.words(h.digest())

    def summary_size(self) -> int:
        return joint.WORDS

    def max_reveals(self) -> int:
        """The most reveals a committed run needs (public): one after the totals, the 1-way
        marginals, the pairs, each structure step (at most one per attribute) and the tables."""
        return len(self.sizes) + 4

    def max_contribution_size(self) -> int:
        """The longest contribution of the run, public: what a deployment accepts before decoding.

        The commitments, the 1-way counts and (HMPrivBayes with a similarity) every pair's
        2-way counts have lengths the domain fixes; a structure step asks for the tables of
        its candidates, which depend on the structure released so far, and the conditionals
        for the tables of the final network, so those are bounded by :data:`MAX_ENTRIES`.
        """
        sizes = self.sizes
        pairs = sum(sizes[i] * sizes[j] for i in range(len(sizes)) for j in range(i + 1, len(sizes))) if self.settings.clusters_paid else 0
        return max(self.n_nodes * joint.WORDS, sum(sizes), pairs, MAX_ENTRIES)

    # ------------------------------------------------------------------ stages

    def _tolerate(self) -> int:
        t = self.n_nodes // 2 if self.settings.tolerate is None else self.settings.tolerate
        if t >= self.n_nodes:
            raise ConfigError(f"bayesnet: 'tolerate' = {t} must be below the {self.n_nodes} nodes (the others' shares make the noise)")
        return t

    def _agreed_sums(self, averages: FloatArray) -> FloatArray:
        """The batch's sums as whole numbers; every part of the batch must hold the same ones."""
        expected = (len(self.parts), self.contribution_size())
        averages = np.asarray(averages, dtype=np.float64)
        if averages.size == expected[0] * expected[1]:
            averages = averages.reshape(expected)  # a Node hands over its one average as a vector
        if averages.shape != expected:
            raise ProtocolError(f"bayesnet: aggregation {self.iteration} returned shape {averages.shape}, expected {expected}")
        noisy = self._stage.noisy_scale is not None
        what = f"{self._stage.kind} sums (aggregation {self.iteration})"
        rows = [whole_counts(row * self.n_nodes, what=what, noisy=noisy) for row in averages]
        for i, row in enumerate(rows[1:], start=1):
            if not np.array_equal(row, rows[0]):
                raise ProtocolError(f"bayesnet: nodes {self.node_ids[0]} and {self.node_ids[i]} hold different sums after aggregation {self.iteration}")  # type: ignore[index]
        return rows[0]

    def _totals_stage(self) -> _Stage:
        if self.settings.network is not None:  # a public network needs the row count alone
            return _Stage("totals", Layout(((),), self.sizes))
        return _Stage("totals", Layout(tuple((j,) for j in range(len(self.sizes))), self.sizes))

    def _rng(self, *key: int) -> np.random.Generator:
        assert self.shared is not None
        return shared_stream(self.shared, *key)

    def _after_totals(self, tables: dict[AttrSet, FloatArray]) -> None:
        d = len(self.sizes)
        totals = [float(t.sum()) for t in tables.values()]
        if any(t != totals[0] for t in totals):
            raise ProtocolError("bayesnet: the aggregated 1-way counts of the attributes have different totals")
        self.n_rows = int(totals[0])
        if self.n_rows < 2:
            raise DataError(f"bayesnet: the nodes hold {self.n_rows} rows together; a release needs at least 2")
        self.budget = Budget.plan(self.settings, d)
        if self.settings.network is not None:
            g = Greedy(tuple(range(d)))
            for child, *parents in self.settings.network:
                g.add(Candidate(child, tuple(sorted(parents))))
            self.clusters, self.greedy = [tuple(range(d))], [g]
            self._start_conditionals()
            return
        if not self.settings.hm:
            self.clusters = [tuple(range(d))]
            self._start_networks()
            return
        scale = self._laplace_scale(2.0 * d, self.budget.marginals)
        self.ledger.add("attribute entropies (1-way counts)", "laplace", 2.0 * d, scale)
        if self.settings.noise == "shares" and scale > 0:
            layout = self._totals_stage().layout
            assert layout is not None
            self._stage = _Stage("marginals", layout, noisy_scale=np.full(layout.size, scale), share_key=_SHARE_MARGINALS)
            return
        rng = self._rng(_MARGINALS)
        self._after_marginals({s: t + noise(rng, np.full(t.shape, scale), "laplace") for s, t in tables.items()})

    def _after_marginals(self, noisy: dict[AttrSet, FloatArray]) -> None:
        # normalised entropy of each attribute from its released 1-way counts (HMPrivBayes' OE_j)
        d = len(self.sizes)
        oe = np.array([entropy(np.maximum(noisy[(j,)], 0.0)) / math.log(self.sizes[j]) if self.sizes[j] > 1 else 0.0 for j in range(d)])
        self.weights = np.exp(-oe)
        if self.settings.clusters_paid:
            pairs = [(i, j) for i in range(d) for j in range(i + 1, d)]
            self._stage = _Stage("pairs", Layout(tuple(pairs), self.sizes))
            return
        self.clusters = [tuple(sorted(c)) for c in self.settings.clusters] if self.settings.clusters is not None else [tuple(range(d))]
        self._start_networks()

    def _after_pairs(self, tables: dict[AttrSet, FloatArray]) -> None:
        """HMPrivBayes' DPSC (Algorithm 3): every pair's similarity with Laplace noise of its own share of eps_1.

        The m pairs are m draws, each paying eps_1 / m (scale = its sensitivity * m / eps_1),
        so together they pay eps_1 exactly; the clustering of the released matrix is
        post-processing.
        """
        d, n = len(self.sizes), self.n_rows
        assert self.budget is not None
        pairs = sorted(tables)
        exact = np.array([normalized_mi(tables[p]) for p in pairs])
        sens = np.array([normalized_mi_sensitivity(n, self.sizes[i], self.sizes[j]) for i, j in pairs])
        share = self.budget.similarity / len(pairs)  # every draw's epsilon
        scales = np.array([self._laplace_scale(x, share) for x in sens])
        for value in sorted(set(sens.tolist())):  # one ledger line per sensitivity: count draws of eps_1 / m each
            at = sens == value
            self.ledger.add("similarity matrix (normalised MI of every pair)", "laplace", value, float(scales[at][0]), int(at.sum()))
        released = np.zeros((d, d))
        rows, cols = np.array(pairs, dtype=np.int64).T
        released[rows, cols] = exact + noise(self._rng(_SIMILARITY), scales, "laplace")
        self.similarity = released + released.T
        if self.settings.clusters is not None:
            self.clusters = [tuple(sorted(c)) for c in self.settings.clusters]
        elif self.settings.clustering and self.settings.n_clusters > 1:
            self.clusters = spectral_clusters(self.similarity, self.settings.n_clusters, self._rng(_CLUSTERS))
        else:
            self.clusters = [tuple(range(d))]
        self._start_networks()

    def _laplace_scale(self, l1: float, epsilon: float) -> float:
        return 0.0 if math.isinf(epsilon) else l1 / epsilon

    def _start_networks(self) -> None:
        assert self.budget is not None
        self.greedy = [Greedy(c) for c in self.clusters]
        for c, g in enumerate(self.greedy):
            if self.settings.hm:
                # HMPrivBayes: the root by the exponential mechanism on the attributes' entropies
                utilities = np.array([entropy(self._cache[(a,)]) for a in g.attributes])
                root = g.attributes[self._select(utilities, entropy_sensitivity(self.n_rows), (_ROOT, c), "network roots", self._selection_epsilon(c))]
            else:
                root = g.attributes[int(self._rng(_ROOT, c).integers(len(g.attributes)))]
            g.add(Candidate(root, ()))
        self._next_step()

    def _selection_epsilon(self, cluster: int) -> float:
        """The budget of one selection of network ``cluster``.

        Sequential composition: eps_2 over all d selections.  The paper's composition: eps_2
        over the |C_i| selections of this network (eq. 10), every network the whole eps_2.
        """
        assert self.budget is not None
        if self.settings.hm and self.settings.composition == "paper":
            return self.budget.structure / len(self.clusters[cluster])
        return self.budget.selection

    def _select(self, utilities: FloatArray, sensitivity: float, key: tuple[int, ...], what: str, eps: float) -> int:
        """The exponential mechanism with ``eps`` (free among one candidate)."""
        if utilities.size == 1:
            return 0
        scale = 0.0 if math.isinf(eps) else 2.0 * sensitivity / eps
        self.ledger.add(what, "exponential", sensitivity, scale)
        return exponential_mechanism(utilities, eps, sensitivity, self._rng(*key))

    def _candidates(self, g: Greedy) -> list[Candidate]:
        assert self.budget is not None
        s = self.settings
        allowed = None
        if s.hm and s.eta > 0 and self.similarity is not None:
            sim = self.similarity
            off = sim + np.diag(np.full(len(self.sizes), -np.inf))
            largest = off.max(axis=1)

            def allowed(child: int, parent: int) -> bool:
                # eq. (9) on the released similarity (post-processing): pruned where S(X, P) is at
                # most eta times the largest similarity of X, or of P, to any other attribute
                value = sim[child, parent]
                return bool(value > s.eta * largest[child] and value > s.eta * largest[parent])

        paper = s.hm and s.composition == "paper"  # theta-usefulness at the network's own eps_3 and |C_i|
        max_cells = self.budget.max_cells(self.n_rows, len(g.attributes) if paper else len(self.sizes), s.theta)
        return g.candidates(self.sizes, k=s.k, max_cells=max_cells, allowed=allowed)

    def _next_step(self) -> None:
        """Aggregate the tables the next step needs, or take the step at once if they are known."""
        while not all(g.finished for g in self.greedy):
            self._step += 1
            self._pending = {c: self._candidates(g) for c, g in enumerate(self.greedy) if not g.finished}
            needed = sorted({cand.attrs for cands in self._pending.values() for cand in cands} - set(self._cache))
            if needed:
                self._stage = _Stage("step", Layout(tuple(needed), self.sizes))
                return
            self._take_step()
        self._start_conditionals()

    def _after_step(self, tables: dict[AttrSet, FloatArray]) -> None:
        self._take_step()
        self._next_step()

    def _take_step(self) -> None:
        assert self.budget is not None
        for c, cands in self._pending.items():
            utilities = np.array([self._score(cand) for cand in cands])
            if self.settings.score == "r":
                sens = r_score_sensitivity(self.n_rows)
            else:
                sens = max(mi_sensitivity(self.n_rows, binary=self.sizes[x.child] == 2 or table_size(x.parents, self.sizes) == 2) for x in cands)
            eps = self._selection_epsilon(c)
            i = self._select(utilities, sens, (_STEP, c, self._step), "structure (attribute-parent pairs)", eps)
            self.greedy[c].add(cands[i])
            eps = 0.0 if len(cands) == 1 else eps
            self.selections.append(Selection(c, self._step, cands[i], len(cands), float(utilities[i]), sens, eps))

    def _score(self, cand: Candidate) -> float:
        attrs = cand.attrs
        table = np.transpose(self._cache[attrs], [attrs.index(cand.child)] + [attrs.index(p) for p in cand.parents])
        return r_score(table) if self.settings.score == "r" else mutual_information(table)

    def _start_conditionals(self) -> None:
        assert self.budget is not None
        own: list[AttrSet] = []  # the maximal tables, which get noise of their own
        owner: dict[AttrSet, int] = {}
        network: dict[AttrSet, int] = {}
        for c, g in enumerate(self.greedy):
            sources = noisy_sets(g.order, g.parents)
            for a in g.order:
                if sources[a] == attr_set((a, *g.parents[a])):
                    own.append(sources[a])
                    owner[sources[a]] = a
                    network[sources[a]] = c
        own.sort()
        if self.settings.hm:
            assert self.weights is not None
            w = np.array([self.weights[owner[s]] for s in own])
        else:
            w = np.ones(len(own))
        if self.settings.hm and self.settings.composition == "paper":
            # eq. (12) as printed: every network spends the whole eps_3 over its own tables
            which = np.array([network[s] for s in own])
            eps_tables = self.budget.conditionals * w / np.array([w[which == c].sum() for c in which])
        else:
            eps_tables = self.budget.conditionals * w / w.sum()
        scales = {s: self._laplace_scale(2.0, e) for s, e in zip(own, eps_tables, strict=True)}
        for s in own:
            self.ledger.add("noisy conditionals (count tables)", "laplace", 2.0, scales[s])
        self._scales = scales
        if self.settings.noise == "shares" and any(v > 0 for v in scales.values()):
            scale_vec = np.concatenate([np.full(table_size(s, self.sizes), scales[s]) for s in own])
            self._stage = _Stage("conditionals", Layout(tuple(own), self.sizes), noisy_scale=scale_vec, share_key=_SHARE_CONDITIONALS)
            return
        missing = tuple(s for s in own if s not in self._cache)  # a public network's tables were not searched
        if missing:
            self._stage = _Stage("tables", Layout(missing, self.sizes))
            return
        self._after_tables({})

    def _after_tables(self, tables: dict[AttrSet, FloatArray]) -> None:
        """Central noise, from the shared seed, on the exact tables (in the order of their sets)."""
        rng = self._rng(_CONDITIONALS)
        self._after_conditionals({
            s: np.round(self._cache[s] + noise(rng, np.full(self._cache[s].shape, b), "laplace")) for s, b in self._scales.items()
        })

    def _after_conditionals(self, noisy: dict[AttrSet, FloatArray]) -> None:
        self.noisy_counts = {s: np.asarray(t, dtype=np.float64) for s, t in noisy.items()}
        self.networks = []
        for g in self.greedy:
            sources = noisy_sets(g.order, g.parents)
            conds: list[Conditional] = [
                conditional_from_counts(a, g.parents[a], sources[a], self.noisy_counts[sources[a]], self.n_rows) for a in g.order
            ]
            self.networks.append(Network(tuple(self.sizes), tuple(conds)))
        self.finished = True
