"""The ``[marginals]`` table of a scenario: the settings of an MST or AIM release.

Keys (all optional; unknown keys are errors)::

    [marginals]
    epsilon = 1.0             # the budget, (epsilon, delta)-DP through zCDP; "inf" measures without noise
    delta = 1e-9
    n_bins = 10               # equal-width bins per numeric column without schema edges
    noise = "central"         # "central": once, from the nodes' shared seed; "shares": every node
                              #   adds a Gaussian share before the aggregation
    tolerate = 50             # with noise = "shares": colluders whose shares may be subtracted
    selection = "exact"       # MST: "exact" (exponential mechanism on the exact pair tables) or
                              #   "noisy" (every pair measured with noise, the tree built on those)
    iters = 1000              # Private-PGM's mirror-descent iterations (AIM: per round)
    rounds = 30               # AIM: most rounds (default 16 per column, the paper's)
    max_model_size = 80.0     # AIM: largest junction tree, MB
    max_cells = 10000         # AIM: workload pairs with more cells are left out
    max_categories = 100      # refuse a column with more values
    pairs = [["age", "income"]]   # pairs chosen from public knowledge, always measured

Every error is one line naming the file and the dotted key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from p2pem.bayesnet.marginals import NOISE, SELECTIONS, MarginalSettings
from p2pem.errors import ConfigError
from p2pem.tabular import Schema
from p2pem.tomltable import Table, show

__all__ = ["MARGINAL_KEYS", "parse_marginals"]

MARGINAL_KEYS = ("epsilon", "delta", "n_bins", "noise", "tolerate", "selection", "iters", "rounds", "max_model_size", "max_cells",
                 "max_categories", "pairs")


def parse_marginals(table: Mapping[str, Any], schema: Schema, method: str, *, where: str, prefix: str = "marginals") -> MarginalSettings:
    """Validate a ``[marginals]`` table (module docstring) for ``method`` ("mst" or "aim") over ``schema``'s columns.

    Raises
    ------
    ConfigError
        One line naming ``where`` and the dotted key.
    """
    sec = Table(where, dict(table), prefix, MARGINAL_KEYS)
    values: dict[str, Any] = {"method": method}
    if sec.has("epsilon"):
        values["epsilon"] = math.inf if sec.table["epsilon"] == "inf" else sec.number("epsilon", positive=True)
    for key in ("delta", "max_model_size"):
        if sec.has(key):
            values[key] = sec.number(key, positive=True)
    for key in ("n_bins", "iters", "rounds", "max_cells", "max_categories"):
        if sec.has(key):
            values[key] = sec.integer(key, minimum=1)
    if sec.has("tolerate"):
        values["tolerate"] = sec.integer("tolerate", minimum=0)
    if sec.has("noise"):
        values["noise"] = sec.choice("noise", NOISE)
    if sec.has("selection"):
        values["selection"] = sec.choice("selection", SELECTIONS)
    if sec.has("pairs"):
        values["public_pairs"] = _pairs(sec, schema)
    try:
        return MarginalSettings(**values)
    except ConfigError as exc:
        raise ConfigError(f"{where}: [{prefix}] {str(exc).removeprefix('marginals: ')}") from None


def _pairs(sec: Table, schema: Schema) -> tuple[tuple[int, int], ...]:
    raw = sec.table["pairs"]
    key = sec.key("pairs")
    if not (isinstance(raw, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(n, str) for n in p) for p in raw)):
        sec.fail(f"{key!r} must be an array of [column, column] pairs of column names, got {show(raw)}")
    names = schema.names
    out = []
    for i, pair in enumerate(raw):
        for n in pair:
            if n not in names:
                sec.fail(f"'{key}[{i}]' names {n!r}, not a column of the schema ({', '.join(names)})")
        a, b = sorted(names.index(n) for n in pair)
        if a == b:
            sec.fail(f"'{key}[{i}]' names one column twice")
        out.append((a, b))
    return tuple(out)
