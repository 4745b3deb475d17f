"""Benchmark: attainable accuracy of pdmm-sp against the initial-dual (perturbation) std.

Subspace perturbation hides each node's value behind initial duals of large standard deviation
sigma; in exact arithmetic the primal still converges to the exact average whatever sigma is
("no accuracy trade-off").  In float64 the part of the duals in H-perp never decays, so every
x_i is computed as (s_i - u_i) / N_i (N_i = 1 + c d_i, or 2 / (1 - beta) for heavy ball) with |u_i| ~ sigma: the rounding error of that
difference, roughly eps * sigma relative to the data scale, is a floor no number of rounds
removes.  This script maps it.

For sigma = 1e-2, 1e-1, ..., 1e14 it runs one whole private EM (pdmm-sp, sync, defaults except
``perturbation_std`` and ``max_iter``, vectorised engine, the private initialisation included)
on

* ``parkinsons``: ``scenarios/parkinsons.toml`` (80 nodes, 195 rows), with 10 EM iterations
  instead of 100 (``--em-iter``), tol 0;
* ``synthetic``: a 3-component mixture in d = 2 (``synthetic_mixture``, 400 rows) over an
  80-node geometric graph, 10 EM iterations,

and compares the final weights, means and covariances with ``centralized`` from the same
settings (max|a - b| / max|b|, the largest over the three).  Also printed per sigma: the
error of one consensus on its own (aggregation of the initial statistics, the vector
aggregation 0 averages), the rule of thumb eps * sigma / scale (scale = RMS of the per-node
statistics vectors of aggregation 0), the consensus rounds per EM iteration, and how many
aggregations hit ``max_iter`` (the stopping rule never saw agreement to its tolerance).
Finally: the first sigma at which the EM error exceeds 1e-8 (the issue's accuracy target).

Usage::

    .venv/bin/python sim/bench_precision.py                          # both data sets, 1e-2..1e14
    .venv/bin/python sim/bench_precision.py --data synthetic --max-iter 2000
    .venv/bin/python sim/bench_precision.py --stds 1e4,1e6,1e8 --json /tmp/precision.json

Not a test: nothing is asserted.  BLAS is limited to one thread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from p2pem.data import split_rows, synthetic_mixture
from p2pem.em import EMSettings
from p2pem.errors import P2pemError
from p2pem.gmm import init_statistics
from p2pem.graphs import geometric_graph
from p2pem.protocols import Centralized, PdmmSP
from p2pem.protocols.base import Topology
from p2pem.builders import build_graph, em_settings
from p2pem.builders import load_data
from p2pem.scenario import load_scenario
from p2pem.simulate import max_relative_difference, protocol_streams, relative_error, run_protocol
from _common import print_table

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1e-8
EPS = float(np.finfo(float).eps)




def datasets(args):
    """(name, parts, graph, settings, protocol seed factory) per requested data set."""
    out = []
    if "parkinsons" in args.data:
        sc = load_scenario(args.scenario)
        settings = EMSettings(sc.em.n_components, max_iter=args.em_iter, tol=0.0, reg_covar=sc.em.reg_covar,
                              init=sc.em.init, init_seed=em_settings(sc).init_seed)
        out.append(("parkinsons", load_data(sc), build_graph(sc), settings, lambda: sc.streams()["protocol"]))
    if "synthetic" in args.data:
        rng = np.random.default_rng(args.seed)
        X, _, _ = synthetic_mixture(args.rows, n_features=2, n_components=3, rng=rng)
        parts = split_rows(X, args.nodes, how="even", rng=rng)
        g = geometric_graph(args.nodes, seed=args.seed)
        settings = EMSettings(3, max_iter=args.em_iter, tol=0.0, init_seed=args.seed)
        out.append(("synthetic", parts, g, settings, lambda: np.random.SeedSequence(args.seed)))
    return out


def sweep(name, parts, g, settings, seed, args) -> dict:
    ref = run_protocol(parts, g, Centralized(), settings)
    topo = Topology.from_graph(g)
    stats = init_statistics(np.concatenate(parts), np.concatenate([[0], np.cumsum([len(p) for p in parts])[:-1]]))
    exact = stats.mean(axis=0)
    scale = float(np.sqrt(np.mean(stats ** 2)))
    rows, records = [], []
    first_bad = None
    t_all = time.perf_counter()
    for std in args.stds:
        spec = PdmmSP(perturbation_std=std, max_iter=args.max_iter)
        agg = spec.aggregate(stats, topo, protocol_streams(seed(), len(parts)), 0)
        cons_err = relative_error(agg.results, exact)
        rec = {"perturbation_std": std, "eps_std_over_scale": EPS * std / scale, "consensus_rel_error": cons_err,
               "consensus_rounds": int(agg.rounds), "consensus_converged": bool(agg.converged)}
        t0 = time.perf_counter()
        try:
            run = run_protocol(parts, g, spec, settings, seed=seed())
        except (P2pemError, ValueError, np.linalg.LinAlgError) as exc:
            rec.update(error=f"{type(exc).__name__}: {exc}", em_rel_error=math.inf, wall_s=time.perf_counter() - t0)
            rows.append([f"{std:.0e}", f"{EPS * std / scale:.1e}", f"{cons_err:.1e}", f"{int(agg.rounds)}",
                         "failed", "", "", "", "", "", f"{rec['wall_s']:.2f}"])
            print(f"  {name} std {std:.0e}: {rec['error']}", file=sys.stderr)
        else:
            rounds = np.asarray(run.consensus_iterations, dtype=float)
            err = max_relative_difference(run, ref)
            # far past the floor the averaged continue flags can end EM at another iteration than
            # the reference: compare the common prefix (n_iter is recorded)
            k = min(len(run.loglik), len(ref.loglik))
            ll_err = float(np.max(np.abs(np.subtract(run.loglik[:k], ref.loglik[:k])) / np.abs(ref.loglik[:k])))
            rec.update(em_rel_error=err, loglik_rel_error=ll_err, mean_rounds=float(rounds.mean()),
                       max_rounds=float(rounds.max()), init_rounds=run.init_consensus_iterations,
                       hit_max_iter=len(run.unconverged_iterations),
                       aggregations=len(rounds) + (run.init_consensus_iterations is not None),
                       node_spread=run.node_spread, n_iter=run.n_iter, wall_s=time.perf_counter() - t0)
            rows.append([f"{std:.0e}", f"{EPS * std / scale:.1e}", f"{cons_err:.1e}",
                         f"{int(agg.rounds)}" + ("" if agg.converged else " max"), f"{err:.1e}", f"{ll_err:.1e}",
                         f"{rec['mean_rounds']:.0f}", f"{rec['max_rounds']:.0f}",
                         f"{rec['hit_max_iter']}/{rec['aggregations']}", f"{run.node_spread:.1e}", f"{rec['wall_s']:.2f}"])
        if first_bad is None and rec["em_rel_error"] > TARGET:
            first_bad = std
        records.append(rec)
    print(f"\n{name}: {sum(len(p) for p in parts)} rows on {len(parts)} nodes, {settings.max_iter} EM iterations, "
          f"pdmm-sp max_iter {args.max_iter}, stop tol {PdmmSP().stop_tol:g}; data scale (RMS of aggregation-0 "
          f"statistics) {scale:.3g}; sweep {time.perf_counter() - t_all:.1f} s")
    print_table(["std", "eps*std/scale", "consensus err", "cons. rounds", "EM rel err", "loglik err", "rounds/it",
                 "max rounds", "hit max", "node spread", "wall s"], rows)
    good = [r["perturbation_std"] for r in records if r["em_rel_error"] <= TARGET]
    if first_bad is None:
        print(f"EM error stays <= {TARGET:g} up to std {args.stds[-1]:.0e} (the largest tried)")
    else:
        below = [s for s in good if s < first_bad]
        last = f"{max(below):.0e}" if below else "none"
        print(f"EM error first exceeds {TARGET:g} at std {first_bad:.0e} (eps*std/scale {EPS * first_bad / scale:.1e}); "
              f"largest std below it still within {TARGET:g}: {last}")
    return {"name": name, "rows": sum(len(p) for p in parts), "nodes": len(parts), "em_iter": settings.max_iter,
            "max_iter": args.max_iter, "scale": scale, "first_std_above_target": first_bad, "target": TARGET,
            "runs": records}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=lambda s: s.split(","), default=["parkinsons", "synthetic"],
                        help="data sets, comma-separated: parkinsons,synthetic (default both)")
    parser.add_argument("--stds", type=lambda s: [float(v) for v in s.split(",")],
                        default=[10.0 ** k for k in range(-2, 15)], help="perturbation stds (default 1e-2..1e14 in decades)")
    parser.add_argument("--em-iter", type=int, default=10, help="EM iterations, tol=0 (default 10)")
    parser.add_argument("--max-iter", type=int, default=5000, help="pdmm-sp rounds at most per aggregation (default 5000)")
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "parkinsons.toml"))
    parser.add_argument("--nodes", type=int, default=80, help="synthetic: nodes (default 80)")
    parser.add_argument("--rows", type=int, default=400, help="synthetic: rows (default 400)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic: data, graph and protocol seed (default 0)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    unknown = set(args.data) - {"parkinsons", "synthetic"}
    if unknown:
        parser.error(f"unknown data set(s): {', '.join(sorted(unknown))}")

    print(f"pdmm-sp accuracy vs initial-dual std; float64 eps {EPS:.2e}; target {TARGET:g} relative; "
          f"load average {os.getloadavg()[0]:.2f}; BLAS threads limited to 1")
    out = []
    t0 = time.perf_counter()
    with threadpool_limits(limits=1):
        for name, parts, g, settings, seed in datasets(args):
            out.append(sweep(name, parts, g, settings, seed, args))
    print("\neps*std/scale: rule of thumb for the float64 floor; consensus err: one aggregation of the aggregation-0 "
          "statistics, max|x_i - avg| / max|avg| over nodes; cons. rounds: its rounds ('max' = hit max_iter); EM rel "
          "err: final parameters vs centralized; rounds/it: mean consensus rounds per EM iteration; hit max: "
          "aggregations that reached max_iter / all; node spread: largest disagreement between nodes")
    print(f"total {time.perf_counter() - t0:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"eps": EPS, "target": TARGET, "data": out}, indent=2,
                                              default=lambda v: None) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
