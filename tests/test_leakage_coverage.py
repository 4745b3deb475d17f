"""The leakage estimator's interval covers the exact value, and its limits are reported.

The coverage case runs the analysis's own estimation pipeline (principal components, the
adversary's cross-fitted linear estimate refitted per batch, KSG, bias correction) on a view
that is linear in independent Gaussians, so :func:`exact_linear_mi` gives the true value.
"""

from __future__ import annotations

import numpy as np
import pytest

from p2pem.leakage.measure import Estimator
from p2pem.leakage.reduce import exact_linear_mi, principal_components

REPEATS = 100


def _linear_case(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    rng = np.random.default_rng(seed)
    latents = rng.standard_normal((n, 5))  # X, then four noises
    x, n1, n2, n3, n4 = latents.T
    view = np.column_stack([x + 1.2 * n1, n1 + n2, 0.5 * x + n3, n2 - n3 + n4])
    exact = exact_linear_mi(latents, np.ones(5), view, [0])
    assert exact is not None
    return x, view, exact[0]


@pytest.mark.slow
def test_interval_covers_the_exact_value_at_the_nominal_rate() -> None:
    covered = 0
    biases = []
    for seed in range(REPEATS):
        x, view, exact = _linear_case(seed, 600)
        est = Estimator(rng=np.random.default_rng(10_000 + seed)).estimate(x, principal_components(view))
        covered += est.lo <= exact <= est.hi
        biases.append(est.bias)
        assert est.method == "linear reduction" and 0 < est.r2 < 1
    rate = covered / REPEATS
    # measured: 0.96 over these 100 seeds (0.98 at 2000 samples; 0.96 for Fig. 1's node 1 under
    # pdmm-sp through the whole analysis at 1e4 runs, where the raw estimate with the sampling
    # interval alone covered in 87-89 %)
    assert rate >= 0.93, rate
    # the bias is stated on its own and is small next to the value (exact 1.07 bits)
    assert abs(float(np.mean(biases))) < 0.05


def test_a_nonlinear_view_is_estimated_whole_and_says_so() -> None:
    rng = np.random.default_rng(3)
    n = 2_000
    x = rng.standard_normal(n)
    view = np.column_stack([x**2, x + 1.5 * rng.standard_normal(n)])  # |x| exactly, its sign roughly
    est_linear = Estimator(rng=np.random.default_rng(1)).estimate(x, principal_components(view), linear=True)
    est = Estimator(rng=np.random.default_rng(1)).estimate(x, principal_components(view), linear=False)
    assert est_linear.method == "linear reduction" and est_linear.r2 < 0.5 and est_linear.bits < 0.5
    assert est.method == "full view" and est.bits > 3 * est_linear.bits


@pytest.mark.slow
def test_interval_covers_through_the_whole_pipeline() -> None:
    # Fig. 1's node 1 under pdmm-sp after round 3, seen by the corrupt nodes {2, 4}: the
    # protocol's own trace, the adversary's view, the reduction and the estimate, each repeat
    # with fresh inputs, protocol randomness and estimator jitter.  Measured: 0.96 for node 1
    # (0.97 and 0.95 for nodes 3 and 5) over these 100 seeds at 1000 runs, where the raw
    # estimate with the sampling interval alone covered in 87-89 %.
    import dataclasses
    from pathlib import Path

    from p2pem.leakage.analysis import prepare_protocols
    from p2pem.leakage.measure import measure
    from p2pem.leakage.montecarlo import make_adversary, monte_carlo, monte_carlo_spec
    from p2pem.leakage.config import parse_leakage
    from p2pem.leakage.views import build_view
    from p2pem.runner import build_graph
    from p2pem.scenario import load_scenario

    scenario = load_scenario(Path(__file__).parent.parent / "scenarios" / "fig1.toml")
    runs, rounds, sd = 1000, 3, 1.0 / scenario.em.n_components
    cfg = dataclasses.replace(parse_leakage(scenario), runs=runs)
    graph = build_graph(scenario)
    pdmm = next(p for p in prepare_protocols(scenario, cfg, graph) if p.spec.name == "pdmm-sp")
    spec = monte_carlo_spec(pdmm.spec, rounds)
    adversary = make_adversary("honest-but-curious", cfg)
    covered = 0
    for seed in range(REPEATS):
        inputs = sd * np.random.default_rng([seed, 1]).standard_normal((graph.number_of_nodes(), runs))
        mc = monte_carlo(spec, graph, inputs, input_sd=sd, seed=np.random.SeedSequence([seed, 2]))
        view = build_view(mc.trace, adversary, inputs=mc.inputs, outputs=mc.outcome.results)
        estimator = Estimator(cfg.k, cfg.n_batches, cfg.level, cfg.folds, np.random.default_rng([seed, 3]))
        series = measure(mc, view, [0], [rounds], estimator)[0]
        assert series.exact_bits is not None
        exact, est = series.exact_bits[-1], series.estimates[-1]
        assert exact == pytest.approx(0.5 * np.log2(1.5), abs=1e-3)  # the floor I(X1; X1+X3+X5) once round 2 is seen
        covered += est.lo <= exact <= est.hi
    assert covered / REPEATS >= 0.93, covered / REPEATS
