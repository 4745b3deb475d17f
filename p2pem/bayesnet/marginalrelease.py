"""An MST or AIM release as data, and a deployed node's release task built from public facts and its own rows.

:func:`release_fields` is the part of a release document that one node's finished
:class:`~p2pem.bayesnet.marginals.MarginalTask` determines: the measured marginals with their
noise scales, the zCDP ledger and what it spent, and Private-PGM's model as conditionals.  The
simulated release (:func:`p2pem.synth.marginal.marginal_release`) and a deployed one (every
node computes the fields, the launcher takes node 0's once every node agreed on the
release's digest) put the same fields under the same header, so a seeded deployment writes
the release ``p2pem synth`` writes, to the byte.

:func:`task_from_public` is what a deployed node runs: the public table every node holds
(``kind = "marginals"``, ``schema``, ``settings``, ``protocol``; :func:`public_table` writes
it) and the node's own rows under that schema.  Its secret comes from the operating system's
entropy and the shared seed (central noise, selections) by commit-and-reveal
(:mod:`p2pem.bayesnet.seed`), unless an INSECURE reproducible seed is given: then both come
from the scenario seed exactly as in ``p2pem synth --insecure-reproducible-seed``.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from p2pem.bayesnet import marginals
from p2pem.bayesnet.marginals import MarginalSettings, MarginalTask
from p2pem.errors import ConfigError, DataError
from p2pem.streams import bayesnet_child
from p2pem.tabular import Continuous, Schema, discretize, domain_sizes, read_table, schema_from_dict, schema_to_toml

__all__ = ["KIND", "PublishedMarginalTask", "check_marginal_schema", "public_table", "release_fields", "settings_from_table",
           "settings_table", "task_from_public"]

#: The ``kind`` of an MST or AIM release's public table (a roster's ``[task]``).
KIND = "marginals"


def check_marginal_schema(schema: Schema, settings: MarginalSettings) -> tuple[int, ...]:
    """The domain sizes of ``schema``'s columns, or a one-line ConfigError (a non-public schema, too many values)."""
    where = schema.where or "the schema"
    if not schema.public:
        raise ConfigError(f"{where} is not public (public = false: its ranges or categories were read off the data); declare public "
                          "ranges and categories and set public = true")
    sizes = domain_sizes(schema, settings.n_bins)
    for column, size in zip(schema.columns, sizes, strict=True):
        if size > settings.max_categories:
            what = "bins" if isinstance(column, Continuous) else "categories"
            raise ConfigError(f"{where}: column {column.name!r} has {size} {what}, more than max_categories = {settings.max_categories}")
    if len(sizes) < 2:
        raise ConfigError(f"{where}: MST and AIM need at least 2 columns")
    return sizes


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def release_fields(task: MarginalTask, names: Sequence[str]) -> dict[str, Any]:
    """What a finished task determines of its release, JSON-ready; column names stand for attribute indices.

    Keys: ``count`` (aggregations run), ``rho_spent`` and ``epsilon_spent`` (None without
    noise), ``ledger`` (every measurement and selection with its zCDP cost), ``measurements``
    (attribute names and noise standard deviation of every marginal the model is fitted to)
    and ``networks`` (Private-PGM's model as conditionals, the sampler's input).
    """
    s = task.settings
    private = not math.isinf(s.epsilon)
    return {
        "count": task.iteration,
        "rho_spent": task.ledger.rho if private else None,
        "epsilon_spent": task.ledger.epsilon(s.delta) if private else None,
        "ledger": [{k: _finite(v) for k, v in e.items()} | {"attrs": [names[a] for a in e["attrs"]]} for e in task.ledger.entries],
        "measurements": [{"attrs": [names[a] for a in m.attrs], "sigma": m.sigma} for m in task.measurements],
        "networks": [
            {"attributes": [names[a] for a in net.attributes],
             "conditionals": [{"child": names[c.child], "parents": [names[p] for p in c.parents], "probabilities": c.probabilities.tolist()}
                              for c in net.conditionals]}
            for net in task.networks
        ],
    }


# ------------------------------------------------------------------------------ deployed


def settings_table(settings: MarginalSettings, names: Sequence[str]) -> dict[str, Any]:
    """The settings as a TOML table: unset ones left out, ``epsilon = inf`` as ``"inf"``, public pairs by column name."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if value is None:
            continue
        if f.name == "public_pairs":
            value = [[names[a] for a in pair] for pair in value]
        elif isinstance(value, float) and math.isinf(value):
            value = "inf"
        out[f.name] = value
    return out


def settings_from_table(table: Mapping[str, Any], names: Sequence[str], *, where: str) -> MarginalSettings:
    """The settings of :func:`settings_table`, or a one-line ConfigError naming ``where``."""
    values = dict(table)
    if values.get("epsilon") == "inf":
        values["epsilon"] = math.inf
    pairs = values.get("public_pairs", [])
    if not (isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 and all(n in names for n in p) for p in pairs)):
        raise ConfigError(f"{where}: [task.settings] public_pairs must be [column, column] pairs of the schema's columns, got {pairs!r}")
    values["public_pairs"] = tuple(tuple(sorted(names.index(n) for n in p)) for p in pairs)
    try:
        return MarginalSettings(**values)
    except TypeError as exc:  # an unknown setting
        raise ConfigError(f"{where}: [task.settings] {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{where}: [task.settings] {str(exc).removeprefix('marginals: ')}") from None


def public_table(schema: Schema, settings: MarginalSettings, protocol: str) -> dict[str, Any]:
    """The public facts every node of a deployed MST or AIM release needs (a roster's ``[task]``); no None or inf (TOML)."""
    return {"kind": KIND, "protocol": protocol, "schema": tomllib.loads(schema_to_toml(schema)),
            "settings": settings_table(settings, schema.names)}


@dataclass
class PublishedMarginalTask(MarginalTask):
    """A node's :class:`MarginalTask` that also knows its public schema.

    :meth:`document` is the optional ``document()`` of the Task interface: the release
    fields (:func:`release_fields`) once finished, which a deployment writes into the node's result.
    """

    schema: Schema | None = None

    def document(self) -> dict[str, Any]:
        """The release fields of this node (:func:`release_fields`)."""
        assert self.schema is not None  # set by task_from_public
        return release_fields(self, self.schema.names)


def task_from_public(
    table: Mapping[str, Any], rows: str | os.PathLike[str], *, node_id: int, n_nodes: int, seed: int | None = None, where: str = "task"
) -> PublishedMarginalTask:
    """Node ``node_id``'s MST or AIM task from the public ``table`` (:func:`public_table`) and its rows.

    Parameters
    ----------
    table : mapping
        ``kind``, ``protocol``, ``schema`` and ``settings``, as every node holds them.
    rows : path-like
        This node's rows: a CSV file with a header row under the schema's column names.
    node_id, n_nodes : int
    seed : int, optional
        INSECURE, for tests and reproductions: the scenario seed; the node's secret and the
        shared seed then come from it as in ``p2pem synth`` (no commit-and-reveal).  Default:
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
    if not isinstance(table.get("protocol"), str):
        raise ConfigError(f"{where}: [task] protocol must be a string, got {table.get('protocol')!r}")
    schema = schema_from_dict(table["schema"], where=where, prefix="task.schema")
    settings = settings_from_table(table["settings"], schema.names, where=where)
    try:
        sizes = check_marginal_schema(schema, settings)
    except ConfigError as exc:
        raise ConfigError(f"{where}: [task] {exc}") from None
    own = read_table(rows, schema, header=True, separator=",")
    if own.n_dropped:
        raise DataError(f"node {node_id}: {rows} has {own.n_dropped} rows with a missing value")
    # import Private-PGM (and JAX) now, before the node goes online: the import takes seconds, and
    # inside the run it would stall the node's message loop in the middle of an aggregation
    marginals._mbi()
    if seed is None:
        shared, secret = None, np.random.SeedSequence()
    else:
        shared, secret = bayesnet_child(seed, 0), bayesnet_child(seed, 1, node_id)
    return PublishedMarginalTask([discretize(own, settings.n_bins)], sizes, settings, n_nodes, shared=shared, secrets=[secret],
                                 node_ids=[node_id], schema=schema)
