"""Epsilon against the worst placement of t colluders (p2pem.dp.guarantees.smallest_honest_group).

``tolerate = t`` sizes the noise shares so that any n - t of them make the calibrated draw.
Colluders placed where they cut an honest node off (both ring neighbours of a secure-sum node,
every neighbour of a pdmm-sp node) read that node's input with its single share.  These tests
check the group search against brute force over every placement, and the epsilon a run reports
for that placement against an attack the test carries out itself: the colluders' view of the
cut-off node's input is computed here from the recorded messages (secure-sum: the ring value
it sent minus the one it received; pdmm-sp: its first primal broadcast and the initial duals
it sent its neighbours), over many runs of two neighbouring data sets (one of the target's
rows replaced), and a threshold test with Clopper-Pearson bounds gives an empirical lower bound
on epsilon (Jagielski et al. 2020) that must stay below the reported worst-placement epsilon.
The spread of that reading shows why the favourable-placement epsilon does not hold for the
cut-off node: one share, 1/sqrt(n - t) of the calibrated scale, for which the accountant
certifies the reported worst-placement epsilon, not the favourable one.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import networkx as nx
import numpy as np
import pytest
from scipy.stats import beta

from p2pem.dp import accounting
from p2pem.dp.guarantees import ring_neighbours, smallest_honest_group
from p2pem.em import EMSettings, EMState
from p2pem.errors import ProtocolError
from p2pem.gmm import GMMParams
from p2pem.protocols import Topology
from p2pem.registry import make_protocol
from p2pem.simulate import protocol_streams, run_protocol

BOUND = 1.0
ROWS = np.array([[-0.5], [0.25]])  # every node's rows in D; D' replaces the target's first row by REPLACED
REPLACED = -BOUND  # replace-one neighbours (n public): the corner farthest from ROWS[0] in both x and x^2
#: runs per data set: the first CALIBRATE pick the threshold, the rest give the bounds
RUNS, CALIBRATE = 2500, 700
ALPHA = 0.0005  # one-sided level of each Clopper-Pearson bound (99.9 % jointly)


def _brute_force(neighbours: list[tuple[int, ...]], t: int) -> int:
    """The smallest honest component over every placement of exactly t colluders (networkx)."""
    g = nx.Graph()
    g.add_nodes_from(range(len(neighbours)))
    g.add_edges_from((i, j) for i, nb in enumerate(neighbours) for j in nb)
    best = len(neighbours)
    for corrupt in itertools.combinations(range(len(neighbours)), t):
        rest = g.subgraph(set(g) - set(corrupt))
        best = min(best, min((len(c) for c in nx.connected_components(rest)), default=best))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_smallest_group_is_the_brute_force_minimum_over_every_placement(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 10))
    g = nx.gnp_random_graph(n, float(rng.uniform(0.3, 0.7)), seed=seed)
    while not nx.is_connected(g):
        g.add_edge(*map(int, rng.choice(n, 2, replace=False)))
    neighbours = [tuple(sorted(g.neighbors(i))) for i in range(n)]
    ring = [int(v) for v in rng.permutation(n)]
    for graph in (neighbours, ring_neighbours(ring)):
        for t in range(n):
            p = smallest_honest_group(graph, t)
            assert p.exact and p.size == _brute_force(graph, t), (graph, t)
            # the example placement does cut the example group off
            assert len(p.placed) == t and not set(p.placed) & set(p.group)
            outside = set().union(*(graph[v] for v in p.group)) - set(p.group)
            assert outside <= set(p.placed) and len(p.group) == p.size


def test_alternate_ring_positions_isolate_one_node_and_a_budget_gives_a_lower_bound():
    ring = ring_neighbours(list(range(10)))
    assert smallest_honest_group(ring, 1).size == 9  # one colluder reads nothing but the total
    two = smallest_honest_group(ring, 2)
    assert two.size == 1 and len(two.placed) == 2 and set(ring[two.group[0]]) == set(two.placed)
    # a 4-regular graph: 3 colluders cannot surround a node, 4 can
    g = [tuple(sorted({(i + d) % 12 for d in (-2, -1, 1, 2)})) for i in range(12)]
    assert smallest_honest_group(g, 3).size > 1 and smallest_honest_group(g, 4).size == 1
    cut = smallest_honest_group(g, 3, budget=5)
    assert not cut.exact and cut.size <= smallest_honest_group(g, 3).size


# ------------------------------------------------------------------ the attack


def _clopper_pearson(k: int, n: int) -> tuple[float, float]:
    lo = float(beta.ppf(ALPHA, k, n - k + 1)) if k > 0 else 0.0
    hi = float(beta.ppf(1 - ALPHA, k + 1, n - k)) if k < n else 1.0
    return lo, hi


def _epsilon_lower_bound(null: np.ndarray, alt: np.ndarray, delta: float) -> float:
    """Threshold test on the first coordinates of the view; threshold from the calibration runs."""
    shift = alt[:CALIBRATE].mean(axis=0) - null[:CALIBRATE].mean(axis=0)
    var = null[:CALIBRATE].var(axis=0)
    centre = null[:CALIBRATE].mean(axis=0)

    def llr(v):
        return np.sum(shift * (v - centre - shift / 2) / var, axis=1)

    s0, s1 = llr(null), llr(alt)

    def bound(tau, a, b):
        fpr_hi = _clopper_pearson(int(np.sum(a > tau)), len(a))[1]
        tpr_lo = _clopper_pearson(int(np.sum(b > tau)), len(b))[0]
        return math.log(tpr_lo - delta) - math.log(fpr_hi) if tpr_lo > delta else -math.inf

    taus = np.quantile(s0[:CALIBRATE], np.linspace(0.5, 0.995, 60))
    tau = max(taus, key=lambda t: bound(t, s0[:CALIBRATE], s1[:CALIBRATE]))
    return bound(tau, s0[CALIBRATE:], s1[CALIBRATE:])


def _decode(ring_value) -> np.ndarray:
    """secure-sum's ring integers (mod 2^256, 96 fractional bits, two's complement) -> floats."""
    modulus, half = 1 << 256, 1 << 255
    return np.array([math.ldexp(float(v - modulus if v >= half else v), -96) for v in ring_value])


def _secure_sum_view(trace, target: int, colluders: tuple[int, ...]) -> np.ndarray:
    """The target's input as its two colluding ring neighbours read it: what it sent on minus what it got."""
    sent = next(m for m in trace if m.kind == "ring" and m.sender == target)
    got = next(m for m in trace if m.kind == "ring" and target in m.receivers)
    assert set(sent.receivers) <= set(colluders) and got.sender in colluders  # both in the colluders' hands
    sent, got = sent.payload, got.payload
    return _decode(tuple((a - b) % (1 << 256) for a, b in zip(sent, got, strict=True)))


def _pdmm_view(trace, target: int, colluders: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(x_target(1), u_target): its first broadcast and the signed sum of the initial duals it sent
    to its neighbours, all of them colluders: x(1) = (input - u) / a, a public constant."""
    duals = [m for m in trace if m.kind == "dual-init" and m.sender == target]
    x1 = next(m for m in trace if m.kind == "primal" and m.sender == target and m.round == 1)
    if colluders is not None:  # every message read here reached a colluder
        assert all(set(m.receivers) <= set(colluders) for m in duals) and set(x1.receivers) <= set(colluders)
    u = sum((1.0 if target < m.receivers[0] else -1.0) * np.asarray(m.payload) for m in duals)
    return np.asarray(x1.payload), u


def _bound_run(spec, topology, n: int, target: int, extra: bool):
    parts = [ROWS.copy() for _ in range(n)]
    if extra:
        parts[target] = parts[target].copy()
        parts[target][0, 0] = REPLACED
    init = GMMParams(np.array([1.0]), np.array([[0.0]]), np.array([[[1.0]]]))
    settings = EMSettings(1, max_iter=1, tol=0.0, init=init)
    bound, bound_settings, clipped = spec.bind(settings, parts, seed=0)
    bound = bound.placed(topology)
    state = EMState(clipped, bound_settings, n)
    return bound, state.iteration, state.contribution()


def _views(spec, topology, n: int, target: int, extra: bool, draws: int, colluders: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """(draws, 3): the colluders' reading of the target's (count, sum x, sum x^2) in ``draws`` runs.

    One aggregation carries the runs side by side: its vector is the nodes' statistics repeated
    ``draws`` times and the calibrated scale with them, so every copy gets its own noise shares
    (the protocols treat coordinates independently); the view is read off the recorded trace.
    """
    bound, iteration, values = _bound_run(spec, topology, n, target, extra)
    p = values.shape[1]
    plan = bound.plan
    tiled = dataclasses.replace(bound, plan=dataclasses.replace(plan, em_scale=np.tile(plan.em_scale, draws)))
    trace = tiled.aggregate(np.tile(values, draws), topology, protocol_streams(seed, n), iteration, record=True).trace
    if spec.aggregation == "secure-sum":
        view = _secure_sum_view(trace, target, colluders)
    else:
        x1, u = _pdmm_view(trace, target, colluders)
        view = x1 * _pdmm_constant(topology, n, target) + u
    return view.reshape(draws, p)[:, :3]


def _pdmm_constant(topology, n: int, target: int) -> float:
    """a in x(1) = (input - u) / a, measured as the attacker would: from a run without noise whose input it knows."""
    exact = make_protocol("dp-distributed", {"aggregation": "pdmm-sp", "epsilon": math.inf, "bound": BOUND, "mechanism": "gaussian"})
    plain, iteration, values = _bound_run(exact, topology, n, target, False)
    x1, u = _pdmm_view(plain.aggregate(values, topology, protocol_streams(0, n), iteration, record=True).trace, target)
    return float((values[target][1] - u[1]) / x1[1])


def _attack(aggregation: str, topology: Topology, target: int, colluders: tuple[int, ...], **params):
    n = topology.n_nodes
    spec = make_protocol("dp-distributed", {"aggregation": aggregation, "epsilon": 2.0, "bound": BOUND, "mechanism": "gaussian",
                                            "delta": 1e-5, **params})
    null = _views(spec, topology, n, target, False, RUNS, colluders, seed=1)
    alt = _views(spec, topology, n, target, True, RUNS, colluders, seed=2)
    parts = [ROWS.copy() for _ in range(n)]
    init = GMMParams(np.array([1.0]), np.array([[0.0]]), np.array([[[1.0]]]))
    run = run_protocol(parts, topology, spec, EMSettings(1, max_iter=1, tol=0.0, init=init), seed=0)
    privacy = run.protocol_params["privacy"]
    # the run found a placement as bad as the one attacked: a single node cut off
    assert privacy["worst_placement"]["smallest_honest_group"] == 1
    assert len(privacy["worst_placement"]["example_colluders"]) == len(colluders) == privacy["colluders"]
    # what the colluders face: the spread of their reading against the calibrated scale, and the
    # epsilon the accountant certifies for the spread measured
    bound, _, _ = _bound_run(spec, topology, n, target, False)
    factor = float(np.median(null.std(axis=0) / bound.plan.scale(1)[:3]))
    measured = accounting.spent("gaussian", "rdp", 1e-5, bound.plan.releases, [s * factor for s in bound.plan.scales])
    return _epsilon_lower_bound(null, alt, 1e-5), privacy, factor, measured


def _check(lb: float, privacy: dict, factor: float, measured: float, n: int) -> None:
    eps = privacy["epsilon"]
    assert eps["colluders"] == pytest.approx(2.0, rel=1e-6)
    # the cut-off node's reading carries one of the n - t = n / 2 shares, not the calibrated noise:
    # the favourable-placement epsilon does not hold for it, the reported worst-placement one does
    assert factor == pytest.approx(1 / math.sqrt(n // 2), rel=0.1)
    assert measured > 2 * eps["colluders"] and measured == pytest.approx(eps["colluders_worst_placement"], rel=0.25)
    assert lb > 0.5 and lb <= eps["colluders_worst_placement"], f"empirical {lb:.3f} vs reported {eps['colluders_worst_placement']:.3f}"


def _ring_topology(n: int) -> Topology:
    return Topology.from_graph(nx.complete_graph(n), ring=list(range(n)))


@pytest.mark.slow
def test_colluders_at_alternate_ring_positions_get_the_reported_worst_epsilon():
    """40 nodes, t = 20 (the default): colluders at every other ring position read each honest
    node's input with one of the 20 shares that make the calibrated noise."""
    n, target = 40, 5
    lb, privacy, factor, measured = _attack("secure-sum", _ring_topology(n), target, tuple(range(0, n, 2)))
    _check(lb, privacy, factor, measured, n)


@pytest.mark.slow
def test_colluders_around_a_pdmm_sp_node_get_the_reported_worst_epsilon():
    """A 40-node circulant graph of degree 4, t = 20 (the default): the four neighbours of node 5
    (and 16 others anywhere) read its input."""
    n, target = 40, 5
    topology = Topology.from_graph(nx.circulant_graph(n, [1, 2]))
    lb, privacy, factor, measured = _attack("pdmm-sp", topology, target, (3, 4, 6, 7, *range(20, 36)))
    _check(lb, privacy, factor, measured, n)


def test_worst_placement_calibration_keeps_the_configured_epsilon_against_any_placement():
    n, target = 20, 5
    topology = _ring_topology(n)
    spec = make_protocol("dp-distributed", {"aggregation": "secure-sum", "epsilon": 2.0, "bound": BOUND, "mechanism": "gaussian",
                                            "calibrate": "worst-placement"})
    init = GMMParams(np.array([1.0]), np.array([[0.0]]), np.array([[[1.0]]]))
    run = run_protocol([ROWS.copy() for _ in range(n)], topology, spec, EMSettings(1, max_iter=1, tol=0.0, init=init), seed=0)
    privacy = run.protocol_params["privacy"]
    assert privacy["worst_placement"]["shares_per_draw"] == 1
    assert privacy["epsilon"]["colluders_worst_placement"] == pytest.approx(2.0, rel=1e-6)
    assert privacy["epsilon"]["outsider"] < privacy["epsilon"]["colluders"] < 2.0
    # the cut-off node's input carries the whole calibrated noise: its spread is the calibrated scale
    bound, _, _ = _bound_run(spec, topology, n, target, False)
    views = _views(spec, topology, n, target, False, 400, (target - 1, target + 1))
    scale = bound.plan.scale(1)[:3]
    assert np.std(views, axis=0) == pytest.approx(scale, rel=0.15)
    # drawing shares before the topology sized them is refused, not silently too few
    unplaced = spec.bind(EMSettings(1, max_iter=1, tol=0.0, init=init), [ROWS.copy() for _ in range(n)], seed=0)[0]
    with pytest.raises(ProtocolError, match="worst-placement"):
        unplaced.noisy_inputs(np.zeros((n, 5)), protocol_streams(0, n), 1)
