"""Tests of p2pem.leakage.views: adversary models and views built from message traces."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from p2pem.errors import ConfigError, DataError
from p2pem.graphs import graph_from_edges
from p2pem.leakage.views import Adversary, build_view
from p2pem.messages import SERVER, Message
from p2pem.registry import make_protocol
from p2pem.simulate import protocol_streams

# The graph of the paper's Fig. 1 with ids 0..4 (paper's node k is id k-1).
FIG1_EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (2, 4)]
RUNS = 500


def _trace(name: str, params: dict | None = None, *, runs: int = RUNS, seed: int = 0):
    g = graph_from_edges(FIG1_EDGES)
    spec = make_protocol(name, params or {})
    topology = spec.topology(g)
    inputs = np.random.default_rng(seed).standard_normal((5, runs))
    out = spec.aggregate(inputs, topology, protocol_streams(seed + 1, 5), 1, record=True)
    return inputs, out


def _vec(value: float, runs: int = 4) -> np.ndarray:
    return np.full(runs, value)


# ---------------------------------------------------------------------------
# Adversary models
# ---------------------------------------------------------------------------


def test_adversary_validation() -> None:
    with pytest.raises(ConfigError, match="unknown adversary"):
        Adversary("curious")
    with pytest.raises(ConfigError, match="corrupts no node"):
        Adversary("eavesdropper", frozenset({1}))
    with pytest.raises(ConfigError, match="at least one corrupt node"):
        Adversary("honest-but-curious")
    assert Adversary("both", frozenset({1, SERVER})).corrupt_nodes == (1,)


def test_observation_rules() -> None:
    plain = Message(0, (2,), 1, 1, "primal", _vec(1.0))
    secret = Message(0, (2,), 1, 0, "dual-init", _vec(2.0), encrypted=True)
    to_corrupt = Message(0, (1, 2), 1, 0, "dual-init", _vec(3.0), encrypted=True)
    from_corrupt = Message(1, (2,), 1, 0, "dual-init", _vec(4.0), encrypted=True)
    hbc = Adversary("honest-but-curious", frozenset({1}))
    eve = Adversary("eavesdropper")
    both = Adversary("both", frozenset({1}))
    assert [hbc.observes(m) for m in (plain, secret, to_corrupt, from_corrupt)] == [False, False, True, True]
    assert [eve.observes(m) for m in (plain, secret, to_corrupt, from_corrupt)] == [True, False, False, False]
    assert [both.observes(m) for m in (plain, secret, to_corrupt, from_corrupt)] == [True, False, True, True]


def test_view_of_a_hand_made_trace() -> None:
    trace = [
        Message(0, (1,), 1, 0, "dual-init", _vec(1.0), encrypted=True),  # received by 1
        Message(1, (0,), 1, 0, "dual-init", _vec(2.0), encrypted=True),  # drawn by 1
        Message(0, (2,), 1, 0, "dual-init", _vec(3.0), encrypted=True),  # nobody's
        Message(2, (0, 1), 1, 1, "primal", _vec(4.0)),  # broadcast, counted once
        Message(0, (2,), 1, 2, "primal", _vec(5.0)),  # plaintext between honest nodes
    ]
    inputs = np.arange(12.0).reshape(3, 4)
    outputs = -inputs
    hbc = build_view(trace, Adversary("honest-but-curious", frozenset({1})), inputs=inputs, outputs=outputs)
    assert sorted(hbc.features[0].tolist()) == sorted([1.0, 2.0, 4.0, inputs[1, 0], outputs[1, 0]])
    assert hbc.rounds.tolist() == [0, 0, 1, 0, 2]  # the output is known after the last round
    assert hbc.until(0).shape == (4, 3)
    eve = build_view(trace, Adversary("eavesdropper"), inputs=inputs, outputs=outputs)
    assert eve.features[0].tolist() == [4.0, 5.0]
    assert eve.labels[0].startswith("primal 2->0,1")


def test_view_rejects_ragged_payloads() -> None:
    trace = [Message(0, (1,), 1, 1, "primal", _vec(1.0, 4)), Message(0, (1,), 1, 2, "primal", _vec(1.0, 5))]
    with pytest.raises(DataError, match="runs"):
        build_view(trace, Adversary("eavesdropper"))


# ---------------------------------------------------------------------------
# Views of real protocol traces
# ---------------------------------------------------------------------------


def test_secure_sum_ring_differences_expose_the_node_between_two_corrupt_nodes() -> None:
    inputs, out = _trace("secure-sum")
    view = build_view(out.trace, Adversary("honest-but-curious", frozenset({1, 3})), inputs=inputs)
    # Nodes 1 and 3 (the paper's 2 and 4) surround node 2 on the ring 0-1-2-3-4.
    hits = [j for j in range(view.n_features) if np.allclose(view.features[:, j], inputs[2], rtol=0, atol=1e-12)]
    assert hits, view.labels
    # Every ring value on its own is masked: no ring feature carries the uniform mask.
    assert np.max(np.abs(view.features)) < 1e3
    # An eavesdropper sees only the plaintext result hops: the average, nothing else.
    eve = build_view(out.trace, Adversary("eavesdropper"))
    assert np.allclose(eve.features, inputs.mean(axis=0)[:, None])


def test_federated_server_sees_every_upload() -> None:
    inputs, out = _trace("federated")
    view = build_view(out.trace, Adversary("honest-but-curious", frozenset({SERVER})))
    for i in range(5):
        assert any(np.array_equal(view.features[:, j], inputs[i]) for j in range(view.n_features))
    clients = build_view(out.trace, Adversary("honest-but-curious", frozenset({1})), inputs=inputs)
    assert not any(np.array_equal(clients.features[:, j], inputs[0]) for j in range(clients.n_features))


def test_pdmm_views_follow_the_encryption_flag() -> None:
    inputs, secure = _trace("pdmm-sp", {"tol": 0.0, "max_iter": 4})
    _, insecure = _trace("pdmm-sp", {"tol": 0.0, "max_iter": 4, "encrypt_duals": False})
    eve = Adversary("eavesdropper")
    v_secure = build_view(secure.trace, eve)
    v_insecure = build_view(insecure.trace, eve)
    n_duals = sum(m.kind == "dual-init" for m in secure.trace)
    assert v_secure.n_features == 5 * 4  # the primal broadcasts only
    assert v_insecure.n_features == 5 * 4 + n_duals


def test_views_change_when_the_trace_changes() -> None:
    inputs, out = _trace("pdmm-sp", {"tol": 0.0, "max_iter": 3})
    adversary = Adversary("honest-but-curious", frozenset({1, 3}))
    base = build_view(out.trace, adversary, inputs=inputs)
    # A payload changed in the trace shows up in the view, nothing re-derives it.
    k = next(i for i, m in enumerate(out.trace) if m.kind == "primal" and 1 in m.receivers)
    edited = list(out.trace)
    edited[k] = dataclasses.replace(edited[k], payload=edited[k].payload + 1.0)
    changed = build_view(edited, adversary, inputs=inputs)
    assert changed.n_features == base.n_features
    assert not np.array_equal(changed.features, base.features)
    # A message that now travels in the clear joins the eavesdropper's view.
    j = next(i for i, m in enumerate(out.trace) if m.kind == "dual-init" and m.sender == 0 and m.receivers == (2,))
    leaked = list(out.trace)
    leaked[j] = dataclasses.replace(leaked[j], encrypted=False)
    eve = Adversary("eavesdropper")
    assert build_view(leaked, eve).n_features == build_view(out.trace, eve).n_features + 1
    # A dropped message leaves it.
    assert build_view(out.trace[:-1], adversary, inputs=inputs).n_features < base.n_features
