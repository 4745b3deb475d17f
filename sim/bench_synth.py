"""Benchmark: private synthetic Adult from the mixture synthesizer, utility against epsilon.

Fits ``scenarios/synth_adult.toml``'s mixed-type mixture (30 162 training rows over 100
nodes) with ``dp-central`` and with ``dp-distributed`` over ``pdmm-sp`` at every epsilon of
``--epsilons`` (``inf``: no noise), plus the exact private protocol ``pdmm-sp`` itself, and
prints per run:

* TSTR accuracy: a logistic regression (one-hot categoricals, standardised numerics) trained on
  one synthetic release and tested on the 15 060 real test rows (train on real: 0.848; the
  majority class: 0.754);
* the mean TVD of all 2-way marginals against the training rows (numeric columns on 10
  equal-width public bins; real test rows: 0.016, independent columns: 0.072);
* the reproducibility rate of p2pem's Adult regression (income on education-num, sex, age and
  hours-per-week: every coefficient's sign and significance as on the real data) over
  ``--releases`` releases drawn from the one fitted model (sampling noise only: Jälkö et al.'s
  protocol over independent fits is ``sim/reproduce/jalko.py``), and the mean absolute
  coefficient error;
* the fit's and the evaluation's wall time.

``--sweep`` instead measures the modelling choices behind the scenario's defaults with
``dp-central`` (fast; the noise is the same as dp-distributed's): components per income class,
EM iterations, which numeric columns are binned, and the budget split, each against epsilon.

Usage::

    .venv/bin/python sim/bench_synth.py                      # the epsilon table (< 5 min on 2 cores)
    .venv/bin/python sim/bench_synth.py --figure docs/synth_epsilon.png --markdown docs/generated/synth_bench.md
    .venv/bin/python sim/bench_synth.py --sweep --seeds 3 --markdown docs/generated/synth_sweep.md

Writes a versioned JSON (``format = "p2pem-bench-synth"``).  Not a test: nothing is asserted;
timings depend on the machine and its load.  BLAS runs on one thread in the evaluation.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from _common import print_table

ROOT = Path(__file__).resolve().parents[1]
FORMAT = ("p2pem-bench-synth", 1)
ALL_NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")


def variant(scenario, *, protocol: dict[str, Any] | None = None, per_class: int | None = None, max_iter: int | None = None,
            binned: tuple[str, ...] | None = None, atoms: tuple | None = None, stratify: bool = True):
    """The scenario with one protocol and other modelling choices (``per_class``: components per income class)."""
    from p2pem.scenario import ProtocolConfig

    data, em = scenario.data, scenario.em
    if binned is not None:
        data = dataclasses.replace(data, binned=binned, atoms=tuple(a for a in data.atoms if a[0] in binned))
    if atoms is not None:
        data = dataclasses.replace(data, atoms=atoms)
    family = data.encoding.family(covariance=em.family.covariance, stratify="income" if stratify else None)
    k = em.n_components if per_class is None else per_class * 2
    em = dataclasses.replace(em, family=family, n_components=k, max_iter=max_iter or em.max_iter)
    protocols = scenario.protocols
    if protocol is not None:
        params = dict(protocol)
        name = params.pop("name")
        protocols = (ProtocolConfig(name, params),)
    return dataclasses.replace(scenario, data=data, em=em, protocols=protocols)


def evaluate(scenario, train, test, n_releases: int) -> dict[str, Any]:
    """Fit, draw ``n_releases`` releases, and measure them (module docstring)."""
    import numpy as np

    from p2pem.builders import build_protocols
    from p2pem.dp.publication import Publication
    from p2pem.streams import synth_child
    from p2pem.synth import ADULT_INCOME_REGRESSION
    from p2pem.synth.metrics import marginal_tvds
    from p2pem.synth.models import reproducibility, single_threaded, tstr_accuracy
    from p2pem.synth.registry import SYNTHESIZERS
    from p2pem.tabular import discretize, domain_sizes

    synthesizer = SYNTHESIZERS["mixture"]
    t0 = time.perf_counter()
    # a benchmark: reproducible numpy noise from the scenario seed (not a publication; sim/bench_noise.py
    # measures what a publication's OpenDP noise costs)
    release = synthesizer.fit(scenario, build_protocols(scenario)[0], publication=Publication.insecure(scenario.seed))
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    tables = [synthesizer.sample(release, train.n_rows, np.random.default_rng(synth_child(scenario.seed, 0, r))) for r in range(n_releases)]
    with single_threaded():
        tstr = tstr_accuracy(tables[0], test, "income")["accuracy"]
        _, tvds = marginal_tvds(discretize(train), discretize(tables[0]), domain_sizes(train.schema), 2)
        rep = reproducibility(train, tables, ADULT_INCOME_REGRESSION) if n_releases > 1 else None
    spent = release["privacy"].get("epsilon_spent") or {}
    return {
        "protocol": release["protocol"]["name"],
        "epsilon": release["privacy"].get("epsilon"),
        "epsilon_spent_rdp": spent.get("rdp") if isinstance(spent, dict) else None,
        "n_components": scenario.em.n_components,
        "max_iter": scenario.em.max_iter,
        "binned": list(scenario.data.binned),
        "split": release["protocol"]["params"].get("split"),
        "stratified": scenario.em.family.stratify is not None,
        "tstr_logistic": tstr,
        "tvd_2way_mean": float(tvds.mean()),
        "reproducibility_rate": None if rep is None else rep["rate"],
        "mean_abs_coef_error": None if rep is None else rep["mean_abs_coef_error"],
        "n_releases": n_releases,
        "fit_s": fit_s,
        "eval_s": time.perf_counter() - t0,
    }


def dp(name: str, epsilon: float, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "epsilon": epsilon, "delta": 1e-5, **extra}
    if name == "dp-distributed":
        out["aggregation"] = "pdmm-sp"
    return out


def epsilon_table(scenario, train, test, epsilons: list[float], n_releases: int) -> list[dict[str, Any]]:
    runs = []
    for name in ("dp-central", "dp-distributed"):
        for eps in epsilons:
            runs.append(evaluate(variant(scenario, protocol=dp(name, eps)), train, test, n_releases))
            _print_progress(runs[-1])
    runs.append(evaluate(variant(scenario, protocol={"name": "pdmm-sp"}), train, test, n_releases))
    _print_progress(runs[-1])
    return runs


def sweep(scenario, train, test, epsilons: list[float], n_seeds: int) -> list[dict[str, Any]]:
    """The modelling choices against epsilon, with dp-central (module docstring); each cell the mean over
    ``n_seeds`` scenario seeds (data split, initialisation, noise and sampling all change)."""
    import numpy as np

    runs = []
    base = {"per_class": scenario.em.n_components // 2, "max_iter": scenario.em.max_iter, "binned": scenario.data.binned}
    grid: list[dict[str, Any]] = [
        {},
        *({"per_class": k} for k in (2, 10, 20)),
        *({"max_iter": t} for t in (10, 20)),
        {"atoms": ()},
        {"binned": ("education-num", "hours-per-week")},
        {"binned": ()},
        {"split": "equal"},
        {"stratify": False},
    ]
    for change in grid:
        settings = {**base, **change}
        split = settings.pop("split", None)
        for eps in epsilons:
            extra = {"split": split} if split is not None else {}
            seeded = [
                evaluate(variant(dataclasses.replace(scenario, seed=scenario.seed + s), protocol=dp("dp-central", eps, **extra), **settings),
                         train, test, 1)
                for s in range(n_seeds)
            ]
            run = {**seeded[0], "seeds": n_seeds, "change": {k: list(v) if isinstance(v, tuple) else v for k, v in change.items()}}
            for key in ("tstr_logistic", "tvd_2way_mean", "fit_s"):
                values = [r[key] for r in seeded]
                run[key], run[f"{key}_sd"] = float(np.mean(values)), float(np.std(values))
            runs.append(run)
            _print_progress(run)
    return runs


def _print_progress(run: dict[str, Any]) -> None:
    eps = "inf" if run["epsilon"] is None or (isinstance(run["epsilon"], float) and math.isinf(run["epsilon"])) else run["epsilon"]
    print(f"  {run['protocol']:<24} eps {eps!s:>5}  K {run['n_components']:>3}  T {run['max_iter']:>3}  TSTR {run['tstr_logistic']:.4f}  "
          f"TVD {run['tvd_2way_mean']:.4f}  fit {run['fit_s']:.1f} s", flush=True)


def figure(runs: list[dict[str, Any]], path: str) -> None:
    """TSTR accuracy and mean 2-way TVD against epsilon, one line per protocol."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    finite = sorted({r["epsilon"] for r in runs if r["epsilon"] is not None and math.isfinite(r["epsilon"])})
    inf_x = finite[-1] * 4 if finite else 1.0
    for key, ax, label in (("tstr_logistic", axes[0], "TSTR accuracy (logistic regression)"), ("tvd_2way_mean", axes[1], "mean 2-way marginal TVD")):
        labels = {"dp-central-gaussian": "dp-central", "dp-pdmm-sp-gaussian": "dp-distributed over pdmm-sp (tolerates n/2 colluders)"}
        for protocol, style in (("dp-central-gaussian", "o-"), ("dp-pdmm-sp-gaussian", "s--")):
            rows = sorted((r for r in runs if r["protocol"] == protocol), key=lambda r: r["epsilon"] if r["epsilon"] is not None else math.inf)
            xs = [inf_x if r["epsilon"] is None or math.isinf(r["epsilon"]) else r["epsilon"] for r in rows]
            ax.plot(xs, [r[key] for r in rows], style, label=labels[protocol])
        exact = next((r for r in runs if r["protocol"] == "pdmm-sp"), None)
        if exact is not None:
            ax.axhline(exact[key], color="tab:green", linestyle=":", label="pdmm-sp (exact, no noise)")
        if key == "tstr_logistic":
            ax.axhline(0.8477, color="black", linewidth=0.8, label="train on real 0.848")
            ax.axhline(0.7543, color="tab:red", linewidth=0.8, linestyle="--", label="majority class 0.754")
        else:
            ax.axhline(0.0715, color="tab:red", linewidth=0.8, linestyle="--", label="independent columns 0.072")
            ax.axhline(0.0160, color="black", linewidth=0.8, label="real test rows 0.016")
        ax.set_xscale("log")
        ax.set_xticks([*finite, inf_x], [f"{v:g}" for v in finite] + ["inf"])
        ax.set_xlabel("epsilon (delta = 1e-5)")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Adult: mixture synthesizer over 100 nodes, utility against epsilon")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def markdown(runs: list[dict[str, Any]], path: str, *, sweep: bool, wall: float) -> None:
    """The runs as the Markdown table the docs include (``docs/synthetic.md``)."""

    def eps(r: dict[str, Any]) -> str:
        return "inf" if r["epsilon"] is None or math.isinf(r["epsilon"]) else f"{r['epsilon']:g}"

    if sweep:
        lines = ["| change from the defaults | " + " | ".join(f"ε = {e}" for e in dict.fromkeys(eps(r) for r in runs)) + " |"]
        lines.append("|---|" + "---|" * len(dict.fromkeys(eps(r) for r in runs)))
        for change in dict.fromkeys(repr(r["change"]) for r in runs):
            cells = [f"{r['tstr_logistic']:.3f} / {r['tvd_2way_mean']:.3f}" for r in runs if repr(r["change"]) == change]
            label = ", ".join(f"{k} = {v}" for k, v in runs[[repr(r["change"]) for r in runs].index(change)]["change"].items()) or "(the defaults)"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        seeds = runs[0].get("seeds", 1)
        spread = max(r["tvd_2way_mean_sd"] for r in runs) if seeds > 1 else None
        intro = (f"TSTR accuracy / mean 2-way TVD of one release, dp-central, mean over {seeds} seed{'s' if seeds > 1 else ''}"
                 + (f" (largest standard deviation of a TVD cell: {spread:.3f})" if spread is not None else "")
                 + "; defaults: 5 components per income class, 5 iterations, all six numeric columns binned with the atoms 0 (capital gain "
                 "and loss) and 40 (hours), split `mixed`, stratified by income")
    else:
        lines = ["| protocol | ε | TSTR (logistic) | mean 2-way TVD | reproduced (of 20) | mean abs. coef. error | fit s |",
                 "|---|---|---|---|---|---|---|"]
        for r in runs:
            rate = "-" if r["reproducibility_rate"] is None else f"{r['reproducibility_rate']:.2f}"
            err = "-" if r["mean_abs_coef_error"] is None else f"{r['mean_abs_coef_error']:.3f}"
            lines.append(f"| {r['protocol']} | {eps(r)} | {r['tstr_logistic']:.4f} | {r['tvd_2way_mean']:.4f} | {rate} | {err} | {r['fit_s']:.1f} |")
        intro = (f"Adult, 30 162 training rows over 100 nodes; train on real 0.848, majority class 0.754; TVD of the real test "
                 f"rows 0.016, of independent columns 0.072; whole table {wall:.0f} s wall")
    text = f"<!-- written by sim/bench_synth.py --markdown; do not edit -->\n{intro}:\n\n" + "\n".join(lines) + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "synth_adult.toml"))
    parser.add_argument("--epsilons", default="0.1,0.4,1.6,6.4,inf", help="comma-separated (inf: no noise)")
    parser.add_argument("--releases", type=int, default=20, help="releases per fit for the reproducibility rate (default 20)")
    parser.add_argument("--sweep", action="store_true", help="measure the modelling choices instead (dp-central)")
    parser.add_argument("--seeds", type=int, default=1, help="--sweep: scenario seeds per cell (default 1)")
    parser.add_argument("--json", metavar="PATH", help="write the runs here (default results/synth_bench.json or results/synth_sweep.json)")
    parser.add_argument("--figure", metavar="PATH", help="draw TSTR and TVD against epsilon here (PNG)")
    parser.add_argument("--markdown", metavar="PATH", help="write the table the docs include here (docs/generated/synth_bench.md, synth_sweep.md)")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    from p2pem.builders import load_tables
    from p2pem.files import write_json
    from p2pem.runner import output_header
    from p2pem.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    train, test = load_tables(scenario)
    assert test is not None
    epsilons = [float(v) for v in args.epsilons.split(",")]
    print(f"Adult: {train.n_rows} training rows over {scenario.graph.n_nodes} nodes, {test.n_rows} test rows")
    runs = sweep(scenario, train, test, epsilons, args.seeds) if args.sweep else epsilon_table(scenario, train, test, epsilons, args.releases)
    wall = time.perf_counter() - t0

    headers = ["protocol", "epsilon", "K", "T", "binned", "split", "TSTR", "2-way TVD", "reproduced", "|coef err|", "fit s"]
    rows = [
        [
            r["protocol"], "inf" if r["epsilon"] is None or math.isinf(r["epsilon"]) else f"{r['epsilon']:g}", r["n_components"], r["max_iter"],
            len(r["binned"]), r["split"] or "-", f"{r['tstr_logistic']:.4f}", f"{r['tvd_2way_mean']:.4f}",
            "-" if r["reproducibility_rate"] is None else f"{r['reproducibility_rate']:.2f}",
            "-" if r["mean_abs_coef_error"] is None else f"{r['mean_abs_coef_error']:.3f}", f"{r['fit_s']:.1f}",
        ]
        for r in runs
    ]
    print()
    print_table(headers, rows)
    print(f"\nwhole {'sweep' if args.sweep else 'table'}: {wall:.0f} s wall (train on real 0.848, majority class 0.754; "
          "TVD of real test rows 0.016, of independent columns 0.072)")
    path = args.json or str(ROOT / "results" / ("synth_sweep.json" if args.sweep else "synth_bench.json"))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {**output_header(FORMAT, scenario), "sweep": args.sweep, "releases": args.releases, "wall_s": wall, "runs": runs})
    print(f"wrote {path}")
    if args.figure:
        figure(runs, args.figure)
        print(f"wrote {args.figure}")
    if args.markdown:
        markdown(runs, args.markdown, sweep=args.sweep, wall=wall)
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
