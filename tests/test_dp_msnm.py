"""``dp-msnm`` (Wu 2021) replicated with its flaws, and the trade-off sweep over model families."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from p2pem import geometric_graph, make_protocol, run_protocol
from p2pem.cli import main
from p2pem.dp.msnm import MSNM_SPLIT, min_max_weights, msnm_sensitivities
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


def test_lemmas_as_replicated_understate_their_correct_forms() -> None:
    """Flaws 1 and 2 in numbers, with R1 and R2 from SciPy's truncated normal at the box's corners:
    Lemma 2 uses R - R3 where the triangle inequality gives R + R3, Lemma 3 divides by R2, an upper
    bound of t2, where a lower bound of the denominator sum_i z_ik t2_ik (at most n_k r2_min) belongs."""
    import itertools

    from scipy import stats

    bound, n = 2.0, 100
    params = SkewNormalParams.from_direct([0.5, 0.5], [[0.0, 0.0], [1.0, 1.0]], [np.eye(2), 0.5 * np.eye(2)], [[3.0, 1.0], [-2.0, 2.0]])
    s_pi, s_xi, s_eta, s_lam = (a[0] for a in msnm_sensitivities(SKEW_NORMAL.broadcast(params, 1), n, bound))
    np.testing.assert_allclose(s_pi, 1 / n)
    radius = math.sqrt(2) * bound
    for j in range(2):
        ginv = np.linalg.inv(params.gammas[j])
        m2 = 1.0 / (1.0 + params.deltas[j] @ ginv @ params.deltas[j])
        moments = []
        for corner in itertools.product([-bound, bound], repeat=2):
            mu = m2 * params.deltas[j] @ ginv @ (np.array(corner) - params.locations[j])
            tn = stats.truncnorm(-mu / math.sqrt(m2), np.inf, loc=mu, scale=math.sqrt(m2))
            moments.append((tn.mean(), tn.moment(2)))
        r1, r2 = max(m[0] for m in moments), max(m[1] for m in moments)
        r2_min = min(m[1] for m in moments)
        eta, xi, n_k = np.linalg.norm(params.deltas[j]), np.linalg.norm(params.locations[j]), n * params.weights[j]
        assert s_xi[j] == pytest.approx(abs(radius - r1 * eta) / n_k, rel=1e-10)
        assert s_xi[j] < (radius + r1 * eta) / n_k  # the correct Lemma 2
        assert s_eta[j] == pytest.approx(r1 * (radius + xi) / (n * r2), rel=1e-10)
        assert s_eta[j] < r1 * (radius + xi) / (n_k * r2_min)  # with a lower bound of the denominator
    assert sum(MSNM_SPLIT) == pytest.approx(1.0) and np.all(s_lam > 0)


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
