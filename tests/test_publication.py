"""Every published artifact is what its privacy block says (p2pem.dp.publication).

* The auditor's replay: a private run on data D and on a neighbour D' (one row replaced), with
  D's noisy releases replayed into D''s run (the same outputs of every noisy aggregation, the
  same selections), must give documents that differ only in fields their privacy block declares
  public.  A field computed from the rows themselves (an exact score, a count the relation
  does not make public) would differ, and the test names it.
* Release-only membership: an attacker who knows every row but one and the scenario file
  reruns ``p2pem synth`` on both hypotheses with the scenario seed.  Before publications drew
  their noise from OS entropy, the published release equalled one rerun bit for bit and so
  decided membership; now it equals neither.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pem.bayesnet.task import BayesNetTask
from p2pem.cli import main
from p2pem.dp.protocols import DPCentral
from p2pem.dp.publication import NEIGHBOURS, Publication
from p2pem.scenario import load_scenario
from p2pem.synth.run import synthesize

ROOT = Path(__file__).resolve().parents[1]

EM = """\
seed = 5
[data]
source = "csv"
path = "{data}"
columns = ["Ht", "Wt"]
standardize = true
[data.public]
center = [180.0, 75.0]
scale = [10.0, 13.0]
[graph]
kind = "geometric"
n_nodes = 6
[em]
n_components = 2
max_iter = 3
tol = 0.0
[[protocols]]
name = "dp-central"
epsilon = 1.0
bound = 4.0
"""

SYNTH = """\
seed = 4
[data]
source = "csv"
path = "{data}"
schema = "{root}/data/ais.schema.toml"
binned = ["Fe"]
[graph]
kind = "geometric"
n_nodes = 6
radius = 0.7
[em]
n_components = 2
max_iter = 3
family = {{ name = "mixed" }}
[[protocols]]
name = "dp-central"
epsilon = 1.0
[[protocols]]
name = "centralized"
[bayesnet]
epsilon = 1.0
k = 1
n_bins = 4
[synth]
model = "{model}"
protocol = "{protocol}"
rows = 40
"""


def neighbours(tmp_path: Path, *, columns: str | None = None) -> tuple[Path, Path]:
    """D (the first 60 AIS rows) and D' (its row 7 replaced by row 100): same n, one row's values differ."""
    lines = (ROOT / "data" / "ais.csv").read_text().splitlines()
    d = lines[:61]
    d_prime = [*d[:8], lines[100], *d[9:]]
    assert len(d) == len(d_prime) and d != d_prime
    paths = (tmp_path / "d.csv", tmp_path / "d-prime.csv")
    for path, rows in zip(paths, (d, d_prime), strict=True):
        path.write_text("\n".join(rows) + "\n")
    return paths


class Replay:
    """Record the noisy outputs of run D; hand exactly those to run D' (the auditor's coupling).

    Patched at the class level: dp-central's aggregation (every noisy sum the EM absorbs) and a
    Bayesian network's selections and noisy conditionals.  Everything the run publishes after a
    noisy release is then computed from the same releases in both runs.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.recorded: dict[str, list[Any]] = {}
        self.replaying = False
        self.cursor: dict[str, int] = {}
        aggregate, select, conditionals = DPCentral.aggregate, BayesNetTask._select, BayesNetTask._after_conditionals
        replay = self

        def patched_aggregate(spec, values, topology, rngs, iteration, *, record=False):
            out = aggregate(spec, values, topology, rngs, iteration, record=record)
            return dataclasses.replace(out, results=replay.value("aggregate", out.results.copy()))

        def patched_select(task, *args):
            return replay.value("select", select(task, *args))

        def patched_conditionals(task, noisy):
            return conditionals(task, replay.value("conditionals", noisy))

        monkeypatch.setattr(DPCentral, "aggregate", patched_aggregate)
        monkeypatch.setattr(BayesNetTask, "_select", patched_select)
        monkeypatch.setattr(BayesNetTask, "_after_conditionals", patched_conditionals)

    def value(self, kind: str, value: Any) -> Any:
        if not self.replaying:
            self.recorded.setdefault(kind, []).append(value)
            return value
        i = self.cursor.get(kind, 0)
        self.cursor[kind] = i + 1
        return self.recorded[kind][i]

    def start_replay(self) -> None:
        self.replaying, self.cursor = True, {}


def differing(a: Any, b: Any, path: str = "") -> list[str]:
    """Dotted paths where two JSON documents differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b)) for p in differing(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True)) for p in differing(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def undeclared(paths: list[str], public: list[str]) -> list[str]:
    """The paths not under a declared public field (``protocols[0].wall_s`` is under ``protocols[].wall_s``)."""
    def under(path: str, field: str) -> bool:
        generic = "".join(c for c in path if not c.isdigit()).replace("[]", "[]")
        return any(p == field or p.startswith(field + ".") or p.startswith(field + "[") for p in (path, generic))

    return [p for p in paths if not any(under(p, f) for f in public)]


def test_the_auditors_replay_of_a_simulate_result_and_its_saved_model(tmp_path, monkeypatch):
    d, d_prime = neighbours(tmp_path)
    replay = Replay(monkeypatch)
    docs = []
    for data in (d, d_prime):
        if data == d_prime:
            replay.start_replay()
        scenario = tmp_path / f"{data.stem}.toml"
        scenario.write_text(EM.format(data=data))
        run, model = tmp_path / f"run-{data.stem}", tmp_path / f"{data.stem}.json"
        assert main(["simulate", str(scenario), "--out", str(run), "-q"]) == 0
        assert main(["model", str(run), "--out", str(model), "--fresh-noise", "-q"]) == 0
        docs.append((json.loads((run / "result.json").read_text()), json.loads(model.read_text())))
    (result_d, model_d), (result_e, model_e) = docs
    privacy = result_d["protocols"][0]["protocol_params"]["privacy"]
    assert privacy["release"] is False and privacy["neighbours"] == NEIGHBOURS
    assert not undeclared(differing(result_d, result_e), privacy["public"])
    saved = model_d["protocol"]["params"]["privacy"]
    assert saved["release"] is True and saved["noise"] == "os-entropy"
    assert not undeclared(differing(model_d, model_e), saved["public"])
    # the parameters are what the replay fixed; without it they differ (the test can fail)
    assert model_d["params"] == model_e["params"]
    assert result_d["n_rows"] == result_e["n_rows"] == 60  # public under replace-one


@pytest.mark.parametrize(("model", "protocol"), [("mixture", "dp-central"), ("privbayes", "centralized")])
def test_the_auditors_replay_of_a_synthetic_release(tmp_path, monkeypatch, model, protocol):
    d, d_prime = neighbours(tmp_path)
    replay = Replay(monkeypatch)
    releases = []
    for data in (d, d_prime):
        if data == d_prime:
            replay.start_replay()
        path = tmp_path / f"{data.stem}.toml"
        path.write_text(SYNTH.format(data=data, root=ROOT, model=model, protocol=protocol))
        # the same seed for both runs: what the replay does not fix (a uniform root) is then the same too
        releases.append(json.loads(json.dumps(synthesize(load_scenario(path), publication=Publication.insecure(9)).release)))
    assert replay.recorded  # something was replayed
    a, b = releases
    assert a["privacy"]["public"] == b["privacy"]["public"] and a["privacy"]["neighbours"] == NEIGHBOURS
    assert not undeclared(differing(a, b), a["privacy"]["public"])
    if model == "privbayes":
        assert a["selections"] and all(set(s) == {"network", "step", "child", "parents", "candidates", "epsilon"} for s in a["selections"])


@pytest.mark.parametrize(("model", "protocol", "field"), [("mixture", "dp-central", "parameters"), ("privbayes", "centralized", "networks")])
def test_a_release_alone_no_longer_decides_membership_by_seed_replay(tmp_path, model, protocol, field):
    """The attacker knows every row but one, the scenario and its seed, and reruns both hypotheses."""
    d, d_prime = neighbours(tmp_path)
    scenarios = []
    for data in (d, d_prime):
        path = tmp_path / f"{data.stem}.toml"
        path.write_text(SYNTH.format(data=data, root=ROOT, model=model, protocol=protocol))
        scenarios.append(load_scenario(path))
    published = synthesize(scenarios[0]).release  # `p2pem synth`: the noise from OS entropy
    guesses = [synthesize(s, publication=Publication.insecure(s.seed)).release for s in scenarios]
    assert guesses[0][field] != guesses[1][field]  # the hypotheses are distinguishable when the noise is known
    assert published[field] != guesses[0][field] and published[field] != guesses[1][field]  # the release matches neither
    assert published["privacy"]["noise"] == "os-entropy" and published["privacy"]["differentially_private"] is True
    assert guesses[0]["privacy"]["differentially_private"] is False  # the reproducible run says it is not private
    again = synthesize(scenarios[0]).release
    assert again[field] != published[field]  # a second publication draws fresh noise


def test_fitted_preprocessing_in_a_private_run_is_one_line_naming_the_key(tmp_path, capsys):
    d, _ = neighbours(tmp_path)
    scenario = tmp_path / "s.toml"
    scenario.write_text(EM.format(data=d).replace("[data.public]\ncenter = [180.0, 75.0]\nscale = [10.0, 13.0]\n", ""))
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "run"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(scenario) in err and "'data.standardize'" in err and "[data.public]" in err
    assert not (tmp_path / "run").exists()
    # the same preprocessing with its constants declared public runs
    scenario.write_text(EM.format(data=d))
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "run"), "-q"]) == 0


def test_publication_randomness():
    secure, insecure = Publication.secure(), Publication.insecure(3)
    assert secure.seed() != secure.seed() and secure.seed() > 2**64  # 128 fresh bits each time
    assert insecure.seed() == 3 and np.array_equal(insecure.rng(1).random(3), Publication.insecure(3).rng(1).random(3))
    block = insecure.privacy_block({"differentially_private": True, "epsilon": 1.0}, ["b", "a", "a"])
    assert block["differentially_private"] is False and "INSECURE" in block["note"] and block["public"] == ["a", "b"]
    assert secure.privacy_block({"differentially_private": True}, [])["differentially_private"] is True
