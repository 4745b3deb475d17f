"""Command-line interface: the only place that prints and configures logging."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from typing import NoReturn

from p2pem import __version__
from p2pem.errors import P2pemError

DESCRIPTION = """\
p2pem fits one Gaussian mixture model to data spread over many parties without
pooling it: each node runs the E-step on its own rows and the network averages the
sufficient statistics with PDMM consensus and subspace perturbation (pdmm-sp), or with
the baselines secure-sum, federated and centralized.
"""


EXIT_CODES = """\
exit codes:
  0    success
  1    an error of another kind
  2    configuration: a scenario, node config or argument is wrong
  3    data: unusable input data
  4    protocol: a run failed or a member broke the protocol
  5    transport: broker unreachable, a node fell silent, a timeout
  130  interrupted (Ctrl-C)

global options (-v, -q, --json) may stand before or after the command.
"""

#: Options every command takes, accepted before or after the command name.
GLOBAL_FLAGS = frozenset({"-v", "-vv", "-vvv", "--verbose", "-q", "--quiet", "--json"})


def _add_common(parser: argparse.ArgumentParser) -> None:
    """-v, -q and --json on a command (skipping any it already defines)."""
    for flags, kwargs in (
        (("-v", "--verbose"), {"action": "count", "default": 0, "help": "log more (-v info, -vv debug) to stderr"}),
        (("-q", "--quiet"), {"action": "store_true", "help": "no progress bars"}),
        (("--json",), {"action": "store_true", "help": "print a machine-readable JSON summary on stdout instead of the table"}),
    ):
        try:
            parser.add_argument(*flags, **kwargs)
        except argparse.ArgumentError:
            pass  # the command has its own


def _hoist_global_flags(argv: list[str], commands: Sequence[str]) -> list[str]:
    """Move global flags written before the command name to just after it."""
    moved: list[str] = []
    head: list[str] = []
    for i, tok in enumerate(argv):
        if tok in commands:
            return head + [tok] + moved + argv[i + 1 :]
        (moved if tok in GLOBAL_FLAGS else head).append(tok)
    return head + moved


def _progress_factory(enabled: bool):
    from tqdm import tqdm  # here: start-up time (a node process never draws a progress bar)

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
    # here: start-up time (a node process and `p2pem --help` load only what their command needs)
    from p2pem.plots import loglik_figure
    from p2pem.runner import atomic_output, graph_summary, run_scenario, write_json
    from p2pem.scenario import load_scenario
    from p2pem.simulate import max_relative_difference

    scenario = load_scenario(args.scenario)
    t0 = time.perf_counter()
    with atomic_output(args.out) as tmp:
        result = run_scenario(scenario, engine=args.engine, device=args.device, progress=_progress_factory(not args.quiet))
        write_json(tmp / "result.json", result.to_json())
        loglik_figure(result.runs, tmp / "loglik.png", title=f"{scenario.name}: {result.n_rows} rows over {scenario.graph.n_nodes} nodes")
    gs = graph_summary(result.graph)
    from p2pem.graphs import degree_report  # here: start-up time (networkx)

    lo, hi = gs["diameter_bounds"]
    diameter = gs["diameter"] if gs["diameter"] is not None else f"{lo}..{hi} (bounds)"
    print(f"scenario {scenario.name}: {result.n_rows} rows, {gs['n_nodes']} nodes, {gs['n_edges']} edges, diameter {diameter}")
    print(f"  {degree_report(result.graph).summary()}")
    ref = next((r for r in result.runs if r.protocol == "centralized"), None)
    header = f"{'protocol':<12} {'EM its':>6} {'final loglik':>13} {'max rel err':>11} {'consensus its':>13} {'messages':>10} {'MB':>8} {'wall s':>7}"
    print(header)
    print("-" * len(header))
    for r in result.runs:
        err = "" if ref is None else f"{max_relative_difference(r.params, ref.params, r.family):11.1e}"
        cons = f"{sum(r.consensus_iterations) / max(len(r.consensus_iterations), 1):13.1f}" if r.consensus_iterations else f"{'-':>13}"
        print(f"{r.protocol:<12} {r.n_iter:>6} {r.loglik[-1]:>13.6f} {err:>11} {cons} {r.messages:>10} {r.bytes / 1e6:>8.2f} {r.wall_s:>7.3f}")
        if r.unconverged_iterations:
            print(f"  warning: {r.protocol} consensus hit max_iter in EM iterations {r.unconverged_iterations[:10]}")
    for r in result.runs:
        if r.resolved_params.get("accel"):
            rp = r.resolved_params
            what = {"polynomial": "Leja polynomial, then heavy ball", "deflated": "deflated heavy ball", "heavy-ball": "heavy ball",
                    "none": "plain PDMM"}[rp["accel"]]
            extra = f", momentum {rp['momentum']:.4g}" if rp.get("momentum") is not None else ""
            extra += f", deflation steps from round {rp['deflate_at']}" if rp.get("deflate_at") is not None else ""
            extra += f", {rp['special_rounds']} scheduled rounds" if rp.get("special_rounds") is not None else ""
            print(f"{r.protocol}: {what} (c {rp['c']:.4g}{extra})")
    print(f"wrote {args.out}/result.json and {args.out}/loglik.png in {time.perf_counter() - t0:.2f} s")
    args.json_summary = {
        "scenario": scenario.name,
        "files": [f"{args.out}/result.json", f"{args.out}/loglik.png"],
        "protocols": [
            {
                "protocol": r.protocol,
                "n_iter": r.n_iter,
                "final_loglik": None if r.loglik[-1] != r.loglik[-1] else r.loglik[-1],
                "max_rel_err": None if ref is None else max_relative_difference(r.params, ref.params, r.family),
                "messages": r.messages,
                "bytes": r.bytes,
                "wall_s": r.wall_s,
            }
            for r in result.runs
        ],
    }
    return 0


def cmd_select(args: argparse.Namespace) -> int:
    # here: start-up time (a node process and `p2pem --help` load only what their command needs)
    from p2pem.plots import selection_figure
    from p2pem.runner import atomic_output, write_json
    from p2pem.scenario import load_scenario
    from p2pem.selection import parse_components, run_selection

    scenario = load_scenario(args.scenario)
    components = parse_components(args.components)
    text = args.families if args.families is not None else "mixed" if scenario.em.family.name == "mixed" else "gaussian,skew-normal"
    families = [name.strip() for name in text.split(",") if name.strip()]
    if not families:
        raise P2pemError("--families needs at least one family name")
    total = len(components) * len(families) * args.n_init
    bar = None
    if not args.quiet:
        from tqdm import tqdm  # here: start-up time

        bar = tqdm(total=total, unit="fit", file=sys.stderr, leave=False, dynamic_ncols=True, disable=None)

    def progress(family: str, k: int, restart: int) -> None:
        if bar is not None:
            bar.set_description(f"{family} G={k}")
            bar.update(1)

    try:
        with atomic_output(args.out) as tmp:
            doc = run_selection(scenario, components, families, protocol=args.protocol, n_init=args.n_init, progress=progress)
            write_json(tmp / "select.json", doc)
            selection_figure(doc, tmp / "select.png")
    finally:
        if bar is not None:
            bar.close()
    print(f"scenario {scenario.name}: {doc['n_rows']} rows over {doc['n_nodes']} nodes, {doc['protocol']}, "
          f"best of {doc['n_init']} private initialisation{'s' if doc['n_init'] != 1 else ''} per fit")
    header = f"{'family':<12} {'G':>2} {'loglik':>11} {'d':>3} {'AIC':>10} {'BIC':>10} {'EM its':>6}  note"
    print(header)
    print("-" * len(header))
    best = doc["best"]
    for r in doc["rows"]:
        notes = []
        if best["by_family"][r["family"]]["bic"] == r["n_components"]:
            notes.append("smallest BIC" + (" overall" if best["bic"] == {"family": r["family"], "n_components": r["n_components"]} else ""))
        if r["boundary"]:
            notes.append("at the boundary (|delta| -> 1)")
        if r["failed_restarts"]:
            notes.append(f"{r['failed_restarts']} restarts collapsed")
        print(f"{r['family']:<12} {r['n_components']:>2} {r['loglik']:>11.2f} {r['n_parameters']:>3} {r['aic']:>10.2f} {r['bic']:>10.2f} "
              f"{r['n_iter']:>6}  {'; '.join(notes)}")
    print(f"wrote {args.out}/select.json and {args.out}/select.png in {doc['wall_s']:.1f} s")
    args.json_summary = {"scenario": scenario.name, "files": [f"{args.out}/select.json", f"{args.out}/select.png"], "best": best}
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="p2pem", description=DESCRIPTION, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"p2pem {__version__}")
    _add_common(parser)
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
    sim.add_argument(
        "--device",
        default=None,
        help="run pdmm-sp's vectorised consensus on this array device: cpu (default), cuda (needs the gpu extra, CuPy) "
        "or array-api-strict (a portability check)",
    )
    sim.set_defaults(func=cmd_simulate)

    sel = sub.add_parser(
        "select",
        help="choose the model family and number of components through a private protocol",
        description="Fit every combination of --families and --components to a scenario's data with one private protocol "
        "(default: the scenario's first protocol other than centralized) and compare log-likelihood, AIC and BIC "
        "(lower is better). Writes OUT/select.json (format p2pem-select) and OUT/select.png. Every fit starts from "
        "the private initialisation; --n-init keeps the best of several public init seeds.",
    )
    sel.add_argument("scenario", help="scenario TOML file, e.g. scenarios/ais_skew.toml")
    sel.add_argument("--components", default="1..4", help="component counts: a range 1..5 or a list 2,3,4 (default 1..4)")
    sel.add_argument("--families", default=None,
                     help="comma-separated model families (default gaussian,skew-normal; mixed for a table with categorical columns)")
    sel.add_argument("--protocol", default=None, help="protocol name (default: the scenario's first one other than centralized)")
    sel.add_argument("--n-init", type=int, default=5, help="private initialisations per fit; the best log-likelihood is kept (default 5)")
    sel.add_argument("--out", required=True, help="output folder (created; files are written atomically)")
    sel.set_defaults(func=cmd_select)

    for module in ("p2pem.leakage.cli", "p2pem.deploy.cli", "p2pem.dp.cli", "p2pem.synth.cli"):
        try:
            mod = __import__(module, fromlist=["add_commands"])
        except ModuleNotFoundError as exc:
            if exc.name is not None and module.startswith(exc.name):
                continue
            raise
        mod.add_commands(sub)
    for command in sub.choices.values():
        command.epilog = command.epilog or EXIT_CODES
        if command.formatter_class is argparse.HelpFormatter:
            command.formatter_class = argparse.RawDescriptionHelpFormatter
        _add_common(command)
    parser.set_defaults(commands=tuple(sub.choices))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(_hoist_global_flags(raw, parser.get_default("commands")))
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    code = 0
    error: str | None = None
    table = io.StringIO()
    try:
        with contextlib.redirect_stdout(table) if args.json else contextlib.nullcontext(), warnings.catch_warnings():
            warnings.showwarning = _show_warning  # restored when the block ends
            code = int(args.func(args) or 0)
    except P2pemError as exc:
        error, code = str(exc), exc.exit_code
        print(f"p2pem: error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        error, code = "interrupted", 130
        print("p2pem: interrupted", file=sys.stderr)
    if args.json:
        doc = {"format": "p2pem-cli-summary", "version": 1, "p2pem": __version__, "command": args.command, "exit_code": code,
               "error": error} | getattr(args, "json_summary", {})
        if "json_summary" not in args:
            doc["output"] = table.getvalue().splitlines()
        print(json.dumps(doc, indent=1))
    if argv is None and getattr(args, "exit_at_once", False):
        _exit_at_once(code)
    return code


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001 - warnings' signature
    """A library warning (a boundary reached, a bound read off the data) as one line on stderr."""
    print(f"p2pem: warning: {message}", file=sys.stderr if file is None else file)


def _exit_at_once(code: int) -> NoReturn:
    """End the process now, skipping the interpreter's teardown (module clean-up, freeing every object).

    For a deployment's node process, whose result file is written and closed by now: the
    teardown is pure overhead, and with 20 nodes finishing at once on two CPUs it added about
    a second to a deployment's wall time (``sim/bench_deploy.py``).  Buffered output and log
    handlers are flushed first.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # nobody reads it any more (the launcher died)
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
