"""HMPrivBayes as printed (Zhang, Shen & Yang 2022): its clustering pays exactly eps_1, its
pruning is eq. (9), and the paper's per-cluster budgets cost what sequential composition says."""

from __future__ import annotations

import math

import numpy as np
import pytest

import p2pem.bayesnet.task as task_module
from p2pem.bayesnet import BayesNetSettings, BayesNetTask, Budget
from p2pem.bayesnet.privacy import Ledger
from p2pem.bayesnet.scores import normalized_mi_sensitivity
from p2pem.errors import ConfigError
from p2pem.task import drive

SIZES = (4, 3, 5, 2, 6, 3)


def rows(n: int = 3000, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2, n)
    cols = [(base * (s // 2) + rng.integers(0, 2, n)) % s if j % 2 else rng.integers(0, s, n) for j, s in enumerate(SIZES)]
    return np.column_stack(cols).astype(np.int64)


def release(settings: BayesNetSettings, data: np.ndarray) -> BayesNetTask:
    task = BayesNetTask([data], SIZES, settings, 1, shared=np.random.SeedSequence(11), secrets=[np.random.SeedSequence(12)])
    return drive(task, lambda it, v: v)


def test_the_clustering_consumes_exactly_eps_1_by_the_accountant_and_by_counting_the_laplace_draws(monkeypatch):
    """DPSC (Algorithm 3): one Laplace draw per pair of attributes, each of eps_1 / m, nothing else
    between the entropies and the structure (spectral clustering is post-processing)."""
    epsilon, share = 1.0, 0.2
    settings = BayesNetSettings(model="hmprivbayes", epsilon=epsilon, cluster_share=share, n_clusters=2, k=2)
    calls: list[np.ndarray] = []
    real_noise = task_module.noise

    def counting(rng, scales, mechanism):
        assert mechanism == "laplace"
        calls.append(np.asarray(scales, dtype=float).ravel().copy())
        return real_noise(rng, scales, mechanism)

    monkeypatch.setattr(task_module, "noise", counting)
    task = release(settings, rows())
    d, n = len(SIZES), task.n_rows
    pairs = [(i, j) for i in range(d) for j in range(i + 1, d)]
    # calls: d entropies (1-way tables), then the similarity matrix, then the conditionals
    similarity = calls[d]
    assert similarity.size == len(pairs) == d * (d - 1) // 2
    sens = np.array([normalized_mi_sensitivity(n, SIZES[i], SIZES[j]) for i, j in pairs])
    assert len(set(sens.round(15))) > 1  # heterogeneous domains: the per-pair split matters
    per_draw = sens / similarity
    np.testing.assert_allclose(per_draw, share * epsilon / len(pairs), rtol=1e-12)
    assert per_draw.sum() == pytest.approx(share * epsilon, rel=1e-12)
    # the accountant over the similarity's ledger lines alone
    paid = Ledger([s for s in task.ledger.spends if s.name.startswith("similarity")])
    assert sum(s.count for s in paid.spends) == len(pairs)
    assert paid.epsilon() == pytest.approx(share * epsilon, rel=1e-12)
    assert len(task.clusters) == 2 and sorted(a for c in task.clusters for a in c) == list(range(d))
    # the whole run stays within epsilon (sequential composition over the clusters)
    assert task.ledger.epsilon() <= epsilon + 1e-12


def test_public_clusters_release_no_similarity_and_the_papers_composition_costs_eps_1_plus_k_times_the_rest():
    data = rows()
    groups = ((0, 1, 2), (3, 4, 5))
    base = dict(model="hmprivbayes", epsilon=1.0, k=2, clusters=groups, entropy_share=0.05)
    seq = release(BayesNetSettings(**base), data)
    assert seq.similarity is None and [tuple(c) for c in seq.clusters] == list(groups)
    budget = Budget.plan(BayesNetSettings(**base), len(SIZES))
    free = sum(1 for x in seq.selections if x.n_candidates == 1)
    assert seq.ledger.epsilon() == pytest.approx(1.0 - free * budget.selection)
    paper = release(BayesNetSettings(**base, composition="paper"), data)
    free_eps = sum(budget.structure / 3 for x in paper.selections if x.n_candidates == 1)
    # every network spends eps_2 and eps_3 in full: 2 networks, entropies once
    expected = budget.marginals + 2 * (budget.structure + budget.conditionals) - free_eps
    assert paper.ledger.epsilon() == pytest.approx(expected)
    assert paper.ledger.epsilon() > 1.5


def test_pruning_is_eq_9_relative_to_the_largest_similarity_of_either_attribute():
    """A parent survives only where S(X, P) exceeds eta times the largest similarity of X and of P."""
    data = rows()
    settings = BayesNetSettings(model="hmprivbayes", epsilon=math.inf, k=1, clustering=False, eta=0.5)
    task = release(settings, data)
    sim = task.similarity
    assert sim is not None
    largest = np.where(np.eye(len(SIZES), dtype=bool), -np.inf, sim).max(axis=1)
    for g in task.greedy:
        for child, parents in g.parents.items():
            for p in parents:
                assert sim[child, p] > 0.5 * largest[child] and sim[child, p] > 0.5 * largest[p]
    assert any(g.parents[a] == () for g in task.greedy for a in g.order[1:])  # something was pruned


def test_a_similarity_without_budget_and_bad_public_clusters_are_one_line_errors():
    with pytest.raises(ConfigError, match="'cluster_share' = 0 leaves nothing for the similarity matrix"):
        BayesNetSettings(model="hmprivbayes", cluster_share=0.0)
    with pytest.raises(ConfigError, match="'clusters' must be HMPrivBayes groups"):
        BayesNetSettings(model="hmprivbayes", clusters=((0, 1), (1, 2))).check_attributes(3)
    with pytest.raises(ConfigError, match="'composition' must be one of sequential, paper"):
        BayesNetSettings(composition="parallel")


def test_a_release_of_the_papers_composition_is_refused():
    from p2pem.bayesnet.release import release_body
    from p2pem.tabular import Categorical, Schema

    schema = Schema(tuple(Categorical(f"c{j}", tuple(str(v) for v in range(s))) for j, s in enumerate(SIZES)))
    task = release(BayesNetSettings(model="hmprivbayes", epsilon=1.0, k=2, composition="paper"), rows())
    with pytest.raises(ConfigError, match="composition = 'paper' spends more than epsilon"):
        release_body(task, schema, protocol="centralized", n_nodes=1)
