"""Every model family on pdmm-sp's device engine: the code path CUDA runs (checked here through
array-api-strict on the host) gives the vectorised CPU engine's model to the consensus tolerance.

The protocol sums whatever vector the family's statistics are, so the device engine needs no
family code; this shows it for each family rather than assuming it."""

from __future__ import annotations

import numpy as np
import pytest

from p2pem import PdmmSP, geometric_graph, run_protocol
from p2pem.em import EMSettings
from p2pem.families import GAUSSIAN, SKEW_NORMAL, MixedFamily
from p2pem.simulate import max_relative_difference
from p2pem.snmix import SkewNormalParams

TRUTH = SkewNormalParams.from_direct([0.4, 0.6], [[0.0, 0.0], [3.0, 1.0]], [np.eye(2), 0.7 * np.eye(2)], [[4.0, -1.0], [-2.0, 2.0]])
MIXED = MixedFamily(n_continuous=2, n_categories=(3, 4), covariance="full")


def rows(family, rng: np.random.Generator) -> np.ndarray:
    X, labels = SKEW_NORMAL.sample(TRUTH, 240, rng)
    if family is not MIXED:
        return X
    codes = [(labels + rng.integers(0, 2, len(X))) % c for c in MIXED.n_categories]
    return np.column_stack([X, *codes]).astype(float)


@pytest.mark.parametrize("family", [GAUSSIAN, SKEW_NORMAL, MIXED], ids=lambda f: f.name)
def test_device_engine_agrees_with_the_cpu_engine_for_every_family(family):
    X = rows(family, np.random.default_rng(3))
    parts, g = np.array_split(X, 12), geometric_graph(12, seed=3, radius=0.6)
    settings = EMSettings(2, max_iter=4, tol=0.0, init_seed=2, family=family)
    cpu = run_protocol(parts, g, PdmmSP(), settings, seed=1)
    device = run_protocol(parts, g, PdmmSP(device="array-api-strict"), settings, seed=1)
    assert device.protocol_params["device"] == "array-api-strict" and device.n_iter == cpu.n_iter == 4
    assert max_relative_difference(device.params, cpu.params, family) <= 1e-9
    # not the same bits: a device draws the initial duals as one block, not per node
    assert not np.array_equal(family.flatten(device.params), family.flatten(cpu.params))
