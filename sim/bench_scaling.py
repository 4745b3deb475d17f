"""Benchmark: set-up at 10^4-10^6 nodes, and how a full private EM grows with the number of nodes.

Part 1, set-up (``--setup-sizes``, default 10 000 and 100 000; add 1000000 where memory and time
allow: about 4 GB and a few minutes).  The array path a large simulation uses, no networkx:
``geometric_edges`` (k-d tree), ``Topology.from_edges`` (CSR arrays and the per-node
eccentricity bounds, four BFS), ``heavy_ball_params`` (Lanczos for lambda_max, LOBPCG for
lambda_2 of the Metropolis Laplacian) and, where the default runs one, its schedule (the Leja
polynomial: the 21 lowest eigenvalues by shift-invert with a sparse LU, up to
10^5 nodes).  Printed with the peak resident memory of the process so far (sizes run in
increasing order, so it is that of the largest).  Up to ``--exact-upto`` nodes (default
10 000) lambda_2 is also computed by shift-invert, and one heavy-ball aggregation (p = 20) is
run with the parameters from each, so the rounds impact of the cheaper estimate is measured.  Up to ``--rounds-upto`` nodes (default
100 000) one aggregation (p = 8) runs with the default's schedule and one with heavy ball.
Goals: step parameters <= 5 s at 10^5 (issue 10), <= 20 s at 10^6 (issue 24).

Part 2, EM (``--sizes``):

For each size n: a connected geometric graph (``geometric_graph(n, seed=...)``, default radius
sqrt(2 log n / n)), a synthetic 3-component mixture in d = 2 (``synthetic_mixture``, 5 rows
per node by default, split evenly), and 20 EM iterations with ``tol=0`` of ``pdmm-sp`` with
its default parameters (sync, the Leja polynomial from 3 to 100 000 nodes where it is predicted to pay, heavy ball otherwise, c and beta auto, theta 1, perturbation std 100, tol 1e-10, max_iter
5000) on the vectorised engine, starting from the private initialisation (aggregation 0),
against ``centralized`` from the same settings (the initialisation is rounded to 6 digits,
so both start from the same parameters).  Printed per size:

* graph build time (networkx), topology time (``Topology.from_graph``: CSR arrays and the
  eccentricity bounds) and ``heavy_ball_params`` time (the Laplacian's extreme eigenvalues);
* total EM wall time of pdmm-sp (``run_protocol`` end to end; it builds its own topology and
  c again, included) and of centralized;
* consensus rounds per EM iteration (mean and max), aggregations that hit max_iter;
* the largest relative error of the final weights, means and covariances against centralized;
* against references measured in the same run: the default before issue 10 on the same
  graph, data and protocol streams (``--before-upto``; plain PDMM with its old step size, every
  node waiting the diameter bound), its rounds, per-aggregation errors and final errors; the
  diameter bound; and, for the first EM iteration's statistics, Chebyshev-accelerated gossip
  from pdmm-sp's own first broadcast to the error pdmm-sp reaches (``sim/_common.py``).

Goal of issue 10: n = 10 000 in under 60 s on a 2-core machine (issue 2 asked for 5 minutes).

Part 3, EM work outside the consensus (``--host-sizes``): what a GPU run still does on the
host at 10^5-10^6 nodes, each against the form it replaced, in the same run: every node's
private initialisation (once per run) and, per EM iteration, the E-step statistics and the
M-step.

Part 4, model families (``--families``, e.g. 10000): the per-iteration cost of the skew-normal
and mixed-type families against the Gaussian one at that many nodes, on the vectorised engine
and pdmm-sp's device engine (``sim/bench_families.py``, which documents the setup).

Usage::

    .venv/bin/python sim/bench_scaling.py                         # set-up 1e4, 1e5; EM 80, 1 000, 10 000
    .venv/bin/python sim/bench_scaling.py --setup-sizes 10000,100000,1000000 --sizes 80
    .venv/bin/python sim/bench_scaling.py --sizes 80,1000         # quick look
    .venv/bin/python sim/bench_scaling.py --sizes 10000 --json /tmp/scaling.json
    .venv/bin/python sim/bench_scaling.py --setup-sizes "" --sizes "" --host-sizes 100000,1000000
    .venv/bin/python sim/bench_scaling.py --setup-sizes "" --sizes "" --families 10000

Not a test: nothing is asserted; timings depend on the machine and its load (printed, with the
CPU time beside the wall time).  BLAS is limited to one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from p2pem.data import split_rows, synthetic_mixture
from p2pem.em import EMSettings
from p2pem.graphs import geometric_graph
from p2pem.protocols import Centralized, PdmmSP
from p2pem.protocols.base import Topology
from p2pem.graphs import geometric_edges
from p2pem.protocols.pdmm import heavy_ball_params, metropolis_extremes, metropolis_weights
from p2pem.simulate import protocol_streams, relative_error
from p2pem.simulate import run_protocol
from _common import before_issue10, chebyshev_gossip_rounds, print_table
import bench_families

GOAL_N = 10_000
GOAL_S = 60.0




def timed(fn):
    """(result, wall s, CPU s)."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def rel_errors(run, ref) -> dict[str, float]:
    return {
        name: relative_error(a, b)
        for name, a, b in (("weights", run.weights, ref.weights), ("means", run.means, ref.means),
                           ("covariances", run.covariances, ref.covariances))
    }


def peak_rss_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def shift_invert_lambda2(topo) -> float:
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    W = topo.weighted_adjacency(metropolis_weights(topo))
    lap = sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W
    return float(spla.eigsh(lap.tocsc(), k=2, sigma=-1e-3, which="LM", return_eigenvectors=False).max())


def setup_size(n: int, args) -> dict:
    (pos, pairs, _), graph_s, _ = timed(lambda: geometric_edges(n, seed=args.seed))
    del pos
    topo, topo_s, _ = timed(lambda: Topology.from_edges(n, pairs))
    (c, beta), step_s, step_cpu = timed(lambda: heavy_ball_params(topo))
    lam2, lmax = metropolis_extremes(topo)  # cached by heavy_ball_params
    rss_step = peak_rss_gb()
    # the default's schedule (the polynomial's exact low eigenvalues: shift-invert), where it runs one
    iteration, schedule_s, schedule_cpu = timed(lambda: PdmmSP().iteration(topo))
    out = {"n": n, "edges": int(len(pairs)), "graph_s": graph_s, "topology_s": topo_s, "step_s": step_s, "step_cpu_s": step_cpu,
           "diameter_bound": topo.diameter, "min_eccentricity_bound": int(topo.eccentricity.min()),
           "c": c, "beta": beta, "lambda2_lobpcg": lam2, "lambda_max": lmax, "peak_rss_gb_after_step": rss_step,
           "iteration": iteration, "schedule_s": schedule_s if iteration != "heavy-ball" else None,
           "schedule_cpu_s": schedule_cpu if iteration != "heavy-ball" else None, "peak_rss_gb": peak_rss_gb()}
    if iteration == "polynomial":
        out["special_rounds"] = PdmmSP().resolved_params(topo)["special_rounds"]
    print(f"  set-up n = {n:,}: graph {graph_s:.1f} s, topology {topo_s:.1f} s, step {step_s:.1f} s (CPU {step_cpu:.1f} s), "
          + (f"{iteration} schedule {schedule_s:.1f} s (CPU {schedule_cpu:.1f} s), " if out["schedule_s"] is not None else "")
          + f"peak RSS {out['peak_rss_gb']:.2f} GB", file=sys.stderr, flush=True)
    if iteration != "heavy-ball" and n <= args.rounds_upto:
        # one aggregation with the default's schedule and one with heavy ball: what the schedule buys
        values = np.random.default_rng(1).standard_normal((n, 8)) + 3.0
        for key, spec in (("default", PdmmSP()), ("heavy_ball", PdmmSP(accel="heavy-ball"))):
            agg = spec.aggregate(values, topo, protocol_streams(args.seed, n), 1)
            out[f"{key}_rounds"] = int(agg.rounds)
            out[f"{key}_error"] = relative_error(agg.results, values.mean(axis=0))
    if n <= args.exact_upto:
        exact, exact_s, _ = timed(lambda: shift_invert_lambda2(topo))
        kappa = lmax / exact
        beta_x = ((kappa**0.5 - 1) / (kappa**0.5 + 1)) ** 2
        c_x = 4.0 / (lmax**0.5 + exact**0.5) ** 2 / (1 - beta_x)
        values = np.random.default_rng(1).standard_normal((n, 20)) + 3.0
        mean = values.mean(axis=0)
        for key, spec in (("lobpcg", PdmmSP(accel="heavy-ball")), ("exact", PdmmSP(c=c_x, momentum=beta_x))):
            agg = spec.aggregate(values, topo, protocol_streams(args.seed, n), 1)
            out[f"rounds_{key}"] = int(agg.rounds)
            out[f"error_{key}"] = relative_error(agg.results, mean)
        out.update(lambda2_exact=exact, exact_s=exact_s)
    return out


@dataclass(frozen=True)
class Recording(PdmmSP):
    """pdmm-sp that keeps, per aggregation, the relative error of its result against the true
    mean of its inputs (and the inputs of the first two), optionally on a given topology."""

    # not protocol parameters (metadata "bound": left out of params()), shared by dataclasses.replace
    topology_override: Topology | None = field(default=None, repr=False, compare=False, metadata={"bound": True})
    errors: list = field(default_factory=list, repr=False, compare=False, metadata={"bound": True})
    inputs: list = field(default_factory=list, repr=False, compare=False, metadata={"bound": True})

    def topology(self, g):
        return self.topology_override if self.topology_override is not None else super().topology(g)

    def aggregate(self, values, topology, rngs, iteration, *, record=False):
        out = super().aggregate(values, topology, rngs, iteration, record=record)
        self.errors.append(relative_error(out.results, values.mean(axis=0)))
        if len(self.inputs) < 2:
            self.inputs.append(np.array(values))
        return out


def one_size(n: int, args) -> dict:
    def log(msg):
        print(f"  n = {n:,}: {msg}", file=sys.stderr, flush=True)

    g, graph_s, _ = timed(lambda: geometric_graph(n, seed=args.seed))
    topo, topo_s, _ = timed(lambda: Topology.from_graph(g))
    (c, _beta), autoc_s, _ = timed(lambda: heavy_ball_params(topo))
    log(f"graph {graph_s:.2f} s, topology {topo_s:.2f} s, step parameters {autoc_s:.2f} s")
    rng = np.random.default_rng([args.seed, n])
    X, _, _ = synthetic_mixture(args.rows_per_node * n, n_features=2, n_components=3, rng=rng)
    parts = split_rows(X, n, how="even", rng=rng)
    settings = EMSettings(3, max_iter=args.em_iter, tol=0.0, init_seed=args.seed)
    ref, ref_s, ref_cpu = timed(lambda: run_protocol(parts, g, Centralized(), settings))
    spec = Recording()
    run, em_s, em_cpu = timed(lambda: run_protocol(parts, g, spec, settings, seed=args.seed))
    log(f"pdmm-sp EM {em_s:.1f} s (CPU {em_cpu:.1f} s)")
    rounds = np.asarray(run.consensus_iterations, dtype=float)
    errs = rel_errors(run, ref)
    before = {}
    if n <= args.before_upto:
        # the default before issue 10 on the same graph, data and streams (its own topology)
        old_spec, old_topo = before_issue10(topo)
        bspec = Recording(accel="none", c=old_spec.c, topology_override=old_topo)
        brun, b_s, b_cpu = timed(lambda: run_protocol(parts, g, bspec, settings, seed=args.seed))
        log(f"before issue 10: EM {b_s:.1f} s (CPU {b_cpu:.1f} s)")
        before = {"mean_rounds": float(np.mean(brun.consensus_iterations)), "em_wall_s": b_s, "em_cpu_s": b_cpu,
                  "rel_error": rel_errors(brun, ref), "consensus_errors": bspec.errors}
        before["max_rel_error"] = max(before["rel_error"].values())
    # lower bounds on one EM iteration's aggregation (the first after the initialisation):
    # the diameter, and Chebyshev gossip from pdmm-sp's own first broadcast to its final error
    values = spec.inputs[1]
    agg = PdmmSP().aggregate(values, topo, protocol_streams(args.seed, n), 1)
    mean = values.mean(axis=0)
    first = PdmmSP(tol=0.0, max_iter=1).aggregate(values, topo, protocol_streams(args.seed, n), 1).results
    cheb = chebyshev_gossip_rounds(topo, first - first.mean(axis=0) + mean, mean, relative_error(agg.results, mean))
    return {
        "before_issue10": before, "consensus_errors": spec.errors,
        "bound_aggregation": {"rounds": int(agg.rounds), "error": relative_error(agg.results, mean),
                              "chebyshev_same_start_rounds": cheb, "diameter_bound": topo.diameter},
        "n": n, "rows": int(len(X)), "edges": g.number_of_edges(), "mean_degree": 2 * g.number_of_edges() / n,
        "diameter_bound": topo.diameter, "c": c,
        "graph_s": graph_s, "topology_s": topo_s, "step_params_s": autoc_s,
        "em_iterations": run.n_iter, "em_wall_s": em_s, "em_cpu_s": em_cpu, "run_wall_s": run.wall_s,
        "centralized_wall_s": ref_s, "centralized_cpu_s": ref_cpu,
        "mean_rounds": float(rounds.mean()), "max_rounds": float(rounds.max()),
        "init_rounds": run.init_consensus_iterations,
        "hit_max_iter": len(run.unconverged_iterations), "messages": run.messages, "bytes": run.bytes,
        "rel_error": errs, "max_rel_error": max(errs.values()), "node_spread": run.node_spread,
    }


def host_size(n: int, args) -> dict:
    """The EM work outside the consensus at n nodes: what a GPU run does on the host."""
    import p2pem.gmm as gmm
    from p2pem.em import EMState

    rng = np.random.default_rng([args.seed, n])
    X, _, _ = synthetic_mixture(args.rows_per_node * n, n_features=2, n_components=3, rng=rng)
    parts = split_rows(X, n, how="even", rng=rng)
    state = EMState(parts, EMSettings(3, max_iter=args.em_iter, tol=0.0, init_seed=0), n)
    init = state.contribution()
    # the network average as n nodes hold it: equal to about 1e-12
    averages = init.mean(axis=0) * (1 + 1e-12 * np.random.default_rng(1).standard_normal(init.shape))
    _, init_s, _ = timed(lambda: state.absorb(averages))
    sample = averages[: min(n, 20_000)]
    _, per_row_s, _ = timed(lambda: [gmm.init_from_global(row, 3, 0) for row in sample])
    per_row_s *= n / len(sample)
    stats, stats_s, _ = timed(state.contribution)
    args_ = (state.X, state.offsets, state.model.weights, state.model.means, state.model.prec_chol)
    _, whole_s, _ = timed(lambda: gmm._batch_statistics_block(*args_))
    _, m_step_s, _ = timed(lambda: state.absorb(np.broadcast_to(stats.mean(axis=0), stats.shape).copy()))
    print(f"  host n = {n:,} done", flush=True)
    return {"n": n, "rows": int(len(X)), "init_s": init_s, "init_per_row_loop_s": per_row_s, "statistics_s": stats_s,
            "statistics_one_block_s": whole_s, "m_step_s": m_step_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",") if v], default=[80, 1000, 10000],
                        help="numbers of nodes, comma-separated (default 80,1000,10000)")
    parser.add_argument("--setup-sizes", type=lambda s: [int(v) for v in s.split(",") if v], default=[10000, 100000],
                        help="node counts for the set-up part, comma-separated (default 10000,100000; '' skips)")
    parser.add_argument("--exact-upto", type=int, default=10000,
                        help="compare with shift-invert lambda_2 and its rounds up to this many nodes (default 10000)")
    parser.add_argument("--rounds-upto", type=int, default=100000,
                        help="in the set-up part, run one aggregation (p = 8) with the default's schedule and one with heavy "
                             "ball up to this many nodes (default 100000)")
    parser.add_argument("--rows-per-node", type=int, default=5, help="synthetic rows per node (default 5)")
    parser.add_argument("--em-iter", type=int, default=20, help="EM iterations, tol=0 (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="graph, data and protocol seed (default 0)")
    parser.add_argument("--before-upto", type=int, default=10000,
                        help="also run the default before issue 10 (same graph, data, streams) up to this many nodes "
                             "(default 10000; about twice the EM time)")
    parser.add_argument("--host-sizes", type=lambda s: [int(v) for v in s.split(",") if v], default=[],
                        help="node counts for the EM work outside the consensus (private init, E-step statistics, "
                             "M-step), e.g. 100000,1000000 (default: none)")
    parser.add_argument("--families", type=lambda s: [int(v) for v in s.split(",") if v], default=[],
                        help="node counts at which to time an EM iteration of every model family against the Gaussian one "
                             "(sim/bench_families.py; default: none)")
    parser.add_argument("--device", default="array-api-strict",
                        help="with --families: pdmm-sp's device engine (cuda on a GPU; default array-api-strict, the "
                             "portable path on the host; '' for none)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)


    print(f"pdmm-sp (defaults, sync, vectorised engine), K = 3, d = 2, {args.em_iter} EM iterations (tol=0), "
          f"{args.rows_per_node} rows per node; cpus available {len(os.sched_getaffinity(0))}, load average "
          f"{os.getloadavg()[0]:.2f} (shared machine: timings are indicative); BLAS threads limited to 1")
    results, setups, hosts, families = [], [], [], []
    with threadpool_limits(limits=1):
        for n in args.setup_sizes:
            setups.append(setup_size(n, args))
        for n in args.host_sizes:
            hosts.append(host_size(n, args))
        for n in args.sizes:
            results.append(one_size(n, args))
    for n in args.families:
        print(f"\nmodel families at {n:,} nodes (sim/bench_families.py)")
        families.append(bench_families.compare(n, iterations=min(args.em_iter, 10), device=args.device or None, seed=args.seed))
        bench_families.print_comparison(families[-1])
    if hosts:
        print("\nEM work outside the consensus, per EM iteration unless said (seconds)")
        print_table(["n", "rows", "private init", "init_from_global per node", "ratio", "E-step statistics", "in one block", "ratio",
                     "M-step"], [
            [f"{r['n']:,}", f"{r['rows']:,}", f"{r['init_s']:.2f}", f"{r['init_per_row_loop_s']:.1f}",
             f"{r['init_per_row_loop_s'] / r['init_s']:.0f}", f"{r['statistics_s']:.2f}", f"{r['statistics_one_block_s']:.2f}",
             f"{r['statistics_one_block_s'] / r['statistics_s']:.1f}", f"{r['m_step_s']:.2f}"] for r in hosts])
        print("private init: every node's initial parameters from the averaged moments (once per run; init_from_global_batch), "
              "against calling init_from_global node by node (timed on up to 20 000 of them, scaled; the loop this replaced, "
              "with the older per-row function, took about half as long per node); E-step statistics: "
              "batch_statistics in blocks of whole nodes, against the same rows in one block (same bits); M-step: "
              "the M-step and precision factors of every node (EMState.absorb).")
    if setups:
        print("\nset-up without networkx (seconds; peak RSS of the process so far)")
        print_table(["n", "edges", "graph s", "topology s", "step params s (CPU)", "peak RSS GB", "default", "schedule s (CPU)",
                     "peak RSS GB", "diam bound", "min ecc bound", "lambda2 used", "lambda2 exact", "rounds", "rounds exact",
                     "rel err"], [
            [f"{r['n']:,}", f"{r['edges']:,}", f"{r['graph_s']:.2f}", f"{r['topology_s']:.2f}",
             f"{r['step_s']:.2f} ({r['step_cpu_s']:.2f})", f"{r['peak_rss_gb_after_step']:.2f}", r["iteration"],
             "-" if r["schedule_s"] is None else f"{r['schedule_s']:.2f} ({r['schedule_cpu_s']:.2f})",
             f"{r['peak_rss_gb']:.2f}", str(r["diameter_bound"]), str(r["min_eccentricity_bound"]),
             f"{r['lambda2_lobpcg']:.4g}", f"{r['lambda2_exact']:.4g}" if "lambda2_exact" in r else "-",
             str(r.get("rounds_lobpcg", "-")), str(r.get("rounds_exact", "-")),
             f"{r['error_lobpcg']:.1e}" if "error_lobpcg" in r else "-"] for r in setups])
        with_rounds = [r for r in setups if "default_rounds" in r]
        if with_rounds:
            print("\none aggregation, p = 8, inputs N(3, 1): the default's schedule against heavy ball")
            print_table(["n", "D bound", "default", "rounds (err)", "rounds / D", "heavy ball (err)", "rounds / D", "ratio"], [
                [f"{r['n']:,}", str(r["diameter_bound"]), r["iteration"], f"{r['default_rounds']} ({r['default_error']:.1e})",
                 f"{r['default_rounds'] / r['diameter_bound']:.2f}", f"{r['heavy_ball_rounds']} ({r['heavy_ball_error']:.1e})",
                 f"{r['heavy_ball_rounds'] / r['diameter_bound']:.2f}", f"{r['default_rounds'] / r['heavy_ball_rounds']:.2f}"]
                for r in with_rounds])
        print("step params: heavy_ball_params (Lanczos for lambda_max, LOBPCG for lambda_2; lambda2 used = 0.98 x the LOBPCG "
              "value); default: the iteration PdmmSP() runs; schedule: its polynomial (shift-invert for the 21 lowest "
              "eigenvalues, then the Leja roots), where it runs one; peak RSS: of the process after the step parameters "
              "and after the schedule; rounds: one heavy-ball aggregation, p = 20, with those parameters and with "
              "shift-invert's exact lambda_2 (rel err: of the former vs the true mean).  Goal: step parameters <= 20 s at 10^6.")
    if not results:
        return _write(args, results, setups, hosts, families)
    print("\nset-up (seconds)")
    print_table(["n", "edges", "mean deg", "diam bound", "c (heavy ball)", "graph s", "topology s", "step params s"], [
        [f"{r['n']:,}", f"{r['edges']:,}", f"{r['mean_degree']:.1f}", str(r["diameter_bound"]), f"{r['c']:.3f}",
         f"{r['graph_s']:.3f}", f"{r['topology_s']:.3f}", f"{r['step_params_s']:.3f}"] for r in results])
    print(f"\nEM: pdmm-sp vs centralized, {args.em_iter} iterations")
    print_table(["n", "EM wall s", "EM CPU s", "centr. s", "rounds/it", "max rounds", "init rounds", "hit max",
                 "s/round", "rel err w", "rel err mu", "rel err cov"], [
        [f"{r['n']:,}", f"{r['em_wall_s']:.2f}", f"{r['em_cpu_s']:.2f}", f"{r['centralized_wall_s']:.3f}",
         f"{r['mean_rounds']:.1f}", f"{r['max_rounds']:.0f}", f"{r['init_rounds']:.0f}", str(r["hit_max_iter"]),
         f"{r['em_wall_s'] / (r['mean_rounds'] * (r['em_iterations'] + 1) + r['init_rounds']):.2e}",
         f"{r['rel_error']['weights']:.1e}", f"{r['rel_error']['means']:.1e}", f"{r['rel_error']['covariances']:.1e}"]
        for r in results])
    print("rounds/it: mean consensus rounds per EM iteration (the last, log-likelihood-only aggregation included); "
          "init: the private initialisation's aggregation; hit max: aggregations that reached max_iter; s/round: EM "
          "wall time / all consensus rounds (E/M-steps included); rel err: max|a - b| / max|b| against centralized")
    print("\nrounds against the references, measured in the same run")
    print_table(["n", "D bound", "rounds/it", "rounds/it / D", "before issue 10", "ratio", "agg. err median (before)",
                 "max rel err (before)", "one agg.: rounds", "Chebyshev same start", "ratio"], [
        [f"{r['n']:,}", str(r["diameter_bound"]), f"{r['mean_rounds']:.1f}", f"{r['mean_rounds'] / r['diameter_bound']:.1f}",
         f"{r['before_issue10']['mean_rounds']:.1f}" if r["before_issue10"] else "-",
         f"{r['mean_rounds'] / r['before_issue10']['mean_rounds']:.3f}" if r["before_issue10"] else "-",
         f"{np.median(r['consensus_errors']):.1e}"
         + (f" ({np.median(r['before_issue10']['consensus_errors']):.1e})" if r["before_issue10"] else ""),
         f"{r['max_rel_error']:.1e}" + (f" ({r['before_issue10']['max_rel_error']:.1e})" if r["before_issue10"] else ""),
         str(r["bound_aggregation"]["rounds"]), str(r["bound_aggregation"]["chebyshev_same_start_rounds"]),
         f"{r['bound_aggregation']['rounds'] / r['bound_aggregation']['chebyshev_same_start_rounds']:.2f}"]
        for r in results])
    print("before issue 10: plain PDMM, c = 1/sqrt(lambda_2 lambda_max), every node waiting the diameter bound (same "
          "graph, data, streams); ratio: rounds per EM iteration now / before (goal <= 0.5 at the same accuracy); "
          "agg. err: median over the aggregations of max|result - true mean| / max|true mean|; max rel err: final "
          "parameters against centralized.  One agg.: the first EM iteration's statistics aggregated again by the "
          "default, against Chebyshev-accelerated gossip (exact eigenvalues) from the same first broadcast to the same "
          "error: the Chebyshev lower bound for the interval [lambda_2, lambda_max] of the Metropolis Laplacian (sim/_common.py).")
    for r in results:
        if r["n"] == GOAL_N:
            print(f"n = {GOAL_N:,}: {r['em_wall_s']:.1f} s wall (+ graph {r['graph_s']:.1f} s)  (goal < {GOAL_S:.0f} s "
                  f"on a 2-core machine: {'met' if r['em_wall_s'] + r['graph_s'] < GOAL_S else 'missed'})")
    if len(results) >= 2:
        a, b = results[0], results[-1]
        growth = b["em_wall_s"] / a["em_wall_s"]
        print(f"growth {a['n']:,} -> {b['n']:,} nodes (x{b['n'] / a['n']:.0f}): EM time x{growth:.0f}, "
              f"rounds per EM iteration x{b['mean_rounds'] / a['mean_rounds']:.1f}")
    return _write(args, results, setups, hosts, families)


def _write(args, results, setups, hosts=(), families=()) -> int:
    if args.json:
        Path(args.json).write_text(json.dumps({"em_iter": args.em_iter, "rows_per_node": args.rows_per_node,
                                               "seed": args.seed, "cpus": len(os.sched_getaffinity(0)),
                                               "load_average": os.getloadavg()[0], "goal_n": GOAL_N, "goal_s": GOAL_S,
                                               "sizes": results, "setup": setups, "host": list(hosts),
                                               "families": list(families)}, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
