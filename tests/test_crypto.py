from __future__ import annotations

import json
import os
import stat

import pytest

from p2pem.deploy.crypto import (
    MAC_SIZE,
    SEAL_OVERHEAD,
    DecryptionError,
    Identity,
    KeyFileError,
    MacError,
    PublicIdentity,
    SignatureError,
    check_mac,
    derive_edge_key,
    mac,
    open_,
    seal,
    sign,
    verify,
)
from p2pem.errors import ConfigError, ProtocolError


@pytest.fixture(scope="module")
def ids() -> dict[int, Identity]:
    return {i: Identity.generate() for i in range(4)}


def test_both_endpoints_derive_the_same_edge_key(ids):
    k01 = derive_edge_key(ids[0], 0, ids[1].public, 1, "run-a")
    k10 = derive_edge_key(ids[1], 1, ids[0].public, 0, "run-a")
    assert k01 == k10
    assert k01.pair == (0, 1)
    assert len(k01.aead_key) == 64 and len(k01.mac_key) == 32
    assert k01.aead_key[:32] != k01.aead_key[32:] and k01.mac_key not in k01.aead_key


def test_edge_key_depends_on_run_and_pair(ids):
    base = derive_edge_key(ids[0], 0, ids[1].public, 1, "run-a")
    other_run = derive_edge_key(ids[0], 0, ids[1].public, 1, "run-b")
    other_pair = derive_edge_key(ids[0], 0, ids[2].public, 2, "run-a")
    # Same keys, but the ids bound into HKDF differ: a relabelled roster gives another key.
    relabelled = derive_edge_key(ids[0], 0, ids[1].public, 3, "run-a")
    keys = {k.aead_key for k in (base, other_run, other_pair, relabelled)}
    assert len(keys) == 4


def test_mac_is_bound_to_key_and_data(ids):
    k01 = derive_edge_key(ids[0], 0, ids[1].public, 1, "run-a")
    tag = mac(k01, b"head", b"er")
    assert len(tag) == MAC_SIZE and tag == mac(k01, b"header")  # parts are concatenated
    check_mac(derive_edge_key(ids[1], 1, ids[0].public, 0, "run-a"), tag, b"header")  # the other end agrees
    others = [
        (derive_edge_key(ids[0], 0, ids[2].public, 2, "run-a"), b"header"),  # another edge
        (derive_edge_key(ids[0], 0, ids[1].public, 1, "run-b"), b"header"),  # another run
        (k01, b"headex"),
    ]
    for key, data in others:
        with pytest.raises(MacError):
            check_mac(key, tag, data)
    with pytest.raises(MacError):
        check_mac(k01, tag[:-1], b"header")
    assert issubclass(MacError, ProtocolError)


def test_edge_key_with_oneself_is_refused(ids):
    with pytest.raises(ConfigError):
        derive_edge_key(ids[0], 0, ids[1].public, 0, "run-a")


def test_seal_open_roundtrip_and_determinism(ids):
    key = derive_edge_key(ids[0], 0, ids[1].public, 1, "r")
    box = seal(key, b"secret payload", aad=b"header")
    assert len(box) == len(b"secret payload") + SEAL_OVERHEAD
    assert b"secret payload" not in box
    assert open_(key, box, aad=b"header") == b"secret payload"
    # Equal inputs give equal boxes (AES-SIV is deterministic); a different plaintext under
    # the same header a different synthetic IV, so nothing like a reused nonce can happen.
    assert seal(key, b"secret payload", aad=b"header") == box
    other = seal(key, b"secret paylaod", aad=b"header")
    assert other[:16] != box[:16]
    # the box is AES-SIV of RFC 5297 with the header as associated data, as the library computes it
    from cryptography.hazmat.primitives.ciphers.aead import AESSIV

    assert box == AESSIV(key.aead_key).encrypt(b"secret payload", [b"header"])


@pytest.mark.parametrize("where", ["siv", "ciphertext", "last byte"])
def test_tampered_box_is_rejected(ids, where):
    key = derive_edge_key(ids[0], 0, ids[1].public, 1, "r")
    box = bytearray(seal(key, b"0123456789", aad=b"h"))
    index = {"siv": 0, "ciphertext": 18, "last byte": len(box) - 1}[where]
    box[index] ^= 0x01
    with pytest.raises(DecryptionError):
        open_(key, bytes(box), aad=b"h")


def test_tampered_aad_wrong_key_and_truncation_are_rejected(ids):
    key = derive_edge_key(ids[0], 0, ids[1].public, 1, "r")
    box = seal(key, b"payload", aad=b"header")
    with pytest.raises(DecryptionError):
        open_(key, box, aad=b"headeR")
    with pytest.raises(DecryptionError):
        open_(derive_edge_key(ids[0], 0, ids[2].public, 2, "r"), box, aad=b"header")
    with pytest.raises(DecryptionError):
        open_(key, box[:10], aad=b"header")
    assert issubclass(DecryptionError, ProtocolError)


def test_signature_verifies_only_under_the_signer(ids):
    signature = sign(ids[0], b"message")
    verify(ids[0].public, b"message", signature)
    with pytest.raises(SignatureError):
        verify(ids[1].public, b"message", signature)
    with pytest.raises(SignatureError):
        verify(ids[0].public, b"messagE", signature)
    with pytest.raises(SignatureError):
        verify(ids[0].public, b"message", sign(ids[1], b"message"))
    assert sign(ids[0], b"message") == signature  # Ed25519 is deterministic


def test_key_file_roundtrip_and_permissions(tmp_path, ids):
    path = ids[0].save(tmp_path / "node0.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert text.count("-----BEGIN PRIVATE KEY-----") == 2
    loaded = Identity.load(path)
    assert loaded.public == ids[0].public
    assert loaded.sign(b"x") == ids[0].sign(b"x")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left
    with pytest.raises(KeyFileError, match="already exists"):
        ids[1].save(path)
    ids[1].save(path, overwrite=True)
    assert Identity.load(path).public == ids[1].public


def test_key_file_with_password_and_bad_files(tmp_path, ids):
    path = ids[2].save(tmp_path / "enc.key", password=b"hunter2")
    assert "ENCRYPTED PRIVATE KEY" in path.read_text()
    assert Identity.load(path, password=b"hunter2").public == ids[2].public
    with pytest.raises(KeyFileError):
        Identity.load(path, password=b"wrong")
    with pytest.raises(KeyFileError):
        Identity.load(tmp_path / "missing.key")
    loose = ids[3].save(tmp_path / "loose.key")
    os.chmod(loose, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        Identity.load(loose)
    assert Identity.load(loose, check_permissions=False).public == ids[3].public
    half = tmp_path / "half.key"
    blocks = ids[3].save(tmp_path / "full.key").read_text().split("-----END PRIVATE KEY-----")
    half.write_text(blocks[0] + "-----END PRIVATE KEY-----\n")
    os.chmod(half, 0o600)
    with pytest.raises(KeyFileError, match="one Ed25519 and one X25519"):
        Identity.load(half)


def test_public_identity_serialises_for_the_roster(ids):
    public = ids[0].public
    roundtrip = PublicIdentity.from_dict(json.loads(json.dumps(public.to_dict())))
    assert roundtrip == public
    assert hash(roundtrip) == hash(public)
    assert PublicIdentity(public.signing_key.upper(), public.agreement_key) == public
    assert len(public.fingerprint) == 16
    assert public.signing_key not in repr(ids[0])
    with pytest.raises(ConfigError):
        PublicIdentity("00" * 31, public.agreement_key)
    with pytest.raises(ConfigError):
        PublicIdentity("zz" * 32, public.agreement_key)
    with pytest.raises(ConfigError):
        PublicIdentity.from_dict({"signing_key": public.signing_key})
    with pytest.raises(ConfigError):
        PublicIdentity.from_dict({**public.to_dict(), "extra": "1"})
