"""Saved models: a fitted model written and read back scores every row exactly as before
(to the bit), a ``p2pem simulate`` run's model scores new *raw* rows through its saved
preprocessing, and everything wrong with a file is one line naming it and the key."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import p2pem
from p2pem import DistributedGMM, geometric_graph
from p2pem.builders import build_graph, load_data, prepare_rows, row_nodes
from p2pem.cli import main
from p2pem.data import load_table
from p2pem.errors import ConfigError, NotFittedError
from p2pem.families import GAUSSIAN
from p2pem.scenario import load_scenario
from p2pem.schemas import load_schema

ROOT = Path(__file__).resolve().parents[1]
PARKINSONS = ROOT / "scenarios" / "parkinsons.toml"


def _parts(seed: int = 0, n_nodes: int = 12) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(5, 3)) + (i % 3) * 3 for i in range(n_nodes)]


def _same_inference(a, b, X: np.ndarray) -> None:
    """Every inference method gives the same bits."""
    np.testing.assert_array_equal(a.score_samples(X), b.score_samples(X))
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    assert a.score(X) == b.score(X) and a.bic(X) == b.bic(X) and a.aic(X) == b.aic(X)
    assert a.bic() == b.bic() and a.aic() == b.aic()
    for s1, s2 in zip(a.sample(50, rng=3), b.sample(50, rng=3), strict=True):
        np.testing.assert_array_equal(s1, s2)


def test_an_estimator_saved_and_loaded_scores_to_the_bit(tmp_path: Path) -> None:
    parts = _parts()
    model = DistributedGMM(n_components=3, max_iter=15, tol=0.0, random_state=4).fit(parts, geometric_graph(12, seed=2))
    path = model.save(tmp_path / "model.json")
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, load_schema("p2pem-model"))
    assert doc["p2pem"] == p2pem.__version__ and doc["created"].endswith("+00:00")
    assert doc["graph"]["n_nodes"] == 12 and len(doc["graph"]["edges"]) == model.graph_.number_of_edges()
    assert doc["row_nodes"] == [i for i, p in enumerate(parts) for _ in p]
    loaded = p2pem.load(path)
    assert type(loaded) is DistributedGMM and loaded.get_params()["n_components"] == 3 and loaded.random_state == 4
    for name in ("weights_", "means_", "covariances_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    assert loaded.loglik_ == model.loglik_ and loaded.n_iter_ == model.n_iter_ and loaded.n_rows_ == model.n_rows_
    new_rows = np.random.default_rng(9).normal(size=(200, 3)) * 3
    _same_inference(model, loaded, new_rows)
    assert not hasattr(loaded, "result_")  # the run itself is not saved; its record is
    assert loaded.saved_.protocol["name"] == "pdmm-sp"
    # saved again, the file says the same (but for the time it was written)
    again = json.loads(loaded.save(tmp_path / "again.json").read_text())
    assert {k: v for k, v in again.items() if k != "created"} == {k: v for k, v in doc.items() if k != "created"}


def test_a_skew_normal_estimator_saved_and_loaded_scores_to_the_bit(tmp_path: Path) -> None:
    """Every family saves the same way: its parameters in its own names, its configuration."""
    from p2pem import DistributedSkewNormalMixture

    parts = _parts(1)
    model = DistributedSkewNormalMixture(2, max_iter=8, tol=0.0, random_state=2, init_shapes=[1.0, -1.0, 0.5], max_delta=0.95)
    model.fit(parts, geometric_graph(12, seed=2))
    path = model.save(tmp_path / "skew.json")
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, load_schema("p2pem-model"))
    assert doc["family"] == {"name": "skew-normal", "init_shapes": [1.0, -1.0, 0.5], "max_delta": 0.95}
    assert list(doc["params"]) == ["weights", "locations", "scales", "shapes"]
    loaded = p2pem.load(path)
    assert type(loaded) is DistributedSkewNormalMixture
    assert loaded.get_params()["init_shapes"] == [1.0, -1.0, 0.5] and loaded.max_delta == 0.95
    for name in ("weights_", "locations_", "scales_", "shapes_", "deltas_", "means_", "covariances_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    _same_inference(model, loaded, np.random.default_rng(9).normal(size=(200, 3)) * 3)


def test_a_mixed_type_estimator_saved_and_loaded_scores_to_the_bit(tmp_path: Path) -> None:
    from p2pem import DistributedMixedMixture

    rng = np.random.default_rng(3)
    codes = rng.integers(3, size=150)
    X = np.column_stack([rng.normal(size=150) + codes * 3, rng.normal(size=150), codes])  # 2 continuous, 1 categorical
    model = DistributedMixedMixture(3, n_categories=[3], covariance="full", max_iter=10, tol=0.0, random_state=1, n_nodes=6).fit(X)
    assert model.probabilities_.shape == (3, 3)
    path = model.save(tmp_path / "mixed.json")
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, load_schema("p2pem-model"))
    assert doc["family"]["name"] == "mixed" and doc["family"]["n_continuous"] == 2 and doc["family"]["n_categories"] == [3]
    loaded = p2pem.load(path)
    assert type(loaded) is DistributedMixedMixture and loaded.n_continuous == 2 and loaded.covariance == "full"
    for name in ("weights_", "means_", "covariances_", "probabilities_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    _same_inference(model, loaded, X[:40])


def test_an_unfitted_estimator_cannot_be_saved(tmp_path: Path) -> None:
    with pytest.raises(NotFittedError):
        DistributedGMM().save(tmp_path / "m.json")


def test_a_simulate_run_saved_scores_new_raw_rows_as_the_run_did(tmp_path: Path, capsys) -> None:
    """parkinsons.toml standardises 22 columns and keeps 2 principal components: the saved model
    takes the raw 22 columns and scores them exactly as the run's model scores the prepared rows."""
    out = tmp_path / "run"
    assert main(["simulate", str(PARKINSONS), "--out", str(out), "-q"]) == 0
    assert main(["model", str(out), "--out", str(tmp_path / "models" / "pdmm.json")]) == 0
    assert "22 raw columns (standardised, projected on 2 principal components)" in capsys.readouterr().out
    doc = json.loads((tmp_path / "models" / "pdmm.json").read_text())
    jsonschema.validate(doc, load_schema("p2pem-model"))
    model = p2pem.load(tmp_path / "models" / "pdmm.json")
    assert model.n_features_in_ == 22 and model.feature_names_in_[0] == "MDVP:Fo(Hz)"

    scenario = load_scenario(PARKINSONS)
    raw, _ = load_table(ROOT / "data" / "parkinsons.data", drop_columns=["name", "status"])
    prepared, _ = prepare_rows(scenario)
    run = json.loads((out / "result.json").read_text())["protocols"][0]
    params = GAUSSIAN.params_from_dict({k: run[k] for k in ("weights", "means", "covariances")}, 3, 2)
    np.testing.assert_array_equal(model.score_samples(raw), GAUSSIAN.score_samples(prepared, params))
    np.testing.assert_array_equal(model.predict(raw), np.argmax(GAUSSIAN.log_responsibilities(prepared, params)[0], axis=1))
    # new raw rows (not in the data): the same map, the same model
    fresh = raw[:10] * 1.01
    np.testing.assert_array_equal(model.score_samples(fresh), GAUSSIAN.score_samples(model.preprocessing_.apply(fresh), params))
    # the graph and every row's node are the run's
    parts, graph = load_data(scenario), build_graph(scenario)
    assert sorted(map(tuple, doc["graph"]["edges"])) == sorted((min(e), max(e)) for e in graph.edges)
    nodes = np.asarray(doc["row_nodes"])
    for i, part in enumerate(parts):
        np.testing.assert_array_equal(np.sort(prepared[nodes == i], axis=0), np.sort(part, axis=0))


def test_a_private_run_keeps_its_privacy_block(tmp_path: Path, capsys) -> None:
    scenario = tmp_path / "dp.toml"
    scenario.write_text(
        'seed = 2\n[data]\nsource = "synthetic"\nn_samples = 120\n[graph]\nkind = "geometric"\nn_nodes = 8\n'
        "[em]\nn_components = 2\nmax_iter = 4\n"
        '[[protocols]]\nname = "pdmm-sp"\n[[protocols]]\nname = "dp-central"\nepsilon = 1.0\nbound = 6.0\n'
    )
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "run"), "-q"]) == 0
    simulated = json.loads((tmp_path / "run" / "result.json").read_text())["protocols"][1]
    assert simulated["protocol_params"]["privacy"]["release"] is False  # a simulation says it is not a release
    # a simulation's noise follows from the scenario seed: refused as a private model
    assert main(["model", str(tmp_path / "run"), "--protocol", "dp-central", "--out", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a simulation, not a release" in err and "--fresh-noise" in err and "\n" not in err
    assert not (tmp_path / "m.json").exists()
    for name, flag in (("dp-central", "--fresh-noise"), ("dp-central-gaussian", "--insecure-reproducible-seed")):  # name or label
        out = tmp_path / f"{name}.json"
        assert main(["model", str(tmp_path / "run"), "--protocol", name, "--out", str(out), flag]) == 0
        saved = p2pem.load(out).saved_
        assert saved.protocol["name"] == "dp-central" and saved.protocol["label"] == "dp-central-gaussian"
        privacy = saved.protocol["params"]["privacy"]
        assert privacy["epsilon"]["outsider"] is not None and privacy["delta"] == 1e-5
        assert all(v is None for v in saved.fit["loglik"])  # a private run releases no log-likelihood
        fresh = flag == "--fresh-noise"
        assert (privacy["release"], privacy["differentially_private"]) == (True, fresh)
        assert privacy["noise"] == ("os-entropy" if fresh else "insecure-reproducible-seed")
        same = np.array_equal(saved.params.means, np.asarray(simulated["means"]))
        assert same is not fresh  # fresh noise: another model than the simulation's; insecure: the simulation's
    printed = capsys.readouterr().out
    assert "fresh noise from OS entropy" in printed and "INSECURE" in printed


def test_a_model_with_parties_records_their_ids(tmp_path: Path) -> None:
    sites = ["b", "a", "c"] * 20
    rng = np.random.default_rng(0)
    rows = "\n".join(f"{s},{x:.6f},{y:.6f}" for s, (x, y) in zip(sites, rng.normal(size=(60, 2)), strict=True))
    (tmp_path / "rows.csv").write_text("site,x,y\n" + rows + "\n")
    (tmp_path / "s.toml").write_text(
        'seed = 1\n[data]\nsource = "csv"\npath = "rows.csv"\nnode_column = "site"\n[graph]\nkind = "geometric"\n'
        '[em]\nn_components = 2\nmax_iter = 3\n[[protocols]]\nname = "federated"\n'
    )
    assert main(["simulate", str(tmp_path / "s.toml"), "--out", str(tmp_path / "run"), "-q"]) == 0
    assert main(["model", str(tmp_path / "run"), "--out", str(tmp_path / "m.json"), "-q"]) == 0
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["graph"]["node_ids"] == ["a", "b", "c"]
    assert doc["row_nodes"] == row_nodes(load_scenario(tmp_path / "s.toml")).tolist() == [1, 0, 2] * 20
    assert doc["features"]["names"] == ["x", "y"] and doc["preprocessing"] is None


def test_a_result_whose_scenario_changed_is_refused(tmp_path: Path, capsys) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(PARKINSONS.read_text().replace('"../data/', json.dumps(str(ROOT / "data"))[:-1] + "/").replace("max_iter = 100", "max_iter = 2"))
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "run"), "-q"]) == 0
    scenario.write_text(scenario.read_text().replace("n_nodes = 80", "n_nodes = 60"))
    assert main(["model", str(tmp_path / "run"), "--out", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no longer builds the run's rows and graph" in err and "80 nodes" in err and "\n" not in err
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: d.update(format="p2pem-result"), "not a saved p2pem model"),
        (lambda d: d.update(version=99), "'version' is 99; this p2pem reads version 1"),
        (lambda d: d["params"].update(weights=[0.5, 0.6, -0.1]), "'params.weights'"),
        (lambda d: d["params"]["covariances"][1].__setitem__(0, [1.0, 5.0, 0.0]), "'params.covariances[1]'"),
        (lambda d: d["preprocessing"].update(scale=[1.0, 0.0, 1.0]), "'preprocessing.scale' must hold numbers > 0"),
        (lambda d: d["family"].update(name="gausian"), "'family'"),
        (lambda d: d.pop("features"), "'features' is missing"),
    ],
)
def test_a_bad_model_file_is_one_line_naming_the_key(tmp_path: Path, change, message: str) -> None:
    model = DistributedGMM(n_components=3, max_iter=5, random_state=1).fit(_parts(), geometric_graph(12, seed=2))
    doc = json.loads(model.save(tmp_path / "m.json").read_text())
    doc["preprocessing"] = {"center": [0.0, 0.0, 0.0], "scale": [1.0, 2.0, 1.0], "pca_center": None, "components": None}
    p2pem.load(_write(tmp_path / "ok.json", doc))  # the preprocessed file itself is fine
    change(doc)
    with pytest.raises(ConfigError) as exc:
        p2pem.load(_write(tmp_path / "bad.json", doc))
    text = str(exc.value)
    assert text.startswith(str(tmp_path / "bad.json")) and message in text and "\n" not in text, text


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_missing_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such model file"):
        p2pem.load(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        p2pem.load(tmp_path / "x.json")
