"""Communication graphs: random geometric graphs, edge lists, and the checks protocols need."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from p2pem.errors import DataError, GraphError
from p2pem.files import csv_records, is_number, read_csv


def default_radius(n_nodes: int) -> float:
    """sqrt(2 log n / n): the radius that makes a random geometric graph connected w.h.p."""
    return math.sqrt(2.0 * math.log(n_nodes) / n_nodes)


def geometric_graph(
    n_nodes: int,
    *,
    radius: float | None = None,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    max_tries: int = 1000,
) -> nx.Graph:
    """Connected random geometric graph on the unit square.

    Nodes are ``0..n-1`` with a ``pos`` attribute; two nodes are adjacent iff their Euclidean
    distance is at most ``radius``.  Disconnected draws are discarded and redrawn from the same
    stream, so the result depends only on the seed.

    Parameters
    ----------
    n_nodes : int
        Number of nodes (>= 2).
    radius : float, optional
        Connection radius; default :func:`default_radius`.
    seed : int, optional
        Seed of a fresh ``numpy.random.default_rng``; ignored when ``rng`` is given.
    rng : numpy.random.Generator, optional
    max_tries : int
        Give up after that many disconnected draws.

    Returns
    -------
    networkx.Graph

    Raises
    ------
    GraphError
        When no connected graph was drawn in ``max_tries`` attempts (radius too small).

    Notes
    -----
    Edges are found with a k-d tree (``scipy.spatial.cKDTree.query_pairs``), O(n log n + m)
    per draw.

    Examples
    --------
    >>> g = geometric_graph(80, seed=1)
    >>> nx.is_connected(g)
    True
    """
    pos, pairs, r = geometric_edges(n_nodes, radius=radius, seed=seed, rng=rng, max_tries=max_tries)
    g = nx.Graph()
    g.add_nodes_from((i, {"pos": (float(pos[i, 0]), float(pos[i, 1]))}) for i in range(n_nodes))
    g.add_edges_from(map(tuple, pairs.tolist()))
    g.graph["radius"] = r
    return g


def geometric_edges(
    n_nodes: int,
    *,
    radius: float | None = None,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    max_tries: int = 1000,
) -> tuple[np.ndarray, np.ndarray, float]:
    """The arrays behind :func:`geometric_graph`: (positions (n, 2), edges (m, 2) with i < j in no
    particular order, radius).

    The same draws as :func:`geometric_graph` for the same seed, without building a networkx
    graph: at 10^6 nodes (35 million edges) a networkx graph needs tens of GB, these arrays
    about 0.6 GB.  Connectivity is checked with ``scipy.sparse.csgraph.connected_components``.
    Feed the edges to :meth:`p2pem.protocols.Topology.from_edges`.

    Raises
    ------
    GraphError
        As :func:`geometric_graph`.
    """
    if not isinstance(n_nodes, int) or n_nodes < 2:
        raise GraphError(f"a geometric graph needs at least 2 nodes, got {n_nodes!r}")
    r = default_radius(n_nodes) if radius is None else float(radius)
    if not r > 0:
        raise GraphError(f"radius must be positive, got {radius!r}")
    if rng is None:
        rng = np.random.default_rng(seed)
    # here: start-up time (SciPy loads only when a graph is drawn)
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    for _ in range(max_tries):
        pos = rng.random((n_nodes, 2))
        pairs = cKDTree(pos).query_pairs(r, output_type="ndarray").astype(np.int64)
        adj = sp.coo_matrix((np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n_nodes, n_nodes))
        if connected_components(adj, directed=False, return_labels=False) == 1:
            return pos, pairs, r
    raise GraphError(f"no connected geometric graph with {n_nodes} nodes and radius {r:.3g} in {max_tries} draws: increase the radius")


def graph_from_edges(edges: Iterable[Sequence[int]], n_nodes: int | None = None) -> nx.Graph:
    """Graph from an edge list over nodes ``0..n-1``; validates ids, self-loops and connectivity."""
    g = nx.Graph()
    for k, e in enumerate(edges):
        if len(e) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in e):
            raise GraphError(f"edge {k} must be a pair of integer node ids, got {list(e)!r}")
        i, j = int(e[0]), int(e[1])
        if i == j:
            raise GraphError(f"edge {k} is a self-loop on node {i}")
        if i < 0 or j < 0:
            raise GraphError(f"edge {k} has a negative node id: {list(e)!r}")
        g.add_edge(i, j)
    n = (max(g.nodes) + 1 if g.number_of_nodes() else 0) if n_nodes is None else n_nodes
    if n < 2:
        raise GraphError("a graph needs at least 2 nodes")
    missing = sorted(set(range(n)) - set(g.nodes))
    extra = sorted(set(g.nodes) - set(range(n)))
    if extra:
        raise GraphError(f"node ids {extra[:5]} are outside 0..{n - 1}")
    if missing:
        raise GraphError(f"node {missing[0]} has no edge" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    g = nx.convert_node_labels_to_integers(g, ordering="sorted") if list(g.nodes) != list(range(n)) else g
    check_connected(g)
    return g


def read_graph_file(path: str | os.PathLike[str]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The node ids and edges of a graph file, ids as text (the scenario's ``[graph] path``).

    Two formats, by the file's suffix: GraphML (``.graphml``, e.g. written by
    ``networkx.write_graphml``; its node ids) and otherwise a CSV edge list: a header row
    naming two columns (e.g. ``source,target``), then one edge per row as two node ids.
    Relabelling the ids to 0..n-1 is the caller's (:func:`p2pem.data.relabel_ids`).

    Raises
    ------
    GraphError
        The file is missing or malformed: a row that is not two ids, a self-loop, a repeated
        edge, a header row of numbers (an edge list without a header), a GraphML node
        without an edge (each names the file and line).
    """
    where = os.fspath(path)
    if Path(path).suffix.lower() == ".graphml":
        try:
            g = nx.read_graphml(path)
        except FileNotFoundError:
            raise GraphError(f"{where}: no such file") from None
        except Exception as exc:  # noqa: BLE001 - networkx raises parser errors of several kinds
            raise GraphError(f"{where}: not a GraphML file ({type(exc).__name__}: {exc})") from None
        if g.is_directed():
            g = g.to_undirected()
        loops = [(u, v) for u, v in g.edges if u == v]
        if loops:
            raise GraphError(f"{where}: self-loop on node {loops[0][0]!r}")
        nodes = tuple(str(v) for v in g.nodes)
        lonely = [v for v in g.nodes if g.degree(v) == 0]
        if lonely:
            raise GraphError(f"{where}: node {lonely[0]!r} has no edge")
        return nodes, tuple((str(u), str(v)) for u, v in g.edges)

    def parse(reader: Any, where: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        records = csv_records(reader)
        first = next(records, None)
        if first is None:
            raise GraphError(f"{where}: file is empty (expected a header row such as source,target)")
        line, head = first
        if len(head) != 2:
            raise GraphError(f"{where} line {line}: an edge list has two columns (e.g. source,target), the header has {len(head)}")
        if all(is_number(cell.strip()) for cell in head):
            raise GraphError(f"{where} line {line}: the first row holds node ids, not column names: add a header row such as source,target")
        edges: list[tuple[str, str]] = []
        seen: dict[frozenset[str], int] = {}
        for line, record in records:
            pair = [cell.strip() for cell in record]
            if len(pair) != 2 or not all(pair):
                raise GraphError(f"{where} line {line}: expected two node ids, got {record!r}")
            u, v = pair
            if u == v:
                raise GraphError(f"{where} line {line}: self-loop on node {u!r}")
            key = frozenset(pair)
            if key in seen:
                raise GraphError(f"{where} line {line}: repeats the edge of line {seen[key]} ({u!r}, {v!r})")
            seen[key] = line
            edges.append((u, v))
        if not edges:
            raise GraphError(f"{where}: no edges after the header")
        nodes = tuple(dict.fromkeys(v for edge in edges for v in edge))
        return nodes, tuple(edges)

    try:
        return read_csv(path, parse)
    except DataError as exc:  # the file cannot be read: a problem of the graph the scenario names
        raise GraphError(str(exc)) from None


def check_connected(g: nx.Graph) -> None:
    """Raise GraphError naming the components when ``g`` is not connected."""
    if g.number_of_nodes() == 0:
        raise GraphError("the graph has no nodes")
    if not nx.is_connected(g):
        comps = sorted((sorted(c) for c in nx.connected_components(g)), key=len)
        raise GraphError(
            f"the graph is disconnected ({len(comps)} components); e.g. nodes {comps[0][:5]} cannot reach the rest"
        )


def cycle_space_dimension(g: nx.Graph) -> int:
    """dim H-perp of PDMM's dual space: 2m - 2n + 1 (non-bipartite) or 2m - 2n + 2 (bipartite).

    H = span(C) + span(PC) for the 2m x n edge matrix C; the part of the initial duals in
    H-perp never converges and is what hides the inputs (Li, Heusdens & Christensen 2020).
    It is empty exactly when the connected graph is a tree.
    """
    n, m = g.number_of_nodes(), g.number_of_edges()
    return 2 * m - 2 * n + (2 if nx.is_bipartite(g) else 1)


def require_cycle(g: nx.Graph) -> None:
    """pdmm-sp needs a cycle: on a tree the dual has no subspace that hides anything."""
    check_connected(g)
    if g.number_of_edges() < g.number_of_nodes():
        raise GraphError(
            "the graph has no cycle (it is a tree): the non-converging dual subspace is empty, so pdmm-sp "
            "would hide nothing; add edges or use secure-sum"
        )


@dataclass(frozen=True)
class DegreeReport:
    """How many neighbours each node has."""

    degrees: tuple[int, ...]

    @property
    def min(self) -> int:
        return min(self.degrees)

    @property
    def max(self) -> int:
        return max(self.degrees)

    @property
    def mean(self) -> float:
        return sum(self.degrees) / len(self.degrees)

    def summary(self, labels: Sequence[Any] | None = None) -> str:
        """One line; ``labels``: the parties' names of nodes 0..n-1, shown beside their ids."""
        low = [i for i, d in enumerate(self.degrees) if d == self.min]
        name = (lambda i: f"{i} = {labels[i]}") if labels is not None else str
        shown = ", ".join(map(name, low[:5])) + (" ..." if len(low) > 5 else "")
        return f"degree min {self.min} (node {shown}), mean {self.mean:.1f}, max {self.max}"


def degree_report(g: nx.Graph) -> DegreeReport:
    return DegreeReport(tuple(int(g.degree(i)) for i in range(g.number_of_nodes())))


def hamiltonian_cycle(g: nx.Graph, *, time_budget: float = 10.0) -> list[int]:
    """A Hamiltonian cycle of ``g`` (list of nodes starting at 0; the closing edge is implied).

    Cheap necessary conditions are checked first (minimum degree 2, no cut vertex, and for a
    bipartite graph two sides of equal size, since a cycle alternates between them).  Graphs of
    up to 16 nodes are searched exhaustively, so an error there proves that no cycle exists
    (unless the search runs out of ``time_budget``, which the error then says).
    Larger graphs use Posa's rotation-extension heuristic (extend the path greedily; when both
    ends are stuck, rotate the path at a neighbour of its end), with a fixed seed so the cycle
    is reproducible.  It finds cycles in dense random geometric graphs quickly; when it gives
    up after ``time_budget`` seconds the error says so (the graph may still have a cycle).

    Raises
    ------
    GraphError
    """
    n = g.number_of_nodes()
    check_connected(g)
    if n < 3:
        raise GraphError(f"a Hamiltonian cycle needs at least 3 nodes, the graph has {n}")
    low = [v for v in g.nodes if g.degree(v) < 2]
    if low:
        raise GraphError(f"the graph has no Hamiltonian cycle: node {low[0]} has fewer than 2 neighbours")
    cut = next(iter(nx.articulation_points(g)), None)
    if cut is not None:
        raise GraphError(f"the graph has no Hamiltonian cycle: node {cut} is a cut vertex")
    if nx.is_bipartite(g):
        side = nx.bipartite.sets(g)[0]
        if 2 * len(side) != n:
            raise GraphError(
                f"the graph has no Hamiltonian cycle: it is bipartite with sides of {len(side)} and {n - len(side)} nodes"
            )
    adj = [sorted(g.neighbors(v)) for v in range(n)]
    if n <= 16:
        return _exhaustive_cycle(adj, time_budget)
    return _posa_cycle(adj, time_budget)


def _exhaustive_cycle(adj: list[list[int]], time_budget: float) -> list[int]:
    n = len(adj)
    path, visited = [0], [True] + [False] * (n - 1)
    deadline = time.monotonic() + time_budget
    calls = 0

    def extend() -> bool:
        nonlocal calls
        calls += 1
        if calls % 4096 == 0 and time.monotonic() > deadline:
            raise GraphError(f"no Hamiltonian cycle found within {time_budget:g} s of exhaustive search (unfinished: the graph may have one)")
        v = path[-1]
        if len(path) == n:
            return 0 in adj[v]
        for u in adj[v]:
            if not visited[u]:
                visited[u] = True
                path.append(u)
                if extend():
                    return True
                path.pop()
                visited[u] = False
        return False

    if extend():
        return path
    raise GraphError("the graph has no Hamiltonian cycle (exhaustive search)")


def _posa_cycle(adj: list[list[int]], time_budget: float) -> list[int]:
    n = len(adj)
    adj_sets = [set(a) for a in adj]
    rng = np.random.default_rng(0)
    deadline = time.monotonic() + time_budget
    while time.monotonic() < deadline:
        path = [int(rng.integers(n))]
        in_path = [False] * n
        in_path[path[0]] = True
        free = [len(a) for a in adj]
        for u in adj[path[0]]:
            free[u] -= 1
        for step in range(50 * n * n):
            # the inner loop alone can run for seconds on a large graph: check the budget here too
            if step % 1024 == 1023 and time.monotonic() > deadline:
                break
            end = path[-1]
            options = [u for u in adj[end] if not in_path[u]]
            if not options and any(not in_path[u] for u in adj[path[0]]):
                path.reverse()
                continue
            if options:
                u = min(options, key=lambda w: (free[w], rng.random()))
                path.append(u)
                in_path[u] = True
                for w in adj[u]:
                    free[w] -= 1
                continue
            if len(path) == n and path[0] in adj_sets[end]:
                k = path.index(0)
                return path[k:] + path[:k]
            pivots = [u for u in adj[end] if u != path[-2]]
            index = {v: i for i, v in enumerate(path)} if len(pivots) else {}
            i = index[pivots[int(rng.integers(len(pivots)))]]
            path[i + 1 :] = path[:i:-1]
            if time.monotonic() > deadline:
                break
    raise GraphError(f"no Hamiltonian cycle found within {time_budget:g} s of search (the graph may have none)")
