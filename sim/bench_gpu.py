"""Benchmark: pdmm-sp's vectorised engine on a GPU (``device = "cuda"``) against the CPU, in one run.

Needs CuPy (``pip install -e ".[gpu]"``) and an NVIDIA GPU.  Without one, ``--device
array-api-strict`` runs the same portable code path on the CPU (a smoke test of this script,
its timings mean nothing).

(a) Per round (``--sizes``, default 10 000, 100 000, 1 000 000): a geometric graph built with
``geometric_edges`` + ``Topology.from_edges`` (no networkx), inputs N(3, 1) with p = 20
columns, and for each device the marginal time of one consensus round (two fixed-length runs
with ``tol = 0``, the difference over the extra rounds, so set-up and the host-side draw of
the initial duals are excluded), then one self-stopping aggregation on the device and, up to
``--cpu-agg-upto`` nodes (default 10 000), on the CPU: rounds, wall time and the largest
relative difference of the results (goal: 1e-9; the summation order of the sparse product
differs, so not bit for bit).  The CPU's rounds are timed up to ``--cpu-upto`` nodes (default
100 000).

(b) End to end (``--em-n``, default 100 000; 0 skips): ``run_protocol`` with pdmm-sp on the
device over a ``Topology`` (the same graph as ``geometric_graph(n, seed=0)``, without
networkx), K = 3, d = 2, 5 rows per node, ``--em-iter`` EM iterations (default 20, ``tol =
0``), against ``centralized``: wall time and max relative error.  Goals of issue 10: n = 10^5
under 60 s on one H100, n = 10^6 under 30 minutes (``--em-n 1000000``).

Usage::

    .venv/bin/python sim/bench_gpu.py                                  # on a CUDA machine
    .venv/bin/python sim/bench_gpu.py --sizes 10000,100000 --em-n 0 --json /tmp/gpu.json
    .venv/bin/python sim/bench_gpu.py --device array-api-strict --sizes 2000 --em-n 0   # no GPU: smoke test

The JSON (``--json``) records the host (``_common.cpu_info``) and, on CUDA, the GPU's model,
the NVIDIA driver and the CUDA and CuPy versions (``_common.cuda_info``).

Not a test: nothing is asserted.  BLAS is limited to one thread on the CPU side.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from _common import cpu_info, cuda_info, print_table
from p2pem.graphs import geometric_edges
from p2pem.protocols import PdmmSP
from p2pem.protocols.base import Topology
from p2pem.simulate import protocol_streams, relative_error


def _sync(device: str) -> None:
    if device == "cuda":
        import cupy

        cupy.cuda.Device().synchronize()


def timed(fn, device: str):
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t0


def per_round(topo, values, device: str, short: int = 20, extra: int = 200) -> float:
    n = topo.n_nodes

    def run(rounds):
        return PdmmSP(tol=0.0, max_iter=rounds, device=device).aggregate(values, topo, protocol_streams(0, n), 1)

    run(short)  # warm-up: CUDA context, kernels, cached step parameters
    _, t_short = timed(lambda: run(short), device)
    _, t_long = timed(lambda: run(short + extra), device)
    return (t_long - t_short) / extra


def product_check(topo, p: int = 20, reps: int = 50) -> dict:
    """The engine's CUDA product (p2pem.protocols.pdmm.cuda) against cuSPARSE (cupyx) and SciPy on the host."""
    import cupy
    import cupyx.scipy.sparse

    from p2pem.protocols.pdmm.cuda import CsrRowProduct

    a = topo.adjacency
    x = np.random.default_rng(2).standard_normal((topo.n_nodes, p))
    kernel, cusparse = CsrRowProduct(a), cupyx.scipy.sparse.csr_matrix(a)
    xd = cupy.asarray(x)
    ref = a @ x

    def per_call(fn):
        fn()
        _sync("cuda")
        t0 = time.perf_counter()
        for _ in range(reps):
            out = fn()
        _sync("cuda")
        return out, (time.perf_counter() - t0) / reps

    k_out, k_s = per_call(lambda: kernel(xd))
    c_out, c_s = per_call(lambda: cusparse @ xd)
    k_host = k_out.get()
    return {"kernel_s": k_s, "cusparse_s": c_s, "kernel_bit_equal_cpu": bool(np.array_equal(k_host, ref)),
            "kernel_vs_cusparse": relative_error(k_host, c_out.get())}


def part_a(args) -> list[dict]:
    rows, out = [], []
    for n in args.sizes:
        pos, pairs, _ = geometric_edges(n, seed=0)
        del pos
        topo = Topology.from_edges(n, pairs)
        values = np.random.default_rng(1).standard_normal((n, 20)) + 3.0
        rec = {"n": n, "directed_edges": int(topo.dst.size)}
        if args.device == "cuda":
            rec["product"] = pc = product_check(topo)
            print(f"  n = {n:,} product (p = 20): kernel {pc['kernel_s'] * 1e3:.3f} ms, cuSPARSE {pc['cusparse_s'] * 1e3:.3f} ms, "
                  f"kernel equals SciPy bit for bit: {pc['kernel_bit_equal_cpu']}, vs cuSPARSE {pc['kernel_vs_cusparse']:.1e}",
                  flush=True)
        dev_round = per_round(topo, values, args.device)
        dev_agg, dev_s = timed(lambda: PdmmSP(device=args.device).aggregate(values, topo, protocol_streams(0, n), 1), args.device)
        rec.update(device_round_s=dev_round, device_rounds=int(dev_agg.rounds), device_aggregation_s=dev_s)
        if n <= args.cpu_upto:
            rec.update(cpu_round_s=per_round(topo, values, "cpu"))
        if n <= args.cpu_agg_upto:
            cpu_agg, cpu_s = timed(lambda: PdmmSP().aggregate(values, topo, protocol_streams(0, n), 1), "cpu")
            diff = relative_error(dev_agg.results, cpu_agg.results)
            rec.update(cpu_rounds=int(cpu_agg.rounds), cpu_aggregation_s=cpu_s, max_rel_diff=diff)
        out.append(rec)
        rows.append([f"{n:,}", f"{topo.dst.size:,}", f"{dev_round * 1e3:.3f}",
                     f"{rec['cpu_round_s'] * 1e3:.3f}" if "cpu_round_s" in rec else "-",
                     f"{rec['cpu_round_s'] / dev_round:.1f}" if "cpu_round_s" in rec else "-",
                     f"{dev_agg.rounds}", f"{dev_s:.2f}", f"{dev_s / dev_agg.rounds * 1e3:.2f}", f"{rec['cpu_aggregation_s']:.2f}" if "cpu_aggregation_s" in rec else "-",
                     f"{rec['max_rel_diff']:.1e}" if "max_rel_diff" in rec else "-"])
        print(f"  n = {n:,} done", flush=True)
    print_table(["n", "nnz", f"{args.device} ms/round", "cpu ms/round", "speed-up", "rounds", f"{args.device} agg s",
                 f"{args.device} agg ms/round", "cpu agg s", "max rel diff"], rows)
    print("ms/round: marginal time of one tol=0 round (on a GPU noisy: per-run set-up varies; the agg ms/round "
          "column is the robust figure); agg: one self-stopping aggregation (initial duals "
          "included: per-node host draws on the CPU, one block on the device); max rel diff: device vs CPU results (goal <= 1e-9).")
    return out


def part_b(args) -> dict:
    from p2pem.data import split_rows, synthetic_mixture
    from p2pem.em import EMSettings
    from p2pem.protocols import Centralized
    from p2pem.simulate import max_relative_difference, run_protocol

    n = args.em_n
    t0 = time.perf_counter()
    # the same graph as geometric_graph(n, seed=0), without networkx (about 1 KB per edge)
    _, pairs, _ = geometric_edges(n, seed=0)
    g = Topology.from_edges(n, pairs)
    del pairs
    graph_s = time.perf_counter() - t0
    rng = np.random.default_rng([0, n])
    X, _, _ = synthetic_mixture(5 * n, n_features=2, n_components=3, rng=rng)
    parts = split_rows(X, n, how="even", rng=rng)
    settings = EMSettings(3, max_iter=args.em_iter, tol=0.0, init_seed=0)
    ref = run_protocol(parts, g, Centralized(), settings)
    run, em_s = timed(lambda: run_protocol(parts, g, PdmmSP(device=args.device), settings, seed=0), args.device)
    err = max_relative_difference(run, ref)
    rounds = float(np.mean(run.consensus_iterations))
    total = int(np.sum(run.consensus_iterations))
    print(f"\n(b) n = {n:,}, full private EM on {args.device}, {settings.max_iter} EM iterations: {em_s:.1f} s "
          f"(graph and topology {graph_s:.1f} s more), {rounds:.0f} rounds per EM iteration "
          f"({em_s / total * 1e3:.2f} ms per round, all included), max rel error vs centralized {err:.1e}")
    return {"n": n, "em_iter": settings.max_iter, "em_s": em_s, "graph_s": graph_s, "mean_rounds": rounds,
            "total_rounds": total, "max_rel_error": err}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "array-api-strict"))
    parser.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",") if v], default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--cpu-upto", type=int, default=100_000, help="time the CPU's rounds up to this n")
    parser.add_argument("--cpu-agg-upto", type=int, default=10_000,
                        help="run the CPU's whole self-stopping aggregation (and compare results) up to this n")
    parser.add_argument("--em-n", type=int, default=100_000, help="(b) nodes of the end-to-end EM run (0 skips)")
    parser.add_argument("--em-iter", type=int, default=20, help="(b) EM iterations (20 in the issue's goal)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # no CuPy, no driver or no GPU: nothing to measure here
            print(f"no CUDA device available ({type(exc).__name__}: {exc}); nothing measured "
                  "(install the gpu extra on a CUDA machine, or try --device array-api-strict)")
            return 0
    print(f"device {args.device}; cpus {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f}")
    result: dict = {"device": args.device, "machine": cpu_info()}
    if args.device == "cuda":
        result["gpu"] = cuda_info()  # model, NVIDIA driver, CUDA and CuPy versions
        print(f"gpu {result['gpu']}", flush=True)
    with threadpool_limits(limits=1):
        if args.sizes:
            result["per_round"] = part_a(args)
        if args.em_n:
            result["em"] = part_b(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
