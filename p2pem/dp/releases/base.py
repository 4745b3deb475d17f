"""What a model family provides to differentially private EM: its release layout and its hook."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from p2pem.dp.mechanisms import Block

__all__ = ["ReleaseLayout", "RepairOptions"]


@dataclass(frozen=True)
class RepairOptions:
    """The private protocols' post-processing settings (:class:`p2pem.dp.protocols.DPProtocol`)."""

    weight_floor: float = 1e-3
    smoothing: float = 0.0
    covariance_repair: str = "eigclamp"
    eig_floor: float = 1e-3


@dataclass(frozen=True, eq=False)
class ReleaseLayout:
    """What a private run of one family releases, and how its EM loop changes.

    Attributes
    ----------
    em : tuple of Block
        The blocks of the vector one EM iteration releases (the hook's ``encode`` output;
        the log-likelihood slot is released as 0, the continue flag is data independent).
        A block with ``unit = True`` is released divided by its sensitivity at the public
        current model, so its calibrated scale is a noise multiplier
        (:class:`p2pem.dp.mechanisms.Block`).
    init : tuple of Block
        The blocks of the private initialisation (empty with a public ``init``).
    em_size : int
        Length of an EM iteration's released vector with the continue flag.
    init_size : int
        Length of the initialisation's released vector.
    hook : p2pem.em.PrivacyHook
        ``encode``, ``decode``, ``repair``, ``decode_init`` of the family.
    """

    em: tuple[Block, ...]
    init: tuple[Block, ...]
    em_size: int
    init_size: int
    hook: Any
