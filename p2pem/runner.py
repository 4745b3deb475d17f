"""Scenario -> graph, data, settings -> protocol runs -> files.  Shared by every CLI command."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from p2pem.builders import build_graph, build_protocols, em_settings, load_data, validate_protocol
from p2pem.builders import build_protocols as protocols  # re-exported under the name it had here
from p2pem.dp.guarantees import add_excluded, check_public_preprocessing, preprocessing_excluded
from p2pem.files import atomic_output as atomic_output  # re-exported: the commands import it from here
from p2pem.files import write_json as write_json
from p2pem.graphs import degree_report
from p2pem.protocols import ProtocolSpec, Topology
from p2pem.scenario import Scenario
from p2pem.simulate import Progress, RunResult, run_protocol

log = logging.getLogger(__name__)

__all__ = ["RESULT_FORMAT", "ScenarioRun", "build_graph", "em_settings", "graph_summary", "output_header", "protocols", "run_scenario"]


#: Format name and version of the result.json that ``p2pem simulate`` writes.
#: Version 2: ``family`` (the model family, ``{"name": ..., **config}``), and each protocol's
#: model under the family's parameter names (the Gaussian family's as in version 1).
RESULT_FORMAT = ("p2pem-result", 2)


@contextlib.contextmanager
def progress_bar(desc: str, unit: str, *, enabled: bool = True) -> Iterator[Callable[[int, int], None] | None]:
    """A ``(done, total)`` progress callback drawing a bar on stderr, closed on leaving; None when not ``enabled``.

    No bar is drawn when stderr is not a terminal (logs, CI).
    """
    if not enabled:
        yield None
        return
    from tqdm import tqdm  # here: start-up time (a node process never draws a progress bar)

    bar = tqdm(desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True, disable=None)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        bar.close()


def graph_summary(g: nx.Graph) -> dict:
    """Size, diameter and degrees of ``g`` for result.json and the CLI.

    The diameter is exact up to 2000 nodes (all shortest paths, in SciPy); above, where all
    pairs would take minutes (``networkx.diameter`` needs 11 s at 2000 nodes and grows as
    n * m), ``diameter`` is None and ``diameter_bounds`` brackets it: a double BFS sweep from
    below, the eccentricity bounds that pdmm-sp's stopping rule uses from above.
    """
    rep = degree_report(g)
    topo = Topology.from_graph(g)
    upper = int(topo.diameter)
    exact = g.number_of_nodes() <= 2000  # eccentricity_bounds computes all pairs up to there
    lower = upper if exact else int(np.max(topo.sweep[0]))
    return {
        "n_nodes": g.number_of_nodes(),
        "n_edges": g.number_of_edges(),
        "diameter": upper if exact else None,
        "diameter_bounds": [lower, upper],
        "radius": g.graph.get("radius"),
        "degrees": list(rep.degrees),
    }


def output_header(form: tuple[str, int], scenario: Scenario | None) -> dict[str, Any]:
    """The fields a JSON output about a scenario starts with.

    ``format`` and ``version`` from ``form``, then the scenario it came from: ``scenario``
    (name), ``scenario_file`` and ``seed``, and ``parties``, the one mapping of node ids to
    the parties' own names (node ``i`` is ``parties[i]``; None when the nodes are only
    numbered); all None when there is no scenario (a deployment kit run without its
    scenario file).
    """
    fmt, version = form
    if scenario is None:
        return {"format": fmt, "version": version, "scenario": None, "scenario_file": None, "seed": None, "parties": None}
    parties = scenario.parties
    return {"format": fmt, "version": version, "scenario": scenario.name, "scenario_file": str(scenario.path), "seed": scenario.seed,
            "parties": None if parties is None else list(parties)}


@dataclass
class ScenarioRun:
    scenario: Scenario
    graph: nx.Graph
    runs: list[RunResult]
    n_rows: int = 0

    def to_json(self) -> dict:
        return {
            **output_header(RESULT_FORMAT, self.scenario),
            "family": self.scenario.em.family.describe(),
            "graph": graph_summary(self.graph),
            "n_rows": self.n_rows,
            "protocols": [r.to_json() for r in self.runs],
        }


def run_scenario(
    scenario: Scenario,
    *,
    engine: str = "vectorised",
    progress: Callable[[ProtocolSpec], Progress | None] | None = None,
    record_trace: bool = False,
    device: str | None = None,
) -> ScenarioRun:
    """Run every protocol of ``scenario`` from the same data, graph and initialisation."""
    parts = load_data(scenario)
    g = build_graph(scenario)
    settings = em_settings(scenario)
    specs = build_protocols(scenario)
    for spec in specs:  # fail before running anything
        spec.check_settings(settings)
        if spec.name != "centralized":
            validate_protocol(scenario, g, spec)
    runs = []
    data = scenario.data
    private = [spec.name for spec in specs if "epsilon" in spec.params()]
    check_public_preprocessing(str(scenario.path), data.standardize, data.pca, data.public is not None, private)
    preprocessing = preprocessing_excluded(data.standardize, data.pca, None if data.public is not None else "all rows")
    log.info("%s: graph of %d nodes and %d edges; protocols %s", scenario.name, g.number_of_nodes(), g.number_of_edges(),
             ", ".join(spec.name for spec in specs))
    for spec in specs:
        log.info("%s: running %s (%s engine, %d EM iterations at most)", scenario.name, spec.name, engine, settings.max_iter)
        cb = progress(spec) if progress is not None else None
        run = run_protocol(parts, g, spec, settings, seed=scenario.streams()["protocol"], engine=engine, record_trace=record_trace, progress=cb,
                           device=device)
        add_excluded(run.protocol_params, preprocessing)
        log.info("%s: %s done: %d EM iterations, %d messages, %.3f s", scenario.name, run.protocol, run.n_iter, run.messages, run.wall_s)
        runs.append(run)
    return ScenarioRun(scenario, g, runs, int(sum(len(p) for p in parts)))


