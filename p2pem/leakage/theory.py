"""What each protocol discloses by design (the floor), in closed form, and the topology behind it.

For i.i.d. Gaussian inputs every protocol here reveals, to a given adversary, the sums of
some disjoint groups of honest inputs (a group of one is full disclosure) and nothing more,
in the limit the protocol is designed for.  That is the *floor*: what any protocol that
computes these sums exactly discloses (pdmm-sp at a finite perturbation can leak more, which
the analysis reports beside it).  :func:`disclosed_groups` names those groups,
:func:`disclosure_messages` says them in words per protocol, and :func:`closed_form_bits`
turns the group of a node into bits with
:func:`~p2pem.leakage.closed_forms.sum_leakage_bits`: I(X_i; sum of its group of n_g inputs)
= 1/2 log2(n_g / (n_g - 1)).

``federated``
    The server sees every upload, so a corrupt server or an eavesdropper (uploads are
    plaintext) learns every input.  Corrupt clients alone learn only the output: the sum of
    all honest inputs once their own are subtracted.
``secure-sum``
    The ring hops are encrypted, the result hops are not.  Corrupt nodes split the ring
    into arcs of consecutive honest nodes; two corrupt nodes around an arc subtract the
    partial sums they pass on and learn that arc's sum (an arc of one node: its input), and
    the output gives the arc that wraps past the initiator.  An eavesdropper alone learns
    the output, the sum of all inputs.
``pdmm-sp``
    Corrupt nodes learn the sum of every connected component of the honest subgraph (the
    graph without the corrupt nodes); a node with no honest neighbour is a component of
    one and is disclosed.  Within a component, the part of the initial duals in the
    non-converging subspace hides the individual inputs; the hiding is perfect as the
    perturbation's standard deviation grows, so at finite std pdmm-sp leaks slightly more
    than this floor.  The primal broadcasts are plaintext but the initial duals are
    encrypted, so eavesdropping adds nothing: an eavesdropper alone learns only the sum of
    all inputs.  With ``encrypt_duals = false`` (the insecure comparison) an eavesdropper
    reads the initial duals and subtracts them from the first broadcasts: every input is
    disclosed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.leakage.closed_forms import group_sum_leakage_bits, sum_leakage_bits
from p2pem.leakage.views import Adversary
from p2pem.messages import SERVER
from p2pem.protocols import Federated, PdmmSP, ProtocolSpec, SecureSum, Topology

__all__ = [
    "TopologyReport",
    "closed_form_bits",
    "describe_group",
    "disclosed_groups",
    "disclosure_messages",
    "topology_report",
]


@dataclass(frozen=True)
class TopologyReport:
    """The honest subgraph as it matters for pdmm-sp.

    Attributes
    ----------
    corrupt : tuple of int
        Corrupt network nodes.
    components : tuple of tuple of int
        Connected components of the graph restricted to honest nodes, each sorted, largest
        first.
    isolated : tuple of int
        Honest nodes with no honest neighbour (pdmm-sp discloses their inputs to the
        corrupt nodes).
    """

    corrupt: tuple[int, ...]
    components: tuple[tuple[int, ...], ...]
    isolated: tuple[int, ...]

    def warnings(self, label: Callable[[int], str] = str) -> list[str]:
        """One line per problem, naming nodes with ``label(node_id)``."""
        out = []
        for i in self.isolated:
            out.append(f"honest node {label(i)} has no honest neighbour (its neighbours are all corrupt): pdmm-sp discloses its input")
        if len(self.components) > 1:
            parts = "; ".join("{" + ", ".join(label(i) for i in c) + "}" for c in self.components)
            out.append(f"the honest nodes form {len(self.components)} components, each one's sum is disclosed: {parts}")
        return out

    def summary(self, label: Callable[[int], str] = str) -> str:
        parts = ", ".join("{" + ", ".join(label(i) for i in c) + "}" for c in self.components)
        return f"honest component{'s' if len(self.components) != 1 else ''}: {parts}"


def topology_report(graph: nx.Graph, corrupt: Sequence[int]) -> TopologyReport:
    """Honest components and honest nodes without honest neighbours.

    Parameters
    ----------
    graph : networkx.Graph
        The communication graph over nodes ``0..n-1``.
    corrupt : sequence of int
        Corrupt node ids (the federated server, ``-1``, is ignored).

    Returns
    -------
    TopologyReport

    Notes
    -----
    O(n + m).  These two facts decide what pdmm-sp can hide (Li, Heusdens & Christensen
    2020): the adversary learns the sum of each honest component, nothing finer.
    """
    bad = {int(c) for c in corrupt if c != SERVER}
    honest = [v for v in sorted(graph.nodes) if v not in bad]
    sub = graph.subgraph(honest)
    comps = sorted((tuple(sorted(c)) for c in nx.connected_components(sub)), key=lambda c: (-len(c), c))
    isolated = tuple(v for v in honest if all(u in bad for u in graph.neighbors(v)))
    return TopologyReport(tuple(sorted(bad)), tuple(comps), isolated)


def disclosed_groups(
    spec: ProtocolSpec,
    topology: Topology,
    graph: nx.Graph,
    adversary: Adversary,
) -> list[tuple[int, ...]] | None:
    """Groups of honest nodes whose input sums ``spec`` discloses to ``adversary``.

    Parameters
    ----------
    spec : ProtocolSpec
        ``federated``, ``secure-sum`` or synchronous ``pdmm-sp``.
    topology : Topology
        The topology the protocol ran on (its ring for secure-sum).
    graph : networkx.Graph
    adversary : Adversary

    Returns
    -------
    list of tuple of int, or None
        Disjoint sorted groups (a group of one: that input is disclosed); None for a
        protocol without a known closed form.
    """
    n = topology.n_nodes
    corrupt = set(adversary.corrupt_nodes)
    honest = [i for i in range(n) if i not in corrupt]
    singles: list[tuple[int, ...]] = [(i,) for i in honest]
    if isinstance(spec, Federated):
        if SERVER in adversary.corrupt or adversary.eavesdrops:
            return singles
        return [tuple(honest)]
    if isinstance(spec, SecureSum):
        ring = topology.ring
        if ring is None:
            return None
        if not corrupt:
            return [tuple(honest)]
        start = next(pos for pos, v in enumerate(ring) if v in corrupt)
        order = ring[start:] + ring[:start]  # begins at a corrupt node
        groups: list[tuple[int, ...]] = []
        arc: list[int] = []
        for v in order[1:] + order[:1]:
            if v in corrupt:
                if arc:
                    groups.append(tuple(sorted(arc)))
                arc = []
            else:
                arc.append(v)
        return groups
    if isinstance(spec, PdmmSP):
        if spec.asynchronous:
            return None
        if adversary.eavesdrops and not spec.encrypt_duals:
            return singles
        return [tuple(c) for c in topology_report(graph, sorted(corrupt)).components]
    return None


def closed_form_bits(groups: list[tuple[int, ...]] | None, node: int, variances: Sequence[float] | npt.ArrayLike | None = None) -> float | None:
    """I(X_node; sum of its group) in bits, ``math.inf`` if disclosed, 0 if in no group.

    For i.i.d. Gaussian inputs (``variances`` None) :func:`~p2pem.leakage.closed_forms.sum_leakage_bits`;
    for independent Gaussian inputs of the given per-node variances
    :func:`~p2pem.leakage.closed_forms.group_sum_leakage_bits`.
    """
    if groups is None:
        return None
    for g in groups:
        if node in g:
            if variances is None:
                return sum_leakage_bits(len(g))
            v = np.asarray(variances, dtype=np.float64)
            return group_sum_leakage_bits([float(v[j]) for j in g], g.index(node))
    return 0.0


def describe_group(groups: list[tuple[int, ...]] | None, node: int, label: Callable[[int], str] = str) -> str:
    """The closed form as text, e.g. ``"I(X1; X1+X3+X5)"`` or ``"full disclosure"``."""
    if groups is None:
        return "no closed form"
    for g in groups:
        if node in g:
            if len(g) == 1:
                return "full disclosure"
            if len(g) > 5:
                return f"I(X{label(node)}; sum of {len(g)} inputs)"
            return f"I(X{label(node)}; " + "+".join(f"X{label(i)}" for i in g) + ")"
    return "nothing"


def _names(nodes: Sequence[int], label: Callable[[int], str]) -> str:
    return "{" + ", ".join(label(i) for i in nodes) + "}"


def disclosure_messages(
    spec: ProtocolSpec,
    protocol_label: str,
    topology: Topology,
    graph: nx.Graph,
    adversary: Adversary,
    label: Callable[[int], str] = str,
) -> list[str]:
    """What ``spec`` discloses to ``adversary`` beyond the sum of all honest inputs, as text.

    One line per disclosed input or partial sum, each starting with ``protocol_label`` and
    saying why (which ring neighbours, the server, the missing honest neighbours), so a
    user reads it before any estimate.  The sum of all honest inputs is not listed: every
    exact protocol reveals it to corrupt nodes that know the output and their own inputs.

    Parameters
    ----------
    spec : ProtocolSpec
    protocol_label : str
        How the run is named (e.g. ``"pdmm-sp (std 1)"``).
    topology : Topology
        What the protocol runs on (its ring for secure-sum).
    graph : networkx.Graph
    adversary : Adversary
    label : callable
        How nodes are printed.

    Returns
    -------
    list of str
    """
    groups = disclosed_groups(spec, topology, graph, adversary)
    if groups is None:
        return []
    corrupt = set(adversary.corrupt_nodes)
    honest = tuple(i for i in range(topology.n_nodes) if i not in corrupt)
    if len(groups) == 1 and groups[0] == honest:
        return []
    who = "an eavesdropper" if adversary.kind == "eavesdropper" else "the corrupt nodes " + _names(sorted(corrupt), label)
    if adversary.kind == "both":
        who += " reading every plaintext link"
    out = []
    if isinstance(spec, Federated):
        why = "the server is corrupt and sees every upload" if SERVER in adversary.corrupt else "the uploads to the server travel in plaintext"
        return [f"{protocol_label}: every honest input is disclosed to {who}: {why}"]
    if isinstance(spec, PdmmSP) and adversary.eavesdrops and not spec.encrypt_duals:
        return [f"{protocol_label}: every honest input is disclosed to {who}: the initial duals travel in plaintext"]
    ring = topology.ring or ()
    for g in groups:
        if isinstance(spec, SecureSum):
            # the arc's corrupt ends: walk the ring both ways from a member to a corrupt node
            ends = []
            for step in (-1, 1):
                k = ring.index(g[0])
                while ring[k % len(ring)] not in corrupt:
                    k += step
                ends.append(ring[k % len(ring)])
            why = f"an arc of the secure-sum ring between corrupt nodes {label(ends[0])} and {label(ends[1])}"
        else:
            why = "it has no honest neighbour" if len(g) == 1 else "a connected component of the honest nodes"
        if len(g) == 1:
            out.append(f"{protocol_label}: honest node {label(g[0])}'s input is disclosed to {who} ({why})")
        else:
            out.append(f"{protocol_label}: the sum of the inputs of {_names(g, label)} is disclosed to {who} ({why})")
    return out
