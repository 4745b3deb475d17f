"""``p2pem leakage SCENARIO --out DIR``: measure what adversaries learn, write JSON and figures.

:func:`add_commands` is called by :mod:`p2pem.cli`; like it, this module is allowed to print.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from typing import TYPE_CHECKING

from p2pem.errors import ConfigError
from p2pem.parallel import add_options, from_args

if TYPE_CHECKING:
    from p2pem.leakage.plan import LeakagePlan
    from p2pem.leakage.report import LeakageReport


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the ``leakage`` command."""
    p = sub.add_parser(
        "leakage",
        help="measure what honest-but-curious and eavesdropping adversaries learn (mutual information)",
        description="""Run one aggregation of every network protocol of the scenario over many Monte Carlo runs,
build each adversary's view from the recorded messages and estimate, per round, the mutual
information between an honest node's input and the view (KSG, bits, with a confidence interval
that includes its estimated bias), its normalised value, the exact value from the view's linear
structure and the floor (what any exact protocol discloses by design).

Inputs: by default each node aggregates 1/K x the sum of one feature over as many of the
scenario's own rows as it holds, redrawn from all the rows in every run ([leakage] inputs =
"gaussian": the paper's model X_i ~ N(0, 1)); the first lines say which.  centralized, the DP
protocols and asynchronous pdmm-sp are skipped, each with its reason.  With more than 6 honest
nodes and no [leakage] targets, the most exposed ones and the farthest from the corrupt nodes are
measured (--targets all: every one).  Before any estimate it prints what each protocol discloses
by topology and, on a terminal, the predicted run time.

pdmm-sp runs the schedule a real run uses, to the public round a real run stops at (or
leakage.rounds / --rounds of them; with an adaptive stop, 20 rounds with tol = 0); every output
names the schedule and stop round analysed.  This is ONE aggregation: a whole EM run aggregates
once per iteration and discloses far more; measure it with --whole-run.

Writes OUT/leakage.json ({format, version, runs}), OUT/summary.json (inputs, targets, skipped
protocols, the estimate against the wall time), OUT/leakage.png (cf. Fig. 3 of the paper: a grid
of at most a screenful) and, with leakage.sweep_std, OUT/sweep.png.  Settings come from the
scenario's [leakage] table (docs: Scenarios).""",
    )
    p.add_argument("scenario", help="scenario TOML file with a [leakage] table, e.g. scenarios/fig1.toml")
    p.add_argument("--out", required=True, help="output folder (created; files are written atomically)")
    p.add_argument("--runs", type=int, default=None, help="Monte Carlo runs (overrides leakage.runs)")
    p.add_argument("--rounds", type=int, default=None,
                   help="pdmm-sp rounds of the aggregation analysed (overrides leakage.rounds; default: to the round a real run stops at)")
    p.add_argument("--iterations", type=int, default=None, dest="old_rounds", help=argparse.SUPPRESS)  # the old name of --rounds
    p.add_argument(
        "--targets",
        default=None,
        metavar="IDS",
        help="honest nodes to measure: comma-separated ids (e.g. 0,2,4) or 'all' (overrides leakage.targets and the "
        "default choice of at most 6)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    add_options(p)
    # start-up time: the whole-run module is small, but importing it here keeps `p2pem --help` free of it too
    from p2pem.leakage.wholerun_cli import add_option

    add_option(p)
    p.set_defaults(func=cmd_leakage)


def _progress(enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm  # start-up time: only a command that shows progress loads it

    def factory(label: str, total: int):
        # disable=None: no bar when stderr is not a terminal (logs, CI)
        bar = tqdm(total=total, desc=f"{label:<40}", unit="estimate", file=sys.stderr, leave=False, dynamic_ncols=True, disable=None)

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
        if args.targets is not None:
            raise ConfigError("--targets applies to the Monte Carlo analysis; --whole-run attacks every honest node")
        # start-up time: each mode imports its own analysis (scipy, matplotlib) only when it runs
        from p2pem.leakage.wholerun_cli import cmd_whole_run

        return cmd_whole_run(args)
    t_cmd = time.perf_counter()
    # start-up time: the analysis pulls in scipy's spatial trees and matplotlib
    from p2pem.leakage.analysis import run_plan
    from p2pem.leakage.config import parse_leakage, parse_targets
    from p2pem.leakage.plan import plan_analysis
    from p2pem.leakage.plots import leakage_figure, sweep_figure
    from p2pem.runner import atomic_output, write_json
    from p2pem.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    config = parse_leakage(scenario)
    if args.runs is not None:
        if args.runs < 200 or args.runs // config.n_batches <= 2 * config.k:
            raise ConfigError(f"--runs {args.runs} is too few (at least 200, and {config.n_batches} batches of more than {2 * config.k})")
        config = dataclasses.replace(config, runs=args.runs)
    rounds = args.rounds if args.rounds is not None else args.old_rounds
    if rounds is not None:
        if rounds < 1:
            raise ConfigError(f"--rounds must be >= 1, got {rounds}")
        config = dataclasses.replace(config, rounds=rounds)
    targets = None if args.targets is None else parse_targets(args.targets, config, scenario.graph.n_nodes)

    plan = plan_analysis(scenario, config, targets=targets)
    _print_plan(plan)
    if plan.estimate is not None and sys.stdout.isatty():
        print(f"estimated run time: {plan.estimate.describe()}", flush=True)

    config = plan.config
    # summary.json's timings cover the whole command, so they add up to its wall time
    timings = {"command: scenario, imports": time.perf_counter() - t_cmd - sum(plan.timings.values())}
    with atomic_output(args.out) as tmp:
        report = run_plan(plan, progress=_progress(not args.quiet), workers=from_args(args))
        t0 = time.perf_counter()
        write_json(tmp / "leakage.json", report.leakage_json())
        timings["command: write leakage.json"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        title = f"{scenario.name}: {config.runs} runs"
        if report.iteration_runs:
            leakage_figure(report.iteration_runs, tmp / "leakage.png", title=title, ceiling_bits=report.ceiling_bits,
                           note=_figure_note(report))
        if report.sweep_runs:
            sweep_figure(report.sweep_runs, tmp / "sweep.png", title=title, ceiling_bits=report.ceiling_bits)
        timings["command: figures"] = time.perf_counter() - t0
        wall_s = time.perf_counter() - t_cmd
        write_json(tmp / "summary.json", report.summary_json(extra_timings=timings, wall_s=wall_s))

    _print_tables(report)
    files = ["leakage.json", "summary.json"] + (["leakage.png"] if report.iteration_runs else []) + (["sweep.png"] if report.sweep_runs else [])
    print(f"wrote {', '.join(f'{args.out}/{f}' for f in files)} in {wall_s:.1f} s")
    return 0


def _print_plan(plan: LeakagePlan) -> None:
    """What the analysis will do, before it does it: inputs, protocols, targets, disclosures."""
    # start-up time: as in cmd_leakage
    from p2pem.leakage.montecarlo import make_adversary
    from p2pem.leakage.theory import topology_report

    config, graph = plan.config, plan.graph
    lab = config.label
    n_nodes = graph.number_of_nodes()
    print(f"scenario {plan.scenario.name}: {n_nodes} nodes; {config.runs} Monte Carlo runs of one aggregation, KSG k={config.k}")
    if config.node_labels:
        print("  node labels: " + ", ".join(f"{lab(i)} = id {i}" for i in range(n_nodes)))
    print(f"  inputs: {plan.inputs.description}")
    print("  protocols: " + "; ".join(p.label for p in plan.protocols))
    for p in plan.protocols:
        if p.analysed.schedule is not None:
            print(f"  {p.label}: {p.analysed.describe()}")
    for s in plan.skipped:
        print(f"  skipped {s.label}: {s.reason}")
    for p in plan.protocols:
        if p.topology.ring is not None:
            print(f"  {p.label} ring: " + " -> ".join(lab(v) for v in p.topology.ring))
    who = ", ".join(lab(i) for i in config.targets)
    if plan.targets_note in ("scenario", "--targets"):
        print(f"  targets ({'[leakage] targets' if plan.targets_note == 'scenario' else '--targets'}): {who}")
    else:
        more = "" if plan.targets_note == "every honest node" else "; --targets all measures every one"
        print(f"  targets, {plan.targets_note}: {who}{more}")
    has_federated = any(p.spec.name == "federated" for p in plan.protocols)
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
        for p in plan.protocols:
            for w in p.disclosures[kind]:
                print(f"  warning: {w}")


def _figure_note(report: LeakageReport) -> str:
    """The figure's footnote: the schedule each pdmm-sp run used, and the scope."""
    from p2pem.leakage.report import SCOPE_SHORT  # start-up time: as in cmd_leakage

    lines = [f"{p.label}: {p.analysed.describe()}" for p in report.protocols if p.analysed.schedule is not None]
    return "\n".join([*lines, SCOPE_SHORT])


def _print_tables(report: LeakageReport) -> None:
    """The leakage after the last round analysed, the perturbation sweep and the warnings."""
    from p2pem.leakage.report import SCOPE_SHORT  # start-up time: as in cmd_leakage

    config = report.config
    gaussian = report.inputs is None or report.inputs.kind == "gaussian"
    assumption = "" if gaussian else " (both for Gaussian inputs of the data's variances)"
    print(f"estimator: KSG on the adversary's cross-fitted linear estimate, corrected for its estimated bias; the "
          f"{config.level:.0%} interval holds the sampling error and the bias.  The population value is a lower bound on "
          f"the leakage, the estimate is not.  Full-disclosure ceiling {report.ceiling_bits:.3f} bits at {config.runs} runs "
          f"(NMI = estimate / ceiling).  exact: from the view's linear structure; floor: what any exact protocol discloses{assumption}")
    if report.iteration_runs:
        width = max(len(r.label) for r in report.iteration_runs) + 2
        print(f"leakage of ONE aggregation after round {max(r.rounds[-1] for r in report.iteration_runs)} ({SCOPE_SHORT})")
        for p in report.protocols:
            if p.analysed.schedule is not None:
                print(f"  {p.label}: {p.analysed.describe()}")
        header = (f"{'protocol':<{width}} {'adversary':<18} {'node':>4} {'KSG bits':>9} {f'{config.level:.0%} CI':>17} "
                  f"{'bias':>7} {'NMI':>6} {'exact':>7} {'floor':>7}  ")
        print(header)
        print("-" * (len(header) + 20))
        for r in report.iteration_runs:
            lo, hi = r.mi_ci[-1]
            ex = None if r.exact_bits is None else r.exact_bits[-1]
            how = "" if r.estimator[-1] == "linear reduction" else f"  [{r.estimator[-1]}, R2 {r.r2[-1]:.2f}]"
            print(f"{r.label:<{width}} {r.adversary:<18} {r.node_label:>4} {r.mi_bits[-1]:>9.3f} {f'[{lo:.3f}, {hi:.3f}]':>17} "
                  f"{r.mi_bias_bits[-1]:>7.3f} {r.nmi[-1]:>6.3f} {_bits(ex):>7} {_bits(r.floor_bits):>7}  {r.floor}{how}")
    if report.sweep_runs:
        print(f"perturbation sweep (leakage of one aggregation after round {report.sweep_runs[0].rounds[-1]}; EM accuracy vs centralized)")
        header = (f"{'std':>9} {'std/scale':>9} {'adversary':<18} {'node':>4} {'KSG bits':>9} {'exact':>7} {'floor':>7} "
                  f"{'EM rel err':>11} {'unconverged':>11}")
        print(header)
        print("-" * len(header))
        for r in sorted(report.sweep_runs, key=lambda r: (r.protocol, r.adversary, r.node, r.perturbation_std)):
            ex = None if r.exact_bits is None else r.exact_bits[-1]
            print(f"{r.perturbation_std:>9.3g} {r.perturbation_relative:>9.3g} {r.adversary:<18} {r.node_label:>4} "
                  f"{r.mi_bits[-1]:>9.3f} {_bits(ex):>7} {_bits(r.floor_bits):>7} {r.em_rel_err:>11.2e} {r.em_unconverged:>11}")
    for r in report.iteration_runs:
        for f in r.flags:
            print(f"warning: {r.label} / {r.adversary}, node {r.node_label}: {f}")
