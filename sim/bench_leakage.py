"""Benchmark: the leakage analysis of the paper's Fig. 1 example, all three protocols.

Runs ``scenarios/fig1.toml`` as ``p2pem leakage`` would (10^4 Monte Carlo runs, 20 iterations,
federated, secure-sum and pdmm-sp against the corrupt nodes 2 and 4), without writing files,
and prints the wall time of every stage, the cost of the Monte Carlo batch calls and traces,
and the leakage per protocol and honest node next to the exact value and the closed form.
Goal: under 30 s on a 2-core machine.

    .venv/bin/python sim/bench_leakage.py [--runs N] [--scenario PATH]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

GOAL_S = 30.0
ROOT = Path(__file__).resolve().parent.parent


def _bits(v: float | None) -> str:
    if v is None:
        return "-"
    return "inf" if math.isinf(v) else f"{v:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "fig1.toml"))
    parser.add_argument("--runs", type=int, default=None, help="Monte Carlo runs (default: the scenario's)")
    args = parser.parse_args()

    t_import = time.perf_counter()
    import dataclasses

    from p2pem.leakage.analysis import analyse_scenario
    from p2pem.leakage.config import parse_leakage
    from p2pem.scenario import load_scenario

    import_s = time.perf_counter() - t_import
    scenario = load_scenario(args.scenario)
    config = parse_leakage(scenario)
    if args.runs is not None:
        config = dataclasses.replace(config, runs=args.runs)

    t0 = time.perf_counter()
    report = analyse_scenario(scenario, config=config)
    wall = time.perf_counter() - t0

    print(f"scenario {scenario.name}: {config.runs} Monte Carlo runs, {config.iterations} iterations, "
          f"{len(config.targets)} targets, k={config.k}; cpus available: {len(os.sched_getaffinity(0))}")
    print(f"imports: {import_s:.2f} s (numpy, scipy, scikit-learn via npeet-plus)")
    print("stage timings:")
    for stage, seconds in report.timings.items():
        print(f"  {stage:<44} {seconds:7.2f} s")
    print(f"  {'(full-disclosure ceiling and the rest)':<44} {wall - sum(report.timings.values()):7.2f} s")
    print(f"analysis wall time: {wall:.2f} s  (goal < {GOAL_S:.0f} s: {'met' if wall < GOAL_S else 'MISSED'})")

    print(f"\nleakage after iteration {config.iterations} (KSG estimate with 95% CI; exact from the view's linear "
          f"structure; closed form by design; ceiling {report.ceiling_bits:.3f} bits)")
    print(f"{'protocol':<12} {'node':>4} {'KSG bits':>9} {'95% CI':>17} {'NMI':>6} {'exact':>7} {'closed form':>11}  what")
    for r in report.iteration_runs:
        lo, hi = r.mi_ci[-1]
        ex = None if r.exact_bits is None else r.exact_bits[-1]
        print(f"{r.protocol:<12} {r.node_label:>4} {r.mi_bits[-1]:>9.3f} {f'[{lo:.3f}, {hi:.3f}]':>17} {r.nmi[-1]:>6.3f} "
              f"{_bits(ex):>7} {_bits(r.floor_bits):>11}  {r.floor}")
    pdmm = [r for r in report.iteration_runs if r.protocol == "pdmm-sp"]
    if pdmm:
        print("\npdmm-sp per iteration (KSG / exact), node " + ", ".join(r.node_label for r in pdmm) + ":")
        for t in range(len(pdmm[0].iterations)):
            cells = "   ".join(f"{r.mi_bits[t]:.3f} / {_bits(r.exact_bits[t] if r.exact_bits else None)}" for r in pdmm)
            print(f"  iteration {pdmm[0].iterations[t]:>2}: {cells}")


if __name__ == "__main__":
    main()
