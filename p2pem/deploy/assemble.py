"""Multi-host set-up: a roster assembled from the nodes' public keys, the one job of this module.

On one machine :func:`p2pem.deploy.kit.prepare_kit` generates every key itself.  Across
hosts each node's owner generates its own key (``p2pem keys new --node-id I``) and sends
the public half; :func:`assemble_roster` checks those files against the scenario's graph
and writes the roster every node must hold (and, if asked, the broker's credentials).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from p2pem.deploy.cuts import cut_warnings
from p2pem.deploy.keys import write_broker_auth
from p2pem.deploy.kit import make_run_id, pick_protocol
from p2pem.deploy.roster import Roster
from p2pem.errors import ConfigError
from p2pem.tomltable import Table, read_toml

log = logging.getLogger(__name__)

__all__ = ["assemble_roster"]


def assemble_roster(
    scenario_path: str | os.PathLike[str],
    public: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    protocol: str | None = None,
    broker_dir: str | os.PathLike[str] | None = None,
    n_features: int | None = None,
    columns: Sequence[str] | None = None,
) -> tuple[Roster, Path | None]:
    """Build a roster from a scenario and the nodes' ``.pub`` files (multi-host set-up).

    Parameters
    ----------
    scenario_path : path-like
        Gives the graph, the EM settings and the protocol.
    public : list of path-like
        ``.pub`` files written by ``p2pem keys new --node-id I``, or folders holding them.
    out : path-like
        Roster file to write.
    run_id, protocol : str, optional
    broker_dir : path-like, optional
        Also write the broker's password file, ACL and per-node passwords there
        (see :func:`write_broker_auth`).
    n_features, columns : optional
        The public schema of every node's data file (its width; its column names in
        order, which give the width), for a scenario without a ``[data]`` table: the
        coordinator then needs no sample file.  A scenario with a ``[data]`` table
        takes them from its file instead (giving both is an error).

    Raises
    ------
    ConfigError
        A node id is missing, repeated or out of range, a file is not a public identity,
        or the protocol cannot be deployed.
    """
    from p2pem.deploy.crypto import PublicIdentity
    from p2pem.builders import build_graph, em_settings, feature_columns, validate_protocol
    from p2pem.scenario import load_scenario

    schema = _given_schema(scenario_path, n_features, columns)
    # a scenario without [data]: the stand-in gives the EM settings a width; no data is read
    stand_in = None if schema is None else {"source": "synthetic", "n_samples": 1, "n_features": schema[0]}
    scenario = load_scenario(scenario_path, stand_in_data=stand_in)
    spec = pick_protocol(scenario, protocol)
    graph = build_graph(scenario)
    validate_protocol(scenario, graph, spec)
    n = graph.number_of_nodes()
    files: list[Path] = []
    for item in public:
        p = Path(item)
        files += sorted(p.glob("*.pub")) if p.is_dir() else [p]
    keys: dict[int, PublicIdentity] = {}
    for f in files:
        sec = Table(str(f), read_toml(f, "public identity"), "", ("id", "signing_key", "agreement_key", "fingerprint"))
        if not sec.has("id"):
            sec.fail("no node id (write it with `p2pem keys new --node-id I`, or add `id = I`)")
        node_id = sec.integer("id", minimum=-1)  # -1: the server of federated, dp-central
        if node_id >= n:
            sec.fail(f"node id {node_id} outside 0..{n - 1} (the scenario's graph has {n} nodes)")
        if node_id in keys:
            sec.fail(f"a second public key for node {node_id}")
        try:
            identity = PublicIdentity.from_dict({k: sec.string(k) for k in ("signing_key", "agreement_key")})
        except ConfigError as exc:
            sec.fail(str(exc))
        # the fingerprint is what owners compare out of band: it must be the keys' own
        if sec.has("fingerprint") and sec.string("fingerprint") != identity.fingerprint:
            sec.fail("'fingerprint' is not the fingerprint of these keys (the file was edited or damaged)")
        keys[node_id] = identity
    has_server = spec.server_aggregation(spec.topology(graph), 0) is not None
    missing = [i for i in range(n) if i not in keys] + ([-1] if has_server and -1 not in keys else [])
    if missing:
        raise ConfigError(f"no public key for node(s) {', '.join(map(str, missing[:20]))} (the graph has {n} nodes{'; -1 is the server' if has_server else ''})")
    on_dropout = str(scenario.deploy.get("on_dropout", "stop"))
    # the public schema of every node's data file: each node checks its own against it before going online
    width, names = feature_columns(scenario) if schema is None else schema
    roster = Roster.build(
        run_id or make_run_id(scenario.name), graph, em_settings(scenario), spec, [keys[i] for i in range(n)],
        n_features=width, columns=names, on_dropout=on_dropout, parties=scenario.parties, server_key=keys.get(-1) if has_server else None,
    )
    for line in cut_warnings(roster.neighbours):
        log.warning("%s: %s", out, line)
    roster.save(Path(out))
    written = None
    if broker_dir is not None:
        written = Path(broker_dir)
        written.mkdir(parents=True, exist_ok=True)
        write_broker_auth(written, roster.run_id, list(range(n)) + ([-1] if has_server else []))
    return roster, written


def _given_schema(
    scenario_path: str | os.PathLike[str], n_features: int | None, columns: Sequence[str] | None
) -> tuple[int, tuple[str, ...] | None] | None:
    """The nodes' public schema given as options, checked against the scenario (None: from its ``[data]``)."""
    has_data = "data" in read_toml(Path(scenario_path), "scenario")
    given = n_features is not None or columns is not None
    if has_data and given:
        raise ConfigError(f"{os.fspath(scenario_path)} has a [data] table, which gives the nodes' public schema: drop --columns "
                          "and --n-features, or the [data] table")
    if not has_data and not given:
        raise ConfigError(f"{os.fspath(scenario_path)}: no [data] table: give the public schema of the nodes' data files with "
                          "--columns NAME,NAME,... (their header, in order) or --n-features N, or a [data] table naming a sample "
                          "file with the same header")
    if not given:
        return None
    names = None if columns is None else tuple(columns)
    if names is not None:
        if not names or any(not c.strip() for c in names) or len(set(names)) != len(names):
            raise ConfigError(f"--columns must name distinct, non-empty columns, got {','.join(names)!r}")
        if n_features is not None and n_features != len(names):
            raise ConfigError(f"--n-features {n_features} disagrees with the {len(names)} names of --columns")
    width = len(names) if names is not None else n_features
    assert width is not None
    if width < 1:
        raise ConfigError(f"--n-features must be a positive integer, got {width}")
    return width, names
