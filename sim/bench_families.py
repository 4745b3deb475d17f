"""Benchmark: the cost of an EM iteration of every model family against the Gaussian one, on both engines.

A protocol never knows which family's statistics it sums, so a family changes two costs: its own
E-step and M-step (local work) and the length of the vector every aggregation carries.  This
script measures both, per family, at ``--nodes`` nodes (default 10 000):

* ``gaussian`` and ``skew-normal`` on the same rows: ``--rows`` rows per node (default 5) in
  d = 2 from a 2-component skew-normal mixture;
* ``mixed``: the same two continuous columns (one full covariance over them) plus two
  categorical columns of 3 and 4 categories drawn from a mixed-type model, so d = 4 columns.

For each family and each protocol of ``--protocols`` (default pdmm-sp and federated) on the
vectorised engine, ``--iterations`` EM iterations (default 10, ``tol = 0``) from the family's
private initialisation; for pdmm-sp also on the device engine (``--device``: ``cuda`` on a GPU;
by default ``array-api-strict``, the portable code path the CUDA engine runs, on the host).
Printed per family:

* the family's own work per iteration (E-step + M-step of all nodes at once, CPU time, median of
  the iterations, least of ``--repeat`` runs) and its ratio to the Gaussian one;
* per protocol and engine, the median CPU time of a whole EM iteration (the time between two of
  ``run_protocol``'s progress calls; least disturbed of ``--repeat`` runs, families alternating),
  its ratio to the Gaussian iteration, the wall ratio, the vector length and consensus rounds.

``sim/bench_scaling.py --families`` prints the same table at its sizes.

Usage::

    .venv/bin/python sim/bench_families.py                      # 10 000 nodes
    .venv/bin/python sim/bench_families.py --nodes 1000 --device cuda --json /tmp/families.json

Not a test: nothing is asserted; timings depend on the machine and its load (printed, with the
CPU time beside the wall time).  BLAS is limited to one thread.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table  # noqa: E402

from p2pem.em import EMSettings, EMState  # noqa: E402
from p2pem.families import GAUSSIAN, SKEW_NORMAL, MixedFamily  # noqa: E402
from p2pem.graphs import geometric_graph  # noqa: E402
from p2pem.protocols import PdmmSP  # noqa: E402
from p2pem.registry import make_protocol  # noqa: E402
from p2pem.simulate import run_protocol  # noqa: E402
from p2pem.snmix import SkewNormalParams  # noqa: E402

TRUTH = SkewNormalParams.from_direct(
    [0.4, 0.6], [[0.0, 0.0], [3.0, 1.0]], [[[1.0, 0.3], [0.3, 0.8]], [[0.7, -0.2], [-0.2, 1.2]]], [[4.0, -1.0], [-2.0, 2.0]]
)
MIXED = MixedFamily(n_continuous=2, n_categories=(3, 4), covariance="full")
CATEGORIES = np.array([[0.6, 0.3, 0.1, 0.1, 0.2, 0.3, 0.4], [0.2, 0.3, 0.5, 0.4, 0.3, 0.2, 0.1]])


def data(nodes: int, rows: int, seed: int) -> dict[str, list[np.ndarray]]:
    """Every family's rows spread over the nodes: the continuous ones shared, the mixed family's with
    two categorical columns more."""
    rng = np.random.default_rng(seed)
    X, labels = SKEW_NORMAL.sample(TRUTH, nodes * rows, rng)
    cats = [np.array([rng.choice(c, p=CATEGORIES[j, s : s + c] / CATEGORIES[j, s : s + c].sum()) for j in labels], dtype=float)
            for s, c in zip(MIXED.offsets, MIXED.n_categories, strict=True)]
    order = rng.permutation(len(X))
    continuous = np.array_split(X[order], nodes)
    mixed = np.array_split(np.column_stack([X, *cats])[order], nodes)
    return {GAUSSIAN.name: continuous, SKEW_NORMAL.name: continuous, MIXED.name: mixed}


FAMILIES = (GAUSSIAN, SKEW_NORMAL, MIXED)


def family_work(parts, family, iterations: int) -> tuple[float, int]:
    """Median CPU seconds of the family's E-step plus M-step over all nodes, and the statistics length."""
    settings = EMSettings(2, max_iter=iterations, tol=0.0, init_seed=1, family=family)
    state = EMState(parts, settings, len(parts))
    state.absorb(np.repeat(family.init_statistics(state.X, state.offsets).mean(0, keepdims=True), len(parts), axis=0))
    times = []
    for _ in range(iterations):
        t0 = time.process_time()
        stats = family.statistics(state.X, state.offsets, state.model)
        mean = np.repeat(stats.mean(0, keepdims=True), len(parts), axis=0)
        model, _ = family.m_step(mean, state.model, settings.reg_covar, iteration=1)
        family.check(model)
        times.append(time.process_time() - t0)
        state.model = model
    return statistics.median(times), int(stats.shape[1])


def run(parts, graph, protocol: str, family, iterations: int, device: str | None) -> dict:
    """One run; per-iteration wall and CPU seconds (medians over its EM iterations)."""
    stamps: list[tuple[float, float]] = []
    settings = EMSettings(2, max_iter=iterations, tol=0.0, init_seed=1, family=family)
    spec = PdmmSP(device=device) if device is not None else make_protocol(protocol)
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = run_protocol(parts, graph, spec, settings, seed=5,
                          progress=lambda it, _: stamps.append((time.perf_counter(), time.process_time())))
    steps = np.diff(np.array(stamps), axis=0)
    rounds = result.consensus_iterations
    return {
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - cpu0,
        "per_iteration_s": float(np.median(steps[:, 0])),
        "per_iteration_cpu_s": float(np.median(steps[:, 1])),
        "rounds_per_iteration": float(np.mean(rounds)) if rounds else 0.0,
        "n_iter": result.n_iter,
    }


def compare(nodes: int, *, rows: int = 5, iterations: int = 10, protocols=("pdmm-sp", "federated"), device: str | None = "array-api-strict",
            repeat: int = 3, seed: int = 0) -> dict:
    """Every family's per-iteration cost against the Gaussian one at ``nodes`` nodes (the JSON document)."""
    parts = data(nodes, rows, seed)
    graph = geometric_graph(nodes, seed=seed)
    runs = [(p, None) for p in protocols] + ([("pdmm-sp", device)] if device else [])
    out: dict = {"format": "p2pem-bench-families", "version": 1, "nodes": nodes, "rows_per_node": rows, "iterations": iterations,
                 "family_work": {}, "runs": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a boundary warning says nothing about cost
        for family in FAMILIES:
            seconds, length = min(family_work(parts[family.name], family, iterations) for _ in range(repeat))
            out["family_work"][family.name] = {"per_iteration_s": seconds, "stats_length": length}
        for protocol, dev in runs:
            by: dict[str, list[dict]] = {f.name: [] for f in FAMILIES}
            for _ in range(repeat):  # alternating, so a burst of load hits every family alike
                for family in FAMILIES:
                    by[family.name].append(run(parts[family.name], graph, protocol, family, iterations, dev))
            best = {name: min(r, key=lambda x: x["per_iteration_cpu_s"]) for name, r in by.items()}
            out["runs"].append({"protocol": protocol, "engine": f"device {dev}" if dev else "vectorised", "families": best})
    return out


def print_comparison(out: dict) -> None:
    fw = out["family_work"]
    base = fw[GAUSSIAN.name]["per_iteration_s"]
    rows = [[f"{name}: E-step + M-step only", "-", f"{w['per_iteration_s']:.4f}", f"{w['per_iteration_s'] / base:.2f}", "-",
             str(w["stats_length"]), "-"] for name, w in fw.items()]
    for r in out["runs"]:
        g = r["families"][GAUSSIAN.name]
        for name, f in r["families"].items():
            rows.append([f"{name}: {r['protocol']} ({r['engine']})", f"{f['wall_s']:.1f} / {f['cpu_s']:.1f}", f"{f['per_iteration_cpu_s']:.4f}",
                         f"{f['per_iteration_cpu_s'] / g['per_iteration_cpu_s']:.2f}", f"{f['per_iteration_s'] / g['per_iteration_s']:.2f}",
                         str(fw[name]["stats_length"] + 1), f"{f['rounds_per_iteration']:.1f}"])
    print(f"{out['nodes']:,} nodes, {out['rows_per_node']} rows each, K = 2, {out['iterations']} EM iterations per run")
    print_table(["family: part (engine)", "run wall / CPU s", "per iteration CPU s", "ratio to gaussian", "wall ratio", "vector length",
                 "rounds/it"], rows)
    print("ratio: per-iteration CPU time over the Gaussian one in the same run (the least disturbed of the repeats); vector: the "
          "statistics plus the log-likelihood; mixed: two more (categorical) columns than the others")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes of the geometric graph (default 10000)")
    parser.add_argument("--rows", type=int, default=5, help="rows per node (default 5)")
    parser.add_argument("--iterations", type=int, default=10, help="EM iterations per run (default 10)")
    parser.add_argument("--protocols", default="pdmm-sp,federated", help="on the vectorised engine (default pdmm-sp,federated)")
    parser.add_argument("--device", default="array-api-strict",
                        help="pdmm-sp's device engine too: cuda on a GPU, array-api-strict (default) on the host, '' for none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="runs per protocol and family; the least disturbed is kept (default 3)")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args(argv)
    out = compare(args.nodes, rows=args.rows, iterations=args.iterations, protocols=tuple(args.protocols.split(",")),
                  device=args.device or None, repeat=args.repeat, seed=args.seed)
    print_comparison(out)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
