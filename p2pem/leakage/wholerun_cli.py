"""``p2pem leakage SCENARIO --whole-run --out DIR``: the whole-run privacy analysis.

Called from :mod:`p2pem.leakage.cli`; like it, this module is allowed to print.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

import numpy as np

from p2pem.errors import ConfigError


def add_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--whole-run`` to the ``leakage`` command."""
    parser.add_argument(
        "--whole-run",
        action="store_true",
        help="analyse a complete EM run on the scenario's own data instead: every aggregation's view reduced "
        "exactly to the group sums it discloses, attacked by reconstructing the honest rows; settings from the "
        "[leakage.whole_run] table; writes OUT/whole_run.json and OUT/whole_run.png",
    )


def _progress(enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm  # here: start-up time (only a terminal run draws bars)

    bars: dict[str, tqdm] = {}

    def step(label: str, done: int, total: int) -> None:
        bar = bars.get(label)
        if bar is None:
            for old in bars.values():
                old.close()
            bars.clear()
            bar = bars[label] = tqdm(total=total, desc=f"{label:<28}", file=sys.stderr, leave=False, dynamic_ncols=True, disable=None)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return step


def cmd_whole_run(args: argparse.Namespace) -> int:
    # here: start-up time (a node process and `p2pem --help` load only what their command needs)
    from p2pem.leakage.theory import topology_report
    from p2pem.leakage.wholerun_analysis import analyse_whole_run, parse_whole_run
    from p2pem.leakage.wholerun_plot import whole_run_figure
    from p2pem.parallel import from_args
    from p2pem.builders import build_graph
    from p2pem.runner import atomic_output, write_json
    from p2pem.scenario import load_scenario

    if args.runs is not None or args.rounds is not None or args.old_rounds is not None:
        raise ConfigError("--runs and --rounds apply to the Monte Carlo analysis, not to --whole-run")
    scenario = load_scenario(args.scenario)
    config = parse_whole_run(scenario)
    graph = build_graph(scenario)
    print(f"scenario {scenario.name}: whole-run analysis, {graph.number_of_nodes()} nodes, adversaries {', '.join(config.adversaries)}")
    for s in config.corrupt_sets:
        rep = topology_report(graph, s)
        print(f"  corrupt {{{', '.join(map(str, s))}}}: {len(rep.components)} honest component(s) of sizes {[len(c) for c in rep.components]}")
        for w in rep.warnings():
            print(f"  warning: {w}")
    t0 = time.perf_counter()
    progress = _progress(not args.quiet and sys.stderr.isatty())
    with atomic_output(args.out) as tmp:
        report = analyse_whole_run(scenario, config, progress=progress, workers=from_args(args))
        write_json(tmp / "whole_run.json", report.to_json())
        if report.records:
            whole_run_figure(report.records, tmp / "whole_run.png", title=f"{scenario.name}: attack on the whole run", tolerance=config.tolerance)
    worst = max(d["groups"][k]["max_reduction_error"] for d in report.disclosures for k in range(len(d["groups"])))
    for p in report.protocols:
        sched = p.get("schedule")
        if sched is not None:
            stop = f"public stop round {sched['stop_round']}" if sched["stop_round"] is not None else "adaptive stop (the counters decide)"
            print(f"{p['protocol']}: {sched['schedule']} schedule, {stop}; {p['aggregations']} aggregations in the whole run")
    if report.attack_skipped is not None:
        for d in report.disclosures:
            largest = max((g["rows"] for g in d["groups"]), default=0)
            print(f"{d['protocol']:<12} {d['adversary']:<19} corrupt {len(d['corrupt'])}: {len(d['groups'])} disclosed group sums, "
                  f"smallest {min((len(g['nodes']) for g in d['groups']), default=0)} node(s), largest {largest} rows")
        print(f"attack: not run ({report.family['name']} family): {report.attack_skipped}")
        print(f"exact reduction: the group sums computed from the views match the inputs' to {worst:.1e} (relative)")
        print(f"wrote {args.out}/whole_run.json in {time.perf_counter() - t0:.1f} s")
        return 0
    print(f"attack: nonlinear least squares on every disclosed group sum of aggregations 0..T given the public models; "
          f"a row is recovered within {config.tolerance:g} (data units)")
    groups = defaultdict(list)
    for r in report.records:
        groups[(r.protocol, r.adversary, r.corrupt, r.server_corrupt)].append(r)
    header = f"{'protocol':<12} {'adversary':<19} {'corrupt':>8} {'largest group':>13} {'rows recovered (T=' + str(report.records[0].iterations_seen[-1]) + ')':>24} {'median error':>12} {'baseline':>9}"
    print(header)
    print("-" * len(header))
    for (proto, adv, corrupt, server), recs in groups.items():
        rows = np.array([r.rows for r in recs], dtype=float)
        frac = float(rows @ np.array([r.rows_recovered[-1] for r in recs]) / rows.sum())
        who = f"{len(corrupt)}{'+S' if server else ''}"
        print(f"{proto:<12} {adv:<19} {who:>8} {max(r.group_rows for r in recs):>13} {frac:>24.2f} "
              f"{np.median([r.reconstruction_error[-1] for r in recs]):>12.2g} {np.median([r.baseline_error for r in recs]):>9.2g}")
    print(f"exact reduction: the group sums computed from the views match the inputs' to {worst:.1e} (relative)")
    print(f"wrote {args.out}/whole_run.json, {args.out}/whole_run.png in {time.perf_counter() - t0:.1f} s")
    return 0
