"""Every JSON file the CLI writes validates against the schema its ``format`` names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2pem.cli import main
from p2pem.schemas import FORMATS, load_schema, schema_path

import jsonschema

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def validate(doc: dict) -> None:
    """Check ``doc`` against the shipped schema of its own ``format``."""
    schema = load_schema(doc["format"])
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


def test_every_schema_is_a_valid_schema_and_ships_with_the_package() -> None:
    for fmt in FORMATS:
        jsonschema.Draft202012Validator.check_schema(load_schema(fmt))
        assert schema_path(fmt).parent.name == "schemas"


def test_simulate_outputs_validate_and_json_summary_is_machine_readable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim"
    assert main(["--json", "simulate", str(SCENARIOS / "fig1.toml"), "--out", str(out), "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    validate(summary)
    assert summary["command"] == "simulate" and {p["protocol"] for p in summary["protocols"]} >= {"pdmm-sp", "secure-sum"}
    doc = json.loads((out / "result.json").read_text())
    validate(doc)
    # a wrong document is caught: the schema is not vacuous
    del doc["protocols"][0]["loglik"]
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


def test_leakage_outputs_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "leak"
    assert main(["leakage", str(SCENARIOS / "fig1.toml"), "--out", str(out), "--runs", "200", "--iterations", "1", "-q"]) == 0
    validate(json.loads((out / "leakage.json").read_text()))
    validate(json.loads((out / "summary.json").read_text()))


def test_errors_in_json_mode_are_reported_in_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 3\n")
    code = main(["simulate", str(bad), "--out", str(tmp_path / "o"), "--json"])
    summary = json.loads(capsys.readouterr().out)
    validate(summary)
    assert code == 2 and summary["exit_code"] == 2 and "bad.toml" in summary["error"]


def test_global_options_before_or_after_the_command_and_no_bar_in_a_redirected_stderr(tmp_path: Path) -> None:
    for argv in (["-q", "simulate"], ["simulate", "-q"], ["-v", "simulate"], ["simulate"]):
        out = tmp_path / "_".join(a.strip("-") for a in argv)
        proc = subprocess.run(
            [sys.executable, "-m", "p2pem", *argv, str(SCENARIOS / "fig1.toml"), "--out", str(out)],
            capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert "\r" not in proc.stderr  # progress bars only on a terminal
    version = subprocess.run([sys.executable, "-m", "p2pem", "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip().startswith("p2pem ") and version.returncode == 0
    helptext = subprocess.run([sys.executable, "-m", "p2pem", "leakage", "--help"], capture_output=True, text=True, timeout=60).stdout
    assert "exit codes:" in helptext and "130" in helptext and "--json" in helptext
