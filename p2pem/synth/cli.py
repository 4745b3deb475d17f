"""``p2pem synth SCENARIO --out DIR``: private synthetic data with its utility and risk report.

:func:`add_commands` is called by :mod:`p2pem.cli`; like it, this module is allowed to print.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable


DEPLOY_RELEASE_HELP = """
A scenario whose [synth] model is privbayes or hmprivbayes deploys its differentially private
Bayesian-network release instead (docs/bayesnet.md): each node's data.csv holds its own rows,
the roster the public schema and [bayesnet] settings; every node builds its task from the two,
its secret from the OS and the shared seed by commit-and-reveal; the protocol is [synth]
protocol unless --protocol names another (pdmm-sp or secure-sum).  Once every node signed the
same release, DIR/release/release.json (as `p2pem synth` writes it) and DIR/release/synthetic.csv
are written; with --insecure-reproducible-seed the release equals `p2pem synth
--insecure-reproducible-seed`'s, which --check confirms, and says it is not private.
"""


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the ``synth`` command."""
    p = sub.add_parser(
        "synth",
        help="fit the scenario's synthesizer with its protocol and release synthetic rows with a utility and risk report",
        description="Fit the synthesizer of a scenario whose data has a public schema ([synth] model, default the mixed-type "
        "mixture 'mixture'; 'privbayes' or 'hmprivbayes' for a differentially private Bayesian network with its [bayesnet] "
        "settings; 'mst' or 'aim' for McKenna et al.'s marginal mechanisms with Private-PGM inference and their [marginals] "
        "settings) to its training rows spread over the nodes, with one of its protocols ([synth] protocol, default the first; "
        "exact or differentially private), then draw synthetic rows from the fitted model alone.  Writes two folders.  "
        "OUT/release/ is what may be published: synthetic.csv (header row, the schema's column names, order and types; with "
        "--releases R also synthetic-2.csv ... synthetic-R.csv) and release.json (format p2pem-synth-release: the model, its "
        "parameters and provenance: protocol, epsilon spent per accountant and against how many colluders, the neighbouring "
        "relation, which fields are declared public).  OUT/holder-only/ is NOT covered by epsilon and must not be published: "
        "when the scenario holds out real test rows ([data] test or test_fraction), report.json (format p2pem-synth-report: "
        "marginal distances, TSTR, reproducibility of a named regression, distance to the closest record, all computed from "
        "the real rows) and report.png.  The noise, every private selection and the sampled rows come from the operating "
        "system's entropy and are recorded nowhere, so two runs differ; sampling costs no privacy.",
    )
    p.add_argument("scenario", help="scenario TOML file, e.g. scenarios/synth_adult.toml")
    p.add_argument("--out", required=True, help="output folder (created; files are written atomically: all or nothing)")
    p.add_argument("--rows", type=int, default=None, help="rows per release (default [synth] rows, else as many as the training rows)")
    p.add_argument("--releases", type=int, default=None, help="independent releases from the one fitted model (default [synth] releases, else 1)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--insecure-reproducible-seed", action="store_true",
                   help="TESTING ONLY: draw the noise, the private selections and the rows from the scenario seed, so that the run "
                   "is reproducible bit for bit; anyone with the scenario file can then undo the noise, and release.json says "
                   "differentially_private: false")
    p.set_defaults(func=cmd_synth)
    deploy = sub.choices.get("deploy")
    if deploy is not None:  # registered by p2pem.deploy.cli: a release scenario deploys its release instead of an EM
        deploy.set_defaults(func=functools.partial(cmd_deploy_release, fallback=deploy.get_default("func")))
        deploy.description = (deploy.description or "") + DEPLOY_RELEASE_HELP


def cmd_synth(args: argparse.Namespace) -> int:
    # here: start-up time (a node process and `p2pem --help` load only what their command needs)
    from p2pem.dp.publication import Publication
    from p2pem.scenario import load_scenario
    from p2pem.runner import progress_bar
    from p2pem.synth.run import synthesize, write_synthesis

    scenario = load_scenario(args.scenario)
    publication = Publication.insecure(scenario.seed) if args.insecure_reproducible_seed else Publication.secure()
    t0 = time.perf_counter()
    with progress_bar("fit", "EM it", enabled=not args.quiet) as progress:
        result = synthesize(scenario, rows=args.rows, releases=args.releases, progress=progress, publication=publication)
    release = result.release
    privacy = release["privacy"]
    what = privacy_line(privacy)
    title = f"{scenario.name}: {release['model']} fitted with {release['protocol']['name']}"
    files = write_synthesis(args.out, result, title=title)
    family = release.get("family", {}).get("name")
    print(f"scenario {scenario.name}: {release['training_rows']} training rows over {release['n_nodes']} nodes, model {release['model']}"
          + (f" ({family} family)" if family else "") + f", protocol {release['protocol']['name']}")
    print(f"  privacy: {what}")
    if publication.reproducible:
        print("  INSECURE: noise, selections and rows from the scenario seed (--insecure-reproducible-seed); NOT private, do not publish")
    report = result.report
    if report is None:
        print("  no report: the scenario holds out no real test rows ([data] test or test_fraction)")
    else:
        print("  holder-only report (NOT covered by epsilon, computed from the real rows; never publish it):")
        summary = report["summary"]
        line = f"  {len(result.tables)} release(s) of {result.tables[0].n_rows} rows: mean 2-way TVD {summary['2way_tvd_mean']:.4f}"
        ref = report["reference"]["test_vs_train"]["marginals"].get("2way", {}).get("mean")
        if ref is not None:
            line += f" (real test rows: {ref:.4f})"
        print(line)
        if "tstr" in summary:
            real = report["reference"]["train_on_real"]
            print("  TSTR accuracy: " + ", ".join(
                f"{m} {summary['tstr'][m]:.4f} (train on real {real[m]['accuracy']:.4f})" for m in summary["tstr"]
            ) + f"; majority class {report['reference']['majority_class']:.4f}")
            if summary.get("tstr_below_majority"):
                print(f"  WARNING: TSTR below the majority class for {', '.join(summary['tstr_below_majority'])}: a classifier trained "
                      "on the release does worse than always guessing the most common class")
        rep = report.get("reproducibility")
        if rep is not None and rep["rate"] is not None:
            error = rep["mean_abs_coef_error"]
            print(f"  finding reproduced in {rep['rate']:.0%} of {len(rep['releases'])} release(s)"
                  + (f"; mean |coefficient error| {error:.4f}" if error is not None else ""))
        print(f"  closest-record distance: median {summary['dcr_median']:.4f} (real test rows {report['reference']['dcr_test']['median']:.4f}); "
              f"exact copies {summary['exact_copies']:.2%}")
    published = [f for f in files if f.parent.name == "release"]
    print(f"wrote the release (publishable) {', '.join(str(f) for f in published[:3])}{' ...' if len(published) > 3 else ''}"
          + ("" if report is None else f" and the holder-only report {files[-2].parent}") + f" in {time.perf_counter() - t0:.2f} s")
    args.json_summary = {
        "scenario": scenario.name,
        "files": [str(f) for f in files],
        "privacy": privacy,
        "summary": None if report is None else report["summary"],
        "reproducibility_rate": None if report is None or report.get("reproducibility") is None else report["reproducibility"]["rate"],
    }
    return 0


def privacy_line(privacy: dict) -> str:
    """One line saying what a release's privacy block holds (``release.json``'s ``privacy``).

    The guarantee comes first: epsilon under the accountant the noise was calibrated for
    (``privacy['accountant']``), against an outsider and against the run's colluders.
    The other accountants' bounds on the same noise follow, labelled as such: they are
    looser (above the budget) or (epsilon, delta) readings of a pure-epsilon release, and
    none of them is what the release promises.

    ``epsilon_spent`` is per accountant, or per adversary and then per accountant (a
    Bayesian-network release: ``outsider``, ``colluders`` or ``curator``; None where no
    guarantee holds).
    """
    if "epsilon" not in privacy:
        return "no noise (an exact protocol: the release is as good, and as revealing, as the central non-private fit)"

    def value(v: float | None) -> str:
        return "none" if v is None else f"{v:.4g}"

    spent = privacy.get("epsilon_spent") or {}
    accountant = privacy.get("accountant") or "basic"
    delta = privacy.get("delta")
    what = f"epsilon {privacy['epsilon']} (delta {delta})"
    if not isinstance(spent.get("outsider"), dict):  # one table per accountant, against the run's colluders (older documents)
        spent = {"colluders" if privacy.get("colluders") is not None else "outsider": spent.get("colluders", spent)
                 if isinstance(spent.get("colluders"), dict) else spent}
    pure = accountant == "basic" and not delta
    guarantee = [f"the guarantee ({accountant} accountant{', pure epsilon-DP' if pure else ''}):"]
    others: list[str] = []
    for adversary, table in spent.items():
        if not isinstance(table, dict):
            continue
        who = {"outsider": "an outsider", "colluders": f"{privacy.get('colluders')} colluding members",
               "colluders_worst_placement": f"{privacy.get('colluders')} colluding members placed worst"}.get(adversary, adversary)
        if adversary == "colluders" and not any(v is not None for v in table.values()):
            guarantee.append(f"none against {who} (they see what the noise does not cover; release.json 'excluded' says what)")
            continue
        guarantee.append(f"{value(table.get(accountant))} against {who}")
        rest = ", ".join(f"{k} {value(v)}" for k, v in table.items() if k != accountant and v is not None)
        if rest:
            others.append(f"{rest} against {who}")
    if "curator" in spent:
        guarantee.append("none against the curator (it holds every row)")
    what += "; " + " ".join(guarantee[:1]) + " " + ", ".join(guarantee[1:])
    if others:
        at = f" at delta {privacy['report_delta']:g}" if pure and privacy.get("report_delta") else ""
        what += f"; other accountants' bounds on the same noise{at}, NOT the guarantee: " + "; ".join(others)
    if not privacy.get("differentially_private"):
        what += " -- NOT differentially private: " + privacy.get("note", "see release.json")
    return what


# ---------------------------------------------------------------------------------- deploy


def cmd_deploy_release(args: argparse.Namespace, *, fallback: Callable[[argparse.Namespace], int]) -> int:
    """``p2pem deploy`` for a Bayesian-network release (``[synth] model`` privbayes or hmprivbayes,
    or a kit whose roster names the release); any other scenario or kit goes to ``fallback``."""
    from p2pem.deploy.kit import Kit, deploy_settings, prepare_kit
    from p2pem.deploy.launcher import run_kit
    from p2pem.deploy.roster import Roster
    from p2pem.errors import ConfigError
    from p2pem.scenario import load_scenario, parse_broker_address
    from p2pem.synth.deployed import deploy_release, finish_release, is_release, release_kit, release_protocol

    t0 = time.perf_counter()
    broker = parse_broker_address(args.broker) if args.broker else None
    if args.kit is not None and args.scenario is None:
        kit = Kit.load(args.kit)
        if Roster.load(kit.roster_path).task is None:
            return fallback(args)
        if kit.scenario_file is None or not kit.scenario_file.exists():
            raise ConfigError(f"{kit.root}: the kit's scenario file {kit.scenario_file} is gone; the release document needs it")
        scenario = load_scenario(kit.scenario_file)
        if broker is not None:
            kit = kit.set_broker(*broker)
        release = finish_release(kit, run_kit(kit, start_broker=broker is None), scenario)
    else:
        if args.scenario is None or args.kit is not None:
            return fallback(args)
        scenario = load_scenario(args.scenario)
        if not is_release(scenario):
            return fallback(args)
        if not args.out:
            raise ConfigError("--out DIR is required with a SCENARIO")
        overrides = {k: v for k, v in (("timeout", args.timeout), ("startup_timeout", args.startup_timeout)) if v is not None}
        timeouts, _, configured = deploy_settings(scenario, overrides)
        protocol = release_protocol(scenario, args.protocol)
        if args.prepare_only:
            from p2pem.deploy.broker import free_port

            address = broker or configured or (args.listen, free_port(args.listen))
            kit = prepare_kit(scenario, args.out, broker=address, protocol=protocol, run_id=args.run_id, seeded=args.insecure_reproducible_seed,
                              timeouts=timeouts, tls=args.tls, sites=args.sites, task=release_kit(scenario, protocol),
                              force=args.force)
            print(f"prepared {kit.n_nodes} node kits of a {scenario.synth.get('model')} release for run {kit.run_id} in {kit.root}")
            print(f"start them with: p2pem deploy --kit {kit.root}")
            return 0
        kit, release = deploy_release(scenario, args.out, protocol=protocol, broker=broker, listen=args.listen, run_id=args.run_id,
                                      seeded=args.insecure_reproducible_seed, timeouts=timeouts, tls=args.tls, sites=args.sites,
                                      force=args.force)
    run = release["aggregations"]
    print(f"run {kit.run_id}: {scenario.synth.get('model')} release of {release['training_rows']} rows over {release['n_nodes']} node "
          f"processes, protocol {release['protocol']['name']}, {run['count']} aggregations, {run['messages']} messages; every node agreed")
    print(f"  privacy: {privacy_line(release['privacy'])}")
    if kit.seeded:
        print("  INSECURE: node secrets and the shared seed from the scenario seed (--insecure-reproducible-seed); not private")
    print(f"  wrote {kit.root / 'release' / 'release.json'}, {kit.root / 'release' / 'synthetic.csv'} and {kit.root / 'result.json'} "
          f"in {time.perf_counter() - t0:.2f} s")
    if args.check:
        from p2pem.dp.publication import Publication
        from p2pem.synth.deployed import release_differences
        from p2pem.synth.run import synthesize

        simulated = synthesize(scenario, publication=Publication.insecure(scenario.seed) if kit.seeded else None).release
        differences = release_differences(release, simulated)
        print("same release as `p2pem synth`" if not differences else f"differs from `p2pem synth` in: {', '.join(differences)}"
              + ("" if kit.seeded else " (expected: fresh secrets and a joint seed; --insecure-reproducible-seed reproduces p2pem synth)"))
    return 0
