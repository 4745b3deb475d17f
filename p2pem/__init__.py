"""p2pem: privacy-preserving distributed EM for Gaussian and skew-normal mixtures over peer-to-peer networks.

The public names below load on first use (PEP 562), so ``import p2pem`` is cheap: a node
process, which needs neither networkx nor scipy's special functions, starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from p2pem.errors import ConfigError, ConvergenceWarning, DataError, GraphError, ModelError, P2pemError, ProtocolError, TransportError
from p2pem.messages import SERVER, Message
from p2pem.version import __version__ as __version__

_LAZY = {
    "Centralized": "p2pem.protocols",
    "DistributedGMM": "p2pem.model",
    "DistributedMixedMixture": "p2pem.model",
    "DistributedMixture": "p2pem.model",
    "DistributedSkewNormalMixture": "p2pem.model",
    "EMSettings": "p2pem.em",
    "Federated": "p2pem.protocols",
    "GMMParams": "p2pem.gmm",
    "PdmmSP": "p2pem.protocols",
    "RunResult": "p2pem.simulate",
    "SecureSum": "p2pem.protocols",
    "geometric_graph": "p2pem.graphs",
    "graph_from_edges": "p2pem.graphs",
    "load": "p2pem.model",
    "make_protocol": "p2pem.registry",
    "run_protocol": "p2pem.simulate",
}

if TYPE_CHECKING:
    from p2pem.em import EMSettings
    from p2pem.gmm import GMMParams
    from p2pem.graphs import geometric_graph, graph_from_edges
    from p2pem.model import DistributedGMM, DistributedMixedMixture, DistributedMixture, DistributedSkewNormalMixture, load
    from p2pem.protocols import Centralized, Federated, PdmmSP, SecureSum
    from p2pem.registry import make_protocol
    from p2pem.simulate import RunResult, run_protocol


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'p2pem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "SERVER",
    "Centralized",
    "ConfigError",
    "ConvergenceWarning",
    "DataError",
    "DistributedGMM",
    "DistributedMixedMixture",
    "DistributedMixture",
    "DistributedSkewNormalMixture",
    "EMSettings",
    "Federated",
    "GMMParams",
    "GraphError",
    "ModelError",
    "Message",
    "P2pemError",
    "PdmmSP",
    "ProtocolError",
    "RunResult",
    "SecureSum",
    "TransportError",
    "geometric_graph",
    "graph_from_edges",
    "load",
    "make_protocol",
    "run_protocol",
]
