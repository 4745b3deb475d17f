"""Transports that carry encoded messages between nodes.

Submodules are imported explicitly so that a simulation never pulls in network
dependencies: ``from p2pem.deploy.transports.mqtt import MqttLink``.
"""

from __future__ import annotations
