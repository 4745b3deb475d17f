"""p2pem: privacy-preserving distributed EM for Gaussian mixtures over peer-to-peer networks."""

from __future__ import annotations

from p2pem.em import EMSettings
from p2pem.errors import ConfigError, DataError, GraphError, P2pemError, ProtocolError, TransportError
from p2pem.gmm import GMMParams
from p2pem.graphs import geometric_graph, graph_from_edges
from p2pem.messages import SERVER, Message
from p2pem.model import DistributedGMM
from p2pem.protocols import Centralized, Federated, PdmmSP, SecureSum, make_protocol
from p2pem.simulate import RunResult, run_protocol

__all__ = [
    "Centralized",
    "ConfigError",
    "DataError",
    "DistributedGMM",
    "EMSettings",
    "Federated",
    "GMMParams",
    "GraphError",
    "Message",
    "P2pemError",
    "PdmmSP",
    "ProtocolError",
    "RunResult",
    "SERVER",
    "SecureSum",
    "TransportError",
    "geometric_graph",
    "graph_from_edges",
    "make_protocol",
    "run_protocol",
]
__version__ = "0.1.0"
