"""The Monte Carlo of the leakage analysis: one aggregation, every run at once, with its trace.

Monte Carlo is one batch call.  Every protocol's batch path treats the columns of its
(n_nodes, p) input independently (the consensus is linear and column-wise), so ``runs``
Monte Carlo runs are one call with p = runs, each node drawing its randomness from its own
stream (:func:`p2pem.simulate.protocol_streams`).  The recorded trace then holds messages
whose payloads are vectors over the runs, from which :func:`p2pem.leakage.views.build_view`
builds each adversary's view.

Which pdmm-sp runs (:func:`analysed_schedule`): the one a real run uses.  Where it stops at a
public round (``stop = "auto"`` with a bounded polynomial), the Monte Carlo runs the same spec
(the same tolerance, hence the same polynomial) to that round, which depends on the graph
alone, so every column stops there too.  Where the nodes' counters decide when to stop (a
data-dependent round, coupled across the columns), it runs a fixed number of rounds with
``tol = 0``; the analysis says whether those coefficients are the real run's (they are unless
the tolerance shapes the polynomial).
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

__all__ = ["DEFAULT_ROUNDS", "AnalysedSchedule", "MonteCarlo", "analysed_schedule", "make_adversary", "monte_carlo", "monte_carlo_spec"]

#: pdmm-sp rounds analysed where a real run has no public stop round and none are asked for.
DEFAULT_ROUNDS = 20

FloatArray = npt.NDArray[np.float64]


def monte_carlo_spec(spec: ProtocolSpec, iterations: int) -> ProtocolSpec:
    """The protocol for a fixed number of rounds: pdmm-sp for exactly ``iterations`` rounds, ``tol = 0``.

    Its counters then never stop it, whatever the columns; the tolerance may shape a
    polynomial schedule, so :func:`analysed_schedule` is what the analysis runs.

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
class AnalysedSchedule:
    """What the Monte Carlo of one protocol runs, and how that compares with a real run.

    Attributes
    ----------
    spec : ProtocolSpec
        The protocol as the Monte Carlo runs it.
    rounds : int
        Rounds analysed (1, 2, ..., ``rounds``).
    schedule : str or None
        pdmm-sp: the iteration that runs ("polynomial", "deflated", "heavy-ball", "none");
        None for protocols without rounds.
    stop : str or None
        pdmm-sp: "public round" (every node stops at ``stop_round``, from the graph alone) or
        "adaptive" (the nodes' counters decide, from the data).
    stop_round : int or None
        The public round a real run stops at.
    as_run : bool
        The Monte Carlo runs the coefficients a real run uses (and, with a public stop
        round, stops where it does).
    """

    spec: ProtocolSpec
    rounds: int
    schedule: str | None = None
    stop: str | None = None
    stop_round: int | None = None
    as_run: bool = True

    def to_json(self) -> dict:
        return {"schedule": self.schedule, "stop": self.stop, "stop_round": self.stop_round, "rounds": self.rounds, "as_run": self.as_run,
                "description": self.describe()}

    def describe(self) -> str:
        """One line for the table, the JSON and the figure."""
        if self.schedule is None:
            return "no rounds: one pass of the protocol"
        what = f"{self.schedule} schedule"
        if self.stop_round is not None:
            upto = "to it, as a real run" if self.rounds == self.stop_round else f"to round {self.rounds} of them"
            return f"{what}, public stop round {self.stop_round}: rounds 1-{self.rounds} analysed {upto}"
        same = ("the coefficients of a real run" if self.as_run
                else "NOT the coefficients of a real run (its tolerance shapes the polynomial; tol = 0 here)")
        return (f"{what}, adaptive stop (a real run stops when the counters settle, a round that depends on the data): "
                f"rounds 1-{self.rounds} analysed with tol = 0, {same}")


def analysed_schedule(spec: ProtocolSpec, graph: nx.Graph, rounds: int | None = None) -> AnalysedSchedule:
    """The protocol as the Monte Carlo runs it on ``graph``: pdmm-sp with a real run's schedule.

    Parameters
    ----------
    spec : ProtocolSpec
        As the scenario gives it.
    graph : networkx.Graph
    rounds : int, optional
        pdmm-sp rounds to analyse.  Default: to the public stop round a real run stops at,
        else :data:`DEFAULT_ROUNDS`.  Never beyond the public stop round (a real run sends
        nothing after it).

    Raises
    ------
    ConfigError
        As :func:`monte_carlo_spec`.
    """
    if not isinstance(spec, PdmmSP):
        return AnalysedSchedule(monte_carlo_spec(spec, 1), DEFAULT_ROUNDS if rounds is None else rounds)
    monte_carlo_spec(spec, 1)  # refuses what has no batch path
    spec.validate(graph)
    topology = spec.topology(graph)
    resolved = spec.resolved_params(topology)
    schedule = str(resolved["accel"])
    stop_round = resolved.get("stop_round")
    if stop_round is not None:
        n = int(stop_round) if rounds is None else min(rounds, int(stop_round))
        return AnalysedSchedule(dataclasses.replace(spec, max_iter=n), n, schedule, "public round", int(stop_round))
    n = DEFAULT_ROUNDS if rounds is None else rounds
    run = monte_carlo_spec(spec, n)
    as_run = run.public_parameters(topology) == spec.public_parameters(topology)
    return AnalysedSchedule(run, n, schedule, "adaptive", None, as_run)


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
