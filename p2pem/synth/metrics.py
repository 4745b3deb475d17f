"""Distances between a real and a synthetic table: marginals, correlations, closest records.

Pure NumPy over :class:`~p2pem.tabular.Table` s that share one public schema; the pieces of
:func:`p2pem.synth.report.synth_report`.

* :func:`ks_distance` -- the two-sample Kolmogorov-Smirnov statistic of a continuous column;
* :func:`tvd` -- total variation distance of two count vectors on the same cells;
* :func:`marginal_tvds` -- the TVD of every α-way marginal on the public bins; their mean
  is the α-way average variation distance (AVD) of PrivBayes (Zhang et al., TODS 2017,
  Sec. 7) and HMPrivBayes (eq. 13);
* :func:`correlation_distances` -- Frobenius distances of the correlation and covariance
  matrices (Jälkö et al., *Patterns* 2021);
* :func:`closest_distances` -- distance of each row to its closest record (DCR) in a
  reference table, on the mixed-type scale of :func:`dcr_features`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from p2pem.errors import DataError
from p2pem.tabular import Table, design_matrix

__all__ = [
    "closest_distances",
    "correlation_distances",
    "dcr_features",
    "exact_copy_share",
    "ks_distance",
    "marginal_tvds",
    "tvd",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def ks_distance(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """The two-sample Kolmogorov-Smirnov statistic ``sup_x |F_a(x) - F_b(x)|``.

    ``F_a`` and ``F_b`` are the empirical distribution functions; the supremum is attained
    at one of the sample points (as ``scipy.stats.ks_2samp(a, b).statistic``).
    """
    x, y = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    if x.size == 0 or y.size == 0:
        raise DataError("ks_distance needs two non-empty samples")
    points = np.concatenate([x, y])
    cdf_x = np.searchsorted(x, points, side="right") / x.size
    cdf_y = np.searchsorted(y, points, side="right") / y.size
    return float(np.max(np.abs(cdf_x - cdf_y)))


def tvd(p: npt.ArrayLike, q: npt.ArrayLike) -> float:
    """Total variation distance ``(1/2) sum_c |p_c - q_c|`` of two distributions on the same cells.

    ``p`` and ``q`` are counts (or probabilities) per cell; each is normalised to sum 1.
    """
    a, b = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if a.shape != b.shape or a.sum() <= 0 or b.sum() <= 0 or np.any(a < 0) or np.any(b < 0):
        raise DataError(f"tvd needs two non-negative count vectors of one shape with positive sums, got shapes {a.shape} and {b.shape}")
    return float(0.5 * np.abs(a / a.sum() - b / b.sum()).sum())


def _joint_counts(binned: IntArray, subset: tuple[int, ...], sizes: Sequence[int]) -> npt.NDArray[np.int64]:
    dims = tuple(sizes[j] for j in subset)
    cells = np.ravel_multi_index(tuple(binned[:, j] for j in subset), dims)
    return np.bincount(cells, minlength=int(np.prod(dims)))


def marginal_tvds(
    real: IntArray,
    synthetic: IntArray,
    sizes: Sequence[int],
    order: int,
) -> tuple[list[tuple[int, ...]], FloatArray]:
    """TVD of every ``order``-way marginal between two discretised tables.

    Parameters
    ----------
    real, synthetic : numpy.ndarray of shape (n_rows, n_columns), int
        Rows in :func:`p2pem.tabular.discretize` form (same columns, any row counts).
    sizes : sequence of int
        The number of values of each column (:func:`p2pem.tabular.domain_sizes`).
    order : int
        α: 1 for the one-way marginals, 2 for all pairs, 3 for all triples.

    Returns
    -------
    subsets : list of tuple of int
        The column subsets, in ``itertools.combinations`` order.
    tvds : numpy.ndarray of shape (len(subsets),)
        Their total variation distances; the mean is the α-way AVD.
    """
    if order < 1 or order > len(sizes):
        raise DataError(f"cannot take {order}-way marginals of {len(sizes)} columns")
    subsets = list(itertools.combinations(range(len(sizes)), order))
    values = np.array([tvd(_joint_counts(real, s, sizes), _joint_counts(synthetic, s, sizes)) for s in subsets])
    return subsets, values


def _correlation(cov: FloatArray) -> FloatArray:
    """Correlation matrix of a covariance matrix; a constant feature correlates 0 with others."""
    std = np.sqrt(np.diag(cov))
    safe = np.where(std > 0, std, 1.0)
    corr = cov / np.outer(safe, safe)
    corr[std == 0, :] = 0.0
    corr[:, std == 0] = 0.0
    np.fill_diagonal(corr, 1.0)
    return corr


def correlation_distances(real: Table, synthetic: Table) -> dict[str, float]:
    """Frobenius distances of the correlation and covariance matrices of two tables.

    Both tables are encoded alike (:func:`p2pem.tabular.design_matrix` with
    ``unit_range=True``): continuous columns scaled to [0, 1] by their public range, so no
    column dominates by its unit, and one indicator per public category.  The covariance
    is the unbiased sample covariance (``numpy.cov``); a feature that is constant in one
    table (a category it never uses) has correlation 0 with every other feature there.

    Returns
    -------
    dict
        ``correlation_frobenius`` = ``||corr_real - corr_syn||_F``,
        ``covariance_frobenius`` = ``||cov_real - cov_syn||_F``, ``n_features``.
    """
    a = design_matrix(real, unit_range=True).X
    b = design_matrix(synthetic, unit_range=True).X
    cov_a, cov_b = np.atleast_2d(np.cov(a, rowvar=False)), np.atleast_2d(np.cov(b, rowvar=False))
    return {
        "correlation_frobenius": float(np.linalg.norm(_correlation(cov_a) - _correlation(cov_b))),
        "covariance_frobenius": float(np.linalg.norm(cov_a - cov_b)),
        "n_features": int(a.shape[1]),
    }


def dcr_features(table: Table) -> FloatArray:
    """Rows on the scale distances to closest records are measured in.

    A continuous column becomes ``(x - low) / (high - low)`` over its public range; a
    categorical column becomes its one-hot indicators divided by ``sqrt(2)``, so two rows
    that differ in one category are at distance 1, as two rows at opposite ends of one
    continuous range.  The Euclidean distance on this encoding is the DCR metric.
    """
    design = design_matrix(table, unit_range=True)
    return np.where(design.is_continuous, design.X, design.X / np.sqrt(2.0))


def closest_distances(queries: npt.ArrayLike, reference: npt.ArrayLike, *, chunk: int = 256) -> FloatArray:
    """Euclidean distance of each query row to its nearest reference row.

    Candidates come from ``||q||^2 - 2 q.r + ||r||^2`` in blocks of ``chunk`` queries (one
    matrix product each); the distance to the chosen neighbour is then recomputed from the
    difference itself, so an exact copy is at distance 0, not at rounding noise.

    Parameters
    ----------
    queries : array_like of shape (n_queries, n_features)
    reference : array_like of shape (n_reference, n_features)

    Returns
    -------
    numpy.ndarray of shape (n_queries,)
    """
    q_all = np.asarray(queries, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    if ref.shape[0] == 0 or q_all.ndim != 2 or ref.ndim != 2 or q_all.shape[1] != ref.shape[1]:
        raise DataError(f"closest_distances: shapes {q_all.shape} and {ref.shape} do not match")
    ref_sq = np.einsum("ij,ij->i", ref, ref)
    out = np.empty(q_all.shape[0])
    for start in range(0, q_all.shape[0], chunk):
        q = q_all[start : start + chunk]
        nearest = np.argmin(ref_sq[np.newaxis, :] - 2.0 * (q @ ref.T), axis=1)
        out[start : start + chunk] = np.sqrt(np.sum((q - ref[nearest]) ** 2, axis=1))
    return out


def _row_keys(table: Table) -> list[bytes]:
    # + 0.0 turns -0.0 (from rounding) into 0.0, so equal values have equal bytes
    rows = np.hstack([table.continuous + 0.0, table.codes.astype(np.float64)])
    return [row.tobytes() for row in np.ascontiguousarray(rows)]


def exact_copy_share(reference: Table, rows: Table) -> float:
    """The share of ``rows`` that equal some row of ``reference`` in every column."""
    seen = set(_row_keys(reference))
    keys = _row_keys(rows)
    return sum(key in seen for key in keys) / len(keys) if keys else 0.0
