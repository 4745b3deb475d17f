"""Going on without nodes that dropped out: the survivors' topology, and the matching simulation.

With ``on_dropout = "continue"`` a deployment that loses a node agrees to drop it and re-runs
the EM iteration in progress among the survivors (see :mod:`p2pem.deploy.runtime`).  From
then on the model is the exact EM of the surviving nodes' rows: the average of their
statistics.  :func:`survivor_topology` is the graph they continue on, relabelled
``0..n'-1`` in id order, and :func:`simulate_with_dropouts` the simulation with the same
dropout schedule ``{node: EM iteration}``, so a deployment in which a node was killed can be
checked against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from p2pem.deploy.cuts import bridges
from p2pem.em import EMSettings, EMState
from p2pem.errors import ProtocolError
from p2pem.protocols.base import ProtocolSpec, Topology, diameter_bound
from p2pem.task import drive

__all__ = ["simulate_with_dropouts", "survivor_topology"]


def survivor_topology(neighbours: Sequence[Sequence[int]], dropped: set[int] | frozenset[int]) -> tuple[list[int], Topology]:
    """The graph without ``dropped``, relabelled in id order.

    Parameters
    ----------
    neighbours : sequence of sequence of int
        Adjacency lists of the full graph (the roster's).
    dropped : set of int

    Returns
    -------
    survivors : list of int
        Global ids of the survivors; survivor ``survivors[i]`` is node ``i`` of the topology.
    topology : Topology

    Raises
    ------
    ProtocolError
        Saying why the survivors cannot go on: fewer than 3 of them, their graph is
        disconnected, a survivor keeps fewer than two neighbours (its single neighbour
        would learn its statistics from the consensus), or the graph has a bridge (it is no
        longer 2-edge-connected: dropping one more node or edge could isolate a part, and
        the nodes at the bridge's ends see everything that crosses it).
    """
    survivors = [i for i in range(len(neighbours)) if i not in dropped]
    local = {g: i for i, g in enumerate(survivors)}
    nbrs = tuple(tuple(sorted(local[j] for j in neighbours[g] if j in local)) for g in survivors)
    gone = ", ".join(map(str, sorted(dropped)))
    if len(survivors) < 3:
        raise ProtocolError(f"without node(s) {gone} fewer than 3 nodes remain")
    diameter = diameter_bound(nbrs)
    if diameter is None:
        raise ProtocolError(f"without node(s) {gone} the graph is disconnected")
    lonely = [survivors[i] for i, nb in enumerate(nbrs) if len(nb) < 2]
    if lonely:
        k = lonely[0]
        raise ProtocolError(
            f"without node(s) {gone} node {k} keeps {'a single neighbour' if nbrs[local[k]] else 'no neighbour'}, "
            f"which would learn its statistics"
        )
    cut = bridges(nbrs)
    if cut:
        u, v = (survivors[k] for k in cut[0])
        raise ProtocolError(f"without node(s) {gone} the edge {u}-{v} is a bridge (the graph is no longer 2-edge-connected)")
    return survivors, Topology(n_nodes=len(survivors), neighbours=nbrs, diameter=diameter)


def simulate_with_dropouts(
    parts: Sequence[np.ndarray],
    neighbours: Sequence[Sequence[int]],
    protocol: ProtocolSpec,
    settings: EMSettings,
    schedule: Mapping[int, int],
    *,
    rngs: Sequence[np.random.Generator],
) -> tuple[Any, int]:
    """EM over a network whose node ``k`` leaves before EM iteration ``schedule[k]``.

    Each aggregation runs over the nodes present (their topology from
    :func:`survivor_topology`), with the protocol's vectorised path, so the model is the EM
    of the rows the survivors hold from then on, up to the consensus error.

    Parameters
    ----------
    parts : list of (n_i, d) arrays
    neighbours : adjacency lists of the full graph
    protocol : ProtocolSpec
    settings : EMSettings
    schedule : mapping node -> EM iteration
        The iteration whose aggregation first runs without the node (what a deployment's
        ``result.json`` lists under ``deployment.dropped``).
    rngs : list of Generator
        One per node (e.g. :func:`p2pem.simulate.protocol_streams`).

    Returns
    -------
    (model, int)
        The survivors' model (the family's single parameters) and the number of EM iterations.
    """
    dropped: set[int] = set()
    survivors: list[int] = list(range(len(parts)))

    def aggregate(it: int, values: np.ndarray) -> np.ndarray:
        dropped.update(k for k, at in schedule.items() if at <= it)
        survivors[:], topology = survivor_topology(neighbours, dropped)
        out = protocol.aggregate(values[survivors], topology, [rngs[g] for g in survivors], it)
        averages = np.empty_like(values)
        averages[:] = out.results[0]  # the dropped nodes' rows are never read again
        averages[survivors] = out.results
        return averages

    state = drive(EMState([np.asarray(p, dtype=float) for p in parts], settings, len(parts)), aggregate)
    return state.params(survivors[0]), state.n_iter
