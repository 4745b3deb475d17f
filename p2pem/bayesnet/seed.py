"""A seed every node holds and no outsider can predict: commit-and-reveal through two aggregations.

The exponential mechanism's draws and the central noise must be the same on every node (so
every node ends with the same network) and unknown to anyone who sees only the release.  In
a simulation they come from the scenario's seed (:mod:`p2pem.streams`).  In a deployment
the nodes generate the seed jointly, through the aggregation protocol itself, so nothing but
the :class:`~p2pem.task.Task` interface is needed:

1. *commit*: node i draws a 32-byte secret r_i from OS entropy and contributes
   SHA-256(r_i), as sixteen 16-bit words, in its own slot of an n x 16 vector (zeros
   elsewhere); the aggregated sum shows every node's commitment;
2. *reveal*: node i contributes r_i in its slot; every node checks each r_j against its
   commitment (a mismatch names node j) and takes SHA-256(r_0 || ... || r_{n-1}) as the seed.

A node's reveal is fixed by its commitment before anyone's secret is known, so no node can
choose the seed.  What an insider *can* do: abort after it has seen the others' reveals
(over ``pdmm-sp`` the sums converge while the reveal runs) and so reject seeds it dislikes,
one abort -- visible, and named by the deployment -- per rejected seed.  Every member, and
anyone who reads the aggregation's output (the broker and eavesdroppers of ``pdmm-sp``'s
primal broadcasts, which are not encrypted), knows the seed; they also see the exact count
sums the seed is applied to, so the differential privacy of the release holds against those
who see only the release (:mod:`p2pem.bayesnet.privacy`).
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from p2pem.errors import ProtocolError

FloatArray = npt.NDArray[np.float64]

__all__ = ["WORDS", "commitment", "joint_seed", "secret", "slot_vector", "slots", "words"]

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
    """The shared seed from every node's commitment and reveal; checks each reveal.

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
