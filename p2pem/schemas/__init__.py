"""JSON Schemas (draft 2020-12) of every JSON file the CLI writes, one per ``format``.

Every output is an object with ``format`` (its name) and ``version`` (an integer that grows
when a reader would break); :func:`schema_path` finds the schema of a format, so a script can
check what it reads, e.g. with the ``jsonschema`` package::

    import json, jsonschema
    from p2pem.schemas import load_schema
    doc = json.load(open("out/result.json"))
    jsonschema.validate(doc, load_schema(doc["format"]))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from p2pem.errors import ConfigError

#: format name -> schema file in this folder
FORMATS = {
    "p2pem-result": "result.schema.json",
    "p2pem-leakage": "leakage.schema.json",
    "p2pem-leakage-summary": "leakage-summary.schema.json",
    "p2pem-whole-run": "whole-run.schema.json",
    "p2pem-tradeoff": "tradeoff.schema.json",
    "p2pem-cli-summary": "cli-summary.schema.json",
    "p2pem-synth-report": "synth-report.schema.json",
    "p2pem-model": "model.schema.json",
    "p2pem-synth-release": "synth-release.schema.json",
    "p2pem-select": "select.schema.json",
}


def schema_path(fmt: str) -> Path:
    """The schema file of output format ``fmt``."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown output format {fmt!r} (known: {', '.join(FORMATS)})")
    return Path(__file__).with_name(FORMATS[fmt])


def load_schema(fmt: str) -> dict[str, Any]:
    """The parsed schema of output format ``fmt``."""
    return json.loads(schema_path(fmt).read_text(encoding="utf-8"))
