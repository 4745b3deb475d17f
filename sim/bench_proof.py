"""Benchmark: what a member can do without proof against it (docs/threats.md, "Accusations only with proof").

Runs a small kit of ``scenarios/parkinsons-20.toml`` (6 nodes, pdmm-sp, 2 EM iterations,
insecure seeded noise so that the simulation is the exact reference) with every node's real
runtime in this process over the in-memory link, in virtual time, and node 1 as a member that
perturbs one of its broadcasts (the same bytes to every neighbour) by a relative ``scale``, at
several of its broadcasts.  For each scale it prints how many runs every honest node finished
(exit 0), how many stopped (unattributable, or naming the member on proof), whether any honest
node was convicted (it must never be), and the largest relative shift of a finished run's model
from the simulation's: the precision a member can move the model by undetected, next to the
agreement tolerance the nodes compare their finals at.

Usage::

    .venv/bin/python sim/bench_proof.py                 # the table
    .venv/bin/python sim/bench_proof.py --quick         # fewer broadcasts per scale
    .venv/bin/python sim/bench_proof.py --json out.json

Not a test: which broadcasts are perturbed decides the numbers; the script prints its choice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
INSIDER = 1
LAUNCH = b"\x02" * 16


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="three broadcasts per scale instead of eight")
    parser.add_argument("--json", help="write the numbers here too")
    args = parser.parse_args(argv)
    from p2pem.builders import build_graph, build_protocols, em_settings, load_data
    from p2pem.deploy.kit import prepare_kit
    from p2pem.scenario import load_scenario
    from p2pem.simulate import run_protocol

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        text = (ROOT / "scenarios" / "parkinsons-20.toml").read_text()
        text = text.replace('"../data/parkinsons.data"', json.dumps(str(ROOT / "data" / "parkinsons.data")))
        text = re.sub(r"(?m)^n_nodes = \d+", "n_nodes = 6", text)
        text = re.sub(r"(?m)^max_iter = \d+", "max_iter = 2", text)
        path = tmp / "scenario.toml"
        path.write_text(text)
        scenario = load_scenario(path)
        kit = prepare_kit(scenario, tmp / "kit", broker=("127.0.0.1", 1), seeded=True)
        spec = build_protocols(scenario)[0]
        sim = run_protocol(load_data(scenario), build_graph(scenario), spec, em_settings(scenario), seed=scenario.streams()["protocol"])
        ref = np.concatenate([np.ravel(sim.weights), np.ravel(sim.means), np.ravel(sim.covariances)])
        honest_sent = _run(kit, tmp / "honest", None)[1]
        n_primals = honest_sent
        picks = sorted({max(1, round(n_primals * f)) for f in ((0.3, 0.6, 0.95) if args.quick else (0.1, 0.25, 0.4, 0.55, 0.7, 0.8, 0.9, 0.97))})
        rtol = spec.agreement_rtol
        print(f"6 nodes, pdmm-sp, 2 EM iterations; member node {INSIDER} sends {n_primals} broadcasts; perturbing its broadcasts {picks}")
        print(f"agreement tolerance (relative): {rtol:g}")
        print(f"{'scale':>10} {'finished':>9} {'stopped':>8} {'convicted honest':>17} {'largest undetected shift':>25}")
        rows = []
        for scale in (1e-12, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-4, 1e-2):
            finished = stopped = framed = 0
            shift = 0.0
            for k, nth in enumerate(picks):
                results, _ = _run(kit, tmp / f"s{scale:g}-{k}", (nth, 1.0 + scale))
                honest = [(code, rep) for i, (code, rep) in enumerate(results) if i != INSIDER]
                framed += sum(bool(set(rep.get("culprits", [])) - {INSIDER}) for _, rep in honest)
                if all(code == 0 for code, _ in honest):
                    finished += 1
                    for _, rep in honest:
                        model = np.concatenate([np.ravel(rep["weights"]), np.ravel(rep["means"]), np.ravel(rep["covariances"])])
                        shift = max(shift, float(np.max(np.abs(model - ref)) / np.max(np.abs(ref))))
                else:
                    stopped += 1
            rows.append({"scale": scale, "runs": len(picks), "finished": finished, "stopped": stopped, "honest_convicted": framed, "largest_undetected_shift": shift})
            print(f"{scale:>10.0e} {finished:>9} {stopped:>8} {framed:>17} {shift:>25.3g}")
        worst = max(r["largest_undetected_shift"] for r in rows)
        print(f"largest relative shift of a finished run's model: {worst:.3g} (agreement tolerance {rtol:g})")
        if args.json:
            Path(args.json).write_text(json.dumps({"format": "p2pem-bench-proof", "version": 1, "agreement_rtol": rtol, "perturbed_broadcasts": picks,
                                                   "rows": rows, "largest_undetected_shift": worst}, indent=1) + "\n")
    return 0


def _run(kit, out: Path, perturb: tuple[int, float] | None):
    """Every node of ``kit`` in this process (virtual time); the member's ``nth`` broadcast scaled.

    Returns the (exit code, result.json) per node and how many broadcasts the member published.
    """
    from p2pem.deploy.bootstrap import peers_for
    from p2pem.deploy.clock import run_virtual
    from p2pem.deploy.codec import Codec
    from p2pem.deploy.config import NodeConfig, Timeouts
    from p2pem.deploy.crypto import Identity
    from p2pem.deploy.process import run_reported
    from p2pem.deploy.roster import Roster
    from p2pem.deploy.runtime import NodeRuntime
    from p2pem.deploy.transports.base import subscriptions_for, topic_for
    from p2pem.deploy.transports.memory import MemoryBroker

    out.mkdir(parents=True)
    roster = Roster.load(kit.roster_path)
    observer = Codec(roster.run_id, roster.public_keys())
    mine = Codec(roster.run_id, roster.public_keys(), identity=Identity.load(kit.node_dir(INSIDER) / "node.key"), node_id=INSIDER, launch=LAUNCH)
    reader = {j: Codec(roster.run_id, roster.public_keys(), identity=Identity.load(kit.node_dir(j) / "node.key"), node_id=j, launch=LAUNCH)
              for j in roster.neighbours[INSIDER]}
    prefix = f"p2pem/{roster.run_id}/from/{INSIDER}/"
    count = {"primal": 0}

    def intercept(topic: str, payload: bytes):
        if topic.startswith(prefix) and observer.parse(payload).kind == "primal":
            count["primal"] += 1
            if perturb is not None and count["primal"] == perturb[0]:
                msg = reader[observer.parse(payload).receivers[0]].decode(payload)
                msg = replace(msg, payload=np.asarray(msg.payload) * perturb[1])
                return [(topic_for(roster.run_id, msg), mine.encode(msg), 0.0)]
        return [(topic, payload, 0.0)]

    broker = MemoryBroker(intercept)
    runtimes = []
    for i in range(kit.n_nodes):
        config = replace(NodeConfig.load(kit.config_path(i)), result=out / f"result{i}.json",
                         timeouts=Timeouts(timeout=2.0, startup_timeout=10.0, heartbeat=0.5))
        link = broker.link(subscriptions_for(roster.run_id, i, peers_for(roster, i)), name=f"node{i}")
        runtimes.append(NodeRuntime(config, link=link, launch=LAUNCH))

    async def everyone():
        return await asyncio.gather(*(run_reported(rt) for rt in runtimes))

    codes = run_virtual(everyone())
    return [(codes[i], json.loads((out / f"result{i}.json").read_text())) for i in range(kit.n_nodes)], count["primal"]


if __name__ == "__main__":
    sys.exit(main())
