"""Reproduction: HMPrivBayes (张小玉, 沈国华, 杨阳, 计算机系统应用 2022) against PrivBayes on Adult.

The paper (seed 003) claims HMPrivBayes releases Adult with a lower alpha-way AVD and a lower
SVM misclassification rate than PrivBayes at every epsilon (Sec. 4.3, Fig. 5).  This script
releases Adult's 30 162 training rows centrally with

* ``PrivBayes``: p2pem's PrivBayes (R score, theta-usefulness, the projection);
* ``HMPrivBayes``: the paper's steps as p2pem builds them (DPSC on eps_1 with one Laplace
  draw of eps_1 / m per attribute pair, spectral clustering into 2 groups, one network per
  group with its root by the exponential mechanism on entropy, eq. (9) pruning, noise
  weighted by e^(-OE_j)), every release paid from one epsilon (sequential composition);

and three ablations that say where the difference comes from:

* ``HMPrivBayes, paper's composition``: every cluster spends the whole eps_2 and eps_3, as
  eqs. (10) and (12) print them (parallel composition over column blocks, which is not DP:
  its real cost, from the ledger, is in the JSON);
* ``HMPrivBayes, exact clusters for free``: the clusters from the exact similarity matrix,
  not paid (not DP; the clustering's noise removed);
* ``HMPrivBayes, one network``: no clustering (roots by entropy, entropy-weighted noise).

Each release is judged by the 2-way AVD on the 10 public bins (against the training rows)
and the TSTR error of a logistic regression (trained on the release, tested on the 15 060
real test rows).  The randomness of this study (the releases' noise, sampling) comes from
the study's seeds: these are measurements, not publications.

Usage::

    .venv/bin/python sim/reproduce/hmprivbayes.py            # 5 seeds x 5 epsilons, ~10 minutes on 2 cores
    .venv/bin/python sim/reproduce/hmprivbayes.py --quick    # 2 seeds x 3 epsilons, ~2 minutes

Writes ``docs/generated/reproduce_hmprivbayes.json`` (the reproductions page's format).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _document import finish  # noqa: E402
EPSILONS = (0.1, 0.2, 0.4, 0.8, 1.6)
QUICK_EPSILONS = (0.1, 0.8, 1.6)
PAPER = ("张小玉, 沈国华, 杨阳. 基于属性分割的差分隐私异构多属性数据发布 (HMPrivBayes: heterogeneous multi-attribute "
         "private data publishing via Bayesian networks). 计算机系统应用 (Computer Systems & Applications), 2022, 31(10): 225-235.")
VARIANTS = ("PrivBayes", "HMPrivBayes", "HMPrivBayes, paper's composition", "HMPrivBayes, exact clusters for free", "HMPrivBayes, one network")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"2 seeds at epsilon {', '.join(map(str, QUICK_EPSILONS))} (a test runs this)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per (variant, epsilon); default 5 (2 with --quick)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=None, help=f"default {' '.join(map(str, EPSILONS))}")
    parser.add_argument("--data", default=str(ROOT / "data"), help="folder with adult.data, adult.test, adult.schema.toml")
    parser.add_argument("--theta", type=float, default=8.0, help="theta-usefulness for every variant (bench_bayesnet's 8)")
    parser.add_argument("--beta", type=float, default=0.2, help="structure share eps_2 / eps for every variant (bench_bayesnet's 0.2)")
    parser.add_argument("--rows-only", action="store_true", help="no fits: rebuild the rows from the results already in --json")
    parser.add_argument("--json", metavar="PATH", default=str(ROOT / "docs" / "generated" / "reproduce_hmprivbayes.json"))
    args = parser.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 5)
    epsilons = tuple(args.epsilons) if args.epsilons else (QUICK_EPSILONS if args.quick else EPSILONS)

    import numpy as np

    from p2pem.bayesnet import BayesNetSettings, BayesNetTask, sample_networks
    from p2pem.bayesnet.cluster import spectral_clusters
    from p2pem.bayesnet.counts import joint_counts
    from p2pem.bayesnet.scores import normalized_mi
    from p2pem.synth.metrics import marginal_tvds
    from p2pem.synth.models import require, single_threaded, tstr_accuracy
    from p2pem.task import drive
    from p2pem.tabular import discretize, domain_sizes, load_schema, read_table, undiscretize

    require("sklearn.linear_model")
    data = Path(args.data)
    schema = load_schema(data / "adult.schema.toml")
    train = read_table(data / "adult.data", schema)
    test = read_table(data / "adult.test", schema)
    n_bins = 10
    sizes = domain_sizes(schema, n_bins)
    binned = discretize(train, n_bins)
    d = len(sizes)

    # the ablation's clusters: spectral clustering of the exact similarity matrix (not private)
    exact = np.zeros((d, d))
    for i in range(d):
        for j in range(i + 1, d):
            exact[i, j] = exact[j, i] = normalized_mi(joint_counts(binned, (i, j), sizes)[0].reshape(sizes[i], sizes[j]))
    free_clusters = tuple(spectral_clusters(exact, 2, np.random.default_rng(0)))

    def settings_of(variant: str, eps: float) -> BayesNetSettings:
        common = {"epsilon": eps, "theta": args.theta, "beta": args.beta}
        if variant == "PrivBayes":
            return BayesNetSettings(model="privbayes", **common)
        hm = {"model": "hmprivbayes", "n_clusters": 2, **common}
        if variant == "HMPrivBayes, paper's composition":
            return BayesNetSettings(composition="paper", **hm)
        if variant == "HMPrivBayes, exact clusters for free":
            return BayesNetSettings(clusters=free_clusters, **hm)
        if variant == "HMPrivBayes, one network":
            return BayesNetSettings(clustering=False, **hm)
        return BayesNetSettings(**hm)

    t_start = time.perf_counter()
    results = []
    if args.rows_only:
        previous = json.loads(Path(args.json).read_text(encoding="utf-8"))
        results, seeds, t_start = previous["results"], previous["seeds"], t_start - previous["wall_s"]
        epsilons = tuple(sorted({r["epsilon"] for r in results}))
    with single_threaded():
        for eps in () if args.rows_only else epsilons:
            for variant in VARIANTS:
                for seed in range(seeds):
                    settings = settings_of(variant, eps)
                    task = BayesNetTask([binned], sizes, settings, 1, shared=np.random.SeedSequence([30, seed]),
                                        secrets=[np.random.SeedSequence([31, seed])])
                    drive(task, lambda it, v: v)
                    rng = np.random.default_rng([32, seed])
                    synthetic = sample_networks(task.networks, train.n_rows, rng)
                    _, tvds = marginal_tvds(binned, synthetic, sizes, 2)
                    table = undiscretize(schema, synthetic, n_bins=n_bins, rng=rng)
                    accuracy = tstr_accuracy(table, test, "income", model="logistic")["accuracy"]
                    results.append({"variant": variant, "epsilon": eps, "seed": seed, "avd2": float(tvds.mean()), "tstr_error": 1.0 - accuracy,
                                    "epsilon_spent": task.ledger.epsilon(), "clusters": [list(c) for c in task.clusters]})
                print(f"  eps {eps:<4} {variant}: done ({time.perf_counter() - t_start:.0f} s)", file=sys.stderr, flush=True)

    def values(variant: str, eps: float, key: str) -> list[float]:
        return [r[key] for r in results if r["variant"] == variant and r["epsilon"] == eps]

    def mean(variant: str, eps: float, key: str) -> float:
        return float(np.mean(values(variant, eps, key)))

    def beats(key: str, eps: float) -> bool:
        """HMPrivBayes below PrivBayes by more than twice the standard error of the difference of the means."""
        a, b = values("HMPrivBayes", eps, key), values("PrivBayes", eps, key)
        se = math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)) if min(len(a), len(b)) > 1 else 0.0
        return float(np.mean(b) - np.mean(a)) > 2 * se

    table = {v: {f"{e:g}": {k: mean(v, e, k) for k in ("avd2", "tstr_error", "epsilon_spent")} for e in epsilons} for v in VARIANTS}
    hm_wins_avd = [e for e in epsilons if beats("avd2", e)]
    hm_wins_tstr = [e for e in epsilons if beats("tstr_error", e)]
    majority = 1.0 - float(np.mean(test.column("income") == int(np.bincount(train.column("income")).argmax())))

    def row(variant: str, key: str) -> str:
        return ", ".join(f"{table[variant][f'{e:g}'][key]:.3f}" for e in epsilons)

    eps_list = "/".join(f"{e:g}" for e in epsilons)
    paper_cost = ", ".join(f"{table[VARIANTS[2]][f'{e:g}']['epsilon_spent'] / e:.2f}" for e in epsilons)

    def verdict(wins: list[float]) -> str:
        return "reproduced" if len(wins) == len(epsilons) else ("partly" if wins else "not reproduced")

    rows = [
        {"claim": "HMPrivBayes has a lower 2-way AVD than PrivBayes on Adult at every epsilon (Fig. 5)",
         "paper": "HMPrivBayes below PrivBayes at every epsilon",
         "p2pem": f"HMPrivBayes {row('HMPrivBayes', 'avd2')} vs PrivBayes {row('PrivBayes', 'avd2')} at epsilon {eps_list} "
                  f"(means of {seeds} seeds); lower by more than 2 standard errors at epsilon {', '.join(f'{e:g}' for e in hm_wins_avd) or 'none'}",
         "verdict": verdict(hm_wins_avd)},
        {"claim": "HMPrivBayes misclassifies income less than PrivBayes at every epsilon (Fig. 5, SVM)",
         "paper": "HMPrivBayes below PrivBayes at every epsilon",
         "p2pem": f"TSTR error (logistic, real test split) HMPrivBayes {row('HMPrivBayes', 'tstr_error')} vs PrivBayes "
                  f"{row('PrivBayes', 'tstr_error')} (the majority class: {majority:.3f}); lower by more than 2 standard errors at "
                  f"epsilon {', '.join(f'{e:g}' for e in hm_wins_tstr) or 'none'}",
         "verdict": verdict(hm_wins_tstr)},
        {"claim": "Theorem 1: HMPrivBayes satisfies epsilon-DP with eps_1 + eps_2 + eps_3 = epsilon",
         "paper": "each cluster's network spends eps_2 (eq. 10, / |C_i|) and its conditionals eps_3 (eq. 12, normalised within C_i)",
         "p2pem": f"the clusters share every row, so the printed budgets compose sequentially: the ledger of the paper's composition "
                  f"spends {paper_cost} x epsilon at epsilon {eps_list} (2 clusters); p2pem's HMPrivBayes splits eps_2 and eps_3 over "
                  f"all networks and spends <= epsilon",
         "verdict": "explained"},
        {"claim": "Where HMPrivBayes loses (the ablations below, one change each)",
         "paper": "-",
         "p2pem": (f"splitting the columns into independent networks is what costs: with one network HMPrivBayes is within "
                   f"{max(abs(table[VARIANTS[4]][f'{e:g}']['avd2'] - table['PrivBayes'][f'{e:g}']['avd2']) for e in epsilons):.3f} of "
                   f"PrivBayes' AVD; exact clusters for free do not help TSTR (the clusters cut income off education); the printed "
                   f"per-cluster budgets, at about {table[VARIANTS[2]][f'{epsilons[0]:g}']['epsilon_spent'] / epsilons[0]:.1f} x epsilon, "
                   f"beat PrivBayes' AVD only at small epsilon ({row(VARIANTS[2], 'avd2')} vs {row('PrivBayes', 'avd2')})"),
         "verdict": "explained"},
        {"claim": "Ablation: the paper's composition (not DP at epsilon)",
         "paper": "-",
         "p2pem": f"2-way AVD {row(VARIANTS[2], 'avd2')}, TSTR error {row(VARIANTS[2], 'tstr_error')}",
         "verdict": "explained"},
        {"claim": "Ablation: exact clusters for free (not DP)",
         "paper": "-",
         "p2pem": f"2-way AVD {row(VARIANTS[3], 'avd2')}, TSTR error {row(VARIANTS[3], 'tstr_error')}; clusters "
                  f"{[[schema.names[a] for a in c] for c in free_clusters]}",
         "verdict": "explained"},
        {"claim": "Ablation: one network (no clustering)",
         "paper": "-",
         "p2pem": f"2-way AVD {row(VARIANTS[4], 'avd2')}, TSTR error {row(VARIANTS[4], 'tstr_error')}",
         "verdict": "explained"},
    ]
    doc = {
        "paper": PAPER,
        "seed": "003",
        "setting": (f"Adult, {train.n_rows} training rows, {test.n_rows} test rows, {d} attributes on {n_bins} public equal-width bins, "
                    f"central release; epsilon {eps_list}, {seeds} seeds; theta = {args.theta:g}, beta = eps_2/eps = {args.beta:g}, "
                    f"HMPrivBayes eps_1 = 0.1 eps (clustering), entropies 0.05 eps, 2 clusters"),
        "data": "UCI Adult (the paper's Adult, without the paper's binarisation into 52 binary attributes)",
        "rows": rows,
        "notes": [
            "The paper's text as available to us omits its budget split (eps_1 : eps_2 : eps_3), eta and k; p2pem uses "
            "eps_1 = 0.1, eps_2 = 0.2 and 0.05 for the entropies, theta-usefulness instead of a degree k, and no pruning.",
            "The paper binarises every attribute (52 binary ones for Adult), where its MIC equals the normalised mutual "
            "information p2pem clusters on (a 2 x 2 grid); p2pem keeps the 15 attributes on 10 public bins.",
            "The paper computes the entropies OE_j that weight eq. (12)'s noise from the exact data; p2pem pays for them "
            "(noisy 1-way counts, 0.05 epsilon).",
            "The paper's classification splits the synthetic table 8:2 and trains an SVM; here TSTR trains a logistic "
            "regression on the release and tests it on the real test split.",
            "Every HMPrivBayes variant here clusters into 2 groups; "
            "the ablations change one thing each against 'HMPrivBayes'.",
        ],
        "quick": bool(args.quick) if not args.rows_only else bool(previous["quick"]),
        "seeds": seeds,
        "table": table,
        "results": results,
        "wall_s": time.perf_counter() - t_start,
    }
    return finish(doc, args.json)

if __name__ == "__main__":
    raise SystemExit(main())
