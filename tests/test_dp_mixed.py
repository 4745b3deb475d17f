"""Differentially private EM of the mixed-type family: sensitivities by brute force, limits, noise, repair."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from p2pem import geometric_graph, make_protocol, run_protocol
from p2pem.dp.releases.mixed import PrivateMixedEM, em_blocks, init_blocks, project_to_simplex
from p2pem.em import EMSettings
from p2pem.errors import ConfigError
from p2pem.families import MixedFamily
from p2pem.families.mixed import MixedParams
from p2pem.simulate import max_relative_difference, protocol_streams

CATEGORIES = (3, 2)


def corner_model(family: MixedFamily, B: float) -> MixedParams:
    """Two narrow components at opposite corners of the box: responsibilities become one-hot there."""
    p = family.n_continuous
    cov = np.full((2, p), 0.01) if family.covariance == "diag" else np.repeat(0.01 * np.eye(p)[None], 2, axis=0)
    probs = np.array([[0.6, 0.3, 0.1, 0.5, 0.5], [0.1, 0.3, 0.6, 0.5, 0.5]])
    if family.stratify is not None:
        family.fix_strata(probs, 2)
    return MixedParams(np.array([0.5, 0.5]), np.array([[B] * p, [-B] * p]), cov, probs)


@pytest.mark.parametrize(
    "family",
    [MixedFamily(2, CATEGORIES), MixedFamily(2, CATEGORIES, "full"), MixedFamily(2, CATEGORIES, stratify=1)],
    ids=["diag", "full", "stratified"],
)
def test_sensitivity_bounds_hold_and_are_attained_by_brute_force(family):
    """Add a row anywhere on a grid over the box with every combination of categories, or remove
    one: each released block moves by at most its stated L1/L2 sensitivity, and by it at a corner."""
    B, k = 1.5, 2
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(-B, B, size=(5, 2)), rng.integers(0, 3, 5), rng.integers(0, 2, 5)]).astype(float)
    model = corner_model(family, B)
    batch = family.broadcast(model, 1)
    family.check(batch)
    hook = PrivateMixedEM(family, k, 1, B)
    one = np.zeros(1, dtype=np.intp)

    def released(rows):
        return hook.encode(family.statistics(rows, one, batch), batch)[0]

    grid = np.linspace(-B, B, 5)
    candidates = [np.array([a, b, c, s], dtype=float) for a, b, c, s in itertools.product(grid, grid, range(3), range(2))]
    base, base_init = released(X), family.init_statistics(X, one)[0]
    added = [np.vstack([X, row]) for row in candidates]
    removed = [np.delete(X, i, axis=0) for i in range(len(X))]
    for blocks, stats, reference in [
        (em_blocks(family, k, B), released, base),
        (init_blocks(family, B), lambda rows: family.init_statistics(rows, one)[0], base_init),
    ]:
        moves = [stats(rows) - reference for rows in added + removed]
        for block in blocks:
            diffs = np.array([m[block.index] for m in moves])
            l1, l2 = np.abs(diffs).sum(axis=1).max(), np.sqrt((diffs**2).sum(axis=1)).max()
            assert l1 <= block.l1 * (1 + 1e-12) and l2 <= block.l2 * (1 + 1e-12), block.name
            assert l1 >= 0.99 * block.l1 and l2 >= 0.99 * block.l2, block.name
    counted = len(family.counted)
    categories = next(b for b in em_blocks(family, k, B) if b.name == "categories")
    assert (categories.l1, categories.l2) == (counted, math.sqrt(counted))


def rows_and_graph(n_nodes: int = 8, seed: int = 4):
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, 240)
    cont = np.clip(np.where(label[:, None] == 0, -0.4, 0.4) + 0.2 * rng.standard_normal((240, 2)), -1, 1)
    codes = np.column_stack([np.where(rng.random(240) < 0.8, label, 2), rng.integers(0, 2, 240)])
    X = np.column_stack([cont, codes]).astype(float)
    return np.array_split(X, n_nodes), geometric_graph(n_nodes, seed=seed, radius=0.8)


@pytest.mark.parametrize("name,params", [("dp-central", {}), ("dp-distributed", {"aggregation": "secure-sum"})])
@pytest.mark.parametrize("covariance", ["diag", "full"])
def test_infinite_epsilon_is_centralized_em(name, params, covariance):
    parts, g = rows_and_graph()
    settings = EMSettings(2, max_iter=6, tol=0.0, init_seed=3, family=MixedFamily(2, (3, 2), covariance))
    ref = run_protocol(parts, g, make_protocol("centralized"), settings)
    run = run_protocol(parts, g, make_protocol(name, {"epsilon": math.inf, "bound": 1.0, **params}), settings)
    assert max_relative_difference(run.params, ref.params, settings.family) <= 1e-12
    assert run.protocol_params["split"] == "mixed"  # the family's default split, recorded


def test_codes_are_not_clipped_and_the_noise_has_the_calibrated_scale():
    parts, g = rows_and_graph()
    family = MixedFamily(2, (3, 2))
    settings = EMSettings(2, max_iter=4, tol=0.0, family=family)
    # tolerate = 0: the n shares make exactly the calibrated noise (the default doubles its variance)
    spec, bound_settings, clipped = make_protocol("dp-distributed", {"epsilon": 1.0, "bound": 0.5, "tolerate": 0}).bind(settings, parts)
    np.testing.assert_array_equal(np.vstack(clipped)[:, 2:], np.vstack(parts)[:, 2:])  # codes keep their values
    assert np.abs(np.vstack(clipped)[:, :2]).max() == 0.5
    topo = spec.topology(g)
    values = np.zeros((len(parts), family.stats_size(2, 4) + 1))
    out = np.array([spec.aggregate(values, topo, protocol_streams(np.random.SeedSequence(r), len(parts)), 1).results[0] * len(parts)
                    for r in range(1500)])
    expected = spec.plan.em_scale
    noisy = expected > 0
    np.testing.assert_allclose(out.std(axis=0)[noisy], expected[noisy], rtol=0.1)
    assert np.all(out[:, ~noisy] == 0) and not noisy[-2:].any()  # log-likelihood and continue flag untouched
    kinds = {b.name for b in em_blocks(family, 2, 0.5)}
    assert kinds == {"weights", "means", "covariances", "categories"}


def test_tiny_epsilon_still_gives_a_valid_model():
    parts, g = rows_and_graph()
    family = MixedFamily(2, (3, 2), stratify=1)
    settings = EMSettings(4, max_iter=5, tol=0.0, family=family, init_seed=1)
    run = run_protocol(parts, g, make_protocol("dp-central", {"epsilon": 0.01, "bound": 1.0}), settings)
    model = run.params
    assert np.all(model.weights > 0) and abs(model.weights.sum() - 1) < 1e-12
    assert np.all(model.covariances >= 1e-3) and np.all(model.covariances <= 1.0)
    for start, size in zip(family.offsets, family.n_categories, strict=True):
        np.testing.assert_allclose(model.probabilities[:, start : start + size].sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.probabilities[:, 3:5], [[1, 0], [1, 0], [0, 1], [0, 1]])  # strata stay one-hot


def test_splits_follow_the_family():
    parts, g = rows_and_graph()
    settings = EMSettings(2, max_iter=3, tol=0.0, family=MixedFamily(2, (3, 2)))
    with pytest.raises(ConfigError, match="mixed family: 'split' must be one of mixed, equal or 5 fractions 'weights,means,covariances,categories,init', got 'wu'"):
        make_protocol("dp-central", {"split": "wu", "bound": 1.0}).bind(settings, parts)
    spec, _, _ = make_protocol("dp-central", {"split": "1,1,1,6,1", "bound": 1.0}).bind(settings, parts)
    shares = {r.block.name: r.share * r.count for r in spec.plan.releases}
    assert shares["categories"] == pytest.approx(0.6) and shares["init-categories"] == pytest.approx(0.1 / 4)
    # a model without Gaussian columns releases no means or covariances: their share goes to the rest
    cats = dataclasses.replace(settings, family=MixedFamily(0, (3, 2)))
    spec, _, _ = make_protocol("dp-central", {"bound": 1.0}).bind(cats, [p[:, 2:] for p in parts])
    assert {r.block.name for r in spec.plan.releases} == {"weights", "categories", "init-weights", "init-categories"}
    assert sum(r.share * r.count for r in spec.plan.releases) == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="split"):
        make_protocol("dp-central", {"split": "lots"})


def test_simplex_projection_matches_its_definition():
    rng = np.random.default_rng(1)
    v = rng.normal(0.2, 0.5, size=(200, 6))
    proj = project_to_simplex(v)
    np.testing.assert_allclose(proj.sum(axis=1), 1.0)
    assert np.all(proj >= 0)
    # optimality: no other point of the simplex is closer (random candidates)
    for row, p in zip(v[:20], proj[:20], strict=True):
        others = rng.dirichlet(np.ones(6), size=2000)
        assert np.linalg.norm(row - p) <= np.linalg.norm(row - others, axis=1).min() + 1e-12
    valid = rng.dirichlet(np.ones(5), size=10)
    np.testing.assert_allclose(project_to_simplex(valid), valid, atol=1e-15)
