"""Aggregation protocols: the per-node state machines and their batch paths.

======================  ============================================================
module                  what it holds
======================  ============================================================
``base``                the interface every protocol implements (:class:`ProtocolSpec`,
                        :class:`Aggregation`), the public :class:`Topology`
``pdmm``                ``pdmm-sp``: PDMM average consensus with subspace perturbation
``exact``               ``secure-sum`` (the masked ring) and ``federated`` (a server)
``centralized``         ``centralized``: plain EM on the pooled rows, no network
======================  ============================================================

The differentially private protocols ``dp-central`` and ``dp-distributed`` live in
:mod:`p2pem.dp.protocols`; :mod:`p2pem.registry` maps every name a user types to its spec
and builds specs from scenario parameters (:func:`p2pem.registry.make_protocol`).
"""

from __future__ import annotations

from p2pem.protocols.base import AggregateOutcome, Aggregation, NodeContext, ProtocolSpec, Topology
from p2pem.protocols.centralized import Centralized
from p2pem.protocols.exact import Federated, SecureSum
from p2pem.protocols.pdmm import PdmmSP

__all__ = [
    "AggregateOutcome",
    "Aggregation",
    "Centralized",
    "Federated",
    "NodeContext",
    "PdmmSP",
    "ProtocolSpec",
    "SecureSum",
    "Topology",
]
