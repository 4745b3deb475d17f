"""What removing one node or one edge does to a deployment's graph: cut vertices, bridges, separation.

Pure Python on adjacency lists (a node process never loads networkx), each linear in the size
of the graph except :func:`separator`, which tries each candidate in turn.

* A *cut vertex* (articulation point) is a node whose removal disconnects the graph.  A member
  there sits on every path between the parts it separates: it can show each part its own
  numbers, and only the final agreement across the whole graph
  (:mod:`p2pem.deploy.agreement`) notices.  :func:`cut_vertices` lists them;
  :func:`cut_warnings` words them for ``p2pem keys roster`` and ``p2pem deploy``.
* A *bridge* is an edge whose removal disconnects the graph.  A graph without bridges is
  2-edge-connected; a survivor graph that loses it, or leaves a node fewer than two
  neighbours, is refused after a dropout (:func:`p2pem.deploy.dropout.survivor_topology`):
  a node with one neighbour discloses its statistics to it.
* :func:`separates` and :func:`separator` say which node every path between two nodes passes
  (the plausibility of a split, :mod:`p2pem.deploy.control`).

Examples
--------
>>> path = ((1,), (0, 2), (1,))          # 0 - 1 - 2
>>> cut_vertices(path), bridges(path), separates(path, 1, 0, 2)
([1], [(0, 1), (1, 2)], True)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["bridges", "cut_vertices", "cut_warnings", "reachable", "separates", "separator"]


def reachable(neighbours: Sequence[Sequence[int]], start: int, removed: Collection[int] = ()) -> set[int]:
    """The nodes reachable from ``start`` without passing through ``removed``."""
    if start in removed:
        return set()
    seen, stack = {start}, [start]
    while stack:
        for j in neighbours[stack.pop()]:
            if j not in seen and j not in removed:
                seen.add(j)
                stack.append(j)
    return seen


def separates(neighbours: Sequence[Sequence[int]], v: int, a: int, b: int) -> bool:
    """Does every path between ``a`` and ``b`` pass through ``v`` (``v`` neither of them)?"""
    return v not in (a, b) and 0 <= v < len(neighbours) and b not in reachable(neighbours, a, (v,))


def separator(neighbours: Sequence[Sequence[int]], a: int, targets: Collection[int], removed: Collection[int] = ()) -> int | None:
    """The smallest node id whose removal (besides ``removed``) cuts ``a`` off every node of ``targets``.

    None when no single node does (or ``targets`` is empty).  Only cut vertices can, so only
    they are tried.
    """
    targets = set(targets)
    if not targets:
        return None
    for v in cut_vertices(neighbours, removed):
        if v != a and v not in targets and not targets & reachable(neighbours, a, {v, *removed}):
            return v
    return None


def _lowpoints(neighbours: Sequence[Sequence[int]], removed: Collection[int]) -> tuple[set[int], list[tuple[int, int]]]:
    """Cut vertices and bridges of the graph without ``removed`` (Hopcroft-Tarjan, iterative)."""
    n = len(neighbours)
    order = [-1] * n
    low = [0] * n
    cuts: set[int] = set()
    found: list[tuple[int, int]] = []
    counter = 0
    for root in range(n):
        if order[root] >= 0 or root in removed:
            continue
        order[root] = low[root] = counter
        counter += 1
        children = 0
        stack = [(root, -1, iter(neighbours[root]))]
        while stack:
            v, parent, it = stack[-1]
            advanced = False
            for w in it:
                if w in removed:
                    continue
                if order[w] < 0:
                    order[w] = low[w] = counter
                    counter += 1
                    if v == root:
                        children += 1
                    stack.append((w, v, iter(neighbours[w])))
                    advanced = True
                    break
                if w != parent:
                    low[v] = min(low[v], order[w])
            if advanced:
                continue
            stack.pop()
            if parent >= 0:
                low[parent] = min(low[parent], low[v])
                if low[v] > order[parent]:
                    found.append((min(parent, v), max(parent, v)))
                if parent != root and low[v] >= order[parent]:
                    cuts.add(parent)
        if children > 1:
            cuts.add(root)
    return cuts, found


def cut_vertices(neighbours: Sequence[Sequence[int]], removed: Collection[int] = ()) -> list[int]:
    """The cut vertices of the graph without ``removed``, sorted."""
    return sorted(_lowpoints(neighbours, set(removed))[0])


def bridges(neighbours: Sequence[Sequence[int]], removed: Collection[int] = ()) -> list[tuple[int, int]]:
    """The bridges ``(u, v)``, ``u < v``, of the graph without ``removed``, sorted."""
    return sorted(_lowpoints(neighbours, set(removed))[1])


def cut_warnings(neighbours: Sequence[Sequence[int]]) -> list[str]:
    """One line per weakness of a roster's graph that a single member could exploit.

    A cut vertex (the parts it separates, and that the final agreement is the only check
    across it) and a node with a single neighbour (which learns its statistics).
    """
    lines = []
    for v in cut_vertices(neighbours):
        parts = []
        seen: set[int] = {v}
        for j in neighbours[v]:
            if j not in seen:
                part = reachable(neighbours, j, (v,))
                seen |= part
                parts.append(sorted(part))
        shown = "; ".join(_ids(p) for p in parts)
        lines.append(
            f"node {v} is a cut vertex: every path between the parts {shown} passes it, so a member there could show "
            f"each part other numbers (the runs stop when the final results differ, but no protocol check sees it earlier); "
            f"add edges around it"
        )
    for i, nb in enumerate(neighbours):
        if len(nb) == 1:
            lines.append(f"node {i} has a single neighbour (node {nb[0]}), which learns its statistics from the consensus; give it a second one")
    return lines


def _ids(ids: Sequence[int]) -> str:
    return "{" + ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "") + "}"
