"""``p2pem synth`` as functions: fit a release, draw releases, judge them, write them.

:func:`synthesize` runs the scenario's synthesizer (``[synth] model``) with the chosen
protocol, draws ``releases`` independent releases of ``rows`` rows each from the release
document alone and, when the scenario holds out real test rows, computes the utility and risk
report (:func:`p2pem.synth.report.synth_report`) against them.  :func:`write_synthesis` writes
it all atomically into two folders: ``release/`` (what may be published: the synthetic CSVs and
``release.json``) and ``holder-only/`` (the report, computed from the real rows: not covered by
epsilon, never to be published).

The noise, the selections and the sampled rows come from OS entropy
(:mod:`p2pem.dp.publication`); only with ``Publication.insecure(seed)`` (``p2pem synth
--insecure-reproducible-seed``) is a run reproducible: release r is then drawn from the
scenario's ``"synth"`` stream, key ``(0, r)``, and the release says it is not private.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from p2pem.builders import build_protocols, load_tables
from p2pem.dp.publication import Publication
from p2pem.errors import ConfigError, DataError
from p2pem.files import atomic_output, write_json
from p2pem.scenario import Scenario
from p2pem.streams import synth_child
from p2pem.synth.config import SynthConfig, parse_synth
from p2pem.synth.registry import SYNTHESIZERS
from p2pem.synth.report import report_figure, synth_report
from p2pem.synth.synthesizer import Progress
from p2pem.tabular import Table, write_csv

__all__ = ["HOLDER_ONLY", "HOLDER_ONLY_DIR", "RELEASE_DIR", "Synthesis", "json_ready", "release_file_names", "sample_release", "synthesize",
           "write_synthesis"]


#: The subfolders of ``p2pem synth --out DIR``: what may be published, and what stays with the data holders.
RELEASE_DIR, HOLDER_ONLY_DIR = "release", "holder-only"

#: The first field of a report (and the banner of its figure): it is not a release.
HOLDER_ONLY = ("HOLDER ONLY, NOT COVERED BY EPSILON: computed from the real training and test rows (row counts, the real "
               "data's regression, distances to training rows); keep it with the data holders and never publish it")


@dataclass(frozen=True)
class Synthesis:
    """What :func:`synthesize` produced.

    Attributes
    ----------
    config : SynthConfig
    release : dict
        The release document (model and provenance).
    tables : list of Table
        The releases drawn from it.
    report : dict or None
        The utility and risk report (None without held-out test rows).
    train : Table
        The real training rows the model was fitted to.
    """

    config: SynthConfig
    release: dict[str, Any]
    tables: list[Table]
    report: dict[str, Any] | None
    train: Table


def sample_release(release: Mapping[str, Any], n_rows: int, rng: np.random.Generator) -> Table:
    """``n_rows`` rows from a release document, by its synthesizer (``release["model"]``).

    Raises
    ------
    DataError
        The document names no known synthesizer, or is not a valid release.
    ConfigError
        ``n_rows`` is not a positive integer.
    """
    if isinstance(n_rows, bool) or not isinstance(n_rows, (int, np.integer)) or n_rows < 1:
        raise ConfigError(f"the number of rows must be a positive integer, got {n_rows!r}")
    synthesizer = SYNTHESIZERS.get(str(release.get("model")))
    if synthesizer is None:
        raise DataError(f"release of unknown model {release.get('model')!r} (known: {', '.join(SYNTHESIZERS)})")
    return synthesizer.sample(release, int(n_rows), rng)


def synthesize(scenario: Scenario, *, rows: int | None = None, releases: int | None = None, progress: Progress | None = None,
               publication: Publication | None = None) -> Synthesis:
    """Fit the scenario's synthesizer and draw its releases (module docstring).

    Parameters
    ----------
    scenario : Scenario
        With a ``[data] schema`` and, for a report, ``[data] test`` or ``test_fraction``.
    rows : int, optional
        Rows per release (default ``[synth] rows``, else as many as the training rows).
    releases : int, optional
        Independent releases (default ``[synth] releases``, else 1).
    progress : callable(iteration, n_iterations), optional
        Called during the fit.
    publication : Publication, optional
        Where the noise, the selections and the sampled rows come from (default OS entropy;
        ``Publication.insecure(scenario.seed)`` for a reproducible, non-private run).

    Raises
    ------
    ConfigError
        A bad ``[synth]`` table, ``rows`` or ``releases`` below 1, or a scenario the
        synthesizer cannot fit.
    DataError
        The data cannot be read under the schema.
    """
    for name, value in (("rows", rows), ("releases", releases)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"--{name} must be a positive integer, got {value!r}")
    config = parse_synth(scenario, tuple(SYNTHESIZERS))
    train, test = load_tables(scenario)
    synthesizer = SYNTHESIZERS[config.model]
    protocol = build_protocols(scenario)[config.protocol]
    release = synthesizer.fit(scenario, protocol, progress=progress, publication=publication)
    n_rows = rows or config.rows or train.n_rows
    n_releases = releases or config.releases
    insecure = publication is not None and publication.reproducible

    def rng(*key: int) -> np.random.Generator:  # sampling is post-processing; still, nothing recorded determines the rows
        return np.random.default_rng(synth_child(scenario.seed, *key)) if insecure else np.random.default_rng()

    tables = [synthesizer.sample(release, n_rows, rng(0, r)) for r in range(n_releases)]
    report = None
    if test is not None:
        report = {"holder_only": HOLDER_ONLY, **synth_report(
            train, test, tables, rng=rng(1), target=config.target,
            regression=config.regression, three_way=config.three_way, dcr_rows=config.dcr_rows,
        )}
        report["release"] = {"model": release["model"], "protocol": release["protocol"]["name"], "privacy": release["privacy"]}
    return Synthesis(config, release, tables, report, train)


def release_file_names(n_releases: int) -> list[str]:
    """``synthetic.csv`` for the first release, ``synthetic-2.csv`` ... for the others."""
    return ["synthetic.csv"] + [f"synthetic-{r}.csv" for r in range(2, n_releases + 1)]


def json_ready(document: Any) -> Any:
    """``document`` with every infinite or NaN float replaced by None (JSON null).

    JSON has no infinity: a setting of ``"inf"`` (no noise) leaves infinite budgets and
    scales in a document, which JSON records as null ("unbounded"), the convention of the
    privacy blocks.  Every synthesizer's documents pass through here before they are written.
    """
    if isinstance(document, float):
        return document if math.isfinite(document) else None
    if isinstance(document, dict):
        return {k: json_ready(v) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [json_ready(v) for v in document]
    return document


def write_synthesis(out: str | os.PathLike[str], synthesis: Synthesis, *, title: str) -> list[Path]:
    """Write ``out/release/`` -- the releases (CSV with a header row, the schema's column names,
    order and types) and ``release.json`` -- and, with a report, ``out/holder-only/`` --
    ``report.json`` and ``report.png``, each saying first that it is not covered by epsilon --
    all or nothing (infinite numbers as null, :func:`json_ready`).

    Returns the files written (their final paths), the release's first.
    """
    names = [f"{RELEASE_DIR}/{name}" for name in (*release_file_names(len(synthesis.tables)), "release.json")]
    with atomic_output(out) as tmp:
        (tmp / RELEASE_DIR).mkdir()
        for name, table in zip(names[:-1], synthesis.tables, strict=True):
            write_csv(table, tmp / name)
        write_json(tmp / RELEASE_DIR / "release.json", json_ready(synthesis.release))
        if synthesis.report is not None:
            (tmp / HOLDER_ONLY_DIR).mkdir()
            write_json(tmp / HOLDER_ONLY_DIR / "report.json", json_ready(synthesis.report))
            report_figure(synthesis.report, tmp / HOLDER_ONLY_DIR / "report.png",
                          title=f"HOLDER ONLY: not covered by epsilon, do not publish\n{title}")
            names += [f"{HOLDER_ONLY_DIR}/report.json", f"{HOLDER_ONLY_DIR}/report.png"]
    return [Path(out) / name for name in names]
