"""Command-line interface: the only place that prints and configures logging."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from p2pem.errors import P2pemError

DESCRIPTION = """\
p2pem fits one Gaussian mixture model to data spread over many parties without
pooling it: each node runs the E-step on its own rows and the network averages the
sufficient statistics with PDMM consensus and subspace perturbation (pdmm-sp), or with
the baselines secure-sum, federated and centralized.
"""


def _progress_factory(enabled: bool):
    from tqdm import tqdm

    def factory(spec):
        if not enabled or spec.name == "centralized":
            return None
        # disable=None: no bar when stderr is not a terminal (logs, CI)
        bar = tqdm(desc=f"{spec.name:<12}", unit="EM it", file=sys.stderr, leave=False, dynamic_ncols=True, disable=None)

        def update(iteration: int, max_iter: int) -> None:
            if bar.total != max_iter:
                bar.total = max_iter
            bar.update(iteration - bar.n)
            if iteration >= max_iter:
                bar.close()

        return update

    return factory


def cmd_simulate(args: argparse.Namespace) -> int:
    from p2pem.plots import loglik_figure
    from p2pem.runner import atomic_output, graph_summary, run_scenario, write_json
    from p2pem.scenario import load_scenario
    from p2pem.simulate import max_relative_difference

    scenario = load_scenario(args.scenario)
    t0 = time.perf_counter()
    with atomic_output(args.out) as tmp:
        result = run_scenario(scenario, engine=args.engine, progress=_progress_factory(not args.quiet))
        write_json(tmp / "result.json", result.to_json())
        loglik_figure(result.runs, tmp / "loglik.png", title=f"{scenario.name}: {result.n_rows} rows over {scenario.graph.n_nodes} nodes")
    gs = graph_summary(result.graph)
    from p2pem.graphs import degree_report

    print(f"scenario {scenario.name}: {result.n_rows} rows, {gs['n_nodes']} nodes, {gs['n_edges']} edges, diameter {gs['diameter']}")
    print(f"  {degree_report(result.graph).summary()}")
    ref = next((r for r in result.runs if r.protocol == "centralized"), None)
    header = f"{'protocol':<12} {'EM its':>6} {'final loglik':>13} {'max rel err':>11} {'consensus its':>13} {'messages':>10} {'MB':>8} {'wall s':>7}"
    print(header)
    print("-" * len(header))
    for r in result.runs:
        err = "" if ref is None else f"{max_relative_difference(r, ref):11.1e}"
        cons = f"{sum(r.consensus_iterations) / max(len(r.consensus_iterations), 1):13.1f}" if r.consensus_iterations else f"{'-':>13}"
        print(f"{r.protocol:<12} {r.n_iter:>6} {r.loglik[-1]:>13.6f} {err:>11} {cons} {r.messages:>10} {r.bytes / 1e6:>8.2f} {r.wall_s:>7.3f}")
        if r.unconverged_iterations:
            print(f"  warning: {r.protocol} consensus hit max_iter in EM iterations {r.unconverged_iterations[:10]}")
    print(f"wrote {args.out}/result.json and {args.out}/loglik.png in {time.perf_counter() - t0:.2f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p2pem", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug) to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    sim = sub.add_parser(
        "simulate",
        help="run every protocol of a scenario on this machine",
        description="Run every protocol of a scenario file on one machine and write OUT/result.json "
        "(per protocol: loglik per EM iteration, final weights/means/covariances, consensus iterations, "
        "messages, bytes, wall time) and OUT/loglik.png (log-likelihood against EM iteration).",
    )
    sim.add_argument("scenario", help="scenario TOML file, e.g. scenarios/parkinsons.toml")
    sim.add_argument("--out", required=True, help="output folder (created; files are written atomically)")
    sim.add_argument(
        "--engine",
        choices=("vectorised", "messages"),
        default="vectorised",
        help="vectorised (fast, default) or messages (the real per-node state machines over an in-memory transport); "
        "both give identical results",
    )
    sim.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sim.set_defaults(func=cmd_simulate)

    for module in ("p2pem.leakage.cli", "p2pem.deploy.cli", "p2pem.dp.cli"):
        try:
            mod = __import__(module, fromlist=["add_commands"])
        except ModuleNotFoundError as exc:
            if exc.name is not None and module.startswith(exc.name):
                continue
            raise
        mod.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args.func(args) or 0)
    except P2pemError as exc:
        print(f"p2pem: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("p2pem: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
