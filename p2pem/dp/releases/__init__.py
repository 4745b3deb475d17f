"""Differentially private EM for any model family: each family's release layout and EM hook.

A private protocol (:mod:`p2pem.dp.protocols`) adds calibrated noise to vectors and never
looks inside them.  What the vectors are is the family's business, one module here per
family:

=================  ==========================================================================
family             what a private run releases (per EM iteration)
=================  ==========================================================================
``gaussian``       uncentred moment sums r, r x, r x x^T (:mod:`p2pem.dp.releases.gaussian`)
``skew-normal``    the same plus r r1, r r2 and r r1 x, whose sensitivities follow from the
                   public current model (:mod:`p2pem.dp.releases.skewnormal`)
``mixed``          r, r x, r x^2 (or r x x^T) of the Gaussian columns and r [code = c] of
                   the categorical ones (:mod:`p2pem.dp.releases.mixed`)
=================  ==========================================================================

A family's entry in :data:`PRIVATE_FAMILIES` is a :class:`PrivateFamily`: its ``release``
callable ``release(family, n_components, n_features, n_nodes, bound, *, mechanism,
private_init, options) -> ReleaseLayout`` (the named blocks with their L1/L2 sensitivities
and budget kinds; a block whose sensitivity depends on the *public* current parameters is
released normalised by it, ``Block.unit``; and the :class:`p2pem.em.PrivacyHook` with
``encode``, ``decode``, ``repair``, ``decode_init``), the budget kinds a split gives
fractions to with its named splits, and the columns the public box holds.  To make a new
family private: a module here and one line in :data:`PRIVATE_FAMILIES`; the accounting, both
private protocols, the trade-off sweep and the privacy reports take it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from p2pem.dp import accounting
from p2pem.dp.releases import gaussian, mixed, skewnormal
from p2pem.dp.releases.base import ReleaseLayout, RepairOptions
from p2pem.errors import ConfigError
from p2pem.families import MixtureFamily

__all__ = ["PRIVATE_FAMILIES", "PrivateFamily", "ReleaseLayout", "RepairOptions", "check_private", "private_release"]


def _every_column(family: Any, n_features: int) -> slice:
    return slice(0, n_features)


@dataclass(frozen=True)
class PrivateFamily:
    """How one family's statistics are released privately.

    Attributes
    ----------
    release : callable
        ``release(family, n_components, n_features, n_nodes, bound, *, mechanism,
        private_init, options) -> ReleaseLayout``.
    kinds : tuple of str
        The budget kinds of an EM iteration's blocks (:attr:`p2pem.dp.mechanisms.Block.split_kind`),
        in the order a split gives them fractions; the init's fraction comes last.
    splits : mapping of str to tuple of float
        Named splits over ``kinds`` and the init; the first is the family's default.
    bounded : callable(family, n_features) -> slice
        The columns of a row the public box [-bound, bound] holds (clipped to it, and read
        off the data when no bound is given); others, e.g. category codes, have public
        domains of their own.
    """

    release: Callable[..., ReleaseLayout]
    kinds: tuple[str, ...] = accounting.SPLIT_BLOCKS[:-1]
    splits: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: accounting.SPLITS)
    bounded: Callable[[Any, int], slice] = _every_column

    def fractions(self, split: str) -> tuple[float, ...]:
        """The fractions of ``split`` (a preset name or numbers) for :attr:`kinds` and the init."""
        return accounting.parse_split(split, self.splits, self.names)

    @property
    def names(self) -> tuple[str, ...]:
        """What a split's fractions pay for, in order: :attr:`kinds`, then the init."""
        return (*self.kinds, "init")


#: Each family's private release, by the family's name.
PRIVATE_FAMILIES: dict[str, PrivateFamily] = {
    "gaussian": PrivateFamily(gaussian.release),
    "skew-normal": PrivateFamily(skewnormal.release),
    "mixed": PrivateFamily(mixed.release, mixed.KINDS, mixed.SPLITS, mixed.bounded),
}


def check_private(family: MixtureFamily) -> PrivateFamily:
    """The private release of ``family``, refusing a family with none.

    Raises
    ------
    ConfigError
        ``family`` is not in :data:`PRIVATE_FAMILIES` (naming the families that are).
    """
    private = PRIVATE_FAMILIES.get(family.name)
    if private is None:
        raise ConfigError(
            f"the released statistics and their sensitivities are derived for the families {', '.join(PRIVATE_FAMILIES)} only, "
            f"not {family.name!r}"
        )
    return private


def private_release(
    family: MixtureFamily,
    n_components: int,
    n_features: int,
    n_nodes: int,
    bound: float,
    *,
    mechanism: str,
    private_init: bool,
    options: RepairOptions,
) -> ReleaseLayout:
    """The release layout and EM hook of ``family`` for one run (:func:`check_private`'s ``release``).

    Raises
    ------
    ConfigError
        The family has no private release (naming the ones that do).
    """
    return check_private(family).release(
        family, n_components, n_features, n_nodes, bound, mechanism=mechanism, private_init=private_init, options=options
    )
