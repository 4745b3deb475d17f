"""The utility and risk report of a synthetic release, against a held-out real test split.

:func:`synth_report` compares one or more synthetic tables with the real training table
they imitate and the real test table nobody trained on, and returns a versioned,
JSON-ready dict (``format = "p2pem-synth-report"``, ``version = 1``);
:func:`report_figure` draws it.  What it measures (details in the functions of
:mod:`p2pem.synth.metrics` and :mod:`p2pem.synth.models`):

* **marginals** -- per column the Kolmogorov-Smirnov distance (continuous) and the total
  variation distance (TVD) on the public bins (every column); the TVD of every 2-way
  (and optionally 3-way) marginal on the public bins, whose mean is the α-way AVD of
  PrivBayes; each against the training rows;
* **correlations** -- Frobenius distances of correlation and covariance matrices;
* **TSTR** -- accuracy on the real test split of a logistic regression and a linear SVM
  trained on the synthetic rows, next to the same models trained on the real training
  rows and the majority class;
* **reproducibility** -- the share of releases on which a named regression has the real
  data's signs and significance, and the mean absolute coefficient error; and Jälkö et al.'s
  protocol (*Patterns* 2021): each finding graded strong or weak by a bootstrap of the real
  rows, and the share of releases that reproduce the strong and the weak ones -- meaningful
  over independent fits (``independent_fits``), not over samples of one fit;
* **privacy risk** -- the distance of synthetic rows to their closest training row (DCR)
  next to the same distance for real test rows, which were never in the training data:
  synthetic rows much closer than test rows are copies in all but name; and the share
  of exact copies.

The ``reference`` section holds the same measures for the real test split against the
training split: the level a perfect synthesizer (a fresh sample of the same population)
would reach, sampling noise included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError
from p2pem.synth.metrics import (
    closest_distances,
    correlation_distances,
    dcr_features,
    exact_copy_share,
    ks_distance,
    marginal_tvds,
)
from p2pem.synth.models import MODELS, N_BOOTSTRAP, Regression, reproducibility, single_threaded, tstr_accuracy
from p2pem.tabular import DEFAULT_BINS, Categorical, Continuous, Schema, Table, discretize, domain_sizes

__all__ = ["REPORT_FORMAT", "REPORT_VERSION", "report_figure", "synth_report"]

#: The ``format`` and ``version`` of :func:`synth_report`'s document.
REPORT_FORMAT = "p2pem-synth-report"
REPORT_VERSION = 1
#: Percentiles of the DCR distributions kept in the report (for the figure).
_PERCENTILES = tuple(range(0, 101, 5))


def synth_report(
    train: Table,
    test: Table,
    synthetic: Table | Sequence[Table],
    *,
    rng: np.random.Generator,
    target: str | None = None,
    regression: Regression | None = None,
    n_bins: int = DEFAULT_BINS,
    three_way: bool = False,
    dcr_rows: int | None = 2000,
    models: Sequence[str] = MODELS,
    independent_fits: bool = False,
    n_bootstrap: int | None = None,
) -> dict[str, Any]:
    """Utility and privacy risk of synthetic releases (module docstring).

    Parameters
    ----------
    train : Table
        The real rows the synthesizer was fitted on.
    test : Table
        Real rows of the same population that the synthesizer never saw.
    synthetic : Table or sequence of Table
        One or more releases (R independent draws); every measure but the
        reproducibility rate is computed per release and averaged in ``summary``.
    rng : numpy.random.Generator
        Draws the DCR samples (the only randomness).
    target : str, optional
        The categorical column the classifiers predict (Adult: ``"income"``); without
        it there is no TSTR section.
    regression : Regression, optional
        The finding whose reproducibility is measured
        (:data:`p2pem.synth.models.ADULT_INCOME_REGRESSION`); without it none is.
    n_bins : int, default 10
        Equal-width bins per continuous column over its public range, for the TVDs.
    three_way : bool, default False
        Also the TVD of every 3-way marginal.
    dcr_rows : int or None, default 2000
        Synthetic (and test) rows whose closest training row is searched, drawn without
        replacement; None uses every row (quadratic time).  Exact copies are always
        counted over every row.
    models : sequence of str, default ("logistic", "svm")
        The TSTR classifiers.
    independent_fits : bool, default False
        The releases are independent DP fits (fresh noise each), as Jälkö et al.'s protocol
        asks; False (samples of one fit) is recorded, and the rates then measure sampling
        noise alone.
    n_bootstrap : int, optional
        Bootstrap resamples of the training rows that grade each finding strong or weak
        (:func:`p2pem.synth.models.finding_strength`; drawn from ``rng``); default 100 over
        independent fits, none (no grades: samples of one fit share its noise) otherwise.

    Returns
    -------
    dict
        JSON-ready: ``format``, ``version``, ``settings``, ``rows``, ``reference``,
        ``releases`` (one entry per synthetic table), ``summary`` (means over releases)
        and ``reproducibility`` (or None).

    Raises
    ------
    DataError
        The tables do not share one schema, or one is empty.
    ConfigError
        ``target`` is not a categorical column, an unknown model, a bad ``dcr_rows``, or
        scikit-learn/statsmodels are missing (``pip install 'p2pem[synth]'``).
    """
    with single_threaded():
        return _report(train, test, synthetic, rng, target, regression, n_bins, three_way, dcr_rows, models, independent_fits, n_bootstrap)


def _report(
    train: Table,
    test: Table,
    synthetic: Table | Sequence[Table],
    rng: np.random.Generator,
    target: str | None,
    regression: Regression | None,
    n_bins: int,
    three_way: bool,
    dcr_rows: int | None,
    models: Sequence[str],
    independent_fits: bool = False,
    n_bootstrap: int | None = None,
) -> dict[str, Any]:
    releases = [synthetic] if isinstance(synthetic, Table) else list(synthetic)
    schema = _check_tables(train, test, releases)
    if n_bootstrap is None:
        n_bootstrap = N_BOOTSTRAP if independent_fits else 0
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, int) or n_bootstrap < 0:
        raise ConfigError(f"n_bootstrap must be an integer >= 0, got {n_bootstrap!r}")
    if target is not None and not isinstance(schema.column(target), Categorical):
        raise ConfigError(f"target column {target!r} must be categorical to be classified")
    for model in models:
        if model not in MODELS:
            raise ConfigError(f"model must be one of {', '.join(map(repr, MODELS))}, got {model!r}")
    if dcr_rows is not None and (isinstance(dcr_rows, bool) or not isinstance(dcr_rows, int) or dcr_rows < 1):
        raise ConfigError(f"dcr_rows must be a positive integer or None, got {dcr_rows!r}")
    context = _Context(train, discretize(train, n_bins), dcr_features(train), domain_sizes(schema, n_bins), n_bins, three_way, dcr_rows, rng)

    test_dcr, _ = _dcr(context, test)
    reference: dict[str, Any] = {"test_vs_train": _compare(context, test), "dcr_test": test_dcr}
    if target is not None:
        majority = int(np.bincount(train.column(target)).argmax())
        reference["majority_class"] = float(np.mean(test.column(target) == majority))
        reference["train_on_real"] = {model: tstr_accuracy(train, test, target, model=model) for model in models}

    per_release = []
    for release in releases:
        entry = _compare(context, release)
        if target is not None:
            entry["tstr"] = {model: tstr_accuracy(release, test, target, model=model) for model in models}
        entry["dcr"], distances = _dcr(context, release)
        entry["dcr"]["closer_than_test_p5"] = float(np.mean(distances < test_dcr["p5"]))
        per_release.append(entry)

    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "settings": {
            "columns": list(schema.names),
            "schema_public": schema.public,
            "n_bins": n_bins,
            "target": target,
            "models": list(models),
            "three_way": three_way,
            "dcr_rows": dcr_rows,
            "dcr_metric": "Euclidean; continuous scaled to [0, 1] by the public range, one-hot categories / sqrt(2)",
            "regression": regression.to_dict() if regression is not None else None,
        },
        "rows": {"train": train.n_rows, "test": test.n_rows, "synthetic": [r.n_rows for r in releases]},
        "reference": reference,
        "releases": per_release,
        "summary": _summary(per_release),
        "reproducibility": (
            reproducibility(train, releases, regression, rng=rng, n_boot=n_bootstrap, independent_fits=independent_fits) if regression is not None else None
        ),
    }


@dataclass(frozen=True)
class _Context:
    """What every comparison against the training rows reuses."""

    train: Table
    train_binned: npt.NDArray[np.int64]
    train_features: npt.NDArray[np.float64]
    sizes: tuple[int, ...]
    n_bins: int
    three_way: bool
    dcr_rows: int | None
    rng: np.random.Generator


def _check_tables(train: Table, test: Table, releases: list[Table]) -> Schema:
    if not releases:
        raise DataError("synth_report needs at least one synthetic table")
    for label, table in [("train", train), ("test", test)] + [(f"synthetic[{i}]", t) for i, t in enumerate(releases)]:
        if table.schema != train.schema:
            raise DataError(f"synth_report: the {label} table's schema differs from the training table's")
        if table.n_rows == 0:
            raise DataError(f"synth_report: the {label} table has no rows")
    return train.schema


def _compare(context: _Context, other: Table) -> dict[str, Any]:
    """The marginal and correlation distances of ``other`` (a release, or the test split) to the training rows."""
    schema = context.train.schema
    binned = discretize(other, context.n_bins)
    _, one_way = marginal_tvds(context.train_binned, binned, context.sizes, 1)
    columns: dict[str, dict[str, Any]] = {}
    for j, column in enumerate(schema.columns):
        entry: dict[str, Any] = {"type": column.kind, "tvd": float(one_way[j])}
        if isinstance(column, Continuous):
            entry["ks"] = ks_distance(context.train.column(column.name), other.column(column.name))
        columns[column.name] = entry
    marginals: dict[str, Any] = {"1way_mean": float(one_way.mean())}
    for order, key in ((2, "2way"), (3, "3way")):
        if order > len(schema.columns) or (order == 3 and not context.three_way):
            continue
        subsets, values = marginal_tvds(context.train_binned, binned, context.sizes, order)
        marginals[key] = {
            "mean": float(values.mean()),
            "max": float(values.max()),
            "tvd": [{"columns": [schema.names[j] for j in s], "tvd": float(v)} for s, v in zip(subsets, values, strict=True)],
        }
    return {"columns": columns, "marginals": marginals, "correlation": correlation_distances(context.train, other)}


def _dcr(context: _Context, other: Table) -> tuple[dict[str, Any], npt.NDArray[np.float64]]:
    """DCR statistics of (a sample of) ``other``'s rows, and the sampled distances."""
    n = other.n_rows
    rows = n if context.dcr_rows is None else min(context.dcr_rows, n)
    index = np.sort(context.rng.choice(n, size=rows, replace=False)) if rows < n else np.arange(n)
    distances = closest_distances(dcr_features(other.take(index)), context.train_features)
    summary = {
        "rows": int(rows),
        "median": float(np.median(distances)),
        "p5": float(np.percentile(distances, 5)),
        "mean": float(distances.mean()),
        "percentiles": [float(v) for v in np.percentile(distances, _PERCENTILES)],
        "exact_copies": exact_copy_share(context.train, other),
    }
    return summary, distances


def _summary(releases: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over releases of the headline numbers."""

    def mean(get: Any) -> float | None:
        values = [get(r) for r in releases]
        return float(np.mean(values)) if values and None not in values else None

    summary: dict[str, Any] = {
        "n_releases": len(releases),
        "1way_tvd_mean": mean(lambda r: r["marginals"]["1way_mean"]),
        "2way_tvd_mean": mean(lambda r: r["marginals"]["2way"]["mean"] if "2way" in r["marginals"] else None),
        "3way_tvd_mean": mean(lambda r: r["marginals"]["3way"]["mean"] if "3way" in r["marginals"] else None),
        "correlation_frobenius": mean(lambda r: r["correlation"]["correlation_frobenius"]),
        "covariance_frobenius": mean(lambda r: r["correlation"]["covariance_frobenius"]),
        "dcr_median": mean(lambda r: r["dcr"]["median"]),
        "dcr_p5": mean(lambda r: r["dcr"]["p5"]),
        "exact_copies": mean(lambda r: r["dcr"]["exact_copies"]),
    }
    if "tstr" in releases[0]:
        summary["tstr"] = {model: mean(lambda r, m=model: r["tstr"][m]["accuracy"]) for model in releases[0]["tstr"]}
    return summary


# ----------------------------------------------------------------------------- figure


def report_figure(report: dict[str, Any], path: str | Path, *, title: str = "Synthetic data: utility and risk") -> None:
    """Draw a report (:func:`synth_report`'s dict, or the JSON read back) as a PNG.

    Four panels: per-column distances (mean over releases); the 2-way marginal TVD of
    every column pair (mean over releases); TSTR accuracy against train-on-real and the
    majority class; the DCR distribution of synthetic rows against that of real test
    rows.  The reproducibility rate, when there is one, is in the title.
    """
    if report.get("format") != REPORT_FORMAT or report.get("version") != REPORT_VERSION:
        raise DataError(f"not a {REPORT_FORMAT} version {REPORT_VERSION} document")
    # matplotlib loads only when a figure is drawn (start-up time of the report functions)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    releases = report["releases"]
    names = report["settings"]["columns"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 9), dpi=110)

    ax = axes[0, 0]
    tvd = np.mean([[r["columns"][n]["tvd"] for n in names] for r in releases], axis=0)
    ks = np.array([np.mean([r["columns"][n]["ks"] for r in releases]) if "ks" in releases[0]["columns"][n] else np.nan for n in names])
    y = np.arange(len(names))
    ax.barh(y - 0.2, tvd, height=0.4, label="TVD on public bins", color="tab:blue")
    ax.barh(y + 0.2, np.nan_to_num(ks), height=0.4, label="KS (continuous)", color="tab:orange")
    ref_tvd = [report["reference"]["test_vs_train"]["columns"][n]["tvd"] for n in names]
    ax.scatter(ref_tvd, y - 0.2, marker="|", s=120, color="black", label="real test vs train (TVD)", zorder=3)
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("distance to the training rows (0 = identical)")
    ax.set_title("per column")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)

    ax = axes[0, 1]
    grid = np.full((len(names), len(names)), np.nan)
    if "2way" in releases[0]["marginals"]:
        for k, pair in enumerate(releases[0]["marginals"]["2way"]["tvd"]):
            i, j = (names.index(c) for c in pair["columns"])
            grid[i, j] = grid[j, i] = np.mean([r["marginals"]["2way"]["tvd"][k]["tvd"] for r in releases])
    np.fill_diagonal(grid, tvd)
    image = ax.imshow(grid, cmap="viridis", vmin=0)
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    fig.colorbar(image, ax=ax, label="TVD", shrink=0.8)
    mean2 = report["summary"]["2way_tvd_mean"]
    ref2 = report["reference"]["test_vs_train"]["marginals"].get("2way", {}).get("mean")
    subtitle = f"mean {mean2:.3f}" if mean2 is not None else ""
    if ref2 is not None:
        subtitle += f" (real test vs train: {ref2:.3f})"
    ax.set_title(f"TVD of 2-way marginals on public bins\n{subtitle}; diagonal: 1-way")

    ax = axes[1, 0]
    reference = report["reference"]
    if "tstr" in report["summary"]:
        models = list(report["summary"]["tstr"])
        x = np.arange(len(models))
        real = [reference["train_on_real"][m]["accuracy"] for m in models]
        syn = [report["summary"]["tstr"][m] for m in models]
        ax.bar(x - 0.2, real, width=0.4, label="train on real", color="tab:gray")
        ax.bar(x + 0.2, syn, width=0.4, label="train on synthetic (TSTR)", color="tab:blue")
        for xi, value in zip(list(x - 0.2) + list(x + 0.2), real + syn, strict=True):
            ax.text(xi, value + 0.005, f"{value:.3f}", ha="center", fontsize=8)
        ax.axhline(reference["majority_class"], color="tab:red", linestyle="--", label=f"majority class {reference['majority_class']:.3f}")
        low = min(real + syn + [reference["majority_class"]])
        ax.set_ylim(max(0.0, low - 0.1), 1.0)
        ax.set_xticks(x, models)
        ax.set_ylabel(f"accuracy on the real test split ({report['settings']['target']})")
        ax.legend(fontsize=8, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no target column: no TSTR", ha="center", va="center", transform=ax.transAxes)
    ax.set_title("train on synthetic, test on real")
    ax.grid(axis="y", alpha=0.3)

    ax = axes[1, 1]
    percentiles = list(_PERCENTILES)
    ax.plot(reference["dcr_test"]["percentiles"], percentiles, color="black", label="real test rows")
    for i, release in enumerate(releases):
        ax.plot(release["dcr"]["percentiles"], percentiles, color="tab:blue", alpha=0.6, label="synthetic rows" if i == 0 else None)
    copies = report["summary"]["exact_copies"]
    ax.set_xlabel("distance to the closest training row (DCR)")
    ax.set_ylabel("percent of rows closer")
    ax.set_title(f"privacy risk: exact copies {100 * copies:.2f}% (real test: {100 * reference['dcr_test']['exact_copies']:.2f}%)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)

    rep = report.get("reproducibility")
    if rep is not None and rep["rate"] is not None:
        n = len(rep["releases"])
        what = f"release{'s' if n > 1 else ''}" if rep.get("independent_fits", True) else f"sample{'s' if n > 1 else ''} of one fit"
        title += f" | finding reproduced in {100 * rep['rate']:.0f}% of {n} {what}"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
