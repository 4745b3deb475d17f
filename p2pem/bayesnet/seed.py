"""Randomness every node shares and no one can predict or steer: a commitment, then reveals.

The exponential mechanism's draws and the central noise must be the same on every node (so
every node ends with the same network) and unknown to anyone who sees only the release.  In
a simulation they come from the scenario's seed (:mod:`p2pem.streams`).  In a deployment
the nodes generate them jointly, through the aggregation protocol itself, so nothing but
the :class:`~p2pem.task.Task` interface is needed:

1. *commit*, before any count is aggregated: node i draws a 32-byte secret r_i from OS
   entropy, builds the hash chain r_i, H(r_i), ..., H^L(r_i) (H = SHA-256, L public,
   :func:`hash_chain`) and contributes its head H^L(r_i), as sixteen 16-bit words, in its own
   slot of an n x 16 vector (zeros elsewhere); the aggregated sum shows every node's head;
2. *reveal k*, after the k-th aggregation of counts (and before anything is drawn from it):
   node i contributes the next link H^(L-k)(r_i) in its slot; every node checks each link
   against the one before (H of the new link must be the old one; a mismatch names the
   node) and takes SHA-256 of the n links as the seed of every draw that acts on those counts.

Every link is fixed by the commitment before any count is summed, and no one can compute
another node's next link from the ones it revealed (a preimage of SHA-256), so when a node
chooses its counts for an aggregation nobody, itself included, knows the seed that will act
on them: a member cannot fabricate counts that force a selection.  What an insider *can*
still do: abort after it has seen the others' reveals (over ``pdmm-sp`` the sums converge
while a reveal runs) and so reject seeds it dislikes, one abort -- visible, and named by the
deployment -- per rejected seed; and contribute counts that are wrong whatever the seed
(input it could equally hold).  Every member, and anyone who reads the aggregation's output
(the broker and eavesdroppers of ``pdmm-sp``'s primal broadcasts, which are not encrypted),
knows every seed once revealed; they also see the exact count sums the seeds are applied to,
so the differential privacy of the release holds against those who see only the release
(:mod:`p2pem.bayesnet.privacy`).
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from p2pem.errors import ProtocolError

FloatArray = npt.NDArray[np.float64]

__all__ = ["WORDS", "commitment", "hash_chain", "joint_seed", "secret", "slot_vector", "slots", "words"]

#: 16-bit words per slot: a 256-bit digest, or a 256-bit secret.
WORDS = 16


def secret(seed: np.random.SeedSequence) -> bytes:
    """A node's 32-byte secret from its private seed sequence (OS entropy in a deployment)."""
    return seed.generate_state(8, np.uint32).astype("<u4").tobytes()


def words(data: bytes) -> FloatArray:
    """32 bytes as sixteen 16-bit words (exact in float64, and in any consensus to 1e-6)."""
    if len(data) != 2 * WORDS:
        raise ProtocolError(f"a commit-and-reveal slot holds {2 * WORDS} bytes, got {len(data)}")
    return np.frombuffer(data, dtype=">u2").astype(np.float64)


def commitment(data: bytes) -> FloatArray:
    """SHA-256 of a secret, as words."""
    return words(hashlib.sha256(data).digest())


def hash_chain(secret: bytes, length: int) -> list[bytes]:
    """[H^length(secret), ..., H(secret), secret], H = SHA-256: the head to commit, then the links to reveal in order."""
    links = [secret]
    for _ in range(length):
        links.append(hashlib.sha256(links[-1]).digest())
    return links[::-1]


def slot_vector(node_id: int, n_nodes: int, value: FloatArray) -> FloatArray:
    """The n x 16 contribution of node ``node_id``: ``value`` in its slot, zeros elsewhere."""
    out = np.zeros(n_nodes * WORDS)
    out[node_id * WORDS : (node_id + 1) * WORDS] = value
    return out


def slots(sums: FloatArray, n_nodes: int) -> list[bytes]:
    """Every node's 32 bytes from an aggregated (summed, whole-number) n x 16 vector."""
    values = np.asarray(sums).reshape(n_nodes, WORDS)
    if np.any(values < 0) or np.any(values > 0xFFFF):
        raise ProtocolError("commit-and-reveal: an aggregated word lies outside 0..65535 (a member broke the protocol)")
    return [row.astype(">u2").tobytes() for row in values]


def joint_seed(commits: list[bytes], reveals: list[bytes]) -> np.random.SeedSequence:
    """The shared seed from every node's commitment (or last link) and reveal; checks each reveal.

    Raises
    ------
    ProtocolError
        A node's reveal does not match its commitment (naming the node).
    """
    for j, (c, r) in enumerate(zip(commits, reveals, strict=True)):
        if hashlib.sha256(r).digest() != c:
            raise ProtocolError(f"commit-and-reveal: node {j}'s revealed secret does not match its commitment")
    digest = hashlib.sha256(b"".join(reveals)).digest()
    return np.random.SeedSequence(int.from_bytes(digest, "big"))
