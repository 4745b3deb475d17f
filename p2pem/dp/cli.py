"""``p2pem tradeoff SCENARIO --out DIR``: the privacy-accuracy trade-off, JSON and figure.

:func:`add_commands` is called by :mod:`p2pem.cli`; like it, this module is allowed to print.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from p2pem.errors import ConfigError
from p2pem.parallel import add_options, from_args


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the ``tradeoff`` command."""
    p = sub.add_parser(
        "tradeoff",
        help="sweep epsilon for the differentially private protocols next to the non-private ones",
        description="Run every private protocol of the scenario (dp-central, dp-distributed, dp-msnm) for every epsilon of "
        "its [tradeoff] table and every seed, and every non-private protocol once per seed, on the same training "
        "rows, node split and graph (private runs start from the private initialisation unless em.init is given), for "
        "every model family of [tradeoff] families (default: the scenario's).  "
        "Writes OUT/tradeoff.json (format p2pem-tradeoff: one record per (protocol, family, epsilon, seed) with "
        "heldout_loglik, param_error against centralized EM, heldout_error of the Bayes classifier when [tradeoff] "
        "classify names a label column, epsilon against an outsider and against the run's colluders, the epsilon "
        "each accountant certifies, and what epsilon excludes) and OUT/tradeoff.png (those against epsilon; "
        "non-private protocols as flat lines).",
    )
    p.add_argument("scenario", help="scenario TOML file, e.g. scenarios/tradeoff_parkinsons.toml")
    p.add_argument("--out", required=True, help="output folder (created; files are written atomically)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per (protocol, epsilon) (overrides tradeoff.n_seeds)")
    add_options(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_tradeoff)


def cmd_tradeoff(args: argparse.Namespace) -> int:
    # here: start-up time (a node process and `p2pem --help` load only what their command needs)
    from p2pem.dp.tradeoff import run_tradeoff, summarize, tradeoff_figure
    from p2pem.runner import atomic_output, progress_bar, write_json
    from p2pem.scenario import TradeoffConfig, load_scenario

    workers = from_args(args)
    if args.seeds is not None and args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    scenario = load_scenario(args.scenario)
    if args.seeds is not None:
        scenario = dataclasses.replace(scenario, tradeoff=dataclasses.replace(scenario.tradeoff or TradeoffConfig(), n_seeds=args.seeds))
    t0 = time.perf_counter()
    with progress_bar("tradeoff", "run", enabled=not args.quiet) as progress, atomic_output(args.out) as tmp:
        doc = run_tradeoff(scenario, workers=workers, progress=progress)
        write_json(tmp / "tradeoff.json", doc)
        tradeoff_figure(doc, tmp / "tradeoff.png")
    print(f"scenario {scenario.name}: {doc['n_train']} training rows, {doc['n_test']} held out, {doc['n_nodes']} nodes, {len(doc['runs'])} runs")
    print("medians over seeds:")
    header = (f"{'protocol':<24} {'family':<12} {'epsilon':>8} {'outsider':>9} {'colluders (t)':>14} {'held-out ll':>12} "
              f"{'param err':>10} {'class err':>9} {'failed':>6}")
    print(header)
    print("-" * len(header))

    def eps_text(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}"

    def num(v: float | None, form: str) -> str:
        return "failed" if v is None else format(v, form)

    for row in summarize(doc):
        err = "-" if row["heldout_error"] is None else num(row["heldout_error_median"], ".3f")
        col = "-" if row["colluders"] is None else f"{eps_text(row['epsilon_colluders'])} ({row['colluders']})"
        print(f"{row['protocol']:<24} {row['family']:<12} {eps_text(row['epsilon']):>8} {eps_text(row['epsilon_outsider']):>9} {col:>14} "
              f"{num(row['heldout_loglik_median'], '.4f'):>12} {num(row['param_error_median'], '.2e'):>10} {err:>9} "
              f"{row['failed']:>3}/{row['n']:<2}")
    print("epsilon against an outsider and against t colluding nodes (a private run's 'excluded' list in tradeoff.json says what it does not cover; "
          "dp-msnm's epsilon is the one its paper claims, not a guarantee); failed: runs that ended with a collapsed component")
    print(f"wrote {args.out}/tradeoff.json and {args.out}/tradeoff.png in {time.perf_counter() - t0:.2f} s")
    return 0
