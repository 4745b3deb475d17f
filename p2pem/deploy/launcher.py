"""``p2pem deploy``: a whole deployment on one machine, one OS process per node.

This module only chains the jobs, each in its own module and usable on its own (the tests
and ``sim/bench_deploy.py`` use them):

:mod:`p2pem.deploy.kit`
    :func:`~p2pem.deploy.kit.prepare_kit` writes the per-node data, keys, configs, the
    roster and the broker's auth files; :func:`~p2pem.deploy.kit.start_kit_broker` starts
    Mosquitto for it.
:mod:`p2pem.deploy.supervise`
    :class:`~p2pem.deploy.supervise.Deployment` starts and watches the node processes.
:mod:`p2pem.deploy.results`
    :func:`~p2pem.deploy.results.collect_results` merges the per-node results.

:func:`run_deployment` runs the processes of a kit and collects; :func:`run_kit` adds the
broker and writes ``result.json``; :func:`deploy` prepares the kit first.  On any exception
(Ctrl-C included) every node process and the broker started here are stopped.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from p2pem.deploy.config import NodeConfig, Timeouts
from p2pem.deploy.kit import Kit, TaskKit, deploy_settings, prepare_kit, start_bridge_broker, start_kit_broker
from p2pem.errors import ConfigError
from p2pem.deploy.results import collect_results, write_result
from p2pem.deploy.supervise import DeployProgress, Deployment

log = logging.getLogger(__name__)

__all__ = ["deploy", "run_deployment", "run_kit", "watchdog_limit"]


def run_deployment(
    kit: Kit,
    *,
    wrap: Callable[[int], Sequence[str]] | None = None,
    progress: Callable[[DeployProgress], None] | None = None,
    on_start: Callable[[Deployment], None] | None = None,
) -> dict[str, Any]:
    """Run the node processes of ``kit`` against its (running) broker and collect the result.

    Parameters
    ----------
    kit : Kit
    wrap : callable, optional
        Command prefix per node (see :class:`Deployment`).
    progress : callable(DeployProgress), optional
        Called about 20 times a second.
    on_start : callable(Deployment), optional
        Called once the processes are started (tests use it to inject faults).

    Returns
    -------
    dict
        The ``result.json`` document (not yet written).

    Raises
    ------
    DeploymentFailed
        A node failed; names it and quotes the error that explains the failure.
    ProtocolError
        The nodes finished but disagree on the model.
    """
    dep = Deployment(kit, wrap=wrap)
    t0 = time.perf_counter()
    dep.start()
    log.info("started %d node processes for run %s (broker %s:%d)", kit.n_nodes, kit.run_id, kit.broker_host, kit.broker_port)
    try:
        if on_start is not None:
            on_start(dep)
        codes = dep.wait(progress=progress, watchdog=watchdog_limit(NodeConfig.load(kit.config_path(0)).timeouts))
    finally:
        dep.terminate()
    wall = time.perf_counter() - t0
    doc = collect_results(kit, codes, wall, exit_times=dep.exit_times, launched_unix=dep.started_unix)
    doc["deployment"]["launch"] = dep.launch.hex()
    return doc


def watchdog_limit(timeouts: Timeouts) -> float:
    """How long the launcher waits for a sign of life from any node before it stops them all.

    The nodes' own limit on a wait without progress is the stall limit plus the start-up
    timeout (during the first aggregation, see :mod:`p2pem.deploy.watchdog`); a node that
    gives up tells the others within a timeout.  The launcher allows that and one timeout
    more, so it fires only when the nodes' own checks failed to.
    """
    return timeouts.startup_timeout + timeouts.stall + 2 * timeouts.timeout


def deploy(
    scenario,
    out: str | os.PathLike[str],
    *,
    protocol: str | None = None,
    broker: tuple[str, int] | None = None,
    listen: str = "127.0.0.1",
    run_id: str | None = None,
    seeded: bool = False,
    timeouts: Timeouts | None = None,
    progress: Callable[[DeployProgress], None] | None = None,
    on_broker: Callable[[Any], None] | None = None,
    tls: bool = False,
    sites: int = 1,
    task: TaskKit | None = None,
    force: bool = False,
) -> tuple[Kit, dict[str, Any]]:
    """Prepare a kit in ``out``, start a broker (unless ``broker`` is given), run, collect.

    Writes ``out/result.json`` on success; ``force``: into a folder that is not empty
    (:func:`~p2pem.deploy.kit.prepare_kit`).  With ``task`` every node computes it instead of
    the scenario's EM (:func:`~p2pem.deploy.kit.prepare_kit`); the document then holds node
    0's ``output`` once all nodes agreed.  Node processes and the broker started here are
    stopped on return and on any exception, Ctrl-C included.

    Returns
    -------
    (Kit, dict)
        The kit and the ``result.json`` document.
    """
    from p2pem.deploy.broker import free_port

    if broker is None:
        _, _, broker = deploy_settings(scenario)
    address = broker if broker is not None else (listen, free_port(listen))
    if broker is not None and (tls or sites > 1):
        raise ConfigError("--tls and --sites start the kit's own broker(s): leave out --broker")
    kit = prepare_kit(scenario, out, broker=address, protocol=protocol, run_id=run_id, seeded=seeded, timeouts=timeouts, tls=tls, sites=sites,
                      task=task, force=force)
    return kit, run_kit(kit, start_broker=broker is None, progress=progress, on_broker=on_broker)


def run_kit(
    kit: Kit,
    *,
    start_broker: bool,
    progress: Callable[[DeployProgress], None] | None = None,
    on_broker: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Run a prepared kit (starting its broker, and a second site's, if asked) and write ``result.json``."""
    handles = []
    try:
        if start_broker:
            handle = start_kit_broker(kit, other_port_if_taken=kit.bridge_port is None)
            handles.append(handle)
            if handle.port != kit.broker_port:  # taken since the kit was prepared
                kit = kit.set_broker(kit.broker_host, handle.port)
            if kit.bridge_port is not None:
                handles.append(start_bridge_broker(kit))
            if on_broker is not None:
                on_broker(handle)
        doc = run_deployment(kit, progress=progress)
        write_result(kit, doc)
        return doc
    finally:
        for handle in reversed(handles):
            handle.stop()

