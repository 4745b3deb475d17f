"""The accountant composes the exponential mechanism with noise mechanisms: checked against dp-accounting and closed forms."""

from __future__ import annotations

import math

import dp_accounting as dpa
import pytest
from dp_accounting import rdp

from p2pem.dp import accounting
from p2pem.dp.mechanisms import Block

SELECTION = accounting.Release(Block("structure", 0, 1, 0.002, 0.002), 14, 1 / 14)
TABLES = accounting.Release(Block("tables", 0, 100, 2.0, 2.0), 13, 1 / 13)
SELECTION_SCALE = 2 * 0.002 / 0.02  # one selection at epsilon 0.02
TABLE_SCALE = 2.0 / 0.05  # one table at epsilon 0.05


def test_one_selection_costs_2_delta_u_over_its_gumbel_scale():
    assert accounting.spent("exponential", "basic", 0.0, [SELECTION], [SELECTION_SCALE]) == pytest.approx(14 * 0.02)


def test_basic_composition_adds_the_pure_epsilons():
    groups = [("exponential", [SELECTION], [SELECTION_SCALE]), ("laplace", [TABLES], [TABLE_SCALE])]
    assert accounting.spent_composed(groups, "basic", 0.0) == pytest.approx(14 * 0.02 + 13 * 0.05)


def test_zcdp_uses_the_bounded_range_bound_of_the_exponential_mechanism():
    delta = 1e-5
    rho = 14 * 0.02**2 / 8 + 13 * 0.05**2 / 2  # Cesar & Rogers: eps^2 / 8; Bun & Steinke: eps^2 / 2
    expected = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    groups = [("exponential", [SELECTION], [SELECTION_SCALE]), ("laplace", [TABLES], [TABLE_SCALE])]
    assert accounting.spent_composed(groups, "zcdp", delta) == pytest.approx(expected, rel=1e-12)


def test_rdp_matches_dp_accounting_on_the_same_events():
    delta = 1e-5
    acc = rdp.RdpAccountant()
    acc.compose(dpa.ComposedDpEvent([
        dpa.SelfComposedDpEvent(dpa.ZCDpEvent(0.02**2 / 8), 14),
        dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(TABLE_SCALE / 2.0), 13),
    ]))
    groups = [("exponential", [SELECTION], [SELECTION_SCALE]), ("laplace", [TABLES], [TABLE_SCALE])]
    assert accounting.spent_composed(groups, "rdp", delta) == pytest.approx(acc.get_epsilon(delta), rel=1e-9)


def test_no_noise_is_infinite_and_nothing_is_free():
    assert math.isinf(accounting.spent_composed([("laplace", [TABLES], [0.0])], "basic", 0.0))
    assert accounting.spent_composed([], "rdp", 1e-5) == 0.0
    assert math.isinf(accounting.spent_composed([("exponential", [SELECTION], [SELECTION_SCALE])], "zcdp", 0.0))
