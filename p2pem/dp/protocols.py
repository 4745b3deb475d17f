"""Differentially private EM as protocols: ``dp-central`` and ``dp-distributed``.

Both release, in every EM iteration, the network sums of the uncentred statistics
(:mod:`p2pem.dp.mechanisms`) plus noise calibrated to a total (epsilon, delta) over the whole
run (:mod:`p2pem.dp.accounting`), and repair the noisy M-step (:mod:`p2pem.dp.postprocess`).
They differ in *who adds the noise*, which decides whom they protect against:

``dp-central`` (Park et al., AISTATS 2017, DP-EM; Wu et al., DPGMM)
    Nodes upload their exact statistics to a *trusted* aggregator, which sums them, adds the
    noise once and returns the noisy sum.  The released model, and everything every node and
    any outsider sees afterwards, is (epsilon, delta)-DP.  It does **not** protect against
    the aggregator (it sees every node's statistics in the clear, as in ``federated``) nor
    against an eavesdropper on the uploads.
``dp-distributed`` (distributed noise generation: Dwork et al., EUROCRYPT 2006; Acs & Castelluccia 2011)
    Every node adds its own share of the noise to its statistics before they are summed by
    ``secure-sum`` or ``pdmm-sp``, with no trusted party.  The shares are sized so that any
    n - t of them make the calibrated noise (t = ``tolerate``, default floor(n / 2)): t
    colluding nodes that subtract their own shares from the output still face the
    configured guarantee, and an outsider a stronger one (the released sums carry n / (n - t)
    times the noise variance).  What protects an individual node's *contribution* is the
    aggregation protocol (secure-sum's masks, pdmm-sp's subspace perturbation) against
    passive peers and eavesdroppers; where it fails, the disclosed sum of h honest nodes
    carries h shares only.  The analysis per adversary, with the residual distributions, is
    in :mod:`p2pem.dp.guarantees`; every run reports epsilon against an outsider and against
    its ``tolerate`` colluders (``epsilon_spent``) and what epsilon excludes (``privacy``).

The data domain is public: features are clipped to ``[-bound, bound]``.  A bound read off the
data is not private; it is done only when ``bound`` is not given, with a
:class:`DataBoundWarning`.  Private runs need ``tol = 0`` (a fixed number of iterations, so the
budget can be split over them; the stopping decision would otherwise leak) and release no
log-likelihood (their ``loglik`` entries are NaN, null in ``result.json``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Union

import numpy as np

from p2pem.dp import accounting, guarantees, mechanisms
from p2pem.dp.publication import REPLACE_ONE, simulation_block
from p2pem.dp.releases import PRIVATE_FAMILIES, PrivateFamily, RepairOptions, check_private
from p2pem.dp.releases.gaussian import PrivateEM
from p2pem.errors import ConfigError, ProtocolError
from p2pem.gmm import FloatArray
from p2pem.messages import Message
from p2pem.protocols.base import AggregateOutcome, Aggregation, NodeContext, ProtocolSpec, Topology, parameter_fields
from p2pem.protocols.exact import Federated, SecureSum, ServerNode, UploadNode, fsum_average
from p2pem.protocols.pdmm import PdmmSP
from p2pem.streams import protocol_streams

if TYPE_CHECKING:
    import networkx as nx

    from p2pem.em import EMSettings

log = logging.getLogger(__name__)


class DataBoundWarning(UserWarning):
    """The feature bound of a private run was read off the data (so the run is not DP)."""


# ------------------------------------------------------------------------- the plan


@dataclass(frozen=True, eq=False)
class NoisePlan:
    """The calibrated noise of one run: per-coordinate scales of every aggregation.

    ``shares`` of the nodes' noise shares make one calibrated draw (1 for ``dp-central``'s
    single draw, n - t for ``dp-distributed``, or h with ``calibrate = "worst-placement"``);
    ``colluders`` is how many colluding nodes the guarantee survives (n - 1 for
    ``dp-central``: nodes see only the noisy sums; t for ``dp-distributed``); ``placement``
    the smallest honest group t colluders placed worst can cut off (``dp-distributed``, once
    :meth:`~p2pem.protocols.base.ProtocolSpec.placed` saw the topology); ``excluded`` says
    what epsilon does not cover.
    ``aggregator_rng`` is ``dp-central``'s trusted aggregator stream for the message-level
    server: the extra protocol stream (``rngs[n]``, which synchronous protocols leave unused),
    the one the vectorised engine hands over, so both engines give the same bits.
    """

    mechanism: str
    init_scale: FloatArray  # (P0,)
    em_scale: FloatArray  # (P + 1,): statistics and flag; ll and flag get 0
    releases: tuple[accounting.Release, ...]
    scales: tuple[float, ...]
    bound: float
    bound_from_data: bool
    n_nodes: int = 1
    shares: int = 1
    colluders: int = 0
    excluded: tuple[str, ...] = ()
    placement: guarantees.Placement | None = None
    aggregator_rng: np.random.Generator | None = None

    def scale(self, iteration: int) -> FloatArray:
        return self.init_scale if iteration == 0 else self.em_scale


def replace_one(blocks: list[mechanisms.Block]) -> list[mechanisms.Block]:
    """``blocks`` with their sensitivities under replacing a row: :data:`~p2pem.dp.publication.REPLACE_ONE`
    times those under adding or removing one (the triangle inequality; attained at opposite corners of the box)."""
    return [dataclasses.replace(b, l1=REPLACE_ONE * b.l1, l2=REPLACE_ONE * b.l2) for b in blocks]


# ------------------------------------------------------------------------- the specs


@dataclass(frozen=True)
class DPProtocol(ProtocolSpec):
    """Parameters shared by both private protocols (see the module docstring).

    Parameters
    ----------
    epsilon : float
        Total budget of the whole run (all EM iterations and the private init); ``inf``
        adds no noise.
    delta : float
        Total delta (0 only for ``laplace`` with ``basic`` accounting).
    mechanism : {"gaussian", "laplace"}
    accountant : {"rdp", "zcdp", "basic"}
        How the budget composes over iterations, see :mod:`p2pem.dp.accounting`.
    bound : float or None
        Public data domain: every feature is clipped to [-bound, bound].  None reads it off
        the data, with a :class:`DataBoundWarning` (the run is then not DP).
    split : str or None
        Budget split over the released block kinds of the model family and the init: a
        preset or comma-separated fractions.  Gaussian: weights, means, covariances, init,
        ``"wu"`` (4/16/70/10 %, the default) or ``"equal"``; mixed: weights, means,
        covariances, categories, init, ``"mixed"`` (5/10/10/60/15 %, the default) or
        ``"equal"`` (:mod:`p2pem.dp.releases.mixed`).  None: the family's default (the bound spec
        records the one used).
    weight_floor, smoothing : float
        Weight post-processing, :func:`p2pem.dp.postprocess.clip_weights`.
    covariance_repair : {"eigclamp", "diagshift", "xi", "shrink"}
    eig_floor : float
        Smallest eigenvalue a repaired covariance keeps (Park et al.: 1e-3).
    """

    epsilon: float = 1.0
    delta: float = 1e-5
    mechanism: Literal["gaussian", "laplace"] = "gaussian"
    accountant: Literal["rdp", "zcdp", "basic"] = "rdp"
    bound: Union[float, None] = None
    split: Union[str, None] = None
    weight_floor: float = 1e-3
    smoothing: float = 0.0
    covariance_repair: Literal["eigclamp", "diagshift", "xi", "shrink"] = "eigclamp"
    eig_floor: float = 1e-3
    #: the run's calibrated noise, set by :meth:`bind` (a bound spec is a new instance)
    plan: Union[NoisePlan, None] = field(default=None, repr=False, compare=False, metadata={"bound": True})

    def __post_init__(self) -> None:
        who = self.name
        if not (isinstance(self.epsilon, (int, float)) and not isinstance(self.epsilon, bool) and self.epsilon > 0):
            raise ConfigError(f"{who}: epsilon must be a number > 0 (inf: no noise), got {self.epsilon!r}")
        accounting.check_budget(self.mechanism, self.accountant, float(self.epsilon), float(self.delta))
        if self.bound is not None and not (math.isfinite(self.bound) and self.bound > 0):
            raise ConfigError(f"{who}: bound must be a finite number > 0, got {self.bound!r}")
        if self.split is not None and not any(self.split in p.splits for p in PRIVATE_FAMILIES.values()):
            # checked now as far as it can be without the family (then again in bind): the
            # fractions as those of the family with as many block kinds, if there is one
            count = len(self.split.split(","))
            names = next(((*p.kinds, "init") for p in PRIVATE_FAMILIES.values() if len(p.kinds) + 1 == count), None)
            try:
                accounting.parse_split(self.split, {name: f for p in PRIVATE_FAMILIES.values() for name, f in p.splits.items()}, names)
            except ConfigError as exc:
                raise ConfigError(f"{who}: {exc}") from None
        if not 0 <= self.weight_floor < 1 or not self.smoothing >= 0:
            raise ConfigError(f"{who}: weight_floor must be in [0, 1) and smoothing >= 0")
        if not (math.isfinite(self.eig_floor) and self.eig_floor > 0):
            raise ConfigError(f"{who}: eig_floor must be a finite number > 0, got {self.eig_floor!r}")

    # -- binding to a run ----------------------------------------------------------------

    def check_settings(self, settings: EMSettings) -> None:
        """Refuse a run this private protocol cannot account for; see :meth:`ProtocolSpec.check_settings`.

        Raises
        ------
        ConfigError
            ``settings.tol`` is not 0, ``settings.max_iter`` is 0, the family has no private
            release (:data:`p2pem.dp.releases.PRIVATE_FAMILIES`), or the split does not fit the family.
        """
        if settings.tol != 0:
            raise ConfigError(f"{self.label}: a private run has a fixed number of EM iterations: set tol = 0 (the estimator's tol; [em] tol in a scenario)")
        if settings.max_iter < 1:
            # with no M-step the only aggregation after the init would deliver the
            # log-likelihood of the init: statistics the budget has no share for
            raise ConfigError(f"{self.label}: a private run needs at least one EM iteration, got max_iter = {settings.max_iter} (the estimator's max_iter; [em] max_iter in a scenario)")
        try:
            private = check_private(settings.family)
        except ConfigError as exc:
            raise ConfigError(f"{self.label}: {exc} (em.family)") from None
        try:
            private.fractions(self._split(private))
        except ConfigError as exc:
            raise ConfigError(f"{self.label}: {settings.family.name} family: {exc}") from None

    def _split(self, private: PrivateFamily) -> str:
        """The split of this run: the one given, or the family's default (its first named split)."""
        return self.split if self.split is not None else next(iter(private.splits))

    def bind(
        self, settings: EMSettings, parts: list[FloatArray], *, seed: int | np.random.SeedSequence = 0
    ) -> tuple[DPProtocol, EMSettings, list[FloatArray]]:
        """Bind to a run: clip the data to the public box, calibrate the noise, hook the EM.

        See :meth:`p2pem.protocols.base.ProtocolSpec.bind`.  The bound spec (a new frozen
        instance carrying the :class:`NoisePlan`) serves that one run.

        Raises
        ------
        ConfigError
            :meth:`check_settings` refuses the settings.
        """
        self.check_settings(settings)
        private = PRIVATE_FAMILIES[settings.family.name]
        split = self._split(private)
        fractions = private.fractions(split)
        d = int(parts[0].shape[1])
        k = settings.n_components
        cols = private.bounded(settings.family, d)
        bound, from_data = self.bound, False
        if bound is None:
            bound = float(max(np.max(np.abs(p[:, cols]), initial=0.0) for p in parts)) or 1.0
            from_data = True
            warnings.warn(
                f"{self.label}: no 'bound' given, so the data domain [-{bound:.4g}, {bound:.4g}] was read off the data: "
                "the run is NOT differentially private; state a public bound",
                DataBoundWarning,
                stacklevel=3,
            )
        clipped = [p.copy() for p in parts]
        for c in clipped:
            c[:, cols] = np.clip(c[:, cols], -bound, bound)
        n_clipped = sum(int(np.count_nonzero(c != p)) for c, p in zip(clipped, parts, strict=True))
        if n_clipped:
            log.info("%s: %d feature values clipped to [-%g, %g]", self.label, n_clipped, bound, bound)
        options = RepairOptions(self.weight_floor, self.smoothing, self.covariance_repair, self.eig_floor)
        layout = private.release(settings.family, k, d, len(parts), bound, mechanism=self.mechanism, private_init=settings.init is None,
                                 options=options)
        em, init = list(layout.em), list(layout.init)
        # the blocks' sensitivities are stated for adding or removing a row; neighbours differ by
        # replacing one (n public, p2pem.dp.publication), which moves a release by at most twice that
        rel = accounting.releases(replace_one(em), replace_one(init), settings.max_iter, fractions, private.names)
        scales = accounting.calibrate(self.mechanism, self.accountant, float(self.epsilon), float(self.delta), rel)
        by_name = {r.block.name: s for r, s in zip(rel, scales, strict=True)}
        colluders, shares = self._collusion(len(parts))
        plan = NoisePlan(
            mechanism=self.mechanism,
            init_scale=mechanisms.scale_vector(init, [by_name.get(b.name, 0.0) for b in init], layout.init_size),
            em_scale=mechanisms.scale_vector(em, [by_name.get(b.name, 0.0) for b in em], layout.em_size),
            releases=tuple(rel),
            scales=tuple(scales),
            bound=bound,
            bound_from_data=from_data,
            n_nodes=len(parts),
            shares=shares,
            colluders=colluders,
            excluded=self._excluded(bound, from_data, settings),
            aggregator_rng=protocol_streams(seed, len(parts))[-1],
        )
        return dataclasses.replace(self, plan=plan, split=split), dataclasses.replace(settings, privacy=layout.hook), clipped

    def _collusion(self, n_nodes: int) -> tuple[int, int]:
        """(colluding nodes the guarantee survives, shares per calibrated draw): one trusted draw."""
        return n_nodes - 1, 1

    def _unknown_shares(self, n_nodes: int, colluders: int) -> int:
        """Shares of the released noise that ``colluders`` nodes do not know: the aggregator's one draw."""
        return 1

    def _excluded(self, bound: float, from_data: bool, settings: EMSettings) -> tuple[str, ...]:
        """What epsilon does not cover, as the ``privacy`` block lists it."""
        out = [
            f"the data domain [-{bound:.6g}, {bound:.6g}] per feature: read off the data, so the run is NOT differentially private"
            if from_data
            else f"the data domain [-{bound:.6g}, {bound:.6g}] per feature: public, stated as the protocol's 'bound'"
        ]
        if settings.init is not None:
            out.append("the initial model: public, given (em.init), not drawn from the data by the private initialisation")
        fields = guarantees.side_channels(getattr(self, "aggregation", ""))
        out.append(f"result fields {', '.join(fields)}: what the run reveals besides the noisy sums (timing"
                   + (", pdmm-sp's data-dependent round and message counts, the nodes' spread" if len(fields) > 1 else "") + ")")
        return tuple(out)

    @property
    def label(self) -> str:
        """How the run is named (each protocol says which mechanism and aggregation it uses)."""
        return self.name

    def _plan(self) -> NoisePlan:
        if self.plan is None:
            raise ProtocolError(f"{self.label}: not bound to a run (call bind(); run_protocol does)")
        return self.plan

    def accounting(self, colluders: int | None = None) -> dict[str, float | None]:
        """Epsilon at this run's delta under every accountant against ``colluders`` colluding nodes.

        0 is an outsider; None (default) the run's ``colluders`` (:class:`NoisePlan`).  None
        in the result: no guarantee (see :mod:`p2pem.dp.guarantees`), for every adversary when
        the bound was read off the data (the run is then not differentially private at all).
        """
        plan = self._plan()
        if plan.bound_from_data:
            return dict.fromkeys(accounting.ACCOUNTANTS)
        c = plan.colluders if colluders is None else colluders
        unknown = self._unknown_shares(plan.n_nodes, c)
        return guarantees.epsilon_left(self.mechanism, float(self.delta), plan.releases, plan.scales, shares=plan.shares, unknown=unknown)

    def placed(self, topology: Topology) -> DPProtocol:
        """Itself: ``dp-central``'s nodes see the noisy sums only, wherever colluders sit."""
        return self

    def worst_placement(self) -> dict[str, float | None] | None:
        """Epsilon at this run's delta under every accountant for the rows of the smallest honest
        group the run's colluders can cut off, placed worst (None: no placement computed yet).

        ``dp-central``: where the colluders sit does not matter (they see the noisy sums only).
        """
        plan = self._plan()
        if plan.placement is None:
            return None
        if plan.bound_from_data:
            return dict.fromkeys(accounting.ACCOUNTANTS)
        return guarantees.epsilon_left(self.mechanism, float(self.delta), plan.releases, plan.scales, shares=plan.shares,
                                       unknown=plan.placement.size)

    def privacy(self) -> dict:
        """The ``privacy`` block of a run: epsilon against each adversary and what it excludes.

        ``epsilon.colluders`` holds against the run's colluders wherever every honest node
        keeps an honest neighbour; ``epsilon.colluders_worst_placement`` (once the topology
        was seen) against the same number placed worst, described under ``worst_placement``.
        """
        plan = self._plan()
        outsider, colluders = self.accounting(0)[self.accountant], self.accounting()[self.accountant]
        against: dict[str, float | None] = {"outsider": outsider, "colluders": colluders}
        if self.name == "dp-central":
            against["aggregator"] = None  # it sees every node's exact statistics
        worst = self.worst_placement()
        if worst is not None:
            against["colluders_worst_placement"] = worst[self.accountant]
        out = {
            "accountant": self.accountant,
            "delta": float(self.delta),
            "colluders": plan.colluders,
            "epsilon": against,
            "excluded": list(plan.excluded),
            **simulation_block(),
        }
        if plan.placement is not None:
            out["worst_placement"] = self._placement_block(plan)
        return out

    def _placement_block(self, plan: NoisePlan) -> dict:
        """``privacy.worst_placement``: where ``colluders`` nodes would sit worst, what they disclose."""
        p = plan.placement
        assert p is not None
        return {
            "colluders": p.colluders,
            "smallest_honest_group": p.size,
            "shares_per_draw": plan.shares,
            "exact": p.exact,
            "example_colluders": list(p.placed),
            "example_group": list(p.group),
        }

    def params(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in parameter_fields(self)}
        if out["epsilon"] == math.inf:
            out["epsilon"] = None  # JSON has no infinity; null = no noise
        if self.plan is not None:
            out["bound_used"] = self.plan.bound
            out["bound_from_data"] = self.plan.bound_from_data
            out["epsilon_spent"] = {"outsider": self.accounting(0), "colluders": self.accounting()}
            worst = self.worst_placement()
            if worst is not None:
                out["epsilon_spent"]["colluders_worst_placement"] = worst
            out["privacy"] = self.privacy()
        return out


@dataclass(frozen=True)
class DPCentral(DPProtocol):
    """``dp-central``: a trusted aggregator sums the exact statistics and adds the noise.

    Protects the released model against everyone but the aggregator (module docstring).
    The aggregator's randomness is the extra protocol stream (``rngs[n]``, which synchronous
    protocols leave unused); the message-level server draws from the same stream, so both
    engines give the same bits.
    """

    name: str = field(init=False, default="dp-central")

    @property
    def label(self) -> str:
        return f"dp-central-{self.mechanism}"

    @property
    def message_kinds(self) -> frozenset[str]:
        return Federated().message_kinds

    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        return UploadNode(ctx, iteration)

    def server_aggregation(self, topology: Topology, iteration: int) -> Aggregation:
        return NoisyServer(self, topology.n_nodes, iteration)

    def aggregate(self, values, topology, rngs, iteration, *, record=False) -> AggregateOutcome:
        plan = self._plan()
        n, p = values.shape
        out = Federated().aggregate(values, topology, rngs, iteration, record=record)
        noisy = fsum_average(values) + mechanisms.noise(rngs[n], plan.scale(iteration), plan.mechanism) / n
        if out.trace is not None:
            out.trace[-1] = dataclasses.replace(out.trace[-1], payload=noisy.copy())
        out.results = np.broadcast_to(noisy, (n, p))
        return out


@dataclass(frozen=True)
class DPDistributed(DPProtocol):
    """``dp-distributed``: every node adds its noise share, ``aggregation`` sums (module docstring).

    Parameters
    ----------
    aggregation : {"secure-sum", "pdmm-sp"}
        The protocol that sums the noisy statistics (with its default parameters).
    tolerate : int or None
        t: the colluding nodes the guarantee survives.  Each of the n nodes adds a share
        such that any n - t shares make the calibrated noise, so whatever t nodes subtract
        their own shares from the output, the configured epsilon still holds; the released
        sums carry n / (n - t) times the central noise variance.  0 <= t < n; None (the
        default) is floor(n / 2), an honest majority, at most twice the variance.
    calibrate : {"tolerate", "worst-placement"}
        How many shares make the calibrated draw.  ``"tolerate"`` (the default): n - t, so
        epsilon holds against t colluders that leave every honest node behind honest
        neighbours; placed worst (both ring neighbours of a ``secure-sum`` node, every
        neighbour of a ``pdmm-sp`` node) they cut off a group of h < n - t nodes whose rows
        get a weaker epsilon, which the run reports (``privacy.epsilon.colluders_worst_placement``).
        ``"worst-placement"``: h, read off the ring or graph
        (:func:`p2pem.dp.guarantees.smallest_honest_group`), so epsilon holds against any t
        colluders wherever they sit; the released sums carry n / h times the central noise
        variance (n times at h = 1).
    """

    aggregation: Literal["secure-sum", "pdmm-sp"] = "secure-sum"
    tolerate: Union[int, None] = None
    calibrate: Literal["tolerate", "worst-placement"] = "tolerate"
    name: str = field(init=False, default="dp-distributed")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.aggregation not in ("secure-sum", "pdmm-sp"):
            raise ConfigError(f"dp-distributed: aggregation must be 'secure-sum' or 'pdmm-sp', got {self.aggregation!r}")
        if self.tolerate is not None and not (isinstance(self.tolerate, int) and not isinstance(self.tolerate, bool) and self.tolerate >= 0):
            raise ConfigError(f"dp-distributed: 'tolerate' must be an integer >= 0 (colluding nodes), got {self.tolerate!r}")
        if self.calibrate not in ("tolerate", "worst-placement"):
            raise ConfigError(f"dp-distributed: 'calibrate' must be 'tolerate' or 'worst-placement', got {self.calibrate!r}")

    @property
    def inner(self) -> ProtocolSpec:
        """The protocol that sums the noisy statistics (with its default parameters)."""
        return SecureSum() if self.aggregation == "secure-sum" else PdmmSP()

    @property  # type: ignore[misc]  # ProtocolSpec's field, derived here from the inner protocol
    def exact(self) -> bool:
        return self.inner.exact

    @property
    def label(self) -> str:
        return f"dp-{self.aggregation}-{self.mechanism}"

    # what a deployment needs to know is the inner protocol's
    message_kinds = property(lambda self: self.inner.message_kinds)
    secret_kinds = property(lambda self: self.inner.secret_kinds)
    max_ahead = property(lambda self: self.inner.max_ahead)
    agreement_rtol = property(lambda self: self.inner.agreement_rtol)

    def public_parameters(self, topology: Topology) -> tuple[float, ...]:
        return self.inner.public_parameters(topology)

    def _collusion(self, n_nodes: int) -> tuple[int, int]:
        t = n_nodes // 2 if self.tolerate is None else self.tolerate
        if t >= n_nodes:
            raise ConfigError(
                f"dp-distributed: 'tolerate' = {t} must be below the {n_nodes} nodes (the shares of the other nodes carry the noise)"
            )
        return t, n_nodes - t

    def _unknown_shares(self, n_nodes: int, colluders: int) -> int:
        return n_nodes - colluders

    def _placed_plan(self) -> NoisePlan:
        """The plan the shares are drawn from; ``calibrate = "worst-placement"`` needs the topology first."""
        plan = self._plan()
        if self.calibrate == "worst-placement" and plan.placement is None:
            raise ProtocolError(f"{self.label}: calibrate = 'worst-placement' sizes the shares from the topology: call placed(topology) "
                                "after bind() (run_protocol does)")
        return plan

    def placed(self, topology: Topology) -> DPDistributed:
        """The smallest honest group the run's t colluders can cut off on ``topology`` (secure-sum:
        its ring; pdmm-sp: its graph), and with ``calibrate = "worst-placement"`` shares sized for it."""
        plan = self._plan()
        if topology.n_nodes != plan.n_nodes:
            raise ConfigError(f"{self.label}: the topology has {topology.n_nodes} nodes but the run was bound to {plan.n_nodes}")
        if self.aggregation == "secure-sum":
            if topology.ring is None:
                raise ConfigError(f"{self.label}: the topology has no ring")
            graph: list[tuple[int, ...]] | tuple[tuple[int, ...], ...] = guarantees.ring_neighbours(topology.ring)
        else:
            graph = topology.neighbours
        placement = guarantees.smallest_honest_group(graph, plan.colluders)
        shares = plan.n_nodes - plan.colluders
        if self.calibrate == "worst-placement":
            shares = min(shares, placement.size)
        return dataclasses.replace(self, plan=dataclasses.replace(plan, placement=placement, shares=shares))

    def validate(self, g: nx.Graph) -> None:
        self.inner.validate(g)
        self._collusion(g.n_nodes if isinstance(g, Topology) else g.number_of_nodes())  # tolerate < n

    def topology(self, g: nx.Graph) -> Topology:
        return self.inner.topology(g)

    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        return NoisyNode(self, ctx, iteration)

    def aggregate(self, values, topology, rngs, iteration, *, record=False) -> AggregateOutcome:
        return self.inner.aggregate(self.noisy_inputs(values, rngs, iteration), topology, rngs, iteration, record=record)

    def noisy_inputs(self, values: FloatArray, rngs: list[np.random.Generator], iteration: int) -> FloatArray:
        """(n, P): what the aggregation protocol sums, every node's values plus its noise share.

        Draws each share from the node's stream first, as :class:`NoisyNode` does.
        """
        plan = self._placed_plan()
        scale = plan.scale(iteration)
        shares = np.stack([mechanisms.noise_share(rngs[i], scale, plan.mechanism, plan.shares) for i in range(values.shape[0])])
        return values + shares

    def params(self) -> dict:
        out = super().params()
        out["aggregation"] = self.aggregation
        return out


class NoisyServer(ServerNode):
    """``dp-central``'s trusted aggregator: sums the uploads exactly, adds the noise once."""

    def __init__(self, spec: DPCentral, n_nodes: int, iteration: int) -> None:
        super().__init__(n_nodes, iteration)
        self.spec = spec

    def receive(self, msg: Message) -> list[Message]:
        out = super().receive(msg)
        if not self.done:
            return out
        plan = self.spec._plan()
        rng = plan.aggregator_rng
        if rng is None:
            raise ProtocolError(f"{self.spec.label}: the aggregator has no random stream (call bind())")
        assert self.result is not None  # done: the exact average is in
        self.result = self.result + mechanisms.noise(rng, plan.scale(self.iteration), plan.mechanism) / self.n
        return [dataclasses.replace(m, payload=self.result.copy()) for m in out]


class NoisyNode(Aggregation):
    """One node of ``dp-distributed``: its noise share, then the inner protocol's state machine."""

    def __init__(self, spec: DPDistributed, ctx: NodeContext, iteration: int) -> None:
        super().__init__()
        self.spec = spec
        self.ctx = ctx
        self.iteration = iteration
        self.inner = spec.inner.node_aggregation(ctx, iteration)

    def start(self, value: np.ndarray) -> list[Message]:
        plan = self.spec._placed_plan()
        share = mechanisms.noise_share(self.ctx.rng, plan.scale(self.iteration), plan.mechanism, plan.shares)
        return self._sync(self.inner.start(value + share))

    def receive(self, msg: Message) -> list[Message]:
        return self._sync(self.inner.receive(msg))

    def wake(self) -> list[Message]:
        return self._sync(self.inner.wake())

    @property
    def ready(self) -> bool:
        return self.inner.ready

    @property
    def round(self):
        return getattr(self.inner, "round", 0)

    # a deployment's checks and declarations are the inner protocol's
    def check(self, msg: Message) -> None:
        self.inner.check(msg)

    def awaiting(self) -> tuple[int, ...]:
        return self.inner.awaiting()

    def may_wake(self) -> bool:
        return self.inner.may_wake()

    def proposal(self) -> tuple[int, int] | None:
        return self.inner.proposal()

    def claimed_stop(self, msg: Message) -> int | None:
        return self.inner.claimed_stop(msg)

    def check_proposal(self, origin: int, proposed_at: int, stop: int) -> tuple[str, str] | None:
        return self.inner.check_proposal(origin, proposed_at, stop)

    def _sync(self, out: list[Message]) -> list[Message]:
        self.done, self.result = self.inner.done, self.inner.result
        self.rounds, self.converged = self.inner.rounds, self.inner.converged
        return out


__all__ = ["DPCentral", "DPDistributed", "DPProtocol", "DataBoundWarning", "NoisePlan", "PrivateEM"]
