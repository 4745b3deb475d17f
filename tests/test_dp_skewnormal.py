"""Differentially private skew-normal EM: sensitivities by brute force, noise in the statistics' units, every private protocol."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from p2pem import geometric_graph, make_protocol, run_protocol
from p2pem.dp import accounting
from p2pem.dp.releases import RepairOptions, private_release
from p2pem.dp.releases.skewnormal import PrivateSkewNormalEM
from p2pem.em import EMSettings
from p2pem.families import SKEW_NORMAL, make_family
from p2pem.simulate import max_relative_difference
from p2pem.snmix import SkewNormalParams, init_statistics

B = 1.5


def _model(k: int) -> SkewNormalParams:
    if k == 1:
        return SkewNormalParams.from_direct([1.0], [[-0.5, 0.2]], [[[0.6, 0.2], [0.2, 0.4]]], [[3.0, -2.0]])
    return SkewNormalParams.from_direct(
        [0.5, 0.5], [[B, B], [-B, -B]], [0.05 * np.eye(2), 0.08 * np.eye(2)], [[4.0, 1.0], [-2.0, 3.0]]
    )


def _hook(k: int, mechanism: str, family=SKEW_NORMAL) -> PrivateSkewNormalEM:
    layout = private_release(family, k, 2, 1, B, mechanism=mechanism, private_init=True, options=RepairOptions())
    return layout.hook


def _released(hook, rows, params) -> np.ndarray:
    batch = SKEW_NORMAL.broadcast(params, 1)
    stats = SKEW_NORMAL.statistics(np.asarray(rows, dtype=float), np.zeros(1, dtype=np.intp), batch)
    return hook.encode(stats, batch)[0]


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_sensitivities_hold_under_brute_force_and_are_attained_with_one_component(k, mechanism) -> None:
    """Add one row anywhere in a grid over the box, or remove one: every released block moves by at
    most its sensitivity (the three model-dependent blocks are released normalised: at most 1),
    in the mechanism's norm; with one component (r0 = 1) the bound is reached at a corner."""
    params = _model(k)
    hook = _hook(k, mechanism)
    layout = private_release(SKEW_NORMAL, k, 2, 1, B, mechanism=mechanism, private_init=True, options=RepairOptions())
    X = np.random.default_rng(0).uniform(-B, B, size=(5, 2))
    base = _released(hook, X, params)
    grid = np.linspace(-B, B, 9)
    neighbours = [_released(hook, np.vstack([X, [a, b]]), params) for a, b in itertools.product(grid, grid)]
    neighbours += [_released(hook, np.delete(X, i, axis=0), params) for i in range(len(X))]
    for block in layout.em:
        diffs = np.array([n[block.index] - base[block.index] for n in neighbours])
        norm = np.abs(diffs).sum(axis=1).max() if mechanism == "laplace" else np.sqrt((diffs**2).sum(axis=1)).max()
        bound = block.l1 if mechanism == "laplace" else block.l2
        assert norm <= bound * (1 + 1e-12), block.name
        if k == 1 or not block.unit:
            assert norm >= 0.99 * bound, (block.name, norm, bound)


def test_model_sensitivities_equal_truncated_normal_moments_at_the_corners() -> None:
    """R1 and R2 of the hook against SciPy's truncated normal, maximised over the box's corners."""
    params = _model(2)
    hook = _hook(2, "gaussian")
    got = hook.sensitivities(SKEW_NORMAL.broadcast(params, 1))[0]
    r1 = r2 = 0.0
    for j in range(2):
        ginv = np.linalg.inv(params.gammas[j])
        m2 = 1.0 / (1.0 + params.deltas[j] @ ginv @ params.deltas[j])
        for corner in itertools.product([-B, B], repeat=2):
            mu = m2 * params.deltas[j] @ ginv @ (np.array(corner) - params.locations[j])
            tn = stats.truncnorm(-mu / math.sqrt(m2), np.inf, loc=mu, scale=math.sqrt(m2))
            r1, r2 = max(r1, tn.mean()), max(r2, tn.moment(2))
    np.testing.assert_allclose(got, [r1, r2, r1 * math.sqrt(2) * B], rtol=1e-5)
    assert np.all(got >= [r1, r2, r1 * math.sqrt(2) * B])  # rounded up: still upper bounds


def test_init_cubes_block_sensitivity() -> None:
    layout = private_release(SKEW_NORMAL, 2, 2, 1, B, mechanism="laplace", private_init=True, options=RepairOptions())
    cubes = next(b for b in layout.init if b.name == "init-cubes")
    X = np.random.default_rng(1).uniform(-B, B, size=(4, 2))
    grid = np.linspace(-B, B, 5)
    base = init_statistics(X, np.zeros(1, dtype=np.intp))[0]
    diffs = np.array([init_statistics(np.vstack([X, [a, b]]), np.zeros(1, dtype=np.intp))[0][cubes.index] - base[cubes.index]
                      for a, b in itertools.product(grid, grid)])
    assert np.abs(diffs).sum(axis=1).max() == pytest.approx(cubes.l1) == 2 * B**3
    assert np.sqrt((diffs**2).sum(axis=1)).max() == pytest.approx(cubes.l2)
    public = private_release(make_family("skew-normal", init_shapes=[1, 1]), 2, 2, 1, B, mechanism="laplace", private_init=True,
                             options=RepairOptions())
    assert "init-cubes" not in [b.name for b in public.init]


def test_budget_kinds_share_their_fraction_and_unit_blocks_calibrate_multipliers() -> None:
    layout = private_release(SKEW_NORMAL, 2, 2, 1, B, mechanism="laplace", private_init=False, options=RepairOptions())
    rel = accounting.releases(list(layout.em), [], 10, accounting.parse_split("equal"))
    share = {r.block.name: r.share * r.count for r in rel}
    assert share["weights"] == pytest.approx(1 / 3)
    assert share["means"] == share["latent-first"] == share["latent-means"] == pytest.approx(1 / 9)
    assert share["covariances"] == share["latent-second"] == pytest.approx(1 / 6)
    scales = accounting.calibrate("laplace", "basic", 2.0, 0.0, rel)
    for r, s in zip(rel, scales, strict=True):
        multiplier = 1.0 / (r.share * 2.0)
        assert s == pytest.approx((1.0 if r.block.unit else r.block.l1) * multiplier)


def test_noise_lands_on_the_statistics_as_multiplier_times_sensitivity() -> None:
    """encode divides the model-dependent blocks by their sensitivity, decode multiplies back:
    unit noise on the release is noise of the sensitivity's size on the statistics."""
    params = _model(1)
    hook = _hook(1, "gaussian")
    batch = SKEW_NORMAL.broadcast(params, 1)
    X = np.random.default_rng(2).uniform(-B, B, size=(30, 2))
    exact = SKEW_NORMAL.statistics(X, np.zeros(1, dtype=np.intp), batch)
    released = hook.encode(exact, batch)
    bump = np.zeros_like(released)
    bump[0, 1] = 1.0  # one unit on "latent-first" (s1 of component 0)
    decoded = hook.decode(released + bump, batch) - hook.decode(released, batch)
    sens = hook.sensitivities(batch)[0]
    assert decoded[0, 1] == pytest.approx(sens[0], rel=1e-12)


def _network(seed: int = 0):
    rng = np.random.default_rng(seed)
    truth = SkewNormalParams.from_direct([0.5, 0.5], [[-0.8, -0.5], [0.2, 0.6]], [0.3 * np.eye(2), 0.2 * np.eye(2)], [[2.0, 1.0], [-1.0, 2.0]])
    X, _ = SKEW_NORMAL.sample(truth, 240, rng)
    X = np.clip(X, -3.0, 3.0)
    return np.array_split(X, 12), geometric_graph(12, seed=seed, radius=0.7)


@pytest.mark.parametrize(
    "name,params",
    [("dp-central", {}), ("dp-distributed", {"aggregation": "secure-sum"}), ("dp-distributed", {"aggregation": "pdmm-sp"})],
    ids=["central", "distributed-secure-sum", "distributed-pdmm-sp"],
)
def test_without_noise_every_private_protocol_is_skew_normal_em(name, params) -> None:
    parts, g = _network(1)
    settings = EMSettings(2, max_iter=8, tol=0.0, init_seed=3, family=SKEW_NORMAL)
    ref = run_protocol(parts, g, make_protocol("centralized"), settings)
    run = run_protocol(parts, g, make_protocol(name, {"epsilon": math.inf, "bound": 3.0, **params}), settings, seed=2)
    assert max_relative_difference(run.params, ref.params, SKEW_NORMAL) <= 1e-8
    assert run.protocol_params["privacy"]["epsilon"]["outsider"] is None  # infinite epsilon: no guarantee


def test_private_skew_normal_runs_agree_between_engines_and_report_epsilon() -> None:
    parts, g = _network(2)
    settings = EMSettings(2, max_iter=3, tol=0.0, init_seed=1, family=SKEW_NORMAL)
    spec = make_protocol("dp-distributed", {"epsilon": 5.0, "bound": 3.0, "aggregation": "pdmm-sp"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a noisy shape may reach the boundary: not what this test is about
        a = run_protocol(parts, g, spec, settings, seed=4, engine="vectorised")
        b = run_protocol(parts, g, spec, settings, seed=4, engine="messages")
    assert np.array_equal(SKEW_NORMAL.flatten(a.params), SKEW_NORMAL.flatten(b.params))
    spent = a.protocol_params["epsilon_spent"]["colluders"]
    assert spent["rdp"] == pytest.approx(5.0, rel=1e-6)
    assert a.protocol_params["privacy"]["colluders"] == 6


def test_families_without_a_private_release_are_refused() -> None:
    from dataclasses import dataclass, field

    from p2pem.errors import ConfigError
    from p2pem.families import SkewNormalFamily

    @dataclass(frozen=True)
    class Unreleased(SkewNormalFamily):
        name: str = field(init=False, default="unreleased")

    parts, g = _network(3)
    settings = EMSettings(2, max_iter=2, tol=0.0, family=Unreleased())
    with pytest.raises(ConfigError, match=r"^dp-central-gaussian: the released statistics and their sensitivities are derived for "
                                          r"the families gaussian, skew-normal, mixed only, not 'unreleased' \(em.family\)$"):
        run_protocol(parts, g, make_protocol("dp-central", {"bound": 3.0}), settings)
