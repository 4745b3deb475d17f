"""Benchmark: pdmm-sp consensus on its own: rounds to 1e-10 MSE per step size c, and per-round cost.

(a) Convergence of plain PDMM (``accel = "none"``) per step size, and of the default.  On 20-node geometric graphs (``geometric_graph(20, seed=s)``, several seeds)
every node holds a vector drawn N(0, 1) (``--dim`` entries, default 1).  For each step size c
in {0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0} and ``auto`` (:func:`p2pem.protocols.pdmm.auto_c`), plus the
default (``PdmmSP()``: the Leja polynomial, then heavy ball; row ``default``, theta = 1 only),
for theta = 1 (PDMM) and theta = 0.5 (averaged PDMM / ADMM), and for two initial-dual standard
deviations (the protocol default ``PdmmSP().perturbation_std`` = 100, the private setting, and
0, plain PDMM), the batch path ``PdmmSP.aggregate`` is run with ``tol=0`` and a fixed number
of rounds, recording the trace: its primal broadcasts give x_i(t) for every round t, and

    MSE(t) = mean over nodes i and entries of (x_i(t) - true average)^2.

Printed: the first round t with MSE(t) <= 1e-10 (median and range over the seeds), next to the
reference of issue 2 (the authors' MATLAB: about 45 rounds at c = 0.1-0.2); then, from a
separate run with the protocol's own stopping rule (default tol, max_iter 5000), the rounds it
actually uses and the final MSE (largest over the seeds).

(b) Cost per round.  For n = 80, 1 000, 10 000 nodes (geometric graphs) and p = 20 columns
(K = 3, d = 2: the 19 sufficient statistics incl. the log-likelihood, plus the continue flag;
what one EM iteration averages), the marginal time of one consensus round (from two runs with
``tol=0`` and different round counts, so set-up is excluded) and the time per round of one
whole self-stopping aggregation (set-up and stopping test included), each divided by the
time of one sparse matrix-vector product ``W @ x`` with x of shape (n, p) and W the heavy-ball
edge weights (the faster of SciPy's CSR and CSC forms): the same product, the least any round has to do.  Goal of issue 2: within 2x.

(c) Rounds against lower bounds (``--part c``, default n = 1 000 and 10 000, ``--bound-sizes``).
On one geometric graph per size, inputs N(3, 1) with p = 8 columns, one self-stopping
aggregation each of: the default before issue 10 (plain PDMM, c = 1/sqrt(lambda_2 lambda_max)
by shift-invert, every node waiting the diameter bound to stop: emulated by setting every
eccentricity bound to D), plain PDMM (``accel = "none"``) with the new stopping rule, heavy
ball (``accel = "heavy-ball"``), deflated heavy ball (``accel = "deflated"``, the default before
issue 24) and the default (the Leja polynomial from 3 to 100 000 nodes where it is predicted to
pay, :func:`p2pem.protocols.pdmm.polynomial_schedule`, every node stopping at the public round
after its last root), with rounds / D.  Against, on the same
graph and measured in the same run:

* the diameter D: no rule can stop before information has crossed the graph;
* Chebyshev-accelerated gossip (Golub-Varga semi-iteration on I - gamma L_g, L_g the
  Metropolis Laplacian, exact extreme eigenvalues) from the *same start*: PDMM's first
  broadcast x(1), shifted to the true mean (gossip keeps its start's mean), counted to the
  final error that the heavy-ball run reached; and from the non-private start x = s;
* the fewest rounds the heavy-ball iteration and the default need for the "before" run's error
  (runs with tol = 0, bisection): what any stopping rule would need for the same accuracy.

(d) Which variant the default runs below 500 nodes and off geometric graphs (``--part d``):
on geometric graphs of 8-300 nodes (3 seeds each), rings, a grid, complete, Erdos-Renyi,
Watts-Strogatz and barbell graphs, one self-stopping aggregation each with heavy ball,
deflated heavy ball and the Leja polynomial, next to the rounds
:func:`p2pem.protocols.pdmm.predicted_rounds` predicts for each from the public spectrum, and
which one the default picks.

Usage::

    .venv/bin/python sim/bench_consensus.py                        # (a) and (b), defaults
    .venv/bin/python sim/bench_consensus.py --part a --seeds 10 --dim 3
    .venv/bin/python sim/bench_consensus.py --part b --sizes 80,1000 --json /tmp/consensus.json
    .venv/bin/python sim/bench_consensus.py --part c --bound-sizes 1000
    .venv/bin/python sim/bench_consensus.py --part d

Not a test: nothing is asserted; timings depend on the machine and its load (printed).
BLAS is limited to one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from p2pem.gmm import stats_size
from p2pem.graphs import geometric_graph
from p2pem.protocols import PdmmSP
from p2pem.protocols.base import Topology
from p2pem.protocols.pdmm import auto_c, heavy_ball_params, metropolis_weights, polynomial_target
from p2pem.simulate import protocol_streams, relative_error
from _common import before_issue10, chebyshev_gossip_rounds, print_table

C_GRID = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
THETAS = (1.0, 0.5)
TARGET_MSE = 1e-10
MATLAB_ROUNDS = 45  # issue 2: the authors' MATLAB, c = 0.1-0.2
GOAL_RATIO = 2.0
ROUND_BUDGETS = (250, 1000, 4000)  # rounds recorded, raised until the target is reached




def mse_curve(spec, values, topology, seed, n_rounds):
    """MSE(t), t = 1..n_rounds, from the primal broadcasts of a recorded run with tol=0."""
    n, p = values.shape
    spec = type(spec)(**{**spec.params(), "tol": 0.0, "max_iter": n_rounds})
    out = spec.aggregate(values, topology, protocol_streams(seed, n), 0, record=True)
    x = np.empty((n_rounds, n, p))
    for m in out.trace:
        if m.kind == "primal":
            x[m.round - 1, m.sender] = m.payload
    return np.mean((x - values.mean(axis=0)) ** 2, axis=(1, 2))


def rounds_to_target(spec, values, topology, seed):
    """(first round with MSE <= target, first round after which it stays there) or (None, None)."""
    for budget in ROUND_BUDGETS:
        mse = mse_curve(spec, values, topology, seed, budget)
        below = mse <= TARGET_MSE
        if below.any():
            first = int(np.argmax(below)) + 1
            above = np.flatnonzero(~below)
            stays = int(above[-1]) + 2 if above.size else 1
            return first, stays
    return None, None


def summarise(vals: list[int | None]) -> str:
    got = [v for v in vals if v is not None]
    if not got:
        return f">{ROUND_BUDGETS[-1]}"
    miss = len(vals) - len(got)
    text = f"{statistics.median(got):g} [{min(got)}-{max(got)}]"
    return text + (f" ({miss} >{ROUND_BUDGETS[-1]})" if miss else "")


def part_a(args) -> dict:
    default_std = PdmmSP().perturbation_std
    stds = (default_std, 0.0)
    seeds = list(range(args.seeds))
    graphs = []
    for s in seeds:
        g = geometric_graph(args.n, seed=s)
        topo = Topology.from_graph(g)
        values = np.random.default_rng(1000 + s).standard_normal((args.n, args.dim))
        graphs.append((s, topo, values))
    cs = [*args.c, "auto", "heavy-ball", "default"]
    print(f"(a) rounds to MSE <= {TARGET_MSE:g} on {args.n}-node geometric graphs, seeds {seeds[0]}..{seeds[-1]}, "
          f"inputs N(0,1) of dimension {args.dim}; initial dual std {default_std:g} (protocol default) and 0")
    print(f"    reference: the authors' MATLAB reaches it in about {MATLAB_ROUNDS} rounds at c = 0.1-0.2 (issue 2)")
    auto_values = [auto_c(topo) for _, topo, _ in graphs]
    print(f"    auto c = 1/sqrt(lambda_2 lambda_max) of the Laplacian: median {statistics.median(auto_values):.3f} "
          f"[{min(auto_values):.3f}-{max(auto_values):.3f}]; graph diameters "
          f"{sorted({topo.diameter for _, topo, _ in graphs})}, mean degree "
          f"{np.mean([topo.degrees.mean() for _, topo, _ in graphs]):.1f}")
    result = {"n": args.n, "dim": args.dim, "seeds": seeds, "target_mse": TARGET_MSE, "matlab_rounds": MATLAB_ROUNDS,
              "auto_c": auto_values, "runs": []}
    t_start = time.perf_counter()
    for theta in THETAS:
        rows = []
        for c in cs:
            if c in ("heavy-ball", "default") and theta != 1.0:
                continue  # heavy ball (and the schedules before it) is defined for theta = 1 only
            row = [str(c)]
            for std in stds:
                # the c grid and "auto" study plain PDMM; "default" is PdmmSP(), the polynomial here
                spec = (PdmmSP(perturbation_std=std, accel="heavy-ball") if c == "heavy-ball"
                        else PdmmSP(perturbation_std=std) if c == "default"
                        else PdmmSP(c=c, theta=theta, perturbation_std=std, accel="none"))
                firsts, stays, stop_rounds, final_mse, hit_max = [], [], [], [], 0
                for s, topo, values in graphs:
                    first, stay = rounds_to_target(spec, values, topo, s)
                    firsts.append(first)
                    stays.append(stay)
                    out = spec.aggregate(values, topo, protocol_streams(s, args.n), 0)
                    stop_rounds.append(int(out.rounds))
                    final_mse.append(float(np.mean((out.results - values.mean(axis=0)) ** 2)))
                    hit_max += not out.converged
                    result["runs"].append({"theta": theta, "c": c, "perturbation_std": std, "seed": s,
                                           "rounds_to_target": first, "rounds_to_stay_below": stay,
                                           "stop_rounds": int(out.rounds), "stop_converged": bool(out.converged),
                                           "stop_final_mse": final_mse[-1], "stop_tol": spec.stop_tol})
                differ = any(f != st for f, st in zip(firsts, stays, strict=True))
                row += [summarise(firsts) + ("*" if differ else ""),
                        f"{statistics.median(stop_rounds):g}" + (f" ({hit_max} max)" if hit_max else ""),
                        f"{max(final_mse):.1e}"]
            row.append(f"~{MATLAB_ROUNDS}" if c in (0.1, 0.15, 0.2) else "")
            rows.append(row)
        name = "PDMM" if theta == 1.0 else "averaged PDMM / ADMM"
        print(f"\ntheta = {theta:g} ({name}); rounds: median [min-max] over {len(seeds)} seeds")
        headers = ["c"]
        for std in stds:
            headers += [f"to 1e-10, std {std:g}", f"self-stop, std {std:g}", f"final MSE, std {std:g}"]
        print_table(headers + ["MATLAB"], rows)
    print(f"\n* the MSE rose above {TARGET_MSE:g} again after first reaching it for some seed (JSON: rounds_to_stay_below)")
    print(f"self-stop: rounds the protocol's own stopping rule uses (tol {PdmmSP().stop_tol:g} relative, max_iter "
          f"{PdmmSP().max_iter}; '(k max)' = k seeds hit max_iter); final MSE: largest over the seeds")
    print(f"(a) took {time.perf_counter() - t_start:.1f} s")
    return result


def best_time(fn, repeats: int) -> tuple[float, float]:
    """(best wall time, best CPU time) of ``fn()`` over ``repeats`` calls.

    CPU time (``time.process_time``; single-threaded code, BLAS limited to one thread) is
    printed beside wall time because on a loaded machine wall time also counts the time the
    process waits for a core.
    """
    wall = cpu = float("inf")
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def spmv_time(a, x) -> tuple[float, float]:
    """(best wall, best CPU) time of one ``a @ x``, from batches of enough calls to be measurable."""
    t0 = time.perf_counter()
    a @ x
    once = max(time.perf_counter() - t0, 1e-7)
    number = max(1, int(0.02 / once))

    def batch():
        for _ in range(number):
            a @ x

    wall, cpu = best_time(batch, 7)
    return wall / number, cpu / number


def part_b(args) -> dict:
    p = args.p if args.p is not None else stats_size(3, 2) + 1
    print(f"\n(b) cost of one consensus round against one sparse product W @ x (the heavy-ball edge weights), x of "
          f"shape (n, {p}); pdmm-sp defaults (the Leja polynomial where it pays, std {PdmmSP().perturbation_std:g}); c: heavy ball's scale")
    rows, out = [], []
    for n in args.sizes:
        g = geometric_graph(n, seed=0)
        topo = Topology.from_graph(g)
        c, beta = heavy_ball_params(topo)
        values = np.random.default_rng(1).standard_normal((n, p))
        x = np.ascontiguousarray(values)
        # the product a heavy-ball round does: weights c / max(d_i, d_j)
        # (the faster of SciPy's CSR and CSC products: the engine uses CSC, 15-25 % faster here)
        w_adj = topo.weighted_adjacency(c * metropolis_weights(topo))
        spmv_wall, spmv_cpu = min(spmv_time(w_adj, x), spmv_time(w_adj.tocsc(), x))
        rngs = lambda: protocol_streams(0, n)  # noqa: E731
        # the marginal cost of a round: two fixed-length runs, difference over the extra rounds
        short = 10
        extra = max(50, min(400, int(4e7 / topo.src.size)))
        reps = 7 if n <= 1000 else 3
        s_wall, s_cpu = best_time(lambda: PdmmSP(tol=0.0, max_iter=short).aggregate(values, topo, rngs(), 0), reps)
        l_wall, l_cpu = best_time(lambda: PdmmSP(tol=0.0, max_iter=short + extra).aggregate(values, topo, rngs(), 0), reps)
        marg_wall, marg_cpu = (l_wall - s_wall) / extra, (l_cpu - s_cpu) / extra
        # one whole aggregation with the stopping rule, as an EM iteration runs it
        rounds = int(PdmmSP().aggregate(values, topo, rngs(), 0).rounds)
        full_wall, full_cpu = best_time(lambda: PdmmSP().aggregate(values, topo, rngs(), 0), 3 if n <= 1000 else 1)
        rows.append([f"{n:,}", f"{topo.src.size:,}", str(topo.diameter), f"{c:.3f}",
                     f"{spmv_wall * 1e6:,.1f}", f"{marg_wall * 1e6:,.1f}", f"{marg_wall / spmv_wall:.1f}",
                     f"{marg_cpu / spmv_cpu:.1f}", str(rounds), f"{full_wall:.3f}",
                     f"{full_wall / rounds * 1e6:,.1f}", f"{full_wall / rounds / spmv_wall:.1f}",
                     f"{full_cpu / rounds / spmv_cpu:.1f}"])
        out.append({"n": n, "p": p, "directed_edges": int(topo.src.size), "diameter": topo.diameter, "c": c,
                    "spmv_wall_s": spmv_wall, "spmv_cpu_s": spmv_cpu,
                    "round_marginal_wall_s": marg_wall, "round_marginal_cpu_s": marg_cpu, "extra_rounds_timed": extra,
                    "ratio_marginal_wall": marg_wall / spmv_wall, "ratio_marginal_cpu": marg_cpu / spmv_cpu,
                    "full_rounds": rounds, "full_wall_s": full_wall, "full_cpu_s": full_cpu,
                    "ratio_full_wall": full_wall / rounds / spmv_wall, "ratio_full_cpu": full_cpu / rounds / spmv_cpu,
                    "goal_ratio": GOAL_RATIO})
        print(f"  n = {n:,} done", flush=True)
    print_table(["n", "nnz", "diam", "c", "spmv us", "round us", "ratio", "cpu ratio", "rounds", "aggregation s",
                 "per round us", "ratio", "cpu ratio"], rows)
    print("nnz: directed edges (non-zeros of the adjacency); spmv: one product, best of 7 batches; round: marginal "
          "time of one tol=0 round (set-up excluded); aggregation: one whole self-stopping aggregation, per round = "
          "its time / its rounds (set-up and stopping test included).  ratio: wall time / spmv wall time; cpu ratio: "
          f"the same with CPU times (robust to a loaded machine).  Goal: ratio <= {GOAL_RATIO:g}.")
    return {"p": p, "sizes": out}


def rounds_to_error(spec, values, topo, seed, target, hi) -> int:
    """The fewest rounds after which ``spec``'s iteration (run with tol = 0) is within ``target``
    of the true mean, by bisection below ``hi`` (the error falls about geometrically): what an
    ideal stopping rule would need for that accuracy."""
    n = values.shape[0]
    mean = values.mean(axis=0)

    def error(k):
        out = type(spec)(**{**spec.params(), "tol": 0.0, "max_iter": k}).aggregate(values, topo, protocol_streams(seed, n), 1)
        return relative_error(out.results, mean)

    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if error(mid) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def part_c(args) -> dict:
    p = 8
    print(f"\n(c) rounds of one self-stopping aggregation against lower bounds on the same graph (p = {p})")
    rows, out, alt_rows = [], [], []
    for n in args.bound_sizes:
        g = geometric_graph(n, seed=0)
        topo = Topology.from_graph(g)
        values = np.random.default_rng(1).standard_normal((n, p)) + 3.0
        mean = values.mean(axis=0)
        runs = {}
        before_spec, before = before_issue10(topo)
        alternatives = (("plain c=1/sqrt(mean degree)", PdmmSP(accel="none", c=1.0 / float(np.sqrt(topo.degrees.mean())))),
                        ("plain theta=0.9", PdmmSP(accel="none", theta=0.9)))
        for key, spec, tp in (("default", PdmmSP(), topo), ("heavy-ball", PdmmSP(accel="heavy-ball"), topo),
                              ("deflated", PdmmSP(accel="deflated"), topo),
                              ("plain", PdmmSP(accel="none"), topo), ("before", before_spec, before),
                              *((k, sp_, topo) for k, sp_ in alternatives)):
            agg = spec.aggregate(values, tp, protocol_streams(0, n), 1)
            runs[key] = (int(agg.rounds), relative_error(agg.results, mean), agg.converged)
        first = PdmmSP(accel="heavy-ball", tol=0.0, max_iter=1).aggregate(values, topo, protocol_streams(0, n), 1).results
        default, hb, plain, old, defl = runs["default"], runs["heavy-ball"], runs["plain"], runs["before"], runs["deflated"]
        target = hb[1]
        cheb_same = chebyshev_gossip_rounds(topo, first - first.mean(axis=0) + mean, mean, target)
        cheb_plain = chebyshev_gossip_rounds(topo, values, mean, target)
        # the least each iteration needs for the old default's accuracy (with any stopping rule)
        ideal_hb = rounds_to_error(PdmmSP(accel="heavy-ball"), values, topo, 0, old[1], hb[0] + 20)
        ideal = rounds_to_error(PdmmSP(), values, topo, 0, old[1], default[0] + 20)
        iteration = PdmmSP().iteration(topo)
        ecc = topo.eccentricity
        rows.append([f"{n:,}", str(topo.diameter), f"{int(ecc.min())}", f"{old[0]} ({old[1]:.1e})",
                     f"{plain[0]} ({plain[1]:.1e})", f"{hb[0]} ({hb[1]:.1e})", f"{ideal_hb} ({ideal_hb / old[0]:.2f})",
                     str(cheb_same), f"{hb[0] / cheb_same:.2f}", str(cheb_plain),
                     f"{defl[0]} ({defl[1]:.1e})", f"{defl[0] / topo.diameter:.2f}",
                     f"{default[0]} ({default[1]:.1e}) {iteration}", f"{default[0] / old[0]:.2f}",
                     f"{ideal} ({ideal / old[0]:.2f})", f"{default[0] / topo.diameter:.2f}"])
        out.append({"n": n, "p": p, "diameter_bound": topo.diameter, "min_eccentricity_bound": int(ecc.min()),
                    "before_rounds": old[0], "before_error": old[1], "before_converged": old[2],
                    "plain_rounds": plain[0], "plain_error": plain[1], "plain_converged": plain[2],
                    "heavy_ball_rounds": hb[0], "heavy_ball_error": hb[1], "heavy_ball_converged": hb[2],
                    "default_rounds": default[0], "default_error": default[1], "default_converged": default[2],
                    "deflated_rounds": defl[0], "deflated_error": defl[1], "deflated_converged": defl[2],
                    "default_rounds_over_diameter": default[0] / topo.diameter,
                    "deflated_rounds_over_diameter": defl[0] / topo.diameter,
                    "default_iteration": iteration,
                    "chebyshev_same_start_rounds": cheb_same, "chebyshev_data_start_rounds": cheb_plain,
                    "heavy_ball_rounds_to_before_error": ideal_hb, "default_rounds_to_before_error": ideal})
        out[-1]["alternatives"] = {k: {"rounds": runs[k][0], "error": runs[k][1], "converged": runs[k][2]}
                                   for k, _ in alternatives}
        alt_rows.append([f"{n:,}", *(f"{runs[k][0]} ({runs[k][1]:.1e})" for k, _ in alternatives)])
        print(f"  n = {n:,} done", flush=True)
    print_table(["n", "D bound", "radius bound", "before (err)", "plain PDMM (err)", "heavy ball (err)",
                 "heavy ball to before's err (ratio)", "Chebyshev, same start", "ratio", "Chebyshev, from s",
                 "deflated (err)", "rounds / D", "default (err)", "ratio", "default to before's err (ratio)",
                 "rounds / D"], rows)
    print("before: the default before issue 10 (plain PDMM, c = 1/sqrt(lambda_2 lambda_max) by shift-invert, every "
          "node waiting the diameter bound D to stop); plain PDMM: accel = 'none'; heavy ball: accel = 'heavy-ball'; "
          "deflated: accel = 'deflated' (the default before issue 24); default: PdmmSP() (the Leja polynomial from 3 to "
          "100 000 nodes where it pays, every node stopping at its public round one after the last root); the others "
          "with the eccentricity stopping rule; "
          "err: max relative error of the result vs the true mean.  Chebyshev: rounds of Chebyshev-accelerated gossip "
          "on the Metropolis Laplacian (interval [lambda_2, lambda_max]) to the heavy-ball run's error, from PDMM's "
          "perturbed first broadcast (same start) and from the data (no perturbation: not private); ratio: heavy-ball "
          "rounds / Chebyshev from the same start.  '... to before's err': the fewest rounds after which that iteration "
          "(tol = 0) is within the 'before' run's error, i.e. what any stopping rule needs for the same accuracy.  "
          "Ratios in parentheses and after 'default': rounds / 'before'.")
    print("\nother step-size rules for plain PDMM on the same runs (rounds, error), new stopping rule:")
    print_table(["n", "c = 1/sqrt(mean degree)", "c auto, theta = 0.9"], alt_rows)
    return {"sizes": out}


def part_d_graphs() -> list[tuple[str, object]]:
    import networkx as nx

    graphs: list[tuple[str, object]] = []
    for n in (8, 20, 80, 300):
        graphs += [(f"geometric {n} (seed {s})", geometric_graph(n, seed=s)) for s in range(3)]
    graphs += [("ring 6", nx.cycle_graph(6)), ("ring 30", nx.cycle_graph(30)), ("grid 5x6", nx.grid_2d_graph(5, 6)),
               ("complete 7", nx.complete_graph(7)), ("complete 40", nx.complete_graph(40)),
               ("Erdos-Renyi 50, p 0.1", nx.erdos_renyi_graph(50, 0.1, seed=1)),
               ("Erdos-Renyi 200, p 0.05", nx.erdos_renyi_graph(200, 0.05, seed=1)),
               ("Watts-Strogatz 60, k 4", nx.connected_watts_strogatz_graph(60, 4, 0.1, seed=2)),
               ("barbell 8-3-8", nx.barbell_graph(8, 3))]
    return [(name, nx.convert_node_labels_to_integers(g)) for name, g in graphs]


def part_d(args) -> dict:
    """Which iteration the default runs below 500 nodes and off geometric graphs: predicted and measured rounds."""
    from p2pem.protocols.pdmm import low_eigenvalues, metropolis_extremes, predicted_rounds

    p = 4
    accels = ("heavy-ball", "deflated", "polynomial")
    print(f"\n(d) heavy ball, deflated heavy ball and the Leja polynomial below 500 nodes and off geometric graphs "
          f"(p = {p}): the default's choice against measured rounds")
    rows, out, right = [], [], 0
    for name, g in part_d_graphs():
        topo = Topology.from_graph(g)
        n = topo.n_nodes
        values = np.random.default_rng(5).standard_normal((n, p)) + 1.0
        mean = values.mean(axis=0)
        lam2 = metropolis_extremes(topo)[0]
        lam5 = float(low_eigenvalues(topo, 4)[3])
        pred = predicted_rounds(topo, polynomial_target(PdmmSP().stop_tol, True))  # the default's (public stop round)
        runs = {}
        for accel in accels:
            if accel == "polynomial" and pred["polynomial"] is None:
                continue
            agg = PdmmSP(accel=accel).aggregate(values, topo, protocol_streams(0, n), 1)
            runs[accel] = (int(agg.rounds), relative_error(agg.results, mean))
        picks = PdmmSP().iteration(topo)
        best = min(runs, key=lambda a: runs[a][0])
        right += runs[picks][0] == runs[best][0]
        rows.append([name, str(topo.diameter), f"{lam5 / lam2:.2f}",
                     *("-" if pred[a] is None else f"{pred[a]:.0f}" for a in accels),
                     *(f"{runs[a][0]} ({runs[a][1]:.1e})" if a in runs else "-" for a in accels),
                     picks, f"{runs[picks][0] / topo.diameter:.1f}"])
        out.append({"graph": name, "n": n, "diameter_bound": topo.diameter, "lambda5_over_lambda2": lam5 / lam2,
                    "predicted": pred, "rounds": {a: runs[a][0] for a in runs}, "errors": {a: runs[a][1] for a in runs},
                    "default": picks})
    print_table(["graph", "D", "lambda_5 / lambda_2", "predicted heavy ball", "predicted deflated", "predicted polynomial",
                 "heavy ball (err)", "deflated (err)", "polynomial (err)", "default runs", "default rounds / D"], rows)
    print(f"the default ran the variant with the fewest measured rounds on {right} of {len(rows)} graphs; predicted: "
          "rounds to reduce the error by the polynomial's target (log(target) / log sqrt(beta) for heavy ball, plus "
          "the special rounds for deflation, the special rounds for the polynomial; '-': more than heavy ball)")
    return {"graphs": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("a", "b", "c", "d", "both", "all"), default="all",
                        help="which part: a, b, c, d, both (= a and b) or all (default)")
    parser.add_argument("--n", type=int, default=20, help="(a) nodes per graph (default 20)")
    parser.add_argument("--seeds", type=int, default=5, help="(a) graph/input seeds 0..N-1 (default 5)")
    parser.add_argument("--dim", type=int, default=1, help="(a) entries per node's input (default 1: scalar)")
    parser.add_argument("--c", type=lambda s: [float(v) for v in s.split(",")], default=list(C_GRID),
                        help="(a) fixed step sizes, comma-separated ('auto' is always added)")
    parser.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")], default=[80, 1000, 10000],
                        help="(b) graph sizes, comma-separated (default 80,1000,10000)")
    parser.add_argument("--bound-sizes", type=lambda s: [int(v) for v in s.split(",")], default=[1000, 10000],
                        help="(c) graph sizes, comma-separated (default 1000,10000)")
    parser.add_argument("--p", type=int, default=None, help="(b) columns per node (default: K=3, d=2 EM vector, 20)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)


    print(f"cpus available: {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f} "
          f"(shared machine: timings are indicative); BLAS threads limited to 1")
    result: dict = {"cpus": len(os.sched_getaffinity(0)), "load_average": os.getloadavg()[0]}
    with threadpool_limits(limits=1):
        if args.part in ("a", "both", "all"):
            result["convergence"] = part_a(args)
        if args.part in ("b", "both", "all"):
            result["per_round"] = part_b(args)
        if args.part in ("c", "all"):
            result["lower_bounds"] = part_c(args)
        if args.part in ("d", "all"):
            result["small_graphs"] = part_d(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
