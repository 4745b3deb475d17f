"""``p2pem synth SCENARIO --out DIR``: private synthetic data with its utility and risk report.

:func:`add_commands` is called by :mod:`p2pem.cli`; like it, this module is allowed to print.
"""

from __future__ import annotations

import argparse
import sys
import time


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the ``synth`` command."""
    p = sub.add_parser(
        "synth",
        help="fit the scenario's synthesizer with its protocol and release synthetic rows with a utility and risk report",
        description="Fit the synthesizer of a scenario whose data has a public schema ([synth] model, default the mixed-type "
        "mixture 'mixture'; 'privbayes' or 'hmprivbayes' for a differentially private Bayesian network with its [bayesnet] "
        "settings) to its training rows spread over the nodes, with one of its protocols ([synth] protocol, default the first; "
        "exact or differentially private), then draw synthetic rows from the fitted model alone.  Writes OUT/synthetic.csv "
        "(header row, the schema's column names, order and types; with --releases R also synthetic-2.csv ... synthetic-R.csv), "
        "OUT/release.json (format p2pem-synth-release: the model, its parameters and provenance: protocol, epsilon spent per "
        "accountant and against how many colluders, seed, what was treated as public) and, when the scenario holds out real "
        "test rows ([data] test or test_fraction), OUT/report.json (format p2pem-synth-report: marginal distances, TSTR, "
        "reproducibility of a named regression, distance to the closest record) and OUT/report.png.  Deterministic for the "
        "scenario's seed; sampling costs no privacy.",
    )
    p.add_argument("scenario", help="scenario TOML file, e.g. scenarios/synth_adult.toml")
    p.add_argument("--out", required=True, help="output folder (created; files are written atomically: all or nothing)")
    p.add_argument("--rows", type=int, default=None, help="rows per release (default [synth] rows, else as many as the training rows)")
    p.add_argument("--releases", type=int, default=None, help="independent releases from the one fitted model (default [synth] releases, else 1)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_synth)


def cmd_synth(args: argparse.Namespace) -> int:
    # here: start-up time (a node process and `p2pem --help` load only what their command needs)
    from p2pem.scenario import load_scenario
    from p2pem.synth.run import synthesize, write_synthesis

    scenario = load_scenario(args.scenario)
    bar = None
    progress = None
    if not args.quiet:
        from tqdm import tqdm  # here: start-up time, as above

        # disable=None: no bar when stderr is not a terminal (logs, CI)
        bar = tqdm(desc="fit", unit="EM it", file=sys.stderr, leave=False, dynamic_ncols=True, disable=None)

        def progress(iteration: int, total: int) -> None:
            bar.total = total
            bar.update(iteration - bar.n)

    t0 = time.perf_counter()
    try:
        result = synthesize(scenario, rows=args.rows, releases=args.releases, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    release = result.release
    privacy = release["privacy"]
    what = privacy_line(privacy)
    title = f"{scenario.name}: {release['model']} fitted with {release['protocol']['name']}"
    files = write_synthesis(args.out, result, title=title)
    family = release.get("family", {}).get("name")
    print(f"scenario {scenario.name}: {release['training_rows']} training rows over {release['n_nodes']} nodes, model {release['model']}"
          + (f" ({family} family)" if family else "") + f", protocol {release['protocol']['name']}")
    print(f"  privacy: {what}")
    report = result.report
    if report is None:
        print("  no report: the scenario holds out no real test rows ([data] test or test_fraction)")
    else:
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
        rep = report.get("reproducibility")
        if rep is not None and rep["rate"] is not None:
            error = rep["mean_abs_coef_error"]
            print(f"  finding reproduced in {rep['rate']:.0%} of {len(rep['releases'])} release(s)"
                  + (f"; mean |coefficient error| {error:.4f}" if error is not None else ""))
        print(f"  closest-record distance: median {summary['dcr_median']:.4f} (real test rows {report['reference']['dcr_test']['median']:.4f}); "
              f"exact copies {summary['exact_copies']:.2%}")
    print(f"wrote {', '.join(str(f) for f in files[:3])}{' ...' if len(files) > 3 else ''} in {time.perf_counter() - t0:.2f} s")
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

    ``epsilon_spent`` is per accountant, or per adversary and then per accountant (a
    Bayesian-network release: ``outsider``, ``colluders`` or ``curator``; None where no
    guarantee holds).
    """
    if "epsilon" not in privacy:
        return "no noise (an exact protocol: the release is as good, and as revealing, as the central non-private fit)"

    def show(table: dict) -> str:
        return ", ".join(f"{k} {v:.4g}" if v is not None else f"{k} none" for k, v in table.items())

    spent = privacy.get("epsilon_spent") or {}
    what = f"epsilon {privacy['epsilon']} (delta {privacy['delta']})"
    if isinstance(spent.get("outsider"), dict):  # per adversary
        what += f", against an outsider per accountant: {show(spent['outsider'])}"
        members = spent.get("colluders")
        if isinstance(members, dict):
            guaranteed = any(v is not None for v in members.values())
            what += f"; against {privacy.get('colluders')} colluding members: " + (
                show(members) if guaranteed else "none (they see what the noise does not cover; release.json 'excluded' says what)")
        elif "curator" in spent:
            what += "; none against the curator (it holds every row)"
    else:
        against = spent.get("colluders", spent) if isinstance(spent.get("colluders"), dict) else spent
        if privacy.get("colluders") is not None:
            what += f", against {privacy['colluders']} colluding nodes per accountant: {show(against)}"
        else:
            what += f", spent per accountant: {show(against)}"
    if not privacy.get("differentially_private"):
        what += " -- NOT differentially private: " + privacy.get("note", "see release.json")
    return what
