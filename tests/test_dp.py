"""Differentially private EM: limits, reproducibility, noise scale, sensitivities, accounting, repairs."""

from __future__ import annotations

import dataclasses
import itertools
import math

import networkx as nx
import numpy as np
import pytest

from p2pem.data import split_rows, synthetic_mixture
from p2pem.dp import accounting, mechanisms, postprocess
from p2pem.dp.protocols import DataBoundWarning, PrivateEM
from p2pem.families import GAUSSIAN
from p2pem.em import EMSettings
from p2pem.errors import ConfigError
from p2pem.gmm import GMMParams, batch_statistics, init_from_global, init_statistics, precision_cholesky
from p2pem.registry import make_protocol
from p2pem.simulate import max_relative_difference, protocol_streams, run_protocol

N_NODES = 8


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(3)
    X, _, _ = synthetic_mixture(120, n_features=2, n_components=2, separation=4.0, rng=rng)
    parts = split_rows(X, N_NODES, how="even", rng=rng)
    g = nx.cycle_graph(N_NODES)
    g.add_edges_from([(0, 4), (2, 6)])
    init = init_from_global(init_statistics(X), 2, 7)
    settings = EMSettings(2, max_iter=8, tol=0.0, init=init)
    bound = float(np.ceil(np.max(np.abs(X))))
    return parts, g, settings, bound


def _run(problem, name, seed=0, settings=None, **params):
    parts, g, s, bound = problem
    params.setdefault("bound", bound)
    return run_protocol(parts, g, make_protocol(name, params), settings or s, seed=seed)


VARIANTS = [
    ("dp-central", {"mechanism": "gaussian"}),
    ("dp-central", {"mechanism": "laplace", "accountant": "basic", "delta": 0.0}),
    ("dp-distributed", {"aggregation": "secure-sum"}),
    ("dp-distributed", {"aggregation": "secure-sum", "mechanism": "laplace", "accountant": "zcdp"}),
]


@pytest.mark.parametrize("name,params", VARIANTS)
@pytest.mark.parametrize("private_init", [False, True])
def test_infinite_epsilon_is_centralized_em(problem, name, params, private_init):
    parts, g, s, bound = problem
    settings = dataclasses.replace(s, init=None, init_seed=7) if private_init else s
    ref = run_protocol(parts, g, make_protocol("centralized"), settings)
    run = _run(problem, name, settings=settings, epsilon=math.inf, **params)
    assert max_relative_difference(run, ref) <= 1e-12


def test_infinite_epsilon_over_pdmm_sp_is_as_close_as_pdmm_sp(problem):
    parts, g, s, _ = problem
    ref = run_protocol(parts, g, make_protocol("centralized"), s)
    plain = run_protocol(parts, g, make_protocol("pdmm-sp"), s, seed=0)
    run = _run(problem, "dp-distributed", epsilon=math.inf, aggregation="pdmm-sp")
    assert max_relative_difference(run, ref) <= max(10 * max_relative_difference(plain, ref), 1e-9)


def test_error_shrinks_with_the_noise(problem):
    parts, g, s, _ = problem
    ref = run_protocol(parts, g, make_protocol("centralized"), s)
    lap = {"mechanism": "laplace", "accountant": "basic", "delta": 0.0}
    errors = [max_relative_difference(_run(problem, "dp-central", epsilon=eps, **lap), ref) for eps in (1e6, 1e9, 1e12)]
    # same seed and pure DP, so the noise is the same draw scaled by 1/epsilon: the error follows it down
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-8


@pytest.mark.parametrize("name,params", VARIANTS)
def test_fixed_seed_reproduces_and_another_seed_differs(problem, name, params):
    a = _run(problem, name, seed=5, epsilon=2.0, **params)
    b = _run(problem, name, seed=5, epsilon=2.0, **params)
    c = _run(problem, name, seed=6, epsilon=2.0, **params)
    for key in ("weights", "means", "covariances"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.means, c.means)


@pytest.mark.parametrize("name", ["dp-distributed", "dp-central"])
def test_message_engine_matches_vectorised_bit_for_bit(problem, name):
    parts, g, s, bound = problem
    spec = make_protocol(name, {"epsilon": 1.0, "bound": bound})
    a = run_protocol(parts, g, spec, s, seed=4, engine="vectorised")
    b = run_protocol(parts, g, spec, s, seed=4, engine="messages")
    for key in ("weights", "means", "covariances"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))


def test_repaired_run_stays_valid_at_tiny_epsilon(problem):
    run = _run(problem, "dp-central", epsilon=0.01, mechanism="laplace", accountant="basic", delta=0.0)
    assert np.all(run.weights >= 0) and abs(run.weights.sum() - 1) < 1e-12
    assert np.all(np.abs(run.means) <= problem[3])
    precision_cholesky(run.covariances)  # positive definite


def test_private_runs_release_no_log_likelihood(problem):
    import json

    run = _run(problem, "dp-distributed", epsilon=1.0)
    assert len(run.loglik) == run.n_iter + 1 and all(math.isnan(v) for v in run.loglik)
    doc = json.loads(json.dumps(run.to_json(), allow_nan=False))
    assert doc["loglik"] == [None] * (run.n_iter + 1)
    assert doc["protocol_params"]["epsilon_spent"]["colluders"]["rdp"] == pytest.approx(1.0, rel=1e-6)


# ----------------------------------------------------------------------------- noise


def _bound_spec(problem, name, **params):
    parts, g, s, bound = problem
    spec, settings, parts = make_protocol(name, dict(params, bound=bound)).bind(s, parts)
    return spec, spec.topology(g), settings


@pytest.mark.parametrize("name,extra", [("dp-central", {}), ("dp-distributed", {"tolerate": 0})])
@pytest.mark.parametrize("mechanism,accountant,delta", [("gaussian", "rdp", 1e-5), ("laplace", "basic", 0.0)])
def test_added_noise_has_the_calibrated_scale(problem, name, extra, mechanism, accountant, delta):
    spec, topo, settings = _bound_spec(problem, name, epsilon=1.0, mechanism=mechanism, accountant=accountant, delta=delta, **extra)
    k, d = 2, 2
    values = np.zeros((N_NODES, mechanisms.em_release_size(k, d)))
    draws = 2000
    out = np.empty((draws, values.shape[1]))
    for r in range(draws):
        rngs = protocol_streams(np.random.SeedSequence(r), N_NODES)
        out[r] = spec.aggregate(values, topo, rngs, 1).results[0] * N_NODES  # noisy sum
    expected = mechanisms.noise_std(spec.plan.em_scale, mechanism)
    noisy = expected > 0
    np.testing.assert_allclose(out.std(axis=0)[noisy], expected[noisy], rtol=0.1)
    assert np.all(out[:, ~noisy] == 0)  # log-likelihood slot and continue flag are not perturbed
    # the shape too: Laplace has excess kurtosis 3, the Gaussian 0 (distributed shares must add up to it)
    z = (out[:, noisy] - out[:, noisy].mean(axis=0)) / out[:, noisy].std(axis=0)
    kurtosis = float(np.mean(z**4) - 3)
    assert abs(kurtosis - (3.0 if mechanism == "laplace" else 0.0)) < 0.6


def test_scales_follow_the_hand_computed_basic_composition(problem):
    parts, g, s, bound = problem
    eps, T, d = 2.0, s.max_iter, 2
    spec, _, _ = _bound_spec(problem, "dp-central", epsilon=eps, mechanism="laplace", accountant="basic", delta=0.0, split="equal")
    # public init: the init quarter is not spent, so each of weights/means/covariances gets 1/3,
    # spread over T iterations: epsilon / (3 T) per release
    per_release = eps / (3 * T)
    # replace-one neighbours (n public): twice the add-or-remove sensitivities
    l1 = [2 * v for v in (1.0, d * bound, bound**2 * d * (d + 1) / 2)]
    expected = np.concatenate([np.full(2, l1[0] / per_release), np.full(4, l1[1] / per_release), np.full(6, l1[2] / per_release), [0, 0]])
    np.testing.assert_allclose(spec.plan.em_scale, expected, rtol=1e-14)
    assert spec.accounting()["basic"] == pytest.approx(eps, rel=1e-12)
    assert spec.accounting(0) == spec.accounting()  # one trusted draw: nodes and outsiders alike


def test_gaussian_zcdp_scales_follow_bun_and_steinke(problem):
    parts, g, s, bound = problem
    eps, delta, T, d = 1.0, 1e-6, s.max_iter, 2
    spec, _, _ = _bound_spec(problem, "dp-central", epsilon=eps, delta=delta, accountant="zcdp", split="wu")
    # rho with rho + 2 sqrt(rho log(1/delta)) = epsilon, by the quadratic formula in sqrt(rho)
    L = math.log(1 / delta)
    root = (-2 * math.sqrt(L) + math.sqrt(4 * L + 4 * eps)) / 2
    rho = root**2
    assert rho + 2 * math.sqrt(rho * L) == pytest.approx(eps)
    shares = np.array([0.04, 0.16, 0.70]) / 0.90 / T  # public init: the 10 % are spread over the rest
    # replace-one neighbours (n public): twice the add-or-remove sensitivities
    l2 = [2 * v for v in (1.0, math.sqrt(d) * bound, bound**2 * math.sqrt(d * (d + 1) / 2))]
    sigma = [sens / math.sqrt(2 * f * rho) for sens, f in zip(l2, shares, strict=True)]
    expected = np.concatenate([np.full(2, sigma[0]), np.full(4, sigma[1]), np.full(6, sigma[2]), [0, 0]])
    np.testing.assert_allclose(spec.plan.em_scale, expected, rtol=1e-12)


# ----------------------------------------------------------------------- sensitivity


def test_sensitivity_bounds_hold_and_are_attained_by_brute_force():
    """Add or remove one row anywhere in a grid over the box: the released sums move by at most
    the stated L1/L2 sensitivity, and by almost exactly that at a corner."""
    B, k, d = 1.5, 2, 2
    rng = np.random.default_rng(0)
    X = rng.uniform(-B, B, size=(5, d))
    # well separated, narrow components at two corners: responsibilities become one-hot there
    params = GMMParams(np.array([0.5, 0.5]), np.array([[B, B], [-B, -B]]), np.repeat(0.05 * np.eye(d)[None], k, axis=0))
    hook = PrivateEM(k, d, 1, B)

    def released(rows):
        prec = precision_cholesky(params.covariances)
        stats = batch_statistics(rows, np.zeros(1, dtype=np.intp), params.weights[None], params.means[None], prec[None])
        return hook.encode(stats, GAUSSIAN.broadcast(params, 1))[0]

    base = released(X)
    grid = np.linspace(-B, B, 7)
    neighbours = [released(np.vstack([X, [a, b]])) for a, b in itertools.product(grid, grid)]
    neighbours += [released(np.delete(X, i, axis=0)) for i in range(len(X))]
    for block in mechanisms.em_blocks(k, d, B):
        diffs = np.array([n[block.index] - base[block.index] for n in neighbours])
        l1 = np.abs(diffs).sum(axis=1).max()
        l2 = np.sqrt((diffs**2).sum(axis=1)).max()
        assert l1 <= block.l1 * (1 + 1e-12) and l2 <= block.l2 * (1 + 1e-12), block.name
        assert l1 >= 0.99 * block.l1 and l2 >= 0.99 * block.l2, block.name
    for block in mechanisms.init_blocks(d, B):
        diffs = np.array([init_statistics(np.vstack([X, [a, b]]))[block.index] - init_statistics(X)[block.index] for a, b in itertools.product(grid, grid)])
        assert np.abs(diffs).sum(axis=1).max() == pytest.approx(block.l1)
        assert np.sqrt((diffs**2).sum(axis=1)).max() == pytest.approx(block.l2)


# ------------------------------------------------------------------------ accounting


def _releases(T=10, split="wu", private_init=True):
    em = mechanisms.em_blocks(3, 2, 2.0)
    init = mechanisms.init_blocks(2, 2.0) if private_init else []
    return accounting.releases(em, init, T, accounting.parse_split(split))


@pytest.mark.parametrize("mechanism,acc,delta", [
    ("gaussian", "basic", 1e-5), ("gaussian", "zcdp", 1e-5), ("gaussian", "rdp", 1e-5),
    ("laplace", "basic", 0.0), ("laplace", "zcdp", 1e-5), ("laplace", "rdp", 1e-5),
])
def test_calibration_spends_exactly_the_budget(mechanism, acc, delta):
    rel = _releases()
    assert sum(r.count * r.share for r in rel) == pytest.approx(1.0)
    scales = accounting.calibrate(mechanism, acc, 1.5, delta, rel)
    assert accounting.spent(mechanism, acc, delta, rel, scales) == pytest.approx(1.5, rel=1e-6)


def test_wu_split_gives_the_papers_shares():
    rel = {r.block.name: r.count * r.share for r in _releases()}
    assert rel["weights"] == pytest.approx(0.04) and rel["means"] == pytest.approx(0.16)
    assert rel["covariances"] == pytest.approx(0.70)
    assert rel["init-count"] + rel["init-sum"] + rel["init-second"] == pytest.approx(0.10)


def test_rdp_agrees_with_dp_accounting_on_the_same_events():
    import dp_accounting as dpa
    from dp_accounting import rdp

    rel = _releases(T=20)
    scales = accounting.calibrate("gaussian", "rdp", 1.0, 1e-5, rel)
    # splitting by sigma_r = L2_r z / sqrt(f_r) composes to one Gaussian of multiplier z per unit budget:
    # the library's own accountant on that single event gives the same epsilon
    z = scales[0] / rel[0].block.l2 * math.sqrt(rel[0].share)
    acc = rdp.RdpAccountant()
    acc.compose(dpa.GaussianDpEvent(z))
    assert acc.get_epsilon(1e-5) == pytest.approx(1.0, rel=1e-6)


def test_analytic_gaussian_and_zcdp_agree_with_dp_accounting():
    import dp_accounting as dpa
    from dp_accounting import rdp

    one = accounting.releases(mechanisms.em_blocks(1, 1, 1.0)[:1], [], 1, (1.0, 0.0, 0.0, 0.0))
    assert accounting.calibrate("gaussian", "basic", 0.8, 1e-6, one)[0] == pytest.approx(dpa.get_sigma_gaussian(0.8, 1e-6))
    # zCDP: Bun & Steinke's conversion is a valid upper bound on the library's tighter one
    rho = 0.05
    acc = rdp.RdpAccountant()
    acc.compose(dpa.ZCDpEvent(rho))
    library = acc.get_epsilon(1e-5)
    ours = accounting._epsilon_for(rho, 1e-5)
    assert library <= ours <= 1.25 * library


def test_bad_budgets_are_rejected():
    with pytest.raises(ConfigError, match="delta = 0"):
        make_protocol("dp-central", {"delta": 0.0})
    with pytest.raises(ConfigError, match="split"):
        make_protocol("dp-central", {"split": "park"})
    with pytest.raises(ConfigError, match="'mechanism' must be one of"):
        make_protocol("dp-central", {"mechanism": "exponential"})
    assert accounting.parse_split("1,1,2,0.5") == (1.0, 1.0, 2.0, 0.5)


def test_tolerate_must_leave_an_honest_node(problem):
    parts, g, s, bound = problem
    for bad in (-1, True, 1.5):
        with pytest.raises(ConfigError, match=r"dp-distributed: 'tolerate' must be"):
            make_protocol("dp-distributed", {"tolerate": bad})
    for t in (N_NODES, N_NODES + 3):
        spec = make_protocol("dp-distributed", {"tolerate": t, "bound": bound})
        message = rf"^dp-distributed: 'tolerate' = {t} must be below the {N_NODES} nodes"
        with pytest.raises(ConfigError, match=message):
            spec.validate(g)  # what the commands call before running anything
        with pytest.raises(ConfigError, match=message):
            run_protocol(parts, g, spec, s)
    run = _run(problem, "dp-distributed", epsilon=1.0, tolerate=N_NODES - 1)  # every share carries the whole noise
    assert run.protocol_params["privacy"]["colluders"] == N_NODES - 1


@pytest.mark.parametrize("split,block", [("1,1,2,0", "init"), ("0,1,1,1", "weights"), ("1,-0.5,1,1", "means"), ("1,1,nan,1", "covariances"),
                                         ("1,1,inf,1", "covariances")])
def test_zero_negative_or_nan_split_fractions_are_refused(split, block):
    """A zero fraction once meant "release this block without noise" while epsilon stayed finite."""
    with pytest.raises(ConfigError, match=rf"^dp-distributed: 'split': the {block} fraction must be a finite number > 0") as err:
        make_protocol("dp-distributed", {"split": split})
    assert "\n" not in str(err.value)


def test_a_private_run_needs_an_em_iteration(problem):
    """max_iter = 0 used to aggregate the init's statistics once more with zero noise."""
    parts, g, s, bound = problem
    for private_init in (False, True):
        settings = dataclasses.replace(s, max_iter=0, init=None if private_init else s.init)
        with pytest.raises(ConfigError, match=r"at least one EM iteration, got max_iter = 0 \(the estimator's max_iter; \[em\] max_iter in a scenario\)"):
            run_protocol(parts, g, make_protocol("dp-central", {"bound": bound}), settings)


@pytest.mark.parametrize("name,params", VARIANTS)
def test_a_private_run_makes_exactly_the_aggregations_it_pays_for(problem, name, params):
    """Counted from the message trace: the private init (if any) and one per EM iteration, no more."""
    parts, g, s, bound = problem
    for settings in (s, dataclasses.replace(s, init=None)):
        spec = make_protocol(name, dict(params, bound=bound, epsilon=1.0))
        run = run_protocol(parts, g, spec, settings, seed=1, record_trace=True)
        aggregations = sorted({m.iteration for m in run.trace})
        paid = (0 if settings.init is None else 1, settings.max_iter)
        assert aggregations == list(range(paid[0], paid[1] + 1))
        assert run.n_iter == settings.max_iter and len(run.loglik) == run.n_iter + 1


# ---------------------------------------------------------------------- the data domain


def test_missing_bound_is_read_off_the_data_with_a_warning(problem):
    parts, g, s, _ = problem
    with pytest.warns(DataBoundWarning, match="NOT differentially private"):
        run = run_protocol(parts, g, make_protocol("dp-central", {"epsilon": 1.0}), s)
    assert run.protocol_params["bound_from_data"] is True
    # no finite epsilon for a run that is not differentially private
    assert run.protocol_params["privacy"]["epsilon"] == {"outsider": None, "colluders": None, "aggregator": None}
    assert set(run.protocol_params["epsilon_spent"]["colluders"].values()) == {None}
    assert "NOT differentially private" in run.protocol_params["privacy"]["excluded"][0]


def test_bound_clips_the_data(problem):
    parts, g, s, _ = problem
    clipped = [np.clip(p, -1.0, 1.0) for p in parts]
    ref = run_protocol(clipped, g, make_protocol("centralized"), s)
    # (floors off: points piled up on the box's corners give eigenvalues below the default 1e-3)
    spec = make_protocol("dp-central", {"epsilon": math.inf, "bound": 1.0, "eig_floor": 1e-12, "weight_floor": 0.0})
    assert sum(int(np.sum(np.abs(p) > 1.0)) for p in parts) > 20
    run = run_protocol(parts, g, spec, s)
    assert max_relative_difference(run, ref) <= 1e-12


def test_private_runs_need_a_fixed_number_of_iterations(problem):
    parts, g, s, bound = problem
    with pytest.raises(ConfigError, match="tol = 0"):
        run_protocol(parts, g, make_protocol("dp-central", {"bound": bound}), dataclasses.replace(s, tol=1e-6))


# ----------------------------------------------------------------------- post-processing


@pytest.mark.parametrize("method", postprocess.REPAIRS)
def test_repaired_covariances_are_positive_definite_whatever_the_noise(method):
    rng = np.random.default_rng(1)
    d = 4
    a = rng.normal(size=(300, d, d))
    base = a @ np.swapaxes(a, -1, -2) / d
    noise = rng.normal(scale=rng.choice([0.1, 10.0, 1e4], size=(300, 1, 1)), size=(300, d, d))
    noisy = base + (noise + np.swapaxes(noise, -1, -2)) / 2
    assert np.mean(np.linalg.eigvalsh(noisy)[:, 0] < 0) > 0.5  # mostly indefinite
    fixed = postprocess.repair_covariances(noisy, method, 1e-3)
    np.linalg.cholesky(fixed)
    assert np.all(np.linalg.eigvalsh(fixed)[:, 0] >= 1e-3 * (1 - 1e-9))
    np.testing.assert_array_equal(fixed, np.swapaxes(fixed, -1, -2))
    good = base + 2e-3 * np.eye(d)
    np.testing.assert_array_equal(postprocess.repair_covariances(good, method, 1e-3), good)


def test_weights_are_clipped_smoothed_and_renormalised():
    w = np.array([[0.7, -0.2, 0.5], [0.2, 0.3, 0.5]])
    out = postprocess.clip_weights(w, floor=0.01)
    np.testing.assert_allclose(out[0], np.array([0.7, 0.01, 0.5]) / 1.21)
    np.testing.assert_array_equal(out[1], w[1])  # needed nothing: untouched
    smooth = postprocess.clip_weights(w, floor=0.01, smoothing=1.0)
    np.testing.assert_allclose(smooth.sum(axis=1), 1.0)
    assert np.all(np.diff(smooth[1]) > 0) and smooth[1, 2] - smooth[1, 0] < w[1, 2] - w[1, 0]


def test_dp_protocols_are_named_in_scenarios(tmp_path):
    from p2pem.scenario import load_scenario

    text = """seed = 1
[data]
source = "synthetic"
n_samples = 60
[graph]
kind = "geometric"
n_nodes = 6
[em]
n_components = 2
[[protocols]]
name = "dp-distributed"
aggregation = "ring"
"""
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"s.toml: protocols\[0\]: .*'aggregation' must be one of"):
        load_scenario(path)
    path.write_text(text.replace('"ring"', '"pdmm-sp"'))
    assert load_scenario(path).protocols[0].name == "dp-distributed"


def test_result_json_of_a_private_run_says_against_whom_and_what_is_excluded(tmp_path):
    """p2pem simulate: a private run's privacy block names epsilon per adversary (the outsider's
    below the colluders' for Gaussian shares), the side channels it does not cover and the
    scenario's preprocessing fitted on the rows; the file validates against its schema."""
    import json

    from test_schemas import validate

    from p2pem.cli import main

    text = """seed = 1
[data]
source = "synthetic"
n_samples = 90
[graph]
kind = "geometric"
n_nodes = 6
[em]
n_components = 2
max_iter = 3
tol = 0.0
[[protocols]]
name = "dp-distributed"
aggregation = "pdmm-sp"
bound = 4.0
[[protocols]]
name = "dp-central"
bound = 4.0
"""
    path = tmp_path / "s.toml"
    path.write_text(text)
    assert main(["simulate", str(path), "--out", str(tmp_path / "out"), "-q"]) == 0
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    validate(doc)
    assert doc["version"] == 2
    dist, central = (p["protocol_params"] for p in doc["protocols"])
    assert dist["privacy"]["colluders"] == 3 and dist["privacy"]["epsilon"]["colluders"] == pytest.approx(1.0, rel=1e-6)
    assert dist["privacy"]["epsilon"]["outsider"] < 0.8  # six shares where three carry the calibrated noise
    assert dist["epsilon_spent"]["outsider"]["rdp"] == dist["privacy"]["epsilon"]["outsider"]
    assert central["privacy"]["epsilon"] == {"outsider": pytest.approx(1.0, rel=1e-6), "colluders": pytest.approx(1.0, rel=1e-6), "aggregator": None}
    assert central["privacy"]["colluders"] == 5
    excluded = " | ".join(dist["privacy"]["excluded"])
    for needle in ("[-4, 4]", "consensus_iterations", "node_spread", "wall_s"):  # fitted preprocessing is refused (test_publication)
        assert needle in excluded, needle
    assert "consensus_iterations" not in " | ".join(central["privacy"]["excluded"])


def test_a_noisy_private_initialisation_always_gives_a_valid_init():
    """Noise can leave the init's moments far outside the box (a count near zero, a second moment
    of 1e4): the repaired covariance keeps its eigenvalues in [floor, d B^2], so the init's
    6-digit rounding cannot make it singular (it did at epsilon = 0.1 on AIS)."""
    from p2pem.gmm import init_from_global_batch

    d, bound = 2, 4.0
    hook = PrivateEM(2, d, 20, bound)
    rng = np.random.default_rng(0)
    rows = np.column_stack([rng.normal(0, 0.5, 500), rng.normal(0, 50, (500, 2)), rng.normal(0, 5e4, (500, 3))])
    fixed = hook.decode_init(rows)
    for row in fixed:
        w, means, cov = init_from_global_batch(row[None], 2, 7)
        lam = np.linalg.eigvalsh(cov[0, 0])
        assert lam[0] > 0 and lam[-1] <= d * bound**2 * (1 + 1e-5)  # (up to the 6-digit rounding)
    # moments already consistent and inside the limits are kept
    inside = np.array([[1.0, 0.5, -0.25, 1.5, 0.1, 0.8]])
    np.testing.assert_array_equal(hook.decode_init(inside), inside)


def test_a_scenario_whose_private_protocol_cannot_run_runs_nothing(tmp_path, capsys, monkeypatch):
    """The private protocol's settings are checked before the exact protocol before it runs."""
    from p2pem import runner
    from p2pem.cli import main

    ran = []
    real = runner.run_protocol
    monkeypatch.setattr(runner, "run_protocol", lambda *a, **k: ran.append(a[2].name) or real(*a, **k))
    path = tmp_path / "s.toml"
    path.write_text(
        'seed = 1\n[data]\nsource = "synthetic"\nn_samples = 60\n[graph]\nkind = "geometric"\nn_nodes = 6\n'
        '[em]\nn_components = 2\nmax_iter = 0\ntol = 0.0\n[[protocols]]\nname = "pdmm-sp"\n'
        '[[protocols]]\nname = "dp-central"\nbound = 4.0\n'
    )
    assert main(["simulate", str(path), "--out", str(tmp_path / "out"), "-q"]) != 0
    err = capsys.readouterr().err
    assert "dp-central-gaussian: a private run needs at least one EM iteration, got max_iter = 0 (the estimator's max_iter; [em] max_iter in a scenario)" in err
    assert ran == [] and not (tmp_path / "out").exists()
