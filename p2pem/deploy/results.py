"""Merging the nodes' results of a deployment into one ``result.json``: the one job of this module.

:func:`collect_results` reads every node's ``result.json``, tells a failed run (naming the
node whose error explains it) from nodes the others agreed to drop, checks that the
survivors agree on the model, and builds the document in the schema of ``p2pem simulate``
plus a ``deployment`` section; :func:`compare_with_simulate` measures how far it is from
the simulator's answer.
"""

from __future__ import annotations

import collections
import json
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from p2pem.deploy.failures import nodes_text
from p2pem.deploy.roster import Roster
from p2pem.deploy.kit import Kit
from p2pem.deploy.supervise import DeploymentFailed
from p2pem.errors import ConfigError, ProtocolError
from p2pem.families import MixtureFamily
from p2pem.messages import SERVER

__all__ = ["collect_results", "compare_with_simulate", "write_result"]


def collect_results(
    kit: Kit,
    codes: Sequence[int] | Mapping[int, int],
    wall: float,
    *,
    exit_times: dict[int, float] | None = None,
    launched_unix: float | None = None,
) -> dict[str, Any]:
    """Read every party's result file, check agreement and build the ``result.json`` document.

    ``codes`` are the exit codes by party id, or a sequence in the order of
    :attr:`Kit.parties` (the nodes, then a server).  ``exit_times`` (seconds after launch,
    per node) and ``launched_unix`` (when the first process was started) add
    launcher-relative timings to the per-node entries.  Every node the others evicted
    (``on_dropout = "continue"``) is listed under ``deployment.evicted`` with the neighbours
    that signed it fell silent.
    """
    by_party = dict(codes) if isinstance(codes, Mapping) else dict(zip(kit.parties, codes, strict=False))
    reports: dict[int, dict[str, Any] | None] = {}
    for i in kit.parties:
        try:
            reports[i] = json.loads(kit.result_path(i).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            reports[i] = None
    # nodes the others agreed to drop (on_dropout = "continue") are not failures of the run
    dropped: dict[int, dict[str, Any]] = {}
    for rep in reports.values():
        if rep is not None and rep.get("status") == "finished":
            for d in rep.get("dropped", []):
                dropped.setdefault(int(d["node"]), d)
    failed = [
        i for i, rep in reports.items() if i not in dropped and (by_party.get(i, 0) != 0 or rep is None or rep.get("status") != "finished")
    ]
    if failed:
        raise DeploymentFailed(_failure_summary(kit, by_party, reports, failed))
    survivors = [i for i in range(kit.n_nodes) if i not in dropped]
    ok: list[dict[str, Any]] = []
    for i in survivors:
        rep = reports[i]
        assert rep is not None  # a survivor without a report is in `failed` above
        ok.append(rep)
    sets = {tuple(sorted(int(d["node"]) for d in rep.get("dropped", []))) for rep in ok}
    if len(sets) > 1:
        raise DeploymentFailed(f"deployment failed: the surviving nodes disagree on who dropped out ({sorted(sets)})")
    if dropped:
        _check_quorum(Roster.load(kit.roster_path), dropped)
    doc = _combine(kit, ok, wall, exit_times or {}, launched_unix)
    doc["deployment"]["evicted"] = [
        {"node": k, "iteration": int(d["iteration"]), "witnesses": [int(w) for w in d["witnesses"]]} for k, d in sorted(dropped.items())
    ]
    server = reports.get(SERVER) if kit.server else None
    if server is not None:
        doc["deployment"]["server"] = {k: server.get(k) for k in ("aggregations", "messages", "bytes", "wire", "timings", "costs", "cpu_s")}
    return doc


def _check_quorum(roster: Roster, dropped: Mapping[int, dict[str, Any]]) -> None:
    """Refuse a run whose evictions rest on fewer witnesses than the quorum (:func:`~p2pem.deploy.eviction.quorum`).

    A vote is evidence, not proof: an eviction on fewer witnesses than ``tolerate + 1`` (or all
    of the victim's neighbours) may be the work of colluding members, so the run is not a
    success; the message prints the witnesses it had.
    """
    from p2pem.deploy.eviction import colluders, quorum

    t = colluders(roster.protocol_spec(), roster.n_nodes)
    for k, d in sorted(dropped.items()):
        witnesses = sorted({int(w) for w in d.get("witnesses", []) if int(w) in roster.neighbours[k]})
        need = quorum(roster.neighbours, k, t)
        if len(witnesses) < need:
            raise DeploymentFailed(
                f"deployment failed: unattributable: node {k} was evicted in EM iteration {int(d['iteration'])} on the word of "
                f"{len(witnesses)} of its neighbours ({nodes_text(witnesses)}), but an eviction needs {need} "
                f"(more than tolerate = {t} colluders, or all of its neighbours)"
            )


def _failure_summary(kit: Kit, codes: Mapping[int, int], reports: Mapping[int, dict | None], failed: list[int]) -> str:
    def reason(i: int) -> str:
        rep = reports[i]
        if rep is not None and rep.get("error"):
            return str(rep["error"])
        code = codes.get(i, 0)
        if code < 0:
            return f"node {i} was killed by {signal.Signals(-code).name} (no result)"
        tail = _last_line(kit.log_path(i))
        return f"node {i} exited with code {code}" + (f": {tail}" if tail else "")

    reasons = {i: reason(i) for i in failed}
    kinds = {i: (reports[i] or {}).get("reason") for i in failed}
    proved = {i: [int(c) for c in (reports[i] or {}).get("culprits", [])] for i in failed}

    # Prefer a node that holds proof against a culprit, then one that failed by itself (bad
    # data) over one that only noticed a neighbour's absence, and that over one told by a
    # neighbour or stopped by a signal.
    def rank(i: int) -> int:
        if proved[i]:
            return -1
        if kinds[i] in _TOLD:
            return 2
        return 1 if kinds[i] in _ABSENCE or (reports[i] is None and codes.get(i, 0) < 0) else 0

    # Among nodes that noticed a silence, prefer one accusing the node most others accuse: a
    # node that was itself paused (SIGSTOP) wakes up to find every neighbour gone and accuses
    # them all (or the first it misses), while its neighbours agree on it.  A node stopped by a
    # relayed abort votes for the abort's culprits: a neighbour that saw the silence first
    # signed them, so one early detector is not outvoted by the woken node alone.
    accused = {i: (reports[i] or {}).get("suspects", []) if kinds[i] in ("silent", "aborted") else [] for i in failed}
    votes = collections.Counter(a for names in accused.values() for a in set(names))
    primary = min(failed, key=lambda i: (rank(i), -max((votes[a] for a in accused[i]), default=0), i))
    others = len(failed) - 1
    more = f"; {others} other node{'s' if others != 1 else ''} stopped too" if others else ""
    return f"deployment failed: {reasons[primary]}{more}; {_verdict(proved, reports, failed)} (logs: {kit.root / 'nodes'}/node*/node.log)"


def _verdict(proved: Mapping[int, list[int]], reports: Mapping[int, dict | None], failed: list[int]) -> str:
    """Who is convicted, and by whom, or ``unattributable`` with the suspects (docs/threats.md).

    Only a node that holds proof (a statement the culprit authenticated itself) convicts; the
    suspects are the nodes the others name on evidence (a silence, a slow edge, a different
    final model, another node's abort), with how many nodes name each.
    """
    by: dict[int, list[int]] = {}
    for i in failed:
        for c in proved[i]:
            by.setdefault(c, []).append(i)
    if by:
        return "proved: " + "; ".join(f"node {c} (shown to {nodes_text(w)})" for c, w in sorted(by.items()))
    named = collections.Counter(int(a) for i in failed for a in set((reports[i] or {}).get("suspects", [])))
    if not named:
        return "unattributable: no node is named"
    return "unattributable (no node is proved to have broken the protocol): suspects " + ", ".join(
        f"node {a} (named by {k})" for a, k in sorted(named.items(), key=lambda x: (-x[1], x[0]))
    )


#: Failure reasons (``result.json``'s ``reason``) of a node that was told to stop, or stopped by a signal.
_TOLD = frozenset({"aborted", "interrupted"})
#: Failure reasons of a node that noticed another's absence.
_ABSENCE = frozenset({"silent", "offline", "stalled", "cannot_continue"})


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _combine(kit: Kit, reports: list[dict[str, Any]], wall: float, exit_times: dict[int, float], launched_unix: float | None) -> dict[str, Any]:
    from p2pem.simulate import relative_error

    ref = reports[0]
    n_iters = {r["n_iter"] for r in reports}
    if len(n_iters) != 1:
        raise ProtocolError(f"nodes disagree on the number of {'aggregations' if 'summary' in ref else 'EM iterations'}: {sorted(n_iters)}")
    roster = Roster.load(kit.roster_path)
    family = roster.em_settings().family
    # a task's nodes compare its summary, EM's the model (the last entry a log-likelihood either way)
    flatten = (lambda r: np.asarray(r["summary"], dtype=np.float64)) if roster.task is not None else family.flatten
    flat0 = flatten(ref)
    spread = max((relative_error(flatten(r), flat0) for r in reports[1:]), default=0.0)
    if not spread <= kit.max_node_spread:
        raise ProtocolError(f"nodes ended with different {'results' if roster.task is not None else 'models'}: relative spread {spread:.3g} > {kit.max_node_spread:g}")
    iterations = sorted({int(k) for r in reports for k in r["rounds"]})
    rounds = {it: float(np.mean([r["rounds"][str(it)] for r in reports])) for it in iterations}
    spec = roster.protocol_spec()
    if roster.task is not None:
        run_doc = {
            "protocol": getattr(spec, "label", spec.name), "protocol_params": spec.params(), "task": roster.task["kind"],
            "n_iter": int(ref["n_iter"]), "rounds": [rounds[k] for k in iterations], "messages": int(sum(r["messages"] for r in reports)),
            "bytes": int(sum(r["bytes"] for r in reports)), "wall_s": wall, "node_spread": spread,
        }
    else:
        run_doc = _em_run(spec, roster, family, ref, reports, rounds, iterations, wall, spread)
    nodes = [_node_entry(r, exit_times, launched_unix) for r in reports]
    return _document(kit, roster, family, reports, nodes, run_doc, wall)


def _em_run(spec, roster, family, ref, reports, rounds, iterations, wall, spread) -> dict[str, Any]:
    from p2pem.simulate import RunResult

    run = RunResult(
        protocol=getattr(spec, "label", spec.name),
        protocol_params=spec.params(),
        resolved_params=spec.resolved_params(roster.topology()),
        params=_model(family, ref),
        family=family,
        loglik=list(ref["loglik"]),
        n_iter=int(ref["n_iter"]),
        converged=bool(ref["converged"]),
        consensus_iterations=[rounds[k] for k in iterations if k > 0],
        init_consensus_iterations=rounds.get(0),
        messages=int(sum(r["messages"] for r in reports)),
        bytes=int(sum(r["bytes"] for r in reports)),
        wall_s=wall,
        node_spread=spread,
        unconverged_iterations=sorted(set().union(*(r["unconverged_iterations"] for r in reports))),
    )
    return run.to_json()


def _node_entry(r: dict[str, Any], exit_times: dict[int, float], launched_unix: float | None) -> dict[str, Any]:
    t = r["timings"]
    return {
        "node_id": r["node_id"],
        "n_rows": r["n_rows"],
        "messages": r["messages"],
        "bytes": r["bytes"],
        **{k: v for k, v in r["wire"].items()},
        "connect_s": t.get("connected_s"),
        "online_s": t.get("online_s"),
        "online_after_launch_s": None
        if launched_unix is None or t.get("online_s") is None
        else t["started_unix"] + t["online_s"] - launched_unix,
        "run_s": None if t.get("finished_s") is None or t.get("online_s") is None else t["finished_s"] - t["online_s"],
        "agree_s": None if t.get("agreed_s") is None or t.get("finished_s") is None else t["agreed_s"] - t["finished_s"],
        **{k: v for k, v in r.get("costs", {}).items()},
        "total_s": t.get("total_s"),
        "cpu_s": r.get("cpu_s"),
        "online_cpu_s": t.get("online_cpu_s"),
        "rusage": r.get("rusage"),
        "heavy_modules": r.get("heavy_modules"),
        "exit_s": exit_times.get(r["node_id"]),
    }


def _document(kit: Kit, roster: Roster, family: MixtureFamily, reports: list[dict[str, Any]], nodes: list[dict[str, Any]],
              run_doc: dict[str, Any], wall: float) -> dict[str, Any]:
    from p2pem.builders import build_graph
    from p2pem.runner import RESULT_FORMAT, graph_summary, output_header

    if kit.scenario_file is not None and kit.scenario_file.exists():
        from p2pem.scenario import load_scenario

        scenario = load_scenario(kit.scenario_file)
        doc: dict[str, Any] = {**output_header(RESULT_FORMAT, scenario), "graph": graph_summary(build_graph(scenario))}
    else:
        doc = {**output_header(RESULT_FORMAT, None), "graph": {"n_nodes": roster.n_nodes, "diameter": roster.diameter}}
    if roster.parties is not None:  # the roster's names are what the nodes ran under
        doc["parties"] = list(roster.parties)
    if roster.task is None:
        doc["family"] = family.describe()
    else:
        doc["task"] = roster.task["kind"]
    doc["n_rows"] = int(sum(r["n_rows"] for r in reports))
    doc["protocols"] = [run_doc]
    if roster.task is not None:
        doc["output"] = reports[0].get("output")  # every node agreed on it (its summary)
    run_s = [n["run_s"] for n in nodes if n["run_s"] is not None]
    online = [n["online_after_launch_s"] for n in nodes if n["online_after_launch_s"] is not None]
    # on the host clocks (one machine, or synchronised clocks): from the last node's end of EM
    # to the last node's agreement with all its neighbours, what the final check adds to the run
    ends = [(r["timings"]["started_unix"] + r["timings"]["finished_s"], r["timings"]["started_unix"] + r["timings"]["agreed_s"])
            for r in reports if all(r["timings"].get(k) is not None for k in ("started_unix", "finished_s", "agreed_s"))]
    doc["deployment"] = {
        "run_id": kit.run_id,
        "broker": f"{kit.broker_host}:{kit.broker_port}",
        "n_processes": kit.n_nodes,
        "seeded": kit.seeded,
        "secrets": "INSECURE: protocol noise from the scenario seed (reproducible, not private)" if kit.seeded else "OS entropy",
        "wall_s": wall,
        "startup_s": max(online) if online else None,  # launch -> last node online
        "run_s": max(run_s) if run_s else None,
        "agreement_tail_s": max(0.0, max(a for _, a in ends) - max(f for f, _ in ends)) if len(ends) == len(reports) and ends else None,
        "envelopes_published": int(sum(n["published"] for n in nodes)),
        "wire_bytes": int(sum(n["wire_bytes"] for n in nodes)),
        "control_messages": int(sum(n["control_sent"] for n in nodes)),
        "deliveries": int(sum(n["received"] for n in nodes)),
        "duplicates": int(sum(n["duplicates"] for n in nodes)),
        "rejected": int(sum(sum(n["rejected"].values()) for n in nodes)),
        "reconnects": int(sum(n["reconnects"] for n in nodes)),
        "node_cpu_s": float(sum(n["cpu_s"] or 0.0 for n in nodes)),
        "nodes": nodes,
    }
    return doc


def write_result(kit: Kit, doc: dict[str, Any]) -> Path:
    """Write ``DIR/result.json`` atomically."""
    from p2pem.files import write_json

    return write_json(kit.root / "result.json", doc)


def compare_with_simulate(kit: Kit, doc: dict[str, Any]) -> float:
    """Largest relative difference of the model's arrays (the family's parameters) to ``p2pem simulate`` (vectorised)."""
    from p2pem.builders import build_graph, em_settings, load_data
    from p2pem.scenario import load_scenario
    from p2pem.simulate import max_relative_difference, run_protocol

    if kit.scenario_file is None:
        raise ConfigError("the kit has no scenario to simulate")
    scenario = load_scenario(kit.scenario_file)
    roster = Roster.load(kit.roster_path)
    schedule = {int(d["node"]): int(d["iteration"]) for d in doc.get("deployment", {}).get("evicted", [])}
    if schedule:
        from p2pem.deploy.dropout import simulate_with_dropouts
        from p2pem.simulate import protocol_streams

        parts = load_data(scenario)
        model: Any
        model, _ = simulate_with_dropouts(
            parts, roster.neighbours, roster.protocol_spec(), em_settings(scenario), schedule,
            rngs=protocol_streams(scenario.streams()["protocol"], len(parts)),
        )
    else:
        model = run_protocol(
            load_data(scenario), build_graph(scenario), roster.protocol_spec(), em_settings(scenario), seed=scenario.streams()["protocol"]
        ).params
    run = doc["protocols"][0]
    family = roster.em_settings().family
    return max_relative_difference(_model(family, run), model, family)


def _model(family: MixtureFamily, document: Mapping[str, Any]) -> Any:
    """The model a node report or a result entry holds, in the family's parameter names (validated)."""
    return family.params_from_dict({key: document[key] for key, _ in family.param_keys}, len(document["weights"]))

