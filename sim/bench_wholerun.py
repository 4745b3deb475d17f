"""Whole-run privacy analysis on Parkinsons: wall time and the key numbers.

Runs ``p2pem leakage scenarios/parkinsons_wholerun.toml --whole-run`` in-process (3 protocols x
3 corrupt sets x honest-but-curious / both, plus the eavesdropper, over the full 100-iteration
run), then the same on ``scenarios/ais_wholerun.toml`` (d = 3, about 5 rows per node) and the
multi-iteration MI of the paper's Fig. 3 setting, and prints the wall time per phase and, per (protocol, adversary, corrupt set), the
fraction of honest rows the attack recovers against the EM iterations it saw, the median
reconstruction error and the public-model baseline.  Goal: under 2 minutes on 2 cores.

    .venv/bin/python sim/bench_wholerun.py [--figure docs/whole_run.png]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "parkinsons_wholerun.toml"))
    ap.add_argument("--ais", default=str(ROOT / "scenarios" / "ais_wholerun.toml"), help="second scenario (d = 3, ~5 rows per node); '' to skip")
    ap.add_argument("--figure", default=None, help="also write the figure (of the first scenario) here")
    ap.add_argument("--mi-runs", type=int, default=1000, help="Monte Carlo runs of the Fig. 3 multi-iteration MI (0: skip)")
    args = ap.parse_args()

    records = _analyse(args.scenario, goal=True)
    if args.ais:
        _analyse(args.ais, goal=False)
    _fig3_mi(args.mi_runs)
    if args.figure:
        from p2pem.leakage.wholerun_plot import whole_run_figure

        scenario, tolerance, recs = records
        whole_run_figure(recs, Path(args.figure), title=f"{scenario}: attack on the whole run", tolerance=tolerance)
        print(f"wrote {args.figure}")
    return 0


def _analyse(path: str, *, goal: bool):
    """Run one scenario's whole-run analysis and print its timings and table."""
    from p2pem.leakage.wholerun_analysis import analyse_whole_run, parse_whole_run
    from p2pem.scenario import load_scenario

    scenario = load_scenario(path)
    config = parse_whole_run(scenario)
    t0 = time.perf_counter()
    report = analyse_whole_run(scenario, config)
    wall = time.perf_counter() - t0
    print(f"whole-run analysis of {scenario.name}: {report.n_nodes} nodes, {report.n_rows} rows, d = {report.n_features}, "
          f"K = {report.n_components}; {len(config.corrupt_sets)} corrupt sets; {os.cpu_count()} cores visible")
    print(f"wall time {wall:.1f} s" + (" (goal < 120 s on 2 cores)" if goal else ""))
    for p in report.protocols:
        print(f"  {p['protocol']:<11} {p['aggregations']} aggregations (max {p['max_rounds']} rounds), {p['adversaries']} adversaries: "
              f"run + reduction {p['run_and_reduction_s']:.1f} s, {p['groups_attacked']} groups attacked in {p['attack_s']:.1f} s")
    worst = max(g["max_reduction_error"] for d in report.disclosures for g in d["groups"])
    print(f"exact reduction: group sums from the views vs from the inputs, largest relative difference {worst:.1e}")
    seen = report.records[0].iterations_seen
    print(f"fraction of honest rows recovered within {config.tolerance:g} after T EM iterations seen; "
          f"median RMS error at T = {seen[-1]} vs the public-model baseline")
    head = f"{'protocol':<11} {'adversary':<19} {'corrupt':>7} {'groups (rows)':<26}" + "".join(f"{'T=' + str(t):>7}" for t in seen) + f"{'error':>9} {'baseline':>9}"
    print(head)
    print("-" * len(head))
    table = defaultdict(list)
    for r in report.records:
        table[(r.protocol, r.adversary, r.corrupt, r.server_corrupt)].append(r)
    for (proto, adv, corrupt, server), recs in table.items():
        rows = np.array([r.rows for r in recs], dtype=float)
        frac = rows @ np.array([r.rows_recovered for r in recs]) / rows.sum()
        sizes = sorted({(len(r.group), r.group_rows) for r in recs}, key=lambda t: -t[1])
        desc = ", ".join(f"{g}({m})" for g, m in sizes[:3]) + (f" +{len(sizes) - 3}" if len(sizes) > 3 else "")
        print(f"{proto:<11} {adv:<19} {str(len(corrupt)) + ('+S' if server else ''):>7} {desc:<26}"
              + "".join(f"{v:>7.2f}" for v in frac)
              + f"{np.median([r.reconstruction_error[-1] for r in recs]):>9.2g} {np.median([r.baseline_error for r in recs]):>9.2g}")
    print()
    return scenario.name, config.tolerance, report.records


def _fig3_mi(runs: int) -> None:
    """The paper's Fig. 3 setting over T EM iterations: KSG (reduced view), exact, attack."""
    if runs <= 0:
        return
    import networkx as nx

    from p2pem.leakage.multi_mi import multi_iteration_leakage
    from p2pem.leakage.views import Adversary
    from p2pem.registry import make_protocol

    fig1 = nx.Graph([(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (2, 4)])
    adv = Adversary("honest-but-curious", {1, 3})
    t0 = time.perf_counter()
    print(f"\nFig. 3 setting (Fig. 1 graph, corrupt nodes 2 and 4, X_i ~ N(0, 1), K = 2, a, b, C and the log-likelihood "
          f"of every aggregation), node 1, {runs} runs:")
    print(f"{'protocol':<11} {'group':<10} {'T':>2} {'KSG bits':>9} {'95% CI':>16} {'exact':>7} {'attack success':>15}")
    for name in ("pdmm-sp", "secure-sum", "federated"):
        r = multi_iteration_leakage(make_protocol(name), fig1, adv, 0, iterations_seen=(0, 1, 2), runs=runs, seed=3)
        for t, mi, lo, hi, ex, ok in zip(r.iterations_seen, r.mi_bits, r.mi_lo, r.mi_hi, r.exact_bits, r.attack_success, strict=True):
            exact = "-" if ex is None else f"{ex:.3f}"
            group = "{" + ",".join(str(i + 1) for i in r.group) + "}"
            print(f"{name:<11} {group:<10} {t:>2} {mi:>9.3f} {f'[{lo:.3f}, {hi:.3f}]':>16} {exact:>7} {ok:>15.2f}")
    print(f"({time.perf_counter() - t0:.1f} s; 'inf': the group's rows are determined up to their order)")
    from p2pem.leakage.wholerun import disclosure_rank

    rank = disclosure_rank(make_protocol("pdmm-sp"), fig1, adv, rounds=130, seed=3)
    print(f"rank check, pdmm-sp on the Fig. 1 graph, corrupt 2 and 4, 130 rounds: {rank.disclosed} determined direction(s) "
          f"(the component sum: {rank.matches_groups}); next direction cosine {rank.cosines[rank.disclosed]:.2e}, "
          f"{rank.next_bits:.1e} bits")


if __name__ == "__main__":
    sys.exit(main())
