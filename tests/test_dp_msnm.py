"""``dp-msnm`` (Wu 2021) as printed: its budget split and Lemmas 1-4, and the trade-off sweep over model families."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from p2pem import geometric_graph, make_protocol, run_protocol
from p2pem.cli import main
from p2pem.dp.msnm import MSNM_SPLIT, MsnmHook, min_max_weights, msnm_budgets, msnm_sensitivities
from p2pem.em import EMSettings
from p2pem.errors import ConfigError
from p2pem.families import SKEW_NORMAL
from p2pem.snmix import SkewNormalParams

ROOT = Path(__file__).resolve().parents[1]


def test_min_max_step_maps_every_two_component_model_to_the_same_weights() -> None:
    """Flaw 4: whatever two weights go in, (zeta, 1 + zeta) / (1 + 2 zeta) comes out."""
    rng = np.random.default_rng(0)
    w = rng.dirichlet([1.0, 1.0], size=50)
    out = np.sort(min_max_weights(w, 0.1), axis=1)
    np.testing.assert_allclose(out, np.tile([0.1 / 1.2, 1.1 / 1.2], (50, 1)), rtol=1e-14)
    np.testing.assert_allclose(min_max_weights(np.array([[1.0]]), 0.1), [[1.0]])


def test_budget_split_is_algorithm_2_and_composes_to_epsilon() -> None:
    """eps_Lambda = 0.6 eps/(T G), eps_xi = eps_eta = 0.13 eps/(T G), the weights the rest (0.14 eps/T):
    T (eps_pi + G (eps_xi + eps_eta + eps_Lambda)) = eps."""
    for eps, T, G in [(1.0, 20, 2), (1000.0, 7, 3), (0.1, 1, 1)]:
        b_pi, b_xi, b_eta, b_lam = msnm_budgets(eps, T, G)
        assert b_lam == pytest.approx(0.6 * eps / (T * G), rel=1e-14)
        assert b_xi == pytest.approx(0.13 * eps / (T * G), rel=1e-14) and b_eta == b_xi
        assert b_pi == pytest.approx(0.14 * eps / T, rel=1e-12)
        assert T * (b_pi + G * (b_xi + b_eta + b_lam)) == pytest.approx(eps, rel=1e-14)
    assert MSNM_SPLIT == (0.14, 0.13, 0.13, 0.6)


def _truncnorm_moments(params: SkewNormalParams, j: int, corners) -> tuple[float, float]:
    """R1, R2 of component j over the box's corners: the largest E[tau | x], E[tau^2 | x] by SciPy."""
    from scipy import stats

    ginv = np.linalg.inv(params.gammas[j])
    m2 = 1.0 / (1.0 + params.deltas[j] @ ginv @ params.deltas[j])
    moments = []
    for corner in corners:
        mu = m2 * params.deltas[j] @ ginv @ (np.array(corner) - params.locations[j])
        tn = stats.truncnorm(-mu / math.sqrt(m2), np.inf, loc=mu, scale=math.sqrt(m2))
        moments.append((tn.mean(), tn.moment(2)))
    return max(m[0] for m in moments), max(m[1] for m in moments)


def test_sensitivities_are_lemmas_1_to_4_as_printed_and_scale_the_noise() -> None:
    """Lemmas 1-4 of Wu (2021) from R = max ||x||_1 over the box, R1 and R2 from SciPy's truncated
    normal at the box's corners, R3 = ||eta_k||_1; the hook's Laplace scales are S / eps."""
    import itertools

    bound, n = 2.0, 100
    params = SkewNormalParams.from_direct([0.5, 0.5], [[0.0, 0.0], [1.0, 1.0]], [np.eye(2), 0.5 * np.eye(2)], [[3.0, 1.0], [-2.0, 2.0]])
    batch = SKEW_NORMAL.broadcast(params, 1)
    sens = [a[0] for a in msnm_sensitivities(batch, n, bound)]
    corners = list(itertools.product([-bound, bound], repeat=2))
    R = max(np.abs(c).sum() for c in corners)
    G = 2
    hook = MsnmHook(n, 20, bound, 5.0, 0.1, np.random.default_rng(0))
    scales = [a[0] for a in hook.scales(batch)]
    for j in range(2):
        R1, R2 = _truncnorm_moments(params, j, corners)
        R3 = np.abs(params.deltas[j]).sum()
        printed = (G / n, 4 * G * abs(R - R3) / n, 2 * G * R * R1 / (n * R2), 2 * G * (R**2 + 4 * R * R1 * R3 + 4 * R2 * R3**2) / n)
        for s, ref, scale, eps in zip(sens, printed, scales, msnm_budgets(5.0, 20, G), strict=True):
            assert s[j] == pytest.approx(ref, rel=1e-9)
            assert scale[j] == pytest.approx(ref / eps, rel=1e-9)


def _m_step(X: np.ndarray, r0: np.ndarray, r1: np.ndarray, r2: np.ndarray, eta: np.ndarray):
    """Eqs. (8)-(10) of Wu (2021) for one component, d = 1, written out: (pi, xi, eta, Lambda)."""
    N = r0.sum()
    xi = (r0 @ X - eta * (r0 @ r1)) / N
    eta_new = (r0 * r1) @ (X - xi) / N
    lam = (r0 @ (X - xi) ** 2 - 2 * eta_new * ((r0 * r1) @ (X - xi)) + eta_new**2 * (r0 @ r2)) / N
    return N / len(X), xi, eta_new, lam


def test_brute_force_over_neighbours_lemma_1_holds_and_lemma_2_does_not() -> None:
    """Every neighbour D' = D minus one row of a small data set in [-1, 1] whose components both keep
    N_k >= n / (2G) (the paper's assumption): the weights move by at most Lemma 1's G / n, but with
    ||eta_k||_1 = R the printed Lemma 2 allows xi_k no change at all, and it moves (flaw 1)."""
    from p2pem.snmix import log_responsibilities

    bound, G = 1.0, 2
    X = np.linspace(-1.0, 1.0, 12)[:, None]
    params = SkewNormalParams.from_working([0.5, 0.5], [[-0.6], [0.4]], [[1.0], [-0.3]], [[[0.2]], [[0.3]]])
    s_pi, s_xi, _, _ = (a[0] for a in msnm_sensitivities(SKEW_NORMAL.broadcast(params, 1), len(X), bound))
    assert s_xi[0] == 0.0  # R - R3 = 1 - 1

    def fit(rows):
        log_resp, _ = log_responsibilities(rows, params)
        r0 = np.exp(log_resp)
        out = []
        for k in range(G):
            c = np.linalg.solve(params.gammas[k], params.deltas[k])
            m2 = 1.0 / (1.0 + params.deltas[k] @ c)
            mu = m2 * (rows - params.locations[k]) @ c
            r1 = mu + math.sqrt(m2) * stats_lambda(mu / math.sqrt(m2))
            r2 = mu * r1 + m2
            out.append(_m_step(rows[:, 0], r0[:, k], r1, r2, params.deltas[k, 0]))
        return np.array(out), r0.sum(axis=0)

    full, counts = fit(X)
    assert np.all(counts >= len(X) / (2 * G))
    moved_pi, moved_xi = 0.0, 0.0
    for i in range(len(X)):
        part, counts = fit(np.delete(X, i, axis=0))
        assert np.all(counts >= (len(X) - 1) / (2 * G))
        moved_pi = max(moved_pi, np.abs(full[:, 0] - part[:, 0]).sum())
        moved_xi = max(moved_xi, abs(full[0, 1] - part[0, 1]))
    assert moved_pi <= s_pi[0]
    assert moved_xi > 1e-3 > s_xi[0]


def stats_lambda(z: np.ndarray) -> np.ndarray:
    """phi(z) / Phi(z) by SciPy (the inverse Mills ratio of the truncated normal)."""
    from scipy import stats

    return stats.norm.pdf(z) / stats.norm.cdf(z)


def _parts():
    truth = SkewNormalParams.from_direct([0.5, 0.5], [[-1.0, -0.5], [0.5, 0.8]], [0.3 * np.eye(2), 0.2 * np.eye(2)], [[2.0, 1.0], [-1.0, 2.0]])
    X, _ = SKEW_NORMAL.sample(truth, 200, np.random.default_rng(1))
    return np.array_split(np.clip(X, -3, 3), 10), geometric_graph(10, seed=2, radius=0.7)


def test_dp_msnm_without_noise_is_em_with_its_weight_step_and_says_it_is_no_guarantee() -> None:
    parts, g = _parts()
    settings = EMSettings(2, max_iter=5, tol=0.0, init_seed=1, family=SKEW_NORMAL)
    run = run_protocol(parts, g, make_protocol("dp-msnm", {"epsilon": math.inf, "bound": 3.0}), settings)
    np.testing.assert_allclose(np.sort(run.params.weights), [0.1 / 1.2, 1.1 / 1.2], rtol=1e-12)
    privacy = run.protocol_params["privacy"]
    assert privacy["epsilon"]["outsider"] is None and privacy["epsilon"]["claimed"] is None
    assert any("no guarantee" in item for item in privacy["excluded"])
    noisy = run_protocol(parts, g, make_protocol("dp-msnm", {"epsilon": 1e4, "bound": 3.0}), settings, seed=3)
    again = run_protocol(parts, g, make_protocol("dp-msnm", {"epsilon": 1e4, "bound": 3.0}), settings, seed=3)
    assert np.array_equal(SKEW_NORMAL.flatten(noisy.params), SKEW_NORMAL.flatten(again.params))
    assert not np.array_equal(SKEW_NORMAL.flatten(noisy.params), SKEW_NORMAL.flatten(run.params))
    assert noisy.protocol_params["privacy"]["epsilon"]["claimed"] == 1e4


def test_dp_msnm_fits_skew_normal_mixtures_only() -> None:
    parts, g = _parts()
    with pytest.raises(ConfigError, match=r'^dp-msnm: DP-MSNM fits skew-normal mixtures: set \[em\] family = "skew-normal", not \'gaussian\'$'):
        run_protocol(parts, g, make_protocol("dp-msnm", {"bound": 3.0}), EMSettings(2, max_iter=3, tol=0.0))
    with pytest.raises(ConfigError, match="zeta must be a finite number > 0"):
        make_protocol("dp-msnm", {"zeta": 0.0})


SWEEP = """
seed = 4
[data]
source = "csv"
path = "rows.csv"
[graph]
kind = "edges"
edges = [[0, 1], [1, 2], [2, 3], [3, 4], [4, 0], [0, 2]]
[em]
n_components = 2
family = "skew-normal"
max_iter = 3
tol = 0.0
[tradeoff]
epsilons = [1.0, 1e4]
n_seeds = 2
test_fraction = 0.25
families = ["skew-normal", "gaussian"]
[[protocols]]
name = "dp-msnm"
bound = 4.0
[[protocols]]
name = "dp-central"
bound = 4.0
[[protocols]]
name = "centralized"
"""


def test_tradeoff_sweeps_both_families_and_records_failed_runs(tmp_path: Path) -> None:
    from test_schemas import validate

    rng = np.random.default_rng(0)
    X = np.vstack([rng.gamma(2.0, 0.5, size=(40, 2)) - 1.5, rng.normal(size=(40, 2)) + 1.5])
    (tmp_path / "rows.csv").write_text("a,b\n" + "\n".join(f"{x:.6f},{y:.6f}" for x, y in X) + "\n")
    (tmp_path / "s.toml").write_text(SWEEP)
    out = tmp_path / "out"
    assert main(["tradeoff", str(tmp_path / "s.toml"), "--out", str(out), "-q"]) == 0
    doc = json.loads((out / "tradeoff.json").read_text())
    validate(doc)
    assert doc["version"] == 3 and [f["name"] for f in doc["families"]] == ["skew-normal", "gaussian"]
    runs = doc["runs"]
    assert {(r["protocol"], r["family"]) for r in runs} == {
        ("dp-msnm", "skew-normal"), ("dp-central-gaussian", "skew-normal"), ("centralized", "skew-normal"),
        ("dp-central-gaussian", "gaussian"), ("centralized", "gaussian"),
    }
    for r in runs:
        assert (r["failed"] is None) == (r["heldout_loglik"] is not None)
    assert {r["family"] for r in runs if r["protocol"] == "centralized"} == {"skew-normal", "gaussian"}


def test_tradeoff_family_names_are_checked(tmp_path: Path, capsys) -> None:
    (tmp_path / "rows.csv").write_text("a,b\n" + "\n".join(f"{i},{i % 3}" for i in range(40)) + "\n")
    (tmp_path / "s.toml").write_text(SWEEP.replace('"gaussian"]', '"gausian"]'))
    assert main(["tradeoff", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "'tradeoff.families' unknown model family 'gausian'" in err and "did you mean 'gaussian'?" in err
