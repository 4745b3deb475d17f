"""The ``[bayesnet]`` table of a scenario: the settings of a PrivBayes or HMPrivBayes release.

Keys (all optional; unknown keys are errors)::

    [bayesnet]
    epsilon = 0.8             # the whole budget (pure epsilon); "inf" releases without noise
    beta = 0.3                # structure share of the budget (PrivBayes' beta)
    score = "r"               # "r" (TODS 2017, sensitivity 3/n) or "mi" (mutual information, Lemma 1)
    theta = 4.0               # theta-usefulness: a noisy table has <= n eps_2 / (2 d theta) cells
    k = 2                     # most parents of an attribute; default: theta alone bounds the tables
    n_bins = 10               # equal-width bins per numeric column without schema edges
    noise = "central"         # "central": once, from the nodes' shared seed; "shares": every node
                              #   adds a share before the aggregation
    tolerate = 50             # with noise = "shares": colluders whose shares may be subtracted
    max_categories = 100      # refuse a column with more values
    network = [["sex"], ["relationship", "sex"], ...]   # a public network instead of a learned
                              #   one: [child, parents...] per column, in sampling order
    # HMPrivBayes only ([synth] model = "hmprivbayes"):
    clustering = true         # split the columns into n_clusters groups, one network each
    n_clusters = 2
    eta = 0.0                 # eq. (9): prune a parent whose released similarity to the child is <= eta x the largest of either
    cluster_share = 0.1       # budget share of the similarity matrix (eps_1 of the clustering)
    entropy_share = 0.05      # budget share of the attribute entropies

Every error is one line naming the file and the dotted key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from p2pem.bayesnet import MODELS, NOISE, BayesNetSettings
from p2pem.bayesnet.privacy import SCORES
from p2pem.errors import ConfigError
from p2pem.tabular import Schema
from p2pem.tomltable import Table, show

__all__ = ["BAYESNET_KEYS", "parse_bayesnet"]

BAYESNET_KEYS = (
    "epsilon", "beta", "score", "theta", "k", "n_bins", "noise", "tolerate", "max_categories", "network",
    "clustering", "n_clusters", "eta", "cluster_share", "entropy_share",
)
_HM_ONLY = ("clustering", "n_clusters", "eta", "cluster_share", "entropy_share")


def parse_bayesnet(table: Mapping[str, Any], schema: Schema, model: str, *, where: str, prefix: str = "bayesnet") -> BayesNetSettings:
    """Validate a ``[bayesnet]`` table (module docstring) for ``model`` over ``schema``'s columns.

    Raises
    ------
    ConfigError
        One line naming ``where`` and the dotted key.
    """
    if model not in MODELS:
        raise ConfigError(f"{where}: the model must be one of {', '.join(MODELS)}, got {model!r}")
    sec = Table(where, dict(table), prefix, BAYESNET_KEYS)
    if model != "hmprivbayes":
        for key in _HM_ONLY:
            if sec.has(key):
                sec.fail(f"{sec.key(key)!r} is an HMPrivBayes setting (model = 'hmprivbayes'), not used by {model!r}")
    values: dict[str, Any] = {"model": model}
    if sec.has("epsilon"):
        raw = sec.table["epsilon"]
        if raw == "inf":
            values["epsilon"] = math.inf
        else:
            values["epsilon"] = sec.number("epsilon", positive=True)
    for key in ("beta", "theta", "eta", "cluster_share", "entropy_share"):
        if sec.has(key):
            values[key] = sec.number(key)
    for key in ("k", "n_bins", "tolerate", "max_categories", "n_clusters"):
        if sec.has(key):
            values[key] = sec.integer(key)
    if sec.has("score"):
        values["score"] = sec.choice("score", SCORES)
    if sec.has("noise"):
        values["noise"] = sec.choice("noise", NOISE)
    if sec.has("clustering"):
        values["clustering"] = sec.boolean("clustering")
    if sec.has("network"):
        values["network"] = _network(sec, schema)
    try:
        settings = BayesNetSettings(**values)
        settings.check_attributes(len(schema.columns))
    except ConfigError as exc:
        raise ConfigError(f"{where}: [{prefix}] {str(exc).removeprefix('bayesnet: ')}") from None
    return settings


def _network(sec: Table, schema: Schema) -> tuple[tuple[int, ...], ...]:
    raw = sec.table["network"]
    key = sec.key("network")
    if not (isinstance(raw, list) and all(isinstance(entry, list) and entry and all(isinstance(n, str) for n in entry) for entry in raw)):
        sec.fail(f"{key!r} must be an array of [child, parents...] arrays of column names, got {show(raw)}")
    names = schema.names
    out = []
    for i, entry in enumerate(raw):
        unknown = [n for n in entry if n not in names]
        if unknown:
            sec.fail(f"'{key}[{i}]' names {unknown[0]!r}, not a column of the schema ({', '.join(names)})")
        out.append(tuple(names.index(n) for n in entry))
    return tuple(out)
