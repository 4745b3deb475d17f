"""The Bayesian-network math: counts, scores against scipy, sensitivities by brute force,
the exponential mechanism's law, candidate parent sets, the projection, convergence without noise."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from p2pem.bayesnet import BayesNetSettings, BayesNetTask, Budget, sample_networks
from p2pem.bayesnet.counts import Layout, joint_counts, marginalize, part_index, whole_counts
from p2pem.bayesnet.greedy import Greedy, parent_sets
from p2pem.bayesnet.network import conditional_from_counts, noisy_sets, project_counts
from p2pem.bayesnet.scores import (
    entropy,
    entropy_sensitivity,
    mi_sensitivity,
    mutual_information,
    normalized_mi,
    r_score,
    r_score_sensitivity,
)
from p2pem.dp.mechanisms import exponential_mechanism, exponential_probabilities
from p2pem.errors import ConfigError, ProtocolError
from p2pem.task import drive


def tables(shape: tuple[int, ...], n: int):
    """Every count table of ``shape`` holding ``n`` rows."""
    cells = math.prod(shape)
    for combo in itertools.combinations_with_replacement(range(cells), n):
        yield np.bincount(combo, minlength=cells).astype(float).reshape(shape)


def largest_change(score, shape: tuple[int, ...], n: int) -> float:
    """max |score(T) - score(T')| over all tables T of n rows and T' = T with one row moved to another cell."""
    worst = 0.0
    cells = math.prod(shape)
    for t in tables(shape, n):
        base = score(t)
        flat = t.ravel()
        for a in np.flatnonzero(flat):
            for b in range(cells):
                if b == a:
                    continue
                moved = flat.copy()
                moved[a] -= 1
                moved[b] += 1
                worst = max(worst, abs(score(moved.reshape(shape)) - base))
    return worst


# ------------------------------------------------------------------------- counts


def test_joint_counts_per_part_equal_counts_of_each_part_alone():
    rng = np.random.default_rng(0)
    sizes = (3, 4, 2)
    rows = np.column_stack([rng.integers(0, s, 200) for s in sizes])
    offsets = [0, 50, 50, 120]  # part 1 holds no row
    parts = part_index(offsets, len(rows))
    batch = joint_counts(rows, (2, 0), sizes, parts, 4)
    for i, (start, stop) in enumerate(zip(offsets, offsets[1:] + [200], strict=True)):
        alone = joint_counts(rows[start:stop], (2, 0), sizes)[0]
        reference = np.zeros((2, 3))
        for r in rows[start:stop]:
            reference[r[2], r[0]] += 1
        assert np.array_equal(batch[i], alone)
        assert np.array_equal(alone.reshape(2, 3), reference)


def test_layout_concatenates_and_splits_tables():
    sizes = (3, 4, 2)
    layout = Layout(((0,), (0, 2), (1, 2)), sizes)
    assert layout.offsets == (0, 3, 9, 17) and layout.size == 17
    rows = np.array([[0, 1, 1], [2, 3, 0], [2, 3, 1]])
    tables = layout.split(layout.contributions(rows)[0])
    assert tables[(0,)].tolist() == [1, 0, 2]
    assert tables[(1, 2)].shape == (4, 2) and tables[(1, 2)][3].tolist() == [1, 1]
    assert np.array_equal(marginalize(tables[(0, 2)], (0, 2), (2,)), [1, 2])
    with pytest.raises(ProtocolError):
        layout.split(np.zeros(16))


def test_whole_counts_round_near_integers_and_refuse_others():
    assert whole_counts(np.array([3.0 + 1e-9, 7.0 - 1e-9])).tolist() == [3.0, 7.0]
    with pytest.raises(ProtocolError, match="not a whole number"):
        whole_counts(np.array([3.0, 4.4]))
    assert whole_counts(np.array([-2.6, 4.4]), noisy=True).tolist() == [-3.0, 4.0]


# ------------------------------------------------------------------------- scores


@pytest.mark.parametrize("shape", [(2, 3), (4, 2, 3), (5, 1)])
def test_scores_match_scipy_references(shape):
    rng = np.random.default_rng(1)
    t = rng.integers(0, 9, size=shape).astype(float)
    t[0] += 1
    p = t / t.sum()
    flat = p.reshape(shape[0], -1)
    assert entropy(t) == pytest.approx(stats.entropy(t.ravel()), rel=1e-12)
    px, pp = flat.sum(axis=1), flat.sum(axis=0)
    mi_reference = stats.entropy(flat.ravel(), np.outer(px, pp).ravel())  # KL(joint || product)
    assert mutual_information(t) == pytest.approx(mi_reference, rel=1e-10, abs=1e-14)
    assert mutual_information(t) == pytest.approx(stats.entropy(px) + stats.entropy(pp) - stats.entropy(flat.ravel()), abs=1e-12)
    assert r_score(t) == pytest.approx(0.5 * np.abs(flat - np.outer(px, pp)).sum(), rel=1e-12)
    if len(shape) == 2 and min(shape) > 1:
        assert normalized_mi(t) == pytest.approx(mi_reference / math.log(min(shape)), rel=1e-10)


def test_independent_tables_score_zero_and_functions_score_the_entropy():
    independent = np.outer([2.0, 6.0], [1.0, 3.0, 4.0])
    assert mutual_information(independent) == pytest.approx(0.0, abs=1e-12)
    assert r_score(independent) == pytest.approx(0.0, abs=1e-12)
    function = np.diag([3.0, 5.0, 2.0])  # X determined by P
    assert mutual_information(function) == pytest.approx(entropy([3, 5, 2]), rel=1e-12)
    assert normalized_mi(np.diag([4.0, 4.0])) == pytest.approx(1.0)


@pytest.mark.parametrize("n", [2, 3, 5, 7])
def test_entropy_sensitivity_holds_and_is_attained(n):
    bound = entropy_sensitivity(n)
    worst = largest_change(entropy, (3,), n)
    assert worst <= bound + 1e-12
    assert worst == pytest.approx(bound, rel=1e-9)  # a singleton joining a cell of n - 1 rows


@pytest.mark.parametrize(("shape", "n", "binary"), [((2, 2), 5, True), ((2, 3), 5, True), ((3, 3), 5, False), ((3, 4), 4, False), ((2, 2, 2), 4, True)])
def test_mutual_information_sensitivity_holds(shape, n, binary):
    bound = mi_sensitivity(n, binary=binary)
    worst = largest_change(mutual_information, shape, n)
    assert worst <= bound + 1e-12
    assert worst >= 0.4 * bound  # the bound is of the right size, not vacuous


@pytest.mark.parametrize(("shape", "n"), [((2, 2), 5), ((3, 3), 5), ((2, 4), 4)])
def test_r_score_sensitivity_holds(shape, n):
    worst = largest_change(r_score, shape, n)
    assert worst <= r_score_sensitivity(n) + 1e-12
    assert worst >= 0.4 * r_score_sensitivity(n)


# ------------------------------------------------------------------------- exponential mechanism


def test_exponential_mechanism_frequencies_follow_exp_eps_u_over_2_delta():
    utilities = np.array([0.0, 1.0, 2.5, 0.5, 2.0])
    epsilon, sensitivity = 1.3, 0.7
    rng = np.random.default_rng(2024)
    draws = np.array([exponential_mechanism(utilities, epsilon, sensitivity, rng) for _ in range(20_000)])
    observed = np.bincount(draws, minlength=utilities.size)
    law = np.exp(epsilon * utilities / (2 * sensitivity))
    law /= law.sum()
    assert np.allclose(exponential_probabilities(utilities, epsilon, sensitivity), law)
    assert stats.chisquare(observed, law * draws.size).pvalue > 1e-3
    # the same draws reject the law without the factor 2 (the test can tell them apart)
    wrong = np.exp(epsilon * utilities / sensitivity)
    assert stats.chisquare(observed, wrong / wrong.sum() * draws.size).pvalue < 1e-6


def test_exponential_mechanism_without_noise_takes_the_first_best():
    rng = np.random.default_rng(0)
    assert exponential_mechanism(np.array([1.0, 3.0, 3.0]), math.inf, 1.0, rng) == 1


# ------------------------------------------------------------------------- candidates, conditionals


def test_parent_sets_are_the_maximal_sets_under_the_cell_bound():
    sizes = (2, 3, 4, 5, 2)
    got = parent_sets(0, [1, 2, 3, 4], sizes, k=None, max_cells=48)
    # brute force: subsets with 2 * prod <= 48 to which no further attribute can be added
    fits = [s for r in range(5) for s in itertools.combinations([1, 2, 3, 4], r) if 2 * math.prod(sizes[a] for a in s) <= 48]
    maximal = sorted(s for s in fits if not any(set(s) < set(t) for t in fits))
    assert got == maximal
    assert parent_sets(0, [1, 2, 3, 4], sizes, k=1, max_cells=48) == [(1,), (2,), (3,), (4,)]
    assert parent_sets(3, [1, 2], sizes, k=None, max_cells=4) == [()]  # the child alone exceeds the bound
    assert parent_sets(0, [1, 2, 3], sizes, k=2, max_cells=None) == [(1, 2), (1, 3), (2, 3)]


def test_noisy_sets_read_contained_tables_from_later_ones():
    order = [0, 1, 2, 3]
    parents = {0: (), 1: (0,), 2: (0, 1), 3: (2,)}
    assert noisy_sets(order, parents) == {0: (0, 1, 2), 1: (0, 1, 2), 2: (0, 1, 2), 3: (2, 3)}


@pytest.mark.parametrize("total", [100.0, 250.0])
def test_projection_is_the_euclidean_projection_onto_tables_of_n_rows(total):
    noisy = np.array([[50.0, -20.0, 3.0], [12.0, 80.0, -1.0]])
    out = project_counts(noisy, total)
    # independent reference: the shift c of max(x - c, 0) found by bisection on its total
    lo, hi = noisy.min() - total, noisy.max()
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.maximum(noisy - mid, 0).sum() > total else (lo, mid)
    assert np.allclose(out, np.maximum(noisy - lo, 0), atol=1e-9)
    assert out.sum() == pytest.approx(total) and np.all(out >= 0)
    # KKT conditions of min ||y - x||^2 subject to y >= 0, sum y = n: one shift on the support
    shift = (noisy - out)[out > 0]
    assert np.allclose(shift, shift[0]) and np.all(noisy[out == 0] <= shift[0] + 1e-9)


def test_conditional_falls_back_to_the_marginal_for_empty_parent_values():
    counts = np.array([[4.0, 0.0], [0.0, 0.0], [2.0, 6.0]])  # parent on axis 0 (attribute 0), child attribute 1
    cond = conditional_from_counts(1, (0,), (0, 1), counts)
    assert np.allclose(cond.probabilities, [[1.0, 0.0], [0.5, 0.5], [0.25, 0.75]])


# ------------------------------------------------------------------------- the whole release


def joint_distribution(sizes: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    p = rng.dirichlet(np.full(math.prod(sizes), 0.7))
    return p.reshape(sizes)


def test_without_noise_and_k_d_minus_1_samples_converge_to_the_data():
    """epsilon = inf, k = d - 1: the chain rule, so samples follow the data's joint distribution.

    Tolerance: the TVD of the full 36-cell joint between 400 000 samples and 3 000 data rows
    whose distribution the network reproduces exactly; sampling alone gives a TVD of about
    0.5 sum_c sqrt(2 p_c / (pi m)) ~ 0.005 for m = 400 000 draws, so 0.02 fails any real error
    (a dropped dependency costs > 0.05 here).
    """
    rng = np.random.default_rng(7)
    sizes = (2, 3, 2, 3)
    p = joint_distribution(sizes, rng)
    cells = rng.choice(p.size, size=3000, p=p.ravel())
    rows = np.column_stack(np.unravel_index(cells, sizes)).astype(np.int64)
    settings = BayesNetSettings(epsilon=math.inf, k=3)
    task = drive(BayesNetTask([rows], sizes, settings, 1, shared=np.random.SeedSequence(1), secrets=[np.random.SeedSequence(2)]),
                 lambda it, v: v)
    sample = sample_networks(task.networks, 400_000, np.random.default_rng(3))
    data_joint = np.bincount(cells, minlength=p.size) / len(cells)
    sample_joint = np.bincount(np.ravel_multi_index(tuple(sample.T), sizes), minlength=p.size) / len(sample)
    assert 0.5 * np.abs(sample_joint - data_joint).sum() < 0.02
    # with one parent at most the network cannot hold the joint: the same measure is far larger
    tree = drive(BayesNetTask([rows], sizes, BayesNetSettings(epsilon=math.inf, k=1), 1, shared=np.random.SeedSequence(1),
                              secrets=[np.random.SeedSequence(2)]), lambda it, v: v)
    tree_sample = sample_networks(tree.networks, 400_000, np.random.default_rng(3))
    tree_joint = np.bincount(np.ravel_multi_index(tuple(tree_sample.T), sizes), minlength=p.size) / len(tree_sample)
    assert 0.5 * np.abs(tree_joint - data_joint).sum() > 0.05


def test_the_ledger_counts_every_release_and_sums_to_epsilon():
    rng = np.random.default_rng(5)
    sizes = (4, 3, 5, 2, 6)
    rows = np.column_stack([rng.integers(0, s, 4000) for s in sizes]).astype(np.int64)
    for model in ("privbayes", "hmprivbayes"):
        settings = BayesNetSettings(model=model, epsilon=1.0, clustering=False, eta=0.05)
        task = drive(BayesNetTask([rows], sizes, settings, 1, shared=np.random.SeedSequence(1), secrets=[np.random.SeedSequence(2)]),
                     lambda it, v: v)
        budget = Budget.plan(settings, len(sizes))
        charged = sum(x.epsilon for x in task.selections)
        spends = task.ledger.spends
        assert sum(s.epsilon for s in spends if s.mechanism == "exponential") == pytest.approx(charged + (budget.selection if model == "hmprivbayes" else 0))
        assert sum(s.epsilon for s in spends if "conditionals" in s.name) == pytest.approx(budget.conditionals)
        assert task.ledger.epsilon() == pytest.approx(sum(s.epsilon for s in spends))
        assert task.ledger.epsilon() <= 1.0 + 1e-12
        free = sum(1 for x in task.selections if x.n_candidates == 1)
        assert task.ledger.epsilon() == pytest.approx(1.0 - free * budget.selection)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 5}, "'k' = 5 must be less than the number of attributes \\(5\\)"),
        ({"epsilon": math.inf}, "epsilon = inf .* give a degree 'k'"),
        ({"model": "hmprivbayes", "n_clusters": 6}, "'n_clusters' = 6 exceeds the 5 attributes"),
        ({"beta": 1.0}, "'beta' must be a number in \\(0, 1\\)"),
        ({"noise": "local"}, "'noise' must be one of central, shares"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message) as info:
        settings = BayesNetSettings(**kwargs)
        settings.check_attributes(5)
    assert "\n" not in str(info.value)


def test_greedy_refuses_a_parent_outside_the_network():
    g = Greedy((0, 1, 2))
    from p2pem.bayesnet.greedy import Candidate

    g.add(Candidate(0, ()))
    with pytest.raises(ValueError):
        g.add(Candidate(1, (2,)))


def test_a_structure_selection_is_epsilon_dp_on_every_neighbouring_pair_of_small_data_sets():
    """An exact audit: the selection probabilities of all pairs of neighbouring data sets (6 rows over
    three binary attributes, one row replaced) differ by at most e^epsilon, with the R score and its 3/n."""
    n, epsilon = 6, 0.7
    candidates = [(0, (1,)), (0, (2,)), (1, (2,)), (2, (0, 1)), (1, (0, 2))]

    def utilities(rows: np.ndarray) -> np.ndarray:
        out = []
        for child, parents in candidates:
            attrs = (child, *parents)
            out.append(r_score(joint_counts(rows, attrs, (2, 2, 2))[0].reshape((2,) * len(attrs))))
        return np.array(out)

    cells = list(itertools.product(range(2), repeat=3))
    probabilities = {
        combo: exponential_probabilities(utilities(np.array([cells[c] for c in combo])), epsilon, r_score_sensitivity(n))
        for combo in itertools.combinations_with_replacement(range(8), n)
    }
    worst = 0.0
    for combo, p in probabilities.items():
        for i in range(n):  # replace row i by a row of every other cell
            for other in range(8):
                q = probabilities[tuple(sorted((*combo[:i], *combo[i + 1 :], other)))]
                worst = max(worst, float(np.max(np.abs(np.log(p) - np.log(q)))))
    assert worst <= epsilon + 1e-12
    assert worst >= 0.3 * epsilon  # the audit reaches the budget's scale: a wrong sensitivity would show
