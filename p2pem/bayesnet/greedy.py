"""GreedyBayes: the network, its candidate attribute-parent pairs and the private choice among them.

PrivBayes (Zhang et al., SIGMOD 2014, Algorithm 4; TODS 2017, Sec. 4-5) builds a Bayesian
network one attribute at a time.  The first attribute (the root) has no parents; at every
later step each attribute X not yet in the network is paired with candidate parent sets P
drawn from the attributes already in it, every pair is scored by the mutual information
I(X; P) of the data, and the exponential mechanism picks one pair.

Candidate parent sets
---------------------
With a fixed degree ``k`` (SIGMOD 2014) P ranges over the subsets of size
``min(k, |V|)`` of the network V.  For attributes of different domain sizes PrivBayes
(TODS 2017, Sec. 5.2) bounds the table instead of the degree, by theta-usefulness: the
noisy table of (X, P) must have at most ``max_cells = n epsilon_2 / (2 d theta)`` cells (the
average count per cell at least theta times the Laplace noise scale ``2 d / epsilon_2`` of
the count form), and P ranges over the *maximal* subsets of V under that bound -- adding
any other attribute of V would exceed it -- since mutual information grows with P.  Both
may be combined (maximal subsets of at most ``k`` attributes).  An attribute whose own
domain exceeds the bound gets no parents.

Everything here is public: the candidates depend on the network so far, the domain
sizes, n and the budget, never on the rows; only the scores do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from p2pem.bayesnet.counts import AttrSet, attr_set
from p2pem.errors import ConfigError

__all__ = ["Candidate", "Greedy", "parent_sets"]

#: Most candidate parent sets one attribute may have at one step (the enumeration of maximal
#: sets is exponential in the worst case; a larger bound asks for a smaller ``k``).
MAX_PARENT_SETS = 20_000


@dataclass(frozen=True)
class Candidate:
    """An attribute-parent pair: attribute ``child`` with parents ``parents`` (sorted)."""

    child: int
    parents: AttrSet

    @property
    def attrs(self) -> AttrSet:
        """The attribute set of the pair's table (sorted)."""
        return attr_set((self.child, *self.parents))


def parent_sets(child: int, available: Sequence[int], sizes: Sequence[int], *, k: int | None, max_cells: float | None) -> list[AttrSet]:
    """The candidate parent sets of ``child`` among ``available`` (module docstring).

    Parameters
    ----------
    child : int
    available : sequence of int
        The attributes that may be parents (those already in the network).
    sizes : sequence of int
        Domain size of every attribute.
    k : int or None
        Most parents; None for no bound on the number.
    max_cells : float or None
        Most cells of the table of (child, parents); None for no bound (then ``k`` is
        required and every subset of ``min(k, len(available))`` attributes is a candidate).

    Returns
    -------
    list of AttrSet
        Sorted parent sets, in lexicographic order; ``[()]`` when none fits.
    """
    avail = sorted(int(a) for a in available)
    limit = len(avail) if k is None else min(k, len(avail))
    if max_cells is None or math.isinf(max_cells):
        if k is None:
            raise ConfigError("candidate parent sets need a degree k, a cell bound, or both")
        return [tuple(c) for c in combinations(avail, limit)]
    budget = max_cells / sizes[child]
    out: list[AttrSet] = []

    def extend(i: int, chosen: list[int], cells: float) -> None:
        if len(out) > MAX_PARENT_SETS:
            raise ConfigError(
                f"attribute {child} has more than {MAX_PARENT_SETS} candidate parent sets at this step: set a degree k"
            )
        if i == len(avail):
            full = len(chosen) == limit
            if full or all(cells * sizes[a] > budget for a in avail if a not in chosen):
                out.append(tuple(chosen))
            return
        a = avail[i]
        if len(chosen) < limit and cells * sizes[a] <= budget:
            extend(i + 1, [*chosen, a], cells * sizes[a])
        extend(i + 1, chosen, cells)

    extend(0, [], 1.0)
    return sorted(out)


@dataclass
class Greedy:
    """The state of one GreedyBayes run over ``attributes``: the network built so far.

    Parameters
    ----------
    attributes : tuple of int
        The attributes the network covers (all of them, or one cluster).

    Attributes
    ----------
    order : list of int
        The attributes in the order they joined; ``order[0]`` is the root.
    parents : dict of int to AttrSet
        Every attribute's parents.
    """

    attributes: tuple[int, ...]
    order: list[int] = field(default_factory=list)
    parents: dict[int, AttrSet] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return len(self.order) == len(self.attributes)

    @property
    def remaining(self) -> tuple[int, ...]:
        """The attributes not yet in the network, in index order."""
        placed = set(self.order)
        return tuple(a for a in self.attributes if a not in placed)

    def add(self, candidate: Candidate) -> None:
        if candidate.child in self.parents or candidate.child not in self.attributes:
            raise ValueError(f"attribute {candidate.child} cannot join the network twice or from outside it")
        if not set(candidate.parents) <= set(self.order):
            raise ValueError(f"parents {candidate.parents} of attribute {candidate.child} are not all in the network")
        self.order.append(candidate.child)
        self.parents[candidate.child] = candidate.parents

    def candidates(
        self, sizes: Sequence[int], *, k: int | None, max_cells: float | None, allowed: Callable[[int, int], bool] | None = None
    ) -> list[Candidate]:
        """Every attribute-parent pair of the next step, in a public order.

        ``allowed(child, parent) -> bool``, optional, prunes parents (HMPrivBayes' threshold
        on a released similarity); it must read only public or released values.
        """
        out: list[Candidate] = []
        for child in self.remaining:
            available = [p for p in self.order if allowed is None or allowed(child, p)]
            out.extend(Candidate(child, ps) for ps in parent_sets(child, available, sizes, k=k, max_cells=max_cells))
        return out
