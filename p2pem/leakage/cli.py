"""``p2pem leakage SCENARIO --out DIR``: measure what adversaries learn, write JSON and figures.

:func:`add_commands` is called by :mod:`p2pem.cli`; like it, this module is allowed to print.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time

from p2pem.errors import ConfigError


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the ``leakage`` command."""
    p = sub.add_parser(
        "leakage",
        help="measure what honest-but-curious and eavesdropping adversaries learn (mutual information)",
        description="Run one aggregation of every network protocol of the scenario over many Monte Carlo runs "
        "(private data X_i ~ N(0, 1)), build each adversary's view from the recorded messages and estimate, per "
        "iteration, the mutual information between an honest node's data and the view (KSG, bits, with a confidence "
        "interval), its normalised value, the exact value from the view's linear structure and the protocol's closed "
        "form.  Writes OUT/leakage.json (a list of runs), OUT/summary.json, OUT/leakage.png (cf. Fig. 3 of the paper) "
        "and, with leakage.sweep_std, OUT/sweep.png.  Settings come from the scenario's [leakage] table.",
    )
    p.add_argument("scenario", help="scenario TOML file with a [leakage] table, e.g. scenarios/fig1.toml")
    p.add_argument("--out", required=True, help="output folder (created; files are written atomically)")
    p.add_argument("--runs", type=int, default=None, help="Monte Carlo runs (overrides leakage.runs)")
    p.add_argument("--iterations", type=int, default=None, help="iterations analysed (overrides leakage.iterations)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    from p2pem.leakage.wholerun_cli import add_option

    add_option(p)
    p.set_defaults(func=cmd_leakage)


def _progress(enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    def factory(label: str, total: int):
        bar = tqdm(total=total, desc=f"{label:<40}", unit="estimate", file=sys.stderr, leave=False, dynamic_ncols=True)

        def step() -> None:
            bar.update(1)
            if bar.n >= total:
                bar.close()

        return step

    return factory


def _bits(v: float | None) -> str:
    if v is None:
        return "-"
    return "inf" if math.isinf(v) else f"{v:.3f}"


def cmd_leakage(args: argparse.Namespace) -> int:
    if getattr(args, "whole_run", False):
        from p2pem.leakage.wholerun_cli import cmd_whole_run

        return cmd_whole_run(args)
    from p2pem.leakage.analysis import analyse_scenario
    from p2pem.leakage.config import parse_leakage
    from p2pem.leakage.plots import leakage_figure, sweep_figure
    from p2pem.runner import atomic_output, write_json
    from p2pem.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    config = parse_leakage(scenario)
    if args.runs is not None:
        if args.runs < 200 or args.runs // config.n_batches <= 2 * config.k:
            raise ConfigError(f"--runs {args.runs} is too few (at least 200, and {config.n_batches} batches of more than {2 * config.k})")
        config = dataclasses.replace(config, runs=args.runs)
    if args.iterations is not None:
        if args.iterations < 1:
            raise ConfigError(f"--iterations must be >= 1, got {args.iterations}")
        config = dataclasses.replace(config, iterations=args.iterations)

    lab = config.label
    n_nodes = scenario.graph.n_nodes
    print(f"scenario {scenario.name}: {n_nodes} nodes; {config.runs} Monte Carlo runs, {config.iterations} iterations, KSG k={config.k}")
    if config.node_labels:
        print("  node labels: " + ", ".join(f"{lab(i)} = id {i}" for i in range(n_nodes)))
    from p2pem.leakage.analysis import make_adversary
    from p2pem.leakage.theory import topology_report
    from p2pem.runner import build_graph

    graph = build_graph(scenario)
    has_federated = any(p.name == "federated" for p in scenario.protocols)
    for kind in config.adversaries:
        adv = make_adversary(kind, config)
        rep = topology_report(graph, adv.corrupt_nodes)
        if kind == "eavesdropper":
            who = "reads every plaintext link"
        else:
            who = "corrupt {" + ", ".join(lab(c) for c in adv.corrupt_nodes) + "}"
            if config.server_corrupt and has_federated:
                who += " and the federated server"
            if kind == "both":
                who += ", reading every plaintext link"
        print(f"  {kind}: {who}; {rep.summary(lab)}")
        for w in rep.warnings(lab):
            print(f"  warning: {w}")

    t0 = time.perf_counter()
    with atomic_output(args.out) as tmp:
        report = analyse_scenario(scenario, config=config, progress=_progress(not args.quiet))
        write_json(tmp / "leakage.json", [r.to_json() for r in report.runs])  # type: ignore[arg-type]
        write_json(tmp / "summary.json", report.summary_json())
        title = f"{scenario.name}: {config.runs} runs"
        if report.iteration_runs:
            leakage_figure(report.iteration_runs, tmp / "leakage.png", title=title, ceiling_bits=report.ceiling_bits)
        if report.sweep_runs:
            sweep_figure(report.sweep_runs, tmp / "sweep.png", title=title, ceiling_bits=report.ceiling_bits)

    print(f"estimator: KSG on the adversary's cross-fitted linear estimate (a lower bound); full-disclosure ceiling "
          f"{report.ceiling_bits:.3f} bits at {config.runs} runs (NMI = estimate / ceiling)")
    if report.iteration_runs:
        its = report.iteration_runs[0].iterations
        print(f"leakage after iteration {its[-1]} (exact: from the view's linear structure; closed form: by design)")
        header = f"{'protocol':<42} {'adversary':<18} {'node':>4} {'KSG bits':>9} {'95% CI':>17} {'NMI':>6} {'exact':>7} {'closed form':>11}  "
        print(header)
        print("-" * (len(header) + 20))
        for r in report.iteration_runs:
            lo, hi = r.mi_ci[-1]
            ex = None if r.exact_bits is None else r.exact_bits[-1]
            print(f"{r.protocol:<42} {r.adversary:<18} {r.node_label:>4} {r.mi_bits[-1]:>9.3f} {f'[{lo:.3f}, {hi:.3f}]':>17} "
                  f"{r.nmi[-1]:>6.3f} {_bits(ex):>7} {_bits(r.bound_bits):>11}  {r.bound}")
    if report.sweep_runs:
        print(f"perturbation sweep (leakage after iteration {report.sweep_runs[0].iterations[-1]}; EM accuracy vs centralized)")
        header = f"{'std':>9} {'adversary':<18} {'node':>4} {'KSG bits':>9} {'exact':>7} {'closed form':>11} {'EM rel err':>11} {'unconverged':>11}"
        print(header)
        print("-" * len(header))
        for r in sorted(report.sweep_runs, key=lambda r: (r.protocol, r.adversary, r.node, r.perturbation_std)):
            ex = None if r.exact_bits is None else r.exact_bits[-1]
            print(f"{r.perturbation_std:>9.3g} {r.adversary:<18} {r.node_label:>4} {r.mi_bits[-1]:>9.3f} {_bits(ex):>7} "
                  f"{_bits(r.bound_bits):>11} {r.em_rel_err:>11.2e} {r.em_unconverged:>11}")
    files = ["leakage.json", "summary.json"] + (["leakage.png"] if report.iteration_runs else []) + (["sweep.png"] if report.sweep_runs else [])
    print(f"wrote {', '.join(f'{args.out}/{f}' for f in files)} in {time.perf_counter() - t0:.1f} s")
    return 0
