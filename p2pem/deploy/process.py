"""The node process: run a :class:`~p2pem.deploy.runtime.NodeRuntime` to the end and always report.

:func:`run_node` is what ``p2pem node`` calls: a fresh event loop, SIGTERM and SIGHUP turned
into a clean stop (exit code 128 + signal), and a result file written whatever happens, a
bug included (exit code 70, one line, no traceback).  :func:`run_reported` is the same
without signal handling, for running many nodes in one event loop (tests over
:mod:`p2pem.deploy.transports.memory`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from p2pem.deploy.failures import NodeFailure, Reason
from p2pem.deploy.peer import Peer
from p2pem.errors import ConfigError, P2pemError

log = logging.getLogger(__name__)

__all__ = ["run_node", "run_reported"]


async def run_reported(runtime: Peer) -> int:
    """Run ``runtime`` to the end and write its result file; return the exit code, never raise."""
    try:
        await runtime.run()
    except P2pemError as exc:
        runtime.fail(exc)
    except asyncio.CancelledError:
        runtime.fail(NodeFailure(Reason.INTERRUPTED, runtime.node_id, f"cancelled in {runtime.where()}"))
    try:
        runtime.write_result()
    except ConfigError as exc:
        log.error("%s", exc)
        return int(ConfigError.exit_code)
    return 0 if runtime.error is None else int(runtime.error.exit_code)


def run_node(runtime: Peer) -> dict[str, Any]:
    """Run ``runtime`` in a fresh event loop with SIGTERM/SIGHUP handling; always write the result file.

    Returns the report on success; re-raises the node's error (a P2pemError, or an
    interruption after a signal) after writing the failed report.
    """

    async def main() -> dict[str, Any]:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        caught: list[int] = []

        def on_signal(sig: int) -> None:
            caught.append(sig)
            task.cancel()

        loop.set_exception_handler(_loop_error)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread / platform
                pass
        try:
            return await runtime.run()
        except asyncio.CancelledError:
            if caught:
                name = signal.Signals(caught[0]).name
                raise NodeFailure(Reason.INTERRUPTED, runtime.node_id, f"stopped by {name} in {runtime.where()}", exit_code=128 + caught[0]) from None
            raise

    try:
        report = asyncio.run(main())
    except P2pemError as exc:
        _finishing()
        runtime.fail(exc)
        runtime.write_result()
        raise
    except KeyboardInterrupt:
        _finishing()
        runtime.fail(NodeFailure(Reason.INTERRUPTED, runtime.node_id, f"interrupted in {runtime.where()}"))
        runtime.write_result()
        raise
    except Exception as exc:  # noqa: BLE001 - a bug outside run(): still one line and a result file
        _finishing()
        log.debug("node %d: internal error", runtime.node_id, exc_info=exc)
        error = NodeFailure(Reason.INTERNAL, runtime.node_id, f"internal error: {type(exc).__name__}: {exc}")
        runtime.fail(error)
        runtime.write_result()
        raise error from None
    _finishing()
    runtime.write_result()
    return report


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Errors in callbacks nobody awaits (e.g. the MQTT client's socket callbacks racing a
    broker that just died): one log line, not a traceback; the runtime sees the lost link."""
    exc = context.get("exception")
    log.warning("event loop: %s%s", context.get("message", "error"), f" ({type(exc).__name__}: {exc})" if exc else "")


def _finishing() -> None:
    """The event loop is gone (and with it the signal handlers): a late SIGTERM (say, the
    kernel's parent-death signal right after the node stopped by itself) must not kill the
    process before its result file is written."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass
