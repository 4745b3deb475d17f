"""Key and credential files of a deployment: the one job of this module.

* :func:`write_broker_auth` -- the broker's side: Mosquitto's hashed password file, the ACL
  (node ``i`` may publish only under its own topics) and one plain password per user;
* :func:`public_path`, :func:`public_toml` -- the public half of a node's identity as the
  small TOML file a node's owner sends to whoever assembles the roster
  (:func:`p2pem.deploy.assemble.assemble_roster`).

The identities themselves (key generation, signing, sealing) live in :mod:`p2pem.deploy.crypto`,
the only importer of ``cryptography``; this module only lays their files out.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from p2pem.deploy.config import toml_dumps
from p2pem.files import atomic_write

__all__ = ["public_path", "public_toml", "read_public", "write_broker_auth"]


def write_broker_auth(
    directory: Path, run_id: str, parties: int | Sequence[int], *, bridge: bool = False, peers: Mapping[int, Sequence[int]] | None = None
) -> dict[str, str]:
    """Write the broker's hashed password file, ACL and the plain per-user passwords.

    Files in ``directory`` (all mode 0600): ``passwords`` (Mosquitto password file, hashed),
    ``acl`` (node ``i`` may publish only under ``p2pem/<run>/from/<i>/``), ``node<i>.password``
    (give it to node ``i``'s host; ``node-1.password`` is the server's) and
    ``credentials.toml`` (the ``admin`` and ``observer`` users' passwords).

    Parameters
    ----------
    parties : int or sequence of int
        The node count (nodes ``0..n-1``), or the ids (the server is -1).
    bridge : bool
        Also a ``bridge`` user, for a second site's broker bridged to this one.
    peers : mapping of int to sequence of int, optional
        Whom each party exchanges messages with: the ACL then grants exact topics only
        (:func:`~p2pem.deploy.broker.acl_rules`).

    Returns
    -------
    dict
        User name to password.
    """
    from p2pem.deploy.broker import acl_rules, username_for, write_password_file

    ids = list(range(parties)) if isinstance(parties, int) else list(parties)
    users = {username_for(i): secrets.token_urlsafe(18) for i in ids}
    users["admin"] = secrets.token_urlsafe(18)
    users["observer"] = secrets.token_urlsafe(18)
    if bridge:
        users["bridge"] = secrets.token_urlsafe(18)
    write_password_file(directory / "passwords", users)
    atomic_write(directory / "acl", acl_rules(run_id, ids, bridge="bridge" if bridge else None, peers=peers), mode=0o600)
    for i in ids:
        atomic_write(directory / f"{username_for(i)}.password", users[username_for(i)] + "\n", mode=0o600)
    header = "broker users for monitoring (admin may publish, observer may only read); keep secret"
    doc = toml_dumps({"admin": users["admin"], "observer": users["observer"]}, header=header)
    atomic_write(directory / "credentials.toml", doc, mode=0o600)
    return users


def public_path(key_file: Path) -> Path:
    """Where the public half of ``key_file`` goes: ``x.key`` -> ``x.pub``, else ``x`` + ``.pub``."""
    key_file = Path(key_file)
    return key_file.with_suffix(".pub") if key_file.suffix == ".key" else key_file.with_name(key_file.name + ".pub")


def public_toml(public, node_id: int | None = None) -> str:
    """The public identity as a small TOML document (``id`` when known, both keys, fingerprint)."""
    doc: dict[str, Any] = {}
    if node_id is not None:
        doc["id"] = node_id
    doc.update(public.to_dict())
    doc["fingerprint"] = public.fingerprint
    return toml_dumps(doc, header="p2pem public identity: send this file to whoever assembles the roster")


def read_public(path: Path) -> tuple[str, Any]:
    """What ``path`` is, for ``keys show``: ``("roster", None)``, ``("public", (node id or None,
    PublicIdentity))`` for a ``.pub`` file, or ``("private", None)`` for anything else (a key file)."""
    import tomllib

    from p2pem.deploy.crypto import PublicIdentity

    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return "private", None
    if "nodes" in doc and "run_id" in doc:
        return "roster", None
    if "signing_key" in doc and "agreement_key" in doc:
        node_id = doc.get("id") if isinstance(doc.get("id"), int) else None
        return "public", (node_id, PublicIdentity.from_dict({k: doc[k] for k in ("signing_key", "agreement_key")}))
    return "private", None

