"""``centralized``: plain EM on the pooled rows, the reference every protocol is compared with."""

from __future__ import annotations

from dataclasses import dataclass, field

from p2pem.errors import ConfigError
from p2pem.protocols.base import Aggregation, NodeContext, ProtocolSpec


@dataclass(frozen=True)
class Centralized(ProtocolSpec):
    """``centralized``: EM on the pooled data, no network (the reference)."""

    name: str = field(init=False, default="centralized")

    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        raise ConfigError("centralized runs no network protocol")
