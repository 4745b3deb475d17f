"""The node config: one node's own settings, and the files it reads and writes.

``node.toml`` (one per node, partly secret) holds the node id, its key file, its own data
file, where to write its result, the broker (address, user, password file, TLS), the
timeouts.  A ``[reproducibility]`` table may fix the seed of the protocol
noise; that exists for tests and for comparing with ``p2pem simulate`` and must be left out
of a real deployment (the noise is then drawn from the operating system's entropy, as
privacy requires).  The public document every node shares is the roster
(:mod:`p2pem.deploy.roster`).

Relative paths are resolved against the folder of the file.  Every error is a one-line
:class:`~p2pem.errors.ConfigError` naming the file and the dotted key.  Also here: the
node's data file (CSV, read and written bit for bit) and the TOML writer of the deployment's
documents.
"""

from __future__ import annotations

import math
import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError
from p2pem.files import atomic_write
from p2pem.tomltable import Table, is_number, read_toml

__all__ = [
    "ON_DROPOUT",
    "BrokerConfig",
    "NodeConfig",
    "Timeouts",
    "load_node_data",
    "toml_dumps",
    "write_node_data",
]


#: What a node may do when a neighbour falls silent (``on_dropout``).
ON_DROPOUT = ("stop", "continue")


# ------------------------------------------------------------------------------- timeouts


@dataclass(frozen=True)
class Timeouts:
    """How long a node waits before it gives up; all in seconds.

    Parameters
    ----------
    timeout : float, default 20
        A neighbour from which nothing arrives for this long while the node waits for its
        message is declared dead: the node stops, tells its neighbours (who stop too) and
        exits non-zero, naming the neighbour, the EM iteration and the protocol round.
    startup_timeout : float, default 60
        Every neighbour must have come online (subscribed and said hello) within this long
        after the node connected.
    heartbeat : float, optional
        A node that has published nothing for this long sends a small authenticated "hello" so
        that its neighbours know it is alive; default ``min(1, timeout / 4)``.
    reconnect_timeout : float, optional
        After losing the broker the node retries for this long; default ``timeout``.

    Notes
    -----
    A node that keeps hearing from the neighbour it waits for, but makes no progress, gives
    up after ``3 * timeout`` (the neighbour is itself stuck; normally the neighbour that
    detected the real failure stops the run earlier).  Before the first aggregation has
    finished, the limit is ``3 * timeout + startup_timeout``: the network may be waiting
    for a node several hops away that starts late.
    """

    timeout: float = 20.0
    startup_timeout: float = 60.0
    heartbeat: float | None = None
    reconnect_timeout: float | None = None

    KEYS = ("timeout", "startup_timeout", "heartbeat", "reconnect_timeout")

    @property
    def heartbeat_s(self) -> float:
        """``heartbeat`` as set or derived in ``__post_init__`` (never None afterwards)."""
        assert self.heartbeat is not None
        return self.heartbeat

    @property
    def reconnect_s(self) -> float:
        """``reconnect_timeout`` as set or derived in ``__post_init__`` (never None afterwards)."""
        assert self.reconnect_timeout is not None
        return self.reconnect_timeout

    def __post_init__(self) -> None:
        for name in self.KEYS:
            value = getattr(self, name)
            if value is None and name in ("heartbeat", "reconnect_timeout"):
                continue
            if not (is_number(value) and math.isfinite(value) and value > 0):
                raise ConfigError(f"timeout {name!r} must be a positive number of seconds, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.heartbeat is None:
            object.__setattr__(self, "heartbeat", min(1.0, self.timeout / 4))
        if self.reconnect_timeout is None:
            object.__setattr__(self, "reconnect_timeout", self.timeout)
        if self.heartbeat_s >= self.timeout:
            raise ConfigError(f"heartbeat ({self.heartbeat_s:g} s) must be shorter than timeout ({self.timeout:g} s)")

    @property
    def stall(self) -> float:
        """Give up after this long without progress even though the awaited neighbours are alive."""
        return 3.0 * self.timeout

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any], where: str = "timeouts") -> Timeouts:
        """Read the timeout keys of ``table`` (other keys are ignored)."""
        values = {k: table[k] for k in cls.KEYS if k in table}
        try:
            return cls(**values)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def to_dict(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in self.KEYS}


# ------------------------------------------------------------------------------ node config


@dataclass(frozen=True)
class BrokerConfig:
    """Where and how a node connects to the MQTT broker.

    Parameters
    ----------
    host : str
    port : int, default 1883 (8883 is customary with TLS)
    username : str, optional
        ``node<i>`` when the broker uses the password file and ACL written by p2pem.
    password_file : pathlib.Path, optional
        File holding the broker password on its first line (mode 0600 recommended).
    tls : bool, default False
        Connect with TLS, verifying the broker's certificate.
    ca_file : pathlib.Path, optional
        CA bundle that signed the broker's certificate (default: the system's).
    client_cert, client_key : pathlib.Path, optional
        Client certificate and key, for brokers that require them.
    """

    host: str
    port: int = 1883
    username: str | None = None
    password_file: Path | None = None
    tls: bool = False
    ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None

    KEYS = ("host", "port", "username", "password_file", "tls", "ca_file", "client_cert", "client_key")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def password(self) -> str | None:
        """The password (first line of :attr:`password_file`), or None."""
        if self.password_file is None:
            return None
        try:
            text = self.password_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read broker password file {self.password_file}: {exc.strerror or exc}") from None
        lines = text.splitlines()
        if not lines or not lines[0]:
            raise ConfigError(f"broker password file {self.password_file} is empty")
        return lines[0]

    def tls_context(self) -> ssl.SSLContext | None:
        """An SSL context that verifies the broker (None without TLS)."""
        if not self.tls:
            return None
        try:
            context = ssl.create_default_context(cafile=None if self.ca_file is None else str(self.ca_file))
            if self.client_cert is not None:
                context.load_cert_chain(str(self.client_cert), None if self.client_key is None else str(self.client_key))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot set up TLS for broker {self.address}: {exc}") from None
        return context


@dataclass(frozen=True)
class NodeConfig:
    """One node's ``node.toml``.

    Parameters
    ----------
    node_id : int
        The node's id in the roster, or -1 for the server process of ``federated`` and
        ``dp-central`` (which has no data file).
    roster : pathlib.Path
        The run's roster file.
    key_file : pathlib.Path
        This node's private keys (``p2pem keys new``), mode 0600.
    data : pathlib.Path
        This node's rows: a CSV file with a header row, every cell a number.
    result : pathlib.Path
        Where the node writes its result (JSON) when it stops, successfully or not.
    broker : BrokerConfig
    timeouts : Timeouts
    columns : tuple of str, optional
        Read only these columns of the data file, in this order.
    seed : int, optional
        TESTING ONLY: seed of the protocol noise (with ``spawn_key``).  A real deployment
        leaves it out so that the noise comes from the operating system's entropy: anyone
        who knows the seed can undo the subspace perturbation.
    spawn_key : tuple of int
        With ``seed``: the noise generator is ``default_rng(SeedSequence(seed, spawn_key))``;
        ``p2pem deploy`` writes the scenario seed and ``(3, node_id)``, exactly the
        generator ``p2pem simulate`` gives node ``node_id``.
    on_dropout : {"stop", "continue"}, optional
        The run's setting is the roster's (:attr:`~p2pem.deploy.roster.Roster.on_dropout`);
        a node config that states one must state the same (checked at load).
    path : pathlib.Path, optional
        Where the config was read from.
    """

    node_id: int
    roster: Path
    key_file: Path
    data: Path | None
    result: Path
    broker: BrokerConfig
    timeouts: Timeouts = field(default_factory=Timeouts)
    columns: tuple[str, ...] | None = None
    seed: int | None = None
    spawn_key: tuple[int, ...] = ()
    on_dropout: str | None = None
    path: Path | None = None

    def protocol_rng(self) -> np.random.Generator:
        """The node's protocol-noise generator (OS entropy unless a seed is configured)."""
        if self.seed is None:
            return np.random.default_rng()
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=self.spawn_key))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> NodeConfig:
        """Read and validate ``node.toml``; relative paths are taken from the file's folder."""
        path = Path(path)
        doc = read_toml(path, "node config")
        where = str(path)
        base = path.parent
        top = Table(where, doc, "", ("node_id", "roster", "key_file", "data", "columns", "result", "broker", "timeouts", "reproducibility", "on_dropout"))
        node_id = top.integer("node_id", minimum=-1)  # -1: the server of federated and dp-central
        b = top.section("broker", BrokerConfig.KEYS)
        port = b.integer("port", default=1883, minimum=1)
        if port > 65535:
            b.fail(f"'broker.port' must be at most 65535, got {port}")
        broker = BrokerConfig(
            host=b.string("host"),
            port=port,
            username=b.string("username", default=None),
            password_file=b.path("password_file", base, default=None),
            tls=b.boolean("tls", default=False),
            ca_file=b.path("ca_file", base, default=None),
            client_cert=b.path("client_cert", base, default=None),
            client_key=b.path("client_key", base, default=None),
        )
        if "timeouts" in doc:
            t = top.section("timeouts", Timeouts.KEYS)
            for key in Timeouts.KEYS:
                t.number(key, default=None)
            timeouts = Timeouts.from_mapping(t.table, f"{where}: timeouts")
        else:
            timeouts = Timeouts()
        seed = None
        spawn_key: tuple[int, ...] = ()
        if "reproducibility" in doc:
            r = top.section("reproducibility", ("seed", "spawn_key"))
            seed = r.integer("seed", minimum=0)
            spawn_key = tuple(r.int_list("spawn_key", default=[]))
            if any(k < 0 for k in spawn_key):
                r.fail("'reproducibility.spawn_key' must hold non-negative integers")
        columns = top.string_list("columns", default=None)
        on_dropout = top.choice("on_dropout", ON_DROPOUT) if "on_dropout" in doc else None
        return cls(
            node_id=node_id,
            roster=top.path("roster", base),
            key_file=top.path("key_file", base),
            data=top.path("data", base) if node_id >= 0 or "data" in doc else None,
            result=top.path("result", base),
            broker=broker,
            timeouts=timeouts,
            columns=None if columns is None else tuple(columns),
            seed=seed,
            spawn_key=spawn_key,
            on_dropout=on_dropout,
            path=path,
        )

    def to_document(self, relative_to: Path | None = None) -> dict[str, Any]:
        def rel(p: Path | None) -> str | None:
            if p is None:
                return None
            if relative_to is not None:
                try:
                    return os.path.relpath(p, relative_to)
                except ValueError:
                    return str(p)
            return str(p)

        broker: dict[str, Any] = {"host": self.broker.host, "port": self.broker.port}
        if self.broker.username is not None:
            broker["username"] = self.broker.username
        if self.broker.password_file is not None:
            broker["password_file"] = rel(self.broker.password_file)
        broker["tls"] = self.broker.tls
        for key in ("ca_file", "client_cert", "client_key"):
            if getattr(self.broker, key) is not None:
                broker[key] = rel(getattr(self.broker, key))
        doc: dict[str, Any] = {
            "node_id": self.node_id,
            "roster": rel(self.roster),
            "key_file": rel(self.key_file),
            "data": rel(self.data),  # None (left out) for a server
        }
        if self.columns is not None:
            doc["columns"] = list(self.columns)
        doc["result"] = rel(self.result)
        if self.on_dropout is not None:
            doc["on_dropout"] = self.on_dropout
        doc["broker"] = broker
        doc["timeouts"] = self.timeouts.to_dict()
        if self.seed is not None:
            doc["reproducibility"] = {"seed": self.seed, "spawn_key": list(self.spawn_key)}
        return doc

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the config as TOML with paths relative to its folder."""
        path = Path(path)
        header = f"p2pem node config of node {self.node_id}: see nodes/README.md for every key."
        if self.seed is not None:
            header += (
                "\n[reproducibility] fixes the protocol noise so that the run equals `p2pem simulate`:"
                "\nTESTING ONLY - delete it in a real deployment (anyone knowing the seed can undo the privacy noise)."
            )
        atomic_write(path, toml_dumps(self.to_document(path.resolve().parent), header=header), mode=0o600)
        return path

    def with_broker(self, host: str, port: int) -> NodeConfig:
        return replace(self, broker=replace(self.broker, host=host, port=int(port)))


# ------------------------------------------------------------------------------------ data


def load_node_data(path: str | os.PathLike[str], columns: Sequence[str] | None = None) -> npt.NDArray[np.float64]:
    """Read one node's rows (CSV with a header row).

    Raises
    ------
    DataError
        The file cannot be read or holds a non-numeric or non-finite cell (from
        :func:`p2pem.data.load_table`, which names the line and column).
    """
    from p2pem.data import load_table

    X, _ = load_table(path, columns=None if columns is None else list(columns))
    if X.shape[0] == 0:
        raise DataError(f"{path}: no rows")
    return X


def write_node_data(path: str | os.PathLike[str], X: npt.ArrayLike, names: Sequence[str] | None = None) -> Path:
    """Write rows as CSV that reads back bit for bit (shortest round-trip float repr)."""
    path = Path(path)
    X = np.asarray(X, dtype=np.float64)
    names = list(names) if names is not None else [f"x{k}" for k in range(X.shape[1])]
    lines = [",".join(names)] + [",".join(repr(float(v)) for v in row) for row in X]
    atomic_write(path, "\n".join(lines) + "\n", mode=0o600)
    return path


# ------------------------------------------------------------------------------------ TOML


def toml_dumps(doc: Mapping[str, Any], *, header: str | None = None) -> str:
    """Serialise the small documents of this module as TOML (with ``tomli-w``).

    Strings, booleans, integers, finite floats (shortest round-trip form, so they read back
    bit for bit), paths, arrays, tables and arrays of tables; ``None`` values are left out,
    numpy scalars and arrays become plain numbers and lists, ``header`` becomes comment lines.

    Raises
    ------
    ConfigError
        A non-finite number, or a value TOML cannot hold.
    """
    import tomli_w

    body = tomli_w.dumps(_toml_ready(doc))
    lines = [f"# {line}".rstrip() for line in header.splitlines()] + [""] if header else []
    return "\n".join(lines) + body


def _toml_ready(value: Any) -> Any:
    """``value`` with None dropped from tables and everything else in types tomli-w writes."""
    if isinstance(value, Mapping):
        return {str(k): _toml_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_toml_ready(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(float(value)):
            raise ConfigError(f"cannot write the non-finite number {float(value)!r} to TOML")
        return float(value)
    if isinstance(value, (str, Path)):
        return str(value)
    raise ConfigError(f"cannot write {type(value).__name__} to TOML")
