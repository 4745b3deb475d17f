"""Tests of the leakage command and of the [leakage] table validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2pem.cli import main
from p2pem.errors import ConfigError
from p2pem.leakage.config import parse_leakage
from p2pem.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
RUN_KEYS = {"protocol", "adversary", "corrupt", "node", "iterations", "mi_bits", "mi_ci", "nmi", "bound_bits"}


def _variant(tmp_path: Path, old: str, new: str, source: str = "fig1.toml") -> Path:
    text = (SCENARIOS / source).read_text()
    assert old in text
    path = tmp_path / "variant.toml"
    path.write_text(text.replace(old, new, 1))
    return path


def test_shipped_scenarios_validate() -> None:
    for name in ("fig1.toml", "fig1_eavesdropper.toml", "fig1_sweep.toml", "geometric_eavesdropper.toml"):
        cfg = parse_leakage(load_scenario(SCENARIOS / name))
        assert cfg.runs == 10_000
    fig1 = parse_leakage(load_scenario(SCENARIOS / "fig1.toml"))
    assert fig1.corrupt == (1, 3) and fig1.targets == (0, 2, 4)
    assert [fig1.label(i) for i in fig1.targets] == ["1", "3", "5"]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("k = 3 ", "kk = 3 ", "unknown key 'leakage.kk' (known: adversary, corrupt,"),
        ('adversary = "honest-but-curious"', 'adversary = "spy"', "'leakage.adversary' must be one of"),
        ("corrupt = [1, 3]", "corrupt = [1, 9]", "'leakage.corrupt' holds 9, not a node id 0..4"),
        ("corrupt = [1, 3]", "corrupt = []", "'leakage.corrupt' must name at least one node"),
        ("targets = [0, 2, 4]", "targets = [0, 1]", "'leakage.targets' names corrupt node 1"),
        ("runs = 10000", "runs = 10.5", "'leakage.runs' must be an integer, got 10.5"),
        ("runs = 10000", "runs = 50", "'leakage.runs' must be >= 200, got 50"),
        ("iterations = 20", "iterations = true", "'leakage.iterations' must be an integer, got True"),
        ('node_labels = ["1", "2", "3", "4", "5"]', 'node_labels = ["1"]', "'leakage.node_labels' must hold 5 labels"),
    ],
)
def test_leakage_table_errors_are_one_line_and_name_file_and_key(tmp_path: Path, old: str, new: str, message: str) -> None:
    path = _variant(tmp_path, old, new)
    with pytest.raises(ConfigError) as info:
        parse_leakage(load_scenario(path))
    text = str(info.value)
    assert text.startswith(str(path)) and message in text and "\n" not in text


def test_a_scenario_without_leakage_table_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"parkinsons.toml: no \[leakage\] table"):
        parse_leakage(load_scenario(SCENARIOS / "parkinsons.toml"))


def test_sweep_needs_pdmm(tmp_path: Path) -> None:
    path = _variant(tmp_path, 'name = "pdmm-sp"               # its', 'name = "secure-sum"               # its', "fig1_sweep.toml")
    with pytest.raises(ConfigError, match="'leakage.sweep_std' needs a pdmm-sp entry"):
        parse_leakage(load_scenario(path))


def test_leakage_command_writes_json_figure_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["leakage", str(SCENARIOS / "fig1.toml"), "--out", str(out), "--runs", "1000", "--iterations", "3", "-q"])
    assert code == 0
    runs = json.loads((out / "leakage.json").read_text())
    assert isinstance(runs, list) and len(runs) == 9
    for run in runs:
        assert RUN_KEYS <= set(run)
        assert run["iterations"] == [1, 2, 3]
        assert len(run["mi_bits"]) == len(run["mi_ci"]) == len(run["nmi"]) == 3
    by = {(r["protocol"], r["node_label"]): r for r in runs}
    assert by[("federated", "1")]["corrupt"] == [-1, 1, 3]
    assert by[("federated", "1")]["bound_bits"] is None and by[("federated", "1")]["full_disclosure"]
    assert by[("pdmm-sp", "1")]["bound_bits"] == pytest.approx(0.2924812503605781)
    assert by[("secure-sum", "3")]["nmi"][-1] == pytest.approx(1.0)
    assert (out / "leakage.png").stat().st_size > 10_000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["honest_components"] == {"honest-but-curious": [[0, 2, 4]]}
    printed = capsys.readouterr().out
    assert "closed form" in printed and "I(X1; X1+X3+X5)" in printed and "node labels: 1 = id 0" in printed


def test_leakage_command_sweep_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, "sweep_std = [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1e4, 1e6, 1e8]", "sweep_std = [0.01, 100.0]", "fig1_sweep.toml")
    text = path.read_text().replace("max_iter = 30", "max_iter = 5")
    path.write_text(text)
    out = tmp_path / "sweep"
    assert main(["leakage", str(path), "--out", str(out), "--runs", "1000", "--iterations", "3", "-q"]) == 0
    runs = json.loads((out / "leakage.json").read_text())
    swept = [r for r in runs if "perturbation_std" in r]
    assert len(swept) == 2 * 3
    small = next(r for r in swept if r["perturbation_std"] == 0.01 and r["node"] == 0)
    large = next(r for r in swept if r["perturbation_std"] == 100.0 and r["node"] == 0)
    assert small["exact_bits"][-1] > 4.0 > 0.3 > large["exact_bits"][-1]
    assert small["em_rel_err"] < 1e-6 and small["em_unconverged"] == 0
    assert (out / "sweep.png").exists()
    # Errors become one line on stderr and an exit code; nothing is left behind.
    capsys.readouterr()
    assert main(["leakage", str(path), "--out", str(tmp_path / "bad"), "--runs", "10"]) == 2
    assert "p2pem: error: --runs 10 is too few" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
