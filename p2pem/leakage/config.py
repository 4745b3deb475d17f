"""The ``[leakage]`` table of a scenario file, validated.

Keys (all optional except as noted; unknown keys are errors)::

    [leakage]
    adversary = ["honest-but-curious"]  # or "eavesdropper", "both"; a string or an array
    corrupt = [1, 3]                    # corrupt node ids, or the parties' names ("h3"); required
                                        # unless only "eavesdropper"
    server_corrupt = true               # federated: the server is honest-but-curious too
    targets = [0, 2, 4]                 # nodes (ids or names) whose leakage is measured, or "all" (every
                                        # honest node); default: every honest node up to
                                        # DEFAULT_MAX_TARGETS of them, else a chosen subset
    inputs = "data"                     # or "gaussian": what the nodes aggregate per run
    feature = 0                         # inputs = "data": column of the prepared data
                                        # (default: the one of largest spread)
    runs = 10000                        # Monte Carlo runs (>= 200)
    rounds = 20                         # pdmm-sp rounds analysed; default: to the public stop
                                        # round a real run stops at (20 where it has none)
    k = 3                               # KSG neighbours
    n_batches = 10                      # disjoint batches for the confidence interval
    level = 0.95                        # confidence level
    folds = 5                           # cross-fitting folds of the adversary's linear estimate
    node_labels = ["1", "2", "3", "4", "5"]  # how nodes are printed (default: the parties'
                                        # names when the scenario has them, else the ids)
    sweep_std = [1e-2, 1, 100]          # perturbation sweep: pdmm-sp initial-dual stds
    perturbation = "absolute"           # or "relative": pdmm-sp's perturbation_std and
                                        # sweep_std in multiples of the statistic's std

What each node aggregates in a Monte Carlo run (:mod:`p2pem.leakage.inputs`): with
``inputs = "data"`` the responsibility-weighted sum r * sum x of one feature over as many rows
as the node holds, redrawn in every run from the scenario's own rows; with ``"gaussian"`` the
model of the paper, r X_i with X_i ~ N(0, 1).  r = 1/K with K = ``em.n_components``.
pdmm-sp's ``perturbation_std`` is in the units of that statistic, so with ``perturbation =
"absolute"`` the same number hides less of a statistic of larger spread; ``"relative"`` makes
it a multiple of the statistic's standard deviation.

Every error is one line naming the scenario file and the dotted key.  The table is validated
here, when the leakage command runs, rather than in :func:`p2pem.scenario.load_scenario`, which
keeps ``[leakage]`` free-form for other tools.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from p2pem.errors import ConfigError
from p2pem.leakage.views import ADVERSARIES
from p2pem.messages import SERVER
from p2pem.scenario import Scenario
from p2pem.tomltable import Table

__all__ = ["DEFAULT_MAX_TARGETS", "INPUTS", "LEAKAGE_KEYS", "LeakageConfig", "parse_leakage", "parse_targets"]

#: With more honest nodes than this and no ``targets``, the analysis measures a chosen subset
#: of this many (see :func:`p2pem.leakage.plan.default_targets`).
DEFAULT_MAX_TARGETS = 6

#: What the nodes aggregate in the Monte Carlo runs.
INPUTS = ("data", "gaussian")

LEAKAGE_KEYS = (
    "adversary",
    "corrupt",
    "server_corrupt",
    "targets",
    "inputs",
    "feature",
    "runs",
    "rounds",
    "iterations",  # the old name of "rounds"
    "k",
    "n_batches",
    "level",
    "folds",
    "node_labels",
    "sweep_std",
    "perturbation",
    "whole_run",  # the [leakage.whole_run] table, validated by p2pem.leakage.wholerun_analysis
)


@dataclass(frozen=True)
class LeakageConfig:
    """Settings of a leakage analysis (see the module docstring for the keys).

    ``targets`` empty means "not given": the analysis chooses them
    (:func:`p2pem.leakage.plan.default_targets`); ``feature`` None means the feature of
    largest spread; ``rounds`` None means up to the round a real run stops at
    (:func:`p2pem.leakage.montecarlo.analysed_schedule`).
    """

    adversaries: tuple[str, ...] = ("honest-but-curious",)
    corrupt: tuple[int, ...] = ()
    server_corrupt: bool = True
    targets: tuple[int, ...] = ()
    inputs: str = "data"
    feature: int | None = None
    runs: int = 10_000
    rounds: int | None = None
    k: int = 3
    n_batches: int = 10
    level: float = 0.95
    folds: int = 5
    node_labels: tuple[str, ...] = ()
    sweep_std: tuple[float, ...] = ()
    perturbation: str = "absolute"

    def label(self, node: int) -> str:
        """How ``node`` is printed."""
        if node == SERVER:
            return "server"
        return self.node_labels[node] if self.node_labels else str(node)


def parse_leakage(scenario: Scenario) -> LeakageConfig:
    """Validate ``scenario.leakage`` into a :class:`LeakageConfig`.

    Raises
    ------
    ConfigError
        One line naming the file and the key: unknown key, wrong type, value out of range,
        a corrupt target, or an adversary without the corrupt nodes it needs.
    """
    where = str(scenario.path)
    raw = scenario.leakage
    if not raw:
        raise ConfigError(f"{where}: no [leakage] table (it needs at least 'leakage.corrupt', or adversary = \"eavesdropper\")")
    t = Table(where, dict(raw), "leakage", LEAKAGE_KEYS)
    n = scenario.graph.n_nodes

    adv = raw.get("adversary", ["honest-but-curious"])
    if isinstance(adv, str):
        adv = [adv]
    if not (isinstance(adv, list) and adv and all(isinstance(a, str) for a in adv)):
        t.fail_key("adversary", f"must be a string or a non-empty array of strings, got {adv!r}")
    for a in adv:
        if a not in ADVERSARIES:
            t.fail_key("adversary", f"must be one of {', '.join(map(repr, ADVERSARIES))}, got {a!r}")
    if len(set(adv)) != len(adv):
        t.fail_key("adversary", "names an adversary more than once")

    for key in ("corrupt", "targets"):
        _names_to_ids(t, key, scenario)
    corrupt = t.node_list("corrupt", n) or ()
    if any(a != "eavesdropper" for a in adv) and not corrupt:
        t.fail_key("corrupt", "must name at least one node for the honest-but-curious and both adversaries")
    if len(corrupt) >= n:
        t.fail_key("corrupt", "leaves no honest node")
    server_corrupt = raw.get("server_corrupt", True)
    if not isinstance(server_corrupt, bool):
        t.fail_key("server_corrupt", f"must be true or false, got {server_corrupt!r}")

    raw_targets = raw.get("targets")
    if isinstance(raw_targets, str):
        if raw_targets != "all":
            t.fail_key("targets", f"must be an array of node ids or \"all\", got {raw_targets!r}")
        targets: tuple[int, ...] = tuple(i for i in range(n) if i not in corrupt)
    else:
        targets = t.node_list("targets", n) or ()
        if "targets" in raw and not targets:
            t.fail_key("targets", "must name at least one node")
    for i in targets:
        if i in corrupt:
            t.fail_key("targets", f"names corrupt node {i}: leakage is measured about honest nodes")

    inputs = t.choice("inputs", INPUTS, default="data")
    feature = t.integer("feature", default=None, minimum=0)
    if feature is not None and inputs != "data":
        t.fail_key("feature", f"needs inputs = \"data\" (the {inputs!r} inputs have one feature)")

    k = t.integer("k", default=3, minimum=1)
    n_batches = t.integer("n_batches", default=10, minimum=2)
    folds = t.integer("folds", default=5, minimum=2)
    runs = t.integer("runs", default=10_000, minimum=200)
    if runs // n_batches <= 2 * k:
        t.fail_key("runs", f"= {runs} is too few for {n_batches} batches with k = {k}")
    if "iterations" in raw and "rounds" in raw:
        t.fail_key("iterations", "is the old name of 'rounds': give one of them")
    rounds = t.integer("rounds", default=None, minimum=1) if "rounds" in raw else t.integer("iterations", default=None, minimum=1)
    level = t.fraction("level", default=0.95)

    # the parties' own names label the nodes unless node_labels says otherwise
    labels = raw.get("node_labels", [str(p) for p in scenario.parties or ()])
    if not (isinstance(labels, list) and all(isinstance(s, str) and s for s in labels)):
        t.fail_key("node_labels", f"must be an array of non-empty strings, got {labels!r}")
    if labels and len(labels) != n:
        t.fail_key("node_labels", f"must hold {n} labels (one per node), got {len(labels)}")

    sweep = raw.get("sweep_std", [])
    if not isinstance(sweep, list):
        t.fail_key("sweep_std", f"must be an array of numbers > 0, got {sweep!r}")
    for v in sweep:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            t.fail_key("sweep_std", f"holds {v!r}, not a finite number > 0")
    if sweep and not any(p.name == "pdmm-sp" for p in scenario.protocols):
        t.fail_key("sweep_std", "needs a pdmm-sp entry in [[protocols]] to sweep")

    perturbation = raw.get("perturbation", "absolute")
    if perturbation not in ("absolute", "relative"):
        t.fail_key("perturbation", f"must be 'absolute' or 'relative', got {perturbation!r}")

    return LeakageConfig(
        adversaries=tuple(adv),
        corrupt=corrupt,
        server_corrupt=server_corrupt,
        targets=targets,
        inputs=inputs,
        feature=feature,
        runs=runs,
        rounds=rounds,
        k=k,
        n_batches=n_batches,
        level=level,
        folds=folds,
        node_labels=tuple(labels),
        sweep_std=tuple(sorted(float(v) for v in sweep)),
        perturbation=perturbation,
    )


def _names_to_ids(t: Table, key: str, scenario: Scenario) -> None:
    """A node list's party names (text) as node ids, in place; integers stay node ids 0..n-1."""
    value = t.table.get(key)
    if not isinstance(value, list) or not any(isinstance(v, str) for v in value):
        return
    parties = scenario.parties
    ids = []
    for v in value:
        if isinstance(v, str):
            i = scenario.node_index(v)
            if i is None:
                known = f"the parties are {', '.join(repr(str(p)) for p in parties[:12])}{', ...' if len(parties) > 12 else ''}" if parties else \
                    "the scenario names no parties (no [data] node_column, no named edge file): use node ids"
                t.fail_key(key, f"holds {v!r}, not a party of the scenario ({known})")
            v = i
        ids.append(v)
    t.table[key] = ids


def parse_targets(text: str, config: LeakageConfig, n_nodes: int) -> tuple[int, ...]:
    """The ``--targets`` option: ``"all"`` or comma-separated node ids or names (labels), checked like the key.

    Raises
    ------
    ConfigError
        One line naming the option: not ids, an id out of range or repeated, a corrupt node.
    """
    if text.strip() == "all":
        return tuple(i for i in range(n_nodes) if i not in config.corrupt)
    ids = []
    for token in (v.strip() for v in text.split(",")):
        if token in config.node_labels:  # a party's name (the default labels) or a label
            ids.append(config.node_labels.index(token))
            continue
        try:
            ids.append(int(token))
        except ValueError:
            raise ConfigError(f"--targets must be 'all' or comma-separated node ids or party names, got {token!r} in {text!r}") from None
    for i in ids:
        if not 0 <= i < n_nodes:
            raise ConfigError(f"--targets holds {i}, not a node id 0..{n_nodes - 1}")
        if i in config.corrupt:
            raise ConfigError(f"--targets names corrupt node {i}: leakage is measured about honest nodes")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"--targets repeats a node: {text!r}")
    return tuple(sorted(ids))
