"""A newcomer's afternoon, replayed: their own CSV with named sites, fit, leakage, synth, deploy.

The afternoon of issue 31, as a script that stops at the first step that fails: the UCI wine
recognition data (bundled with scikit-learn, 178 rows, 13 features) spread over ten named
hospitals, written as the user's own CSV with a ``hospital`` column, then

1. ``p2pem simulate`` of a scenario over ``node_column = "hospital"`` (pdmm-sp against
   centralized EM), and the same rows fitted from Python with ``node_ids``, with a
   shuffled-columns predict that must raise;
2. ``p2pem leakage`` with two corrupt hospitals named by their names;
3. ``p2pem synth`` of a mixture release under a public schema, over the real parties;
4. ``p2pem deploy`` on loopback (one process per hospital, a Mosquitto broker), whose
   model must equal the simulated one to the consensus tolerance.

Every step checks that the hospital names come back in its output.  Prints one line per
step with its wall time; ``--json PATH`` writes them.  ``--quick`` shortens every run (fewer
EM iterations and Monte Carlo runs; no deployment unless ``--deploy``), which
``tests/test_afternoon.py`` runs.  Not a benchmark: the times depend on the machine.

Usage::

    .venv/bin/python sim/afternoon.py --out /tmp/afternoon            # the whole afternoon
    .venv/bin/python sim/afternoon.py --out /tmp/afternoon --quick    # a minute or so
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HOSPITALS = ("aarhus", "bergen", "cork", "delft", "essen", "faro", "ghent", "hull", "ithaca", "jena")


def write_csv(folder: Path) -> tuple[Path, list[str]]:
    """The user's own CSV: wine rows, a ``hospital`` column naming the site that holds each row."""
    import pandas as pd
    from sklearn.datasets import load_wine

    wine = load_wine(as_frame=True).frame.drop(columns=["target"])
    wine.columns = [c.replace("/", "_") for c in wine.columns]
    hospital = [HOSPITALS[i % len(HOSPITALS)] for i in range(len(wine))]
    frame = pd.concat([pd.Series(hospital, name="hospital"), wine], axis=1)
    path = folder / "wine_sites.csv"
    frame.to_csv(path, index=False)
    return path, list(wine.columns)


def scenario(folder: Path, csv: Path, columns: list[str], *, quick: bool, schema: bool) -> Path:
    """A scenario over the CSV's hospitals; with ``schema`` a public schema (declared ranges: the
    observed range widened by half its width, an assumption, stated as such) for ``synth``."""
    import pandas as pd

    lines = ['name = "wine-sites"', "seed = 5", "", "[data]", 'source = "csv"', f'path = "{csv.name}"', 'node_column = "hospital"']
    if schema:
        frame = pd.read_csv(csv)
        cols = []
        for c in columns:
            low, high = float(frame[c].min()), float(frame[c].max())
            pad = (high - low) / 2
            cols.append(f'  {{ name = "{c}", type = "continuous", low = {max(0.0, low - pad):.4g}, high = {high + pad:.4g} }},')
        lines += ["test_fraction = 0.25", "", "[data.schema]", "columns = [", *cols, "]"]
    else:
        lines.append("standardize = true")
    lines += ["", "[graph]", 'kind = "geometric"', "", "[em]", "n_components = 3", f"max_iter = {8 if quick else 60}"]
    if schema:
        lines.append('family = "gaussian"')
    lines += ["", "[[protocols]]", 'name = "pdmm-sp"']
    if not schema:
        lines += ["", "[[protocols]]", 'name = "centralized"']
    lines += ["", "[leakage]", 'corrupt = ["bergen", "delft"]', "runs = 200"]
    lines += ["", "[synth]", 'protocol = "pdmm-sp"', f"rows = {100 if quick else 178}"]
    path = folder / ("wine_synth.toml" if schema else "wine.toml")
    path.write_text("\n".join(lines) + "\n")
    return path


def p2pem(*args: str) -> str:
    """Run the command line as the user would; its stdout, or exit naming the failed command."""
    done = subprocess.run([sys.executable, "-m", "p2pem", "-q", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"p2pem {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"check failed: {what}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the CSV, the scenarios and every output")
    parser.add_argument("--quick", action="store_true", help="short runs (and no deployment unless --deploy)")
    parser.add_argument("--deploy", action="store_true", help="with --quick: deploy on loopback too")
    parser.add_argument("--json", metavar="PATH", help="write the steps and their wall times as JSON")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps: list[dict[str, object]] = []

    def step(name: str, t0: float, note: str) -> None:
        steps.append({"step": name, "wall_s": round(time.perf_counter() - t0, 2), "note": note})
        print(f"{name:<10} {steps[-1]['wall_s']:>7.2f} s  {note}", flush=True)

    csv, columns = write_csv(out)
    plain = scenario(out, csv, columns, quick=args.quick, schema=False)
    parties = sorted(HOSPITALS)

    t0 = time.perf_counter()
    p2pem("simulate", str(plain), "--out", str(out / "fit"), "--force")
    result = json.loads((out / "fit" / "result.json").read_text())
    check(result.get("parties") == parties, f"result.json names the hospitals (got {result.get('parties')})")
    pdmm = next(r for r in result["protocols"] if r["protocol"] == "pdmm-sp")
    central = next(r for r in result["protocols"] if r["protocol"] == "centralized")
    gap = float(np.max(np.abs(np.array(pdmm["means"]) - np.array(central["means"]))))
    check(gap < 1e-6, f"pdmm-sp equals centralized EM (largest mean difference {gap:.2g})")
    step("simulate", t0, f"{len(parties)} hospitals, pdmm-sp vs centralized: largest mean difference {gap:.1e}")

    t0 = time.perf_counter()
    import pandas as pd
    from p2pem import DistributedGMM

    frame = pd.read_csv(csv)
    X = frame[columns]
    X = (X - X.mean()) / X.std(ddof=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short fit may stop at max_iter: not this step's question
        model = DistributedGMM(n_components=3, max_iter=8 if args.quick else 60, random_state=0).fit(X, node_ids=frame["hospital"])
    check(tuple(model.node_ids_) == tuple(parties), "the API's node_ids_ are the hospitals")
    try:
        model.predict(X[list(reversed(columns))])
    except ValueError:
        refused = True
    else:
        refused = False
    check(refused, "predict on shuffled columns raises")
    step("api", t0, "fit with node_ids = the hospital column; predict on shuffled columns raises")

    t0 = time.perf_counter()
    quick = ["--targets", "aarhus", "--rounds", "4"] if args.quick else []  # one honest hospital, the first rounds
    p2pem("leakage", str(plain), "--out", str(out / "leakage"), "--force", *quick)
    summary = json.loads((out / "leakage" / "summary.json").read_text())
    text = json.dumps(summary)
    check("bergen" in text and "delft" in text, "summary.json names the corrupt hospitals")
    step("leakage", t0, "corrupt = bergen, delft (by name); summary.json names them")

    t0 = time.perf_counter()
    synth = scenario(out, csv, columns, quick=args.quick, schema=True)
    p2pem("synth", str(synth), "--out", str(out / "synth"), "--force")
    release = json.loads((out / "synth" / "release" / "release.json").read_text())
    check(release.get("parties") == parties, f"the release names the {len(parties)} hospitals (got {release.get('parties')})")
    step("synth", t0, f"a release of {release['training_rows']} training rows over the {release['n_nodes']} hospitals")

    if not args.quick or args.deploy:
        t0 = time.perf_counter()
        p2pem("deploy", str(plain), "--out", str(out / "deploy"), "--force")
        deployed = json.loads((out / "deploy" / "result.json").read_text())
        check(deployed.get("parties") == parties, f"the deployment's result.json names the hospitals (got {deployed.get('parties')})")
        means = np.array(next(r for r in deployed["protocols"] if r["protocol"] == "pdmm-sp")["means"])
        gap = float(np.max(np.abs(means - np.array(central["means"]))))
        check(gap < 1e-6, f"the deployed model equals centralized EM (largest mean difference {gap:.2g})")
        step("deploy", t0, f"one process per hospital over a loopback broker; largest mean difference to centralized {gap:.1e}")

    if args.json:
        Path(args.json).write_text(json.dumps({"format": "p2pem-afternoon", "version": 1, "quick": args.quick, "cores":
                                               len(os.sched_getaffinity(0)), "steps": steps}, indent=2) + "\n")
    print("the afternoon ran green")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
