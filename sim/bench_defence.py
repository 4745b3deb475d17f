"""Which protocol for which threat: the whole-run defence table and the privacy frontier.

Part 1, the defence (``scenarios/parkinsons_defence.toml``: Parkinsons, 80 nodes, 20 EM
iterations, three corrupt sets leaving honest components of 2, 3, 8 nodes and large ones):
``p2pem leakage --whole-run``'s analysis for pdmm-sp without noise and for dp-distributed over
pdmm-sp and over secure-sum at each epsilon of ``--epsilons`` (shares tolerating the default
40 colluders, more than any corrupt set).  Per protocol, epsilon and disclosed group size: the
fraction of the group's rows the attack recovers (within the scenario's tolerance, 0.1
standardised units) after T EM iterations seen, the RMS error against the public-model
baseline, and the epsilon that protects the group's rows when its sum is disclosed (its h
noise shares of the n - t that carry the calibrated noise: p2pem.dp.guarantees).

Part 2, the frontier (``scenarios/tradeoff_parkinsons.toml`` and ``tradeoff_ais.toml``: 20
nodes, 20 EM iterations, the trade-off sweep's held-out split and public preprocessing):
every protocol (pdmm-sp, secure-sum, federated, dp-central, dp-distributed over pdmm-sp and
secure-sum) at every epsilon, run once per seed with the whole-run recorder: accuracy is the
held-out log-likelihood of the final model, privacy the fraction of honest rows the attack
recovers (within 0.1) against honest-but-curious nodes that cut off the graph's most exposed
pair of nodes (the smallest boundary of two adjacent nodes), with the server corrupt for the
protocols that have one.  All runs start from the network initialisation (aggregation 0).
Run s of a frontier point uses the protocol seed ``montecarlo_child(seed, 7, s)`` and attacks
group k with ``montecarlo_child(seed, 8, s, k)`` (:mod:`p2pem.streams`).

Writes ``--json`` (format ``p2pem-privacy-frontier``, version 1), ``--figure`` (the frontier)
and ``--markdown`` (the tables the docs page "Which protocol for which threat" includes).

    .venv/bin/python sim/bench_defence.py --json docs/privacy_frontier.json \\
        --figure docs/privacy_frontier.png --markdown docs/generated/privacy_frontier_tables.md

Not a test: the attack is a local search with a fixed budget (p2pem.leakage.wholerun_analysis
BUDGETS), so "not recovered" means not by this attack.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from types import MappingProxyType

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FORMAT, VERSION = "p2pem-privacy-frontier", 1
EPSILONS = (0.1, 1.0, 10.0, 100.0)
SIZE_CLASSES = ((1, 2, "1-2"), (3, 3, "3"), (4, 8, "4-8"), (9, 10**9, ">= 9"))
TOLERANCE = 0.1
FRONTIER_PROTOCOLS = (
    ("pdmm-sp", {}),
    ("secure-sum", {}),
    ("federated", {}),
    ("dp-central", {}),
    ("dp-distributed", {"aggregation": "pdmm-sp"}),
    ("dp-distributed", {"aggregation": "secure-sum"}),
)


def _protocol(name: str, params: dict):
    from p2pem.scenario import ProtocolConfig

    return ProtocolConfig(name, MappingProxyType(dict(params)))


def _size_class(h: int) -> str:
    return next(label for lo, hi, label in SIZE_CLASSES if lo <= h <= hi)


# ------------------------------------------------------------------------------ part 1


def defence(path: Path, epsilons: tuple[float, ...]) -> dict:
    from p2pem.dp.guarantees import epsilon_left
    from p2pem.leakage.wholerun_analysis import analyse_whole_run, parse_whole_run
    from p2pem.scenario import load_scenario

    scenario = load_scenario(path)
    config = parse_whole_run(scenario)
    base = {p.name + str(dict(p.params).get("aggregation", "")): p for p in scenario.protocols}
    plain, dp_pdmm, dp_ring = base["pdmm-sp"], base["dp-distributedpdmm-sp"], base["dp-distributedsecure-sum"]
    rows: list[dict] = []
    t0 = time.perf_counter()
    runs = [(None, (plain,))] + [(eps, tuple(_protocol(p.name, {**p.params, "epsilon": eps}) for p in (dp_pdmm, dp_ring))) for eps in epsilons]
    for eps, protos in runs:
        report = analyse_whole_run(dataclasses.replace(scenario, protocols=protos), config)
        n = report.n_nodes
        groups: dict[tuple, list] = defaultdict(list)
        for r in report.records:
            groups[(r.protocol, r.corrupt, r.group)].append(r)
        for (proto, corrupt, group), recs in groups.items():
            weights = np.array([r.rows for r in recs], dtype=float)
            h = len(group)
            eps_group = None
            if eps is not None:
                params = next(p for p in report.protocols if p["protocol"] == proto)["protocol_params"]
                t = n // 2 if params.get("tolerate") is None else params["tolerate"]
                eps_group = _group_epsilon(scenario, proto, eps, h, n - t, epsilon_left)
            rows.append({
                "protocol": proto,
                "epsilon": eps,
                "corrupt": len(corrupt),
                "group_size": h,
                "size_class": _size_class(h),
                "group_rows": recs[0].group_rows,
                "epsilon_group": eps_group,
                "iterations_seen": list(recs[0].iterations_seen),
                "rows_recovered": (weights @ np.array([r.rows_recovered for r in recs]) / weights.sum()).tolist(),
                "rms_error": float(np.sqrt(weights @ np.array([r.reconstruction_error[-1] ** 2 for r in recs]) / weights.sum())),
                "baseline_error": float(np.sqrt(weights @ np.array([r.baseline_error**2 for r in recs]) / weights.sum())),
                "baseline_recovered": float(weights @ np.array([r.baseline_recovered for r in recs]) / weights.sum()),
            })
        print(f"  defence: {'no noise' if eps is None else f'epsilon {eps:g}'} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"scenario": str(path.resolve().relative_to(ROOT)), "tolerance": config.tolerance, "epsilons": list(epsilons), "rows": rows,
            "wall_s": time.perf_counter() - t0}


_PLANS: dict = {}


def _group_epsilon(scenario, label, eps, h, shares, epsilon_left) -> float | None:
    """Epsilon (under the run's accountant) for the rows of a disclosed group of h honest nodes."""
    from p2pem.dp.protocols import DPProtocol
    from p2pem.builders import build_protocols, em_settings, load_data

    key = (label, eps)
    if key not in _PLANS:
        spec = next(s for s in build_protocols(scenario) if getattr(s, "label", s.name) == label)
        spec = dataclasses.replace(spec, epsilon=eps)
        assert isinstance(spec, DPProtocol)
        bound, _, _ = spec.bind(em_settings(scenario), load_data(scenario))
        _PLANS[key] = bound
    bound = _PLANS[key]
    plan = bound.plan
    return epsilon_left(bound.mechanism, float(bound.delta), plan.releases, plan.scales, shares=shares, unknown=h)[bound.accountant]


# ------------------------------------------------------------------------------ part 2


def exposed_pair(graph) -> tuple[tuple[int, int], tuple[int, ...]]:
    """The adjacent pair of nodes with the fewest outside neighbours, and those neighbours."""
    best = None
    for a, b in graph.edges():
        boundary = tuple(sorted((set(graph[a]) | set(graph[b])) - {a, b}))
        if best is None or (len(boundary), (a, b)) < (len(best[1]), best[0]):
            best = ((a, b), boundary)
    assert best is not None
    return best


def frontier(path: Path, epsilons: tuple[float, ...], seeds: int) -> dict:
    from p2pem.dp.tradeoff import build_workload
    from p2pem.gmm import mean_loglik
    from p2pem.leakage.wholerun import record_whole_run
    from p2pem.leakage.wholerun_analysis import attack_group
    from p2pem.leakage.views import Adversary
    from p2pem.messages import SERVER
    from p2pem.registry import make_protocol
    from p2pem.scenario import load_scenario
    from p2pem.streams import montecarlo_child

    scenario = load_scenario(path)
    work = build_workload(scenario)
    settings = work.settings_for(True)  # the network initialisation for every protocol
    bound = float(next(p for p in scenario.protocols if p.name.startswith("dp-")).params["bound"])
    pair, corrupt = exposed_pair(work.graph)
    honest = [i for i in range(len(work.parts)) if i not in corrupt]
    seen = (1, 5, settings.max_iter)
    points = []
    t0 = time.perf_counter()
    for name, extra in FRONTIER_PROTOCOLS:
        private = name.startswith("dp-")
        for eps in epsilons if private else (None,):
            params = dict(extra, **({"epsilon": eps, "bound": bound} if private else {}))
            spec = make_protocol(name, params)
            adversary = Adversary("honest-but-curious", frozenset(corrupt) | ({SERVER} if name in ("federated", "dp-central") else set()))
            lls, recovered, errors = [], [], []
            for s in range(seeds):
                seed = montecarlo_child(scenario.seed, 7, s)
                (view,) = record_whole_run(work.parts, work.graph, spec, settings, [adversary], seed=seed)
                assert view.final is not None
                lls.append(mean_loglik(work.X_test, view.final))
                dists = []
                for k, group in enumerate(view.groups):
                    rows = np.vstack([work.parts[i] for i in group])
                    if view.data_bound is not None:
                        rows = np.clip(rows, -view.data_bound, view.data_bound)
                    rng = np.random.default_rng(montecarlo_child(scenario.seed, 8, s, k))
                    dists.append(attack_group(view, k, rows, tuple(t for t in seen if t <= view.iterations[-1]), rng=rng, starts=3)[-1])
                d = np.concatenate(dists)
                recovered.append(float(np.mean(d <= TOLERANCE)))
                errors.append(float(np.sqrt(np.mean(d * d))))
            points.append({
                "protocol": getattr(spec, "label", name),
                "epsilon": eps,
                "heldout_loglik": float(np.median(lls)),
                "attack_success": float(np.median(recovered)),
                "rms_error": float(np.median(errors)),
                "seeds": seeds,
            })
            print(f"  frontier {scenario.name}: {points[-1]['protocol']} {'' if eps is None else eps} "
                  f"ll {points[-1]['heldout_loglik']:.3g} success {points[-1]['attack_success']:.2f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"scenario": str(path.resolve().relative_to(ROOT)), "n_nodes": len(work.parts), "honest_rows": int(sum(len(work.parts[i]) for i in honest)),
            "corrupt": list(corrupt), "exposed_pair": list(pair), "tolerance": TOLERANCE, "iterations_seen": list(seen),
            "points": points, "wall_s": time.perf_counter() - t0}


def frontier_figure(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = doc["frontier"]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.8), squeeze=False)
    colours: dict[str, str] = {}
    palette = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3)
    for ax, (name, panel) in zip(axes[0], panels.items(), strict=True):
        by_proto: dict[str, list] = defaultdict(list)
        for p in panel["points"]:
            by_proto[p["protocol"]].append(p)
        for proto, pts in by_proto.items():
            colour = colours.setdefault(proto, next(palette))
            pts = sorted(pts, key=lambda p: p["epsilon"] or 0)
            x = [p["attack_success"] for p in pts]
            y = [p["heldout_loglik"] for p in pts]
            marker = "o" if pts[0]["epsilon"] is not None else {"pdmm-sp": "s", "secure-sum": "D", "federated": "^"}.get(proto, "s")
            ax.plot(x, y, marker=marker, ms=9 if marker == "s" else 6, color=colour, label=proto, ls="-" if len(pts) > 1 else "none",
                    alpha=0.8, mfc="none" if marker == "s" else colour)
            for p in pts:
                if p["epsilon"] is not None:
                    ax.annotate(f"{p['epsilon']:g}", (p["attack_success"], p["heldout_loglik"]), fontsize=7, xytext=(4, 3),
                                textcoords="offset points", color=colour)
        ax.set_yscale("symlog", linthresh=10.0)
        ax.set_xlim(-0.05, 1.05)
        ax.set_xlabel(f"attack success: honest rows recovered within {panel['tolerance']:g} (lower is more private)")
        ax.set_ylabel("held-out log-likelihood per row (higher is more accurate)")
        ax.set_title(f"{name}: {panel['n_nodes']} nodes, corrupt {len(panel['corrupt'])} around nodes {panel['exposed_pair']}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7, loc="center")  # the middle of the first panel is empty
    fig.suptitle("The privacy frontier: every protocol at every epsilon (labels), whole run, honest-but-curious nodes "
                 "(and the server where there is one)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------ output


def _eps(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def markdown(doc: dict) -> str:
    d = doc["defence"]
    seen = d["rows"][0]["iterations_seen"]
    out = [f"Defence on `{d['scenario']}` (rows recovered within {d['tolerance']:g}, after T = {' / '.join(map(str, seen))} EM iterations seen; "
           "RMS error at the last T against the public-model baseline; epsilon for the group: what protects its rows once its sum is disclosed):", ""]
    out.append("| protocol | epsilon | group (nodes) | groups (rows) | epsilon for the group | rows recovered | RMS error vs baseline |")
    out.append("|---|---|---|---|---|---|---|")
    merged: dict[tuple, list[dict]] = defaultdict(list)  # groups of one size, pooled by rows
    for r in d["rows"]:
        if r["group_size"] in (1, 2, 3, 8) or r["group_size"] >= 30:  # single nodes, the sizes the issue names; the JSON has all
            merged[(r["protocol"] != "pdmm-sp", r["protocol"], r["epsilon"] or 0, r["group_size"])].append(r)
    for key in sorted(merged):
        rs = merged[key]
        w = np.array([r["group_rows"] for r in rs], dtype=float)
        rec = " / ".join(f"{v:.2f}" for v in w @ np.array([r["rows_recovered"] for r in rs]) / w.sum())
        rms = float(np.sqrt(w @ np.array([r["rms_error"] ** 2 for r in rs]) / w.sum()))
        base = float(np.sqrt(w @ np.array([r["baseline_error"] ** 2 for r in rs]) / w.sum()))
        r = rs[0]
        groups = f"{len(rs)} ({int(w.sum())})" if len(rs) > 1 else f"1 ({int(w.sum())})"
        out.append(f"| {r['protocol']} | {_eps(r['epsilon'])} | {r['group_size']} | {groups} | {_eps(r['epsilon_group'])} | {rec} | "
                   f"{rms:.2g} vs {base:.2g} |")
    for name, panel in doc["frontier"].items():
        out += ["", f"Frontier, {name} (`{panel['scenario']}`, corrupt nodes {panel['corrupt']}, server corrupt where there is one; "
                f"median over {panel['points'][0]['seeds']} seeds):", "",
                "| protocol | epsilon | held-out log-likelihood | attack success | RMS error |", "|---|---|---|---|---|"]
        for p in panel["points"]:
            out.append(f"| {p['protocol']} | {_eps(p['epsilon'])} | {p['heldout_loglik']:.4g} | {p['attack_success']:.2f} | {p['rms_error']:.2g} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--defence", default=str(ROOT / "scenarios" / "parkinsons_defence.toml"))
    ap.add_argument("--frontier", nargs="*", default=[str(ROOT / "scenarios" / "tradeoff_parkinsons.toml"), str(ROOT / "scenarios" / "tradeoff_ais.toml")])
    ap.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    ap.add_argument("--seeds", type=int, default=3, help="frontier runs per (protocol, epsilon); medians are reported")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--figure", metavar="PATH")
    ap.add_argument("--markdown", metavar="PATH")
    ap.add_argument("--from-json", metavar="PATH", help="write the tables and the figure from an earlier --json instead of running")
    args = ap.parse_args(argv)

    if args.from_json:
        doc = json.loads(Path(args.from_json).read_text())
        if (doc.get("format"), doc.get("version")) != (FORMAT, VERSION):
            raise SystemExit(f"{args.from_json}: not a {FORMAT} version {VERSION} file")
    else:
        from threadpoolctl import threadpool_limits

        t0 = time.perf_counter()
        print(f"cpus {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f}")
        with threadpool_limits(limits=1):
            doc = {"format": FORMAT, "version": VERSION, "defence": defence(Path(args.defence), tuple(args.epsilons)), "frontier": {}}
            for f in args.frontier:
                doc["frontier"][Path(f).stem.removeprefix("tradeoff_")] = frontier(Path(f), tuple(args.epsilons), args.seeds)
        doc["wall_s"] = time.perf_counter() - t0
    text = markdown(doc)
    print(text)
    print(f"wall {doc['wall_s']:.0f} s")
    if args.json and not args.from_json:
        Path(args.json).write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text("<!-- written by sim/bench_defence.py --markdown; do not edit -->\n" + text)
    if args.figure:
        frontier_figure(doc, Path(args.figure))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
