"""Sweeps on a cluster engine: the trade-off, the leakage estimates and the whole-run attacks
give the same numbers in this process, in local worker processes and on a dask cluster (a
real ``LocalCluster`` of worker processes, reached by its scheduler address as a remote one)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from p2pem.cli import main
from p2pem.errors import ConfigError
from p2pem.leakage.analysis import run_plan
from p2pem.leakage.config import parse_leakage
from p2pem.leakage.plan import plan_analysis
from p2pem.leakage.wholerun_analysis import analyse_whole_run
from p2pem.parallel import Workers
from p2pem.scenario import load_scenario
from test_tradeoff import _scenario as tradeoff_scenario  # the tests folder is on sys.path (pytest's rootdir import mode)

import distributed  # the cluster extra, a declared test dependency

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"

pytestmark = [
    pytest.mark.slow,
    # dask's own shutdown may leave sockets for the garbage collector and warns about them
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore:.*unclosed.*:pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A dask cluster of two worker processes; tests reach it by address, like a remote one."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  worker_dashboard_address=None) as local:
        yield local.scheduler_address


def _strip(records: list[dict]) -> list[dict]:
    """Records without their wall times (the only thing that differs between engines)."""
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in records]


def test_tradeoff_is_the_same_here_in_local_workers_and_on_dask(tmp_path: Path, cluster: str) -> None:
    from p2pem.dp.tradeoff import run_tradeoff

    scenario = load_scenario(tradeoff_scenario(tmp_path))
    here = run_tradeoff(scenario)
    assert len(here["runs"]) == 11
    assert _strip(run_tradeoff(scenario, workers=Workers(jobs=2))["runs"]) == _strip(here["runs"])
    assert _strip(run_tradeoff(scenario, workers=Workers(backend="dask", scheduler=cluster))["runs"]) == _strip(here["runs"])


def test_the_cli_sends_the_sweep_to_the_scheduler(tmp_path: Path, cluster: str, capsys) -> None:
    scenario = str(tradeoff_scenario(tmp_path))
    assert main(["tradeoff", scenario, "--out", str(tmp_path / "here"), "-q"]) == 0
    assert main(["tradeoff", scenario, "--out", str(tmp_path / "dask"), "-q", "--backend", "dask", "--scheduler", cluster]) == 0
    docs = [json.loads((tmp_path / name / "tradeoff.json").read_text()) for name in ("here", "dask")]
    assert _strip(docs[0]["runs"]) == _strip(docs[1]["runs"])


def test_leakage_estimates_are_the_same_wherever_they_run(cluster: str) -> None:
    scenario = load_scenario(SCENARIOS / "fig1.toml")
    config = dataclasses.replace(parse_leakage(scenario), runs=400, rounds=3)
    plan = plan_analysis(scenario, config)

    def numbers(workers: Workers) -> list:
        report = run_plan(plan, workers=workers)
        return [(r.label, r.adversary, r.node, r.mi_bits, r.mi_ci, r.exact_bits) for r in report.runs]

    here = numbers(Workers())
    assert len(here) == 9 and all(len(r[3]) == 3 for r in here)  # 3 protocols x 3 targets, 3 rounds each
    assert numbers(Workers(jobs=2)) == here
    assert numbers(Workers(backend="dask", scheduler=cluster)) == here


def test_whole_run_attacks_are_the_same_wherever_they_run(cluster: str) -> None:
    scenario = load_scenario(SCENARIOS / "fig1_wholerun.toml")
    here = analyse_whole_run(scenario).to_json()["runs"]
    assert analyse_whole_run(scenario, workers=Workers(backend="dask", scheduler=cluster)).to_json()["runs"] == here


def test_model_selection_is_the_same_wherever_it_runs(tmp_path: Path, cluster: str) -> None:
    from p2pem.selection import run_selection

    scenario = load_scenario(SCENARIOS / "ais_skew.toml")
    here = run_selection(scenario, [1, 2], ["gaussian", "skew-normal"], n_init=2)
    assert len(here["rows"]) == 4 and {r["restart"] for r in here["rows"]} <= {0, 1}
    assert run_selection(scenario, [1, 2], ["gaussian", "skew-normal"], n_init=2, workers=Workers(backend="dask", scheduler=cluster))["rows"] == here["rows"]
    assert main(["select", str(SCENARIOS / "ais_skew.toml"), "--components", "1..2", "--families", "gaussian,skew-normal", "--n-init", "2",
                 "-j", "2", "--out", str(tmp_path / "sel"), "-q"]) == 0
    assert json.loads((tmp_path / "sel" / "select.json").read_text())["rows"] == here["rows"]


def test_workers_are_checked() -> None:
    with pytest.raises(ConfigError, match="--jobs must be an integer >= 1"):
        Workers(jobs=0)
    with pytest.raises(ConfigError, match="needs --backend dask"):
        Workers(scheduler="tcp://127.0.0.1:8786")
    with pytest.raises(ConfigError, match="cannot reach the dask scheduler"):
        Workers(backend="dask", scheduler="tcp://127.0.0.1:9").map(abs, [1, 2])
