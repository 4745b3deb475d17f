"""Mutual information of multi-iteration views in the paper's Fig. 3 setting.

Each node holds one scalar X_i ~ N(0, 1); EM with K components runs T iterations after the
private initialisation, and every aggregation carries all of a_k, b_k, C_k and the
log-likelihood.  By the exact reduction of :mod:`p2pem.leakage.wholerun` (tested to 1e-9),
what an adversary determines is the sum of those statistics over each disclosed group of
honest nodes (:func:`p2pem.leakage.theory.disclosed_groups`), per aggregation; the intermediate
models are functions of these sums and the corrupt inputs.  :func:`multi_iteration_leakage`
draws the Monte Carlo runs with the real EM code (:class:`p2pem.em.EMState`, one state per
node of every run), and per number T of iterations seen gives

* the KSG estimate, with a confidence interval (:func:`p2pem.leakage.estimators.mi_with_ci`),
  of I(X_target; R_T) for a fixed low-dimensional reduction R_T of the view: the group's
  initialisation sums (sum x, sum x^2) and, for T >= 1, the attack's sorted estimates of the
  group's rows from aggregations 0..T.  By data processing it is a lower bound on the
  leakage of the whole view (the raw sums of T iterations have 2 + 6 T dimensions, where
  KSG's bias would hide the growth with T);
* the exact value where the structure gives one (:func:`init_sum_leakage_bits`): after the
  initialisation alone a group of g >= 3 one-row nodes discloses (sum x, sum x^2), and X_i
  given those lies on a circle (a sphere for g > 3) of the group's residuals; g <= 2 is
  disclosed up to the order of the rows (infinite information for continuous inputs);
* the attack's success: the fraction of runs in which
  :func:`p2pem.leakage.attack.reconstruct_rows` recovers X_target to 1e-6 among the group's
  estimates.

Once the rows of a group are identified (the attack's success is 1), X_target is one of the g
recovered values: the exact information is infinite, and what is left to the adversary is
which of g nodes holds which value (log2 g bits of attribution, by symmetry).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy import special, stats

from p2pem.em import EMSettings, EMState
from p2pem.errors import ConfigError
from p2pem.gmm import GMMParams
from p2pem.leakage.attack import Observation, match_rows, reconstruct_rows
from p2pem.leakage.estimators import mi_with_ci
from p2pem.leakage.theory import disclosed_groups
from p2pem.leakage.views import Adversary
from p2pem.protocols import ProtocolSpec
from p2pem.streams import as_seed_sequence
from p2pem.task import drive

__all__ = ["MultiIterationLeakage", "init_sum_leakage_bits", "multi_iteration_leakage"]


def init_sum_leakage_bits(g: int) -> float:
    """Exact I(X_1; sum x, sum x^2) in bits for g i.i.d. N(0, 1) scalars (inf for g <= 2).

    Notes
    -----
    The residual X - mean 1 is isotropic with unit variance in the (g - 1)-dimensional
    complement of 1, independent of the mean; its norm rho (rho^2 ~ chi^2_{g-1}) is fixed by
    the two sums and its direction is uniform.  So X_1 = mean + rho sqrt((g-1)/g) u with u
    the first coordinate of a uniform unit vector in R^{g-1}, (u + 1)/2 ~ Beta((g-2)/2,
    (g-2)/2), and I = h(X_1) - E[log rho] - 1/2 log((g-1)/g) - h(u), with
    E[log rho] = (psi((g-1)/2) + log 2) / 2.
    """
    if g <= 2:
        return math.inf
    h_x = 0.5 * math.log(2 * math.pi * math.e)
    e_log_rho = 0.5 * (special.digamma((g - 1) / 2) + math.log(2))
    h_u = float(stats.beta((g - 2) / 2, (g - 2) / 2).entropy()) + math.log(2)
    nats = h_x - e_log_rho - 0.5 * math.log((g - 1) / g) - h_u
    return nats / math.log(2)


@dataclass(frozen=True)
class MultiIterationLeakage:
    """Leakage about one node against the number of EM iterations seen.

    Attributes
    ----------
    group : tuple of int
        The disclosed group holding the target.
    iterations_seen : tuple of int
    mi_bits, mi_lo, mi_hi : tuple of float
        KSG estimate and confidence interval per T.
    exact_bits : tuple of float or None
        Exact value per T where the structure gives one (None otherwise).
    attack_success : tuple of float
        Fraction of attacked runs in which the target's value was recovered to 1e-6.
    """

    group: tuple[int, ...]
    iterations_seen: tuple[int, ...]
    mi_bits: tuple[float, ...]
    mi_lo: tuple[float, ...]
    mi_hi: tuple[float, ...]
    exact_bits: tuple[float | None, ...]
    attack_success: tuple[float, ...]


def multi_iteration_leakage(
    spec: ProtocolSpec,
    graph: nx.Graph,
    adversary: Adversary,
    target: int,
    *,
    iterations_seen: tuple[int, ...] = (0, 1, 2),
    n_components: int = 2,
    runs: int = 1000,
    k: int = 3,
    n_batches: int = 10,
    seed: int | np.random.SeedSequence = 0,
) -> MultiIterationLeakage:
    """KSG, exact and attack leakage about ``target`` over T EM iterations (module docstring).

    Parameters
    ----------
    spec, graph, adversary
        The protocol, the graph (one scalar row per node) and the adversary; the groups come
        from :func:`p2pem.leakage.theory.disclosed_groups`.
    target : int
        An honest node.
    iterations_seen : tuple of int
        Values of T (0: the initialisation only).
    n_components : int
    runs : int
        Monte Carlo runs (each is attacked, and the KSG estimate uses them all).
    k, n_batches
        KSG neighbours and confidence-interval batches.
    seed : int or SeedSequence
        Data, EM initialisation, estimator and attack randomness.

    Returns
    -------
    MultiIterationLeakage

    Raises
    ------
    ConfigError
        A corrupt target, or a protocol without closed-form groups.

    Notes
    -----
    Cost: T + 1 batched EM steps over ``runs`` x n nodes; per T, ``runs`` small
    least-squares fits and one KSG estimate in 1 + 2 + g dimensions.
    """
    if target in adversary.corrupt:
        raise ConfigError(f"target node {target} is corrupt")
    n = graph.number_of_nodes()
    groups = disclosed_groups(spec, spec.topology(graph), graph, adversary)
    if groups is None:
        raise ConfigError(f"{spec.name}: no closed-form disclosure groups")
    group = next(g for g in groups if target in g)
    data_ss, init_ss, est_ss, attack_ss = as_seed_sequence(seed).spawn(4)
    X = np.random.default_rng(data_ss).standard_normal((runs, n))
    t_max = max(iterations_seen)
    settings = EMSettings(n_components, max_iter=t_max, tol=0.0, init_seed=int(init_ss.generate_state(1)[0]))
    # one EMState "node" per (run, node): the real per-node EM code, averaged per run; the
    # last aggregation (after M-step t_max) only delivers the final log-likelihood
    state = EMState([X[r, i : i + 1, None] for r in range(runs) for i in range(n)], settings, n)
    members = list(group)
    init_sums: np.ndarray | None = None
    observations: list[list[Observation]] = [[] for _ in range(runs)]

    def observe(t: int, values: np.ndarray) -> None:
        """What the adversary determines of aggregation t: the group's sums, per run."""
        nonlocal init_sums
        sums = values.reshape(runs, n, -1)[:, members].sum(axis=1)
        if t == 0:
            init_sums = sums[:, 1:]  # the count is public
        for r in range(runs):
            observations[r].append(Observation(None if t == 0 else _copy(state.params(r * n)), sums[r] if t == 0 else sums[r, :-1]))

    def average_per_run(t: int, values: np.ndarray) -> np.ndarray:
        return np.repeat(values.reshape(runs, n, -1).mean(axis=1), n, axis=0)

    drive(state, average_per_run, before=observe)
    est_rng = np.random.default_rng(est_ss)
    attack_rng = np.random.default_rng(attack_ss)
    truth = X[:, members]
    mi, lo, hi, exact, success = [], [], [], [], []
    for t_seen in iterations_seen:
        recovered = np.zeros(runs, dtype=bool)
        estimates = np.empty((runs, len(members)))
        for r in range(runs):
            fit = reconstruct_rows(observations[r][: t_seen + 1], len(members), rng=attack_rng, starts=2, max_nfev=40)
            estimates[r] = np.sort(fit.rows[:, 0])
            recovered[r] = match_rows(truth[r, :, None], fit.rows).max() < 1e-6
        # the view reduced by a fixed function of it: the initialisation's sums and, after
        # EM iterations, the attack's sorted estimates (data processing: a lower bound)
        assert init_sums is not None  # set by the initialisation (t = 0)
        view = init_sums if t_seen == 0 else np.column_stack([init_sums, estimates])
        est, a, b = mi_with_ci(X[:, target], view, k=k, rng=est_rng, n_batches=n_batches)
        mi.append(est)
        lo.append(a)
        hi.append(b)
        exact.append(init_sum_leakage_bits(len(group)) if t_seen == 0 or len(group) <= 2 else None)
        success.append(float(recovered.mean()))
    return MultiIterationLeakage(tuple(group), tuple(iterations_seen), tuple(mi), tuple(lo), tuple(hi), tuple(exact), tuple(success))


def _copy(p: GMMParams) -> GMMParams:
    return GMMParams(p.weights.copy(), p.means.copy(), p.covariances.copy())
