"""Print a scenario's trade-off preprocessing as a ``[data.public]`` table, to declare it public.

``p2pem tradeoff`` fits a scenario's standardisation / PCA on the training rows of its
held-out split unless the scenario gives the constants in ``[data.public]``; fitted, every
private record lists the preprocessing as not covered by epsilon.  This script computes
those constants once (the same map the sweep would fit) and prints the TOML table to paste
into the scenario, which then *declares* them public: the map no longer depends on the rows
a run sees, and the records say "public constants given in the scenario".  Where the
constants came from (here: the training rows, once) is the scenario's claim to make in a
comment next to them; epsilon does not cover it.

    .venv/bin/python sim/public_preprocessing.py scenarios/tradeoff_parkinsons.toml
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np


def _row(values: np.ndarray) -> str:
    return "[" + ", ".join(f"{float(v):.6g}" for v in values) + "]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    args = ap.parse_args(argv)

    from p2pem.dp.tradeoff import held_out_split, training_preprocessing
    from p2pem.builders import prepare_rows
    from p2pem.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    if scenario.data.public is not None:
        print(f"# {args.scenario} already declares [data.public]")
        return 0
    raw = dataclasses.replace(scenario, data=dataclasses.replace(scenario.data, standardize=False, pca=None))
    X, _ = prepare_rows(raw, rng=np.random.default_rng(scenario.streams()["data"]))
    _, train = held_out_split(scenario, len(X))
    prep = training_preprocessing(scenario, X[train])
    if prep.center is None or prep.scale is None:
        raise SystemExit(f"{args.scenario}: [data.public] needs standardize = true")
    # public constants have no separate PCA centring: fold the fitted one into the centre
    center = prep.center if prep.pca_center is None else prep.center + prep.pca_center * prep.scale
    print(f"# computed by sim/public_preprocessing.py from the {len(train)} training rows of the trade-off split")
    print("[data.public]")
    print(f"center = {_row(center)}")
    print(f"scale = {_row(prep.scale)}")
    if prep.components is not None:
        print("components = [")
        for c in prep.components:
            print(f"    {_row(c)},")
        print("]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
