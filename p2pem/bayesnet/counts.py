"""Contingency counts of discretised rows: per node, as flat vectors of public length.

Everything PrivBayes reads from the data is a contingency count -- a sum over rows -- so a
node computes the counts of its own rows and the network sums them (any aggregation
protocol).  The rows are in :func:`p2pem.tabular.discretize` form: one small integer per
attribute, attribute ``j`` taking values ``0 .. sizes[j] - 1`` on public bins.

An *attribute set* is a sorted tuple of attribute indices.  Its table has
``prod(sizes[j] for j in set)`` cells in C order (the last attribute varies fastest), the
order of :func:`numpy.ravel_multi_index`.  A :class:`Layout` concatenates the tables of
several attribute sets into one flat vector -- what one aggregation carries -- and splits the
aggregated vector back into tables.  Its length depends only on the public sets and domain
sizes, so every node knows it before the aggregation starts.

Counts are whole numbers held in float64 (exact up to 2**53), and a node's counts are the
same bits whether it is counted alone or in a batch with other nodes: one ``bincount`` per
table over the batch's rows, each node's cells offset by its position.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from p2pem.errors import DataError, ProtocolError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
AttrSet = tuple[int, ...]

__all__ = ["AttrSet", "Layout", "attr_set", "joint_counts", "marginalize", "part_index", "table_size", "whole_counts"]


def attr_set(attrs: Iterable[int]) -> AttrSet:
    """The sorted tuple of distinct attribute indices (the key of a table)."""
    out = tuple(sorted({int(a) for a in attrs}))
    return out


def table_size(attrs: Sequence[int], sizes: Sequence[int]) -> int:
    """The number of cells of the table over ``attrs``: the product of their domain sizes."""
    return math.prod(int(sizes[a]) for a in attrs)


def part_index(offsets: Sequence[int] | npt.NDArray[np.intp], n_rows: int) -> IntArray:
    """The part (node) of every row, when part ``i``'s rows start at ``offsets[i]``."""
    starts = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(np.append(starts, n_rows))
    if np.any(lengths < 0) or (starts.size and starts[0] != 0):
        raise DataError(f"row offsets must start at 0 and not decrease, got {starts.tolist()}")
    return np.repeat(np.arange(starts.size, dtype=np.int64), lengths)


def joint_counts(binned: IntArray, attrs: Sequence[int], sizes: Sequence[int], parts: IntArray | None = None, n_parts: int = 1) -> FloatArray:
    """Counts of every cell of the table over ``attrs``, per part.

    Parameters
    ----------
    binned : numpy.ndarray of shape (n_rows, n_attributes), int
        Discretised rows.
    attrs : sequence of int
        The attributes of the table, in the order of its axes.
    sizes : sequence of int
        Domain size of every attribute.
    parts : numpy.ndarray of shape (n_rows,), int, optional
        The part (node) of every row (:func:`part_index`); default all rows in part 0.
    n_parts : int, default 1

    Returns
    -------
    numpy.ndarray of shape (n_parts, table_size(attrs, sizes)), float64
    """
    m = table_size(attrs, sizes)
    if attrs:
        cells = np.ravel_multi_index(tuple(binned[:, a] for a in attrs), tuple(int(sizes[a]) for a in attrs))
    else:
        cells = np.zeros(binned.shape[0], dtype=np.int64)
    if parts is not None:
        cells = parts * m + cells
    return np.bincount(cells, minlength=n_parts * m).astype(np.float64).reshape(n_parts, m)


def marginalize(table: FloatArray, attrs: Sequence[int], keep: Sequence[int]) -> FloatArray:
    """The table over ``keep`` (in that order) from the table over ``attrs`` (shaped by their domains)."""
    axes = tuple(i for i, a in enumerate(attrs) if a not in keep)
    reduced = table.sum(axis=axes) if axes else table
    remaining = [a for a in attrs if a in keep]
    return np.transpose(reduced, [remaining.index(a) for a in keep])


@dataclass(frozen=True)
class Layout:
    """Tables of several attribute sets, concatenated into one flat vector.

    Parameters
    ----------
    sets : tuple of AttrSet
        The attribute sets, in the order of the vector.
    sizes : tuple of int
        Domain size of every attribute.
    """

    sets: tuple[AttrSet, ...]
    sizes: tuple[int, ...]

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        """Where each set's table starts in the vector (and, last, the vector's length)."""
        out = [0]
        for s in self.sets:
            out.append(out[-1] + table_size(s, self.sizes))
        return tuple(out)

    @property
    def size(self) -> int:
        """Length of the vector (public)."""
        return self.offsets[-1]

    def shape(self, s: AttrSet) -> tuple[int, ...]:
        """The axes of the table over ``s``."""
        return tuple(int(self.sizes[a]) for a in s)

    def contributions(self, binned: IntArray, parts: IntArray | None = None, n_parts: int = 1) -> FloatArray:
        """(n_parts, size): every part's counts of every table, concatenated."""
        out = np.empty((n_parts, self.size))
        for s, start, stop in zip(self.sets, self.offsets[:-1], self.offsets[1:], strict=True):
            out[:, start:stop] = joint_counts(binned, s, self.sizes, parts, n_parts)
        return out

    def split(self, vector: FloatArray) -> dict[AttrSet, FloatArray]:
        """The tables of one aggregated vector, each shaped by its domains (views, not copies)."""
        if vector.shape != (self.size,):
            raise ProtocolError(f"an aggregated count vector has shape {vector.shape}, expected ({self.size},)")
        return {
            s: vector[start:stop].reshape(self.shape(s))
            for s, start, stop in zip(self.sets, self.offsets[:-1], self.offsets[1:], strict=True)
        }


def whole_counts(sums: FloatArray, *, tolerance: float = 0.25, what: str = "counts", noisy: bool = False) -> FloatArray:
    """Network sums of counts rounded to whole numbers, refusing sums that are not near one.

    Exact protocols deliver whole numbers up to float rounding; ``pdmm-sp`` delivers them up
    to its consensus error (about 1e-10 of a count on 100 nodes).  Rounding makes every node
    hold the same bits, so every node makes the same choices from them.  Sums of noisy
    counts (``noisy``) are rounded as they are: any real value is possible there, and a
    node's consensus error crosses a rounding boundary with probability of the order of that
    error (1e-10 per entry), which the nodes' final comparison would catch.

    Raises
    ------
    ProtocolError
        A sum of exact counts is further than ``tolerance`` from a whole number >= 0 (an
        aggregation that did not converge far enough, or a member that lied): rounding could
        then differ between nodes.
    """
    rounded = np.round(sums)
    if noisy:
        return rounded
    bad = np.abs(sums - rounded) > tolerance
    if np.any(bad) or np.any(rounded < 0):
        j = int(np.flatnonzero(bad | (rounded < 0))[0])
        raise ProtocolError(
            f"aggregated {what}: entry {j} is {float(sums[j])!r}, not a whole number >= 0 "
            f"(the aggregation did not converge far enough; lower the protocol's tol)"
        )
    return rounded
