"""A model family and an explicit model read from TOML tables (scenarios and rosters).

``[em] family`` names the family: a string (``family = "skew-normal"``) or a table with a
``name`` and the family's configuration (``[em.family]``, ``name = "skew-normal"``,
``max_delta = 0.99``); absent means ``"gaussian"``.  ``[em.init]`` gives a model in the
family's own parameter names (:attr:`~p2pem.families.base.MixtureFamily.param_keys`).
Errors are one line naming the file and the dotted key, as everywhere in
:mod:`p2pem.tomltable`.
"""

from __future__ import annotations

from typing import Any

from p2pem.errors import ConfigError, InitError
from p2pem.families import FAMILIES, GAUSSIAN, MixtureFamily, make_family
from p2pem.tomltable import Table, show

__all__ = ["parse_family", "parse_init"]


def parse_family(sec: Table, key: str = "family") -> MixtureFamily:
    """The family named by ``sec[key]`` (a name or a table with ``name``); Gaussian when absent.

    Raises
    ------
    ConfigError
        ``FILE: 'em.family' unknown model family 'skewnormal' (known: ...); did you mean
        'skew-normal'?``, or a configuration key the family does not know or rejects.
    """
    if not sec.has(key):
        return GAUSSIAN
    raw = sec.table[key]
    config: dict[str, Any] = {}
    if isinstance(raw, str):
        name, at = raw, key
    elif isinstance(raw, dict):
        table = sec.section(key, None)
        name, at = table.string("name"), f"{key}.name"
        config = {k: v for k, v in raw.items() if k != "name"}
    else:
        sec.fail_key(key, f"must be a model family name ({', '.join(FAMILIES)}) or a table with a 'name', got {show(raw)}")
    try:
        return make_family(name, **config)
    except ConfigError as exc:
        sec.fail_key(at, str(exc))


def parse_init(sec: Table, family: MixtureFamily, n_components: int, n_features: int | None) -> Any:
    """An ``init`` table as the family's single parameters (keys: its ``param_keys``).

    The TOML types are checked here (arrays of finite numbers of the key's dimension);
    everything else by the family's ``params_from_dict``, whose error becomes one line naming
    the file and the dotted key, e.g. ``s.toml: 'em.init.scales[1]' is not positive definite``.
    """
    sec = Table(sec.where, sec.table, sec.prefix, [key for key, _ in family.param_keys])  # unknown keys fail here
    values = {key: sec.number_array(key, ndim=ndim) for key, ndim in family.param_keys}
    try:
        return family.params_from_dict(values, n_components, n_features)
    except InitError as exc:
        sec.fail_key(exc.key, exc.problem)
