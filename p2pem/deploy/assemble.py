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

    Raises
    ------
    ConfigError
        A node id is missing, repeated or out of range, a file is not a public identity,
        or the protocol cannot be deployed.
    """
    from p2pem.deploy.crypto import PublicIdentity
    from p2pem.builders import build_graph, em_settings, feature_columns, validate_protocol
    from p2pem.scenario import load_scenario

    scenario = load_scenario(scenario_path)
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
    n_features, columns = feature_columns(scenario)
    roster = Roster.build(
        run_id or make_run_id(scenario.name), graph, em_settings(scenario), spec, [keys[i] for i in range(n)],
        n_features=n_features, columns=columns, on_dropout=on_dropout, parties=scenario.parties, server_key=keys.get(-1) if has_server else None,
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
