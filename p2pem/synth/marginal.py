"""MST and AIM across parties: fit a release from rows spread over nodes, sample from it.

:func:`fit_marginals` runs a :class:`~p2pem.bayesnet.marginals.MarginalTask` on a table whose
rows are spread over the nodes of a graph, with any aggregation protocol and either
simulator engine, exactly as :func:`p2pem.synth.privbayes.fit_bayesnet` runs PrivBayes:
``centralized`` pools the rows at one curator (the MST and AIM of the papers); ``pdmm-sp``,
``secure-sum`` and ``federated`` sum every node's counts.  :func:`marginal_release` turns the
finished task into a release document (the header every synthesizer shares, the measured
marginals with their noise scales, the zCDP ledger, what members see, and the fitted model
as one network of conditionals), which :func:`p2pem.synth.privbayes.sample_release`'s
ancestral sampler reads: rows are drawn from the release alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from p2pem.bayesnet import sample_networks
from p2pem.bayesnet.marginalrelease import check_marginal_schema, release_fields
from p2pem.bayesnet.marginals import MarginalSettings, MarginalTask
from p2pem.builders import build_graph, load_table_parts
from p2pem.errors import ConfigError, DataError
from p2pem.protocols import Centralized, ProtocolSpec
from p2pem.protocols.base import Topology
from p2pem.scenario import Scenario
from p2pem.simulate import Traffic
from p2pem.streams import bayesnet_child
from p2pem.synth.marginalconfig import parse_marginals
from p2pem.synth.privbayes import AGGREGATIONS, IntArray, _release_networks, drive_counts, scenario_errors
from p2pem.dp.mechanisms import FLOAT_SAMPLER
from p2pem.dp.publication import Publication
from p2pem.synth.synthesizer import Progress, publish, release_header, release_schema, run_seed
from p2pem.tabular import Schema, Table, discretize, undiscretize

#: An MST or AIM release's fields declared public besides the header's: the bins and settings (public
#: choices) and how the run went (aggregations, wall time: side channels the privacy block names).  The
#: measurements' attribute sets are the selections' outcomes and their scales follow from the settings;
#: the networks are Private-PGM's estimate from the noisy marginals: post-processing.
RELEASE_PUBLIC = ("n_bins", "settings", "aggregations", "wall_s")

__all__ = ["RELEASE_PUBLIC", "MarginalRun", "MarginalSynthesizer", "check_marginal_schema", "fit_marginals", "marginal_document", "marginal_release",
           "members_view"]


@dataclass
class MarginalRun:
    """A finished MST or AIM release: node 0's task, what the aggregations cost, how long it took."""

    task: MarginalTask
    traffic: Traffic
    protocol: str
    n_nodes: int
    wall_s: float
    n_rows: int
    protocol_params: dict[str, Any] = field(default_factory=dict)


def fit_marginals(
    parts: Sequence[Table],
    settings: MarginalSettings,
    protocol: ProtocolSpec,
    *,
    graph: nx.Graph | Topology | None,
    seed: int,
    shared: np.random.SeedSequence | None,
    engine: str = "vectorised",
) -> MarginalRun:
    """Fit an MST or AIM model to rows spread over the graph's nodes.

    Parameters
    ----------
    parts : sequence of Table
        Node i's training rows at index i, under one public schema (a ``centralized`` run pools them).
    settings : MarginalSettings
    protocol : ProtocolSpec
        One of :data:`p2pem.synth.privbayes.AGGREGATIONS`.
    graph : networkx.Graph or Topology or None
        None only with ``centralized``.
    seed : int
        The scenario seed: every node's private seed (noise shares) comes from its
        ``"bayesnet"`` stream, the protocol's randomness from its ``"protocol"`` stream.
    shared : numpy.random.SeedSequence or None
        The seed every node shares (central noise, selections); None: commit-and-reveal
        among the nodes, as a deployment does.
    engine : {"vectorised", "messages"}

    Raises
    ------
    ConfigError
        A protocol that cannot sum counts, a non-public schema, too many values,
        ``noise = "shares"`` without a network, a graph of another size.
    """
    if not parts:
        raise DataError("no rows to release")
    schema = parts[0].schema
    if any(p.schema != schema for p in parts):
        raise DataError("the nodes' rows do not share one schema")
    sizes = check_marginal_schema(schema, settings)
    if protocol.name not in AGGREGATIONS:
        raise ConfigError(f"protocol {protocol.name!r} cannot aggregate an {settings.method.upper()} release (it adds noise of its own); "
                          f"choose one of {', '.join(AGGREGATIONS)} and set noise = 'shares' for per-node noise shares")
    if engine not in ("vectorised", "messages"):
        raise ConfigError(f"engine must be 'vectorised' or 'messages', got {engine!r}")
    binned = [discretize(p, settings.n_bins) for p in parts]
    n_rows = sum(p.n_rows for p in parts)
    t0 = time.perf_counter()

    def make(rows: list[IntArray], n_nodes: int, secrets: list[np.random.SeedSequence], ids: list[int] | None) -> MarginalTask:
        return MarginalTask(rows, sizes, settings, n_nodes, shared=shared, secrets=secrets, node_ids=ids)

    task, traffic, n, label = drive_counts(make, binned, protocol, graph, seed=seed, engine=engine, shares=settings.noise == "shares",
                                           what=settings.method)
    return MarginalRun(task, traffic, label, n, time.perf_counter() - t0, n_rows, protocol.params())


# ------------------------------------------------------------------------------ release


def members_view(settings: MarginalSettings, n_nodes: int, protocol: str) -> tuple[str, int | None, bool]:
    """What the members of the aggregation learn, per mode: (statement, colluders tolerated, epsilon holds against them).

    Members (and whoever reads the aggregation's output: federated's server, eavesdroppers
    on pdmm-sp's broadcasts and secure-sum's last lap) see every sum the run aggregates and
    the shared seed.  Only with ``noise = "shares"`` and MST's ``selection = "noisy"`` is
    every aggregated sum noisy, with noise that any ``n - t`` honest shares make.
    """
    if protocol == "centralized":
        return "one curator holds every row (the MST and AIM of the papers)", None, False
    t = n_nodes // 2 if settings.tolerate is None else settings.tolerate
    if settings.noise == "shares" and settings.method == "mst" and settings.selection == "noisy":
        return (f"only noisy sums: every aggregated table carries Gaussian noise of which any {n_nodes - t} honest nodes' shares make "
                f"the calibrated scale, so epsilon holds against up to {t} colluding members; the selection reads noisy pair tables "
                "(paid from the budget)", t, True)
    exact = ("the exact sums of every 1-way and every pair table (MST's selection scores read them)" if settings.method == "mst"
             else "the exact sums of every candidate table (every 1-way and pair table: AIM's selection scores read them)")
    shares = (" noise = 'shares' protects the measured tables' noise, but the selection already showed the exact tables"
              if settings.noise == "shares" else " and the shared seed of the central noise")
    return f"{exact};{shares}: no epsilon is claimed against members (MST with noise = 'shares' and selection = 'noisy' avoids this)", t, False


def marginal_release(run: MarginalRun, schema: Schema, *, scenario: Scenario) -> dict[str, Any]:
    """The release document of a simulated run (:func:`marginal_document` of the task's :func:`release_fields`)."""
    aggregations = {"count": run.task.iteration, "rounds": list(run.traffic.rounds.values()), "messages": run.traffic.messages,
                    "bytes": run.traffic.nbytes}
    return marginal_document(release_fields(run.task, schema.names), run.task.settings, schema, scenario=scenario, protocol=run.protocol,
                             n_nodes=run.n_nodes, n_rows=run.n_rows, protocol_params=run.protocol_params, aggregations=aggregations,
                             wall_s=run.wall_s)


def marginal_document(body: Mapping[str, Any], settings: MarginalSettings, schema: Schema, *, scenario: Scenario, protocol: str,
                      n_nodes: int, n_rows: int, protocol_params: Mapping[str, Any], aggregations: Mapping[str, Any],
                      wall_s: float) -> dict[str, Any]:
    """The release document: the shared header, the measured marginals and the ledger, the model as conditionals.

    ``body`` is what the finished task determines (:func:`p2pem.bayesnet.marginalrelease.release_fields`:
    a simulation's node 0, or a deployment's node 0 once every node agreed on it); the rest is
    public: the scenario, the settings, the protocol and how the run went.

    Keys after the header (:func:`p2pem.synth.synthesizer.release_header`): ``n_bins``,
    ``settings``, ``measurements`` (attribute names and noise standard deviation of every
    marginal the model is fitted to), ``networks`` (the estimated model as conditionals, the
    sampler's input), ``aggregations`` and ``wall_s``.  The ``privacy`` block adds the zCDP
    ``rho`` budget and spent, every ledger entry, and what members see (:func:`members_view`).
    """
    s = settings
    private = not math.isinf(s.epsilon)
    view, colluders, against_members = members_view(s, n_nodes, protocol)
    spent = body["epsilon_spent"]
    excluded = [
        "the public schema and its bins, the settings (method, epsilon, delta, bins, noise, selection, rounds, pairs)",
        f"the members of the aggregation: they see {view}",
    ]
    if protocol.startswith("pdmm-sp"):
        excluded.append("pdmm-sp's round and message counts and the run's timing (data-dependent side channels)")
    against: dict[str, Any] = {"outsider": {"zcdp": spent}}
    if protocol == "centralized":
        against["curator"] = None
    else:
        against["colluders"] = {"zcdp": spent if against_members else None}
    params: dict[str, Any] = {
        **protocol_params,
        "epsilon": s.epsilon if private else None,
        "delta": s.delta,
        "mechanism": "gaussian (marginals), exponential (selection)",
        "accountant": "zcdp",
        "epsilon_spent": against,
        "privacy": {"colluders": colluders, "epsilon": against, "excluded": excluded},
    }
    public = [
        f"the bins: the schema's public edges where it declares them, else {s.n_bins} equal-width bins over each numeric column's public range; "
        "values are drawn uniformly within a bin (among its whole numbers for an integer column)",
        "the settings (method, epsilon, delta, bins, noise, selection, iters, rounds, max_model_size, pairs)",
        "the model: Private-PGM's estimate from the noisy marginals (post-processing)",
    ]
    header = release_header(s.method, scenario, schema, training_rows=n_rows, protocol_params=params, protocol=protocol,
                            public=public)
    if not private:
        header["privacy"]["note"] = "epsilon = inf: the marginals were measured without noise (not differentially private)"
    names = schema.names
    header["privacy"].update({
        "rho": None if not private else s.rho,
        "rho_spent": body["rho_spent"],
        "members_see": view,
        "ledger": list(body["ledger"]),
    })
    header["n_bins"] = s.n_bins
    header["settings"] = {"method": s.method, "epsilon": s.epsilon if private else "inf", "delta": s.delta, "noise": s.noise,
                          "selection": s.selection, "iters": s.iters, "rounds": s.rounds, "max_model_size": s.max_model_size,
                          "max_cells": s.max_cells, "pairs": [[names[a] for a in p] for p in s.public_pairs]}
    header["measurements"] = list(body["measurements"])
    header["networks"] = list(body["networks"])
    header["aggregations"] = dict(aggregations)
    header["wall_s"] = wall_s
    return header


def sample_marginal_release(release: Mapping[str, Any], n_rows: int, rng: np.random.Generator) -> Table:
    """``n_rows`` rows drawn from an MST or AIM release alone: ancestral sampling of its conditionals, then values within bins."""
    if release.get("model") not in ("mst", "aim"):
        raise DataError(f"not an MST or AIM release (model {release.get('model')!r})")
    if isinstance(n_rows, bool) or not isinstance(n_rows, (int, np.integer)) or n_rows < 1:
        raise ConfigError(f"the number of rows must be a positive integer, got {n_rows!r}")
    schema = release_schema(release)
    n_bins = int(release["n_bins"])
    binned = sample_networks(_release_networks(release, schema, n_bins), int(n_rows), rng)
    return undiscretize(schema, binned, n_bins=n_bins, rng=rng)


# ------------------------------------------------------------------------------ synthesizer


@dataclass(frozen=True)
class MarginalSynthesizer:
    """``mst`` and ``aim``: marginals summed across the scenario's nodes, Private-PGM inference (module docstring).

    The scenario's ``[marginals]`` table gives the settings (:mod:`p2pem.synth.marginalconfig`;
    ``n_bins`` defaults to ``[data] n_bins``); the rows are spread over the nodes exactly as
    for the other synthesizers, and ``[synth] protocol`` sums the counts.
    """

    name: str = "mst"

    def fit(self, scenario: Scenario, protocol: ProtocolSpec, *, progress: Progress | None = None,
            publication: Publication | None = None) -> dict[str, Any]:
        """Fit the scenario's MST or AIM model with ``protocol``; the release document (:func:`marginal_release`).

        The shared seed (central noise, selections), the nodes' secrets (noise shares) and the
        protocol's randomness come from ``publication`` (None: OS entropy); the scenario seed
        only spreads the rows over the nodes.
        """
        schema, settings = self.settings(scenario)
        seed = run_seed(publication)
        with scenario_errors(scenario):
            parts, _ = load_table_parts(scenario)
            graph = None if isinstance(protocol, Centralized) else build_graph(scenario)
            run = fit_marginals(parts, settings, protocol, graph=graph, seed=seed, shared=bayesnet_child(seed, 0))
        # the noise comes from the seed the nodes share (every node repeats the draw): numpy's sampler
        return publish(marginal_release(run, schema, scenario=scenario), publication, RELEASE_PUBLIC, sampler=FLOAT_SAMPLER)

    def settings(self, scenario: Scenario) -> tuple[Schema, MarginalSettings]:
        """The scenario's public schema and ``[marginals]`` settings, checked before any row is read."""
        schema = scenario.data.schema
        if schema is None:
            raise ConfigError(f"{scenario.path}: the {self.name} synthesizer needs a [data] schema (a table of named, typed columns)")
        table = dict(scenario.marginals)
        table.setdefault("n_bins", scenario.data.n_bins)
        settings = parse_marginals(table, schema, self.name, where=str(scenario.path))
        with scenario_errors(scenario):
            check_marginal_schema(schema, settings)
        return schema, settings

    def sample(self, release: Mapping[str, Any], n_rows: int, rng: np.random.Generator) -> Table:
        """``n_rows`` rows drawn from the release alone (:func:`sample_marginal_release`)."""
        if release.get("model") != self.name:
            raise DataError(f"not a {self.name!r} release (model {release.get('model')!r})")
        return sample_marginal_release(release, n_rows, rng)
