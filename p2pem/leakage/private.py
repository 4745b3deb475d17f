"""Whole-run views of differentially private runs: what the noise leaves an adversary.

A private run's aggregations are those of an ordinary protocol on noisy inputs, so an
adversary's view reduces exactly as that protocol's does
(:func:`p2pem.leakage.wholerun.disclosed_sums`):

``dp-distributed``
    The aggregation protocol (``secure-sum`` or ``pdmm-sp``) sums each node's released
    statistics plus its noise share; its reduction discloses, per group H of h honest
    nodes, the statistics of H plus the noise of h shares: standard deviation
    ``noise_std * sqrt(h / (n - t))`` per coordinate (t = ``tolerate``,
    :mod:`p2pem.dp.guarantees`).  A group of h >= n - t nodes faces at least the calibrated
    noise; a small component cut off by corrupt nodes faces less.
``dp-central``
    ``federated``'s reduction: a corrupt aggregator (or an eavesdropper on the uploads)
    reads every node's exact statistics; corrupt nodes alone learn the noisy total minus
    their own (one calibrated draw).

A private run releases uncentred sums without the log-likelihood
(:class:`p2pem.dp.protocols.PrivateEM`); :meth:`PrivateWholeRun.observation` maps the
attack's layout (:func:`p2pem.leakage.attack.row_statistics`) to those coordinates and
whitens them by the group's noise (:attr:`p2pem.leakage.attack.Observation.transform`), so
the attack's least squares is the maximum-likelihood fit under Gaussian noise (for Laplace
noise the same weighting, a least-squares attack rather than the likelihood's).  The rows
the attack aims at are the clipped ones (``bound``): the statistics are computed from them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pem.dp import mechanisms
from p2pem.dp.protocols import DPCentral, DPDistributed, DPProtocol
from p2pem.em import EMSettings
from p2pem.families.gaussian import GaussianBatch
from p2pem.gmm import GMMParams
from p2pem.leakage.attack import Observation
from p2pem.leakage.views import Adversary
from p2pem.messages import SERVER
from p2pem.protocols import Federated, ProtocolSpec
from p2pem.protocols.base import AggregateOutcome, Topology

__all__ = ["PrivateWholeRun", "bind_for_whole_run"]

FloatArray = npt.NDArray[np.float64]

#: Builds the attack's Observation of one group from (aggregation, public model, group sums, group size).
Observer = Callable[[int, "GMMParams | None", FloatArray, int], Observation]


@dataclass(frozen=True, eq=False)
class PrivateWholeRun:
    """A private protocol bound to a run, as the whole-run recorder needs it.

    Attributes
    ----------
    spec : DPProtocol
        The bound protocol (its noise plan calibrated for the run).
    settings : EMSettings
        The run's settings with the privacy hook.
    """

    spec: DPProtocol
    settings: EMSettings

    @property
    def bound(self) -> float:
        plan = self.spec.plan
        assert plan is not None  # bound by bind_for_whole_run
        return plan.bound

    @property
    def reduction(self) -> ProtocolSpec:
        """The protocol whose trace the reductions read: the inner aggregation, or federated's."""
        return self.spec.inner if isinstance(self.spec, DPDistributed) else Federated()

    def aggregate(self, values: FloatArray, topology: Topology, rngs: list[np.random.Generator], iteration: int) -> tuple[FloatArray, AggregateOutcome]:
        """(what the reduction's protocol summed, the traced outcome): the same bits as ``spec.aggregate``."""
        if isinstance(self.spec, DPDistributed):
            inputs = self.spec.noisy_inputs(values, rngs, iteration)
            return inputs, self.spec.inner.aggregate(inputs, topology, rngs, iteration, record=True)
        return values, self.spec.aggregate(values, topology, rngs, iteration, record=True)

    def truth(self, inputs: FloatArray, outcome: AggregateOutcome, groups: Sequence[tuple[int, ...]], adversary: Adversary) -> FloatArray:
        """What the reduction of each group must give: the sum of the group's inputs, plus for
        ``dp-central`` the aggregator's draw where the group's sum comes from the noisy total
        (the reduction is checked against it; none of this is part of the view)."""
        out = np.array([inputs[list(g)].sum(axis=0) for g in groups])
        if isinstance(self.spec, DPCentral) and not self._reads_uploads(adversary):
            n = inputs.shape[0]
            draw = np.asarray(outcome.results)[0] * n - inputs.sum(axis=0)
            out = out + draw
        return out

    @staticmethod
    def _reads_uploads(adversary: Adversary) -> bool:
        return SERVER in adversary.corrupt or adversary.eavesdrops

    def noise_std(self, iteration: int, group_size: int, adversary: Adversary) -> FloatArray:
        """Per-coordinate standard deviation of the noise on a disclosed group's sum (0: exact)."""
        plan = self.spec.plan
        assert plan is not None
        one_draw = mechanisms.noise_std(plan.scale(iteration), plan.mechanism)
        if isinstance(self.spec, DPCentral):
            return np.zeros_like(one_draw) if self._reads_uploads(adversary) else one_draw
        return one_draw * np.sqrt(group_size / plan.shares)

    def observer(self, adversary: Adversary) -> Observer:
        """How the attack reads one group's sums of one aggregation (see the module docstring)."""

        def observe(iteration: int, model: GMMParams | None, sums: FloatArray, group_size: int) -> Observation:
            std = self.noise_std(iteration, group_size, adversary)
            if model is None:  # the initialisation: count, sum x, upper sum x x^T, as the attack's layout
                weights = _whitening(std)
                return Observation(None, weights * sums, np.diag(weights))
            stats = np.asarray(sums[:-1], dtype=float)  # the continue flag counts nodes, not rows
            released = self._released_map(model)  # (P - 1, P): uncentred sums, no log-likelihood
            weights = _whitening(std[: released.shape[0]])
            return Observation(model, weights * stats[: released.shape[0]], weights[:, None] * released)

        return observe

    def _released_map(self, model: GMMParams) -> FloatArray:
        """The linear map from the attack's statistics at ``model`` to the released coordinates.

        ``PrivateEM.encode`` is linear in the statistics for a fixed model: its image of the
        unit vectors, with the log-likelihood slot (released as 0) dropped.
        """
        hook = self.settings.privacy
        assert hook is not None
        size = model.n_components * (1 + model.n_features + model.n_features * (model.n_features + 1) // 2) + 1
        basis = np.eye(size)
        columns = _encode(hook, basis, model)  # row j: the release of unit vector j
        return columns.T[:-1]


def _encode(hook: Any, stats: FloatArray, model: GMMParams) -> FloatArray:
    n = stats.shape[0]
    batch = GaussianBatch(*(np.broadcast_to(a, (n, *a.shape)) for a in (model.weights, model.means, model.covariances)))
    return np.asarray(hook.encode(stats, batch))


def _whitening(std: FloatArray) -> FloatArray:
    """1 / std where there is noise, 1 where a coordinate is exact."""
    return np.where(std > 0, 1.0 / np.where(std > 0, std, 1.0), 1.0)


def bind_for_whole_run(
    spec: ProtocolSpec, settings: EMSettings, parts: Sequence[FloatArray], *, seed: int | np.random.SeedSequence
) -> tuple[ProtocolSpec, EMSettings, list[FloatArray], PrivateWholeRun | None]:
    """Bind a private protocol to the run as :func:`p2pem.simulate.run_protocol` does (clipped
    rows, calibrated noise, the EM hook); other protocols come back unchanged with None."""
    if not isinstance(spec, DPProtocol):
        return spec, settings, list(parts), None
    bound, private_settings, clipped = spec.bind(settings, list(parts), seed=seed)
    assert isinstance(bound, DPProtocol)
    return bound, private_settings, clipped, PrivateWholeRun(bound, private_settings)
