"""A finished release as data, and a node's release task built from public facts and its own rows.

:func:`release_body` is the part of a release document that one node's finished
:class:`~p2pem.bayesnet.task.BayesNetTask` determines: the public schema, the networks
with their conditionals, the structure decisions, and the privacy block (epsilon against
each adversary, the ledger, what is excluded).  The simulated release
(:func:`p2pem.synth.privbayes.release_document`) and a deployed one (every node computes
it, the launcher takes node 0's once all nodes agreed) put the same body under their
header.

:func:`task_from_public` is what a deployed node runs: the public table every node holds
(``kind``, ``schema``, ``settings``, ``protocol``; :func:`public_table` writes it) and the
node's own rows under that schema.  Its secret comes from the operating system's entropy
and the shared seed from commit-and-reveal (:mod:`p2pem.bayesnet.seed`), unless an
INSECURE reproducible seed is given: then both come from the scenario seed exactly as in
a simulation, so the release equals the simulated one bit for bit.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from p2pem.bayesnet.privacy import REPORT_DELTA, BayesNetSettings
from p2pem.bayesnet.task import BayesNetTask
from p2pem.errors import ConfigError, DataError
from p2pem.streams import bayesnet_child
from p2pem.tabular import Continuous, Schema, discretize, domain_sizes, read_table, schema_from_dict, schema_to_toml

__all__ = ["KIND", "PublishedTask", "check_schema", "privacy_block", "public_table", "release_body", "task_from_public"]

#: The ``kind`` of a release's public table (a roster's ``[task]``).
KIND = "bayesnet"


def check_schema(schema: Schema, settings: BayesNetSettings) -> tuple[int, ...]:
    """The domain sizes of ``schema``'s columns under ``settings``, or a one-line ConfigError.

    Refuses a schema that is not public (its ranges, hence the bins, were read off the data)
    and an attribute with more values than ``settings.max_categories``.
    """
    where = schema.where or "the schema"
    if not schema.public:
        raise ConfigError(
            f"{where} is not public (public = false: its ranges or categories were read off the data, so bins built on them "
            "leak the rows); declare public ranges and categories and set public = true"
        )
    sizes = domain_sizes(schema, settings.n_bins)
    for column, size in zip(schema.columns, sizes, strict=True):
        if size > settings.max_categories:
            what = "bins" if isinstance(column, Continuous) else "categories"
            raise ConfigError(
                f"{where}: column {column.name!r} has {size} {what}, more than max_categories = {settings.max_categories} "
                "(merge categories in the schema or raise max_categories)"
            )
    settings.check_attributes(len(sizes))
    return sizes


# ------------------------------------------------------------------------------ the release


def privacy_block(task: BayesNetTask, *, protocol: str) -> dict[str, Any]:
    """Epsilon against each adversary, and what it excludes (see :mod:`p2pem.bayesnet.privacy`).

    ``epsilon_spent`` holds, per accountant (``basic``: pure epsilon; ``zcdp``, ``rdp`` at
    ``report_delta``), the epsilon against an ``outsider`` (who sees only the release) and
    against ``colluders`` (``colluders`` members pooling their views; None where no
    guarantee holds), or against the ``curator`` of a central run (None: it holds the rows).
    """
    s = task.settings
    outsider = task.ledger.epsilons()
    excluded = [
        "the public schema: column names, types, order, numeric ranges and category lists, and the bins built on them",
        f"the number of training rows n = {task.n_rows} (neighbouring data sets differ in one row: bounded DP, as in PrivBayes)",
        "the settings (model, epsilon, beta, theta, k, bins, clustering): public choices, not read off the rows by the release",
    ]
    if protocol == "centralized":
        against: dict[str, Any] = {"outsider": outsider, "curator": None}
        excluded.append("the curator: it holds every row")
        return _privacy(task, against, None, excluded)
    t = task.n_nodes // 2 if s.tolerate is None else s.tolerate
    if s.network is not None and s.noise == "shares":
        # members see the row count (public) and noisy sums whose noise any n - t shares make
        against = {"outsider": outsider, "colluders": task.ledger.shared_noise_epsilons(task.n_nodes - t, task.n_nodes - t)}
        excluded.append(
            f"more than {t} colluding members: subtracting their noise shares from the sums they see, they face less than the "
            "calibrated noise (no guarantee)"
        )
        excluded.append(
            f"{t} colluding members placed where they cut honest members off (both ring neighbours of a secure-sum member, every "
            f"neighbour of a pdmm-sp member): they read those members' noisy counts with fewer than the {task.n_nodes - t} shares "
            "that make the calibrated Laplace noise (no guarantee for those rows; the colluders epsilon assumes every honest "
            "member keeps an honest neighbour)"
        )
    else:
        against = {"outsider": outsider, "colluders": dict.fromkeys(outsider)}
        seen = ("every count table the structure search aggregates, which include every table the conditionals are built from"
                if s.network is None else "the conditionals' count tables (noise = 'central' adds the noise after the sum)")
        excluded.append(
            "the members of the aggregation (and whoever reads its output: the server of federated, eavesdroppers on pdmm-sp's "
            f"primal broadcasts and secure-sum's last lap): they see the exact network sums of {seen}, and the shared seed; "
            "epsilon holds against those who see only the release"
        )
        if s.noise == "shares":
            excluded.append(
                f"noise shares tolerating {t} colluders protect the released conditionals' noise, but the structure search "
                "already showed the members the exact tables, so no epsilon is claimed against members (give a public network "
                "for that)"
            )
    if protocol.startswith("pdmm-sp"):
        excluded.append("pdmm-sp's round and message counts and the run's timing (data-dependent side channels)")
    return _privacy(task, against, t, excluded)


def _privacy(task: BayesNetTask, against: dict[str, Any], colluders: int | None, excluded: list[str]) -> dict[str, Any]:
    s = task.settings
    outsider = against["outsider"]
    return {
        "differentially_private": outsider["basic"] is not None,
        "neighbours": "replace one row (n public)",
        "accountant": "basic",
        "mechanism": "exponential (structure), laplace (counts)",
        "epsilon": None if math.isinf(s.epsilon) else s.epsilon,
        "delta": 0.0,
        "report_delta": REPORT_DELTA,
        "colluders": colluders,
        "epsilon_spent": against,
        "ledger": task.ledger.to_list(),
        "excluded": excluded,
    }


def release_body(task: BayesNetTask, schema: Schema, *, protocol: str, n_nodes: int) -> dict[str, Any]:
    """What a finished task determines of its release document, JSON-ready.

    Keys, in order: ``model``, ``schema`` (in full: the sampler reads it back),
    ``training_rows``, ``n_nodes``, ``privacy`` (:func:`privacy_block`), ``public``,
    ``n_bins``, ``settings``, ``clusters``, ``networks`` (with their conditionals) and
    ``selections``; column names stand for attribute indices.

    Parameters
    ----------
    task : BayesNetTask
        Finished.
    schema : Schema
        The public schema of the rows.
    protocol : str
        The aggregation protocol's label (``centralized``: one curator).
    n_nodes : int
        Nodes of the aggregation (1 for a central run).

    Raises
    ------
    ConfigError
        The task ran HMPrivBayes with ``composition = "paper"``, which spends more than its
        epsilon (:mod:`p2pem.bayesnet.privacy`): it is for comparisons, never released.
    """
    names = schema.names
    s = task.settings
    if s.hm and s.composition == "paper":
        raise ConfigError("bayesnet: composition = 'paper' spends more than epsilon (its clusters share rows); it is for comparisons and is never released")
    networks = []
    for net in task.networks:
        networks.append(
            {
                "attributes": [names[a] for a in net.attributes],
                "conditionals": [
                    {"child": names[c.child], "parents": [names[p] for p in c.parents], "probabilities": c.probabilities.tolist()}
                    for c in net.conditionals
                ],
            }
        )
    public = [
        "the schema: column names, types, order, numeric ranges and category lists"
        + ("" if schema.public else " -- NOT PUBLIC: the schema says it was read off the data"),
        f"the bins: the schema's public edges where it declares them, else {s.n_bins} equal-width bins over each numeric column's public range",
        f"the graph of {n_nodes} nodes, the parties' names ('parties', when they have names) and every node's row count" if n_nodes > 1 else "the number of training rows",
        "the settings (model, epsilon, beta, theta, k, score, bins, noise, clustering)",
    ]
    if s.network is not None:
        public.append("the network: given in the settings, not learned from the rows")
    return {
        "model": s.model,
        "schema": tomllib.loads(schema_to_toml(schema)),
        "training_rows": task.n_rows,
        "n_nodes": n_nodes,
        "privacy": privacy_block(task, protocol=protocol),
        "public": public,
        "n_bins": s.n_bins,
        "settings": s.to_dict(),
        "clusters": [[names[a] for a in c] for c in task.clusters],
        "networks": networks,
        "selections": [
            {"network": x.network, "step": x.step, "child": names[x.chosen.child], "parents": [names[p] for p in x.chosen.parents],
             "candidates": x.n_candidates, "epsilon": None if math.isinf(x.epsilon) else x.epsilon}  # no score: the exact utility of the rows
            for x in task.selections
        ],
    }


# ------------------------------------------------------------------------------ deployed


def public_table(schema: Schema, settings: BayesNetSettings, protocol: str) -> dict[str, Any]:
    """The public facts every node of a deployed release needs (a roster's ``[task]``).

    No value is None or infinite (the roster is TOML): unset settings are left out and
    ``epsilon = inf`` is written as the string ``"inf"``.
    """
    values = {k: v for k, v in settings.to_dict().items() if v is not None}
    if math.isinf(settings.epsilon):
        values["epsilon"] = "inf"
    return {"kind": KIND, "protocol": protocol, "schema": tomllib.loads(schema_to_toml(schema)), "settings": values}


@dataclass
class PublishedTask(BayesNetTask):
    """A node's :class:`BayesNetTask` that also knows the public schema and protocol of its release.

    :meth:`document` is the optional ``document()`` of the Task interface: the release body
    (:func:`release_body`) once finished, which a deployment writes into the node's result.
    """

    schema: Schema | None = None
    protocol: str = ""

    def document(self) -> dict[str, Any]:
        """The release body of this node (:func:`release_body`)."""
        assert self.schema is not None  # set by task_from_public
        return release_body(self, self.schema, protocol=self.protocol, n_nodes=self.n_nodes)


def task_from_public(
    table: Mapping[str, Any], rows: str | os.PathLike[str], *, node_id: int, n_nodes: int, seed: int | None = None, where: str = "task"
) -> PublishedTask:
    """Node ``node_id``'s release task from the public ``table`` (:func:`public_table`) and its rows.

    Parameters
    ----------
    table : mapping
        ``kind``, ``protocol``, ``schema`` and ``settings``, as every node holds them.
    rows : path-like
        This node's rows: a CSV file with a header row under the schema's column names
        (:func:`p2pem.tabular.write_csv`).
    node_id, n_nodes : int
    seed : int, optional
        INSECURE, for tests and reproductions: the scenario seed; the node's secret and the
        shared seed then come from it as in a simulation (no commit-and-reveal).  Default:
        the secret from the operating system's entropy, the shared seed by commit-and-reveal.
    where : str
        Names the table in errors (e.g. the roster file).

    Raises
    ------
    ConfigError
        A malformed table, a schema that is not public, bad settings.
    DataError
        The rows do not fit the schema.
    """
    if table.get("kind") != KIND or not isinstance(table.get("schema"), Mapping) or not isinstance(table.get("settings"), Mapping):
        raise ConfigError(f"{where}: [task] must have kind = {KIND!r}, a schema table and a settings table")
    protocol = table.get("protocol")
    if not isinstance(protocol, str):
        raise ConfigError(f"{where}: [task] protocol must be a string, got {protocol!r}")
    schema = schema_from_dict(table["schema"], where=where, prefix="task.schema")
    values = dict(table["settings"])
    if values.get("epsilon") == "inf":
        values["epsilon"] = math.inf
    for key in ("network", "clusters"):
        if isinstance(values.get(key), list):
            values[key] = tuple(tuple(entry) for entry in values[key])
    try:
        settings = BayesNetSettings(**values)
        sizes = check_schema(schema, settings)
    except TypeError as exc:  # an unknown setting
        raise ConfigError(f"{where}: [task.settings] {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{where}: [task] {str(exc).removeprefix('bayesnet: ')}") from None
    own = read_table(rows, schema, header=True, separator=",")
    if own.n_dropped:
        raise DataError(f"node {node_id}: {rows} has {own.n_dropped} rows with a missing value")
    if seed is None:
        shared, secret = None, np.random.SeedSequence()
    else:
        shared, secret = bayesnet_child(seed, 0), bayesnet_child(seed, 1, node_id)
    return PublishedTask(
        [discretize(own, settings.n_bins)], sizes, settings, n_nodes, shared=shared, secrets=[secret], node_ids=[node_id],
        schema=schema, protocol=protocol,
    )
