"""Run a local Mosquitto broker for a p2pem deployment (and for the MQTT tests).

Writes the configuration, password and ACL files, starts ``mosquitto -c CONFIG`` as a
subprocess and waits until it accepts connections.  The deployment launcher and the
test fixture use the same functions.

Topic layout and permissions (see :func:`acl_rules`): node ``i`` logs in as
``node<i>`` and may publish only under ``p2pem/<run>/from/<i>/#`` and read everything
under ``p2pem/<run>/#``; an observer may read, an admin may read and write the run's
tree.  The ACL only stops a compromised node from *publishing under another node's
name on the broker*; authenticity of content comes from the per-receiver envelope MACs of
:mod:`p2pem.deploy.codec`, and confidentiality of payloads from per-edge encryption.

Mosquitto behaviours the callers must know are listed in the Notes of
:func:`write_mosquitto_config` and :func:`acl_rules`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import sys
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from p2pem.errors import ConfigError, TransportError
from p2pem.files import atomic_write

logger = logging.getLogger(__name__)

__all__ = [
    "Bridge",
    "BrokerHandle",
    "acl_rules",
    "find_mosquitto",
    "PortInUse",
    "free_port",
    "hash_password",
    "start_broker",
    "username_for",
    "wait_for_port",
    "write_acl",
    "write_mosquitto_config",
    "write_password_file",
]

_SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/opt/homebrew/sbin", "/usr/local/opt/mosquitto/sbin")
_LOG_NAME = "mosquitto.log"
_STDERR_NAME = "mosquitto.stderr"


def find_mosquitto(program: str = "mosquitto") -> Path | None:
    """Locate ``mosquitto`` (or ``mosquitto_passwd``) on ``PATH`` or in the usual sbin directories.

    Returns
    -------
    pathlib.Path or None
        The executable, or None when it is not installed.
    """
    found = shutil.which(program)
    if found is not None:
        return Path(found)
    for directory in _SBIN_DIRS:
        candidate = Path(directory) / program
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


class PortInUse(TransportError):
    """The broker could not listen: another process holds its port (a free port can be retried)."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free right now (the OS picks it).

    Notes
    -----
    Another process may take the port before the broker binds it;
    :func:`start_broker` retries with a new port when that happens.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def username_for(node_id: int) -> str:
    """Broker user name of node ``node_id``: ``node<i>`` (``node-1`` for the federated server)."""
    return f"node{int(node_id)}"


@dataclass(frozen=True)
class Bridge:
    """A Mosquitto bridge from this broker to another: the ordinary way to span two sites.

    Every message under ``p2pem/<run_id>/`` published at either broker is forwarded to the
    other (``topic ... both``), at QoS 1.  The remote broker must know ``username`` with
    read and write access to the run's topics (:func:`acl_rules` with ``bridge=``).  Mosquitto
    forwards retained messages too and does not echo a message back to where it came from.
    """

    name: str
    host: str
    port: int
    run_id: str
    username: str
    password: str
    cafile: Path | None = None  # the remote listener's CA when it speaks TLS

    def lines(self) -> list[str]:
        out = [
            f"connection {self.name}",
            f"address {self.host}:{int(self.port)}",
            f"topic p2pem/{self.run_id}/# both 1",
            "cleansession true",
            "try_private true",
            "bridge_protocol_version mqttv311",
            "notifications false",
            "restart_timeout 1 5",
            f"remote_username {self.username}",
            f"remote_password {self.password}",
            f"remote_clientid {self.name}",
        ]
        if self.cafile is not None:
            out.append(f"bridge_cafile {_config_path(self.cafile)}")
        return out


def write_mosquitto_config(
    directory: str | os.PathLike[str],
    port: int,
    password_file: str | os.PathLike[str] | None = None,
    acl_file: str | os.PathLike[str] | None = None,
    *,
    host: str = "127.0.0.1",
    max_queued_messages: int = 0,
    tls: tuple[Path, Path, Path] | None = None,
    bridge: Bridge | None = None,
    max_packet_size: int = 0,
) -> Path:
    """Write ``mosquitto.conf`` for one listener into ``directory``.

    Parameters
    ----------
    directory : path-like
        Where the config (and later the broker's log) goes.
    port : int
        TCP port of the listener.
    password_file : path-like, optional
        Hashed password file (see :func:`write_password_file`).  Without it the
        broker accepts anonymous clients.
    acl_file : path-like, optional
        ACL file (see :func:`write_acl`).
    host : str, default "127.0.0.1"
        Address the listener binds.
    max_queued_messages : int, default 0
        Per-client queue bound of QoS 1 messages beyond those in flight; 0 means
        unbounded.  Mosquitto's own default (1000) silently drops messages for a slow
        subscriber, which a consensus run must never suffer.
    tls : (ca, cert, key), optional
        Serve TLS on the listener with this certificate and key (the CA is what clients
        verify against; :func:`p2pem.deploy.crypto.write_tls_files` makes all three).
    bridge : Bridge, optional
        Also forward the run's topics to and from another broker.
    max_packet_size : int, default 0
        Largest MQTT packet accepted, in bytes (0: Mosquitto's default); a client that sends
        a larger one is disconnected.

    Returns
    -------
    pathlib.Path
        Path of the config file.

    Raises
    ------
    ConfigError
        If a path contains whitespace (Mosquitto's config parser splits on it) or the
        port is out of range.

    Notes
    -----
    * Mosquitto 2 refuses anonymous clients on an explicit listener unless
      ``allow_anonymous true``; this writes ``true`` only when no password file is used.
    * Started as root, Mosquitto drops to user ``mosquitto``, which cannot read files
      in a private temporary directory; the config therefore names the current user.
    * ``set_tcp_nodelay true`` switches Nagle's algorithm off on the broker's sockets:
      consensus is a chain of small request-response hops, and with Nagle each hop can
      wait for a delayed ACK (40 ms on Linux) instead of a fraction of a millisecond.
    * Persistence is off: a broker restart forgets sessions, subscriptions and queued
      messages, so clients must re-subscribe (see ``MqttLink.reconnect``).
    * ``max_topic_alias 0``: no MQTT v5 topic aliases.  A member's packet that fits under
      ``max_packet_size`` thanks to an alias grows by its full topic when the broker forwards
      it over a bridge (which speaks MQTT 3.1.1); past the other broker's limit the bridge
      drops the connection and reconnects, for every copy of a retained packet, and the two
      sites are cut apart.  Without aliases a packet is the same size on both sides.
    """
    directory = Path(directory).resolve()
    if not 0 < int(port) < 65536:
        raise ConfigError(f"port {port} is out of range 1-65535")
    lines = [
        "# written by p2pem.deploy.broker",
        f"listener {int(port)} {host}",
        "persistence false",
        f"allow_anonymous {'false' if password_file is not None else 'true'}",
        f"max_queued_messages {int(max_queued_messages)}",
        "max_topic_alias 0",
        "set_tcp_nodelay true",
        f"log_dest file {_config_path(directory / _LOG_NAME)}",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        "connection_messages true",
        f"user {pwd.getpwuid(os.geteuid()).pw_name}",
    ]
    if max_packet_size:
        lines.append(f"max_packet_size {int(max_packet_size)}")
    if tls is not None:
        ca, cert, key = tls
        lines += [f"cafile {_config_path(ca)}", f"certfile {_config_path(cert)}", f"keyfile {_config_path(key)}", "tls_version tlsv1.2"]
    if password_file is not None:
        lines.append(f"password_file {_config_path(password_file)}")
    if acl_file is not None:
        lines.append(f"acl_file {_config_path(acl_file)}")
    if bridge is not None:
        lines += bridge.lines()
    return atomic_write(directory / "mosquitto.conf", "\n".join(lines) + "\n", mode=0o600)


#: Mosquitto 2's password hash: ``$7$`` is PBKDF2-SHA512, with its default 101 iterations, a
#: 12-byte salt and a 64-byte hash, both in standard base64 with padding.
PBKDF2_ITERATIONS = 101
_SALT_BYTES = 12


def hash_password(password: str, *, iterations: int = PBKDF2_ITERATIONS, salt: bytes | None = None) -> str:
    """One password in Mosquitto's password-file form: ``$7$<iterations>$<salt>$<hash>``.

    The form ``mosquitto_passwd`` writes (Mosquitto 2): PBKDF2-HMAC-SHA512 of the UTF-8
    password with a random salt, salt and hash in base64.  A fresh salt from the OS's entropy
    unless ``salt`` is given.
    """
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations)
    return f"$7${iterations}${base64.b64encode(salt).decode('ascii')}${base64.b64encode(digest).decode('ascii')}"


def write_password_file(path: str | os.PathLike[str], users: Mapping[str, str]) -> Path:
    """Write a Mosquitto password file (``user:`` + :func:`hash_password` per line) with mode 0600.

    The hashes are computed here, so no plain password is ever written to disk or put on a
    command line, and no ``mosquitto_passwd`` is needed.

    Parameters
    ----------
    path : path-like
        File to (over)write.
    users : mapping of str to str
        User name to password.

    Raises
    ------
    ConfigError
        If a user name contains ``:`` or whitespace, or a password contains a line break.
    """
    path = Path(path)
    for user, password in users.items():
        if not user or ":" in user or any(c.isspace() for c in user):
            raise ConfigError(f"invalid broker user name {user!r}: no ':' or blanks allowed")
        if "\n" in password or "\r" in password:
            raise ConfigError(f"password of broker user {user!r} contains a line break")
    return atomic_write(path, "".join(f"{user}:{hash_password(password)}\n" for user, password in users.items()), mode=0o600)


def acl_rules(
    run_id: str,
    node_ids: Iterable[int],
    *,
    admin: str | None = "admin",
    observer: str | None = "observer",
    bridge: str | None = None,
    peers: Mapping[int, Iterable[int]] | None = None,
) -> str:
    """Mosquitto ACL text for one run.

    Parameters
    ----------
    run_id : str
        Run id (validated as in :func:`p2pem.deploy.codec.validate_run_id`).
    node_ids : iterable of int
        Nodes of the run; node ``i`` is user :func:`username_for` ``(i)``.
    admin : str or None, default "admin"
        User that may read and write ``p2pem/<run>/#`` (launcher, control messages).
    observer : str or None, default "observer"
        User that may only read ``p2pem/<run>/#`` (trace recorder, eavesdropper
        experiments).
    bridge : str, optional
        User a bridge from another site's broker logs in as: it reads and writes the run's
        topics (it carries every node's messages of the other site).
    peers : mapping of int to iterable of int, optional
        Whom each node exchanges messages with.  Given, every node's grants are exact topics
        (no wildcard): it may write its broadcast topic and its topic to each peer, and read
        each peer's broadcast topic and that peer's topic to it; nothing else of the run.

    Returns
    -------
    str
        The ACL file contents.

    Notes
    -----
    Mosquitto enforces a denied *publish* silently: the publisher still gets its
    PUBACK (MQTT 3.1.1) and nobody receives the message; the broker only logs it.
    A subscription to a filter wider than the read grant (e.g. ``#``) is accepted and
    filtered per message.  Anything not granted is denied.
    """
    from p2pem.deploy.codec import validate_run_id  # late import: codec pulls in crypto

    validate_run_id(run_id)
    root = f"p2pem/{run_id}"
    blocks = []
    for node_id in sorted({int(i) for i in node_ids}):
        if peers is None:
            blocks.append(
                f"user {username_for(node_id)}\n"
                f"topic write {root}/from/{node_id}/#\n"
                f"topic read {root}/#\n"
            )
            continue
        mine = sorted({int(j) for j in peers[node_id]})
        lines = [f"user {username_for(node_id)}", f"topic write {root}/from/{node_id}/all"]
        lines += [f"topic write {root}/from/{node_id}/to/{j}" for j in mine]
        for j in mine:
            lines += [f"topic read {root}/from/{j}/all", f"topic read {root}/from/{j}/to/{node_id}"]
        blocks.append("\n".join(lines) + "\n")
    if admin is not None:
        blocks.append(f"user {admin}\ntopic readwrite {root}/#\n")
    if observer is not None:
        blocks.append(f"user {observer}\ntopic read {root}/#\n")
    if bridge is not None:
        blocks.append(f"user {bridge}\ntopic readwrite {root}/#\n")
    return "# written by p2pem.deploy.broker\n\n" + "\n".join(blocks)


def write_acl(
    path: str | os.PathLike[str],
    run_id: str,
    node_ids: Iterable[int],
    *,
    admin: str | None = "admin",
    observer: str | None = "observer",
    bridge: str | None = None,
) -> Path:
    """Write :func:`acl_rules` to ``path`` (mode 0600) and return the path."""
    path = Path(path)
    return atomic_write(path, acl_rules(run_id, node_ids, admin=admin, observer=observer, bridge=bridge), mode=0o600)


def die_with_parent() -> None:
    """Ask Linux to send this process SIGTERM when its parent dies, even by SIGKILL.

    ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` through ctypes; a no-op elsewhere.  Used as the
    ``preexec_fn`` of the broker a launcher starts, and by node processes started with
    ``--exit-with-parent``, so that killing ``p2pem deploy`` leaves nothing behind.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_for_port(host: str, port: int, timeout: float, *, process: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until ``host:port`` accepts TCP connections.

    Raises
    ------
    TransportError
        If ``process`` exits first or ``timeout`` seconds pass.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise TransportError(f"broker process exited with code {process.returncode} before {host}:{port} opened")
        try:
            with socket.create_connection((host, port), timeout=0.25):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise TransportError(f"broker at {host}:{port} did not accept connections within {timeout:g} s") from None
            time.sleep(0.02)


class BrokerHandle:
    """A running Mosquitto subprocess; stop it with :meth:`stop` or a ``with`` block.

    Attributes
    ----------
    host, port : str, int
        Where clients connect.
    config_path : pathlib.Path
        The config it runs with.
    process : subprocess.Popen or None
        The current process (replaced by :meth:`restart`).
    """

    def __init__(self, executable: Path, config_path: Path, host: str, port: int) -> None:
        self.executable = executable
        self.config_path = config_path
        self.host = host
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"BrokerHandle({self.host}:{self.port}, {state})"

    def __enter__(self) -> BrokerHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self.process is not None and self.process.poll() is None

    @property
    def log_path(self) -> Path:
        """The broker's log file (connections, denied publishes, errors)."""
        return self.config_path.parent / _LOG_NAME

    def log_text(self) -> str:
        """Broker log plus anything it wrote to stderr (empty when neither exists)."""
        parts = []
        for path in (self.config_path.parent / _STDERR_NAME, self.log_path):
            if path.exists():
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
        return "".join(parts)

    def start(self, timeout: float = 5.0) -> None:
        """Start the process (no-op when running) and wait until the port accepts connections.

        Raises
        ------
        TransportError
            If the broker exits or does not open its port in time; the message
            quotes the last line of its log.
        """
        if self.running:
            return
        # The log is shared by restarts: only what this process writes counts.
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.config_path.parent / _STDERR_NAME, "ab") as stderr:
            self.process = subprocess.Popen(
                [str(self.executable), "-c", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                preexec_fn=die_with_parent,
            )
        try:
            # Waiting for the port alone is not enough: another process may own it and
            # answer while this broker dies with "Address already in use".
            deadline = time.monotonic() + timeout
            while not self._logged_since(offset, " running"):
                if self.process.poll() is not None:
                    raise TransportError(
                        f"broker on {self.address} exited with code {self.process.returncode} while starting"
                    )
                if time.monotonic() >= deadline:
                    raise TransportError(f"broker on {self.address} did not start within {timeout:g} s")
                time.sleep(0.01)
            wait_for_port(self.host, self.port, max(deadline - time.monotonic(), 0.5), process=self.process)
        except TransportError as exc:
            self.stop()
            lines = [line for line in self.log_text().splitlines() if line.strip()]
            detail = f"; broker says: {lines[-1].strip()}" if lines else ""
            in_use = any("address already in use" in line.lower() for line in lines)
            raise (PortInUse if in_use else TransportError)(f"{exc}{detail}") from None
        logger.debug("mosquitto pid %d listening on %s", self.process.pid, self.address)

    def _logged_since(self, offset: int, text: str) -> bool:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                return text.encode() in log.read()
        except FileNotFoundError:
            return False

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the process (SIGTERM, then SIGKILL after ``timeout``); idempotent."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        logger.debug("mosquitto on %s stopped with code %s", self.address, process.returncode)

    def restart(self, timeout: float = 5.0) -> None:
        """Stop and start again on the same port; all sessions and subscriptions are lost."""
        self.stop(timeout)
        self.start(timeout)


def start_broker(
    directory: str | os.PathLike[str],
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    password_file: str | os.PathLike[str] | None = None,
    acl_file: str | os.PathLike[str] | None = None,
    executable: str | os.PathLike[str] | None = None,
    timeout: float = 5.0,
    other_port_if_taken: bool = False,
    tls: tuple[Path, Path, Path] | None = None,
    bridge: Bridge | None = None,
    max_packet_size: int = 0,
) -> BrokerHandle:
    """Write a config into ``directory``, start Mosquitto and wait until it listens.

    Parameters
    ----------
    directory : path-like
        Working directory for config and log (must exist).
    port : int, optional
        Listener port; a free one is chosen (and re-chosen if taken meanwhile) when
        omitted.
    other_port_if_taken : bool, default False
        When ``port`` is taken, listen on a free port instead (the handle's ``port`` says
        which); without it a taken ``port`` raises :class:`PortInUse`.
    host : str, default "127.0.0.1"
        Listener address.
    password_file, acl_file : path-like, optional
        See :func:`write_password_file` and :func:`write_acl`.
    executable : path-like, optional
        The ``mosquitto`` binary; :func:`find_mosquitto` by default.
    timeout : float, default 5.0
        Seconds to wait for the port to open.

    Returns
    -------
    BrokerHandle
        The running broker; call :meth:`BrokerHandle.stop` when done.

    Raises
    ------
    ConfigError
        If Mosquitto is not installed.
    TransportError
        If it does not start.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:                     # doctest: +SKIP
    ...     with start_broker(d) as broker:
    ...         print(broker.address)
    127.0.0.1:...
    """
    exe = Path(executable) if executable is not None else find_mosquitto()
    if exe is None:
        raise ConfigError("mosquitto not found; install it (e.g. apt-get install mosquitto)")
    directory = Path(directory)
    attempts = 1 if port is not None and not other_port_if_taken else 3
    for attempt in range(attempts):
        chosen = port if port is not None and attempt == 0 else free_port(host)
        config = write_mosquitto_config(directory, chosen, password_file, acl_file, host=host, tls=tls, bridge=bridge, max_packet_size=max_packet_size)
        handle = BrokerHandle(exe, config, host, chosen)
        try:
            handle.start(timeout)
        except TransportError as exc:
            if attempt + 1 < attempts and isinstance(exc, PortInUse):
                continue
            raise
        return handle
    raise AssertionError("unreachable")  # pragma: no cover


def _config_path(path: str | os.PathLike[str]) -> str:
    text = str(Path(path).resolve())
    if any(c.isspace() for c in text):
        raise ConfigError(f"path {text!r} contains whitespace, which mosquitto.conf cannot express")
    return text
