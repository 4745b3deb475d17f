"""Mixture families behind one interface (:class:`~p2pem.families.base.MixtureFamily`).

======================  ============================================================
name                    family
======================  ============================================================
``gaussian``            full-covariance Gaussian mixtures (:mod:`p2pem.gmm`)
``skew-normal``         multivariate skew-normal mixtures (:mod:`p2pem.snmix`)
``mixed``               mixtures of independent Gaussian and categorical columns
                        (:mod:`p2pem.families.mixed`)
======================  ============================================================

A family is a frozen dataclass instance (it may carry public configuration); the EM loop,
the engines and the estimator reach the model only through it.  To add one: a module here
with its :class:`~p2pem.families.base.MixtureFamily` subclass and its batched parameter
type, and one line in :data:`FAMILIES`.  Scenarios (``[em] family``), rosters and
``result.json`` name a family by :meth:`~p2pem.families.base.MixtureFamily.describe`
(``{"name": ..., **config}``) and rebuild it with :func:`make_family`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from p2pem.errors import ConfigError
from p2pem.families.base import BatchParams, MixtureFamily
from p2pem.families.gaussian import GAUSSIAN, GaussianBatch, GaussianFamily
from p2pem.families.mixed import MixedBatch, MixedFamily, MixedParams
from p2pem.families.skewnormal import SKEW_NORMAL, SkewNormalBatch, SkewNormalFamily

#: Family constructors by the names users type; keyword arguments are the family's
#: configuration.
FAMILIES: dict[str, Callable[..., MixtureFamily]] = {
    "gaussian": GaussianFamily,
    "skew-normal": SkewNormalFamily,
    "mixed": MixedFamily.from_config,
}


def make_family(name: str, **config: Any) -> MixtureFamily:
    """The family called ``name``, configured with ``config``.

    Lists in ``config`` (as TOML and JSON give them) become tuples, so the family stays
    hashable.

    Raises
    ------
    ConfigError
        One line: an unknown name (with the closest known one: "did you mean") or
        configuration the family rejects.
    """
    maker = FAMILIES.get(name) if isinstance(name, str) else None
    if maker is None:
        close = difflib.get_close_matches(str(name).lower(), list(FAMILIES), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown model family {name!r} (known: {', '.join(FAMILIES)}){hint}")
    config = {key: tuple(value) if isinstance(value, list) else value for key, value in config.items()}
    try:
        return maker(**config)
    except TypeError as exc:
        raise ConfigError(f"model family {name!r}: {exc}") from None


def family_from_document(document: str | Mapping[str, Any]) -> MixtureFamily:
    """A family from its name or its :meth:`~p2pem.families.base.MixtureFamily.describe` form."""
    if isinstance(document, str):
        return make_family(document)
    if not isinstance(document, Mapping) or not isinstance(document.get("name"), str):
        raise ConfigError(f"a model family is a name or a table with a 'name', got {document!r}")
    return make_family(document["name"], **{k: v for k, v in document.items() if k != "name"})


__all__ = [
    "FAMILIES",
    "GAUSSIAN",
    "SKEW_NORMAL",
    "BatchParams",
    "GaussianBatch",
    "GaussianFamily",
    "MixedBatch",
    "MixedFamily",
    "MixedParams",
    "MixtureFamily",
    "SkewNormalBatch",
    "SkewNormalFamily",
    "family_from_document",
    "make_family",
]
