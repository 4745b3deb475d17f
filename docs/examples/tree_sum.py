"""``tree-sum``: the network average along a spanning tree (an example protocol; it hides nothing).

Every node adds its value to the partial sums of its children and sends the result to its
parent; the root divides the total by n and sends the average back down the tree.  A parent
sees the sum of each child's subtree, so this is a teaching example, not a private protocol.
It shows all a protocol implements: a frozen spec, a per-node state machine (what the Node,
the message-level engine and a deployment run) and a batch path that computes the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from p2pem.errors import ProtocolError
from p2pem.messages import Message
from p2pem.protocols.base import AggregateOutcome, Aggregation, NodeContext, ProtocolSpec, Topology


def spanning_tree(topology: Topology) -> tuple[list[int], list[list[int]], list[int], int]:
    """Breadth-first tree from node 0: parents (-1 at the root), children in id order, the
    nodes in breadth-first order and the tree's height (all public: the graph is)."""
    n = topology.n_nodes
    parent, depth, order = [-1] * n, [0] * n, [0]
    for i in order:  # grows while it is walked: a breadth-first search
        for j in topology.neighbours[i]:
            if j != 0 and parent[j] < 0:
                parent[j], depth[j] = i, depth[i] + 1
                order.append(j)
    children: list[list[int]] = [[] for _ in range(n)]
    for j in range(1, n):
        children[parent[j]].append(j)
    return parent, children, order, max(depth)


def subtree_sum(value: np.ndarray, partials: list[np.ndarray]) -> np.ndarray:
    """A node's value plus its children's partial sums, in the children's id order: the one
    rounding order both paths use."""
    total = value
    for partial in partials:
        total = total + partial
    return total


@dataclass(frozen=True)
class TreeSum(ProtocolSpec):
    """``tree-sum``: convergecast to node 0, broadcast of the average back (not private)."""

    name: str = field(init=False, default="tree-sum")

    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        return TreeNode(ctx, iteration)

    def aggregate(self, values, topology, rngs, iteration, *, record=False) -> AggregateOutcome:
        parent, children, order, height = spanning_tree(topology)
        n, p = values.shape
        totals: list[np.ndarray] = [values[0]] * n
        for i in reversed(order):  # children before parents
            totals[i] = subtree_sum(values[i], [totals[c] for c in children[i]])
        average = totals[0] / n
        up = [Message(i, (parent[i],), iteration, 1, "up", totals[i].copy(), False) for i in order[1:]]
        down = [Message(i, tuple(children[i]), iteration, 2, "down", average.copy(), False) for i in order if children[i]]
        messages = up + down
        return AggregateOutcome(
            np.broadcast_to(average, (n, p)), 2 * height, len(messages), sum(m.nbytes for m in messages), True, messages if record else None
        )


class TreeNode(Aggregation):
    """One node's part: wait for the children's sums, send up; take the average, send down."""

    def __init__(self, ctx: NodeContext, iteration: int) -> None:
        super().__init__()
        parents, children, _, height = spanning_tree(ctx.topology)
        self.ctx, self.iteration = ctx, iteration
        self.parent, self.children = parents[ctx.node_id], children[ctx.node_id]
        self.rounds = 2 * height
        self.partials: dict[int, np.ndarray] = {}

    def start(self, value: np.ndarray) -> list[Message]:
        self.value = value
        return self._send_up()

    def receive(self, msg: Message) -> list[Message]:
        if msg.kind == "up" and msg.sender in self.children and msg.sender not in self.partials:
            self.partials[msg.sender] = np.asarray(msg.payload)
            return self._send_up()
        if msg.kind == "down" and msg.sender == self.parent and not self.done:
            return self._finish(np.asarray(msg.payload))
        raise ProtocolError(f"tree-sum: node {self.ctx.node_id} got an unexpected {msg.kind} message from node {msg.sender}")

    def _send_up(self) -> list[Message]:
        if len(self.partials) < len(self.children):
            return []  # a child's subtree is still missing
        total = subtree_sum(self.value, [self.partials[c] for c in self.children])
        if self.parent < 0:
            return self._finish(total / self.ctx.n_nodes)
        return [Message(self.ctx.node_id, (self.parent,), self.iteration, 1, "up", total.copy(), False)]

    def _finish(self, average: np.ndarray) -> list[Message]:
        self.done, self.result = True, average
        if not self.children:
            return []
        return [Message(self.ctx.node_id, tuple(self.children), self.iteration, 2, "down", average.copy(), False)]
