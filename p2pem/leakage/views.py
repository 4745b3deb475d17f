"""Adversary views: what corrupt nodes, an eavesdropper, or both hold after a protocol run.

A *view* is everything an adversary can see, as a matrix with one row per Monte Carlo run
and one column (a *feature*) per scalar it holds.  Views are built from the recorded message
trace of a run (:class:`p2pem.messages.Message` objects whose payloads are vectors over the
runs, see :func:`p2pem.leakage.montecarlo.monte_carlo`), never from a re-derivation of what the
protocol would send, so a change to a protocol shows up in the leakage untouched.

Three adversaries (:data:`ADVERSARIES`):

``honest-but-curious``
    A set of corrupt nodes that follow the protocol and pool what they hold: their own
    inputs, every message any of them sent (which includes the initial duals they drew in
    ``pdmm-sp``), every message any of them received (including the initial duals on their
    edges: those travel encrypted, but end-to-end, so the receiving node decrypts them), and
    the outputs they end up with.  The federated server may be one of them
    (:data:`p2pem.messages.SERVER`).
``eavesdropper``
    Sees the payload of every message on every link that is not encrypted
    (``Message.encrypted`` is False) and nothing else: in ``pdmm-sp`` every primal broadcast
    but not the initial duals; in ``secure-sum`` the result hops but not the masked ring hops;
    in ``federated`` every upload.
``both``
    The union of the two: corrupt nodes that also tap every plaintext link.

Integer payloads (the modular ring of ``secure-sum``) are handled by what they can reveal: a
ring value on its own is uniformly distributed whatever the inputs, because the initiator's
mask is uniform over the whole ring, so its information lies only in differences of ring
values.  The view therefore holds the decoded pairwise differences of the ring values the
adversary saw; a difference that still contains the mask is uniform over the ring (its
decoded magnitude is around 2**158) and is dropped as noise.

The ``meta`` control fields of a message (pdmm-sp's convergence counters) are not part of
the view: with the Monte Carlo settings (``tol = 0``) they are constants.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError
from p2pem.messages import SERVER, Message
from p2pem.protocols.exact import MODULUS, decode_fixed

__all__ = ["ADVERSARIES", "Adversary", "View", "build_view", "node_name"]

FloatArray = npt.NDArray[np.float64]

#: The adversary models, by the names used in scenario files and leakage.json.
ADVERSARIES = ("honest-but-curious", "eavesdropper", "both")

#: A decoded ring difference larger than this still contains the uniform mask: noise.
_RING_NOISE = float(2**64)


def node_name(node: int) -> str:
    """``"server"`` for the federated server, else the node id as text."""
    return "server" if node == SERVER else str(node)


class Adversary:
    """One adversary model (immutable, compared and hashed by value).

    Parameters
    ----------
    kind : {"honest-but-curious", "eavesdropper", "both"}
    corrupt : iterable of int
        Corrupt node ids (may include :data:`~p2pem.messages.SERVER`); empty for a pure
        eavesdropper, non-empty otherwise.  Kept as a frozenset of int.
    """

    __slots__ = ("_kind", "_corrupt")

    def __init__(self, kind: str, corrupt: Iterable[int] = frozenset()) -> None:
        if kind not in ADVERSARIES:
            raise ConfigError(f"unknown adversary {kind!r} (known: {', '.join(ADVERSARIES)})")
        nodes = frozenset(int(c) for c in corrupt)
        if kind == "eavesdropper" and nodes:
            raise ConfigError("a pure eavesdropper corrupts no node; use adversary 'both' for corrupt nodes that also eavesdrop")
        if kind != "eavesdropper" and not nodes:
            raise ConfigError(f"adversary {kind!r} needs at least one corrupt node")
        self._kind = kind
        self._corrupt = nodes

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def corrupt(self) -> frozenset[int]:
        return self._corrupt

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Adversary) and (self.kind, self.corrupt) == (other.kind, other.corrupt)

    def __hash__(self) -> int:
        return hash((self.kind, self.corrupt))

    def __repr__(self) -> str:
        return f"Adversary(kind={self.kind!r}, corrupt={self.corrupt!r})"

    @property
    def eavesdrops(self) -> bool:
        """True when the adversary reads every plaintext link."""
        return self.kind in ("eavesdropper", "both")

    @property
    def corrupt_nodes(self) -> tuple[int, ...]:
        """Corrupt network nodes (the server excluded), sorted."""
        return tuple(sorted(c for c in self.corrupt if c != SERVER))

    def observes(self, msg: Message) -> bool:
        """Whether this adversary holds the payload of ``msg``."""
        if msg.sender in self.corrupt or any(r in self.corrupt for r in msg.receivers):
            return True
        return self.eavesdrops and not msg.encrypted


@dataclass(frozen=True, eq=False)
class View:
    """An adversary's view over Monte Carlo runs.

    Attributes
    ----------
    adversary : Adversary
    features : numpy.ndarray, shape (n_runs, n_features)
        One column per scalar the adversary holds.
    rounds : numpy.ndarray of int, shape (n_features,)
        Protocol round in which each feature became known (0 for own inputs and the
        initial dual exchange).
    labels : tuple of str
        What each feature is, e.g. ``"primal 3->(1, 2, 4) r5"`` or ``"input 1"``.
    """

    adversary: Adversary
    features: FloatArray
    rounds: npt.NDArray[np.int64]
    labels: tuple[str, ...]

    @property
    def n_runs(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    def until(self, last_round: int | None = None) -> FloatArray:
        """Features known after protocol round ``last_round`` (all of them for None)."""
        if last_round is None:
            return self.features
        return self.features[:, self.rounds <= last_round]


def build_view(
    trace: Iterable[Message],
    adversary: Adversary,
    *,
    inputs: npt.ArrayLike | None = None,
    outputs: npt.ArrayLike | None = None,
) -> View:
    """Build an adversary's view from a recorded message trace.

    Parameters
    ----------
    trace : iterable of Message
        The recorded messages of one aggregation, payloads of shape (n_runs,) (floats) or
        tuples of n_runs ring integers.
    adversary : Adversary
    inputs : array_like, shape (n_nodes, n_runs), optional
        Every node's input; the corrupt nodes' rows join the view (round 0).
    outputs : array_like, shape (n_nodes, n_runs), optional
        The aggregation result as every node holds it; the corrupt nodes' rows join the
        view in the last round of the trace.

    Returns
    -------
    View

    Raises
    ------
    DataError
        Payloads of different lengths, or inputs/outputs that do not match them.

    Notes
    -----
    A message is observed when a corrupt node sent or received it, or when the adversary
    eavesdrops and the message is not encrypted; a broadcast counts once.  Cost is linear
    in the size of the observed payloads, plus O(r^2 n_runs) big-integer operations for the
    r ring values observed.
    """
    columns: list[FloatArray] = []
    rounds: list[int] = []
    labels: list[str] = []
    ring: list[tuple[Message, npt.NDArray[np.object_]]] = []
    last_round = 0
    n_runs: int | None = None

    def add(values: npt.ArrayLike, rnd: int, label: str) -> None:
        nonlocal n_runs
        col = np.asarray(values, dtype=np.float64)
        if col.ndim != 1:
            raise DataError(f"view feature {label!r} must be a vector over runs, got shape {col.shape}")
        if n_runs is None:
            n_runs = col.shape[0]
        elif col.shape[0] != n_runs:
            raise DataError(f"view feature {label!r} has {col.shape[0]} runs, the others {n_runs}")
        columns.append(col)
        rounds.append(rnd)
        labels.append(label)

    for msg in trace:
        last_round = max(last_round, msg.round)
        if not adversary.observes(msg):
            continue
        label = f"{msg.kind} {node_name(msg.sender)}->{','.join(node_name(r) for r in msg.receivers)} r{msg.round}"
        if isinstance(msg.payload, np.ndarray):
            add(msg.payload, msg.round, label)
        else:
            ring.append((msg, np.array(msg.payload, dtype=object)))

    for (ma, a), (mb, b) in combinations(ring, 2):
        diff = decode_fixed(list((b - a) % MODULUS))
        if np.max(np.abs(diff), initial=0.0) < _RING_NOISE:
            add(diff, max(ma.round, mb.round), f"ring r{mb.round} - ring r{ma.round}")

    for rows, rnd, what in ((inputs, 0, "input"), (outputs, last_round, "output")):
        if rows is None:
            continue
        arr = np.asarray(rows, dtype=np.float64)
        if arr.ndim != 2:
            raise DataError(f"{what}s must have shape (n_nodes, n_runs), got {arr.shape}")
        for c in adversary.corrupt_nodes:
            if c >= arr.shape[0]:
                raise DataError(f"corrupt node {c} has no {what} row ({arr.shape[0]} nodes)")
            add(arr[c], rnd, f"{what} {c}")

    if n_runs is None:
        n_runs = _runs_of(inputs, outputs)
    features = np.column_stack(columns) if columns else np.zeros((n_runs, 0))
    return View(adversary, features, np.asarray(rounds, dtype=np.int64), tuple(labels))


def _runs_of(*arrays: npt.ArrayLike | None) -> int:
    for arr in arrays:
        if arr is not None:
            return int(np.asarray(arr).shape[-1])
    return 0
