"""The roster: the public document every node of a run holds identically.

``roster.toml`` (public, byte-identical at every node) holds the run id, the public topology
(node count, every node's neighbours, the diameter), the EM settings, the protocol and its
parameters, and every node's pinned public keys.  From it each node builds the same
:class:`~p2pem.protocols.Topology` the simulator builds from the scenario graph (so
``c = "auto"`` gives the same step size everywhere) and the same
:class:`~p2pem.em.EMSettings`.  Nodes exchange a digest of it in their first message and
refuse to run with a peer whose roster differs.  Each node's own, partly secret settings are
in its node config (:mod:`p2pem.deploy.config`).

Relative paths are resolved against the roster's folder.  Every error is a one-line
:class:`~p2pem.errors.ConfigError` naming the file and the dotted key.

Layout::

    format = 1
    run_id = "parkinsons-20-1f2e3d4c"

    [topology]
    n_nodes = 20
    diameter = 3

    [em]
    n_components = 3
    max_iter = 30
    tol = 0.0
    reg_covar = 1e-06
    init_seed = 2868129180             # public: seeds the initial means
    family = { name = "gaussian" }     # the model family and its public settings
    n_features = 22                    # the public schema of every node's data file:
    columns = ["MDVP:Fo(Hz)", ...]     #   its width and, where the rows have them, its columns

    [protocol]
    name = "pdmm-sp"
    mode = "sync"                      # every parameter written out explicitly
    ...

    [[nodes]]
    id = 0
    name = "hospital-a"                # optional: the party's own name (a node column's, an edge file's)
    neighbours = [2, 5, 9]
    signing_key = "<64 hex digits>"    # Ed25519, from `p2pem keys new`
    agreement_key = "<64 hex digits>"  # X25519
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from p2pem.deploy.config import toml_dumps
from p2pem.errors import ConfigError
from p2pem.files import atomic_write
from p2pem.families.toml import parse_family, parse_init
from p2pem.tomltable import Table, read_toml

__all__ = ["DEPLOYABLE", "ROSTER_FORMAT", "Roster", "check_deployable"]

#: Version of the roster layout written by :meth:`Roster.save`.
ROSTER_FORMAT = 1
#: Protocols a deployment can run (every one but ``centralized``, which pools the data).
DEPLOYABLE = ("pdmm-sp", "secure-sum", "federated", "dp-central", "dp-distributed")
#: What a deployment does when a node falls silent (the roster's ``on_dropout``).
ON_DROPOUT = ("stop", "continue")


# ------------------------------------------------------------------------------- protocol


def check_deployable(spec: Any) -> None:
    """Raise a one-line ConfigError unless a deployment can run ``spec``.

    Every protocol but ``centralized`` (which pools the rows in one place) runs as separate
    processes: ``federated`` and ``dp-central`` with a server process beside the nodes.
    Refused: ``encrypt_duals = false``, an insecure variant kept only for the leakage
    comparison, and a private protocol without a public ``bound`` (each node would read
    another off its own rows).
    """
    name = getattr(spec, "name", spec)
    if name not in DEPLOYABLE:
        raise ConfigError(
            f"protocol {name!r} cannot be deployed (deployable: {', '.join(DEPLOYABLE)}); "
            "run it with `p2pem simulate`"
        )
    inner = getattr(spec, "inner", spec) if name == "dp-distributed" else spec
    if not getattr(inner, "encrypt_duals", True):
        raise ConfigError("pdmm-sp encrypt_duals = false is an insecure simulation-only variant and cannot be deployed")
    if name.startswith("dp-") and getattr(spec, "bound", None) is None:
        raise ConfigError(f"{name} needs a public 'bound' to be deployed (without one every node would read its own off its rows)")


# --------------------------------------------------------------------------------- roster


@dataclass(frozen=True, eq=False)
class Roster:
    """Public facts every node of one run must hold identically.

    Parameters
    ----------
    run_id : str
        Bound into every message tag, edge key and MQTT topic of the run.
    neighbours : tuple of tuple of int
        Node ``i``'s neighbours, sorted.
    diameter : int
        Graph diameter (public; pdmm-sp's stopping rule uses it).
    em : dict
        ``n_components``, ``max_iter``, ``tol``, ``reg_covar``, ``init_seed``, ``family``
        (:meth:`~p2pem.families.base.MixtureFamily.describe`; absent: Gaussian),
        ``n_features`` (required without a ``task``: what lets a node tell its own wrong data
        file from a peer's wrong message), optionally ``columns`` (the data file's column
        names, in order) and ``init`` (the family's parameters as nested lists).
    protocol : dict
        ``name`` plus every protocol parameter.
    keys : tuple of PublicIdentity
        Node ``i``'s pinned public keys at index ``i``.
    ring : tuple of int, optional
        Hamiltonian cycle (only protocols that need one).
    path : pathlib.Path, optional
        Where the roster was read from (for error messages).
    on_dropout : {"stop", "continue"}
        When a node falls silent: stop the run, or drop it on the signed votes of its
        neighbours and go on (:mod:`p2pem.deploy.eviction`).  In the roster, so that every
        node runs with the same.
    server_key : PublicIdentity, optional
        The pinned keys of the server process (``federated``, ``dp-central``).
    parties : tuple, optional
        The parties' own names of nodes ``0..n-1`` (``[[nodes]] name``), written into the
        deployment's result beside the ids; None when the nodes are only numbered.
    task : dict, optional
        What every node computes instead of the EM: a public table with a ``kind``
        (:data:`p2pem.registry.TASKS`) that every node builds the same task from, with its
        own rows (e.g. a Bayesian-network release: schema, settings, protocol).  The
        roster does not look inside; the digest covers it, so nodes with another table
        refuse each other.
    """

    run_id: str
    neighbours: tuple[tuple[int, ...], ...]
    diameter: int
    em: Mapping[str, Any]
    protocol: Mapping[str, Any]
    keys: tuple[Any, ...]
    ring: tuple[int, ...] | None = None
    path: Path | None = None
    on_dropout: str = "stop"
    server_key: Any = None
    task: Mapping[str, Any] | None = None
    parties: tuple[Any, ...] | None = None

    @property
    def n_nodes(self) -> int:
        return len(self.neighbours)

    @property
    def where(self) -> str:
        return str(self.path) if self.path is not None else "roster"

    @property
    def n_features(self) -> int | None:
        """Columns every node's data must have (``em.n_features``; None in a roster of a ``task``)."""
        value = self.em.get("n_features")
        return None if value is None else int(value)

    @property
    def columns(self) -> tuple[str, ...] | None:
        """The names of the columns every node's data file must have, in order (``em.columns``), or None."""
        value = self.em.get("columns")
        return None if value is None else tuple(str(c) for c in value)

    # -- what a node builds from it -----------------------------------------------------

    def topology(self):
        """The :class:`~p2pem.protocols.Topology` every node builds (equal to ``Topology.from_graph``)."""
        from p2pem.protocols import Topology

        return Topology(n_nodes=self.n_nodes, neighbours=self.neighbours, diameter=self.diameter, ring=self.ring)

    def em_settings(self):
        """The public :class:`~p2pem.em.EMSettings` of the run (its model family included)."""
        from p2pem.em import EMSettings
        from p2pem.families import family_from_document

        em = self.em
        try:
            family = family_from_document(em.get("family", "gaussian"))
            init = None if em.get("init") is None else family.params_from_dict(em["init"], int(em["n_components"]), self.n_features)
            return EMSettings(
                int(em["n_components"]), int(em["max_iter"]), float(em["tol"]), float(em["reg_covar"]), init, int(em["init_seed"]),
                family=family,
            )
        except ConfigError as exc:
            raise ConfigError(f"{self.where}: em: {exc}") from None

    def protocol_spec(self):
        """The protocol spec, checked to be deployable."""
        from p2pem.registry import make_protocol

        params = {k: v for k, v in self.protocol.items() if k != "name"}
        try:
            spec = make_protocol(self.protocol["name"], params)
            check_deployable(spec)
        except ConfigError as exc:
            raise ConfigError(f"{self.where}: protocol: {exc}") from None
        return spec

    def public_keys(self) -> dict[int, Any]:
        """``{node id: PublicIdentity}`` for :class:`~p2pem.deploy.codec.Codec` (the server as -1)."""
        from p2pem.messages import SERVER

        keys = dict(enumerate(self.keys))
        if self.server_key is not None:
            keys[SERVER] = self.server_key
        return keys

    def digest(self) -> bytes:
        """SHA-256 of the roster's canonical JSON form; equal rosters give equal digests."""
        text = json.dumps(self.to_document(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode("utf-8")).digest()

    # -- building and files --------------------------------------------------------------

    @classmethod
    def build(
        cls,
        run_id: str,
        graph,
        settings,
        spec,
        keys: Sequence[Any],
        *,
        n_features: int | None = None,
        columns: Sequence[str] | None = None,
        on_dropout: str = "stop",
        server_key: Any = None,
        task: Mapping[str, Any] | None = None,
        parties: Sequence[Any] | None = None,
    ) -> Roster:
        """Roster for ``graph`` (nodes ``0..n-1``), EM ``settings``, protocol ``spec`` and public ``keys``.

        ``n_features`` (the data's column count; required without a ``task``) and
        ``columns`` (their names, when the rows have them) let every node check its own data
        file before it goes online.
        ``task`` replaces the EM by a task every node builds from it (see the class);
        ``parties``: the parties' names of the nodes (a scenario's :attr:`~p2pem.scenario.Scenario.parties`).
        The protocol's topology of the graph is written (``secure-sum``: with its ring).

        Raises
        ------
        ConfigError
            The run id is invalid, the protocol is not deployable, the number of keys does
            not match the number of nodes, or a protocol with a server has no server key.
        """
        from p2pem.deploy.codec import validate_run_id

        validate_run_id(run_id)
        check_deployable(spec)
        if on_dropout not in ON_DROPOUT:
            raise ConfigError(f"on_dropout must be one of {', '.join(ON_DROPOUT)}, got {on_dropout!r}")
        topo = spec.topology(graph)
        if len(keys) != topo.n_nodes:
            raise ConfigError(f"the graph has {topo.n_nodes} nodes but {len(keys)} public keys were given")
        if (server_key is None) != (spec.server_aggregation(topo, 0) is None):
            raise ConfigError(f"{spec.name}: a server key is needed exactly when the protocol has a server")
        em: dict[str, Any] = {
            "n_components": settings.n_components,
            "max_iter": settings.max_iter,
            "tol": float(settings.tol),
            "reg_covar": float(settings.reg_covar),
            "init_seed": int(settings.init_seed),
            "family": settings.family.describe(),
        }
        if n_features is not None:
            em["n_features"] = int(n_features)
        elif task is None:
            raise ConfigError("the roster of an EM run needs n_features (the public width of every node's data)")
        if columns is not None:
            if len(columns) != n_features:
                raise ConfigError(f"{len(columns)} column names for {n_features} features")
            em["columns"] = [str(c) for c in columns]
        if settings.init is not None:
            em["init"] = settings.family.to_dict(settings.init)
        protocol = {"name": spec.name, **spec.params()}
        if task is not None and (server_key is not None or not isinstance(task.get("kind"), str)):
            raise ConfigError(f"{spec.name}: a task needs a 'kind' and a protocol without a server")
        if parties is not None and len(parties) != topo.n_nodes:
            raise ConfigError(f"{len(parties)} party names for {topo.n_nodes} nodes")
        return cls(run_id, topo.neighbours, topo.diameter, em, protocol, tuple(keys), topo.ring, on_dropout=on_dropout, server_key=server_key,
                   task=None if task is None else dict(task), parties=None if parties is None else tuple(parties))

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": ROSTER_FORMAT,
            "run_id": self.run_id,
            "topology": {"n_nodes": self.n_nodes, "diameter": self.diameter},
            "em": _plain(self.em),
            "protocol": _plain(self.protocol),
            "nodes": [
                {"id": i, **({"name": self.parties[i]} if self.parties is not None else {}), "neighbours": list(nb), **self.keys[i].to_dict()}
                for i, nb in enumerate(self.neighbours)
            ],
        }
        if self.ring is not None:
            doc["topology"]["ring"] = list(self.ring)
        doc["on_dropout"] = self.on_dropout
        if self.server_key is not None:
            doc["server"] = self.server_key.to_dict()
        if self.task is not None:
            doc["task"] = _plain(self.task)
        return doc

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the roster as TOML (with a comment header) and return the path."""
        path = Path(path)
        header = (
            f"p2pem roster of run {self.run_id}: public, must be identical at every node.\n"
            "Written by p2pem; nodes refuse to run with a peer whose roster differs."
        )
        atomic_write(path, toml_dumps(self.to_document(), header=header))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Roster:
        """Read and validate a roster file.

        Raises
        ------
        ConfigError
            Naming the file and key: missing or unknown keys, wrong types, node ids that are
            not ``0..n-1``, asymmetric or self neighbours, a disconnected graph, a diameter
            that does not match the neighbour lists, invalid or repeated public keys, or a
            protocol that cannot be deployed.
        """
        path = Path(path)
        doc = read_toml(path, "roster")
        return cls.from_document(doc, path)

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], path: Path | None = None) -> Roster:
        from p2pem.deploy.codec import validate_run_id
        from p2pem.deploy.crypto import PublicIdentity

        where = str(path) if path is not None else "roster"
        top = Table(where, doc, "", ("format", "run_id", "topology", "em", "protocol", "nodes", "on_dropout", "server", "task"))
        fmt = top.integer("format")
        if fmt != ROSTER_FORMAT:
            top.fail(f"'format' is {fmt}, this p2pem reads roster format {ROSTER_FORMAT}")
        run_id = top.string("run_id")
        try:
            validate_run_id(run_id)
        except ConfigError as exc:
            top.fail(f"'run_id': {exc}")
        topo = top.section("topology", ("n_nodes", "diameter", "ring"))
        n = topo.integer("n_nodes", minimum=2)
        diameter = topo.integer("diameter", minimum=1)
        ring = topo.int_list("ring", default=None)
        em_t = top.section("em", ("n_components", "max_iter", "tol", "reg_covar", "init_seed", "n_features", "columns", "family", "init"))
        family = parse_family(em_t)
        em: dict[str, Any] = {
            "n_components": em_t.integer("n_components", minimum=1),
            "max_iter": em_t.integer("max_iter", minimum=0),
            "tol": em_t.number("tol", minimum=0.0),
            "reg_covar": em_t.number("reg_covar", minimum=0.0),
            "init_seed": em_t.integer("init_seed", minimum=0),
            "family": family.describe(),
        }
        if "n_features" in em_t.table:
            em["n_features"] = em_t.integer("n_features", minimum=1)
        elif "task" not in doc:
            # without it a node would take its own data file's width for the run's, and blame a
            # peer whose (correct) messages do not fit a wrong file of its own
            em_t.fail("missing required key 'em.n_features' (the public width of every node's data; "
                      "a roster written by an older p2pem: write it again with `p2pem keys roster`)")
        if "columns" in em_t.table:
            column_names = em_t.string_list("columns")
            if len(column_names) != em.get("n_features"):
                em_t.fail(f"'em.columns' must name each of the {em.get('n_features')} features, got {len(column_names)} names")
            em["columns"] = list(column_names)
        if "init" in em_t.table:
            init_t = em_t.section("init", None)
            parse_init(init_t, family, em["n_components"], em.get("n_features"))  # the same checks as a scenario's
            em["init"] = {key: init_t.table[key] for key, _ in family.param_keys}
        proto_t = top.section("protocol", None)
        protocol = dict(proto_t.table)
        if not isinstance(protocol.get("name"), str):
            proto_t.fail("missing required key 'protocol.name' (a string)")
        raw_nodes = top.require("nodes")
        if not (isinstance(raw_nodes, list) and all(isinstance(t, dict) for t in raw_nodes)):
            top.fail("'nodes' must be an array of [[nodes]] tables")
        if len(raw_nodes) != n:
            top.fail(f"'topology.n_nodes' is {n} but there are {len(raw_nodes)} [[nodes]] entries")
        neighbours: dict[int, tuple[int, ...]] = {}
        names: dict[int, Any] = {}
        keys: dict[int, PublicIdentity] = {}
        for index, entry in enumerate(raw_nodes):
            node_t = Table(where, entry, f"nodes[{index}]", ("id", "name", "neighbours", "signing_key", "agreement_key", "fingerprint"))
            i = node_t.integer("id", minimum=0)
            if i >= n:
                node_t.fail(f"'nodes[{index}].id' is {i}, but ids run from 0 to {n - 1}")
            if i in neighbours:
                node_t.fail(f"node id {i} appears twice in [[nodes]]")
            nb = node_t.int_list("neighbours")
            if len(set(nb)) != len(nb):
                node_t.fail(f"node {i} lists a neighbour twice")
            if i in nb:
                node_t.fail(f"node {i} lists itself as a neighbour")
            if any(not 0 <= j < n for j in nb):
                node_t.fail(f"node {i} has a neighbour outside 0..{n - 1}")
            if not nb:
                node_t.fail(f"node {i} has no neighbours")
            neighbours[i] = tuple(sorted(nb))
            if "name" in entry:
                name = entry["name"]
                if isinstance(name, bool) or not isinstance(name, (str, int)) or name == "":
                    node_t.fail(f"'nodes[{index}].name' must be a party's name (a string or an integer), got {name!r}")
                names[i] = name
            try:
                public = PublicIdentity.from_dict({k: node_t.string(k) for k in ("signing_key", "agreement_key")})
            except ConfigError as exc:
                node_t.fail(f"node {i}: {exc}")
            if "fingerprint" in entry and node_t.string("fingerprint") != public.fingerprint:
                node_t.fail(f"node {i}: 'fingerprint' does not match its keys (expected {public.fingerprint})")
            keys[i] = public
        nbrs = tuple(neighbours[i] for i in range(n))
        for i, nb in enumerate(nbrs):
            for j in nb:
                if i not in nbrs[j]:
                    top.fail(f"node {i} lists node {j} as a neighbour but node {j} does not list node {i}")
        seen_keys: dict[str, int] = {}
        for i, public in keys.items():
            for hexkey in (public.signing_key, public.agreement_key):
                if hexkey in seen_keys:
                    top.fail(f"nodes {seen_keys[hexkey]} and {i} share a public key (each node needs its own `p2pem keys new`)")
                seen_keys[hexkey] = i
        from p2pem.protocols.base import diameter_bound

        actual = diameter_bound(nbrs)
        if actual is None:
            top.fail("the neighbour lists describe a disconnected graph")
        if actual != diameter:
            top.fail(f"'topology.diameter' is {diameter} but the neighbour lists give {actual}")
        on_dropout = top.choice("on_dropout", ON_DROPOUT, default="stop")
        server_key = None
        if "server" in doc:
            server_t = top.section("server", ("signing_key", "agreement_key", "fingerprint"))
            try:
                server_key = PublicIdentity.from_dict({k: server_t.string(k) for k in ("signing_key", "agreement_key")})
            except ConfigError as exc:
                server_t.fail(f"server: {exc}")
            if any(server_key.signing_key == k.signing_key or server_key.agreement_key == k.agreement_key for k in keys.values()):
                top.fail("the server shares a public key with a node (it needs its own `p2pem keys new`)")
        task = None
        if "task" in doc:
            task = dict(top.section("task", None).table)
            if not isinstance(task.get("kind"), str):
                top.fail("missing required key 'task.kind' (a string)")
        if names and len(names) != n:
            top.fail(f"{len(names)} of the {n} [[nodes]] have a 'name': name every node or none")
        if len(set(map(str, names.values()))) != len(names):
            top.fail("two [[nodes]] have the same 'name'")
        roster = cls(run_id, nbrs, diameter, em, protocol, tuple(keys[i] for i in range(n)), None if ring is None else tuple(ring), path,
                     on_dropout=on_dropout, server_key=server_key, task=task, parties=tuple(names[i] for i in range(n)) if names else None)
        spec = roster.protocol_spec()
        if (server_key is None) != (spec.server_aggregation(roster.topology(), 0) is None):
            top.fail(f"protocol {spec.name!r} {'needs' if server_key is None else 'has no'} a [server] entry")
        roster.em_settings()
        return roster


def _plain(value: Any) -> Any:
    """Mappings and sequences as plain dicts and lists (for JSON digests and TOML)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
