"""The model family in scenarios, rosters and result.json: one name, one configuration, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from p2pem.builders import em_settings
from p2pem.deploy.crypto import Identity
from p2pem.deploy.roster import Roster
from p2pem.em import EMSettings
from p2pem.errors import ConfigError
from p2pem.families import FAMILIES, GAUSSIAN, family_from_document, make_family
from p2pem.registry import make_protocol
from p2pem.runner import RESULT_FORMAT, run_scenario
from p2pem.scenario import load_scenario
from test_scenario import BASE, config_error, edit, write


def test_make_family_names_the_known_ones_and_suggests_the_closest() -> None:
    with pytest.raises(ConfigError) as info:
        make_family("gausian")
    assert str(info.value) == f"unknown model family 'gausian' (known: {', '.join(FAMILIES)}); did you mean 'gaussian'?"
    with pytest.raises(ConfigError, match=r"^unknown model family 'poisson' \(known: .*\)$"):
        make_family("poisson")
    with pytest.raises(ConfigError, match=r"^model family 'gaussian': .*unexpected keyword argument 'colour'"):
        make_family("gaussian", colour="red")
    assert make_family("gaussian") == GAUSSIAN
    assert family_from_document(GAUSSIAN.describe()) == GAUSSIAN == family_from_document("gaussian")


def test_scenario_family_absent_named_or_a_table(tmp_path: Path) -> None:
    assert load_scenario(write(tmp_path, BASE)).em.family == GAUSSIAN
    named = load_scenario(write(tmp_path, edit(BASE, "tol = 0.0\n", 'tol = 0.0\nfamily = "gaussian"\n'), "n.toml"))
    assert named.em.family == GAUSSIAN and em_settings(named).family == GAUSSIAN
    table = load_scenario(write(tmp_path, edit(BASE, "tol = 0.0\n", 'tol = 0.0\n[em.family]\nname = "gaussian"\n'), "t.toml"))
    assert table.em.family == GAUSSIAN


@pytest.mark.parametrize(
    "line,message",
    [
        ('family = "gausian"', "'em.family' unknown model family 'gausian' (known: {known}); did you mean 'gaussian'?"),
        ("family = 3", "'em.family' must be a model family name ({known}) or a table with a 'name', got 3 (an integer)"),
        ('[em.family]\nname = "gaussian"\ncolour = 1', "'em.family.name' model family 'gaussian': "),
        ("[em.family]\nmax_delta = 0.5", "missing required key 'em.family.name'"),
    ],
)
def test_scenario_family_errors_are_one_line_naming_the_key(tmp_path: Path, line: str, message: str) -> None:
    got = config_error(write(tmp_path, edit(BASE, "tol = 0.0\n", f"tol = 0.0\n{line}\n")))
    assert got.startswith(message.format(known=", ".join(FAMILIES)))


def test_result_json_names_the_family_and_validates(tmp_path: Path) -> None:
    from test_schemas import validate

    run = run_scenario(load_scenario(write(tmp_path, BASE)))
    doc = json.loads(json.dumps(run.to_json()))
    assert (doc["format"], doc["version"]) == RESULT_FORMAT == ("p2pem-result", 2)
    assert doc["family"] == {"name": "gaussian"}
    assert {"weights", "means", "covariances"} <= set(doc["protocols"][0])
    validate(doc)


def test_roster_carries_the_family_and_reads_old_rosters_as_gaussian(tmp_path: Path) -> None:
    g = nx.cycle_graph(5)
    keys = [Identity.generate().public for _ in range(5)]
    roster = Roster.build("r", g, EMSettings(2, 5, 0.0, 1e-6, None, 7), make_protocol("pdmm-sp"), keys, n_features=2)
    path = roster.save(tmp_path / "r.toml")
    assert Roster.load(path).em["family"] == {"name": "gaussian"}
    assert Roster.load(path).em_settings().family == GAUSSIAN
    text = path.read_text()
    old = "\n".join(line for line in text.splitlines() if not line.startswith("family") and line.strip() != "[em.family]" and 'name = "gaussian"' not in line)
    path.write_text(old + "\n")
    assert Roster.load(path).em_settings().family == GAUSSIAN


SKEW_INIT = """
family = "skew-normal"
[em.init]
weights = [0.3, 0.3, 0.4]
locations = [[0.0, 0.0], [1.0, 1.0], [2, 0]]
scales = [[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.5], [0.5, 1.0]], [[1, 0], [0, 1]]]
shapes = [[1.0, 0.0], [0.0, -2.0], [3, 3]]
"""


def test_skew_normal_init_in_a_scenario_and_its_one_line_errors(tmp_path: Path) -> None:
    text = edit(BASE, "tol = 0.0\n", "tol = 0.0\n" + SKEW_INIT)
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.em.family.name == "skew-normal"
    np.testing.assert_array_equal(scenario.em.init.shapes, [[1.0, 0.0], [0.0, -2.0], [3, 3]])
    assert em_settings(scenario).init is scenario.em.init
    short = edit(text, "[3, 3]]", "[3]]")
    assert config_error(write(tmp_path, short, "short.toml")) == "'em.init.shapes' is ragged: its rows must all have the same length"
    wrong = edit(text, "shapes = [[1.0, 0.0], [0.0, -2.0], [3, 3]]", "shapes = [[1.0], [0.0], [3]]")
    assert config_error(write(tmp_path, wrong, "wrong.toml")) == "'em.init.shapes' must have shape (3, 2), got (3, 1)"
    not_pd = edit(text, "[[2.0, 0.5], [0.5, 1.0]]", "[[1.0, 2.0], [2.0, 1.0]]")
    assert config_error(write(tmp_path, not_pd, "pd.toml")) == "'em.init.scales[1]' is not positive definite"
    gaussian_keys = edit(text, "locations =", "means =")
    assert config_error(write(tmp_path, gaussian_keys, "keys.toml")).startswith("unknown key 'em.init.means' (known: weights, locations, scales, shapes)")
    misspelled = edit(text, 'family = "skew-normal"', 'family = "skewnormal"')
    assert config_error(write(tmp_path, misspelled, "fam.toml")).endswith("did you mean 'skew-normal'?")
