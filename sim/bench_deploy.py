"""Benchmark: a scenario as one OS process per node over Mosquitto on loopback, against the simulator.

Runs ``scenarios/parkinsons-20.toml`` (20 nodes, pdmm-sp, 30 EM iterations) three ways
and prints wall time, protocol messages, payload bytes and what crossed the broker:

* ``simulate`` (vectorised engine), the default of ``p2pem simulate``;
* ``simulate --engine messages``: the same Node state machines over an in-memory queue;
* ``deploy``: ``p2pem deploy``'s launcher, 20 ``p2pem node`` processes, a Mosquitto started
  on a free loopback port with the kit's password file and ACL, every message authenticated
  with one HMAC-SHA256 tag per receiver (per-edge keys) and every initial dual sealed per edge;
* and, as a reference in the same run, the same kit's node runtimes in this one process over
  the in-memory link (virtual time): the CPU per delivery of the runtime's own work (checks,
  codec, protocol, EM) against a deployed delivery's, the rest being the MQTT client, the
  event loop and 20 processes sharing the CPUs.

Two more measurements on request:

* ``--protocols``: every protocol of the scenario deployed in turn (pdmm-sp, secure-sum,
  federated with its server process, dp-central, dp-distributed over secure-sum and over
  pdmm-sp, asynchronous pdmm-sp), side by side with its simulation: protocol messages,
  payload bytes, envelopes, wire bytes, deliveries and wall time over the 20 processes;
* ``--baseline DIR``: the same pdmm-sp deployment run alternately with this tree's code and
  with the code checked out in ``DIR`` (e.g. the main branch), ``--repeat`` times each, in the
  same run, and the ratio of their wall times: what this tree's checks cost against that code.

Usage::

    .venv/bin/python sim/bench_deploy.py                       # the issue's benchmark
    .venv/bin/python sim/bench_deploy.py --max-iter 5          # a quicker look
    .venv/bin/python sim/bench_deploy.py --out /tmp/bench      # keep the kit, logs and result.json
    .venv/bin/python sim/bench_deploy.py --max-iter 5 --profile /tmp/prof   # cProfile every node process
    .venv/bin/python sim/bench_deploy.py --protocols           # the per-protocol table
    .venv/bin/python sim/bench_deploy.py --baseline /work/main --repeat 2   # the checks against main's code
    .venv/bin/python sim/bench_deploy.py --protocols --json out.json        # the numbers as JSON too

Not a test: the numbers depend on the machine (and on whatever else runs on it; the load
average is printed next to them).  Needs ``mosquitto`` installed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "parkinsons-20.toml"))
    parser.add_argument("--max-iter", type=int, help="override the scenario's em.max_iter (written to a copy of the file)")
    parser.add_argument("--out", help="keep the deployment folder here (default: a temporary folder)")
    parser.add_argument("--profile", metavar="DIR", help="run every node under cProfile and write DIR/node-<pid>.prof (slower)")
    parser.add_argument("--protocols", action="store_true", help="deploy every protocol of the scenario and print the per-protocol table")
    parser.add_argument("--baseline", metavar="DIR", help="a checkout of other code (e.g. main) to deploy alternately with this tree's, for the cost of the checks")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each code with --baseline (default 2)")
    parser.add_argument("--json", metavar="FILE", help="also write the measured numbers as JSON")
    args = parser.parse_args(argv)
    if args.protocols or args.baseline:
        return _extra(args)

    from p2pem.deploy.broker import free_port
    from p2pem.deploy.kit import prepare_kit, start_kit_broker
    from p2pem.deploy.launcher import run_deployment
    from p2pem.deploy.results import write_result
    from p2pem.builders import build_graph, em_settings, build_protocols as protocols
    from p2pem.builders import load_data
    from p2pem.scenario import load_scenario
    from p2pem.simulate import relative_error, run_protocol

    with tempfile.TemporaryDirectory(prefix="p2pem-bench-") as tmp:
        scenario_path = Path(args.scenario).resolve()
        if args.max_iter is not None:
            text = scenario_path.read_text()
            text = text.replace('"../data/', f'"{scenario_path.parent.parent}/data/')
            import re

            text = re.sub(r"(?m)^max_iter = \d+", f"max_iter = {args.max_iter}", text, count=1)
            scenario_path = Path(tmp) / scenario_path.name
            scenario_path.write_text(text)
        scenario = load_scenario(scenario_path)
        parts = load_data(scenario)
        graph = build_graph(scenario)
        spec = protocols(scenario)[0]
        settings = em_settings(scenario)
        rows = []
        sims = {}
        for engine in ("vectorised", "messages"):
            t0 = time.perf_counter()
            sim = run_protocol(parts, graph, spec, settings, seed=scenario.streams()["protocol"], engine=engine)
            sims[engine] = sim
            rows.append((f"simulate ({engine})", time.perf_counter() - t0, sim.n_iter, sim.messages, sim.bytes, None))

        out = Path(args.out) if args.out else Path(tmp) / "deploy"
        if args.profile:
            _profile_children(Path(args.profile), Path(tmp))
        kit = prepare_kit(scenario, out, broker=("127.0.0.1", free_port()), seeded=True)
        load_before = os.getloadavg()
        broker = start_kit_broker(kit)
        last = [-1]

        def progress(p) -> None:
            if p.min_iter != last[0]:
                last[0] = p.min_iter
                print(f"  deploy: {p.online}/{p.n_nodes} nodes online, EM iteration {p.min_iter}/{p.max_iter}", file=sys.stderr)

        try:
            doc = run_deployment(kit, progress=progress)
            broker_cpu = _process_cpu_s(broker.process.pid) if broker.process is not None else float("nan")
        finally:
            broker.stop()
        load_after = os.getloadavg()
        write_result(kit, doc)
        run = doc["protocols"][0]
        dep = doc["deployment"]
        rows.append(("deploy (20 processes)" if kit.n_nodes == 20 else f"deploy ({kit.n_nodes} processes)", run["wall_s"], run["n_iter"], run["messages"], run["bytes"], dep))

        ref = sims["vectorised"]
        err = max(
            relative_error(run[k], getattr(ref, k))
            for k in ("weights", "means", "covariances")
        )
        print()
        print(f"scenario {scenario.name}: {sum(len(p) for p in parts)} rows, {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges; "
              f"{os.cpu_count()} CPUs, load average before the deployment {load_before[0]:.1f}")
        header = f"{'run':<28} {'wall s':>8} {'EM its':>6} {'messages':>9} {'payload MB':>10} {'envelopes':>9} {'wire MB':>8} {'deliveries':>10} {'node CPU s':>10}"
        print(header)
        print("-" * len(header))
        for name, wall, n_iter, messages, nbytes, d in rows:
            extra = (
                f"{d['envelopes_published']:>9} {d['wire_bytes'] / 1e6:>8.2f} {d['deliveries']:>10} {d['node_cpu_s']:>10.1f}"
                if d
                else f"{'-':>9} {'-':>8} {'-':>10} {'-':>10}"
            )
            print(f"{name:<28} {wall:>8.2f} {n_iter:>6} {messages:>9} {nbytes / 1e6:>10.2f} {extra}")
        print(
            f"deploy: all nodes online {dep['startup_s']:.2f} s after launch, consensus phase {dep['run_s']:.2f} s, "
            f"{dep['duplicates']} duplicates, {dep['rejected']} rejected, {dep['reconnects']} reconnects"
        )
        print(f"largest relative difference deploy vs simulate: {err:.2e}")
        nodes = dep["nodes"]
        cpu = sum(n["cpu_s"] or 0.0 for n in nodes)
        startup_cpu = sum(n.get("online_cpu_s") or 0.0 for n in nodes)
        deliveries = dep["deliveries"]
        print(
            f"CPU: nodes {cpu:.1f} s ({startup_cpu:.1f} s until online: imports, keys, data; "
            f"{cpu - startup_cpu:.1f} s after), broker {broker_cpu:.1f} s; "
            f"{1e6 * (cpu - startup_cpu) / max(deliveries, 1):.0f} us of node CPU and "
            f"{1e6 * broker_cpu / max(deliveries, 1):.0f} us of broker CPU per delivery "
            f"(load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, 1-minute averages)"
        )
        validate = sum(n.get("validate_s", 0.0) for n in nodes)
        control = sum(n.get("control_s", 0.0) for n in nodes)
        tail = dep.get("agreement_tail_s")
        agree = float("nan") if tail is None else tail
        longest_wait = max((n["agree_s"] for n in nodes if n.get("agree_s") is not None), default=float("nan"))
        usage = [n.get("rusage") or {} for n in nodes]
        if all(usage):
            print(
                f"node CPU split: user {sum(u['user_s'] for u in usage):.1f} s, system {sum(u['system_s'] for u in usage):.1f} s; "
                f"context switches {sum(u['voluntary_switches'] for u in usage)} voluntary, "
                f"{sum(u['involuntary_switches'] for u in usage)} involuntary"
            )
        print(
            "cost of the defences: message validation "
            f"{validate:.2f} CPU s ({100 * validate / cpu:.1f} % of the nodes' {cpu:.1f} CPU s), "
            f"control messages (hello/final/bye checks, abort signatures) {control:.2f} CPU s ({100 * control / cpu:.1f} %), "
            f"final model agreement {agree:.3f} s wall from the last node's end of EM to the last agreement "
            f"({100 * agree / run['wall_s']:.1f} % of the deployment's wall time; "
            f"{longest_wait:.3f} s at the node that waited longest)"
        )
        # the nodes are CPU-bound and share the machine's CPUs: their CPU seconds divided by the
        # number of CPUs is the wall time they occupy
        share = ((validate + control) / (os.cpu_count() or 1) + agree) / run["wall_s"]
        print(f"all three together: about {100 * share:.1f} % of the deployment's wall time on {os.cpu_count()} CPUs (goal < 5 %)")
        mem_cpu, mem_deliveries = _in_memory_cpu(kit, Path(tmp) / "in-memory")
        per_mem = 1e6 * mem_cpu / max(mem_deliveries, 1)
        per_dep = 1e6 * (cpu - startup_cpu) / max(deliveries, 1)
        print(
            f"reference in the same run: the same kit's {kit.n_nodes} runtimes in one process over the in-memory link "
            f"(no MQTT, no processes) take {mem_cpu:.1f} CPU s for {mem_deliveries} deliveries, {per_mem:.0f} us each: the runtime's "
            f"own work (checks, codec, protocol, EM) is {100 * per_mem / per_dep:.0f} % of a deployed delivery's {per_dep:.0f} us; "
            "the rest is the MQTT client, the event loop and the processes sharing the CPUs"
        )
        if args.out:
            print(f"kit, logs and result.json in {out}")
    return 0


def _in_memory_cpu(kit, out: Path) -> tuple[float, int]:
    """CPU seconds and deliveries of every party of ``kit`` run in this process, in virtual time,
    over :class:`~p2pem.deploy.transports.memory.MemoryBroker` (the runtime without MQTT)."""
    import asyncio
    from dataclasses import replace

    from p2pem.deploy.bootstrap import peers_for
    from p2pem.deploy.clock import run_virtual
    from p2pem.deploy.config import NodeConfig
    from p2pem.deploy.process import run_reported
    from p2pem.deploy.roster import Roster
    from p2pem.deploy.runtime import NodeRuntime
    from p2pem.deploy.server import ServerRuntime
    from p2pem.deploy.transports.base import subscriptions_for
    from p2pem.deploy.transports.memory import MemoryBroker
    from p2pem.messages import SERVER

    out.mkdir(parents=True)
    roster = Roster.load(kit.roster_path)
    broker = MemoryBroker()
    launch = os.urandom(16)
    t0 = time.process_time()
    runtimes = []
    for i in kit.parties:
        config = replace(NodeConfig.load(kit.config_path(i)), result=out / f"result{i}.json")
        link = broker.link(subscriptions_for(roster.run_id, i, peers_for(roster, i)), name=f"node{i}")
        runtimes.append((ServerRuntime if i == SERVER else NodeRuntime)(config, link=link, launch=launch))

    async def everyone() -> list[int]:
        return await asyncio.gather(*(run_reported(rt) for rt in runtimes))

    import logging

    quiet = logging.getLogger("p2pem")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the seeded kit's warning, once per node, was printed by the deployment already
    try:
        codes = run_virtual(everyone())
    finally:
        quiet.setLevel(level)
    cpu = time.process_time() - t0
    if any(codes):
        raise SystemExit(f"the in-memory reference run failed (exit codes {codes})")
    import json

    deliveries = sum(json.loads((out / f"result{i}.json").read_text())["wire"]["received"] for i in kit.parties)
    return cpu, deliveries


def _scenario_copy(args, tmp: Path) -> Path:
    """The scenario, with ``--max-iter`` applied, as a file in ``tmp`` (data paths absolute)."""
    import re

    path = Path(args.scenario).resolve()
    text = path.read_text().replace('"../data/', f'"{path.parent.parent}/data/')
    if args.max_iter is not None:
        text = re.sub(r"(?m)^max_iter = \d+", f"max_iter = {args.max_iter}", text, count=1)
    out = tmp / path.name
    out.write_text(text)
    return out


def _code_env(pythonpath: str | None) -> dict[str, str]:
    """The environment of a process that imports p2pem from ``pythonpath`` (default: this tree)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath or str(ROOT), env.get("PYTHONPATH")]))
    return env


def _imported_from(pythonpath: str | None, cwd: Path) -> str:
    """Where ``python -m`` with that environment, started in ``cwd``, imports p2pem from."""
    import subprocess

    cmd = [sys.executable, "-c", "import p2pem; print(p2pem.__file__)"]
    return subprocess.run(cmd, env=_code_env(pythonpath), cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def _deploy_cli(scenario: Path, out: Path, protocol: str, pythonpath: str | None = None) -> dict:
    """``p2pem deploy`` as its own process importing p2pem from ``pythonpath`` (default: this
    tree); its result.json.

    It starts in ``out``'s parent folder, not here: ``python -m`` puts its working folder
    first on the path, so started in a checkout it (and the node processes it launches)
    would import that checkout's p2pem whatever ``PYTHONPATH`` says.
    """
    import json
    import subprocess

    cmd = [sys.executable, "-m", "p2pem", "deploy", str(scenario), "--out", str(out), "-q", "--insecure-reproducible-seed", "--protocol", protocol]
    t0 = time.perf_counter()
    run = subprocess.run(cmd, env=_code_env(pythonpath), cwd=out.parent, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        raise SystemExit(f"deploy --protocol {protocol} failed: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.returncode}")
    doc = json.loads((out / "result.json").read_text())
    doc["launcher_wall_s"] = wall
    return doc


def _extra(args) -> int:
    """--protocols and --baseline (module docstring)."""
    import json
    import statistics

    from _common import print_table

    from p2pem.builders import build_graph, build_protocols, em_settings, load_data
    from p2pem.scenario import load_scenario
    from p2pem.simulate import run_protocol

    report: dict = {"format": "p2pem-bench-deploy", "version": 1, "cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="p2pem-bench-") as tmp:
        scenario_path = _scenario_copy(args, Path(tmp))
        scenario = load_scenario(scenario_path)
        n = scenario.graph.n_nodes
        if args.protocols:
            rows, table = [], []
            specs = build_protocols(scenario)
            for k, spec in enumerate(specs, 1):
                sim = run_protocol(load_data(scenario), build_graph(scenario), spec, em_settings(scenario), seed=scenario.streams()["protocol"])
                print(f"  deploying {k}/{len(specs)}: {getattr(spec, 'label', spec.name)} ...", file=sys.stderr)
                doc = _deploy_cli(scenario_path, Path(tmp) / f"p{k}", str(k))
                run, dep = doc["protocols"][0], doc["deployment"]
                entry = {
                    "protocol": run["protocol"], "processes": n + (1 if "server" in dep else 0), "em_iterations": run["n_iter"],
                    "messages": run["messages"], "payload_bytes": run["bytes"], "simulated_messages": sim.messages,
                    "envelopes": dep["envelopes_published"], "wire_bytes": dep["wire_bytes"], "deliveries": dep["deliveries"],
                    "control_messages": dep["control_messages"], "wall_s": dep["wall_s"], "run_s": dep["run_s"], "node_cpu_s": dep["node_cpu_s"],
                }
                table.append(entry)
                rows.append([entry["protocol"], entry["processes"], entry["messages"], f"{entry['payload_bytes'] / 1e6:.2f}", entry["envelopes"],
                             f"{entry['wire_bytes'] / 1e6:.2f}", entry["deliveries"], f"{entry['wall_s']:.1f}", f"{entry['run_s']:.1f}"])
            print(f"\n{scenario.name}: every protocol deployed, {n} nodes, {scenario.em.max_iter} EM iterations, {os.cpu_count()} CPUs")
            print_table(["protocol", "processes", "messages", "payload MB", "envelopes", "wire MB", "deliveries", "wall s", "consensus s"], rows)
            report["protocols"] = table
        if args.baseline:
            here, there = _imported_from(None, Path(tmp)), _imported_from(str(Path(args.baseline).resolve()), Path(tmp))
            print(f"this tree's deployment imports {here}, the baseline's {there}")
            if here == there:
                raise SystemExit("both sides would run the same code: give --baseline another checkout")
            walls: dict[str, list[float]] = {"this tree": [], "baseline": []}
            cpus: dict[str, list[float]] = {"this tree": [], "baseline": []}
            for r in range(args.repeat):
                for name, path in (("this tree", None), ("baseline", str(Path(args.baseline).resolve()))):
                    doc = _deploy_cli(scenario_path, Path(tmp) / f"b{r}-{name.replace(' ', '')}", "pdmm-sp", path)
                    walls[name].append(doc["deployment"]["wall_s"])
                    cpus[name].append(doc["deployment"]["node_cpu_s"])
            this, base = statistics.median(walls["this tree"]), statistics.median(walls["baseline"])
            print(f"\npdmm-sp deployment, median of {args.repeat} alternating runs each: this tree {this:.2f} s, {args.baseline} {base:.2f} s "
                  f"(ratio {this / base:.3f}, i.e. {100 * (this / base - 1):+.1f} % wall time); node CPU {statistics.median(cpus['this tree']):.1f} s "
                  f"against {statistics.median(cpus['baseline']):.1f} s")
            report["baseline"] = {"dir": args.baseline, "walls": walls, "node_cpu_s": cpus, "ratio": this / base}
        report["load_after"] = os.getloadavg()[0]
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux ``/proc``), NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_SITECUSTOMIZE = """\
import atexit, cProfile, os, time
# CPU time, not wall time: 20 processes share 2 CPUs, so wall time would mostly measure waiting
_profiler = cProfile.Profile(time.process_time)
_profiler.enable()
@atexit.register
def _dump():
    _profiler.disable()
    _profiler.dump_stats(os.path.join({out!r}, f"node-{{os.getpid()}}.prof"))
# a node leaves with os._exit once its result is out (no interpreter teardown, no atexit)
_exit = os._exit
def _dump_and_exit(code):
    _dump()
    _exit(code)
os._exit = _dump_and_exit
"""


def _profile_children(out: Path, tmp: Path) -> None:
    """Make every Python process started from here on (the nodes) run under cProfile.

    A ``sitecustomize`` module on the children's ``PYTHONPATH`` starts the profiler at
    interpreter start-up and dumps it at exit; the launcher passes its environment on.
    Read the files with ``python -m pstats`` or ``pstats.Stats(*files)``.
    """
    out.mkdir(parents=True, exist_ok=True)
    hook = tmp / "profile-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(out=str(out.resolve())))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))


if __name__ == "__main__":
    sys.exit(main())
