"""The Monte Carlo of the leakage analysis: one aggregation, every run at once, with its trace.

Monte Carlo is one batch call.  Every protocol's batch path treats the columns of its
(n_nodes, p) input independently (the consensus is linear and column-wise; pdmm-sp runs
exactly ``iterations`` rounds with ``tol = 0``, so its column-coupled stopping rule never
fires), so ``runs`` Monte Carlo runs are one call with p = runs, each node drawing its
randomness from its own stream (:func:`p2pem.simulate.protocol_streams`).  The recorded
trace then holds messages whose payloads are vectors over the runs, from which
:func:`p2pem.leakage.views.build_view` builds each adversary's view.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError
from p2pem.leakage.config import LeakageConfig
from p2pem.leakage.views import Adversary
from p2pem.messages import SERVER, Message
from p2pem.protocols import AggregateOutcome, Centralized, PdmmSP, ProtocolSpec, Topology
from p2pem.simulate import protocol_streams

__all__ = ["MonteCarlo", "make_adversary", "monte_carlo", "monte_carlo_spec"]

FloatArray = npt.NDArray[np.float64]


def monte_carlo_spec(spec: ProtocolSpec, iterations: int) -> ProtocolSpec:
    """The protocol as the Monte Carlo runs it: pdmm-sp for exactly ``iterations`` rounds.

    Raises
    ------
    ConfigError
        For asynchronous pdmm-sp (it has no batch path) and ``centralized`` (no network).
    """
    if isinstance(spec, Centralized):
        raise ConfigError("centralized runs no network protocol: nothing to leak")
    if spec.asynchronous:
        raise ConfigError(f"{spec.name}: the leakage analysis needs the batch path; use mode = 'sync'")
    if isinstance(spec, PdmmSP):
        return dataclasses.replace(spec, tol=0.0, max_iter=iterations)
    return spec


@dataclass(frozen=True, eq=False)
class MonteCarlo:
    """One aggregation run over many Monte Carlo columns, with its trace and latents.

    Attributes
    ----------
    spec : ProtocolSpec
        The protocol as run (see :func:`monte_carlo_spec`).
    topology : Topology
    inputs : numpy.ndarray, shape (n_nodes, n_runs)
        Every node's input in every run.
    outcome : AggregateOutcome
        Results and the recorded trace.
    latents : numpy.ndarray, shape (n_runs, n_latents)
        The independent Gaussians the run is driven by: the inputs, then the protocol's
        recorded Gaussian randomness (pdmm-sp's initial duals, read from the trace).
    latent_sd : numpy.ndarray, shape (n_latents,)
        Their standard deviations under the model.
    """

    spec: ProtocolSpec
    topology: Topology
    inputs: FloatArray
    outcome: AggregateOutcome
    latents: FloatArray
    latent_sd: FloatArray

    @property
    def trace(self) -> list[Message]:
        return self.outcome.trace or []

    @property
    def last_round(self) -> int:
        return max((m.round for m in self.trace), default=0)


def monte_carlo(
    spec: ProtocolSpec,
    graph: nx.Graph,
    inputs: npt.ArrayLike,
    *,
    input_sd: float | npt.ArrayLike,
    seed: int | np.random.SeedSequence,
    iteration: int = 1,
) -> MonteCarlo:
    """Run one aggregation on every Monte Carlo column at once and record the trace.

    Parameters
    ----------
    spec : ProtocolSpec
        Run as given (pass it through :func:`monte_carlo_spec` first).
    graph : networkx.Graph
    inputs : array_like, shape (n_nodes, n_runs)
        Column r is Monte Carlo run r.
    input_sd : float or array_like, shape (n_nodes,)
        Standard deviation of every node's input under the model (for the closed forms).
    seed : int or SeedSequence
        Protocol randomness: node i draws from stream i of
        :func:`p2pem.simulate.protocol_streams`.
    iteration : int
        EM iteration number stamped on the messages.

    Returns
    -------
    MonteCarlo

    Notes
    -----
    Cost: one batch aggregation with p = n_runs (pdmm-sp: O(T m p) floating-point work and
    2m + nT recorded payloads of p floats; secure-sum: O(n p) big-integer operations).
    """
    spec.validate(graph)
    topology = spec.topology(graph)
    values = np.ascontiguousarray(inputs, dtype=np.float64)
    n = topology.n_nodes
    if values.ndim != 2 or values.shape[0] != n:
        raise ConfigError(f"inputs must have shape ({n}, n_runs), got {values.shape}")
    rngs = protocol_streams(seed, n)
    outcome = spec.aggregate(values, topology, rngs, iteration, record=True)
    lat = [values[i] for i in range(n)]
    sd = [float(v) for v in np.broadcast_to(np.asarray(input_sd, dtype=np.float64), (n,))]
    if isinstance(spec, PdmmSP):
        for m in outcome.trace or []:
            if m.kind == "dual-init":
                lat.append(np.asarray(m.payload, dtype=np.float64))
                sd.append(float(spec.perturbation_std))
    return MonteCarlo(spec, topology, values, outcome, np.column_stack(lat), np.asarray(sd))


def make_adversary(kind: str, config: LeakageConfig, *, has_server: bool = False) -> Adversary:
    """The adversary of ``kind`` under ``config``.

    A protocol with a server (``has_server``: its trace has messages to or from
    :data:`~p2pem.messages.SERVER`) adds the server to the corrupt set of the
    honest-but-curious and both adversaries when ``config.server_corrupt``.
    """
    if kind == "eavesdropper":
        return Adversary(kind)
    corrupt = set(config.corrupt)
    if config.server_corrupt and has_server:
        corrupt.add(SERVER)
    return Adversary(kind, frozenset(corrupt))
