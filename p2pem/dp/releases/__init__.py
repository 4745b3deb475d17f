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
=================  ==========================================================================

A family's entry in :data:`PRIVATE_FAMILIES` is a callable
``release(family, n_components, n_features, n_nodes, bound, *, mechanism, private_init,
options) -> ReleaseLayout``: the named blocks with their L1/L2 sensitivities (a block whose
sensitivity depends on the *public* current parameters is released normalised by it,
``Block.unit``) and the :class:`p2pem.em.PrivacyHook` (``encode``, ``decode``, ``repair``,
``decode_init``).  To make a new family private: a module here and one line in
:data:`PRIVATE_FAMILIES`; the accounting, both private protocols, the trade-off sweep and the
privacy reports take it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from p2pem.dp.releases import gaussian, skewnormal
from p2pem.dp.releases.base import ReleaseLayout, RepairOptions
from p2pem.errors import ConfigError
from p2pem.families import MixtureFamily

__all__ = ["PRIVATE_FAMILIES", "ReleaseLayout", "RepairOptions", "private_release"]

#: Each family's private release, by the family's name.
PRIVATE_FAMILIES: dict[str, Callable[..., ReleaseLayout]] = {
    "gaussian": gaussian.release,
    "skew-normal": skewnormal.release,
}


def check_private(family: MixtureFamily) -> None:
    """Refuse a family with no private release (naming the ones that have one).

    Raises
    ------
    ConfigError
        ``family`` is not in :data:`PRIVATE_FAMILIES`.
    """
    if family.name not in PRIVATE_FAMILIES:
        raise ConfigError(
            f"the released statistics and their sensitivities are derived for the families {', '.join(PRIVATE_FAMILIES)} only, "
            f"not {family.name!r}"
        )


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
    """The release layout and EM hook of ``family`` for one run.

    Raises
    ------
    ConfigError
        The family has no private release (naming the ones that do).
    """
    check_private(family)
    maker = PRIVATE_FAMILIES[family.name]
    return maker(family, n_components, n_features, n_nodes, bound, mechanism=mechanism, private_init=private_init, options=options)
