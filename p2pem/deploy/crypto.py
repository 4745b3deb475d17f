"""Node identities, per-edge keys, authenticated encryption and signatures.

This is the only module of p2pem that imports the ``cryptography`` package; every
other module (the wire codec, the deployment launcher) goes through the functions
here, so the choice of primitives lives in one place:

* identities: an Ed25519 signing key and an X25519 key-agreement key per node;
* per-edge keys: X25519 between nodes ``i`` and ``j`` followed by HKDF-SHA256 whose
  ``info`` binds the run id, the unordered pair ``{i, j}`` and both public keys;
* sealing: AES-SIV (RFC 5297), deterministic authenticated encryption (see :func:`seal`);
* message authentication: HMAC-SHA256 under the edge's MAC key, truncated to 128 bits
  (see :func:`mac`); this is what the wire envelopes use, one tag per receiver;
* signatures: Ed25519 (RFC 8032, deterministic), for whatever must be verifiable by
  third parties (envelopes are not: verifying a signature costs ~100 us, a MAC ~2 us);
* TLS for the broker: a throw-away CA and a broker certificate (:func:`write_tls_files`).

Nothing here is home-made: the module only composes primitives of ``cryptography``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, InvalidTag, UnsupportedAlgorithm
from cryptography.hazmat.primitives import constant_time, hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from p2pem.errors import ConfigError, ProtocolError

logger = logging.getLogger(__name__)

__all__ = [
    "KEY_FILE_MODE",
    "MAC_SIZE",
    "SEAL_OVERHEAD",
    "SIGNATURE_SIZE",
    "CryptoError",
    "DecryptionError",
    "EdgeKey",
    "Identity",
    "KeyFileError",
    "MacError",
    "PublicIdentity",
    "SignatureError",
    "check_mac",
    "derive_edge_key",
    "mac",
    "open_",
    "seal",
    "sign",
    "verify",
    "write_tls_files",
]

#: Permissions of a private key file written by :meth:`Identity.save`.
KEY_FILE_MODE = 0o600
#: Size of an Ed25519 signature in bytes.
SIGNATURE_SIZE = 64
#: Size of a message authentication tag (HMAC-SHA256 truncated to 128 bits) in bytes.
MAC_SIZE = 16
#: Bytes a sealed box adds to its plaintext (the 16-byte synthetic IV of AES-SIV).
SEAL_OVERHEAD = 16
_PUBLIC_KEY_SIZE = 32
_EDGE_INFO = b"p2pem/edge-key/v2"
_SHA256 = hashes.SHA256()
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z ]+)-----.+?-----END \1-----\r?\n?", re.DOTALL)


class CryptoError(ProtocolError):
    """A cryptographic check failed (bad signature, ciphertext that does not authenticate)."""


class SignatureError(CryptoError):
    """A signature does not verify under the expected public key."""


class DecryptionError(CryptoError):
    """A sealed box does not authenticate under the given key and associated data."""


class MacError(CryptoError):
    """An authentication tag does not verify under the given edge key."""


class KeyFileError(ConfigError):
    """A key file is missing, unreadable, malformed or has unsafe permissions."""


@dataclass(frozen=True)
class PublicIdentity:
    """The public half of a node identity, as pinned in the roster.

    Parameters
    ----------
    signing_key : str
        Raw Ed25519 public key, 32 bytes as 64 lowercase hex digits.
    agreement_key : str
        Raw X25519 public key, 32 bytes as 64 lowercase hex digits.

    Raises
    ------
    ConfigError
        If either key is not 64 hex digits or is not a valid public key.

    Examples
    --------
    >>> ident = Identity.generate()
    >>> PublicIdentity.from_dict(ident.public.to_dict()) == ident.public
    True
    """

    signing_key: str
    agreement_key: str
    _verifier: Ed25519PublicKey = field(init=False, repr=False, compare=False)
    _agreement: X25519PublicKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        signing = _parse_hex_key(self.signing_key, "signing_key")
        agreement = _parse_hex_key(self.agreement_key, "agreement_key")
        # Normalise the spelling so that equality and serialisation are canonical.
        object.__setattr__(self, "signing_key", signing.hex())
        object.__setattr__(self, "agreement_key", agreement.hex())
        try:
            object.__setattr__(self, "_verifier", Ed25519PublicKey.from_public_bytes(signing))
            object.__setattr__(self, "_agreement", X25519PublicKey.from_public_bytes(agreement))
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise ConfigError(f"invalid public key in roster entry: {exc}") from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PublicIdentity:
        """Build from ``{"signing_key": hex, "agreement_key": hex}`` (e.g. a roster TOML/JSON entry).

        Raises
        ------
        ConfigError
            If a key is missing, of the wrong type, or extra keys are present.
        """
        expected = {"signing_key", "agreement_key"}
        unknown = set(data) - expected
        if unknown:
            raise ConfigError(f"unknown key(s) in public identity: {', '.join(sorted(unknown))}")
        missing = expected - set(data)
        if missing:
            raise ConfigError(f"public identity lacks {', '.join(sorted(missing))}")
        for name in expected:
            if not isinstance(data[name], str):
                raise ConfigError(f"public identity field {name} must be a hex string")
        return cls(signing_key=data["signing_key"], agreement_key=data["agreement_key"])

    def to_dict(self) -> dict[str, str]:
        """Return ``{"signing_key": hex, "agreement_key": hex}``, the inverse of :meth:`from_dict`."""
        return {"signing_key": self.signing_key, "agreement_key": self.agreement_key}

    @property
    def fingerprint(self) -> str:
        """Short, human-comparable digest of both public keys (16 hex digits), for logs and rosters."""
        digest = hashlib.sha256(bytes.fromhex(self.signing_key) + bytes.fromhex(self.agreement_key))
        return digest.hexdigest()[:16]

    def verify(self, data: bytes, signature: bytes) -> None:
        """Check an Ed25519 signature made by this identity.

        Raises
        ------
        SignatureError
            If ``signature`` is not a valid signature of ``data`` under :attr:`signing_key`.
        """
        try:
            self._verifier.verify(bytes(signature), bytes(data))
        except InvalidSignature:
            raise SignatureError(
                f"signature does not verify under key {self.fingerprint}"
            ) from None


@dataclass(frozen=True, eq=False)
class Identity:
    """A node's long-term secret keys: Ed25519 for signing, X25519 for key agreement.

    Create one with :meth:`generate` or :meth:`load`; hand :attr:`public` to the
    roster.  The two keys are independent (no conversion between curve forms).

    Parameters
    ----------
    signing : Ed25519PrivateKey
        Long-term signing key.
    agreement : X25519PrivateKey
        Long-term key-agreement key.
    """

    signing: Ed25519PrivateKey = field(repr=False)
    agreement: X25519PrivateKey = field(repr=False)

    def __repr__(self) -> str:
        return f"Identity(fingerprint={self.public.fingerprint!r})"

    @classmethod
    def generate(cls) -> Identity:
        """Draw a fresh identity from the operating system's CSPRNG."""
        return cls(signing=Ed25519PrivateKey.generate(), agreement=X25519PrivateKey.generate())

    @property
    def public(self) -> PublicIdentity:
        """The public half, to be pinned in the roster."""
        raw = serialization.Encoding.Raw
        fmt = serialization.PublicFormat.Raw
        return PublicIdentity(
            signing_key=self.signing.public_key().public_bytes(raw, fmt).hex(),
            agreement_key=self.agreement.public_key().public_bytes(raw, fmt).hex(),
        )

    def sign(self, data: bytes) -> bytes:
        """Ed25519 signature (64 bytes) of ``data``; deterministic, so equal data gives equal bytes."""
        return self.signing.sign(bytes(data))

    def save(self, path: str | os.PathLike[str], *, password: bytes | None = None, overwrite: bool = False) -> Path:
        """Write both private keys to one PEM file (two PKCS#8 blocks) with mode 0600.

        The file is written to a temporary file in the same directory, created with
        mode 0600 from the start, and then renamed over ``path``, so no reader ever
        sees a partial or world-readable key.

        Parameters
        ----------
        path : path-like
            Destination file.
        password : bytes, optional
            Encrypt both blocks with the best available PKCS#8 encryption.
        overwrite : bool, default False
            Replace an existing file.  Off by default: losing a long-term key
            silently invalidates the roster.

        Returns
        -------
        pathlib.Path
            The path written.

        Raises
        ------
        KeyFileError
            If the file exists and ``overwrite`` is False, or it cannot be written.
        """
        path = Path(path)
        if path.exists() and not overwrite:
            raise KeyFileError(f"key file {path} already exists; refusing to overwrite it")
        encryption: serialization.KeySerializationEncryption
        if password is None:
            encryption = serialization.NoEncryption()
        else:
            encryption = serialization.BestAvailableEncryption(password)
        pem = b"".join(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
            for key in (self.signing, self.agreement)
        )
        from p2pem.files import atomic_write

        try:
            atomic_write(path, pem, mode=KEY_FILE_MODE)
        except OSError as exc:
            raise KeyFileError(f"cannot write key file {path}: {exc.strerror}") from None
        return path

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        password: bytes | None = None,
        check_permissions: bool = True,
    ) -> Identity:
        """Read an identity written by :meth:`save`.

        Parameters
        ----------
        path : path-like
            Key file with one Ed25519 and one X25519 PKCS#8 PEM block.
        password : bytes, optional
            Password the file was saved with.
        check_permissions : bool, default True
            Refuse, like ``ssh``, a file that group or others may read or write.

        Raises
        ------
        KeyFileError
            If the file is missing, unsafe, malformed, or the password is wrong.
        """
        path = Path(path)
        try:
            mode = path.stat().st_mode
            data = path.read_bytes()
        except OSError as exc:
            raise KeyFileError(f"cannot read key file {path}: {exc.strerror}") from None
        if check_permissions and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise KeyFileError(
                f"key file {path} is accessible by group or others (mode {stat.S_IMODE(mode):04o}); "
                f"run chmod 600 on it"
            )
        signing: Ed25519PrivateKey | None = None
        agreement: X25519PrivateKey | None = None
        for block in _PEM_BLOCK.finditer(data):
            try:
                key = serialization.load_pem_private_key(block.group(0), password=password)
            except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
                raise KeyFileError(f"cannot load a key from {path}: {exc}") from None
            if isinstance(key, Ed25519PrivateKey) and signing is None:
                signing = key
            elif isinstance(key, X25519PrivateKey) and agreement is None:
                agreement = key
            else:
                raise KeyFileError(f"key file {path} holds an unexpected or repeated {type(key).__name__}")
        if signing is None or agreement is None:
            raise KeyFileError(f"key file {path} must hold one Ed25519 and one X25519 private key")
        return cls(signing=signing, agreement=agreement)


@dataclass(frozen=True)
class EdgeKey:
    """Symmetric keys of one edge ``{i, j}`` in one run; both endpoints derive the same value.

    Parameters
    ----------
    run_id : str
        Run the key belongs to.
    pair : tuple of int
        The two node ids, smaller first.
    aead_key : bytes
        64-byte AES-SIV key (AES-256 for both the S2V PRF and the CTR encryption).
    mac_key : bytes
        32-byte HMAC key of the message authentication tags (see :func:`mac`).
    """

    run_id: str
    pair: tuple[int, int]
    aead_key: bytes = field(repr=False)
    mac_key: bytes = field(repr=False)


def derive_edge_key(
    identity: Identity,
    own_id: int,
    peer: PublicIdentity,
    peer_id: int,
    run_id: str,
) -> EdgeKey:
    """Derive the symmetric keys of the edge between ``own_id`` and ``peer_id``.

    ``K = HKDF-SHA256(IKM = X25519(a_i, A_j), salt = none, info)`` with ``info`` the
    length-prefixed run id, the two node ids in increasing order and the two X25519
    public keys in that same order; 96 output bytes are split into the 64-byte AES-SIV key
    and the 32-byte MAC key.  Because ``info`` depends only on the unordered pair, node ``i``
    and node ``j`` derive the same keys, and a different run id gives unrelated keys.

    Parameters
    ----------
    identity : Identity
        This node's secret keys.
    own_id : int
        This node's id.
    peer : PublicIdentity
        The peer's pinned public identity.
    peer_id : int
        The peer's id.
    run_id : str
        Run identifier bound into the key.

    Returns
    -------
    EdgeKey

    Raises
    ------
    ConfigError
        If ``own_id == peer_id`` or the run id is empty.
    CryptoError
        If the agreement produces the all-zero secret (a low-order peer key).

    Notes
    -----
    One X25519 scalar multiplication and one HKDF; cache the result per peer.
    """
    if own_id == peer_id:
        raise ConfigError(f"node {own_id} cannot derive an edge key with itself")
    if not run_id:
        raise ConfigError("run id must not be empty")
    try:
        shared = identity.agreement.exchange(peer._agreement)
    except ValueError:
        raise CryptoError(
            f"key agreement with node {peer_id} failed: its X25519 key {peer.fingerprint} is degenerate"
        ) from None
    own_public = bytes.fromhex(identity.public.agreement_key)
    peer_public = bytes.fromhex(peer.agreement_key)
    (lo, lo_key), (hi, hi_key) = sorted([(own_id, own_public), (peer_id, peer_public)])
    run = run_id.encode("utf-8")
    info = b"".join(
        [_EDGE_INFO, struct.pack(">H", len(run)), run, struct.pack(">qq", lo, hi), lo_key, hi_key]
    )
    okm = HKDF(algorithm=hashes.SHA256(), length=96, salt=None, info=info).derive(shared)
    return EdgeKey(run_id=run_id, pair=(lo, hi), aead_key=okm[:64], mac_key=okm[64:])


def mac(key: EdgeKey, *parts: bytes) -> bytes:
    """Authentication tag of the concatenation of ``parts`` under the edge's MAC key.

    ``HMAC-SHA256(key.mac_key, parts[0] || parts[1] || ...)`` truncated to its first
    :data:`MAC_SIZE` (16) bytes, as in RFC 2104 section 5 and RFC 4868; 128 bits leave a
    forger a 2**-128 chance per attempt.

    Only the two endpoints of the edge hold ``key``, so a valid tag proves that one of
    them wrote the data; unlike a signature it cannot prove which of the two to anyone
    else (see :func:`check_mac`).

    Parameters
    ----------
    key : EdgeKey
        Key of the edge between the author and the intended verifier.
    *parts : bytes-like
        Data to authenticate, fed to the MAC in order (saves concatenating them).

    Returns
    -------
    bytes
        ``MAC_SIZE`` bytes.

    Notes
    -----
    About 2 us for a few hundred bytes, against ~100 us to verify an Ed25519 signature.
    """
    h = hmac.HMAC(key.mac_key, _SHA256)
    for part in parts:
        h.update(part)
    return h.finalize()[:MAC_SIZE]


def check_mac(key: EdgeKey, tag: bytes, *parts: bytes) -> None:
    """Check a tag made by :func:`mac` in constant time.

    Raises
    ------
    MacError
        If ``tag`` is not the tag of ``parts`` under ``key``.
    """
    if not constant_time.bytes_eq(mac(key, *parts), bytes(tag)):
        raise MacError(f"authentication tag does not verify under the edge key of {key.pair} in run {key.run_id!r}")


def seal(key: EdgeKey, plaintext: bytes, *, aad: bytes) -> bytes:
    """Encrypt and authenticate ``plaintext`` with AES-SIV (RFC 5297), ``aad`` as associated data.

    AES-SIV is deterministic authenticated encryption: the synthetic IV is a PRF of the key,
    the associated data and the plaintext.  Hence equal inputs give byte-identical boxes (a
    retransmission is recognisable as a duplicate), and there is no nonce to reuse: two
    different plaintexts under the same header still give unrelated ciphertexts, which only
    reveal whether they were equal (the caller's header, with sender, iteration, round, kind
    and receivers, makes every honest message distinct anyway).

    Parameters
    ----------
    key : EdgeKey
        Key of the edge the message travels on.
    plaintext : bytes
        Data to protect.
    aad : bytes
        Associated data authenticated but not encrypted (the envelope header).

    Returns
    -------
    bytes
        ``SIV (16 bytes) || ciphertext``; ``SEAL_OVERHEAD`` bytes longer than ``plaintext``.
    """
    return AESSIV(key.aead_key).encrypt(bytes(plaintext), [bytes(aad)])


def open_(key: EdgeKey, sealed: bytes, *, aad: bytes) -> bytes:
    """Decrypt a box made by :func:`seal`; the inverse when ``key`` and ``aad`` match.

    Raises
    ------
    DecryptionError
        If the box is truncated, or the ciphertext, synthetic IV or ``aad`` were altered,
        or it was sealed under another key.
    """
    sealed = bytes(sealed)
    if len(sealed) < SEAL_OVERHEAD:
        raise DecryptionError(
            f"sealed box of {len(sealed)} bytes is shorter than the {SEAL_OVERHEAD}-byte overhead"
        )
    try:
        return AESSIV(key.aead_key).decrypt(sealed, [bytes(aad)])
    except InvalidTag:
        raise DecryptionError(
            f"ciphertext does not authenticate under the edge key of {key.pair} in run {key.run_id!r}"
        ) from None


def sign(identity: Identity, data: bytes) -> bytes:
    """Ed25519 signature of ``data`` by ``identity`` (same as :meth:`Identity.sign`)."""
    return identity.sign(data)


def verify(public: PublicIdentity, data: bytes, signature: bytes) -> None:
    """Check that ``signature`` is ``public``'s signature of ``data``.

    Raises
    ------
    SignatureError
        If it is not.
    """
    public.verify(data, signature)


def write_tls_files(
    directory: str | os.PathLike[str], hosts: list[str], *, days: int = 30, files: tuple[str, str, str] = ("ca.crt", "broker.crt", "broker.key")
) -> tuple[Path, Path, Path]:
    """A fresh certificate authority and a broker certificate it signed, as PEM files.

    Writes ``ca.crt`` (give it to every node: it is what they trust), ``broker.crt`` and
    ``broker.key`` (mode 0600, for the broker only) into ``directory`` (other names may be
    given as ``files``, in that order).  The broker
    certificate names every entry of ``hosts`` (IP addresses as IP subject alternative names,
    others as DNS names), so a node that connects to one of them verifies it.  Both keys are
    ECDSA P-256, valid for ``days`` days from now.  The CA's private key is not kept: nothing
    else can ever be signed by it.

    Returns
    -------
    (ca, cert, key) : paths
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = Path(directory)
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "p2pem deployment CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else "p2pem broker")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / files[0], directory / files[1], directory / files[2]
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(paths[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, KEY_FILE_MODE)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return paths


def _parse_hex_key(value: str, name: str) -> bytes:
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a hex string, not {type(value).__name__}")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise ConfigError(f"{name} is not valid hex") from None
    if len(raw) != _PUBLIC_KEY_SIZE:
        raise ConfigError(
            f"{name} must be {_PUBLIC_KEY_SIZE} bytes ({2 * _PUBLIC_KEY_SIZE} hex digits), got {len(raw)}"
        )
    return raw
