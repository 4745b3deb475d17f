"""Every random stream p2pem derives from a seed, in one place.

Simulation randomness comes from explicit :class:`numpy.random.Generator` objects derived from
one scenario seed (deployment secrets come from OS entropy instead, see :mod:`p2pem.deploy`).
A derived stream is always a *child* of its parent ``SeedSequence``
(:func:`child`): ``SeedSequence(parent.entropy, spawn_key=parent.spawn_key + key)``, which is
what ``parent.spawn()`` would give, but built from the key, so it depends only on the parent
and the key, never on how often the parent was used before, and a node process can rebuild
its own stream from the seed and its id alone.  NumPy guarantees that children with different
spawn keys are independent.

==================================  ==================================================
stream                              derivation
==================================  ==================================================
scenario stream ``name``            ``child(SeedSequence(seed), STREAMS.index(name))``
public init seed                    first word of the ``"init"`` stream (:func:`init_seed`)
protocol stream of node i           ``child(protocol seed, i)``; ``i = n``: the asynchronous
                                    schedule / dp-central's aggregator (:func:`protocol_streams`)
trade-off key ``(k, ...)``          ``child(scenario stream "montecarlo", k, ...)``
                                    (:func:`montecarlo_child`)
synthetic release r                 ``child(scenario stream "synth", 0, r)``; the report's
                                    row samples ``child(.., 1)`` (:func:`synth_child`)
Bayesian-network release            ``child(scenario stream "bayesnet", 0)`` the seed every
                                    node shares, ``(1, i)`` node i's private seed (noise
                                    shares, commit-and-reveal) (:func:`bayesnet_child`)
==================================  ==================================================

This module is a leaf: it imports NumPy and :mod:`p2pem.errors` only.
"""

from __future__ import annotations

import numpy as np

from p2pem.errors import ConfigError

__all__ = [
    "STREAMS",
    "as_seed_sequence",
    "bayesnet_child",
    "child",
    "init_seed",
    "montecarlo_child",
    "node_stream",
    "node_stream_key",
    "protocol_streams",
    "scenario_streams",
    "synth_child",
]

#: Names of the random streams derived from a scenario's seed, in spawn order.  Append new
#: streams at the end: a stream's identity is its position.
STREAMS = ("data", "graph", "init", "protocol", "montecarlo", "synth", "bayesnet")

Seed = int | np.random.SeedSequence


def as_seed_sequence(seed: Seed) -> np.random.SeedSequence:
    """``seed`` itself when it is a ``SeedSequence``, else ``SeedSequence(seed)``."""
    return seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)


def child(parent: Seed, *key: int) -> np.random.SeedSequence:
    """The child of ``parent`` at spawn key ``parent.spawn_key + key`` (module docstring).

    ``child(ss, i)`` equals ``ss.spawn(i + 1)[i]`` on a fresh ``ss``, without advancing ``ss``.
    """
    ss = as_seed_sequence(parent)
    return np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, *key), pool_size=ss.pool_size)


def scenario_streams(seed: int) -> dict[str, np.random.SeedSequence]:
    """Derive a scenario's independent random streams from its one seed.

    Parameters
    ----------
    seed : int
        Non-negative integer.

    Returns
    -------
    dict of str to numpy.random.SeedSequence
        Keys ``"data"``, ``"graph"``, ``"init"``, ``"protocol"``, ``"montecarlo"``,
        ``"synth"``, ``"bayesnet"`` (:data:`STREAMS`).  Make a generator with
        ``numpy.random.default_rng(streams["data"])``; split a stream further with
        :func:`child`.

    Raises
    ------
    ConfigError
        ``seed`` is not a non-negative integer.

    Notes
    -----
    Stream ``i`` of :data:`STREAMS` is ``SeedSequence(seed, spawn_key=(i,))``,
    which is exactly ``SeedSequence(seed).spawn(len(STREAMS))[i]``.  Building it from the
    spawn key keeps it stable: it depends only on ``seed`` and the stream's
    position, not on how many streams were spawned before.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    root = np.random.SeedSequence(int(seed))
    return {name: child(root, i) for i, name in enumerate(STREAMS)}


def init_seed(streams: dict[str, np.random.SeedSequence]) -> int:
    """The public seed of the initial draw (:func:`p2pem.gmm.init_from_global`): the first
    word of the ``"init"`` stream."""
    return int(streams["init"].generate_state(1)[0])


def node_stream(seed: Seed, node: int) -> np.random.SeedSequence:
    """Node ``node``'s protocol stream: what :func:`protocol_streams` gives it, as a
    ``SeedSequence`` (a deployment kit writes its entropy and spawn key into a node's config)."""
    return child(seed, node)


def node_stream_key(seed: Seed, node: int) -> tuple[int, tuple[int, ...]]:
    """``(entropy, spawn_key)`` of :func:`node_stream`: what a deployment kit records in a node's
    config so that ``SeedSequence(entropy, spawn_key=spawn_key)`` rebuilds the stream.

    Raises
    ------
    ConfigError
        The stream's entropy is not one integer (a seed from a sequence of words).
    """
    ss = node_stream(seed, node)
    if not isinstance(ss.entropy, (int, np.integer)):
        raise ConfigError("a reproducible deployment needs an integer seed")
    return int(ss.entropy), tuple(int(k) for k in ss.spawn_key)


def protocol_streams(seed: Seed, n_nodes: int) -> list[np.random.Generator]:
    """Per-node protocol generators plus, last, the asynchronous schedule generator.

    Generator i (0 <= i <= n) draws from :func:`node_stream` ``(seed, i)``, so the same seed
    object gives the same streams however often it is used, and a node process can rebuild
    its own stream from the seed and its id alone.  The last one (i = n) schedules the
    asynchronous wake-ups, or is ``dp-central``'s aggregator.
    """
    return [np.random.default_rng(node_stream(seed, i)) for i in range(n_nodes + 1)]


def montecarlo_child(seed: int, *key: int) -> np.random.SeedSequence:
    """``child(scenario_streams(seed)["montecarlo"], *key)``: the trade-off sweep's streams
    (``(0,)`` held-out rows, ``(1, s)`` protocol seed s, ``(2,)`` class split, ``(3, s)`` the
    classifier's seed s; see :mod:`p2pem.dp.tradeoff`)."""
    return child(scenario_streams(seed)["montecarlo"], *key)


def synth_child(seed: int, *key: int) -> np.random.SeedSequence:
    """``child(scenario_streams(seed)["synth"], *key)``: ``(0, r)`` draws synthetic release r,
    ``(1,)`` the synthetic-data report's row samples (see :mod:`p2pem.synth`)."""
    return child(scenario_streams(seed)["synth"], *key)


def bayesnet_child(seed: int, *key: int) -> np.random.SeedSequence:
    """``child(scenario_streams(seed)["bayesnet"], *key)``: ``(0,)`` the seed every node of a
    simulated Bayesian-network release shares, ``(1, i)`` node i's private seed (see
    :mod:`p2pem.bayesnet.task`)."""
    return child(scenario_streams(seed)["bayesnet"], *key)
