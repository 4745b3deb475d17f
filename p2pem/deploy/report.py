"""A node's ``result.json``: its model, counts, timings, status and error, written atomically.

:func:`node_report` builds the document from the runtime's parts, :func:`write_report`
writes it (JSON has no NaN: non-finite numbers become null), :func:`write_failure` writes
the short one of a node that could not even start.  :mod:`p2pem.deploy.results` merges the
nodes' documents into the deployment's ``result.json``.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from p2pem.deploy.config import NodeConfig
from p2pem.deploy.failures import NodeFailure
from p2pem.em import EMState
from p2pem.errors import ConfigError, P2pemError
from p2pem.files import write_json

log = logging.getLogger(__name__)

__all__ = ["WIRE_COUNTERS", "node_model", "node_report", "write_failure", "write_report"]

#: Counters of the runtime reported under ``wire`` (besides ``rejected``).
WIRE_COUNTERS = ("published", "wire_bytes", "control_sent", "republished", "received", "duplicates", "stale", "held", "not_addressed", "reconnects")


def node_report(
    *,
    config: NodeConfig,
    run_id: str,
    launch: bytes,
    node: Any,
    status: str,
    error: P2pemError | None,
    protocol_round: int | None,
    n_rows: int,
    dropped: list[dict[str, int]],
    counters: Mapping[str, int],
    rejected: Mapping[str, int],
    timings: Mapping[str, float],
    costs: Mapping[str, float],
    on_dropout: str = "stop",
) -> dict[str, Any]:
    """The node's result document.

    Parameters
    ----------
    node : p2pem.node.Node
        Its EM state gives the model (only when ``status`` is ``"finished"``) and the
        log-likelihoods; its counts the messages and bytes.
    protocol_round : int or None
        The protocol round the node is in (None once EM finished).
    counters, rejected : mapping
        The runtime's counts (:data:`WIRE_COUNTERS`) and refusals by reason.
    """
    em = node.task if isinstance(node.task, EMState) else None  # another task reports no model here
    params, loglik = node_model(em) if em is not None and node.done and status == "finished" else (None, [])
    out: dict[str, Any] = {
        "node_id": config.node_id,
        "run_id": run_id,
        "launch": launch.hex(),
        "insecure_reproducible_seed": config.seed is not None,
        "on_dropout": on_dropout,
        "dropped": sorted(dropped, key=lambda d: d["node"]),
        "status": status,
        "error": None if error is None else str(error),
        "exit_code": 0 if error is None else int(error.exit_code),
        **failure_fields(error),
        "iteration": node.iteration,
        "round": protocol_round,
        "n_rows": n_rows,
        "n_iter": em.n_iter if em is not None else node.iteration,
        "converged": bool(em.converged) if em is not None else bool(node.done),
        "loglik": loglik,
        "rounds": {str(k): float(v) for k, v in node.rounds.items()},
        "unconverged_iterations": list(node.unconverged),
        "messages": node.sent_messages,
        "bytes": node.sent_bytes,
        "wire": {**{k: counters[k] for k in WIRE_COUNTERS}, "rejected": dict(rejected)},
        "timings": {k: round_(v) for k, v in timings.items()},
        "costs": {k: round_(v) for k, v in costs.items()},
        "cpu_s": round_(time.process_time()),
        "rusage": rusage(),
        # what a node process should never need to load (each costs start-up CPU on every node)
        "heavy_modules": sorted(m for m in ("scipy", "networkx") if m in sys.modules),
    }
    if params is not None and em is not None:
        out.update(em.family.to_dict(params))
    elif em is None and node.done and status == "finished":
        out["summary"] = [float(v) for v in node.task.summary()]  # what the nodes agreed on
        document = getattr(node.task, "document", None)  # optional in the Task interface: the task's result as data
        if document is not None:
            out["output"] = document()
    return out


def round_(value: float) -> float:
    return round(value, 6)


def write_report(path: Path, report: Mapping[str, Any]) -> Path:
    """Write ``report`` to ``path`` atomically (non-finite numbers as null) and return the path.

    Raises
    ------
    ConfigError
        The file cannot be written.
    """
    try:
        write_json(path, json_safe(report), indent=1)
    except OSError as exc:
        raise ConfigError(f"cannot write the node result to {path}: {exc.strerror or exc}") from None
    return path


def failure_fields(error: P2pemError | None) -> dict[str, Any]:
    """``reason`` (a :class:`~p2pem.deploy.failures.Reason` name in lower case, None when the
    error is not a node's failure of the run), ``culprits`` (the node ids it convicts on proof),
    ``suspects`` (those it names on evidence only) and ``attributable`` (whether it convicts
    anyone); see :mod:`p2pem.deploy.failures`."""
    if isinstance(error, NodeFailure):
        return {"reason": error.reason.name.lower(), "culprits": list(error.culprits), "suspects": list(error.suspects), "attributable": error.attributable}
    return {"reason": None, "culprits": [], "suspects": [], "attributable": False}


def write_failure(config: NodeConfig, error: P2pemError) -> None:
    """Result file of a node that could not even start (bad data, wrong key file): ``status: failed``."""
    doc = {"node_id": config.node_id, "status": "failed", "error": str(error), "exit_code": int(error.exit_code), **failure_fields(error)}
    try:
        write_json(config.result, doc, indent=1)
    except OSError as exc:
        log.error("cannot write the node result to %s: %s", config.result, exc.strerror or exc)


def rusage() -> dict[str, float]:
    """User and system CPU seconds and context switches of this process so far (POSIX)."""
    try:
        import resource  # POSIX only
    except ImportError:  # pragma: no cover - not POSIX
        return {}
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"user_s": round_(ru.ru_utime), "system_s": round_(ru.ru_stime), "voluntary_switches": ru.ru_nvcsw, "involuntary_switches": ru.ru_nivcsw}


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def node_model(em: Any) -> tuple[Any, list[float]]:
    """This node's fitted parameters and log-likelihoods from its EM state.

    Accepts both shapes of :class:`~p2pem.em.EMState`: one node per state (``params`` an
    attribute, ``loglik`` floats) and a batch of nodes (``params(node)``, ``node_loglik(node)``).
    """
    params = em.params
    if callable(params):
        params = params(0)
    if hasattr(em, "node_loglik"):
        loglik = [float(v) for v in em.node_loglik(0)]
    else:
        loglik = [float(np.ravel(v)[0]) for v in em.loglik]
    return params, loglik

