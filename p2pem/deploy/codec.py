"""Authenticated (and, per edge, encrypted) wire envelopes for :class:`~p2pem.messages.Message`.

Pure byte manipulation: no sockets, no MQTT.  An envelope is ::

    u32 header_len | header | body | one 16-byte tag per receiver

with all integers big-endian and the header laid out as ::

    magic "P2EM" | u8 version | u8 flags | i32 sender | i64 iteration | i64 round
    | u8 len + run id (UTF-8) | u8 len + kind (UTF-8)
    | u16 n + n x i32 receivers | u16 n + n x i64 meta
    | float64 payload: u8 ndim + ndim x u32 shape   or   int payload: u32 count

``flags`` bit 0 is ``encrypted``, bit 1 marks an integer payload.  The body is the
payload: raw little-endian float64 values, or each integer as 32 big-endian bytes
(fixed width, so the ciphertext length does not leak magnitudes).  When the message
is encrypted the body is ``crypto.seal(edge key, payload, aad=header)``, so the
broker and the other nodes see the header (who, when, what kind, how big) but never
the payload.

Authentication: the k-th tag is ``crypto.mac(K_{s,r_k}, domain || everything before
the tags)``, the MAC of the whole envelope under the key of the edge between the
sender ``s`` and the k-th receiver ``r_k`` (X25519 of their pinned roster keys, then
HKDF bound to the run id and the pair).  Receiver ``r_k`` checks only its own tag: one
HMAC (~2 us) instead of one Ed25519 verification (~100 us) per delivery, which is most
of a node's cryptographic work.  The header inside the MAC binds run id, sender,
iteration, round, kind, receivers and meta.  What this gives, and what a signature
would give beyond it:

* Only ``s`` and ``r_k`` hold ``K_{s,r_k}``: the broker, eavesdroppers, non-members and
  every other member cannot make a tag that ``r_k`` accepts as coming from ``s``, nor
  alter a message without ``r_k`` noticing.
* ``r_k`` itself could make a message "from ``s``" that only ``r_k`` accepts: a receiver
  can fool nobody but itself, so this gives no power.
* No third-party verifiability and no non-repudiation: ``r_k`` cannot prove to anyone
  else what ``s`` sent (``r_k`` could have written the tag), and an observer holding the
  roster can parse envelopes (:meth:`Codec.parse`) but not authenticate them.
* A malicious member could send a broadcast whose tags are valid for some receivers
  only; those others reject it as forged, so this is a way to stall the run, which a
  member can always do by staying silent.

Encoding is deterministic (HMAC and the AES-SIV of :func:`crypto.seal` are), so
re-encoding the same message yields the same bytes; :class:`~p2pem.deploy.admission.ReplayGuard`
relies on it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import operator
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from p2pem.deploy.crypto import (
    MAC_SIZE,
    SEAL_OVERHEAD,
    CryptoError,
    EdgeKey,
    Identity,
    PublicIdentity,
    check_mac,
    derive_edge_key,
    mac,
    open_,
    seal,
)
from p2pem.errors import ConfigError, ProtocolError
from p2pem.messages import Message

logger = logging.getLogger(__name__)

__all__ = [
    "FORMAT_VERSION",
    "MAX_RING_INT",
    "Codec",
    "Envelope",
    "ForgedMessage",
    "InconsistentMessage",
    "InvalidMessage",
    "MalformedMessage",
    "NotAddressed",
    "ReplayedMessage",
    "TamperedMessage",
    "UnknownSender",
    "WrongRun",
    "validate_run_id",
]

#: Version of the envelope layout written by this module (2: per-receiver MACs; 1 had one Ed25519 signature).
FORMAT_VERSION = 2
#: Exclusive upper bound of integer payload entries (they travel as 32 bytes each).
MAX_RING_INT = 2**256

_MAGIC = b"P2EM"
_MAC_DOMAIN = b"p2pem/envelope/v2\x00"
_FLAG_ENCRYPTED = 0x01
_FLAG_INT_PAYLOAD = 0x02
_KNOWN_FLAGS = _FLAG_ENCRYPTED | _FLAG_INT_PAYLOAD
_INT_WIDTH = 32
_FIXED = struct.Struct(">4sBBiqq")
_LEN = struct.Struct(">I")
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class InvalidMessage(ProtocolError):
    """Base class of every envelope that cannot be encoded or must be rejected on receipt."""


class MalformedMessage(InvalidMessage):
    """The bytes are not a well-formed envelope, or a message cannot be encoded."""


class InconsistentMessage(MalformedMessage):
    """The tag verifies, but the envelope contradicts itself (payload length, receivers of a
    sealed payload): only its authenticated sender can have written it."""


class WrongRun(InvalidMessage):
    """The envelope belongs to another run."""


class UnknownSender(InvalidMessage):
    """The claimed sender has no pinned public key in the roster."""


class ForgedMessage(InvalidMessage):
    """This node's tag does not verify under its edge key with the claimed sender (forged, or altered in transit)."""


class TamperedMessage(InvalidMessage):
    """The tag is valid but the sealed payload does not authenticate under the edge key."""


class NotAddressed(InvalidMessage):
    """The message does not list this node (or the codec is an observer's), so it cannot authenticate it."""


class ReplayedMessage(InvalidMessage):
    """A different message arrived under the identity of one already accepted (replay or equivocation)."""


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is usable in envelopes, MQTT topics and ACL files.

    A run id is 1 to 64 characters from ``[A-Za-z0-9._-]`` starting with a letter or
    digit (no ``/``, ``+``, ``#`` or blanks, which would break the topic layout).

    Raises
    ------
    ConfigError
        If it is not.
    """
    if not isinstance(run_id, str) or _RUN_ID.fullmatch(run_id) is None:
        raise ConfigError(
            f"invalid run id {run_id!r}: use 1-64 characters from A-Z a-z 0-9 . _ - starting with a letter or digit"
        )
    return run_id


@dataclass(frozen=True)
class Envelope:
    """A parsed envelope; the payload is still raw.

    :meth:`Codec.verify` returns it after checking this node's tag, :meth:`Codec.parse`
    without any check.

    Parameters
    ----------
    run_id, sender, receivers, iteration, round, kind, encrypted, meta
        Header fields, as in :class:`~p2pem.messages.Message`.
    payload_type : {"float64", "int"}
        Kind of payload.
    shape : tuple of int
        Array shape for float payloads, ``(count,)`` for integer payloads.
    header : bytes
        Header bytes (the associated data of the sealed payload).
    body : bytes
        Payload bytes as sent: plain values, or the sealed box.
    tags : bytes
        The authentication tags, ``MAC_SIZE`` bytes per receiver, in receiver order.
    authenticated : bytes
        Everything before the tags (what each tag covers, after a domain prefix).
    """

    run_id: str
    sender: int
    receivers: tuple[int, ...]
    iteration: int
    round: int
    kind: str
    encrypted: bool
    meta: tuple[int, ...]
    payload_type: Literal["float64", "int"]
    shape: tuple[int, ...]
    header: bytes = field(repr=False)
    body: bytes = field(repr=False)
    tags: bytes = field(repr=False, default=b"")
    authenticated: bytes = field(repr=False, default=b"")

    @property
    def payload_nbytes(self) -> int:
        """Size of the plaintext payload in bytes (what an eavesdropper learns from the length)."""
        n = math.prod(self.shape)
        return n * (8 if self.payload_type == "float64" else _INT_WIDTH)


class Codec:
    """Encode messages of one node, and verify and decode messages from its peers.

    Parameters
    ----------
    run_id : str
        Run this codec belongs to; envelopes of other runs are rejected.
    roster : mapping of int to PublicIdentity
        Pinned public identity of every node that may send (including ``SERVER``
        for the federated baseline).
    identity : Identity, optional
        This node's secret keys; needed to encode, to authenticate and to open
        encrypted payloads.
    node_id : int, optional
        This node's id; needed together with ``identity``.  A codec without both is
        an observer: it can :meth:`parse` envelopes but not authenticate them.
    launch : bytes, default b""
        Nonce of this launch of the run (fresh per ``p2pem deploy``), bound into every tag:
        an envelope from an earlier launch of the same run (a retained message still on
        the broker, a recorded replay) does not authenticate in this one.

    Raises
    ------
    ConfigError
        If the run id is invalid, only one of ``identity``/``node_id`` is given, or
        the roster entry of ``node_id`` does not match ``identity``.

    Examples
    --------
    >>> import numpy as np
    >>> from p2pem.deploy.crypto import Identity
    >>> keys = {0: Identity.generate(), 1: Identity.generate()}
    >>> roster = {i: k.public for i, k in keys.items()}
    >>> alice = Codec("demo", roster, identity=keys[0], node_id=0)
    >>> bob = Codec("demo", roster, identity=keys[1], node_id=1)
    >>> msg = Message(0, (1,), 3, 7, "dual", np.array([0.5, -2.0]), encrypted=True)
    >>> bob.decode(alice.encode(msg)).payload
    array([ 0.5, -2. ])
    """

    def __init__(
        self,
        run_id: str,
        roster: Mapping[int, PublicIdentity],
        *,
        identity: Identity | None = None,
        node_id: int | None = None,
        launch: bytes = b"",
    ) -> None:
        self.run_id = validate_run_id(run_id)
        if not isinstance(launch, bytes) or len(launch) > 64:
            raise ConfigError("the launch nonce must be at most 64 bytes")
        self.launch = launch
        self._domain = _MAC_DOMAIN + (bytes([len(launch)]) + launch if launch else b"")
        self._data_domain = self._domain
        self._run_bytes = run_id.encode("utf-8")
        self.roster: dict[int, PublicIdentity] = dict(roster)
        if (identity is None) != (node_id is None):
            raise ConfigError("give both identity and node_id, or neither for an observer codec")
        if node_id is not None and identity is not None:
            pinned = self.roster.get(node_id)
            if pinned is None:
                raise ConfigError(f"node {node_id} is not in the roster")
            if pinned != identity.public:
                raise ConfigError(
                    f"roster key of node {node_id} ({pinned.fingerprint}) does not match this "
                    f"node's key file ({identity.public.fingerprint})"
                )
        self.identity = identity
        self.node_id = node_id
        self._edge_keys: dict[int, EdgeKey] = {}

    def __repr__(self) -> str:
        return f"Codec(run_id={self.run_id!r}, node_id={self.node_id!r}, roster={len(self.roster)} nodes)"

    def set_generation(self, context: bytes) -> None:
        """Bind ``context`` into the tags of protocol messages (iteration >= 0) from now on.

        A deployment that drops a node and re-runs an aggregation calls it with the set of
        dropped nodes, at every survivor: messages of the abandoned attempt, still in flight,
        then no longer authenticate, so they cannot mix with the new attempt's.  Control
        messages (iteration < 0) keep the launch's tags.  ``context`` may be of any length
        (its SHA-256 is bound).
        """
        self._data_domain = self._domain + b"\x00gen" + hashlib.sha256(bytes(context)).digest()

    def _domain_for(self, iteration: int) -> bytes:
        return self._data_domain if iteration >= 0 else self._domain

    # ----------------------------------------------------------------- encode
    def encode(self, msg: Message) -> bytes:
        """Serialise, seal (if ``msg.encrypted``) and authenticate ``msg`` for each receiver.

        Parameters
        ----------
        msg : Message
            A message whose sender is this node.  Float payloads must have an 8-byte
            float dtype; integer payloads hold integers in ``[0, 2**256)``.

        Returns
        -------
        bytes
            The envelope.

        Raises
        ------
        MalformedMessage
            If the message cannot be represented (wrong sender, payload dtype, an
            encrypted message without exactly one receiver, out-of-range fields).
        UnknownSender
            If a receiver has no roster entry.
        """
        if self.identity is None or self.node_id is None:
            raise MalformedMessage("an observer codec (no identity) cannot encode messages")
        if msg.sender != self.node_id:
            raise MalformedMessage(
                f"node {self.node_id} cannot encode a message claiming sender {msg.sender!r}"
            )
        header, plain = self._pack(msg)
        if msg.encrypted:
            key = self._edge_key(msg.receivers[0], role="receiver")
            body = seal(key, plain, aad=header)
        else:
            body = plain
        authenticated = _LEN.pack(len(header)) + header + body
        domain = self._domain_for(msg.iteration)
        tags = [mac(self._edge_key(r, role="receiver"), domain, authenticated) for r in msg.receivers]
        return b"".join([authenticated, *tags])

    def _pack(self, msg: Message) -> tuple[bytes, bytes]:
        who = f"node {msg.sender}"
        sender = _int_in(msg.sender, _I32, "sender", who)
        receivers = tuple(_int_in(r, _I32, "receiver", who) for r in msg.receivers)
        iteration = _int_in(msg.iteration, _I64, "iteration", who)
        round_ = _int_in(msg.round, _I64, "round", who)
        meta = tuple(_int_in(m, _I64, "meta field", who) for m in msg.meta)
        if not isinstance(msg.kind, str):
            raise MalformedMessage(f"message from {who}: kind must be a str")
        kind = msg.kind.encode("utf-8")
        if not 1 <= len(kind) <= 255:
            raise MalformedMessage(f"message from {who}: kind must be 1-255 bytes of UTF-8")
        if len(receivers) > 0xFFFF or len(meta) > 0xFFFF:
            raise MalformedMessage(f"message from {who}: too many receivers or meta fields")
        if msg.encrypted and len(receivers) != 1:
            raise MalformedMessage(
                f"encrypted message from {who} must have exactly one receiver, has {len(receivers)}"
            )
        if sender in receivers:
            raise MalformedMessage(f"message from {who} lists its sender among the receivers")
        if not receivers:
            raise MalformedMessage(f"message from {who} has no receiver")

        flags = _FLAG_ENCRYPTED if msg.encrypted else 0
        payload = msg.payload
        if isinstance(payload, np.ndarray):
            if payload.dtype.kind != "f" or payload.dtype.itemsize != 8:
                raise MalformedMessage(
                    f"message from {who}: array payload must be float64, got {payload.dtype}"
                )
            if payload.ndim > 255 or any(d > 0xFFFFFFFF for d in payload.shape):
                raise MalformedMessage(f"message from {who}: payload shape {payload.shape} too large")
            descriptor = struct.pack(f">B{payload.ndim}I", payload.ndim, *payload.shape)
            plain = np.ascontiguousarray(payload, dtype="<f8").tobytes()
        elif isinstance(payload, tuple):
            flags |= _FLAG_INT_PAYLOAD
            if len(payload) > 0xFFFFFFFF:
                raise MalformedMessage(f"message from {who}: too many payload integers")
            values = [_ring_int(v, who) for v in payload]
            descriptor = _LEN.pack(len(values))
            plain = b"".join(v.to_bytes(_INT_WIDTH, "big") for v in values)
        else:
            raise MalformedMessage(
                f"message from {who}: payload must be a float64 array or a tuple of int, "
                f"not {type(payload).__name__}"
            )
        header = b"".join(
            [
                _FIXED.pack(_MAGIC, FORMAT_VERSION, flags, sender, iteration, round_),
                bytes([len(self._run_bytes)]),
                self._run_bytes,
                bytes([len(kind)]),
                kind,
                struct.pack(f">H{len(receivers)}i", len(receivers), *receivers),
                struct.pack(f">H{len(meta)}q", len(meta), *meta),
                descriptor,
            ]
        )
        return header, plain

    # ----------------------------------------------------------------- decode
    def parse(self, data: bytes) -> Envelope:
        """Parse an envelope of this run without authenticating it.

        What the broker, an eavesdropper or an observer codec can learn: the header
        fields, and the payload of plaintext messages.  Nothing here proves who wrote it.

        Raises
        ------
        MalformedMessage, WrongRun
            Each with a one-line reason naming the claimed sender.
        """
        env = _parse(bytes(data))
        if env.run_id != self.run_id:
            raise WrongRun(f"message from node {env.sender} belongs to run {env.run_id!r}, not {self.run_id!r}")
        return env

    def verify(self, data: bytes) -> Envelope:
        """Parse an envelope and check run id, roster membership and this node's tag; do not decrypt.

        :meth:`decode` calls it first.

        Raises
        ------
        MalformedMessage, WrongRun, UnknownSender, ForgedMessage
            Each with a one-line reason naming the claimed sender.
        NotAddressed
            If this node is not among the receivers (there is no tag for it), or the
            codec is an observer's (it holds no edge key).
        """
        env = self.parse(data)
        who = f"node {env.sender}"
        if env.sender not in self.roster:
            raise UnknownSender(f"message from {who} rejected: {who} is not in the roster")
        if self.node_id is None or self.node_id not in env.receivers:
            raise NotAddressed(
                f"message from {who} is for {_nodes(env.receivers)}, "
                f"not for {'this observer' if self.node_id is None else f'node {self.node_id}'}"
            )
        k = env.receivers.index(self.node_id)
        key = self._edge_key(env.sender, role="sender")
        try:
            check_mac(key, env.tags[k * MAC_SIZE : (k + 1) * MAC_SIZE], self._domain_for(env.iteration), env.authenticated)
        except CryptoError:
            raise ForgedMessage(
                f"message claiming to be from {who} does not authenticate under the key of edge "
                f"{key.pair} in this launch (forged, altered in transit, or from an earlier launch)"
            ) from None
        # Checks of what an authenticated sender wrote come after the tag, so that the
        # reason names a sender who really sent it.
        expected = env.payload_nbytes + (SEAL_OVERHEAD if env.encrypted else 0)
        if len(env.body) != expected:
            raise InconsistentMessage(
                f"message from {who}: payload is {len(env.body)} bytes, header announces {expected}"
            )
        if env.encrypted and len(env.receivers) != 1:
            raise InconsistentMessage(f"encrypted message from {who} has {len(env.receivers)} receivers, not 1")
        return env

    def decode(self, data: bytes) -> Message:
        """Verify an envelope and return the message it carries, payload bit-for-bit.

        Parameters
        ----------
        data : bytes
            Envelope as produced by :meth:`encode` on the sender's node.

        Returns
        -------
        Message
            Float payloads come back as a fresh writable native float64 array of the
            original shape; integer payloads as a tuple of Python ints.

        Raises
        ------
        MalformedMessage, WrongRun, UnknownSender, ForgedMessage
            See :meth:`verify`.
        NotAddressed
            If the message is for other nodes (see :meth:`verify`).
        TamperedMessage
            If the sealed payload does not authenticate under the edge key.

        Notes
        -----
        A multicast on ``.../all`` reaches every neighbour of the sender; those it does
        not list get :class:`NotAddressed`, as there is no tag for them.
        """
        return self.open(self.verify(data))

    def open(self, env: Envelope) -> Message:
        """The message of an envelope :meth:`verify` returned: open the seal, decode the payload.

        A caller may look at the verified header (the payload's announced shape) before it
        pays for the payload (:class:`~p2pem.deploy.admission.Admission` does).

        Raises
        ------
        TamperedMessage
            If the sealed payload does not authenticate under the edge key.
        """
        body = env.body
        if env.encrypted:
            key = self._edge_key(env.sender, role="sender")
            try:
                body = open_(key, body, aad=env.header)
            except CryptoError:
                raise TamperedMessage(
                    f"encrypted payload from node {env.sender} does not authenticate under the edge key "
                    f"{key.pair} (altered, or sealed with another key)"
                ) from None
        payload: np.ndarray | tuple[int, ...]
        if env.payload_type == "float64":
            payload = np.frombuffer(body, dtype="<f8").astype(np.float64).reshape(env.shape)
        else:
            payload = tuple(
                int.from_bytes(body[k : k + _INT_WIDTH], "big") for k in range(0, len(body), _INT_WIDTH)
            )
        return Message(
            sender=env.sender,
            receivers=env.receivers,
            iteration=env.iteration,
            round=env.round,
            kind=env.kind,
            payload=payload,
            encrypted=env.encrypted,
            meta=env.meta,
        )

    def _edge_key(self, peer_id: int, *, role: str) -> EdgeKey:
        key = self._edge_keys.get(peer_id)
        if key is None:
            assert self.identity is not None and self.node_id is not None
            public = self.roster.get(peer_id)
            if public is None:
                raise UnknownSender(f"encrypted message {role} node {peer_id} is not in the roster")
            key = derive_edge_key(self.identity, self.node_id, public, peer_id, self.run_id)
            self._edge_keys[peer_id] = key
        return key


def _int_in(value: object, bounds: tuple[int, int], name: str, who: str) -> int:
    try:
        v = operator.index(value)  # type: ignore[arg-type]  # any decoded object: the TypeError is the check
    except TypeError:
        raise MalformedMessage(f"message from {who}: {name} must be an int, not {type(value).__name__}") from None
    if not bounds[0] <= v <= bounds[1]:
        raise MalformedMessage(f"message from {who}: {name} {v} out of range")
    return v


def _ring_int(value: object, who: str) -> int:
    try:
        v = operator.index(value)  # type: ignore[arg-type]  # any decoded object: the TypeError is the check
    except TypeError:
        raise MalformedMessage(
            f"message from {who}: integer payload entries must be int, not {type(value).__name__}"
        ) from None
    if not 0 <= v < MAX_RING_INT:
        raise MalformedMessage(f"message from {who}: integer payload entry outside [0, 2**256)")
    return v


def _nodes(ids: tuple[int, ...]) -> str:
    return ("node " if len(ids) == 1 else "nodes ") + ", ".join(str(i) for i in ids)


def _parse(data: bytes) -> Envelope:
    """Split an envelope into its fields without any cryptographic check."""
    sender: int | None = None

    def bad(reason: str) -> MalformedMessage:
        who = "unknown sender" if sender is None else f"node {sender}"
        return MalformedMessage(f"malformed envelope (claimed sender: {who}): {reason}")

    if len(data) < _LEN.size + _FIXED.size:
        raise bad(f"only {len(data)} bytes")
    (header_len,) = _LEN.unpack_from(data, 0)
    end = _LEN.size + header_len
    if header_len < _FIXED.size or end > len(data):
        raise bad(f"header length {header_len} does not fit in {len(data)} bytes")
    header = data[_LEN.size : end]
    magic, version, flags, sender, iteration, round_ = _FIXED.unpack_from(header, 0)
    if magic != _MAGIC:
        sender = None
        raise bad("not a p2pem envelope")
    if version != FORMAT_VERSION:
        raise bad(f"format version {version}, this node reads version {FORMAT_VERSION}")
    if flags & ~_KNOWN_FLAGS:
        raise bad(f"unknown flags {flags:#04x}")
    pos = _FIXED.size
    try:
        n = header[pos]
        run_id = header[pos + 1 : pos + 1 + n].decode("utf-8")
        pos += 1 + n
        n = header[pos]
        kind = header[pos + 1 : pos + 1 + n].decode("utf-8")
        pos += 1 + n
        (n,) = struct.unpack_from(">H", header, pos)
        receivers = struct.unpack_from(f">{n}i", header, pos + 2)
        pos += 2 + 4 * n
        (n,) = struct.unpack_from(">H", header, pos)
        meta = struct.unpack_from(f">{n}q", header, pos + 2)
        pos += 2 + 8 * n
        payload_type: Literal["float64", "int"]
        if flags & _FLAG_INT_PAYLOAD:
            payload_type = "int"
            shape: tuple[int, ...] = (_LEN.unpack_from(header, pos)[0],)
            pos += _LEN.size
        else:
            payload_type = "float64"
            ndim = header[pos]
            shape = struct.unpack_from(f">{ndim}I", header, pos + 1)
            pos += 1 + 4 * ndim
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise bad(f"truncated or invalid header ({exc})") from None
    if pos != len(header):
        raise bad(f"{len(header) - pos} unexpected bytes after the header fields")
    if not kind:
        raise bad("empty kind")
    if not receivers:
        raise bad("no receiver")
    if sender in receivers:
        raise bad("the sender is among the receivers")
    tags_start = len(data) - MAC_SIZE * len(receivers)
    if tags_start < end:
        raise bad(f"{len(data) - end} bytes after the header cannot hold {len(receivers)} tags")
    return Envelope(
        run_id=run_id,
        sender=sender,
        receivers=tuple(receivers),
        iteration=iteration,
        round=round_,
        kind=kind,
        encrypted=bool(flags & _FLAG_ENCRYPTED),
        meta=tuple(meta),
        payload_type=payload_type,
        shape=tuple(shape),
        header=header,
        body=data[end:tags_start],
        tags=data[tags_start:],
        authenticated=data[:tags_start],
    )
