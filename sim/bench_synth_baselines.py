"""Benchmark: the reference numbers of synthetic data on Adult, measured with p2pem's own report.

Reads UCI Adult under its public schema (``data/adult.schema.toml``: 30 162 training rows and
15 060 test rows once rows with a missing value are dropped) and prints the baselines that
issues 20 and 21 quote, computed by ``p2pem.synth.report``:

* the majority class on the test split (the issue quotes 0.754);
* train on real, test on real: logistic regression and linear SVM on one-hot categoricals and
  standardised numerics (the issue quotes 0.848 for logistic regression);
* "sample every column independently from its exact marginal": mean 2-way marginal TVD on
  10 equal-width public bins and TSTR accuracy (the issue quotes 0.072 / 0.754), with the
  TVD that independence costs without sampling noise (product of the exact marginals);
* the real test split against the training split (what a perfect synthesizer would score,
  sampling noise included);
* p2pem's named Adult regression (income on education-num, sex, age, hours-per-week; the paper of Jälkö et al. fits none on Adult) on
  the real data;
* the wall and CPU time of one full report on Adult (one release, 2 000 DCR rows).

As a diagnostic only, the independent baseline's 2-way TVD is also printed on bins over the
rows' observed minimum and maximum (``schema_from_data_NOT_PRIVATE``: not public), to show
how much the number depends on the bins.

Usage::

    .venv/bin/python sim/bench_synth_baselines.py
    .venv/bin/python sim/bench_synth_baselines.py --json results/synth_baselines.json --figure /tmp/report.png

Not a test: nothing is asserted, timings depend on the machine and its load (printed next to
them).  BLAS runs on one thread inside the report.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from pathlib import Path

from _common import print_table

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(ROOT / "data"), help="folder with adult.data, adult.test, adult.schema.toml")
    parser.add_argument("--seed", type=int, default=0, help="seed of the independent baseline's draws and the DCR sample")
    parser.add_argument("--json", metavar="PATH", default=str(ROOT / "results" / "synth_baselines.json"),
                        help="write the numbers here (default results/synth_baselines.json)")
    parser.add_argument("--figure", metavar="PATH", help="also draw the independent baseline's report here (PNG)")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    import numpy as np

    from p2pem.files import write_json
    from p2pem.synth import ADULT_INCOME_REGRESSION, report_figure, synth_report
    from p2pem.synth.metrics import marginal_tvds, tvd
    from p2pem.synth.models import require
    from p2pem.tabular import Continuous, Schema, Table, discretize, domain_sizes, load_schema, read_table, schema_from_data_NOT_PRIVATE

    require("sklearn.linear_model")
    require("statsmodels.api")
    import_s = time.perf_counter() - t0

    data = Path(args.data)
    schema = load_schema(data / "adult.schema.toml")
    t0 = time.perf_counter()
    train = read_table(data / "adult.data", schema)
    test = read_table(data / "adult.test", schema)
    read_s = time.perf_counter() - t0
    print(f"Adult: {train.n_rows} training rows ({train.n_dropped} dropped for a missing value), "
          f"{test.n_rows} test rows ({test.n_dropped} dropped); read in {read_s:.2f} s")
    print(f"cpus available: {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f} "
          f"(shared machine: timings are indicative); imports {import_s:.2f} s")

    rng = np.random.default_rng(args.seed)
    independent = Table.from_blocks(
        schema,
        np.column_stack([rng.choice(column, size=train.n_rows) for column in train.continuous.T]),
        np.column_stack([rng.choice(column, size=train.n_rows) for column in train.codes.T]),
    )
    c0, t0 = time.process_time(), time.perf_counter()
    report = synth_report(train, test, independent, rng=rng, target="income", regression=ADULT_INCOME_REGRESSION, three_way=True)
    report_wall, report_cpu = time.perf_counter() - t0, time.process_time() - c0
    c0, t0 = time.process_time(), time.perf_counter()
    synth_report(train, test, independent, rng=rng, target="income", three_way=False)
    plain_wall, plain_cpu = time.perf_counter() - t0, time.process_time() - c0

    sizes = domain_sizes(schema)
    binned = discretize(train)
    product_tvds = []
    for a, b in itertools.combinations(range(len(sizes)), 2):
        joint = np.bincount(binned[:, a] * sizes[b] + binned[:, b], minlength=sizes[a] * sizes[b])
        pa = np.bincount(binned[:, a], minlength=sizes[a]) / train.n_rows
        pb = np.bincount(binned[:, b], minlength=sizes[b]) / train.n_rows
        product_tvds.append(tvd(joint, np.outer(pa, pb).ravel()))

    # diagnostic, not public: the same rows on bins over the observed min..max of each numeric column
    suggested = schema_from_data_NOT_PRIVATE(data / "adult.data", header=False, names=schema.names, missing=("?",))
    observed = Schema(
        tuple(o if isinstance(o, Continuous) else s for o, s in zip(suggested.columns, schema.columns, strict=True)),
        schema.csv, public=False,
    )
    _, observed_tvds = marginal_tvds(
        discretize(Table(observed, train.continuous, train.codes)),
        discretize(Table(observed, independent.continuous, independent.codes)),
        domain_sizes(observed), 2,
    )

    reference, release = report["reference"], report["releases"][0]
    real = report["reproducibility"]["real"]
    rows = [
        ["majority class on the test split", f"{reference['majority_class']:.4f}", "0.754"],
        ["train on real: logistic regression", f"{reference['train_on_real']['logistic']['accuracy']:.4f}", "0.848"],
        ["train on real: linear SVM", f"{reference['train_on_real']['svm']['accuracy']:.4f}", ""],
        ["independent marginals: 2-way TVD", f"{release['marginals']['2way']['mean']:.4f}", "0.072"],
        ["independent marginals: 2-way TVD without sampling noise", f"{np.mean(product_tvds):.4f}", ""],
        ["independent marginals: 3-way TVD", f"{release['marginals']['3way']['mean']:.4f}", ""],
        ["independent marginals: TSTR logistic regression", f"{release['tstr']['logistic']['accuracy']:.4f}", "0.754"],
        ["independent marginals: TSTR linear SVM", f"{release['tstr']['svm']['accuracy']:.4f}", ""],
        ["independent marginals: regression finding reproduced", f"{report['reproducibility']['rate']:.0%}", ""],
        ["independent marginals: DCR median / test rows' DCR median",
         f"{release['dcr']['median']:.3f} / {reference['dcr_test']['median']:.3f}", ""],
        ["real test split vs train: 2-way TVD", f"{reference['test_vs_train']['marginals']['2way']['mean']:.4f}", ""],
        ["real test split vs train: 3-way TVD", f"{reference['test_vs_train']['marginals']['3way']['mean']:.4f}", ""],
        ["real test rows that copy a training row", f"{reference['dcr_test']['exact_copies']:.2%}", ""],
        ["(not public) independent 2-way TVD, bins over observed min..max",
         f"{observed_tvds.mean():.4f}", ""],
    ]
    print()
    print_table(["Adult baseline (10 equal-width public bins)", "measured", "issue quotes"], rows)
    print("\nthe named regression on the real training rows (continuous predictors standardised):")
    print_table(["coefficient", "value", "p-value"],
                [[k, f"{v:+.4f}", f"{real['p_values'][k]:.1e}"] for k, v in real["coefficients"].items()])
    print(f"\nreport on Adult (1 release, 2 000 DCR rows): {report_wall:.2f} s wall, {report_cpu:.2f} s CPU "
          f"with 3-way marginals and the regression; {plain_wall:.2f} s wall, {plain_cpu:.2f} s CPU without")

    result = {
        "format": "p2pem-bench-synth-baselines",
        "version": 1,
        "seed": args.seed,
        "rows": {"train": train.n_rows, "train_dropped": train.n_dropped, "test": test.n_rows, "test_dropped": test.n_dropped},
        "n_bins": 10,
        "majority_class": reference["majority_class"],
        "train_on_real": {m: v["accuracy"] for m, v in reference["train_on_real"].items()},
        "independent_marginals": {
            "2way_tvd": release["marginals"]["2way"]["mean"],
            "2way_tvd_expected": float(np.mean(product_tvds)),
            "3way_tvd": release["marginals"]["3way"]["mean"],
            "tstr": {m: v["accuracy"] for m, v in release["tstr"].items()},
            "reproducibility_rate": report["reproducibility"]["rate"],
            "dcr_median": release["dcr"]["median"],
            "2way_tvd_observed_range_bins_not_public": float(observed_tvds.mean()),
        },
        "test_vs_train": {
            "2way_tvd": reference["test_vs_train"]["marginals"]["2way"]["mean"],
            "3way_tvd": reference["test_vs_train"]["marginals"]["3way"]["mean"],
            "dcr_median": reference["dcr_test"]["median"],
            "exact_copies": reference["dcr_test"]["exact_copies"],
        },
        "regression_real": real,
        "timing_s": {
            "imports": import_s,
            "read": read_s,
            "report_wall": report_wall,
            "report_cpu": report_cpu,
            "report_plain_wall": plain_wall,
            "report_plain_cpu": plain_cpu,
            "load_average": os.getloadavg()[0],
        },
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    write_json(args.json, result)
    print(f"\nwrote {args.json}")
    if args.figure:
        report_figure(report, args.figure, title="Adult: every column sampled independently from its marginal")
        print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
