"""The one message type every protocol, transport and trace uses.

A message is what crosses a link: who sent it, to whom, in which EM iteration and
protocol round, what kind it is, whether it travels encrypted end-to-end, and the
payload.  The leakage analysis builds adversary views from recorded messages, the
MQTT transport serialises the same objects, so nothing else may carry information
between nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np

#: Node id of the aggregation server of the ``federated`` baseline.
SERVER = -1

Payload = Union[np.ndarray, tuple[int, ...]]


@dataclass(frozen=True, eq=False)
class Message:
    """One transmission.

    Parameters
    ----------
    sender : int
        Node id of the sender (``SERVER`` for the federated server).
    receivers : tuple of int
        Node ids that receive it; a broadcast to all neighbours lists them all.
    iteration : int
        EM iteration the message belongs to (0 is the initialisation round that
        averages the global mean and covariance).
    round : int
        Protocol round inside that iteration (consensus iteration, ring hop, ...).
    kind : str
        What the payload is, e.g. ``"dual-init"``, ``"primal"``, ``"ring"``,
        ``"upload"``, ``"result"``.
    payload : numpy.ndarray or tuple of int
        Float64 vector, or arbitrary-size integers for the modular ring protocol.
    encrypted : bool
        True when the message travels over an end-to-end encrypted channel, so an
        eavesdropper on the link learns nothing but its size.
    meta : tuple of int
        Small integer control fields (e.g. the convergence counters of pdmm-sp).
    """

    sender: int
    receivers: tuple[int, ...]
    iteration: int
    round: int
    kind: str
    payload: Payload
    encrypted: bool = False
    meta: tuple[int, ...] = field(default=())

    @property
    def nbytes(self) -> int:
        """Size of the payload in bytes (8 per float, 32 per ring integer, 8 per meta field)."""
        if isinstance(self.payload, np.ndarray):
            size = int(self.payload.nbytes)
        else:
            size = 32 * len(self.payload)
        return size + 8 * len(self.meta)
