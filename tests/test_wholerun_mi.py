"""Multi-iteration leakage in the Fig. 3 setting: exact values, KSG, and the attack agree."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from p2pem.leakage.estimators import mi_with_ci
from p2pem.leakage.multi_mi import init_sum_leakage_bits, multi_iteration_leakage
from p2pem.leakage.views import Adversary
from p2pem.registry import make_protocol

FIG1 = nx.Graph([(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (2, 4)])


def test_init_sum_closed_form_limits():
    assert math.isinf(init_sum_leakage_bits(2))
    values = [init_sum_leakage_bits(g) for g in range(3, 12)]
    assert all(a > b > 0 for a, b in zip(values, values[1:], strict=False))  # consecutive pairs
    # the sum alone already tells I(X1; sum) = 1/2 log2(g / (g - 1)); the square sum adds to it
    for g, v in zip(range(3, 12), values, strict=True):
        assert v > 0.5 * math.log2(g / (g - 1))
    assert init_sum_leakage_bits(1000) < 0.01


def test_init_sum_closed_form_bounds_the_ksg_estimate():
    """KSG is biased low for this singular (arcsine) conditional, never above the exact value."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4000, 5))
    est, lo, hi = mi_with_ci(x[:, 0], np.column_stack([x.sum(1), (x**2).sum(1)]), rng=rng)
    exact = init_sum_leakage_bits(5)
    assert lo <= exact + 0.05 and est > 0.6 * exact


@pytest.mark.slow
def test_attack_and_mi_agree_in_direction_on_fig1():
    """Corrupt nodes 2 and 4 (ids 1, 3): pdmm-sp discloses sums over {1, 3, 5}, secure-sum over {1, 5}.

    More disclosed means higher attack success and higher MI: after the initialisation the
    pair {1, 5} is recovered (exact MI infinite) while the triple is not (exact MI finite);
    one EM iteration later the triple is recovered too and the MI estimate rises above the
    initialisation's confidence interval.
    """
    adv = Adversary("honest-but-curious", {1, 3})
    pd = multi_iteration_leakage(make_protocol("pdmm-sp"), FIG1, adv, 0, iterations_seen=(0, 1), runs=500, seed=1)
    ss = multi_iteration_leakage(make_protocol("secure-sum"), FIG1, adv, 0, iterations_seen=(0, 1), runs=500, seed=1)
    assert pd.group == (0, 2, 4) and ss.group == (0, 4)
    assert pd.attack_success[0] == 0.0 and pd.attack_success[1] > 0.95
    assert ss.attack_success[0] > 0.95
    assert pd.exact_bits[0] == pytest.approx(init_sum_leakage_bits(3)) and math.isinf(ss.exact_bits[0])
    # the estimate after one EM iteration lies above the initialisation's interval (the two
    # intervals, which include the estimator's bias at 500 runs, overlap)
    assert pd.mi_bits[1] > pd.mi_hi[0]
    assert ss.mi_lo[0] > pd.mi_hi[0]
    assert pd.mi_bits[0] <= pd.exact_bits[0] + 0.05
