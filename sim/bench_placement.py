"""Epsilon against the worst placement of t colluders: what ``dp-distributed`` reports, and what calibrating for it costs.

For each case (a ring of n nodes for secure-sum; a random geometric graph for pdmm-sp, the
scenario graphs' generator; and ``scenarios/parkinsons_defence.toml``'s 80-node graph), one
EM iteration from a public initial model is bound and placed
(:meth:`p2pem.dp.protocols.DPDistributed.placed`), and the script prints, at epsilon = 1,
delta = 1e-5 and the RDP accountant (Gaussian), for the default ``tolerate`` t = floor(n / 2) and some
smaller ones:

* h, the smallest honest group any t colluders can cut off, with the time the search took;
* the epsilon the run reports against t colluders placed favourably (``colluders``) and
  placed worst (``colluders_worst_placement``), under the default calibration;
* with ``calibrate = "worst-placement"``: the worst-placement epsilon (the configured one),
  the outsider's, and the noise variance of the released sums relative to the default
  calibration's (n - t) / h.

Rows with a small t show groups of more than one node (and the search time to find them).
The issue's figure (20 nodes, t = 10, Gaussian: 3.57 where the run said 1.0) is the ring
case at n = 20.  Writes ``--json`` (format ``p2pem-bench-placement``, version 1).

    .venv/bin/python sim/bench_placement.py --json out/bench_placement.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FORMAT, VERSION = "p2pem-bench-placement", 1


def case(name: str, topology, aggregation: str, tolerate: int | None = None) -> dict:
    from p2pem.em import EMSettings
    from p2pem.gmm import GMMParams
    from p2pem.registry import make_protocol

    n = topology.n_nodes
    parts = [np.array([[-0.5], [0.25]]) for _ in range(n)]
    init = GMMParams(np.array([1.0]), np.array([[0.0]]), np.array([[[1.0]]]))
    settings = EMSettings(1, max_iter=1, tol=0.0, init=init)
    out: dict = {"case": name, "aggregation": aggregation, "nodes": n}
    for calibrate in ("tolerate", "worst-placement"):
        params = {"aggregation": aggregation, "epsilon": 1.0, "bound": 1.0, "mechanism": "gaussian", "calibrate": calibrate}
        spec = make_protocol("dp-distributed", params if tolerate is None else {**params, "tolerate": tolerate})
        bound = spec.bind(settings, parts, seed=0)[0]
        t0 = time.perf_counter()
        placed = bound.placed(topology)
        search_s = time.perf_counter() - t0
        privacy = placed.privacy()
        worst = privacy["worst_placement"]
        out["colluders"] = privacy["colluders"]
        out["smallest_honest_group"] = worst["smallest_honest_group"]
        out["exact"] = worst["exact"]
        out[calibrate] = {
            "shares_per_draw": worst["shares_per_draw"],
            "epsilon_outsider": privacy["epsilon"]["outsider"],
            "epsilon_colluders": privacy["epsilon"]["colluders"],
            "epsilon_colluders_worst_placement": privacy["epsilon"]["colluders_worst_placement"],
            "search_s": search_s,
        }
    # variance of the released sums: n shares of scale^2 / shares_per_draw each
    out["variance_ratio"] = out["tolerate"]["shares_per_draw"] / out["worst-placement"]["shares_per_draw"]
    return out


def cases() -> list[tuple[str, object, str, int | None]]:
    import networkx as nx

    from p2pem.builders import build_graph
    from p2pem.graphs import geometric_graph
    from p2pem.protocols import Topology
    from p2pem.scenario import load_scenario

    out: list[tuple[str, object, str, int | None]] = []
    for n in (6, 20, 100):
        out.append((f"ring of {n}", Topology.from_graph(nx.complete_graph(n), ring=list(range(n))), "secure-sum", None))
    out.append(("ring of 20, t = 1", Topology.from_graph(nx.complete_graph(20), ring=list(range(20))), "secure-sum", 1))
    for n in (20, 100):
        g = geometric_graph(n, rng=np.random.default_rng(1))
        out.append((f"geometric graph of {n}", Topology.from_graph(g), "pdmm-sp", None))
        low = min(d for _, d in g.degree)  # fewer colluders than the smallest degree: no node alone
        out.append((f"geometric graph of {n}, t = {low - 1}", Topology.from_graph(g), "pdmm-sp", low - 1))
    g = build_graph(load_scenario(ROOT / "scenarios" / "parkinsons_defence.toml"))
    out.append(("parkinsons_defence graph (80)", Topology.from_graph(g), "pdmm-sp", None))
    out.append(("parkinsons_defence graph (80), t = 3", Topology.from_graph(g), "pdmm-sp", 3))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here")
    args = parser.parse_args()
    rows = [case(name, topo, agg, t) for name, topo, agg, t in cases()]
    print(f"{'case':<38} {'agg':<10} {'t':>3} {'h':>4} {'eps t':>7} {'eps worst':>9} {'search s':>9} | "
          f"{'worst-calibrated: eps worst':>27} {'outsider':>8} {'var x':>6}")
    for r in rows:
        tol, wp = r["tolerate"], r["worst-placement"]

        def show(v):
            return "none" if v is None else f"{v:.3g}"

        h = f"{r['smallest_honest_group']}{'' if r['exact'] else '+'}"
        print(f"{r['case']:<38} {r['aggregation']:<10} {r['colluders']:>3} {h:>4} "
              f"{show(tol['epsilon_colluders']):>7} {show(tol['epsilon_colluders_worst_placement']):>9} {tol['search_s']:>9.4f} | "
              f"{show(wp['epsilon_colluders_worst_placement']):>27} {show(wp['epsilon_outsider']):>8} {r['variance_ratio']:>6.3g}")
    print("h+: the search stopped at its budget; no smaller group exists, the epsilon is an upper bound")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"format": FORMAT, "version": VERSION, "epsilon": 1.0, "delta": 1e-5, "accountant": "rdp",
                                         "mechanism": "gaussian", "cases": rows}, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
