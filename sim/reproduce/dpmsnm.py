"""Wu (Sci. Rep. 2021), DP-MSNM, reproduced: its comparison with DPGMM and its AIC/BIC table, on AIS.

Seed 000.  The paper fits 2-component skew-normal mixtures with Laplace output perturbation
(``dp-msnm``: Algorithm 2's budget split and Lemmas 1-4 as printed, p2pem.dp.msnm) and
compares, by the mean training log-likelihood (1/n) log f(x), with DPGMM (Gaussian mixtures,
Laplace noise; here ``dp-central`` with the Gaussian family, Laplace, basic composition,
delta = 0) -- and, beside the paper, p2pem's own private skew-normal EM (``dp-central`` with
the skew-normal family, same mechanism and accounting).  Its Table 2 compares DP fits with
G = 1..4 by AIC and BIC.

Data: AIS body-mass index and body fat (data/ais.csv, standardised with the public constants
of scenarios/tradeoff_ais_skew.toml, domain [-4, 4] per feature), 80 % of the rows to fit,
20 % held out; 20 EM iterations; the nodes of a 20-node graph hold the rows (the three
protocols are central: a curator sees every row).

    python sim/reproduce/dpmsnm.py [--quick] [--out-dir docs/generated]

Writes ``reproduce_dpmsnm.json`` (the format of ``sim/reproduce/page.py``).  ``--quick``:
epsilon in {10, 1000}, 2 seeds, G in {1, 2, 3}.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from page import write  # noqa: E402

from p2pem import geometric_graph, make_protocol  # noqa: E402
from p2pem.em import EMSettings  # noqa: E402
from p2pem.errors import ProtocolError  # noqa: E402
from p2pem.families import GAUSSIAN, SKEW_NORMAL  # noqa: E402
from p2pem.simulate import run_protocol  # noqa: E402
from p2pem.snmix import BoundaryWarning  # noqa: E402
from p2pem.streams import child  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAPER = ("Wu, W. (2021) \"Differentially private density estimation with skew-normal mixtures model\", "
         "Scientific Reports 11:11009, doi:10.1038/s41598-021-90276-6")
CENTER, SCALE, BOUND = np.array([22.9498, 13.5177]), np.array([3.0114, 6.13878]), 4.0
N_NODES, MAX_ITER = 20, 20
METHODS = {  # name: (protocol, parameters, family)
    "DP-MSNM": ("dp-msnm", {"bound": BOUND}, SKEW_NORMAL),
    "DPGMM": ("dp-central", {"mechanism": "laplace", "accountant": "basic", "delta": 0.0, "bound": BOUND}, GAUSSIAN),
    "p2pem skew-normal": ("dp-central", {"mechanism": "laplace", "accountant": "basic", "delta": 0.0, "bound": BOUND}, SKEW_NORMAL),
}


def load() -> tuple[np.ndarray, np.ndarray]:
    import csv

    with open(ROOT / "data" / "ais.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    X = (np.array([[float(r["BMI"]), float(r["Bfat"])] for r in rows]) - CENTER) / SCALE
    order = np.random.default_rng(2).permutation(len(X))
    cut = int(round(0.8 * len(X)))
    return X[order[:cut]], X[order[cut:]]


def fit(method: str, epsilon: float, k: int, train: np.ndarray, seed: int):
    """(mean training log-likelihood, mean held-out log-likelihood, model) or None when a component collapsed."""
    name, params, family = METHODS[method]
    spec = make_protocol(name, {**params, "epsilon": epsilon})
    parts = np.array_split(np.clip(train, -BOUND, BOUND), N_NODES)
    settings = EMSettings(k, max_iter=MAX_ITER, tol=0.0, init_seed=seed, family=family)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundaryWarning)
        try:
            run = run_protocol(parts, geometric_graph(N_NODES, seed=1, radius=0.5), spec, settings, seed=child(seed, k))
        except ProtocolError:
            return None
    return family, run.params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="epsilon in {10, 1000}, 2 seeds, G in {1, 2, 3}")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "docs" / "generated", help="where reproduce_dpmsnm.json goes")
    args = parser.parse_args(argv)
    quick = args.quick
    epsilons = (10.0, 1000.0) if quick else (1.0, 10.0, 100.0, 1000.0)
    n_seeds = 2 if quick else 10
    ks = (1, 2, 3) if quick else (1, 2, 3, 4)
    t0 = time.perf_counter()
    train, test = load()
    n = len(train)

    # Figs. 1-2: mean log-likelihood against epsilon, G = 2 (median over seeds; a collapsed run counts as failed)
    curves: dict[str, dict] = {m: {"train": [], "heldout": [], "failed": []} for m in METHODS}
    for m in METHODS:
        for eps in epsilons:
            tr, ho, failed = [], [], 0
            for s in range(n_seeds):
                out = fit(m, eps, 2, train, s)
                if out is None:
                    failed += 1
                    continue
                family, params = out
                tr.append(float(family.score_samples(train, params).mean()))
                ho.append(float(family.score_samples(test, params).mean()))
            curves[m]["train"].append(statistics.median(tr) if tr else None)
            curves[m]["heldout"].append(statistics.median(ho) if ho else None)
            curves[m]["failed"].append(failed)
        print(m, curves[m], file=sys.stderr)

    # Table 2: AIC / BIC of DP fits, G = 1..4, at the largest epsilon (the log-likelihood evaluated on the rows, as the paper does)
    eps_ic = epsilons[-1]
    ic: dict[str, dict] = {}
    for m in ("DPGMM", "DP-MSNM"):
        ic[m] = {"k": list(ks), "aic": [], "bic": []}
        for k in ks:
            lls = []
            for s in range(n_seeds):
                out = fit(m, eps_ic, k, train, s)
                if out is not None:
                    family, params = out
                    lls.append(float(family.score_samples(train, params).sum()))
            total = statistics.median(lls) if lls else -math.inf
            p = METHODS[m][2].n_parameters(k, 2)
            ic[m]["aic"].append(-2 * total + 2 * p)
            ic[m]["bic"].append(-2 * total + p * math.log(n))
        print(m, ic[m], file=sys.stderr)

    def cell(v):
        return "collapsed" if v is None else f"{v:.2f}"

    def series(m, key):
        return " / ".join(f"{cell(v)}" + (f" ({f}/{n_seeds} failed)" if f else "") for v, f in zip(curves[m][key], curves[m]["failed"], strict=True))

    eps_txt = " / ".join(f"{e:g}" for e in epsilons)
    beats = [a is not None and (b is None or a > b) for a, b in zip(curves["DP-MSNM"]["train"], curves["DPGMM"]["train"], strict=True)]
    rows = [
        {"claim": "Algorithm 2 with Lemmas 1-4 is epsilon-DP (budget Lambda 0.6, xi and eta 0.13 each over T G, weights the rest)",
         "paper": "epsilon-DP, assuming every component holds at least n/(2G) rows",
         "p2pem": "implemented as printed (dp-msnm's default); tests/test_dp_msnm.py checks the split and the lemmas against the formulas, "
                  "and a brute force over neighbours (assumption satisfied) moves xi_k where the printed Lemma 2 allows no change "
                  "(R - R3 = 0): the claimed epsilon is no guarantee",
         "verdict": "explained"},
        {"claim": f"Figs. 1-2: DP-MSNM's mean log-likelihood is above DPGMM's (G = 2, epsilon = {eps_txt}, median of {n_seeds} seeds, training rows)",
         "paper": "DP-MSNM above DPGMM at every epsilon",
         "p2pem": f"DP-MSNM {series('DP-MSNM', 'train')}; DPGMM {series('DPGMM', 'train')}; p2pem's private skew-normal {series('p2pem skew-normal', 'train')}",
         "verdict": "reproduced" if all(beats) else ("partly" if any(beats) else "not reproduced")},
        {"claim": "The same on held-out rows (20 %; not in the paper)",
         "paper": "(the paper scores the training rows only)",
         "p2pem": f"DP-MSNM {series('DP-MSNM', 'heldout')}; DPGMM {series('DPGMM', 'heldout')}; p2pem's private skew-normal {series('p2pem skew-normal', 'heldout')}",
         "verdict": "explained"},
    ]
    best = {m: (ks[int(np.argmin(ic[m]["aic"]))], ks[int(np.argmin(ic[m]["bic"]))]) for m in ic}
    rows.append({"claim": f"Table 2 (AIS): AIC and BIC of DP fits are smallest at G = 3 for DPGMM and G = 2 for DP-MSNM (epsilon = {eps_ic:g}, G = {', '.join(map(str, ks))})",
                 "paper": "DPGMM: 3 (AIC and BIC); DP-MSNM: 2 (AIC and BIC)",
                 "p2pem": f"DPGMM: AIC {best['DPGMM'][0]}, BIC {best['DPGMM'][1]}; DP-MSNM: AIC {best['DP-MSNM'][0]}, BIC {best['DP-MSNM'][1]}",
                 "verdict": "reproduced" if best["DPGMM"] == (3, 3) and best["DP-MSNM"] == (2, 2) else
                            ("partly" if best["DPGMM"][1] == 3 or best["DP-MSNM"][1] == 2 else "not reproduced")})
    sk_wins = [f"{e:g}" for e, a, b in zip(epsilons, curves["p2pem skew-normal"]["train"], curves["DPGMM"]["train"], strict=True)
               if a is not None and b is not None and a > b]
    notes = [
        "A private skew-normal fit is above DPGMM (the paper's direction) with p2pem's own mechanism at epsilon = "
        + (", ".join(sk_wins) or "no epsilon of the grid") + "; compare with the exact fits' -2.3 per row to see where a fit is usable.",
        "The paper names 'columns 2-3' of AIS (in R's sn::ais: sport and RCC, not a pair one fits); p2pem uses body-mass index and body fat, "
        "the classic skew-normal pair of that data set and of the project's AIS scenarios.",
        "3DRoad (the paper's second data set, 434,874 rows) is not in this repository: not run.",
        "The log-likelihoods, AIC and BIC are evaluated on the rows (as the paper does): they are not differentially private releases.",
        "A collapsed run (a component with no rows after the noise) is counted as failed; the median is over the others.",
        f"Wall time {time.perf_counter() - t0:.0f} s.",
    ]
    doc = {"paper": PAPER, "seed": "000",
           "setting": f"central skew-normal mixtures with Laplace output perturbation, {MAX_ITER} EM iterations, G = 2, public domain [-4, 4]^2 after public standardisation",
           "data": "AIS (data/ais.csv, public): BMI and body fat; 3DRoad not available here",
           "rows": rows, "notes": notes, "quick": quick, "epsilons": list(epsilons), "curves": curves, "information_criteria": ic}
    print(f"wrote {write('dpmsnm', doc, args.out_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
