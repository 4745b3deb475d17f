"""Benchmark: how the whole-run attack's cost grows with rows, features, nodes and EM iterations.

The attack (``p2pem leakage --whole-run``) fits every disclosed group's rows by nonlinear
least squares; each trust-region step is one SVD of a Jacobian of (sums observed) x (rows x
features), so its cost grows with the cube of the problem, not linearly.  For synthetic
scenarios along each axis this prints the estimate p2pem makes before attacking
(:func:`p2pem.leakage.wholerun_analysis.estimate_whole_run`, priced by one SVD timed in the same
run) and, for the smallest ones, the measured attack time and their ratio (the estimate prices
the SVDs alone, which dominate large attacks; small ones are dominated by fixed costs it leaves
out, so there the ratio is well above 1).  Last, the estimate for a user's scenario of
10 nodes, 178 rows and 13 features (the wine data's shape) with the default iterations seen,
which ``--whole-run`` refuses past ``[leakage.whole_run] max_minutes``.

Usage::

    .venv/bin/python sim/bench_wholerun_scaling.py            # quick (a few minutes on a loaded machine)
    .venv/bin/python sim/bench_wholerun_scaling.py --json out/wholerun_scaling.json

Not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import print_table  # noqa: E402

from p2pem.leakage.wholerun_analysis import analyse_whole_run, estimate_whole_run, parse_whole_run  # noqa: E402
from p2pem.scenario import load_scenario  # noqa: E402

SCENARIO = """\
name = "scaling"
seed = 1
[data]
source = "synthetic"
n_samples = {rows}
n_features = {features}
n_components = 2
[graph]
kind = "geometric"
n_nodes = {nodes}
radius = 0.8
[em]
n_components = 2
max_iter = {iterations}
tol = 0.0
[[protocols]]
name = "pdmm-sp"
[leakage]
corrupt = [1]
[leakage.whole_run]
adversary = ["honest-but-curious"]
iterations_seen = {seen}
max_minutes = 1e9
"""


def scenario(folder: Path, *, rows: int, features: int, nodes: int, iterations: int, seen: list[int] | None = None):
    path = folder / f"s-{rows}-{features}-{nodes}-{iterations}.toml"
    path.write_text(SCENARIO.format(rows=rows, features=features, nodes=nodes, iterations=iterations, seen=seen or [0, iterations]))
    return load_scenario(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the numbers here")
    parser.add_argument("--measure-up-to", type=float, default=20.0, help="run the attack where the estimate is below this many seconds")
    args = parser.parse_args()
    base = {"rows": 40, "features": 2, "nodes": 4, "iterations": 2}
    axes = {"rows": [40, 80, 160], "features": [2, 4, 8], "nodes": [4, 8, 16], "iterations": [2, 4, 8]}
    rows, out = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for axis, values in axes.items():
            for value in values:
                sc = scenario(Path(tmp), **{**base, axis: value})
                est = sum(estimate_whole_run(sc).values())
                measured = None
                if est <= args.measure_up_to:
                    report = analyse_whole_run(sc, parse_whole_run(sc))
                    measured = sum(p["attack_s"] for p in report.protocols)
                out.append({"axis": axis, **base, axis: value, "estimate_s": est, "measured_s": measured})
                rows.append([axis, str(value), f"{est:.3g}", "-" if measured is None else f"{measured:.3g}",
                             "-" if measured is None or est == 0 else f"{measured / est:.2f}"])
        wine = scenario(Path(tmp), rows=178, features=13, nodes=10, iterations=100, seen=[0, 1, 2, 5, 10, 20, 50, 100])
        est = sum(estimate_whole_run(wine).values())
        out.append({"axis": "user scenario", "rows": 178, "features": 13, "nodes": 10, "iterations": 100, "estimate_s": est, "measured_s": None})
        rows.append(["178 rows, 13 features, 10 nodes, 100 its", "", f"{est:.3g}", "-", "-"])
    print_table(["axis", "value", "estimate s", "measured s", "measured / estimate"], rows)
    print(f"the user's scenario: about {est / 3600:.1f} h of SVDs estimated: --whole-run refuses it past max_minutes "
          "and suggests fewer iterations seen or features")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
