"""Benchmark: wall time of the privacy-accuracy sweep of ``scenarios/tradeoff_parkinsons.toml``.

Runs :func:`p2pem.dp.tradeoff.run_tradeoff` the way ``p2pem tradeoff`` does (without writing
files): its 4 private protocols (dp-central Gaussian and Laplace, dp-distributed over
secure-sum and over pdmm-sp) for 10 epsilons x 10 seeds, plus pdmm-sp, secure-sum and
centralized as references, on 20 nodes with 20 EM iterations, vectorised engine.  Prints the
sweep's wall time next to the goal of issue 9 (10 epsilons x 10 seeds x 4 protocols on
Parkinsons in under a minute on 2 cores), the mean time of one run per protocol, and the
number of runs (machine independent), and the medians over seeds of held-out log-likelihood,
parameter error and (with ``--classify``) classification error at epsilon = 1, 10, 100 and for
the non-private protocols.  By default the sweep fits only the mixture; with
``--classify`` it also fits the private Bayes classifier (two more EM runs per record).

Usage::

    .venv/bin/python sim/bench_tradeoff.py                 # 2 worker processes
    .venv/bin/python sim/bench_tradeoff.py --jobs 1 --classify --json /tmp/tradeoff_bench.json
    .venv/bin/python sim/bench_tradeoff.py --classify --figure docs/tradeoff_parkinsons.png   # the docs' figures
    .venv/bin/python sim/bench_tradeoff.py --scenario scenarios/tradeoff_ais.toml --figure docs/tradeoff_ais.png

Not a test: nothing is asserted, the numbers depend on the machine and its load (the load
average is printed next to them).  BLAS is limited to one thread per process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

from _common import print_table

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "tradeoff_parkinsons.toml"))
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per (protocol, epsilon) (default: the scenario's)")
    parser.add_argument("--classify", action="store_true", help="also fit the Bayes classifier of the scenario")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to this JSON file")
    parser.add_argument("--figure", metavar="PATH", help="also draw the sweep's figure (as p2pem tradeoff does) here")
    args = parser.parse_args(argv)

    from threadpoolctl import threadpool_limits

    from p2pem.dp.tradeoff import run_tradeoff
    from p2pem.scenario import TradeoffConfig
    from p2pem.scenario import load_scenario

    with threadpool_limits(limits=1):
        scenario = load_scenario(args.scenario)
        cfg = scenario.tradeoff or TradeoffConfig()
        cfg = dataclasses.replace(cfg, n_seeds=args.seeds or cfg.n_seeds, classify=cfg.classify if args.classify else None)
        scenario = dataclasses.replace(scenario, tradeoff=cfg)
        print(f"scenario {scenario.name}: {scenario.graph.n_nodes} nodes, {scenario.em.n_components} components, "
              f"{scenario.em.max_iter} EM iterations, {len(cfg.epsilons)} epsilons x {cfg.n_seeds} seeds, "
              f"classifier {'on' if cfg.classify else 'off'}")
        print(f"cpus available: {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f} "
              f"(shared machine: numbers are indicative); BLAS threads limited to 1; {args.jobs} worker process(es)")
        t0 = time.perf_counter()
        doc = run_tradeoff(scenario, jobs=args.jobs)
        wall = time.perf_counter() - t0

    from p2pem.dp.tradeoff import summarize, tradeoff_figure

    if args.figure:
        tradeoff_figure(doc, Path(args.figure))
        print(f"wrote {args.figure}")

    print("\nmedians over seeds (the numbers the docs quote; tradeoff.json has every run); epsilon against an")
    print("outsider and against t colluding nodes under each protocol's accountant")
    acc_rows = []
    for row in summarize(doc):
        if row["epsilon"] in (None, 1.0, 10.0, 100.0):
            err = "-" if row["heldout_error_median"] is None else f"{row['heldout_error_median']:.3f}"
            eps = "-" if row["epsilon"] is None else f"{row['epsilon']:g}"
            outsider = "-" if row["epsilon_outsider"] is None else f"{row['epsilon_outsider']:.3g}"
            colluders = "-" if row["colluders"] is None else f"{row['epsilon_colluders']:.3g} ({row['colluders']})"
            acc_rows.append([row["protocol"], eps, outsider, colluders, f"{row['heldout_loglik_median']:.2f}", f"{row['param_error_median']:.2g}", err])
    print_table(["protocol", "epsilon", "outsider", "colluders (t)", "held-out ll", "param err", "class err"], acc_rows)

    print("\nepsilon_spent at epsilon = 1 under every accountant (the slack of basic composition), outsider / colluders:")
    for proto in sorted({r["protocol"] for r in doc["runs"] if r["epsilon"] == 1.0}):
        spent = next(r for r in doc["runs"] if r["protocol"] == proto and r["epsilon"] == 1.0)["epsilon_spent"]
        def text(v: float | None) -> str:
            return "unbounded" if v is None else f"{v:.3g}"

        cells = ", ".join(f"{acc} {text(spent['outsider'][acc])} / {text(spent['colluders'][acc])}" for acc in spent["outsider"])
        print(f"  {proto}: {cells}")

    print("\ntimes")
    per: dict[str, list[float]] = {}
    for r in doc["runs"]:
        per.setdefault(r["protocol"], []).append(r["wall_s"])
    rows = [[p, str(len(w)), f"{statistics.mean(w) * 1e3:.1f}", f"{sum(w):.2f}"] for p, w in per.items()]
    print_table(["protocol", "runs", "mean ms/run", "sum s"], rows)
    n_private = sum(len(w) for p, w in per.items() if p.startswith("dp-"))
    print(f"sweep: {len(doc['runs'])} runs ({n_private} private), wall {wall:.1f} s including setup "
          f"(goal < {GOAL_S:.0f} s for 10 epsilons x 10 seeds x 4 protocols on 2 cores: {'met' if wall < GOAL_S else 'missed'})")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "scenario": args.scenario, "jobs": args.jobs, "classify": bool(cfg.classify), "cpus": len(os.sched_getaffinity(0)),
            "load_average": os.getloadavg()[0], "wall_s": wall, "goal_s": GOAL_S, "runs": len(doc["runs"]),
            "private_runs": n_private, "per_protocol_mean_s": {p: statistics.mean(w) for p, w in per.items()},
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
