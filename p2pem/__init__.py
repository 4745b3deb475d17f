"""p2pem: privacy-preserving distributed EM for Gaussian mixtures over peer-to-peer networks."""

from __future__ import annotations

from p2pem.errors import ConfigError, DataError, GraphError, P2pemError, ProtocolError, TransportError
from p2pem.messages import SERVER, Message

__all__ = [
    "ConfigError",
    "DataError",
    "GraphError",
    "Message",
    "P2pemError",
    "ProtocolError",
    "SERVER",
    "TransportError",
]
__version__ = "0.1.0"
