"""The ``[synth]`` table of a scenario file, validated.

Keys (all optional; unknown keys are errors)::

    [synth]
    model = "mixture"          # the synthesizer, a name of p2pem.synth.SYNTHESIZERS
    protocol = "dp-distributed"  # the [[protocols]] entry that fits it: a name (the first
                               #   entry of that name) or an index; default the first entry
    rows = 30162               # rows per release; default as many as the training rows
    releases = 1               # independent releases drawn from the one fitted model
    target = "income"          # report: the categorical column the TSTR classifiers predict
    regression = "adult-income"  # report: a named finding whose reproducibility is measured,
                               #   or a table {target, predictors, positive, kind}
                               #   (p2pem.synth.models.Regression)
    three_way = false          # report: also every 3-way marginal's TVD
    dcr_rows = 2000            # report: rows whose closest training row is searched

Every error is one line naming the scenario file and the dotted key.  The table is validated
when ``p2pem synth`` runs (:func:`parse_synth`), which keeps ``[synth]`` free-form in
:func:`p2pem.scenario.load_scenario`.
"""

from __future__ import annotations

from dataclasses import dataclass

from p2pem.errors import ConfigError
from p2pem.scenario import Scenario
from p2pem.synth.models import ADULT_INCOME_RACE_REGRESSION, ADULT_INCOME_REGRESSION, Regression
from p2pem.tabular import Categorical, Continuous, Schema
from p2pem.tomltable import Table, show

__all__ = ["REGRESSIONS", "SYNTH_KEYS", "SynthConfig", "parse_synth"]

SYNTH_KEYS = ("model", "protocol", "rows", "releases", "target", "regression", "three_way", "dcr_rows")

#: Findings known by name (``[synth] regression = "adult-income"``).
REGRESSIONS = {"adult-income": ADULT_INCOME_REGRESSION, "adult-income-race": ADULT_INCOME_RACE_REGRESSION}


@dataclass(frozen=True)
class SynthConfig:
    """The validated ``[synth]`` table (module docstring).

    Parameters
    ----------
    model : str
        The synthesizer's name.
    protocol : int
        Index of the ``[[protocols]]`` entry that fits the model.
    rows : int or None
        Rows per release (None: as many as the training rows).
    releases : int
        Independent releases.
    target : str or None
        The report's TSTR target column.
    regression : Regression or None
        The report's finding.
    three_way : bool
    dcr_rows : int
    """

    model: str = "mixture"
    protocol: int = 0
    rows: int | None = None
    releases: int = 1
    target: str | None = None
    regression: Regression | None = None
    three_way: bool = False
    dcr_rows: int = 2000


def parse_synth(scenario: Scenario, models: tuple[str, ...]) -> SynthConfig:
    """Validate ``scenario.synth`` against the scenario's schema and protocols.

    Parameters
    ----------
    scenario : Scenario
    models : tuple of str
        The synthesizers' names (:data:`p2pem.synth.SYNTHESIZERS`).

    Raises
    ------
    ConfigError
        One line naming the file and the dotted key: an unknown key or model, a protocol
        name or index the scenario does not have, a column the schema does not have (or of
        the wrong type), a bad number.
    """
    sec = Table(str(scenario.path), dict(scenario.synth), "synth", SYNTH_KEYS)
    schema = scenario.data.schema
    if schema is None:
        raise ConfigError(f"{scenario.path}: 'p2pem synth' needs a table of named, typed columns: give [data] schema (a public schema file)")
    model = sec.choice("model", models, default="mixture")
    protocol = _protocol_index(sec, scenario)
    target = sec.string("target", default=None)
    if target is not None and not isinstance(_column(sec, schema, "target", target), Categorical):
        sec.fail(f"'synth.target' = {target!r} must be a categorical column (the classifiers predict a class)")
    return SynthConfig(
        model=model,
        protocol=protocol,
        rows=sec.integer("rows", default=None, minimum=1),
        releases=sec.integer("releases", default=1, minimum=1),
        target=target,
        regression=_regression(sec, schema),
        three_way=sec.boolean("three_way", default=False),
        dcr_rows=sec.integer("dcr_rows", default=2000, minimum=1),
    )


def _column(sec: Table, schema: Schema, key: str, name: str) -> Categorical | Continuous:
    if name not in schema.names:
        sec.fail(f"{sec.key(key)!r} = {name!r} is not a column of the schema ({', '.join(schema.names)})")
    return schema.column(name)


def _protocol_index(sec: Table, scenario: Scenario) -> int:
    names = [p.name for p in scenario.protocols]
    if not sec.has("protocol"):
        return 0
    value = sec.table["protocol"]
    if isinstance(value, str):
        if value not in names:
            sec.fail(f"'synth.protocol' = {value!r} is not one of the scenario's [[protocols]] ({', '.join(names)})")
        return names.index(value)
    index = sec.integer("protocol", minimum=0)
    if index >= len(names):
        sec.fail(f"'synth.protocol' = {index} but the scenario has {len(names)} [[protocols]] entries (0..{len(names) - 1})")
    return int(index)


def _regression(sec: Table, schema: Schema) -> Regression | None:
    if not sec.has("regression"):
        return None
    raw = sec.table["regression"]
    if isinstance(raw, str):
        if raw not in REGRESSIONS:
            sec.fail(f"'synth.regression' = {raw!r} is not a named finding ({', '.join(REGRESSIONS)}); or give a table")
        spec = REGRESSIONS[raw]
    elif isinstance(raw, dict):
        table = sec.section("regression", ("target", "predictors", "positive", "kind"))
        predictors = table.string_list("predictors")
        try:
            spec = Regression(
                table.string("target"), tuple(predictors), table.string("positive", default=None), table.choice("kind", ("logistic", "linear"), default="logistic")
            )
        except ConfigError as exc:
            table.fail(f"{table.prefix!r}: {exc}")
    else:
        sec.fail(f"'synth.regression' must be a named finding ({', '.join(REGRESSIONS)}) or a table, got {show(raw)}")
    for key, name in [("target", spec.target), *(("predictors", p) for p in spec.predictors)]:
        _column(sec, schema, f"regression.{key}", name)
    return spec
