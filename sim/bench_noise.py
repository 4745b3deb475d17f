"""Benchmark: what noise that resists floating-point attacks costs (issue 29, item 7).

A publication's ``dp-central`` noise is drawn from OpenDP's exact samplers
(:func:`p2pem.dp.mechanisms.exact_noise`: discrete Gaussian/Laplace on a grid, Canonne, Kamath
& Steinke 2020) instead of numpy's floating-point sampling (:func:`p2pem.dp.mechanisms.noise`,
kept for simulations and noise shares); the central count noise of Bayesian-network and marginal
releases comes from p2pem's own vectorised exact sampler (:func:`p2pem.dp.discrete.snapped_release`).
This script measures, in one run:

1. the time per noisy coordinate of each sampler (Gaussian and Laplace): OpenDP, p2pem's
   discrete sampler and numpy, alternating them ``--repeat`` times, and their ratios to numpy;
2. the wall time of ``p2pem synth`` on the AIS scenario of the tests with ``dp-central``,
   hardened (the default publication) against ``--insecure-reproducible-seed`` (numpy noise),
   and how many coordinates it drew (after a warm-up run; medians of ``--repeat`` alternating runs;
   the wall time includes the utility report, the same in both).

Usage::

    .venv/bin/python sim/bench_noise.py                 # quick: 2000 coordinates, 2 repeats
    .venv/bin/python sim/bench_noise.py --coordinates 20000 --repeat 3 --json out/bench_noise.json

Not a test: the numbers depend on the machine and its load (printed beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import print_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def per_coordinate(coordinates: int, repeat: int) -> dict[str, dict[str, float]]:
    import numpy as np

    from p2pem.dp.discrete import snapped_release
    from p2pem.dp.mechanisms import exact_noise, noise

    scale = np.full(coordinates, 2.0)  # OpenDP's exact samplers take longer at larger scales
    counts = np.zeros(coordinates)  # integer counts: on the discrete sampler's grid
    rng = np.random.default_rng()
    out: dict[str, dict[str, float]] = {}
    for mechanism in ("gaussian", "laplace"):
        times: dict[str, list[float]] = {"opendp": [], "discrete": [], "numpy": []}
        for _ in range(repeat):
            for name, draw in (("opendp", lambda m=mechanism: exact_noise(scale, m)),
                               ("discrete", lambda m=mechanism: snapped_release(rng, counts, 2.0, m)),
                               ("numpy", lambda m=mechanism: noise(rng, scale, m))):
                t0 = time.perf_counter()
                draw()
                times[name].append((time.perf_counter() - t0) / coordinates)
        o, d, n = (statistics.median(times[k]) for k in ("opendp", "discrete", "numpy"))
        out[mechanism] = {"opendp_us": o * 1e6, "discrete_us": d * 1e6, "numpy_us": n * 1e6, "ratio": o / n,
                          "discrete_ratio": d / n, "opendp_over_discrete": o / d}
    return out


def synth_walls(tmp: Path, repeat: int) -> dict[str, float]:
    import numpy as np

    from p2pem.dp import mechanisms
    from p2pem.dp.publication import Publication
    from p2pem.scenario import load_scenario
    from p2pem.synth.run import synthesize

    sys.path.insert(0, str(ROOT / "tests"))
    from test_synth import AIS  # the scenario of the tests: 152 training rows, 10 nodes, 6 EM iterations

    path = tmp / "ais.toml"
    path.write_text(AIS.format(seed=3, data=ROOT / "data" / "ais.csv", root=ROOT).replace('rows = 120\n', 'rows = 120\nprotocol = "dp-central"\n'))
    scenario = load_scenario(path)
    drawn = [0]
    exact = mechanisms.exact_noise

    def counting(scale, mechanism):
        drawn[0] += int(np.count_nonzero(scale))
        return exact(scale, mechanism)

    synthesize(scenario, publication=Publication.insecure(3))  # warm-up: imports, the data's caches
    mechanisms.exact_noise = counting  # count the coordinates the hardened run draws
    try:
        times: dict[str, list[float]] = {"numpy (insecure seed)": [], "opendp (publication)": []}
        for _ in range(repeat):  # alternating, so that load drifts hit both
            for name, pub in (("numpy (insecure seed)", Publication.insecure(3)), ("opendp (publication)", Publication.secure())):
                t0 = time.perf_counter()
                synthesize(scenario, publication=pub)
                times[name].append(time.perf_counter() - t0)
    finally:
        mechanisms.exact_noise = exact
    return {**{k: statistics.median(v) for k, v in times.items()}, "coordinates": drawn[0] // repeat}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coordinates", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    import tempfile

    load = os.getloadavg()[0]
    costs = per_coordinate(args.coordinates, args.repeat)
    print(f"per noisy coordinate ({args.coordinates} coordinates, median of {args.repeat}; load average {load:.1f})")
    print_table(["mechanism", "OpenDP exact (us)", "p2pem discrete (us)", "numpy float (us)", "OpenDP / numpy", "discrete / numpy",
                 "OpenDP / discrete"],
                [[m, f"{c['opendp_us']:.1f}", f"{c['discrete_us']:.1f}", f"{c['numpy_us']:.3f}", f"{c['ratio']:.0f}",
                  f"{c['discrete_ratio']:.0f}", f"{c['opendp_over_discrete']:.0f}"] for m, c in costs.items()])
    with tempfile.TemporaryDirectory() as tmp:
        walls = synth_walls(Path(tmp), args.repeat)
    print(f"\np2pem synth, AIS test scenario with dp-central: {walls['coordinates']} noisy coordinates drawn by OpenDP")
    print_table(["noise", "wall (s)"], [[k, f"{v:.2f}"] for k, v in walls.items() if k != "coordinates"])
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"load_average": load, "per_coordinate": costs, "synth_ais_dp_central": walls}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
