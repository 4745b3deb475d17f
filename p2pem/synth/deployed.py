"""A synthetic-data release deployed: ``p2pem deploy`` on a ``privbayes``/``hmprivbayes``/``mst``/``aim`` scenario.

The deployment machinery (:mod:`p2pem.deploy`) runs any task a roster names; this module
supplies the release's part:

:func:`release_kit`
    The :class:`~p2pem.deploy.kit.TaskKit` of a scenario: the roster's public ``[task]``
    table (kind ``bayesnet``, the public schema, the ``[bayesnet]`` settings, the protocol
    label; :func:`p2pem.bayesnet.release.public_table`; or kind ``marginals`` with the
    ``[marginals]`` settings of MST or AIM, :func:`p2pem.bayesnet.marginalrelease.public_table`)
    and each node's own rows, written
    under the schema's column names.  Nothing private crosses the kit: every node builds
    its task from the public table and its own file (:func:`p2pem.registry.make_task`), its
    secret from the operating system and the shared seed by commit-and-reveal (or, with the
    INSECURE reproducible seed, both from the scenario seed as ``p2pem synth`` does).
:func:`deploy_release`
    Prepare the kit, run the node processes through the broker, and write
    ``DIR/release/release.json`` (the document ``p2pem synth`` writes, from node 0's release once
    every node agreed on it) and ``DIR/release/synthetic.csv`` sampled from it.
:func:`finish_release`
    The same two files for a kit run separately (``p2pem deploy --kit DIR``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from p2pem.bayesnet import marginalrelease
from p2pem.bayesnet.release import public_table
from p2pem.builders import load_table_parts
from p2pem.deploy.kit import Kit, TaskKit, pick_protocol
from p2pem.errors import ConfigError, DataError
from p2pem.files import write_json
from p2pem.runner import output_header
from p2pem.scenario import Scenario
from p2pem.streams import synth_child
from p2pem.synth.config import parse_synth
from p2pem.dp.mechanisms import FLOAT_SAMPLER
from p2pem.dp.publication import Publication
from p2pem.synth import marginal
from p2pem.synth.marginal import MarginalSynthesizer, marginal_document
from p2pem.synth.privbayes import RELEASE_PUBLIC, AGGREGATIONS, BayesNetSynthesizer, assemble_release, scenario_errors
from p2pem.synth.registry import SYNTHESIZERS
from p2pem.synth.run import RELEASE_DIR
from p2pem.synth.synthesizer import RELEASE_FORMAT, publish
from p2pem.tabular import write_csv

__all__ = ["DEPLOYABLE", "deploy_release", "finish_release", "is_release", "release_differences", "release_kit", "release_protocol"]


#: The aggregation protocols a deployed release runs on (peer to peer: no server process).
DEPLOYABLE = tuple(a for a in AGGREGATIONS if a not in ("centralized", "federated"))


def is_release(scenario: Scenario) -> bool:
    """The scenario's ``[synth] model`` is a deployable release (``privbayes``, ``hmprivbayes``, ``mst``, ``aim``)."""
    return isinstance(SYNTHESIZERS.get(str(scenario.synth.get("model"))), (BayesNetSynthesizer, MarginalSynthesizer))


def _what(scenario: Scenario) -> str:
    model = str(scenario.synth.get("model"))
    return f"{model.upper()} release" if isinstance(SYNTHESIZERS.get(model), MarginalSynthesizer) else "Bayesian-network release"


def release_protocol(scenario: Scenario, protocol: str | None) -> str:
    """Which of the scenario's protocols to deploy: ``protocol`` (a name or position 1, 2, ...),
    default ``[synth] protocol`` (as ``p2pem synth``); refused unless it can sum counts."""
    config = parse_synth(scenario, tuple(SYNTHESIZERS))
    chosen = str(config.protocol + 1) if protocol is None else protocol
    spec = pick_protocol(scenario, chosen)
    if spec.name not in DEPLOYABLE:
        why = "it adds noise of its own" if spec.name not in AGGREGATIONS else "its server process runs EM only"
        raise ConfigError(
            f"{scenario.path}: protocol {spec.name!r} cannot aggregate a deployed {_what(scenario)} ({why}); "
            f"deploy one of {', '.join(DEPLOYABLE)} (set [bayesnet] noise = 'shares' for per-node noise shares)"
        )
    return chosen


def release_kit(scenario: Scenario, protocol: str) -> TaskKit:
    """The task kit of the scenario's release with ``protocol`` (:func:`release_protocol`).

    Raises
    ------
    ConfigError
        Not a release scenario, a bad ``[bayesnet]`` table, a schema that is not public.
    DataError
        The rows cannot be read under the schema.
    """
    synthesizer = SYNTHESIZERS.get(str(scenario.synth.get("model")))
    if not isinstance(synthesizer, (BayesNetSynthesizer, MarginalSynthesizer)):
        raise ConfigError(f"{scenario.path}: [synth] model {scenario.synth.get('model')!r} is not a deployable release "
                          "(privbayes, hmprivbayes, mst or aim)")
    spec = pick_protocol(scenario, protocol)
    label = getattr(spec, "label", spec.name)
    if isinstance(synthesizer, MarginalSynthesizer):
        schema, marginal_settings = synthesizer.settings(scenario)
        table = marginalrelease.public_table(schema, marginal_settings, label)
    else:
        schema, settings = synthesizer.settings(scenario)
        table = public_table(schema, settings, label)
    with scenario_errors(scenario):
        parts, _ = load_table_parts(scenario)

    def write_rows(i: int, path: Path) -> None:
        write_csv(parts[i], path)

    return TaskKit(table, write_rows)


def deploy_release(scenario: Scenario, out: str | os.PathLike[str], *, protocol: str | None = None, rows: int | None = None,
                   **options: Any) -> tuple[Kit, dict[str, Any]]:
    """Deploy the scenario's release in ``out`` (one process per node, through a broker) and write its files.

    Parameters
    ----------
    scenario : Scenario
        ``[synth] model`` ``privbayes``, ``hmprivbayes``, ``mst`` or ``aim``.
    out : path-like
        New folder: the kit, ``result.json`` (the deployment's), ``release.json`` and
        ``synthetic.csv``.
    protocol : str, optional
        A name or position; default ``[synth] protocol``.
    rows : int, optional
        Synthetic rows (default ``[synth] rows``, else as many as the training rows).
    **options
        Passed on to :func:`p2pem.deploy.launcher.deploy` (broker, listen, run_id,
        seeded, timeouts, progress, tls, sites).

    Returns
    -------
    (Kit, dict)
        The kit and the release document.
    """
    from p2pem.deploy.launcher import deploy  # here: the launcher loads the broker and process machinery

    chosen = release_protocol(scenario, protocol)
    kit, doc = deploy(scenario, out, protocol=chosen, task=release_kit(scenario, chosen), **options)
    return kit, finish_release(kit, doc, scenario, rows=rows)


def finish_release(kit: Kit, doc: Mapping[str, Any], scenario: Scenario, *, rows: int | None = None) -> dict[str, Any]:
    """Write ``release/release.json`` and ``release/synthetic.csv`` into the kit's folder from a finished run's ``result.json``.

    The release is node 0's (every node agreed on its digest before the launcher collected
    them); the synthetic rows are drawn from it alone, from OS entropy (from ``p2pem synth``'s
    stream with the insecure reproducible seed, which the privacy block then states).

    Raises
    ------
    DataError
        The document holds no release.
    """
    body = doc.get("output")
    kind = doc.get("task")
    if not isinstance(body, Mapping) or kind not in ("bayesnet", marginalrelease.KIND):
        raise DataError(f"{kit.root}/result.json: the run released no Bayesian network, MST or AIM model")
    run = doc["protocols"][0]
    aggregations = {"count": run["n_iter"], "rounds": run["rounds"], "messages": run["messages"], "bytes": run["bytes"]}
    if kind == "bayesnet":
        header = output_header(RELEASE_FORMAT, scenario)
        release = assemble_release(header, body, {"name": run["protocol"], "params": run["protocol_params"]}, aggregations, run["wall_s"])
        public: tuple[str, ...] = RELEASE_PUBLIC
        training_rows = int(body["training_rows"])
    else:
        synthesizer = SYNTHESIZERS.get(str(scenario.synth.get("model")))
        if not isinstance(synthesizer, MarginalSynthesizer):
            raise DataError(f"{kit.root}/result.json: an MST or AIM run, but the scenario's [synth] model is {scenario.synth.get('model')!r}")
        schema, settings = synthesizer.settings(scenario)
        training_rows = int(doc["n_rows"])
        release = marginal_document(body, settings, schema, scenario=scenario, protocol=run["protocol"], n_nodes=kit.n_nodes,
                                    n_rows=training_rows, protocol_params=run["protocol_params"], aggregations=aggregations,
                                    wall_s=run["wall_s"])
        public = marginal.RELEASE_PUBLIC
    release["deployment"] = {"run_id": kit.run_id, "seeded": kit.seeded, "result": "../result.json"}
    publication = Publication.insecure(scenario.seed) if kit.seeded else Publication.secure()
    publish(release, publication, public, sampler=FLOAT_SAMPLER)  # every member repeats the draws from the shared seed
    n_rows = rows or parse_synth(scenario, tuple(SYNTHESIZERS)).rows or training_rows
    rng = np.random.default_rng(synth_child(scenario.seed, 0, 0)) if kit.seeded else np.random.default_rng()
    table = SYNTHESIZERS[str(release["model"])].sample(release, int(n_rows), rng)
    folder = kit.root / RELEASE_DIR
    folder.mkdir(exist_ok=True)
    write_csv(table, folder / "synthetic.csv")
    write_json(folder / "release.json", release)
    return release


#: What a deployed release may differ in from the simulated one: how long it took, how it was run.
RUN_FIELDS = frozenset({"wall_s", "deployment", "aggregations"})


def release_differences(deployed: Mapping[str, Any], simulated: Mapping[str, Any]) -> list[str]:
    """The top-level fields of two release documents that differ, apart from :data:`RUN_FIELDS`
    and the aggregations' message and byte counts (the count and rounds are compared)."""
    keys = sorted((set(deployed) | set(simulated)) - RUN_FIELDS)
    out = [k for k in keys if deployed.get(k) != simulated.get(k)]
    a, b = deployed.get("aggregations", {}), simulated.get("aggregations", {})
    out += [f"aggregations.{k}" for k in ("count", "rounds") if a.get(k) != b.get(k)]
    return out
