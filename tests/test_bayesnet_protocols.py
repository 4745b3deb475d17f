"""A Bayesian-network release across parties: aggregated counts equal pooled ones, every engine and
every node ends with the same network, the shared seed, and one-line errors for bad input."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections import Counter

import networkx as nx
import numpy as np
import pytest

from p2pem.bayesnet import BayesNetSettings, BayesNetTask
from p2pem.bayesnet import seed as joint
from p2pem.bayesnet.counts import Layout
from p2pem.errors import ConfigError, ProtocolError
from p2pem.graphs import geometric_graph
from p2pem.registry import make_protocol
from p2pem.simulate import drive_vectorised
from p2pem.streams import protocol_streams
from p2pem.builders import split_table
from p2pem.synth.privbayes import fit_bayesnet, release_document, sample_release
from p2pem.synth.metrics import marginal_tvds
from p2pem.tabular import Categorical, Continuous, Schema, Table, discretize, domain_sizes

SCHEMA = Schema(
    (
        Continuous("age", 17, 90, integer=True),
        Categorical("sex", ("f", "m")),
        Categorical("job", ("a", "b", "c", "d")),
        Continuous("hours", 0.0, 100.0),
        Categorical("income", ("low", "high")),
    )
)
N_NODES = 8


def make_table(n: int, seed: int = 0) -> Table:
    rng = np.random.default_rng(seed)
    sex = rng.integers(0, 2, n)
    job = np.where(rng.random(n) < 0.6, sex * 2 + rng.integers(0, 2, n), rng.integers(0, 4, n))
    age = np.clip(np.round(rng.normal(40 + 5 * job, 10)), 17, 90)
    hours = np.clip(rng.normal(30 + 8 * sex, 10), 0, 100)
    income = (rng.random(n) < 0.15 + 0.1 * job + 0.004 * (hours - 30)).astype(int)
    return Table.from_blocks(SCHEMA, np.column_stack([age, hours]), np.column_stack([sex, job, income]))


@pytest.fixture(scope="module")
def table() -> Table:
    return make_table(1200)


@pytest.fixture(scope="module")
def graph() -> nx.Graph:
    return geometric_graph(N_NODES, rng=np.random.default_rng(3))


def split(table: Table) -> list[Table]:
    """The table's rows spread evenly over the graph's nodes."""
    return split_table(table, N_NODES, rng=np.random.default_rng(0))


def pooled_counts(binned: np.ndarray, layout: Layout) -> np.ndarray:
    """Counts of every table of ``layout`` over all rows, by Python counting (an independent reference)."""
    out = []
    for s in layout.sets:
        counter = Counter(tuple(int(v) for v in row[list(s)]) for row in binned)
        shape = layout.shape(s)
        table = np.zeros(shape)
        for cell, count in counter.items():
            table[cell] = count
        out.append(table.ravel())
    return np.concatenate(out)


@pytest.mark.parametrize("settings", [BayesNetSettings(epsilon=20.0), BayesNetSettings(model="hmprivbayes", epsilon=1.0)])
@pytest.mark.parametrize("name", ["secure-sum", "federated", "pdmm-sp"])
def test_aggregated_counts_equal_the_pooled_counts(table, graph, name, settings):
    """Exact protocols to the last count (and to 1e-9 before rounding); pdmm-sp to 1e-8 relative.

    PrivBayes at epsilon 20 aggregates the 1-way counts and then 3-way tables step by step;
    HMPrivBayes the 1-way counts and every pair.
    """
    binned = discretize(table)
    parts = np.array_split(binned, N_NODES)
    spec = make_protocol(name)
    task = BayesNetTask(parts, domain_sizes(SCHEMA), settings, N_NODES, shared=np.random.SeedSequence(1),
                        secrets=[np.random.SeedSequence(i) for i in range(N_NODES)])
    layouts = []
    checked = []

    def record(it, values, averages):
        layout = layouts[-1]
        expected = pooled_counts(binned, layout)
        assert np.array_equal(values.sum(axis=0), expected)  # the nodes' counts add up to the pooled ones
        sums = averages * N_NODES
        if spec.exact:
            assert np.all(np.abs(sums - expected) <= 1e-9 * np.maximum(expected, 1.0))
            assert np.array_equal(np.round(sums), np.broadcast_to(expected, sums.shape))
        else:
            assert np.max(np.abs(sums - expected)) <= 1e-8 * np.max(expected)
        checked.append(layout.size)

    original = task.contribution

    def contribution():
        layouts.append(task._stage.layout)
        return original()

    task.contribution = contribution  # type: ignore[method-assign]
    drive_vectorised(task, spec, spec.topology(graph), protocol_streams(0, N_NODES), after=record)
    assert len(checked) == task.iteration >= 2 and task.finished


@pytest.mark.parametrize("settings", [
    BayesNetSettings(epsilon=1.0),
    BayesNetSettings(epsilon=1.0, noise="shares", tolerate=2),
    BayesNetSettings(model="hmprivbayes", epsilon=1.0, noise="shares", eta=0.02),
])
def test_engines_and_protocols_agree_and_every_node_holds_the_same_network(table, graph, settings):
    digests = {}
    for name in ("secure-sum", "pdmm-sp"):
        vec = fit_bayesnet(split(table), settings, make_protocol(name), graph=graph, seed=5, engine="vectorised")
        msg = fit_bayesnet(split(table), settings, make_protocol(name), graph=graph, seed=5, engine="messages")
        assert msg.agreed  # every node's digest equals node 0's
        assert np.array_equal(vec.task.summary(), msg.task.summary())
        assert vec.traffic.rounds == msg.traffic.rounds and vec.traffic.messages == msg.traffic.messages
        for a, b in zip(vec.task.networks, msg.task.networks, strict=True):
            for ca, cb in zip(a.conditionals, b.conditionals, strict=True):
                assert (ca.child, ca.parents) == (cb.child, cb.parents) and np.array_equal(ca.probabilities, cb.probabilities)
        digests[name] = tuple(vec.task.summary())
    # exact counts and the same shared seed: the same release whichever protocol sums
    assert digests["secure-sum"] == digests["pdmm-sp"]
    if settings.noise == "central":
        central = fit_bayesnet(split(table), settings, make_protocol("centralized"), graph=None, seed=5)
        assert tuple(central.task.summary()) == digests["pdmm-sp"]


def test_messages_engine_nodes_hold_identical_networks(table, graph):
    from p2pem.simulate import drive_messages
    from p2pem.streams import bayesnet_child

    settings = BayesNetSettings(model="hmprivbayes", epsilon=2.0, noise="shares")
    spec = make_protocol("pdmm-sp")
    binned = np.array_split(discretize(table), N_NODES)
    tasks = [BayesNetTask([p], domain_sizes(SCHEMA), settings, N_NODES, shared=None, secrets=[bayesnet_child(9, 1, i)], node_ids=[i])
             for i, p in enumerate(binned)]
    drive_messages(tasks, spec, spec.topology(graph), protocol_streams(0, N_NODES))
    reference = tasks[0]
    for t in tasks[1:]:
        assert t.clusters == reference.clusters
        assert [(g.order, g.parents) for g in t.greedy] == [(g.order, g.parents) for g in reference.greedy]
        assert all(np.array_equal(t.noisy_counts[s], reference.noisy_counts[s]) for s in reference.noisy_counts)
        assert np.array_equal(t.summary(), reference.summary())


def test_commit_and_reveal_seed_is_joint_and_checked(table, graph):
    settings = BayesNetSettings(epsilon=1.0)
    a = fit_bayesnet(split(table), settings, make_protocol("secure-sum"), graph=graph, seed=5, commit_reveal=True)
    b = fit_bayesnet(split(table), settings, make_protocol("pdmm-sp"), graph=graph, seed=5, commit_reveal=True, engine="messages")
    assert np.array_equal(a.task.summary(), b.task.summary())
    # the commitment, then a reveal after every aggregation of counts (central noise: each one is drawn from)
    plain = fit_bayesnet(split(table), settings, make_protocol("secure-sum"), graph=graph, seed=5).task
    assert a.task.reveals == plain.iteration and a.task.iteration == 1 + 2 * plain.iteration
    # the seed depends on every node's secret: another secret for one node, another seed
    secrets = [np.random.SeedSequence(i) for i in range(3)]
    reveal = [joint.secret(s) for s in secrets]
    commits = [bytes(joint.commitment(r).astype(">u2").tobytes()) for r in reveal]
    seed = joint.joint_seed(commits, reveal)
    other = list(reveal)
    other[2] = joint.secret(np.random.SeedSequence(99))
    with pytest.raises(ProtocolError, match="node 2's revealed secret does not match its commitment"):
        joint.joint_seed(commits, other)
    assert joint.joint_seed(commits, reveal).entropy == seed.entropy


@pytest.mark.parametrize("model,noise", [("privbayes", "central"), ("hmprivbayes", "shares")])
def test_no_draw_uses_a_seed_known_before_the_counts_it_acts_on(table, monkeypatch, model, noise):
    """Seed timing (issue 29, item 6).  Record every aggregation the nodes hold and every shared draw:
    each draw must come from a seed whose links were first aggregated *after* the last counts
    before it, so when a member chose those counts nobody, itself included, could know the seed."""
    import p2pem.bayesnet.task as task_module

    settings = BayesNetSettings(model=model, epsilon=1.0, noise=noise)
    parts = np.array_split(discretize(table), 3)
    task = BayesNetTask(parts, domain_sizes(SCHEMA), settings, 3, shared=None, secrets=[np.random.SeedSequence(10 + i) for i in range(3)])
    seen: list[bytes] = []  # every aggregated vector, in order, as the members hold it
    counts_at: list[int] = []  # positions in ``seen`` of the count aggregations
    draws: list[tuple[int, int]] = []  # (aggregations held at the draw, the seed's entropy)
    real_stream = task_module.shared_stream

    def recording(seed, *key):
        draws.append((len(seen), seed.entropy))
        return real_stream(seed, *key)

    monkeypatch.setattr(task_module, "shared_stream", recording)
    while not task.finished:
        kind = task._stage.kind
        summed = task.contribution().sum(axis=0)
        if kind not in ("commit", "reveal"):
            counts_at.append(len(seen))
        seen.append(summed.astype(np.float64).tobytes())
        task.absorb(np.broadcast_to(summed / 3, (3, summed.size)))
    assert draws and counts_at and task.reveals >= 1
    for held, entropy in draws:
        last_counts = max(i for i in counts_at if i < held)
        # the seed is SHA-256 of links every node revealed after those counts: recompute it from the
        # aggregations that followed them, and check that none before them held those links
        later = [joint.slots(np.frombuffer(v), 3) for i, v in enumerate(seen[:held]) if i > last_counts and i not in counts_at]
        assert later, "a draw with no reveal between it and the counts it acts on"
        links = later[-1]
        assert int.from_bytes(hashlib.sha256(b"".join(links)).digest(), "big") == entropy
        earlier = seen[: last_counts + 1]
        for link in links:
            assert not any(link in np.frombuffer(v).astype(">u2").tobytes() for v in earlier)


def test_a_node_whose_reveal_breaks_its_commitment_is_named(table):
    settings = BayesNetSettings(epsilon=1.0)
    parts = np.array_split(discretize(table), 3)
    task = BayesNetTask(parts, domain_sizes(SCHEMA), settings, 3, shared=None, secrets=[np.random.SeedSequence(i) for i in range(3)])
    task.absorb(task.contribution().mean(axis=0, keepdims=True).repeat(3, axis=0))  # commit
    task.absorb(task.contribution().mean(axis=0, keepdims=True).repeat(3, axis=0))  # the totals
    reveal = task.contribution()
    reveal[1, joint.WORDS + 3] = (reveal[1, joint.WORDS + 3] + 1) % 65536  # node 1 reveals another secret
    with pytest.raises(ProtocolError, match="node 1's revealed secret"):
        task.absorb(reveal.mean(axis=0, keepdims=True).repeat(3, axis=0))


def test_a_batch_whose_nodes_disagree_fails(table):
    settings = BayesNetSettings(epsilon=1.0)
    parts = np.array_split(discretize(table), 2)
    task = BayesNetTask(parts, domain_sizes(SCHEMA), settings, 2, shared=np.random.SeedSequence(0), secrets=[np.random.SeedSequence(i) for i in range(2)])
    values = task.contribution()
    averages = values.mean(axis=0, keepdims=True).repeat(2, axis=0)
    averages[1, 0] += 1.0  # node 1 holds one count more
    with pytest.raises(ProtocolError, match="nodes 0 and 1 hold different sums"):
        task.absorb(averages)


def test_release_document_round_trips_through_json_and_samples_like_the_task(table, graph):
    run = fit_bayesnet(split(table), BayesNetSettings(epsilon=math.inf, k=2), make_protocol("pdmm-sp"), graph=graph, seed=5)
    doc = json.loads(json.dumps(release_document(run, SCHEMA, seed=5)))
    assert doc["privacy"]["epsilon_spent"]["outsider"]["basic"] is None  # no noise: no finite epsilon
    sample = sample_release(doc, 20_000, np.random.default_rng(0))
    assert sample.schema == SCHEMA and sample.n_rows == 20_000
    sizes = domain_sizes(SCHEMA)
    _, two_way = marginal_tvds(discretize(table), discretize(sample), sizes, 2)
    assert two_way.mean() < 0.06  # k = 2 without noise keeps the pairs (1 200 real rows: sampling noise ~0.03)
    private = fit_bayesnet(split(table), BayesNetSettings(epsilon=1.0), make_protocol("pdmm-sp"), graph=graph, seed=5)
    block = release_document(private, SCHEMA)["privacy"]
    assert block["epsilon_spent"]["outsider"]["basic"] == pytest.approx(private.task.ledger.epsilon()) and block["epsilon_spent"]["outsider"]["basic"] <= 1.0
    assert block["epsilon_spent"]["colluders"]["basic"] is None and any("members" in e for e in block["excluded"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: dataclasses.replace(s, public=False), "is not public .*declare public ranges"),
        (lambda s: Schema((*s.columns, Categorical("id", tuple(f"c{i}" for i in range(150)))), s.csv),
         "column 'id' has 150 categories, more than max_categories = 100"),
    ],
)
def test_bad_tables_are_one_line_errors(table, graph, change, message):
    schema = change(SCHEMA)
    codes = table.codes if len(schema.categorical) == 3 else np.column_stack([table.codes, np.zeros(table.n_rows, dtype=np.int64)])
    bad = Table(schema, table.continuous, codes)
    with pytest.raises(ConfigError, match=message) as info:
        fit_bayesnet(split(bad), BayesNetSettings(), make_protocol("pdmm-sp"), graph=graph, seed=0)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("settings", "protocol", "message"),
    [
        (BayesNetSettings(k=5), "pdmm-sp", "'k' = 5 must be less than the number of attributes \\(5\\)"),
        (BayesNetSettings(n_bins=120), "pdmm-sp", "column 'age' has 120 bins, more than max_categories = 100"),
        (BayesNetSettings(), "dp-distributed", "cannot aggregate a Bayesian-network release"),
        (BayesNetSettings(noise="shares"), "centralized", "noise = 'shares' needs an aggregation over nodes"),
        (BayesNetSettings(noise="shares", tolerate=8), "pdmm-sp", "'tolerate' = 8 must be below the 8 nodes"),
    ],
)
def test_bad_settings_for_a_run_are_one_line_errors(table, graph, settings, protocol, message):
    with pytest.raises(ConfigError, match=message) as info:
        fit_bayesnet(split(table), settings, make_protocol(protocol), graph=graph, seed=0)
    assert "\n" not in str(info.value)


def test_a_public_network_with_noise_shares_holds_against_colluders(table, graph):
    """Members see the row count and noisy sums only: epsilon holds against tolerate colluders."""
    network = ((1,), (2, 1), (4, 2), (0, 2), (3, 1, 4))
    settings = BayesNetSettings(epsilon=1.0, noise="shares", tolerate=3, network=network)
    run = fit_bayesnet(split(table), settings, make_protocol("pdmm-sp"), graph=graph, seed=5)
    task = run.task
    assert task.iteration == 2  # the row count, then the noisy tables: nothing else is aggregated
    assert [(c.child, c.parents) for c in task.networks[0].conditionals] == [(1, ()), (2, (1,)), (4, (2,)), (0, (2,)), (3, (1, 4))]
    assert all(s.mechanism == "laplace" for s in task.ledger.spends) and task.ledger.epsilon() == pytest.approx(1.0)
    block = release_document(run, SCHEMA)["privacy"]
    assert block["colluders"] == 3
    assert block["epsilon_spent"]["colluders"]["basic"] == pytest.approx(1.0)
    # with the noise added after the sum, members saw the exact tables
    central = release_document(fit_bayesnet(split(table), dataclasses.replace(settings, noise="central"), make_protocol("pdmm-sp"), graph=graph, seed=5), SCHEMA)
    assert central["privacy"]["epsilon_spent"]["colluders"]["basic"] is None


@pytest.mark.parametrize(
    ("network", "model", "message"),
    [
        (((0,), (1, 0), (2, 3), (3,), (4,)), "privbayes", "attribute 2 comes twice, or before one of its parents"),
        (((0,), (1, 0)), "privbayes", "covers 2 of the 5 attributes"),
        (((0,), (1, 7), (2,), (3,), (4,)), "privbayes", "each in 0..4"),
        (((0,), (1,), (2,), (3,), (4,)), "hmprivbayes", "HMPrivBayes is a structure search"),
    ],
)
def test_bad_public_networks_are_one_line_errors(table, graph, network, model, message):
    with pytest.raises(ConfigError, match=message) as info:
        fit_bayesnet(split(table), BayesNetSettings(model=model, network=network), make_protocol("pdmm-sp"), graph=graph, seed=0)
    assert "\n" not in str(info.value)


def test_the_bayesnet_table_is_validated_with_one_line_errors():
    from p2pem.synth.bayesconfig import parse_bayesnet

    settings = parse_bayesnet({"epsilon": 0.8, "theta": 8, "beta": 0.2, "network": [["sex"], ["job", "sex"], ["age", "job"],
                               ["hours", "sex"], ["income", "job", "hours"]], "noise": "shares", "tolerate": 3}, SCHEMA, "privbayes", where="s.toml")
    assert settings.network == ((1,), (2, 1), (0, 2), (3, 1), (4, 2, 3)) and settings.theta == 8.0 and settings.tolerate == 3
    assert math.isinf(parse_bayesnet({"epsilon": "inf", "k": 2}, SCHEMA, "privbayes", where="s.toml").epsilon)
    for table, model, message in [
        ({"epsilon": -1}, "privbayes", "s.toml: 'bayesnet.epsilon' must be > 0"),
        ({"thetta": 4}, "privbayes", "unknown key 'bayesnet.thetta'"),
        ({"n_clusters": 3}, "privbayes", "'bayesnet.n_clusters' is an HMPrivBayes setting"),
        ({"k": 9}, "privbayes", r"s.toml: \[bayesnet\] 'k' = 9 must be less than the number of attributes \(5\)"),
        ({"network": [["sex"], ["salary", "sex"]]}, "privbayes", "'bayesnet.network\\[1\\]' names 'salary', not a column"),
        ({"noise": "local"}, "privbayes", "'bayesnet.noise' must be one of 'central', 'shares'"),
    ]:
        with pytest.raises(ConfigError, match=message) as info:
            parse_bayesnet(table, SCHEMA, model, where="s.toml")
        assert "\n" not in str(info.value)
