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
RUN_KEYS = {
    "protocol", "label", "params", "adversary", "corrupt", "node", "rounds", "mi_bits", "mi_ci", "mi_bias_bits",
    "mi_se_bits", "estimator", "r2", "nmi", "floor_bits", "floor", "exact_bits", "flags",
}


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
        ("rounds = 20", "rounds = true", "'leakage.rounds' must be an integer, got true (a boolean)"),
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
    code = main(["leakage", str(SCENARIOS / "fig1.toml"), "--out", str(out), "--runs", "1000", "--rounds", "3", "-q"])
    assert code == 0
    doc = json.loads((out / "leakage.json").read_text())
    assert doc["format"] == "p2pem-leakage" and doc["version"] == 2
    runs = doc["runs"]
    assert len(runs) == 9
    for run in runs:
        assert RUN_KEYS <= set(run)
        assert run["rounds"] == [1, 2, 3]
        assert len(run["mi_bits"]) == len(run["mi_ci"]) == len(run["nmi"]) == 3
    by = {(r["protocol"], r["node_label"]): r for r in runs}
    assert by[("federated", "1")]["corrupt"] == [-1, 1, 3]
    assert by[("federated", "1")]["floor_bits"] is None and by[("federated", "1")]["full_disclosure"]
    assert by[("pdmm-sp", "1")]["floor_bits"] == pytest.approx(0.2924812503605781)
    assert by[("pdmm-sp", "1")]["params"]["perturbation_std"] == 100.0 and by[("pdmm-sp", "1")]["flags"] == []
    assert by[("secure-sum", "3")]["nmi"][-1] == pytest.approx(1.0)
    assert (out / "leakage.png").stat().st_size > 10_000
    # every output says that one aggregation is shown, how to measure a whole run, and which
    # pdmm-sp schedule and stop round the Monte Carlo ran (3 of the rounds a real run stops after)
    assert "one aggregation" in doc["scope"] and "p2pem leakage --whole-run" in doc["scope"]
    pdmm = doc["analysed"]["pdmm-sp"]
    assert pdmm["stop"] == "public round" and pdmm["stop_round"] > 3 and pdmm["rounds"] == 3 and pdmm["as_run"]
    assert f"public stop round {pdmm['stop_round']}" in pdmm["description"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["format"] == "p2pem-leakage-summary" and summary["version"] == 3
    assert summary["scope"] == doc["scope"] and summary["settings"]["rounds"] == 3
    assert next(p for p in summary["protocols"] if p["protocol"] == "pdmm-sp")["analysed"] == pdmm
    assert summary["honest_components"] == {"honest-but-curious": [[0, 2, 4]]}
    ring = next(p for p in summary["protocols"] if p["protocol"] == "secure-sum")
    assert sorted(ring["ring"]) == [0, 1, 2, 3, 4] and [2] in ring["arcs"]["honest-but-curious"]
    printed = capsys.readouterr().out
    assert "floor" in printed and "I(X1; X1+X3+X5)" in printed and "node labels: 1 = id 0" in printed
    assert "leakage of ONE aggregation" in printed and "--whole-run" in printed and pdmm["description"] in printed
    # what secure-sum discloses by topology is printed before any estimate
    disclosure = printed.index("warning: secure-sum: honest node 3's input is disclosed to the corrupt nodes {2, 4}")
    assert disclosure < printed.index("KSG bits")
    assert "warning: federated: every honest input is disclosed" in printed


def test_leakage_command_sweep_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, "sweep_std = [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1e4, 1e6, 1e8]", "sweep_std = [0.01, 100.0]", "fig1_sweep.toml")
    text = path.read_text().replace("max_iter = 30", "max_iter = 5")
    path.write_text(text)
    out = tmp_path / "sweep"
    assert main(["leakage", str(path), "--out", str(out), "--runs", "1000", "--rounds", "3", "-q"]) == 0
    runs = json.loads((out / "leakage.json").read_text())["runs"]
    swept = [r for r in runs if "em_rel_err" in r]
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


def _three_stds(tmp_path: Path) -> Path:
    text = (SCENARIOS / "fig1.toml").read_text()
    old = '[[protocols]]\nname = "pdmm-sp"\nperturbation_std = 100.0\n'
    assert old in text
    runs = "".join(f'[[protocols]]\nname = "pdmm-sp"\nperturbation_std = {v}\n\n' for v in ("1.0", "10.0", "100.0"))
    text = text.replace(old, runs).replace('[[protocols]]\nname = "federated"\n', "").replace('[[protocols]]\nname = "secure-sum"\n', "")
    path = tmp_path / "three.toml"
    path.write_text(text)
    return path


def test_runs_of_one_protocol_are_told_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    path = _three_stds(tmp_path)
    assert main(["leakage", str(path), "--out", str(out), "--runs", "1000", "--rounds", "2", "-q"]) == 0
    runs = json.loads((out / "leakage.json").read_text())["runs"]
    labels = {r["label"] for r in runs}
    assert labels == {"pdmm-sp (std 1)", "pdmm-sp (std 10)", "pdmm-sp (std 100)"}
    assert {r["params"]["perturbation_std"] for r in runs} == {1.0, 10.0, 100.0}
    printed = capsys.readouterr().out
    for label in labels:
        assert f"\n{label} " in printed  # a table row per run, under its own label
    summary = json.loads((out / "summary.json").read_text())
    assert len([k for k in summary["timings_s"] if k.startswith("estimate: ")]) == 3
    # the timings cover the whole command (writing and figures included), not the analysis alone
    assert {"command: write leakage.json", "command: figures"} <= set(summary["timings_s"])
    assert sum(summary["timings_s"].values()) == pytest.approx(summary["wall_s"], rel=0.10)
    # the figure's legend carries the three labels
    from p2pem.leakage import plots
    from p2pem.leakage.report import LeakageRun

    seen: list[str] = []
    original = plots.plt.Figure.legend

    def spy(self, handles, legend_labels, **kw):  # type: ignore[no-untyped-def]
        seen.extend(legend_labels)
        return original(self, handles, legend_labels, **kw)

    import unittest.mock

    keys = set(LeakageRun.__dataclass_fields__)
    records = [LeakageRun(**{k: (tuple(tuple(c) for c in v) if k == "mi_ci" else tuple(v) if isinstance(v, list) else v)
                             for k, v in r.items() if k in keys}) for r in runs]
    with unittest.mock.patch.object(plots.plt.Figure, "legend", spy):
        plots.leakage_figure(records, tmp_path / "fig.png", title="t", ceiling_bits=9.0)
    assert labels <= set(seen)


def test_small_perturbation_reports_exact_leakage_beside_the_floor_and_flags_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the issue's case: Fig. 1's graph, K = 1 (statistic std 1), perturbation_std 1
    path = _variant(tmp_path, "perturbation_std = 100.0", "perturbation_std = 1.0")
    path.write_text(path.read_text().replace("[em]\nn_components = 2", "[em]\nn_components = 1"))
    out = tmp_path / "out"
    assert main(["leakage", str(path), "--out", str(out), "--runs", "1000", "--rounds", "20", "-q"]) == 0
    runs = json.loads((out / "leakage.json").read_text())["runs"]
    node1 = next(r for r in runs if r["protocol"] == "pdmm-sp" and r["node_label"] == "1")
    assert node1["floor_bits"] == pytest.approx(0.2924812503605781)
    assert node1["exact_bits"][-1] == pytest.approx(0.661, abs=0.001)
    assert node1["flags"] and "perturbation too small" in node1["flags"][0]
    assert node1["perturbation_relative"] == 1.0
    printed = capsys.readouterr().out
    assert "warning: pdmm-sp / honest-but-curious, node 1: perturbation too small" in printed
    # the same number read relative to the statistic's scale at K = 2 gives the same exact leakage
    rel = _variant(tmp_path, "perturbation_std = 100.0", "perturbation_std = 1.0")
    rel.write_text(rel.read_text().replace("node_labels =", 'perturbation = "relative"\nnode_labels ='))
    out2 = tmp_path / "rel"
    assert main(["leakage", str(rel), "--out", str(out2), "--runs", "1000", "--rounds", "20", "-q"]) == 0
    node1_rel = next(r for r in json.loads((out2 / "leakage.json").read_text())["runs"] if r["protocol"] == "pdmm-sp" and r["node_label"] == "1")
    assert node1_rel["perturbation_std"] == 0.5 and node1_rel["perturbation_relative"] == 1.0
    assert node1_rel["exact_bits"][-1] == pytest.approx(node1["exact_bits"][-1], abs=1e-6)


def test_a_refusal_names_its_protocol_before_any_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a path graph has no cycle: pdmm-sp and secure-sum both refuse; the first one in the file speaks
    path = _variant(tmp_path, "edges = [[0, 1], [1, 2], [2, 3], [3, 4], [4, 0], [0, 2], [2, 4]]", "edges = [[0, 1], [1, 2], [2, 3], [3, 4]]")
    assert main(["leakage", str(path), "--out", str(tmp_path / "out"), "-q"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("p2pem: error: secure-sum: ") and "\n" not in captured.err.strip()
    assert "warning" not in captured.out
