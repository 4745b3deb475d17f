"""A Bayesian network over discretised attributes: its conditionals and ancestral sampling.

PrivBayes' NoisyConditionals (Zhang et al., SIGMOD 2014, Algorithm 1 lines 3-7; TODS 2017,
Sec. 3): for every attribute X_i with parents P_i the noisy joint counts of (X_i, P_i)
(Laplace noise, see :mod:`p2pem.bayesnet.privacy`) have their negative entries set to 0
and are normalised into the conditional distribution Pr[X_i | P_i].  When the table of one
attribute is contained in another's (the first attributes of the network, whose parents
and themselves are all parents of a later one) it is the marginal of that table, so only
the *maximal* attribute sets get noise (:func:`noisy_sets`), as PrivBayes derives the first
k conditionals from the (k+1)-way marginal of attribute k+1.

Sampling is ancestral: attributes in network order, each drawn from its conditional given
its parents' sampled values (one uniform per row and attribute, inverse CDF).  It reads the
network alone, never the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pem.bayesnet.counts import AttrSet, attr_set, marginalize
from p2pem.errors import DataError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

__all__ = ["Conditional", "Network", "conditional_from_counts", "noisy_sets", "project_counts", "sample_networks"]


@dataclass(frozen=True, eq=False)
class Conditional:
    """Pr[child | parents] as a table.

    Parameters
    ----------
    child : int
    parents : tuple of int
        In the order of ``probabilities``' leading axes.
    probabilities : numpy.ndarray of shape (|P_1|, ..., |P_m|, |X|)
        Each row over the child's values sums to 1.
    """

    child: int
    parents: tuple[int, ...]
    probabilities: FloatArray

    def sample(self, parent_values: IntArray, uniforms: FloatArray) -> IntArray:
        """The child's value for rows with ``parent_values`` (n, m), by inverse CDF of ``uniforms`` (n,)."""
        size = self.probabilities.shape[-1]
        rows = self.probabilities.reshape(-1, size)
        config = np.ravel_multi_index(tuple(parent_values.T), self.probabilities.shape[:-1]) if self.parents else np.zeros(len(uniforms), dtype=np.int64)
        cdf = np.cumsum(rows, axis=1)
        cdf[:, -1] = np.inf  # rounding: the last value takes what is left
        return np.argmax(cdf[config] > uniforms[:, None], axis=1).astype(np.int64)


def project_counts(counts: FloatArray, total: float) -> FloatArray:
    """The closest table (Euclidean) with non-negative cells that sum to ``total``.

    Noisy counts minus one constant, negative cells set to 0, the constant chosen so that
    the cells sum to the known number of rows: the projection onto the scaled simplex
    (Duchi et al., ICML 2008), known as Norm-Sub for noisy histograms (Wang et al., "Locally
    differentially private frequency estimation with consistency", NDSS 2020).  Setting
    negatives to 0 alone inflates every sparse table by the noise's positive part; the
    projection removes that bias.  Post-processing: it reads only the released counts and
    the public n.
    """
    flat = np.asarray(counts, dtype=np.float64).ravel()
    if total <= 0:
        return np.zeros_like(np.asarray(counts, dtype=np.float64))
    desc = np.sort(flat)[::-1]
    shift = (np.cumsum(desc) - total) / np.arange(1, desc.size + 1)
    k = int(np.flatnonzero(desc > shift)[-1])
    return np.maximum(np.asarray(counts, dtype=np.float64) - shift[k], 0.0)


def conditional_from_counts(child: int, parents: Sequence[int], attrs: AttrSet, counts: FloatArray, total: float | None = None) -> Conditional:
    """Pr[child | parents] from (noisy) counts of the table over ``attrs`` (any superset, sorted).

    With ``total`` (the public number of rows) the counts are first projected onto the
    tables of that many rows (:func:`project_counts`), else negative counts become 0.  A
    parent configuration without mass gets the child's marginal from the same table, and a
    table without any mass the uniform distribution (post-processing of the counts, so it
    costs no budget).
    """
    keep = (*parents, child)
    clean = np.maximum(counts, 0.0) if total is None else project_counts(counts, total)
    table = np.maximum(marginalize(clean, attrs, keep), 0.0)
    size = table.shape[-1]
    marginal = table.reshape(-1, size).sum(axis=0)
    total = marginal.sum()
    fallback = marginal / total if total > 0 else np.full(size, 1.0 / size)
    mass = table.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        probs = np.where(mass > 0, table / np.where(mass > 0, mass, 1.0), fallback)
    return Conditional(int(child), tuple(int(p) for p in parents), probs)


def noisy_sets(order: Sequence[int], parents: dict[int, AttrSet]) -> dict[int, AttrSet]:
    """For every attribute, the attribute set whose noisy table its conditional is read from.

    An attribute's own set X_i + P_i when no later attribute's set contains it (then the set
    gets noise of its own), else the set of the last attribute whose set contains it.
    """
    own = {a: attr_set((a, *parents[a])) for a in order}
    out = {}
    for i, a in enumerate(order):
        source = own[a]
        for b in reversed(order[i + 1 :]):
            if set(own[a]) <= set(own[b]):
                source = own[b]
                break
        out[a] = source
    return out


@dataclass(frozen=True, eq=False)
class Network:
    """A Bayesian network: the attributes in sampling order with their conditionals.

    Parameters
    ----------
    sizes : tuple of int
        Domain size of every attribute of the table (also those of other networks).
    conditionals : tuple of Conditional
        In sampling order: every parent comes before its child.
    """

    sizes: tuple[int, ...]
    conditionals: tuple[Conditional, ...]

    def __post_init__(self) -> None:
        seen: set[int] = set()
        for c in self.conditionals:
            if c.child in seen or not set(c.parents) <= seen:
                raise DataError(f"network: attribute {c.child} comes twice or before one of its parents {c.parents}")
            expected = (*(self.sizes[p] for p in c.parents), self.sizes[c.child])
            if c.probabilities.shape != expected:
                raise DataError(f"network: the conditional of attribute {c.child} has shape {c.probabilities.shape}, expected {expected}")
            p = c.probabilities
            if not (np.all(np.isfinite(p)) and np.all(p >= 0) and np.allclose(p.sum(axis=-1), 1.0, atol=1e-9)):
                raise DataError(f"network: the conditional of attribute {c.child} is not a probability table")
            seen.add(c.child)

    @property
    def attributes(self) -> tuple[int, ...]:
        """The attributes in sampling order."""
        return tuple(c.child for c in self.conditionals)

    def sample_into(self, out: IntArray, rng: np.random.Generator) -> None:
        """Draw this network's attributes into the columns of ``out`` (n_rows, n_attributes)."""
        n = out.shape[0]
        for c in self.conditionals:
            out[:, c.child] = c.sample(out[:, list(c.parents)], np.asarray(rng.random(n)))


def sample_networks(networks: Sequence[Network], n_rows: int, rng: np.random.Generator) -> IntArray:
    """``n_rows`` discretised rows from independent networks that together cover every attribute."""
    if not networks:
        raise DataError("no network to sample from")
    sizes = networks[0].sizes
    covered = sorted(a for net in networks for a in net.attributes)
    if covered != list(range(len(sizes))):
        raise DataError(f"the networks cover attributes {covered}, not each of 0..{len(sizes) - 1} once")
    out = np.zeros((n_rows, len(sizes)), dtype=np.int64)
    for net in networks:
        net.sample_into(out, rng)
    return out
