"""A ``p2pem simulate`` result as a saved model (``p2pem model RESULT_DIR --out model.json``).

``result.json`` holds every protocol's fitted parameters and names its scenario file and
seed; what a saved model needs besides (the raw feature names, the preprocessing constants,
the graph's edges and the node of every row) is rebuilt from that scenario exactly as the run
built it, and checked against what the result recorded (rows, graph size and degrees), so a
scenario or data file changed since the run is refused rather than saved wrong.

A simulation is not a release (:mod:`p2pem.dp.publication`): a private run's noise came from
the scenario seed, so anyone with the scenario file can recompute and remove it.  Such a run
is therefore saved only

* with ``fresh_noise``: the protocol is run again on the same rows with noise from OS entropy
  (recorded nowhere), and the saved model is that run's; or
* with ``insecure``: the simulated model as it is, its privacy block saying
  ``differentially_private: false`` (tests and benchmarks).

A run of an exact protocol adds no noise and is saved as it is (it is not private either way).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from p2pem.builders import build_graph, build_protocols, em_settings, load_data, prepare_rows, split_indices
from p2pem.data import Preprocessing, fit_preprocessing, load_table
from p2pem.dp.mechanisms import FLOAT_SAMPLER, HARDENED_SAMPLER, hardened_noise
from p2pem.dp.guarantees import add_excluded, preprocessing_excluded
from p2pem.dp.publication import INSECURE_FLAG, Publication
from p2pem.errors import ConfigError, DataError, P2pemError
from p2pem.families import family_from_document
from p2pem.runner import RESULT_FORMAT, graph_summary
from p2pem.saved import SavedModel
from p2pem.scenario import Scenario, load_scenario
from p2pem.simulate import run_protocol
from p2pem.streams import scenario_streams

__all__ = ["saved_from_result"]


def saved_from_result(result: str | os.PathLike[str], protocol: str | None = None, *, fresh_noise: bool = False,
                      insecure: bool = False) -> SavedModel:
    """The model one protocol of a ``p2pem simulate`` run fitted, with everything to use it again.

    Parameters
    ----------
    result : path
        The run's output folder, or its ``result.json``.
    protocol : str, optional
        Which run: its label in ``result.json`` (as the table prints it, e.g.
        ``dp-central-gaussian``) or the scenario's protocol name (``dp-central``).
        Default: the first protocol.
    fresh_noise : bool
        A private run: fit it again with noise from OS entropy and save that model.
    insecure : bool
        A private run: save the simulated model, marked not differentially private.

    Raises
    ------
    ConfigError
        The result cannot be read, names no such protocol, or its scenario file is missing
        or no longer builds the same rows and graph (one line naming the file); a private
        run without ``fresh_noise`` or ``insecure``.
    """
    path = Path(result)
    file = path / "result.json" if path.is_dir() else path
    doc = _read_result(file)
    runs = doc["protocols"]
    labels = [r.get("protocol") for r in runs]
    scenario = _scenario_of(doc, file)
    names = [p.name for p in scenario.protocols]
    if protocol is None:
        index = 0
    elif protocol in labels:
        index = labels.index(protocol)
    elif protocol in names and len(names) == len(runs):
        index = names.index(protocol)
    else:
        from p2pem.tomltable import did_you_mean  # here: only an error needs it

        raise ConfigError(f"{file}: no protocol {protocol!r} in the result (it has: {', '.join(map(str, labels))}){did_you_mean(protocol, labels)}")
    run = runs[index]
    private = isinstance(run.get("protocol_params", {}).get("privacy"), dict)
    if fresh_noise and insecure:
        raise ConfigError("--fresh-noise and --insecure-reproducible-seed exclude each other")
    if private and not (fresh_noise or insecure):
        raise ConfigError(
            f"{file}: {labels[index]} is a simulation, not a release: its noise comes from the scenario seed, so anyone with the "
            "scenario file can remove it; save it with --fresh-noise (the protocol runs again with noise from OS entropy) or, "
            "for tests only, --insecure-reproducible-seed (saved as not differentially private)"
        )
    raw, feature_names, pre, owners, graph = _rebuild(scenario, doc, file)
    if private and fresh_noise:
        run = _fresh_run(scenario, index, graph)
        run["protocol_params"]["privacy"]["sampler"] = HARDENED_SAMPLER if build_protocols(scenario)[index].name == "dp-central" else FLOAT_SAMPLER
    if private:
        _mark_publication(run["protocol_params"]["privacy"], Publication.insecure(scenario.seed) if insecure else Publication.secure())

    try:
        family = family_from_document(doc.get("family") or "gaussian")  # result.json version 2 names the family of every run
    except ConfigError as exc:
        raise ConfigError(f"{file}: 'family': {exc}") from None
    width = raw.shape[1] if pre is None or pre.components is None else int(pre.components.shape[0])
    try:
        params = family.params_from_dict({key: run[key] for key, _ in family.param_keys}, scenario.em.n_components, width)
    except (P2pemError, KeyError) as exc:
        raise ConfigError(f"{file}: protocols[{index}] does not hold a {family.name} model of the scenario's shape ({exc})") from None
    node_ids = scenario.data.node_ids or scenario.graph.node_ids
    em = scenario.em
    return SavedModel(
        family=family,
        params=params,
        n_features_in=int(raw.shape[1]),
        feature_names=feature_names,
        preprocessing=pre,
        protocol={"name": names[index] if len(names) == len(runs) else str(labels[index]), "label": labels[index],
                  "params": run.get("protocol_params", {})},
        fit={"n_iter": run["n_iter"], "converged": run["converged"], "loglik": run["loglik"], "n_rows": doc["n_rows"],
             "max_iter": em.max_iter, "tol": em.tol, "reg_covar": em.reg_covar, "seed": scenario.seed},
        graph={"n_nodes": graph.number_of_nodes(), "edges": sorted([min(e), max(e)] for e in graph.edges),
               "node_ids": None if node_ids is None else list(node_ids)},
        row_nodes=[int(v) for v in owners],
        scenario={"name": scenario.name, "file": str(scenario.path), "seed": scenario.seed},
    )


#: The fields of a saved private model declared public: everything but ``params`` (the noisy releases,
#: post-processed): the row count and every row's node (public under replace-one), the graph, the
#: public preprocessing constants (fitted ones are refused in a private run), the settings.
MODEL_PUBLIC = ("format", "version", "p2pem", "created", "family", "n_components", "features", "preprocessing", "protocol", "fit",
                "graph", "row_nodes", "scenario")


def _fresh_run(scenario: Scenario, index: int, graph: Any) -> dict[str, Any]:
    """Protocol ``index`` of ``scenario`` run again on the same rows and graph, its noise from OS entropy (as result.json holds a run)."""
    spec = build_protocols(scenario)[index]
    seed = scenario_streams(Publication.secure().seed())["protocol"]  # recorded nowhere
    with hardened_noise() if spec.name == "dp-central" else contextlib.nullcontext():  # one party draws it: OpenDP's samplers
        outcome = run_protocol(load_data(scenario), graph, spec, em_settings(scenario), seed=seed)
    data = scenario.data
    add_excluded(outcome.protocol_params, preprocessing_excluded(data.standardize, data.pca, None if data.public is not None else "all rows"))
    return outcome.to_json()


def _mark_publication(privacy: dict[str, Any], publication: Publication) -> None:
    """A saved private model's privacy block: a release, with where its noise came from (:mod:`p2pem.dp.publication`)."""
    privacy.pop("note", None)
    privacy.update(release=True, noise=publication.noise, differentially_private=not publication.reproducible, public=list(MODEL_PUBLIC))
    if publication.reproducible:
        privacy["note"] = (f"INSECURE ({INSECURE_FLAG}): the simulated model, whose noise follows from the scenario seed; "
                           "NOT differentially private")


def _read_result(file: Path) -> dict[str, Any]:
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{file}: no such file (give the output folder of `p2pem simulate` or its result.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{file}: not a readable result.json ({exc})") from None
    fmt, version = RESULT_FORMAT
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise ConfigError(f"{file}: not a p2pem result (format {doc.get('format') if isinstance(doc, dict) else None!r}, expected {fmt!r})")
    if doc.get("version") != version:
        raise ConfigError(f"{file}: result version {doc.get('version')!r}; this p2pem reads version {version}: run the scenario again")
    if "deployment" in doc:
        raise ConfigError(f"{file}: a deployment's result (its nodes' data never met): save a model from `p2pem simulate` of the same scenario")
    if not doc.get("protocols"):
        raise ConfigError(f"{file}: holds no protocol run")
    return doc


def _scenario_of(doc: dict[str, Any], file: Path) -> Scenario:
    scenario_file = doc.get("scenario_file")
    if not scenario_file:
        raise ConfigError(f"{file}: names no scenario file")
    try:
        scenario = load_scenario(scenario_file)
    except P2pemError as exc:
        raise ConfigError(f"{file}: its scenario is needed to rebuild the features, preprocessing and graph: {exc}") from None
    if scenario.seed != doc.get("seed"):
        raise ConfigError(f"{file}: the run had seed {doc.get('seed')}, {scenario_file} now has seed {scenario.seed}")
    return scenario


def _rebuild(scenario: Scenario, doc: dict[str, Any], file: Path):
    """The raw rows, their names, the preprocessing map, each row's node and the graph, as the run built them."""
    cfg = scenario.data
    fitted = cfg.public is None and (cfg.standardize or cfg.pca is not None)
    raw_scenario = dataclasses.replace(scenario, data=dataclasses.replace(cfg, standardize=False, pca=None, public=None))
    rng = np.random.default_rng(scenario.streams()["data"])
    raw, _ = prepare_rows(raw_scenario, rng=rng)  # the same draws from the data stream as the run (synthetic data)
    names: tuple[str, ...] | None = None
    if cfg.source == "csv":
        assert cfg.path is not None
        drop = cfg.drop_columns if cfg.node_column is None else (*cfg.drop_columns, cfg.node_column)
        names = load_table(cfg.path, columns=cfg.columns, drop_columns=drop, header=cfg.header)[1]
    pre: Preprocessing | None = cfg.public
    if fitted:
        pre = fit_preprocessing(raw, standardize=cfg.standardize, pca=cfg.pca, column_names=names)
    X = raw if pre is None else pre.apply(raw)
    try:
        blocks = split_indices(scenario, len(X), rng)
    except DataError as exc:
        raise DataError(f"{scenario.path}: {exc}") from exc
    owners = np.empty(len(X), dtype=np.int64)
    for node, rows in enumerate(blocks):
        owners[rows] = node
    graph = build_graph(scenario)
    recorded, now = doc.get("graph", {}), graph_summary(graph)
    same = all(recorded.get(key) == now[key] for key in ("n_nodes", "n_edges", "degrees")) and doc.get("n_rows") == len(X)
    if not same:
        raise ConfigError(
            f"{file}: {scenario.path} (or its data) no longer builds the run's rows and graph "
            f"({doc.get('n_rows')} rows, {recorded.get('n_nodes')} nodes, {recorded.get('n_edges')} edges then; "
            f"{len(X)} rows, {now['n_nodes']} nodes, {now['n_edges']} edges now)"
        )
    return raw, names, pre, owners, graph
