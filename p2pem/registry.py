"""Every protocol by the name users type, and specs built from scenario parameters.

======================  ============================================================
name                    what it is
======================  ============================================================
``pdmm-sp``             PDMM average consensus with subspace perturbation (private)
``secure-sum``          Lin, Clifton & Zhu's masked ring on a Hamiltonian cycle (exact)
``federated``           everything to a server, which averages (exact, leaks everything)
``centralized``         plain EM on the pooled rows: the reference, no network
``dp-central``          differentially private EM, a trusted aggregator adds the noise
``dp-distributed``      differentially private EM, every node adds a noise share
                        before ``secure-sum`` or ``pdmm-sp`` sums (see :mod:`p2pem.dp`)
``dp-msnm``             DP-MSNM (Wu 2021), a central skew-normal baseline as printed:
                        its budget split and Lemmas 1-4 (:mod:`p2pem.dp.msnm`)
======================  ============================================================

This module sits above both protocol packages (:mod:`p2pem.protocols`, :mod:`p2pem.dp`) and
imports them; neither imports it.  A new protocol is one module with its
:class:`~p2pem.protocols.base.ProtocolSpec` subclass and one line in :data:`PROTOCOLS`.

:data:`TASKS` names the computations other than EM that a deployment's roster can carry
(its ``[task]`` table's ``kind``): a function that builds one node's
:class:`~p2pem.task.Task` from that public table and the node's own rows, so a deployed
node runs it without knowing what it computes.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, Protocol

from p2pem.bayesnet import marginalrelease
from p2pem.bayesnet.release import task_from_public
from p2pem.dp.msnm import DPMSNM
from p2pem.dp.protocols import DPCentral, DPDistributed
from p2pem.errors import ConfigError
from p2pem.protocols import Centralized, Federated, PdmmSP, ProtocolSpec, SecureSum
from p2pem.protocols.base import parameter_fields
from p2pem.task import Task
from p2pem.tomltable import did_you_mean

#: The protocols by the names users type (scenario files, the estimator, rosters).
PROTOCOLS: dict[str, type[ProtocolSpec]] = {
    "pdmm-sp": PdmmSP,
    "secure-sum": SecureSum,
    "federated": Federated,
    "centralized": Centralized,
    "dp-central": DPCentral,
    "dp-distributed": DPDistributed,
    "dp-msnm": DPMSNM,
}


def make_protocol(name: str | ProtocolSpec, params: Mapping[str, Any] | None = None) -> ProtocolSpec:
    """Build a protocol spec from its user-facing name and parameters.

    Raises
    ------
    ConfigError
        Unknown name, unknown parameter (naming it and the known ones) or a bad value.
    """
    if isinstance(name, ProtocolSpec):
        return name
    cls = PROTOCOLS.get(name)
    if cls is None:
        raise ConfigError(f"unknown protocol {name!r} (known: {', '.join(PROTOCOLS)}){did_you_mean(name, tuple(PROTOCOLS))}")
    params = dict(params or {})
    fields = {f.name: f for f in parameter_fields(cls)}
    unknown = sorted(set(params) - set(fields))
    if unknown:
        known = ", ".join(fields) or "none"
        raise ConfigError(f"unknown parameter '{unknown[0]}' for protocol {name} (known: {known}){did_you_mean(unknown[0], tuple(fields))}")
    hints = typing.get_type_hints(cls)
    for key, value in params.items():
        _check_type(name, key, value, hints[key])
    return cls(**params)


def _check_type(protocol: str, key: str, value: Any, hint: Any) -> None:
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            raise ConfigError(f"protocol {protocol}: '{key}' must be one of {list(typing.get_args(hint))}, got {value!r}")
        return
    allowed = typing.get_args(hint) if origin is typing.Union else (hint,)
    ok = False
    for t in allowed:
        if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            ok = True
        elif t is int and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        elif t in (bool, str) and isinstance(value, t):
            ok = True
    if not ok:
        names = " or ".join(getattr(t, "__name__", str(t)) for t in allowed)
        raise ConfigError(f"protocol {protocol}: '{key}' must be {names}, got {value!r}")


class TaskBuilder(Protocol):
    """``build(table, rows, *, node_id, n_nodes, seed, where) -> Task`` (see :func:`make_task`)."""

    def __call__(self, table: Mapping[str, Any], rows: Any, *, node_id: int, n_nodes: int, seed: int | None = None, where: str = "task") -> Task: ...


#: Tasks a roster's ``[task]`` table can name, by its ``kind``.
TASKS: dict[str, TaskBuilder] = {
    "bayesnet": task_from_public,  # a DP Bayesian-network release (p2pem.bayesnet.release)
    "marginals": marginalrelease.task_from_public,  # an MST or AIM release (p2pem.bayesnet.marginalrelease)
}


def make_task(table: Mapping[str, Any], rows: Any, *, node_id: int, n_nodes: int, seed: int | None = None, where: str = "task") -> Task:
    """Node ``node_id``'s task from a roster's public ``[task]`` table and the path of its own rows.

    ``seed`` (INSECURE, tests and reproductions only) is the scenario seed a reproducible
    deployment records; None draws the node's secrets from the operating system.

    Raises
    ------
    ConfigError
        An unknown ``kind`` (naming ``where``), or what the task's builder refuses.
    DataError
        The rows do not fit.
    """
    build = TASKS.get(str(table.get("kind")))
    if build is None:
        raise ConfigError(f"{where}: unknown task kind {table.get('kind')!r} (known: {', '.join(TASKS)})")
    return build(table, rows, node_id=node_id, n_nodes=n_nodes, seed=seed, where=where)


__all__ = ["PROTOCOLS", "TASKS", "TaskBuilder", "make_protocol", "make_task"]
