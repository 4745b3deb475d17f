"""MST and AIM across parties (``[synth] model = "mst" | "aim"``): marginals summed by any protocol, Private-PGM inference."""

from __future__ import annotations

import json
import math
from pathlib import Path

import dp_accounting as dpa
import jsonschema
import numpy as np
import pytest

from p2pem.bayesnet.counts import Layout
from p2pem.bayesnet.marginals import MarginalSettings, MarginalTask
from p2pem.builders import build_graph, load_table_parts
from p2pem.errors import ConfigError, DataError
from p2pem.registry import make_protocol
from p2pem.scenario import load_scenario
from p2pem.schemas import load_schema as load_output_schema
from p2pem.synth.marginal import fit_marginals
from p2pem.synth.marginalconfig import parse_marginals
from p2pem.tabular import discretize, domain_sizes, load_schema, read_table
from test_synth import run_cli

ROOT = Path(__file__).resolve().parents[1]

# four AIS columns on 3 public bins: small tables, so Private-PGM compiles and runs in seconds
SCHEMA = """\
format = "p2pem-schema"
version = 1
public = true
[csv]
header = true
[[columns]]
name = "sex"
type = "categorical"
categories = ["female", "male"]
[[columns]]
name = "sport"
type = "categorical"
categories = ["B_Ball", "Field", "Gym", "Netball", "Row", "Swim", "T_400m", "T_Sprnt", "Tennis", "W_Polo"]
[[columns]]
name = "Ht"
type = "continuous"
low = 140
high = 220
[[columns]]
name = "Wt"
type = "continuous"
low = 35
high = 150
"""

SCENARIO = """\
seed = 5
[data]
source = "csv"
path = "{data}"
schema = "{schema}"
n_bins = 3
test_fraction = 0.25
[graph]
kind = "geometric"
n_nodes = 6
radius = 0.8
[em]
n_components = 1
[[protocols]]
name = "pdmm-sp"
[[protocols]]
name = "centralized"
[{table}]
epsilon = {epsilon}
{extra}
[synth]
model = "{model}"
protocol = "{protocol}"
rows = 100
target = "sex"
dcr_rows = 20
"""


@pytest.fixture(scope="module")
def ais(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ais")
    header, *rows = (ROOT / "data" / "ais.csv").read_text().splitlines()
    names = header.split(",")
    keep = [names.index(n) for n in ("sex", "sport", "Ht", "Wt")]
    (folder / "ais4.csv").write_text("\n".join(",".join(r.split(",")[k] for k in keep) for r in [header, *rows]) + "\n")
    (folder / "ais4.schema.toml").write_text(SCHEMA)
    return folder


def scenario(ais: Path, tmp_path: Path, *, model: str = "mst", protocol: str = "pdmm-sp", epsilon: str = "1.0", extra: str = "",
             table: str = "marginals") -> Path:
    path = tmp_path / f"{model}.toml"
    if table == "marginals":
        extra = "iters = 100\n" + extra
    path.write_text(SCENARIO.format(data=ais / "ais4.csv", schema=ais / "ais4.schema.toml", model=model, protocol=protocol,
                                    epsilon=epsilon, extra=extra, table=table))
    return path


def fit(path: Path, protocol: str, *, engine: str = "vectorised", settings: MarginalSettings | None = None):
    sc = load_scenario(path)
    parts, _ = load_table_parts(sc)
    if settings is None:
        settings = parse_marginals(dict(sc.marginals) | {"n_bins": 3}, sc.data.schema, sc.synth["model"], where=str(path))
    graph = None if protocol == "centralized" else build_graph(sc)
    return parts, fit_marginals(parts, settings, make_protocol(protocol), graph=graph, seed=sc.seed, shared=np.random.SeedSequence(9),
                                engine=engine)


def test_distributed_sums_equal_the_central_counts_before_noise(ais, tmp_path, monkeypatch):
    """pdmm-sp's sums of every table MST aggregates equal the pooled rows' counts to 1e-9 (before rounding and noise)."""
    seen: list[tuple[Layout, np.ndarray]] = []
    original = MarginalTask._agreed_sums

    def record(self, averages):
        if self._stage == "run":
            seen.append((self._layout, np.asarray(averages, dtype=np.float64).reshape(len(self.parts), -1)[0] * self.n_nodes))
        return original(self, averages)

    monkeypatch.setattr(MarginalTask, "_agreed_sums", record)
    parts, run = fit(scenario(ais, tmp_path, epsilon='"inf"'), "pdmm-sp")
    pooled = np.concatenate([discretize(p, 3) for p in parts])
    assert len(seen) == 2  # the 1-way tables, then every pair's (the selection's input)
    for layout, sums in seen:
        exact = layout.contributions(pooled)[0]
        assert np.max(np.abs(sums - exact)) < 1e-9
    _, central = fit(scenario(ais, tmp_path, epsilon='"inf"'), "centralized")
    assert [m.attrs for m in run.task.measurements] == [m.attrs for m in central.task.measurements]
    for a, b in zip(run.task.measurements, central.task.measurements, strict=True):
        np.testing.assert_array_equal(a.counts, b.counts)


def test_the_engines_agree_to_the_bit_and_every_node_holds_the_same_release(ais, tmp_path):
    path = scenario(ais, tmp_path, extra='noise = "shares"\nselection = "noisy"\ntolerate = 2')
    _, vec = fit(path, "pdmm-sp")
    _, msg = fit(path, "pdmm-sp", engine="messages")  # raises unless all six nodes end with the same digest
    np.testing.assert_array_equal(vec.task.summary(), msg.task.summary())
    for a, b in zip(vec.task.networks[0].conditionals, msg.task.networks[0].conditionals, strict=True):
        assert a.parents == b.parents
        np.testing.assert_array_equal(a.probabilities, b.probabilities)


@pytest.mark.parametrize("model, extra", [("mst", ""), ("mst", 'noise = "shares"\nselection = "noisy"'), ("aim", "rounds = 6")])
def test_every_measurement_and_selection_is_accounted_as_dp_accounting_composes_them(ais, tmp_path, model, extra):
    """The ledger's zCDP adds up to the budget, and dp-accounting's RDP accountant certifies at most the configured epsilon."""
    _, run = fit(scenario(ais, tmp_path, model=model, extra=extra), "pdmm-sp")
    s, ledger = run.task.settings, run.task.ledger
    assert ledger.rho == pytest.approx(s.rho, rel=1e-9)  # every mechanism spends its share, the last round what is left
    accountant = dpa.rdp.RdpAccountant([1 + x / 10 for x in range(1, 100)] + list(range(12, 400)))
    for e in ledger.entries:
        if e["mechanism"] == "gaussian":
            assert e["rho"] == pytest.approx(1.0 / e["sigma"] ** 2)  # replace one row: L2 sensitivity sqrt(2)
            accountant.compose(dpa.GaussianDpEvent(e["sigma"] / math.sqrt(2.0)))
        else:  # the exponential mechanism is epsilon^2 / 8-zCDP: the RDP curve of a Gaussian of multiplier 2 / epsilon
            assert e["rho"] == pytest.approx(e["epsilon"] ** 2 / 8) and e["sensitivity"] >= 2.0
            accountant.compose(dpa.GaussianDpEvent(2.0 / e["epsilon"]))
    assert accountant.get_epsilon(s.delta) <= s.epsilon
    assert ledger.epsilon(s.delta) == pytest.approx(s.epsilon, rel=1e-9)  # Bun & Steinke's conversion, inverted by the budget
    n_selections = sum(e["mechanism"] == "exponential" for e in ledger.entries)
    assert n_selections == (3 if extra == "" and model == "mst" else 0 if model == "mst" else len(run.task.measurements) - 4)


def test_noisy_selection_with_shares_aggregates_no_exact_table(ais, tmp_path, monkeypatch):
    """The mode that shows members only noisy sums: every aggregation of the run carries noise shares."""
    noisy: list[bool] = []
    original = MarginalTask.contribution

    def record(self):
        out = original(self)
        if self._stage == "run":
            exact = self._layout.contributions(self._rows, self._part, len(self.parts))
            noisy.append(bool(np.all(np.abs(out - exact).sum(axis=1) > 0)))
        return out

    monkeypatch.setattr(MarginalTask, "contribution", record)
    _, run = fit(scenario(ais, tmp_path, extra='noise = "shares"\nselection = "noisy"'), "pdmm-sp")
    assert noisy and all(noisy)


def test_mst_over_pdmm_sp_writes_a_valid_release_that_says_what_members_see(ais, tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, scenario(ais, tmp_path), "--out", out)
    assert code == 0, err
    release = json.loads((out / "release" / "release.json").read_text())
    jsonschema.validate(release, load_output_schema("p2pem-synth-release"), cls=jsonschema.Draft202012Validator)
    privacy = release["privacy"]
    assert release["model"] == "mst" and privacy["differentially_private"] and privacy["accountant"] == "zcdp"
    assert privacy["epsilon_spent"]["outsider"]["zcdp"] == pytest.approx(1.0) and privacy["epsilon_spent"]["colluders"]["zcdp"] is None
    assert "exact sums of every 1-way and every pair table" in privacy["members_see"]
    assert [m["attrs"] for m in release["measurements"]][:4] == [["sex"], ["sport"], ["Ht"], ["Wt"]]
    assert all(m["sigma"] > 0 for m in release["measurements"]) and len(release["measurements"]) == 4 + 3
    assert sum(e["rho"] for e in privacy["ledger"]) == pytest.approx(privacy["rho"])
    assert "seed 5" not in stdout


@pytest.mark.parametrize("model", ["privbayes", "mst"])
def test_epsilon_inf_writes_a_release_that_says_it_is_not_private(ais, tmp_path, capsys, model):
    """Issue 35 item 7: ``epsilon = "inf"`` (no noise) once ended in a traceback writing release.json."""
    table, extra = ("bayesnet", "k = 1") if model == "privbayes" else ("marginals", "")
    path = scenario(ais, tmp_path, model=model, epsilon='"inf"', table=table, extra=extra)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, path, "--out", out)
    assert code == 0, err
    release = json.loads((out / "release" / "release.json").read_text())
    assert release["privacy"]["differentially_private"] is False


def test_bad_schemas_and_settings_are_one_line_errors(ais, tmp_path, capsys):
    sc = load_scenario(scenario(ais, tmp_path))
    with pytest.raises(ConfigError, match=r"'marginals.pairs\[0\]' names 'weight', not a column of the schema") as info:
        parse_marginals({"pairs": [["sex", "weight"]]}, sc.data.schema, "mst", where="s.toml")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="'selection' = 'noisy' is an MST setting"):
        parse_marginals({"selection": "noisy"}, sc.data.schema, "aim", where="s.toml")
    bad = ais / "ais4.schema.toml"
    wrong = tmp_path / "wrong.schema.toml"
    wrong.write_text(bad.read_text().replace('name = "Wt"', 'name = "weight"'))
    with pytest.raises(DataError) as info:
        read_table(ais / "ais4.csv", load_schema(wrong))
    assert "weight" in str(info.value) and "\n" not in str(info.value)
    path = scenario(ais, tmp_path, extra='pairs = [["sex", "height"]]')
    code, _, err = run_cli(capsys, path, "--out", tmp_path / "never")
    assert code != 0 and "'marginals.pairs[0]' names 'height'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_a_public_pair_starts_the_tree_and_is_measured(ais, tmp_path):
    _, run = fit(scenario(ais, tmp_path, extra='pairs = [["Ht", "Wt"]]'), "centralized")
    assert (2, 3) in [m.attrs for m in run.task.measurements]
    assert sum(e["mechanism"] == "exponential" for e in run.task.ledger.entries) == 2
    assert math.isclose(run.task.ledger.rho, run.task.settings.rho, rel_tol=1e-9)
    assert domain_sizes(load_scenario(scenario(ais, tmp_path)).data.schema, 3) == (2, 10, 3, 3)
