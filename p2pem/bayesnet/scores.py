"""Information scores of contingency tables and their sensitivities.

Every score is a function of counts (:mod:`p2pem.bayesnet.counts`), in nats.  Sensitivities
are for *bounded* neighbours: two tables of the same n rows that differ in one row (one count
moves from one cell to another), the relation of PrivBayes (Zhang et al., SIGMOD 2014 /
TODS 2017), under which the number of rows n is public.

=====================================  ==========================================================
score                                  sensitivity (n rows)
=====================================  ==========================================================
entropy H(X)                           (1/n) log n + ((n-1)/n) log(n/(n-1))
mutual information I(X; P), X or P     (1/n) log n + ((n-1)/n) log(n/(n-1))
binary (PrivBayes Lemma 1)
mutual information I(X; P), general    (2/n) log((n+1)/2) + ((n-1)/n) log((n+1)/(n-1))
(PrivBayes Lemma 1)
R(X, P) = (1/2) ||Pr[X, P] -           3 / n
Pr[X] Pr[P]||_1 (PrivBayes TODS 2017)
normalised MI I(X; Y) / log min(|X|,   the MI sensitivity divided by log min(|X|, |Y|)
|Y|) (HMPrivBayes' MIC on public bins)
=====================================  ==========================================================

The R score (PrivBayes, TODS 2017, Sec. 4.4) measures dependence on the scale of the
utility of the release itself, the L1 distance between the joint distribution and the
product of its marginals.  One changed row moves the joint by at most 2/n and each
marginal by at most 2/n in L1, so the product by at most 4/n (``||a' b' - a b||_1 <=
||a' - a||_1 + ||b' - b||_1`` for distributions) and R by at most (2/n + 4/n) / 2 = 3/n.  Its
range is [0, 1) like MI's useful range, but its sensitivity is about 7 times smaller than
Lemma 1's on 30 000 rows (3/n against 2 log(n)/n), so the exponential mechanism tells good
candidates from bad ones at a fraction of the budget.

The entropy bound is the largest change of -sum p log p when one of n rows changes cell;
it is attained by moving the one row of a singleton cell into a cell of n - 1 rows, and
equals the binary-MI bound (I(X; P) = H(X) when P determines X).  ``tests/test_bayesnet.py``
checks every bound by brute force over all neighbouring pairs of small tables.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from p2pem.errors import DataError

FloatArray = npt.NDArray[np.float64]

__all__ = [
    "entropy",
    "entropy_sensitivity",
    "mi_sensitivity",
    "mutual_information",
    "normalized_mi",
    "normalized_mi_sensitivity",
    "r_score",
    "r_score_sensitivity",
]


def entropy(counts: npt.ArrayLike) -> float:
    """Shannon entropy (nats) of the distribution of a count table of any shape.

    ``H = -sum_c (n_c / n) log(n_c / n)`` over the cells, with ``0 log 0 = 0``; 0 for an
    empty table.
    """
    c = np.asarray(counts, dtype=np.float64).ravel()
    if np.any(c < 0):
        raise DataError("entropy of a table with negative counts")
    n = c.sum()
    if n <= 0:
        return 0.0
    p = c[c > 0] / n
    return float(-np.sum(p * np.log(p)))


def mutual_information(joint: npt.ArrayLike) -> float:
    """Mutual information I(X; P) (nats) of a count table with X on axis 0 and P on the rest.

    ``I = H(X) + H(P) - H(X, P)``, clipped at 0 (rounding can make it a hair negative).
    """
    table = np.asarray(joint, dtype=np.float64)
    if table.ndim < 1:
        raise DataError("mutual information needs a table with the child on axis 0")
    flat = table.reshape(table.shape[0], -1)
    h = entropy(flat.sum(axis=1)) + entropy(flat.sum(axis=0)) - entropy(flat)
    return max(h, 0.0)


def r_score(joint: npt.ArrayLike) -> float:
    """R(X; P) = (1/2) ||Pr[X, P] - Pr[X] Pr[P]||_1 of a count table with X on axis 0, P on the rest."""
    table = np.asarray(joint, dtype=np.float64)
    flat = table.reshape(table.shape[0], -1)
    n = flat.sum()
    if n <= 0:
        return 0.0
    p = flat / n
    return float(0.5 * np.abs(p - np.outer(p.sum(axis=1), p.sum(axis=0))).sum())


def r_score_sensitivity(n: int) -> float:
    """Sensitivity of :func:`r_score` over n rows: 3 / n (module docstring)."""
    _check_rows(n)
    return 3.0 / n


def _check_rows(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise DataError(f"sensitivities need at least 2 rows, got {n!r}")


def entropy_sensitivity(n: int) -> float:
    """Sensitivity of the entropy of one attribute over n rows (module table)."""
    _check_rows(n)
    return math.log(n) / n + (n - 1) / n * math.log(n / (n - 1))


def mi_sensitivity(n: int, *, binary: bool = False) -> float:
    """Sensitivity of I(X; P) over n rows: PrivBayes' Lemma 1 (module table).

    Parameters
    ----------
    n : int
        The number of rows (public).
    binary : bool, default False
        X or P has a domain of two values (the smaller bound).
    """
    _check_rows(n)
    if binary:
        return entropy_sensitivity(n)
    return 2.0 / n * math.log((n + 1) / 2) + (n - 1) / n * math.log((n + 1) / (n - 1))


def normalized_mi(joint: npt.ArrayLike) -> float:
    """I(X; Y) / log min(|X|, |Y|) of a two-way count table, in [0, 1].

    The maximal information coefficient (Reshef et al., Science 2011) of two attributes
    on the grid of their public bins, the similarity HMPrivBayes clusters on; 0 when an
    attribute has a single value.
    """
    table = np.asarray(joint, dtype=np.float64)
    if table.ndim != 2:
        raise DataError(f"normalised mutual information needs a two-way table, got {table.ndim} axes")
    smallest = min(table.shape)
    if smallest < 2:
        return 0.0
    return min(mutual_information(table) / math.log(smallest), 1.0)


def normalized_mi_sensitivity(n: int, size_x: int, size_y: int) -> float:
    """Sensitivity of :func:`normalized_mi` for domains of ``size_x`` and ``size_y`` values."""
    smallest = min(size_x, size_y)
    if smallest < 2:
        return 0.0
    return mi_sensitivity(n, binary=smallest == 2) / math.log(smallest)
