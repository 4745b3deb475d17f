"""Benchmark: one pdmm-sp round of the vectorised engine beside its floor, one streaming copy of the edge state.

A round of ``pdmm-sp`` is one sparse pass over every directed edge carrying the statistics
vector (p columns), so the time to stream an (m, p) float64 array once, the size of the
per-edge state (m directed edges), is the floor the round is compared with.  Both are measured
in the same run, alternating, and the ratio is the figure the documentation quotes, not an
absolute time (this project's machine is shared, so absolute times move with the load).

For each size n (``--sizes``, default 10 000 and 100 000): a geometric graph
(``geometric_edges(n, seed=0)`` + ``Topology.from_edges``, no networkx), inputs N(3, 1) with
``--p`` columns (default 14: the Gaussian family's statistics at d = 2, K = 3), and for each
thread count (``--threads``, default 1 and the usable cores; ``PdmmSP(threads=...)``):

* **round**: the marginal time of one round of a heavy-ball aggregation (the default above
  10^5 nodes; the polynomial's rounds below do the same work with other coefficients, and
  its schedule costs 19 s of set-up at 10^5), stopped by ``max_iter``: two runs of
  ``--short`` and ``--short`` + ``--rounds`` rounds, the difference over the extra rounds, so
  the set-up and the initial duals cancel; every round runs the settle test's prefilter, as a
  self-stopping aggregation's do;
* **order**: the round on the nodes renumbered into a locality order (``locality``, the
  engine's default from ``engine.LOCALITY_NODES`` nodes on the CPU, ``device.Locality``) and,
  as the reference in the same run, in the order the graph's points were drawn (``drawn``);
  ``--orders`` picks them;
* **copy**: one ``numpy.copyto`` of an (m, p) float64 array into another (the median of
  ``--copies``), split over the same number of threads in contiguous blocks;
* **ratio**: round / copy with the same threads (``--threads 2`` against a two-thread copy:
  the machine's bandwidth, not one core's), and the round's speed-up over one thread.

Repeated ``--repeat`` times (default 3), thread counts alternating within each repetition;
medians are reported, the ratio as the median of each repetition's ratio (a round and the
copy measured right after it share the machine's load of the moment).  Bit-for-bit agreement of the threaded round with one thread is what
``tests/test_pdmm_threads.py`` asserts; this script only times.

GPU (``--gpu-sizes``, default 100 000 and 1 000 000): the same with ``device = "cuda"``
(CuPy), the floor a ``cupy.copyto`` on the device, synchronised; skipped with a printed line
where CuPy or a GPU is absent.  The JSON then records the device model, the NVIDIA driver,
the CUDA versions and CuPy's (``--gpu-device array-api-strict`` runs the device path on the
host: a smoke test of this script, its timings mean nothing).

The JSON (``--json``) holds every measurement and the machine; ``--markdown`` writes the
documentation's table from that document (``docs/generated/bench_rounds.md``), and
``--render A.json [B.json ...]`` rewrites it from saved documents without measuring (e.g. a
CPU run here and a GPU run elsewhere).

Usage::

    .venv/bin/python sim/bench_rounds.py --sizes 10000 --gpu-sizes ""      # quick look
    .venv/bin/python sim/bench_rounds.py --json docs/generated/bench_rounds.json \\
        --markdown docs/generated/bench_rounds.md                          # the docs' table
    .venv/bin/python sim/bench_rounds.py --sizes "" --gpu-sizes 100000,1000000 --json gpu.json   # on a GPU
    .venv/bin/python sim/bench_rounds.py --render docs/generated/bench_rounds.json gpu.json \\
        --markdown docs/generated/bench_rounds.md

Not a test: nothing is asserted.  BLAS is limited to one thread (the round uses none).
Memory: about 3 m p 8 bytes at the largest size (the two copy buffers and the initial duals
of one aggregation; 2.4 GB at 10^5 nodes, p = 14, about 30 GB of GPU memory at 10^6).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from p2pem.errors import P2pemError
from p2pem.graphs import geometric_edges
from p2pem.protocols import PdmmSP
from p2pem.protocols.base import Topology
from p2pem.protocols.pdmm import engine
from p2pem.protocols.pdmm.engine import usable_cores
from p2pem.simulate import protocol_streams
from _common import cpu_info, cuda_info, print_table

FORMAT = "p2pem-bench-rounds/1"
GOAL_CPU_RATIO = 2.0  # issue 34: at 10^5 nodes with 2 threads
GOAL_GPU_RATIO = 3.0  # issue 34: at 10^6 nodes


def sizes(text: str) -> list[int]:
    try:
        out = [int(float(v)) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated sizes, got {text!r}") from None
    if any(n < 10 for n in out):
        raise argparse.ArgumentTypeError(f"sizes must be at least 10, got {text!r}")
    return out


def counts(text: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated thread counts, got {text!r}") from None
    if not out or any(k < 1 for k in out):
        raise argparse.ArgumentTypeError(f"thread counts must be positive integers, got {text!r}")
    return out


def orders(text: str) -> list[str]:
    out = [v.strip() for v in text.split(",") if v.strip()]
    if not out or any(v not in ("locality", "drawn") for v in out):
        raise argparse.ArgumentTypeError(f"orders must be 'locality' and/or 'drawn', comma-separated, got {text!r}")
    return out


def graph(n: int) -> Topology:
    _, pairs, _ = geometric_edges(n, seed=0)
    return Topology.from_edges(n, pairs)


class Clock:
    """Wall time on the host, synchronising the GPU first and last where one is used; the
    process's CPU time of the last call (all its threads) in ``cpu``."""

    def __init__(self, device: str) -> None:
        self.sync = (lambda: None)
        if device == "cuda":
            import cupy

            self.sync = cupy.cuda.Device().synchronize

        self.cpu = 0.0

    def __call__(self, fn) -> float:
        self.sync()
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        self.sync()
        wall = time.perf_counter() - t0
        self.cpu = time.process_time() - c0
        return wall


def round_time(topo: Topology, values, device: str, threads: int | str, short: int, extra: int, clock: Clock,
               order: str = "locality") -> tuple[float, float]:
    """Marginal wall and CPU seconds of one heavy-ball round (module docstring); ``order``
    "drawn" keeps the graph's own numbering (the engine's threshold raised for the call)."""
    n = topo.n_nodes
    default = engine.LOCALITY_NODES
    if order == "drawn":
        engine.LOCALITY_NODES = n + 1
        try:
            return round_time(topo, values, device, threads, short, extra, clock)
        finally:
            engine.LOCALITY_NODES = default

    def run(rounds: int) -> None:
        PdmmSP(accel="heavy-ball", max_iter=rounds, device=device, threads=threads).aggregate(
            values, topo, protocol_streams(0, n), 1)

    long_wall = clock(lambda: run(short + extra))
    long_cpu = clock.cpu
    short_wall = clock(lambda: run(short))
    return (long_wall - short_wall) / extra, (long_cpu - clock.cpu) / extra


class Floor:
    """One streaming copy of an (m, p) float64 array, on the host over ``threads`` blocks or on the device."""

    def __init__(self, m: int, p: int, device: str) -> None:
        self.device = device
        if device == "cuda":
            import cupy

            self.xp = cupy
        else:  # the host (array-api-strict's smoke test copies on the host too)
            self.xp = np
        self.src = self.xp.ones((m, p))
        self.dst = self.xp.empty_like(self.src)
        self.xp.copyto(self.dst, self.src)  # touch every page once

    def time(self, threads: int, copies: int, clock: Clock, pool: ThreadPoolExecutor | None) -> tuple[float, float]:
        """Median wall and CPU seconds of one copy."""
        if threads == 1 or pool is None:
            def once() -> None:
                self.xp.copyto(self.dst, self.src)
        else:
            cuts = np.linspace(0, self.src.shape[0], threads + 1).astype(int)

            def once() -> None:
                futures = [pool.submit(np.copyto, self.dst[lo:hi], self.src[lo:hi]) for lo, hi in zip(cuts[1:-1], cuts[2:], strict=True)]
                np.copyto(self.dst[: cuts[1]], self.src[: cuts[1]])
                for f in futures:
                    f.result()
        walls, cpus = [], []
        for _ in range(copies):
            walls.append(clock(once))
            cpus.append(clock.cpu)
        return statistics.median(walls), statistics.median(cpus)

    def free(self) -> None:
        del self.src, self.dst
        if self.device == "cuda":
            import cupy

            cupy.get_default_memory_pool().free_all_blocks()


def measure(n: int, device: str, thread_counts: list[int], args) -> list[dict]:
    """Rounds and copies at one size, alternating, ``args.repeat`` times; one record per thread count and order."""
    clock = Clock(device)
    t0 = time.perf_counter()
    topo = graph(n)
    m = int(topo.dst.size)
    values = np.random.default_rng(1).standard_normal((n, args.p)) + 3.0
    setup_s = time.perf_counter() - t0
    floor = Floor(m, args.p, device)
    extra = max(args.rounds, -(-int(args.edge_rounds) // m))
    orders = args.orders if device == "cpu" else ["locality"]  # (off the CPU nothing is renumbered)
    keys = [(k, o) for o in orders for k in thread_counts]
    rounds: dict[tuple, list[float]] = {key: [] for key in keys}
    copies: dict[tuple, list[float]] = {key: [] for key in keys}
    cpu_rounds: dict[tuple, list[float]] = {key: [] for key in keys}
    cpu_copies: dict[tuple, list[float]] = {key: [] for key in keys}
    loads = [os.getloadavg()[0]]
    threads_arg = {k: (k if device == "cpu" else "auto") for k in thread_counts}
    # warm-up: step parameters, product matrices and blocks are cached per topology
    for k, o in keys:
        round_time(topo, values, device, threads_arg[k], 2, 1, clock, o)
    with ThreadPoolExecutor(max(thread_counts) - 1 or 1) as pool:
        for rep in range(args.repeat):
            for k, o in keys:
                for series, (wall, cpu) in (((rounds, cpu_rounds), round_time(topo, values, device, threads_arg[k], args.short, extra, clock, o)),
                                            ((copies, cpu_copies), floor.time(k, args.copies, clock, pool))):
                    series[0][k, o].append(wall)
                    series[1][k, o].append(cpu)
            loads.append(os.getloadavg()[0])
            if sys.stdout.isatty():
                left = (time.perf_counter() - t0) / (rep + 1) * (args.repeat - rep - 1)
                print(f"    n = {n:,} on {device}: repetition {rep + 1}/{args.repeat}, about {left:.0f} s left", flush=True)
    floor.free()
    out = []
    for k, o in keys:
        base = statistics.median(rounds[thread_counts[0], o])
        r, c = statistics.median(rounds[k, o]), statistics.median(copies[k, o])
        ratios = [a / b for a, b in zip(rounds[k, o], copies[k, o], strict=True)]
        drawn = rounds.get((k, "drawn")) if o == "locality" else None
        renumbered = device == "cpu" and o == "locality" and n >= engine.LOCALITY_NODES
        out.append({"engine": "vectorised", "device": device, "n": n, "directed_edges": m, "p": args.p, "threads": k,
                    "order": "locality" if renumbered else "drawn",
                    "round_s": r, "copy_s": c, "ratio": statistics.median(ratios), "speedup_vs_first": base / r, "speedup_vs_drawn": statistics.median(drawn) / r if drawn else None,
                    "extra_rounds": extra, "round_s_all": rounds[k, o], "copy_s_all": copies[k, o], "ratios_all": ratios,
                    "round_cpu_s": statistics.median(cpu_rounds[k, o]), "copy_cpu_s": statistics.median(cpu_copies[k, o]),
                    "edge_state_gb": m * args.p * 8 / 1e9, "setup_s": setup_s, "load_average": loads})
    return out


def gpu_available(device: str) -> str | None:
    """None where the device path can run, else why not (one line)."""
    if device != "cuda":
        return None
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:  # no CuPy, no driver or no GPU: nothing to measure
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def print_records(records: list[dict]) -> None:
    rows = [[r["device"], f"{r['n']:,}", f"{r['directed_edges']:,}", str(r["threads"]), r.get("order", "drawn"), f"{r['round_s'] * 1e3:.2f}",
             f"{r['copy_s'] * 1e3:.2f}", f"{r['ratio']:.2f}", f"{r['speedup_vs_first']:.2f}",
             f"{min(r['ratios_all']):.2f}-{max(r['ratios_all']):.2f}", f"{r['round_cpu_s'] * 1e3:.2f}",
             f"{r['copy_cpu_s'] * 1e3:.2f}"] for r in records]
    print_table(["device", "n", "directed edges", "threads", "order", "round ms", "copy ms", "ratio", "speed-up", "ratio range",
                 "round CPU ms", "copy CPU ms"], rows)
    print("round: marginal wall time of one heavy-ball round; copy: one copy of the (m, p) edge state with the same "
          "threads; ratio: median of the repetitions' round/copy; CPU ms: the process's CPU time, all threads.")


def markdown(docs: list[dict], command: str) -> str:
    """The documentation's table from one or more saved documents (``--json``)."""
    def cell(v) -> str:
        return str(v).replace("|", "\\|")

    lines = [f"Written by `{command}` from the measurements below (ratios are medians of alternating "
             "repetitions in one run; a ratio compares a round with a copy measured beside it).", "",
             "| device | n | directed edges | edge state GB | threads | node order | round ms | round CPU ms | copy ms (same threads) | "
             "copy CPU ms | **ratio** | speed-up over 1 thread | ratio range |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for doc in docs:
        for r in doc["records"]:
            where = "CPU" if r["device"] == "cpu" else (doc.get("gpu") or {}).get("model", r["device"])
            lines.append("| " + " | ".join(cell(c) for c in (
                where, f"{r['n']:,}", f"{r['directed_edges']:,}", f"{r['edge_state_gb']:.2f}", r["threads"], r.get("order", "drawn"),
                f"{r['round_s'] * 1e3:.2f}", f"{r['round_cpu_s'] * 1e3:.2f}", f"{r['copy_s'] * 1e3:.2f}", f"{r['copy_cpu_s'] * 1e3:.2f}",
                f"**{r['ratio']:.2f}**",
                f"{r['speedup_vs_first']:.2f}" if r["threads"] != 1 or r["device"] != "cpu" else "1",
                f"{min(r['ratios_all']):.2f}–{max(r['ratios_all']):.2f}")) + " |")
        cpu, gpu = doc["machine"], doc.get("gpu")
        loads = [v for r in doc["records"] if r["device"] == "cpu" for v in r["load_average"]]
        text = (f"* `{doc['command']}`, {doc['date']}: CPU {cpu['model']}, {cpu['usable_cores']} usable cores, NumPy {cpu['numpy']}, "
                f"SciPy {cpu['scipy']}; p = {doc['p']}, {doc['repeat']} repetitions, "
                f"{'/'.join(sorted({str(r['extra_rounds']) for r in doc['records']}, key=int))} extra rounds")
        if loads:
            text += f"; load average {min(loads):.1f}–{max(loads):.1f} while it ran (the machine is shared)"
        if gpu:
            text += (f"; GPU {gpu['model']} ({gpu['memory_gib']:.0f} GiB, compute capability {gpu['compute_capability']}), "
                     f"driver {gpu['driver'] or 'unknown'}, CUDA driver API {gpu['cuda_driver_api']}, runtime "
                     f"{gpu['cuda_runtime']}, CuPy {gpu['cupy']}")
        notes.append(text + ".")
        notes += [f"* {line}" for line in doc.get("skipped", [])]
    return "\n".join([*lines, "", *notes]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Ratios, not absolute times, are the figures to compare: see the module docstring.")
    parser.add_argument("--sizes", type=sizes, default=[10_000, 100_000], help="CPU sizes (nodes), comma-separated; '' for none")
    parser.add_argument("--threads", type=counts, default=None, help="CPU thread counts to compare, the first is the speed-up's reference "
                        "(default: 1 and the usable cores)")
    parser.add_argument("--gpu-sizes", type=sizes, default=[100_000, 1_000_000], help="GPU sizes; '' for none")
    parser.add_argument("--gpu-device", default="cuda", choices=("cuda", "array-api-strict"),
                        help="array-api-strict: the device path on the host (a smoke test, timings mean nothing)")
    parser.add_argument("--orders", type=orders, default=["locality", "drawn"],
                        help="CPU node orders: locality (the engine's renumbering) and/or drawn (the graph's own ids, the reference)")
    parser.add_argument("--p", type=int, default=14, help="statistics per node (columns), default 14")
    parser.add_argument("--short", type=int, default=5, help="rounds of the short run (default 5)")
    parser.add_argument("--rounds", type=int, default=20, help="extra rounds of the long run (default 20)")
    parser.add_argument("--edge-rounds", type=float, default=2e8,
                        help="at least this many edge visits in the extra rounds (default 2e8: 357 rounds at 10^4 nodes)")
    parser.add_argument("--copies", type=int, default=5, help="copies per floor measurement, median (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating repetitions, medians reported (default 3)")
    parser.add_argument("--json", metavar="PATH", help="write every measurement and the machine as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the documentation's table (from the JSON document)")
    parser.add_argument("--render", metavar="JSON", nargs="+", help="only write --markdown from saved documents")
    args = parser.parse_args(argv)
    command = "python sim/bench_rounds.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.render:
        if not args.markdown:
            parser.error("--render needs --markdown PATH")
        docs = []
        for path in args.render:
            try:
                doc = json.loads(Path(path).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                print(f"error: {path}: {exc}", file=sys.stderr)
                return 2
            if doc.get("format") != FORMAT:
                print(f"error: {path}: not a {FORMAT} document (format {doc.get('format')!r})", file=sys.stderr)
                return 2
            docs.append(doc)
        Path(args.markdown).write_text(markdown(docs, command.strip()), encoding="utf-8")
        print(f"wrote {args.markdown}")
        return 0
    if min(args.p, args.short, args.rounds, args.copies, args.repeat) < 1:
        parser.error("--p, --short, --rounds, --copies and --repeat must be at least 1")
    thread_counts = args.threads or sorted({1, usable_cores()})
    doc: dict = {"format": FORMAT, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": command.strip(),
                 "machine": cpu_info(), "p": args.p, "short": args.short, "rounds": args.rounds, "copies": args.copies,
                 "repeat": args.repeat, "edge_rounds": args.edge_rounds, "records": [], "skipped": []}
    print(f"cpu {doc['machine']['model']}, {doc['machine']['usable_cores']} usable cores, load average "
          f"{os.getloadavg()[0]:.2f}; p = {args.p}; threads {thread_counts}", flush=True)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            for n in args.sizes:
                recs = measure(n, "cpu", thread_counts, args)
                doc["records"] += recs
                print_records(recs)
            if args.gpu_sizes:
                why = gpu_available(args.gpu_device)
                if why is not None:
                    line = f"GPU sizes {', '.join(f'{n:,}' for n in args.gpu_sizes)} skipped: {why}"
                    print(line)
                    doc["skipped"].append(line)
                else:
                    if args.gpu_device == "cuda":
                        doc["gpu"] = cuda_info()
                        print(f"gpu {doc['gpu']}", flush=True)
                    for n in args.gpu_sizes:
                        recs = measure(n, args.gpu_device, [1], args)
                        doc["records"] += recs
                        print_records(recs)
    except (P2pemError, MemoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for r in doc["records"]:
        if r["device"] == "cpu" and r["n"] >= 100_000 and r["threads"] == 2 and r["order"] == "locality":
            print(f"goal (issue 34): CPU ratio at {r['n']:,} with 2 threads {r['ratio']:.2f} (<= {GOAL_CPU_RATIO})")
        if r["device"] == "cuda" and r["n"] >= 1_000_000:
            print(f"goal (issue 34): GPU ratio at {r['n']:,} {r['ratio']:.2f} (<= {GOAL_GPU_RATIO})")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(markdown([doc], command.strip()), encoding="utf-8")
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
