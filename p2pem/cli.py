"""Command-line interface: the only place that prints and configures logging."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from p2pem import __version__, parallel
from p2pem.errors import ConfigError, P2pemError

DESCRIPTION = """\
p2pem fits one mixture model (Gaussian or skew-normal) to data spread over many
parties without pooling it: each node runs the E-step on its own rows and the network
sums the sufficient statistics with PDMM consensus and subspace perturbation (pdmm-sp),
a secure-sum ring, federated EM or differentially private EM.  Start with
`p2pem simulate scenarios/parkinsons.toml --out runs/first`.
"""


EXIT_CODES = """\
exit codes:
  0    success
  1    an error of another kind
  2    configuration: a scenario, node config or argument is wrong
  3    data: unusable input data
  4    protocol: a run failed or a member broke the protocol
  5    transport: broker unreachable, a node fell silent, a timeout
  6    model: the data cannot support the model (a component collapsed, a covariance is
       singular): change the data, n_components or reg_covar
  130  interrupted (Ctrl-C; a second Ctrl-C quits without cleaning up)

output: --out is created with its missing parent folders; an existing OUT (a folder
that is not empty, or a file) is refused unless --force, which writes into it and
replaces files of the same names.

global options (-v, -q, --json) may stand before or after the command.
"""

#: Options every command takes, accepted before or after the command name.
GLOBAL_FLAGS = frozenset({"-v", "-vv", "-vvv", "--verbose", "-q", "--quiet", "--json"})


def _add_common(parser: argparse.ArgumentParser, *, nested: bool = False) -> None:
    """-v, -q and --json on a command (skipping any it already defines).

    ``nested``: an action of a command (``keys new``): no defaults of its own, which
    argparse would otherwise write over the flags given to the command before it.
    """
    options: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
        (("-v", "--verbose"), {"action": "count", "default": 0, "help": "log what runs to stderr (-v: each step, -vv: debug, -vvv: other libraries' too)"}),
        (("-q", "--quiet"), {"action": "store_true", "default": False, "help": "no progress bars"}),
        (("--json",), {"action": "store_true", "default": False, "help": "print a machine-readable JSON summary on stdout instead of the table"}),
    )
    for flags, kwargs in options:
        try:
            parser.add_argument(*flags, **{**kwargs, "default": argparse.SUPPRESS} if nested else kwargs)
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

    import numpy as np  # here: start-up time, as above

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
    print(f"  {degree_report(result.graph).summary(scenario.parties)}")
    if scenario.parties is not None:
        print("  parties: " + ", ".join(f"{i} = {name}" for i, name in enumerate(scenario.parties[:12])) + (" ..." if len(scenario.parties) > 12 else ""))
    ref = next((r for r in result.runs if r.protocol == "centralized"), None)
    width = max(12, *(len(r.protocol) for r in result.runs))
    header = (f"{'protocol':<{width}} {'EM its':>6} {'final loglik':>13} {'max rel err':>11} {'epsilon':>8} {'consensus its':>13} "
              f"{'messages':>10} {'MB':>8} {'wall s':>7}")
    print(header)
    print("-" * len(header))
    notes = []
    for r in result.runs:
        err = f"{'-':>11}" if ref is None else f"{max_relative_difference(r.params, ref.params, r.family):11.1e}"
        cons = f"{sum(r.consensus_iterations) / max(len(r.consensus_iterations), 1):13.1f}" if r.consensus_iterations else f"{'-':>13}"
        ll = f"{r.loglik[-1]:>13.6f}" if r.loglik and np.isfinite(r.loglik[-1]) else f"{'-':>13}"
        eps, note = _privacy_cells(r)
        if note:
            notes.append(f"{r.protocol}: {note}")
        print(f"{r.protocol:<{width}} {r.n_iter:>6} {ll} {err} {eps:>8} {cons} {r.messages:>10} {r.bytes / 1e6:>8.2f} {r.wall_s:>7.3f}")
        if r.unconverged_iterations:
            print(f"  warning: {r.protocol} consensus stopped unsettled (max_iter, or a public stop round) in EM iterations {r.unconverged_iterations[:10]}")
        weights, means = getattr(r.params, "weights", None), getattr(r.params, "means", None)
        if weights is not None and means is not None:
            from p2pem.model import degenerate_components

            d = np.asarray(means).shape[-1]
            light = degenerate_components(weights, result.n_rows, d)
            if light.size:
                print(f"  warning: {r.protocol}: {light.size} of {len(weights)} components hold fewer rows' weight than n_features + 1 = "
                      f"{d + 1}; they are degenerate (their covariance rests on reg_covar): decrease n_components")
    for note in notes:
        print(note)
    for r in result.runs:
        if r.resolved_params.get("accel"):
            rp = r.resolved_params
            what = {"polynomial": "Leja polynomial, then heavy ball", "deflated": "deflated heavy ball", "heavy-ball": "heavy ball",
                    "none": "plain PDMM"}[rp["accel"]]
            extra = f", momentum {rp['momentum']:.4g}" if rp.get("momentum") is not None else ""
            extra += f", deflation steps from round {rp['deflate_at']}" if rp.get("deflate_at") is not None else ""
            extra += f", {rp['special_rounds']} scheduled rounds" if rp.get("special_rounds") is not None else ""
            extra += f", all nodes stop at round {rp['stop_round']}" if rp.get("stop_round") is not None else ""
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


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs wrapped to the terminal, paragraph by paragraph.

    A paragraph (lines between blank lines) is re-filled; a line that starts with a space
    (a table such as the exit codes, an example command) is kept as written.
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap  # here: start-up time (only --help formats text)

        out: list[str] = []
        paragraph: list[str] = []

        def flush() -> None:
            if paragraph:
                out.extend(textwrap.wrap(" ".join(paragraph), width, initial_indent=indent, subsequent_indent=indent))
                paragraph.clear()

        for line in text.splitlines():
            if not line.strip():
                flush()
                out.append("")
            elif line[0].isspace() or line.rstrip().endswith(":") and not paragraph:
                flush()
                out.append(indent + line.rstrip())
            else:
                paragraph.append(line.strip())
        flush()
        return "\n".join(out)


def _leaf_parsers(parser: argparse.ArgumentParser):
    """Every parser that runs a command (``keys new`` and ``keys roster`` below ``keys``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
            yield from _leaf_parsers(child)


def _add_force(parser: argparse.ArgumentParser) -> None:
    """``--force`` on a command that writes ``--out`` (the one overwrite policy, :func:`p2pem.files.claim_output`)."""
    options = parser._option_string_actions
    if "--out" in options and "--force" not in options:
        what = "file" if parser.get_default("out_kind") == "file" else "non-empty folder"
        parser.add_argument("--force", action="store_true", help=f"write OUT even if it is an existing {what} (files of the same names are replaced)")


def cmd_model(args: argparse.Namespace) -> int:
    # here: start-up time (a node process and `p2pem --help` load only what their command needs)
    from p2pem.export import saved_from_result
    from p2pem.saved import write_model

    saved = saved_from_result(args.result, args.protocol, fresh_noise=args.fresh_noise, insecure=args.insecure_reproducible_seed)
    write_model(saved, args.out)
    pre = saved.preprocessing
    steps = [] if pre is None else (["standardised"] if pre.center is not None else []) + (
        [f"projected on {pre.components.shape[0]} principal components"] if pre.components is not None else [])
    graph = saved.graph or {}
    print(f"wrote {args.out}: the {saved.protocol.get('label')} model of scenario {(saved.scenario or {}).get('name')}, "
          f"{saved.n_components} {saved.family.name} components")
    print(f"  input: {saved.n_features_in} raw columns" + (f" ({', '.join(steps)})" if steps else "")
          + f"; fitted on {saved.fit.get('n_rows')} rows over {graph.get('n_nodes')} nodes")
    privacy = saved.protocol.get("params", {}).get("privacy")
    if isinstance(privacy, dict):
        eps = privacy.get("epsilon", {}).get("outsider")
        if not privacy.get("differentially_private", True):
            print("  INSECURE: the simulated model, its noise from the scenario seed (--insecure-reproducible-seed); NOT differentially private")
        elif eps is not None:
            print(f"  private: epsilon {eps:.3g} against an outsider (neighbours: replace one row, n public), fresh noise from OS entropy")
        else:
            print("  NOT differentially private (see the file's protocol.params.privacy)")
    print(f"  load it with p2pem.load({str(args.out)!r}); it scores raw rows: model.score_samples(X)")
    args.json_summary = {"files": [str(args.out)], "protocol": saved.protocol.get("label"), "family": saved.family.name,
                         "n_components": saved.n_components, "n_features_in": saved.n_features_in}
    return 0


def _privacy_cells(run) -> tuple[str, str]:
    """The table's epsilon cell of a run and a line saying what it means ("-" and "" when not private)."""
    privacy = run.protocol_params.get("privacy")
    if not isinstance(privacy, dict):
        return "-", ""
    eps = privacy.get("epsilon", {})
    outsider, colluders = eps.get("outsider"), eps.get("colluders")
    if outsider is None:
        why = next((text for text in privacy.get("excluded", []) if "NOT" in text), "no epsilon holds")
        return "not DP", f"{why}; releases no log-likelihood"
    against = f"epsilon {outsider:.3g} against an outsider"
    if colluders is not None:
        against += f", {colluders:.3g} against {privacy.get('colluders')} colluding nodes"
    worst = privacy.get("worst_placement")
    if isinstance(worst, dict):
        eps_worst = eps.get("colluders_worst_placement")
        group = worst.get("smallest_honest_group")
        against += (f", {'not covered' if eps_worst is None else f'{eps_worst:.3g}'} against them placed worst "
                    f"(cutting off {group} honest node{'s' if group != 1 else ''})")
    return f"{outsider:.3g}", f"{against} (delta {privacy.get('delta'):g}, {privacy.get('accountant')} accountant); releases no log-likelihood"


def cmd_select(args: argparse.Namespace) -> int:
    # here: start-up time (a node process and `p2pem --help` load only what their command needs)
    from p2pem.plots import selection_figure
    from p2pem.runner import atomic_output, write_json
    from p2pem.scenario import load_scenario
    from p2pem.selection import parse_components, run_selection

    scenario = load_scenario(args.scenario)
    components = parse_components(args.components)
    loglik_range = _loglik_range(args.loglik_range)
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
            doc = run_selection(scenario, components, families, protocol=args.protocol, n_init=args.n_init, progress=progress,
                                workers=parallel.from_args(args), loglik_epsilon=args.loglik_epsilon, loglik_range=loglik_range)
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
    if "privacy" in doc:
        pr = doc["privacy"]
        print(f"differentially private: {pr['fits']} fits at epsilon {pr['epsilon_per_fit']:g} + {pr['loglik_epsilon']:g} for each "
              f"log-likelihood: epsilon {pr['epsilon_total']:g}, delta {pr['delta_total']:g} in all (sequential composition)")
    print(f"wrote {args.out}/select.json and {args.out}/select.png in {doc['wall_s']:.1f} s")
    args.json_summary = {"scenario": scenario.name, "files": [f"{args.out}/select.json", f"{args.out}/select.png"], "best": best}
    return 0


def _loglik_range(text: str) -> tuple[float, float]:
    """``LO,HI`` for --loglik-range."""
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"--loglik-range must look like -30,5 (two numbers LO,HI), got {text!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError(f"--loglik-range must be two finite numbers LO < HI, got {text!r}")
    return low, high


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p2pem", description=DESCRIPTION, epilog=EXIT_CODES, formatter_class=_HelpFormatter)
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

    model_cmd = sub.add_parser(
        "model",
        help="save the model of a simulate run (p2pem.load reads it)",
        description="Turn one protocol's model of a `p2pem simulate` run into a saved model: OUT (JSON, format p2pem-model, "
        "schema p2pem/schemas/model.schema.json) holds the parameters and family, the raw feature names and preprocessing "
        "constants (so a standardize = true model scores new raw rows), the protocol with its privacy block, the EM trace, "
        "the graph and the node of every row, the p2pem version and the time. The scenario file the result names is read "
        "again to rebuild the features and graph, and refused if it no longer builds the run's rows and graph. "
        "A private run (dp-central, dp-distributed) of `p2pem simulate` is a simulation, not a release: its noise follows "
        "from the scenario seed, so it is saved only with --fresh-noise (the protocol runs again on the same rows with noise "
        "from the operating system's entropy, recorded nowhere: the model to publish) or --insecure-reproducible-seed "
        "(tests only: the simulated model, marked not differentially private).  "
        "In Python: model = p2pem.load(OUT); model.predict(X), model.score_samples(X).",
    )
    model_cmd.add_argument("result", metavar="RESULT", help="output folder of `p2pem simulate` (or its result.json)")
    model_cmd.add_argument("--protocol", metavar="NAME", help="which run: its label in the table (e.g. dp-central-gaussian) or the "
                     "scenario's protocol name; default the first")
    model_cmd.add_argument("--out", required=True, metavar="MODEL_JSON", help="the model file to write")
    model_cmd.add_argument("--fresh-noise", action="store_true",
                           help="a private run: fit it again with noise from OS entropy and save that model (the one to publish)")
    model_cmd.add_argument("--insecure-reproducible-seed", action="store_true",
                           help="TESTING ONLY: save a private run's simulated model, whose noise anyone with the scenario file can "
                           "recompute; marked differentially_private: false")
    model_cmd.set_defaults(func=cmd_model, out_kind="file")

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
    sel.add_argument("--loglik-epsilon", type=float, default=None, metavar="EPS",
                     help="over a differentially private protocol: the budget of each fit's log-likelihood release, on top of the "
                     "protocol's epsilon (default a tenth of it); the budgets of all fits add up, and select.json's privacy block says so")
    sel.add_argument("--loglik-range", default="-30,5", metavar="LO,HI",
                     help="over a differentially private protocol: the public range each row's log-density is clipped to before "
                     "the noisy sum (nats; default -30,5)")
    sel.add_argument("--out", required=True, help="output folder (created; files are written atomically)")
    parallel.add_options(sel)
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
        _add_common(command)
        for leaf in {command, *_leaf_parsers(command)}:
            leaf.formatter_class = _HelpFormatter
            if leaf is not command:
                _add_common(leaf, nested=True)
            _add_force(leaf)
    parser.set_defaults(commands=tuple(sub.choices))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(_hoist_global_flags(raw, parser.get_default("commands")))
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    # -v and -vv: what p2pem does (other libraries' chatter stays at warnings unless -vvv)
    logging.basicConfig(level=logging.DEBUG if args.verbose >= 3 else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("p2pem").setLevel(level)
    code = 0
    error: str | None = None
    table = io.StringIO()
    said: list[str] = []
    claim = None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_interrupts())
            stack.enter_context(_one_line_warnings(said))
            if args.json:
                stack.enter_context(contextlib.redirect_stdout(table))
            if getattr(args, "out", None) is not None:
                from p2pem.files import claim_output  # here: start-up time (a node process writes no --out)

                claim = claim_output(args.out, force=getattr(args, "force", False), kind=getattr(args, "out_kind", "folder"))
            code = int(args.func(args) or 0)
    except P2pemError as exc:
        error, code = str(exc), exc.exit_code
        print(f"p2pem: error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        error, code = "interrupted", 130
        print("p2pem: interrupted", file=sys.stderr)
    except OSError as exc:  # a file the command writes or reads outside the checked inputs (disk full, permissions)
        where = f"{exc.filename}: " if exc.filename else ""
        error, code = f"{where}{exc.strerror or exc}", 1
        print(f"p2pem: error: {error}", file=sys.stderr)
    if code != 0 and claim is not None:
        claim.release()
    if args.json:
        doc = {"format": "p2pem-cli-summary", "version": 1, "p2pem": __version__, "command": args.command, "exit_code": code,
               "error": error, "warnings": said} | getattr(args, "json_summary", {})
        if "json_summary" not in args:
            doc["output"] = table.getvalue().splitlines()
        print(json.dumps(doc, indent=1))
    if argv is None and getattr(args, "exit_at_once", False):
        _exit_at_once(code)
    return code


@contextlib.contextmanager
def _interrupts():
    """Ctrl-C once: KeyboardInterrupt, the command cleans up; twice: quit at once, in one line.

    A second Ctrl-C during the clean-up (a deployment stopping its nodes, a pool its workers)
    would otherwise raise inside a ``finally`` block or an exit handler and print a traceback.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def first(signum, frame) -> None:
        signal.signal(signal.SIGINT, again)
        raise KeyboardInterrupt

    def again(signum, frame) -> None:
        try:
            print("\np2pem: interrupted again: quitting without cleaning up", file=sys.stderr, flush=True)
        finally:
            os._exit(130)

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _one_line_warnings(said: list[str]):
    """Library warnings (a bound read off the data, a boundary reached) as one line each, once.

    Python's own format adds the source line that raised it and repeats a warning each time
    its text differs; here each distinct message prints once, as ``p2pem: warning: ...``,
    after flushing stdout so that it stands where it happened, and is collected in ``said``
    (the ``--json`` summary's ``warnings``).
    """

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001 - warnings' signature
        text = " ".join(str(message).split())
        if text in said:
            return
        said.append(text)
        sys.stdout.flush()
        print(f"p2pem: warning: {text}", file=sys.stderr if file is None else file, flush=True)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


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
