"""Supervision of the node processes of one kit: the one job of this module.

:class:`Deployment` starts ``p2pem node`` once per node (each in its own session, stdout
for progress, stderr to its ``node.log``), follows their progress lines, waits with a
watchdog, and terminates whatever still runs (SIGTERM, then SIGKILL) on any exception,
Ctrl-C included.  What the processes produced is read by :mod:`p2pem.deploy.results`.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from p2pem.deploy.kit import Kit
from p2pem.errors import TransportError

__all__ = ["DeployProgress", "Deployment", "DeploymentFailed"]


class DeploymentFailed(TransportError):
    """At least one node process failed; the message quotes the node that saw the cause."""


@dataclass
class DeployProgress:
    """What the launcher knows while the nodes run."""

    n_nodes: int
    max_iter: int = 0
    online: int = 0
    min_iter: int = 0
    exited: int = 0
    failed: int = 0


@dataclass
class _NodeState:
    online: bool = False
    n_iter: int = 0
    max_iter: int = 0
    lines: list[str] = field(default_factory=list)


class Deployment:
    """The node processes of one kit.

    Parameters
    ----------
    kit : Kit
    wrap : callable(node_id) -> list of str, optional
        Command prefix per node, e.g. ``["ip", "netns", "exec", "ns3"]``.
    python : str
        Interpreter that runs ``-m p2pem node``.
    verbose : int
        ``-v`` flags passed to the nodes (their logs go to ``node.log``).
    nodes : sequence of int, optional
        Start only these parties (default all, the server -1 included; tests run the others
        themselves).
    """

    def __init__(
        self,
        kit: Kit,
        *,
        wrap: Callable[[int], Sequence[str]] | None = None,
        python: str = sys.executable,
        verbose: int = 1,
        nodes: Sequence[int] | None = None,
    ) -> None:
        self.kit = kit
        self.nodes = kit.parties if nodes is None else list(nodes)
        self.wrap = wrap
        self.python = python
        self.verbose = verbose
        self.processes: list[subprocess.Popen[bytes]] = []
        self.states = {i: _NodeState() for i in kit.parties}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.last_event = time.monotonic()
        self.started_at = 0.0
        self.started_unix = 0.0
        self.exit_times: dict[int, float] = {}
        #: Fresh per launch and bound into every envelope, so a second launch of the same kit
        #: never accepts the first one's (e.g. retained) messages.
        self.launch = secrets.token_bytes(16)

    def command(self, i: int) -> list[str]:
        cmd = [self.python, "-m", "p2pem"]
        if self.verbose:
            cmd.append("-" + "v" * self.verbose)
        cmd += ["node", "--config", str(self.kit.config_path(i)), "--progress", "--exit-with-parent", "--launch", self.launch.hex()]
        return [*(self.wrap(i) if self.wrap is not None else ()), *cmd]

    def start(self) -> None:
        """Start every node process (each in its own session, so Ctrl-C reaches only the launcher)."""
        self.started_at = time.monotonic()
        self.started_unix = time.time()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for i in self.nodes:
            self.kit.result_path(i).unlink(missing_ok=True)
            with open(self.kit.log_path(i), "ab") as logfile:
                try:
                    proc = subprocess.Popen(
                        self.command(i),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=logfile,
                        start_new_session=True,
                        env=env,
                    )
                except OSError as exc:
                    self.terminate()
                    raise TransportError(f"cannot start node {i}: {exc}") from None
            self.processes.append(proc)
            thread = threading.Thread(target=self._read, args=(i, proc), name=f"p2pem-node{i}-stdout", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _read(self, i: int, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            words = line.split()
            with self._lock:
                state = self.states[i]
                if words[:1] == ["online"]:
                    state.online = True
                elif words[:1] == ["progress"] and len(words) == 3:
                    state.n_iter, state.max_iter = int(words[1]), int(words[2])
                else:
                    state.lines.append(line)
                self.last_event = time.monotonic()
        proc.stdout.close()

    def progress(self) -> DeployProgress:
        with self._lock:
            states = [s for i, s in self.states.items() if i >= 0]  # the server counts no EM iterations
            codes = [p.poll() for p in self.processes]
        return DeployProgress(
            n_nodes=self.kit.n_nodes,
            max_iter=max((s.max_iter for s in states), default=0),
            online=sum(s.online for s in states),
            min_iter=min((s.n_iter for s in states), default=0),
            exited=sum(c is not None for c in codes),
            failed=sum(c not in (None, 0) for c in codes),
        )

    def slowest(self) -> str:
        """The running nodes that reported the fewest EM iterations, and how many (for the watchdog)."""
        with self._lock:
            running = [i for i, p in zip(self.nodes, self.processes, strict=True) if p.poll() is None and i >= 0]
            if not running:
                return "none (every process exited)"
            least = min(self.states[i].n_iter for i in running)
            slow = [i for i in running if self.states[i].n_iter == least]
            offline = [i for i in slow if not self.states[i].online]
        what = "never came online" if offline and len(offline) == len(slow) else f"at EM iteration {least}"
        return ("node " if len(slow) == 1 else "nodes ") + ", ".join(map(str, slow[:10])) + f" ({what})"

    def running(self) -> bool:
        return any(p.poll() is None for p in self.processes)

    def wait(self, *, progress: Callable[[DeployProgress], None] | None = None, watchdog: float = 600.0) -> list[int]:
        """Wait until every process exited; return the exit codes.

        Raises
        ------
        DeploymentFailed
            No node reported anything for ``watchdog`` seconds (the nodes' own timeouts should
            have fired long before; the processes are terminated).
        """
        while True:
            for i, p in zip(self.nodes, self.processes, strict=True):
                if i not in self.exit_times and p.poll() is not None:
                    self.exit_times[i] = time.monotonic() - self.started_at
            if progress is not None:
                progress(self.progress())
            if len(self.exit_times) == len(self.processes):
                break
            if time.monotonic() - self.last_event > watchdog:
                slow = self.slowest()
                self.terminate()
                raise DeploymentFailed(
                    f"no node reported progress for {watchdog:g} s (longer than the nodes' own limits allow); the slowest: {slow}; "
                    f"terminated all node processes"
                )
            time.sleep(0.05)
        for thread in self._threads:
            thread.join(timeout=2)
        return [int(p.returncode) for p in self.processes]

    def terminate(self, grace: float = 5.0) -> None:
        """SIGTERM every running node, then SIGKILL whatever still runs after ``grace`` seconds."""
        alive = [p for p in self.processes if p.poll() is None]
        for p in alive:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for p in alive:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

