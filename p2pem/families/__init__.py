"""Mixture families behind one interface (:class:`~p2pem.families.base.MixtureFamily`).

======================  ============================================================
name                    family
======================  ============================================================
``gaussian``            full-covariance Gaussian mixtures (:mod:`p2pem.gmm`)
``mixed``               mixtures of independent Gaussian and categorical columns
                        (:mod:`p2pem.families.mixed`)
======================  ============================================================

A family is a frozen dataclass instance (it may carry public configuration); the EM loop,
the engines and the estimator reach the model only through it.  To add one: a module here
with its :class:`~p2pem.families.base.MixtureFamily` subclass and its batched parameter
type, and one line in :data:`FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from p2pem.errors import ConfigError
from p2pem.families.base import BatchParams, MixtureFamily
from p2pem.families.gaussian import GAUSSIAN, GaussianBatch, GaussianFamily
from p2pem.families.mixed import MixedBatch, MixedFamily, MixedParams

#: Family constructors by the names users type; keyword arguments are the family's
#: configuration.
FAMILIES: dict[str, Callable[..., MixtureFamily]] = {
    "gaussian": GaussianFamily,
    "mixed": MixedFamily.from_config,
}


def make_family(name: str, **config: Any) -> MixtureFamily:
    """The family called ``name``, configured with ``config``.

    Raises
    ------
    ConfigError
        Unknown name (naming the known ones) or configuration the family rejects.
    """
    maker = FAMILIES.get(name)
    if maker is None:
        raise ConfigError(f"unknown model family {name!r} (known: {', '.join(FAMILIES)})")
    try:
        return maker(**config)
    except TypeError as exc:
        raise ConfigError(f"model family {name!r}: {exc}") from None


__all__ = [
    "FAMILIES",
    "GAUSSIAN",
    "BatchParams",
    "GaussianBatch",
    "GaussianFamily",
    "MixedBatch",
    "MixedFamily",
    "MixedParams",
    "MixtureFamily",
    "make_family",
]
