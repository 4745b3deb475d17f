"""Benchmark: p2pem's MST and AIM against PrivBayes and the central references on Adult, in one run (issue 35).

Reads UCI Adult under its public schema (30 162 training rows, 15 060 test rows), and for
every epsilon and seed fits each method, draws one synthetic table of 30 162 rows and judges
it with ``p2pem.synth.report.synth_report`` -- the same utility measure for every method:

* **2-way TVD**: the mean total variation distance of every 2-way marginal between the
  release and the training rows, on the schema's 10 equal-width public bins;
* **TSTR**: accuracy of a logistic regression trained on the release, on the real test split;
* **fit s**: wall time of the fit alone.

Methods (``--methods``):

* ``mst-pdmm``: MST with every marginal summed by pdmm-sp over the nodes of a random
  geometric graph (central noise from the nodes' shared seed);
* ``mst-central``: MST by one curator (the paper's setting; the central reference);
* ``mst-noisy``: MST over pdmm-sp with noise shares and selection on noisy pair tables (members
  see only noisy sums);
* ``aim-pdmm`` and ``aim-central``: AIM with the rounds, iterations and model size of
  ``scenarios/aim_adult.toml``;
* ``privbayes-pdmm``: PrivBayes as ``scenarios/privbayes_adult.toml`` (pure epsilon; the
  (epsilon, delta) methods get delta = 1e-9).

The mechanisms of the Private-PGM repository (``mechanisms/mst.py``, ``aim.py``) are not in
the ``mbi`` wheel; where they are importable (``--reference-path``), their MST runs as a further
central reference.

Usage::

    .venv/bin/python sim/bench_synth_sota.py --quick     # epsilon 1, one seed, MST only: minutes
    .venv/bin/python sim/bench_synth_sota.py --markdown docs/generated/synth_sota.md --figure docs/synth_sota.png

Writes the numbers as JSON (``--json``, format ``p2pem-bench-synth-sota``).  Not a test:
timings depend on the machine and its load (printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from _common import print_table, write_markdown

ROOT = Path(__file__).resolve().parents[1]
EPSILONS = (0.1, 0.3, 1.0, 3.0)
METHODS = ("mst-pdmm", "mst-central", "mst-noisy", "aim-pdmm", "aim-central", "privbayes-pdmm")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(ROOT / "data"), help="folder with adult.data, adult.test, adult.schema.toml")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per (method, epsilon)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="epsilon 1, one seed, mst-pdmm and mst-central only")
    parser.add_argument("--reference-path", metavar="DIR", help="Private-PGM's mechanisms/ folder (its mst.py) for the central reference")
    parser.add_argument("--json", metavar="PATH", default=str(ROOT / "results" / "bench_synth_sota.json"))
    parser.add_argument("--figure", metavar="PATH", help="draw 2-way TVD and TSTR against epsilon, one line per method (PNG)")
    parser.add_argument("--markdown", metavar="PATH", help="write the table as Markdown (docs/generated/synth_sota.md)")
    args = parser.parse_args(argv)
    if args.quick:
        args.epsilons, args.seeds, args.methods = [1.0], 1, ["mst-pdmm", "mst-central"]

    import numpy as np

    from p2pem.bayesnet import BayesNetSettings
    from p2pem.bayesnet.marginals import MarginalSettings
    from p2pem.builders import split_table
    from p2pem.files import write_json
    from p2pem.graphs import geometric_graph
    from p2pem.registry import make_protocol
    from p2pem.scenario import load_scenario
    from p2pem.streams import scenario_streams
    from p2pem.synth import synth_report
    from p2pem.synth.marginal import fit_marginals, sample_marginal_release
    from p2pem.synth.models import require
    from p2pem.synth.privbayes import fit_bayesnet, release_document, sample_release
    from p2pem.tabular import Table, discretize, domain_sizes, load_schema, read_table, undiscretize

    require("sklearn.linear_model")
    data = Path(args.data)
    schema = load_schema(data / "adult.schema.toml")
    train = read_table(data / "adult.data", schema)
    test = read_table(data / "adult.test", schema)
    aim_settings = dict(load_scenario(ROOT / "scenarios" / "aim_adult.toml").marginals)
    print(f"Adult: {train.n_rows} training rows over {args.nodes} nodes, {test.n_rows} test rows; "
          f"cpus {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f} (timings are indicative)", flush=True)

    def judge(table: Table, seed: int) -> dict:
        report = synth_report(train, test, table, rng=np.random.default_rng(seed), target="income", dcr_rows=200)
        s = report["summary"]
        return {"2way": s["2way_tvd_mean"], "tstr": s["tstr"].get("logistic", next(iter(s["tstr"].values())))}

    def fit_one(method: str, eps: float, seed: int) -> tuple[Table, float]:
        over_nodes = method.endswith("-pdmm") or method == "mst-noisy"
        graph = geometric_graph(args.nodes, rng=np.random.default_rng(scenario_streams(seed)["graph"])) if over_nodes else None
        parts = split_table(train, args.nodes, rng=np.random.default_rng(scenario_streams(seed)["data"])) if over_nodes else [train]
        protocol = make_protocol("pdmm-sp" if over_nodes else "centralized")
        shared = np.random.SeedSequence([35, seed])
        t0 = time.perf_counter()
        if method.startswith("privbayes"):
            run = fit_bayesnet(parts, BayesNetSettings(epsilon=eps, theta=8.0, beta=0.2), protocol, graph=graph, seed=seed)
            fit_s = time.perf_counter() - t0
            return sample_release(release_document(run, schema, seed=seed), train.n_rows, np.random.default_rng(seed)), fit_s
        if method.startswith("aim"):
            settings = MarginalSettings(method="aim", epsilon=eps, delta=1e-9, rounds=aim_settings["rounds"], iters=aim_settings["iters"],
                                        max_model_size=aim_settings["max_model_size"])
        else:
            noisy = method == "mst-noisy"
            settings = MarginalSettings(method="mst", epsilon=eps, delta=1e-9, noise="shares" if noisy else "central",
                                        selection="noisy" if noisy else "exact")
        mrun = fit_marginals(parts, settings, protocol, graph=graph, seed=seed, shared=shared)
        fit_s = time.perf_counter() - t0
        release = {"format": "p2pem-synth-release", "version": 1, "model": settings.method, "n_bins": settings.n_bins,
                   "schema": _schema_doc(schema),
                   "networks": [{"conditionals": [{"child": schema.names[c.child], "parents": [schema.names[p] for p in c.parents],
                                                   "probabilities": c.probabilities.tolist()} for c in net.conditionals]}
                                for net in mrun.task.networks]}
        return sample_marginal_release(release, train.n_rows, np.random.default_rng(seed)), fit_s

    results: list[dict] = []
    for eps in args.epsilons:
        for method in args.methods:
            for seed in range(args.seeds):
                table, fit_s = fit_one(method, eps, seed)
                results.append({"method": method, "epsilon": eps, "seed": seed, "fit_s": fit_s, **judge(table, seed)})
                print(f"  eps {eps:<4} {method} seed {seed}: 2-way TVD {results[-1]['2way']:.4f}, TSTR {results[-1]['tstr']:.3f}, "
                      f"fit {fit_s:.0f} s", flush=True)
    if args.reference_path:
        sys.path.insert(0, args.reference_path)
        try:
            import mst as reference_mst  # Private-PGM's mechanisms/mst.py
        except ImportError as exc:
            print(f"  (Private-PGM's reference MST not importable from {args.reference_path}: {exc})")
        else:
            results += _reference_mst(reference_mst, train, schema, args, judge, discretize, domain_sizes, undiscretize)

    # independent marginals, exact: the floor a release must beat
    rng = np.random.default_rng(0)
    binned = discretize(train, 10)
    independent = np.stack([rng.choice(binned[:, j], size=train.n_rows) for j in range(binned.shape[1])], axis=1)
    floor = judge(undiscretize(schema, independent, n_bins=10, rng=rng), 0)

    def mean(rows: list[dict], key: str) -> float:
        return float(np.mean([r[key] for r in rows]))

    groups = sorted({(r["method"], r["epsilon"]) for r in results}, key=lambda k: (k[0], k[1]))
    rows = []
    for method, eps in groups:
        sel = [r for r in results if r["method"] == method and r["epsilon"] == eps]
        rows.append([method, f"{eps:g}", str(len(sel)), f"{mean(sel, '2way'):.4f}", f"{mean(sel, 'tstr'):.3f}", f"{mean(sel, 'fit_s'):.0f}"])
    rows.append(["independent marginals, exact (no privacy)", "-", "1", f"{floor['2way']:.4f}", f"{floor['tstr']:.3f}", "-"])
    headers = ["method", "epsilon", "seeds", "2-way TVD", "TSTR (logistic)", "fit s"]
    print_table(headers, rows)
    doc = {"format": "p2pem-bench-synth-sota", "version": 1, "nodes": args.nodes, "delta": 1e-9, "bins": "10 equal-width public bins",
           "results": results, "independent": floor, "load_average": os.getloadavg()[0], "cpus": len(os.sched_getaffinity(0))}
    write_json(args.json, doc)
    if args.markdown:
        command = "python sim/bench_synth_sota.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_markdown(args.markdown, command, headers, rows, [
            f"Adult, {args.nodes} nodes for the distributed methods (pdmm-sp), delta = 1e-9 for MST and AIM (zCDP), pure epsilon for "
            "PrivBayes; utility of one 30 162-row release per seed on the schema's 10 equal-width bins (p2pem.synth.report)."])
    if args.figure:
        figure(doc, args.figure)
    return 0


def _schema_doc(schema):
    import tomllib

    from p2pem.tabular import schema_to_toml

    return tomllib.loads(schema_to_toml(schema))


def _reference_mst(mst_module, train, schema, args, judge, discretize, domain_sizes, undiscretize) -> list[dict]:
    """Private-PGM's own MST (its repository's mechanisms/mst.py) on the same bins, as a central reference."""
    import numpy as np
    import pandas as pd
    from mbi import Dataset, Domain

    binned = discretize(train, 10)
    domain = Domain(schema.names, domain_sizes(schema, 10))
    out = []
    for eps in args.epsilons:
        for seed in range(args.seeds):
            np.random.seed(seed)  # the reference mechanism draws from NumPy's global generator
            t0 = time.perf_counter()
            synth = mst_module.MST(Dataset(pd.DataFrame(binned, columns=schema.names), domain), eps, 1e-9)
            fit_s = time.perf_counter() - t0
            rows = synth.df[schema.names].to_numpy().astype(np.int64)
            table = undiscretize(schema, rows, n_bins=10, rng=np.random.default_rng(seed))
            out.append({"method": "mst-private-pgm-reference", "epsilon": eps, "seed": seed, "fit_s": fit_s, **judge(table, seed)})
    return out


def figure(doc: dict, path: str) -> None:
    """2-way TVD and TSTR against epsilon, one line per method, the independent floor dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    methods = sorted({r["method"] for r in doc["results"]})
    for method in methods:
        eps = sorted({r["epsilon"] for r in doc["results"] if r["method"] == method})
        for ax, key in zip(axes, ("2way", "tstr"), strict=True):
            ys = [np.mean([r[key] for r in doc["results"] if r["method"] == method and r["epsilon"] == e]) for e in eps]
            ax.plot(eps, ys, marker="o", label=method)
    for ax, key, label in zip(axes, ("2way", "tstr"), ("mean 2-way TVD", "TSTR accuracy (logistic)"), strict=True):
        ax.axhline(doc["independent"][key], ls="--", color="grey", label="independent marginals (exact)")
        ax.set_xscale("log")
        ax.set_xlabel("epsilon")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
