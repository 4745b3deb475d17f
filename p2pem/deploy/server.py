"""The server process of ``federated`` and ``dp-central``: the aggregator beside the nodes.

``p2pem node --config server/node.toml`` with ``node_id = -1`` runs it.  It is a
:class:`~p2pem.deploy.peer.Peer` like every node (the same loop, admission, hellos, signed
aborts), whose peers are all the nodes; its work is the protocol's server state machine
(:class:`p2pem.node.Server`): it checks every upload (kind, round, receivers, a finite vector of
the length of that EM iteration's contribution, one per node and iteration), answers each
aggregation with the average (``dp-central``: plus its noise, drawn from the operating system's
entropy unless the config fixes a seed) and stays until every node said bye.  It takes no part
in the final agreement: the nodes compare their results among themselves.

What the server sees is what the protocol gives it: every node's statistics in the clear
(``federated``), or every node's exact statistics before its noise (``dp-central``); the
broker sees the uploads too (TLS hides them from the network, not from the broker).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from p2pem.deploy.bootstrap import load_server, public_parameters_digest
from p2pem.deploy.clock import Clock
from p2pem.deploy.config import NodeConfig
from p2pem.deploy.peer import Peer
from p2pem.deploy.report import failure_fields, round_, rusage, write_report
from p2pem.deploy.transports.base import Link
from p2pem.deploy.watchdog import RUNNING, STARTING
from p2pem.errors import ProtocolError
from p2pem.messages import SERVER, Message
from p2pem.protocols.base import ProtocolViolation, check_vector

log = logging.getLogger(__name__)

__all__ = ["ServerRuntime"]


class ServerRuntime(Peer):
    """The server process (module docstring); parameters as :class:`~p2pem.deploy.runtime.NodeRuntime`."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        progress: Callable[[str, int, int], None] | None = None,
        parent_pid: int | None = None,
        link: Link | None = None,
        launch: bytes = b"",
        clock: Clock | None = None,
    ) -> None:
        setup = load_server(config, link=link, launch=launch)
        roster, settings = setup.roster, setup.settings
        family, d, k = settings.family, int(roster.n_features or 0), settings.n_components
        self.sizes = (family.init_stats_size(d), family.stats_size(k, d) + 1)
        super().__init__(
            node_id=SERVER,
            roster=roster,
            codec=setup.codec,
            identity=setup.identity,
            link=setup.link,
            peers=tuple(range(roster.n_nodes)),
            timeouts=config.timeouts,
            spec=setup.spec,
            max_entries=max(self.sizes),
            params_digest=public_parameters_digest(setup.spec, roster.topology()),
            launch=launch,
            clock=clock,
            progress=progress,
            parent_pid=parent_pid,
        )
        self.config = config
        self.username = config.broker.username
        self.server = setup.server
        self._iteration = 0 if settings.init is None else 1
        self._uploads: dict[int, set[int]] = {}
        self.aggregations = 0

    @property
    def iteration(self) -> int:
        return self._iteration

    def where(self) -> str:
        return f"EM iteration {self._iteration} (server)"

    def awaiting(self) -> list[int]:
        """The nodes whose upload of the open aggregation has not arrived."""
        got = self._uploads.get(self._iteration)
        return [] if got is None else [j for j in range(self.n_nodes) if j not in got]

    def status_fields(self) -> tuple[int, ...]:
        return (RUNNING if self.started else STARTING, self._iteration, 1, *self.awaiting())

    async def work(self) -> None:
        """Aggregate until every node has said bye (they have agreed among themselves)."""
        while not set(range(self.n_nodes)) <= self._byes:
            await self._step()

    async def on_start(self) -> None:
        if self.progress is not None:
            self.progress("online", 0, 0)

    async def on_timers(self, now: float) -> None:
        self.watchdog.check(self.awaiting(), now, self.where(), self.aggregations > 0)

    async def deliver(self, msg: Message) -> None:
        """Check an upload, fold it in, send the average when every node's is in."""
        j, it = msg.sender, msg.iteration
        t0 = time.thread_time()
        try:
            if msg.kind != "upload" or msg.round != 1 or tuple(msg.receivers) != (SERVER,) or msg.encrypted or msg.meta != ():
                raise ProtocolViolation(j, it, msg.round, "header", f"{msg.kind} message to the server: round {msg.round}, receivers {msg.receivers}, meta {msg.meta}")
            check_vector(msg, self.sizes[0 if it == 0 else 1])
            got = self._uploads.setdefault(it, set())
            if j in got:
                raise ProtocolViolation(j, it, msg.round, "header", "a second upload for this EM iteration")
            got.add(j)
        except ProtocolViolation as exc:
            raise self.violated(exc) from None
        self.costs["validate_s"] += time.thread_time() - t0
        self._iteration = max(self._iteration, it)
        try:
            out = self.server.receive(msg)
        except ProtocolError as exc:
            raise self.violated(ProtocolViolation(j, it, msg.round, "state", str(exc))) from None
        self.watchdog.moved_on_by(j, self.clock())
        if out:
            self.aggregations += 1
            self._uploads.pop(it, None)
            self._uploads = {k: v for k, v in self._uploads.items() if k >= it}
            await self.send(out)

    def report(self) -> dict[str, Any]:
        error = self.error
        return {
            "node_id": SERVER,
            "run_id": self.run_id,
            "launch": self.launch.hex(),
            "role": "server",
            "status": self.status,
            "error": None if error is None else str(error),
            "exit_code": 0 if error is None else int(error.exit_code),
            **failure_fields(error),
            "iteration": self._iteration,
            "aggregations": self.aggregations,
            "messages": self.server.sent_messages,
            "bytes": self.server.sent_bytes,
            "wire": {**{k: self.counters[k] for k in ("published", "wire_bytes", "control_sent", "received", "duplicates")}, "rejected": dict(self.rejected)},
            "timings": {k: round_(v) for k, v in self.timings.items()},
            "costs": {k: round_(v) for k, v in self.costs.items()},
            "cpu_s": round_(time.process_time()),
            "rusage": rusage(),
        }

    def write_result(self):
        return write_report(self.config.result, self.report())
