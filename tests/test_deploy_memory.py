"""The whole node runtime in one process over the in-memory link, with an insider and faults.

Every node of a small deployment kit runs its real :class:`~p2pem.deploy.runtime.NodeRuntime`
(hello, replay guard, validation, signed aborts, final agreement) in one event loop, talking
through :class:`~p2pem.deploy.transports.memory.MemoryBroker`.  The loop's time is virtual
(:func:`~p2pem.deploy.clock.run_virtual`): timeouts expire when every node waits, never because
the machine is loaded, and cost no real time.  Node ``INSIDER`` holds valid keys and rewrites
what it publishes.  The property every test checks: each honest node either ends with the exact
model of ``p2pem simulate`` or exits non-zero with a result.json that says why, and no honest
node exits 0 with a model another honest node does not hold.  Nothing here needs a binary
(the kit's broker password file is hashed in Python).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2pem.deploy.clock import run_virtual
from p2pem.deploy.codec import Codec
from p2pem.deploy.control import Signer, abort_message, make_abort, payload_digest, signature_words, statement_limit
from p2pem.deploy.crypto import Identity
from p2pem.deploy.failures import Reason
from p2pem.deploy.config import NodeConfig, Timeouts
from p2pem.deploy.roster import Roster
from p2pem.deploy.kit import prepare_kit
from p2pem.deploy.process import run_reported
from p2pem.deploy.bootstrap import peers_for
from p2pem.deploy.runtime import NodeRuntime
from p2pem.deploy.server import ServerRuntime
from p2pem.messages import SERVER
from p2pem.messages import Message
from p2pem.protocols.pdmm import NEVER
from p2pem.builders import build_graph, em_settings, build_protocols as protocols
from p2pem.builders import load_data
from p2pem.scenario import load_scenario
from p2pem.simulate import run_protocol
from p2pem.deploy.transports.base import subscriptions_for, topic_for
from p2pem.deploy.transports.memory import Faults, MemoryBroker

ROOT = Path(__file__).resolve().parents[1]
INSIDER = 1
LAUNCH = b"\x01" * 16

#: The node whose task is running (every node runs in a task of its own, with its own context).
NODE: contextvars.ContextVar[int] = contextvars.ContextVar("node")


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kit")
    text = (ROOT / "scenarios" / "parkinsons-20.toml").read_text()
    text = text.replace('"../data/parkinsons.data"', json.dumps(str(ROOT / "data" / "parkinsons.data")))
    text = re.sub(r"(?m)^n_nodes = \d+", "n_nodes = 5", text)
    text = re.sub(r"(?m)^max_iter = \d+", "max_iter = 2", text)
    path = tmp / "scenario.toml"
    path.write_text(text)
    scenario = load_scenario(path)
    kit = prepare_kit(scenario, tmp / "kit", broker=("127.0.0.1", 1), seeded=True)
    sim = run_protocol(load_data(scenario), build_graph(scenario), protocols(scenario)[0], em_settings(scenario), seed=scenario.streams()["protocol"])
    return kit, sim


@pytest.fixture(scope="module")
def honest(kit, tmp_path_factory):
    """One honest run: (exit code, result.json) per node, and how many messages of each kind INSIDER published."""
    kit, _ = kit
    broker = MemoryBroker()
    results = run_in_memory(kit, tmp_path_factory.mktemp("honest"), broker=broker)
    roster = Roster.load(kit.roster_path)
    observer = Codec(roster.run_id, roster.public_keys())
    sent = Counter(observer.parse(p).kind for t, p in broker.published if t.startswith(f"p2pem/{roster.run_id}/from/{INSIDER}/"))
    return results, sent


def run_in_memory(
    kit,
    out: Path,
    intercept=None,
    *,
    timeout: float = 2.0,
    on_dropout: str = "stop",
    kill: tuple[int, int] | None = None,
    broker: MemoryBroker | None = None,
    server: list | None = None,
) -> list[tuple[int, dict]]:
    """Run every party of ``kit`` in this process, in virtual time; return (exit code, result.json) per node.

    ``kill = (node, n)``: that node dies (silently, like SIGKILL) after publishing n envelopes.
    ``broker``: the MemoryBroker to use (to read what was published afterwards).
    ``server``: a list that receives the server's (exit code, result.json), where there is one.
    """
    out.mkdir(parents=True, exist_ok=True)
    broker = MemoryBroker(intercept) if broker is None else broker
    roster = Roster.load(kit.roster_path)
    roster_path = kit.roster_path
    if on_dropout != roster.on_dropout:  # the run's setting is the roster's
        roster_path = replace(roster, on_dropout=on_dropout).save(out / "roster.toml")
    runtimes, links = [], {}
    for i in kit.parties:
        config = NodeConfig.load(kit.config_path(i))
        config = replace(
            config, roster=roster_path, result=out / f"result{i}.json", timeouts=Timeouts(timeout=timeout, startup_timeout=10.0, heartbeat=timeout / 4)
        )
        links[i] = broker.link(subscriptions_for(roster.run_id, i, peers_for(roster, i)), name=f"node{i}")
        runtimes.append((ServerRuntime if i == SERVER else NodeRuntime)(config, link=links[i], launch=LAUNCH))

    if kill is not None:  # the victim's link dies as it publishes its n-th envelope (delivered)
        victim, n = kill
        prefix, passed, deliver = f"p2pem/{roster.run_id}/from/{victim}/", Counter(), broker.intercept

        def reaper(topic: str, payload: bytes):
            if topic.startswith(prefix):
                passed[victim] += 1
                if passed[victim] == n:
                    links[victim].kill()
            return [(topic, payload, 0.0)] if deliver is None else deliver(topic, payload)

        broker.intercept = reaper

    async def node(i: int, runtime: NodeRuntime) -> int:
        NODE.set(i)
        return await run_reported(runtime)

    async def main():
        return await asyncio.gather(*(node(i, rt) for i, rt in zip(kit.parties, runtimes, strict=True)))

    codes = dict(zip(kit.parties, run_virtual(main()), strict=True))
    if server is not None and SERVER in codes:
        server.append((codes[SERVER], json.loads((out / f"result{SERVER}.json").read_text(), parse_constant=_no_nan)))
    return [(codes[i], json.loads((out / f"result{i}.json").read_text(), parse_constant=_no_nan)) for i in range(kit.n_nodes)]


def run_with_restart(kit, out, victim: int, after: int, *, timeout: float = 2.0):
    """Every node in memory; ``victim``'s link dies as it publishes its ``after``-th envelope and
    a new process of it starts at once with the same key, config and launch nonce (a
    crash-restart).  Returns the exit codes (the new process's last), every node's first
    result.json and the new process's (None when the run ended before the restart)."""
    out.mkdir(parents=True, exist_ok=True)
    roster = Roster.load(kit.roster_path)
    broker = MemoryBroker()
    prefix, passed = f"p2pem/{roster.run_id}/from/{victim}/", Counter()
    links, restarted = {}, asyncio.Event()

    def config_of(i, name):
        config = NodeConfig.load(kit.config_path(i))
        return replace(config, result=out / name, timeouts=Timeouts(timeout=timeout, startup_timeout=10.0, heartbeat=timeout / 4))

    def link_of(i, name):
        return broker.link(subscriptions_for(roster.run_id, i, peers_for(roster, i)), name=name)

    def reaper(topic, payload):
        if topic.startswith(prefix) and not restarted.is_set():
            passed[victim] += 1
            if passed[victim] == after:
                links[victim].kill()
                restarted.set()
        return [(topic, payload, 0.0)]

    broker.intercept = reaper
    runtimes = {}
    for i in range(kit.n_nodes):
        links[i] = link_of(i, f"node{i}")
        runtimes[i] = NodeRuntime(config_of(i, f"result{i}.json"), link=links[i], launch=LAUNCH)

    async def second():
        await restarted.wait()
        runtime = NodeRuntime(config_of(victim, "restarted.json"), link=link_of(victim, "again"), launch=LAUNCH)
        return await run_reported(runtime)

    async def main():
        again = asyncio.create_task(second())
        codes = await asyncio.gather(*(run_reported(rt) for rt in runtimes.values()))
        if not restarted.is_set():  # the run ended before the victim published that many
            again.cancel()
            return codes
        return [*codes, await again]

    codes = run_virtual(main())
    reports = [json.loads((out / f"result{i}.json").read_text(), parse_constant=_no_nan) for i in range(kit.n_nodes)]
    again = json.loads((out / "restarted.json").read_text(), parse_constant=_no_nan) if restarted.is_set() else None
    return codes, reports, again


def _no_nan(token: str):
    raise AssertionError(f"result.json holds {token}, which is not JSON")


def model(report: dict) -> np.ndarray:
    return np.concatenate([np.ravel(report["weights"]), np.ravel(report["means"]), np.ravel(report["covariances"])])


def exact(report: dict, sim) -> bool:
    ref = np.concatenate([np.ravel(sim.weights), np.ravel(sim.means), np.ravel(sim.covariances)])
    return float(np.max(np.abs(model(report) - ref)) / np.max(np.abs(ref))) <= 1e-9


def assert_honest_outcome(results, sim, culprit: int | None, *, unattributable: bool = False, lie: bool = False) -> None:
    """Exact model, or a non-zero exit with a result.json naming the culprit; never a split,
    and no honest node convicted.  ``unattributable``: an attack that leaves honest nodes only
    evidence (a perturbed broadcast, withheld messages) may also end with a failure that names
    nobody on proof (``attributable`` false) without naming the culprit.  ``lie``: the member's
    change acts as a lie about its own statistics (a perturbed broadcast with the same bytes for
    every neighbour): the nodes that finish hold one model, not necessarily the simulation's."""
    finished = []
    for i, (code, rep) in enumerate(results):
        if i == culprit:
            continue
        # a node is a culprit only on proof: no honest node is ever convicted
        assert set(rep.get("culprits", [])) <= ({culprit} if culprit is not None else set()), (i, rep["error"], rep.get("culprits"))
        if code == 0:
            assert rep["status"] == "finished" and rep["error"] is None
            assert lie or exact(rep, sim), f"node {i} exited 0 with a model that is not the simulation's"
            finished.append(i)
        else:
            assert rep["status"] == "failed" and rep["error"], f"node {i} exited {code} without a reason"
            assert "weights" not in rep
            told_model = rep["reason"] == "aborted" and "its model failed on the network average" in rep["error"]
            if rep["culprits"] == [] and (rep["reason"] == "model" or told_model):
                continue  # a model error names nobody (issue 22): it is not a protocol violation
            if unattributable and not rep["attributable"]:
                continue
            if culprit is not None:
                assert f"node {culprit}" in rep["error"] or f"nodes {culprit}," in rep["error"] or re.search(rf"nodes [\d, ]*\b{culprit}\b", rep["error"]), rep["error"]
    if lie and finished:  # one model among the honest nodes that finished, at the agreement tolerance
        first = model(results[finished[0]][1])
        assert all(np.max(np.abs(model(results[i][1]) - first)) <= 1e-8 * np.max(np.abs(first)) for i in finished), "two models"


def test_honest_run_in_memory_equals_simulate(kit, honest):
    kit, sim = kit
    results, sent = honest
    assert [code for code, _ in results] == [0] * kit.n_nodes
    assert all(exact(rep, sim) for _, rep in results)
    # its own signed final and one relay of every other node's: the final results reach every node
    assert sent["final"] == kit.n_nodes and sent["bye"] == 1 and sent["hello"] >= 1 and sent["primal"] > 0 and sent["dual-init"] > 0
    assert 1 <= sent["stop"] <= kit.n_nodes * 3  # signed stop proposals, only those that lower the stop round


def test_duplicates_delays_and_reordering_change_nothing(kit, tmp_path):
    kit, sim = kit
    faults = Faults(np.random.default_rng(5), duplicate=0.2, delay=0.2, max_delay=0.002)
    results = run_in_memory(kit, tmp_path, faults)
    assert [code for code, _ in results] == [0] * kit.n_nodes
    assert all(exact(rep, sim) for _, rep in results)


class Insider:
    """Node INSIDER's own codec, rewriting the ``nth`` message of ``kind`` it publishes."""

    def __init__(self, kit, nth: int, kind: str, change, *, launch: bytes = LAUNCH) -> None:
        roster = Roster.load(kit.roster_path)
        self.roster = roster
        identity = Identity.load(kit.node_dir(INSIDER) / "node.key")
        self.codec = Codec(roster.run_id, roster.public_keys(), identity=identity, node_id=INSIDER, launch=launch)
        self.observer = Codec(roster.run_id, roster.public_keys())
        self.nth, self.kind, self.change = nth, kind, change
        # Read the message as its receiver does: a rewrite keeps the true payload unless it
        # changes it on purpose (a different valid value is a lie about the insider's own
        # data, which nobody can detect, see nodes/README.md).
        self.receiver = {
            j: Codec(roster.run_id, roster.public_keys(), identity=Identity.load(kit.node_dir(j) / "node.key"), node_id=j, launch=launch)
            for j in roster.neighbours[INSIDER]
        }
        self.seen = 0
        self.fired = False

    def __call__(self, topic: str, payload: bytes):
        if not topic.startswith(f"p2pem/{self.roster.run_id}/from/{INSIDER}/") or self.fired:
            return None
        env = self.observer.parse(payload)
        if env.kind != self.kind:
            return None
        self.seen += 1
        if self.seen < self.nth:
            return None
        self.fired = True
        msg = self.receiver[env.receivers[0]].decode(payload)
        forged = self.change(msg)
        return [(topic_for(self.roster.run_id, forged), self.codec.encode(forged))]


BAD_VALUES = st.sampled_from([np.nan, np.inf, -np.inf, 1e300])


@st.composite
def rewrites(draw):
    """A change an insider makes to one message: payload, kind, meta or round."""
    what = draw(st.sampled_from(["value", "shape", "dtype", "kind", "meta", "round"]))
    if what == "value":
        bad, where = draw(BAD_VALUES), draw(st.integers(0, 10**6))

        def change(m):
            x = np.ones(m.payload.shape if isinstance(m.payload, np.ndarray) else 1)
            x[where % x.size] = bad
            return replace_payload(m, x)
    elif what == "shape":
        shape = draw(st.sampled_from([(0,), (1,), (3, 2), (400,)]))

        def change(m):
            return replace_payload(m, np.ones(shape))
    elif what == "dtype":
        ints = draw(st.lists(st.integers(0, 2**256 - 1), max_size=3))

        def change(m):
            return replace_payload(m, tuple(ints))
    elif what == "kind":
        kind = draw(st.sampled_from(["primal", "dual-init", "result", "ring", "bye", "x" * 40]))

        def change(m):
            other = kind if kind != m.kind else "result"
            return Message(m.sender, m.receivers, m.iteration, m.round, other, m.payload, m.encrypted, m.meta)
    elif what == "meta":
        # every entry is out of range for both fields of a primal's meta; a dual-init has none
        meta = draw(st.lists(st.sampled_from([-(2**62), -1, 10**9, NEVER + 1, 2**63 - 1]), min_size=1, max_size=3))

        def change(m):
            return Message(m.sender, m.receivers, m.iteration, m.round, m.kind, m.payload, m.encrypted, tuple(meta))
    else:
        shift = draw(st.sampled_from([-(2**40), -1, 2, 10**6]))

        def change(m):
            return Message(m.sender, m.receivers, m.iteration, m.round + shift, m.kind, m.payload, m.encrypted, m.meta)
    return what, change


def replace_payload(m: Message, payload) -> Message:
    return Message(m.sender, m.receivers, m.iteration, m.round, m.kind, payload, m.encrypted, m.meta)


class Statements(Insider):
    """Node INSIDER signing statements of its own (valid signatures): at its ``nth`` primal it
    publishes ``make(m)`` (a list of messages) before, or instead of, that primal."""

    def __init__(self, kit, nth: int, make, *, keep: bool = True, launch: bytes = LAUNCH) -> None:
        super().__init__(kit, nth, "primal", lambda m: m, launch=launch)
        self.signer = Signer(Identity.load(kit.node_dir(INSIDER) / "node.key"), self.roster.public_keys(), self.roster.run_id, launch)
        self.make, self.keep = make, keep

    def __call__(self, topic: str, payload: bytes):
        if super().__call__(topic, payload) is None:
            return None
        msg = self.receiver[self.observer.parse(payload).receivers[0]].decode(payload)
        out = [(topic_for(self.roster.run_id, m), self.codec.encode(m)) for m in self.make(self, msg)]
        return out + ([(topic, payload)] if self.keep else [])


class Withhold:
    """Node INSIDER's broker path: its protocol messages from EM iteration 1 on reach the others
    ``lag`` seconds late, while its own (unmodified) runtime and watchdog go on."""

    def __init__(self, kit, lag: float) -> None:
        roster = Roster.load(kit.roster_path)
        self.prefix = f"p2pem/{roster.run_id}/from/{INSIDER}/"
        self.observer = Codec(roster.run_id, roster.public_keys())
        self.lag = lag
        self.fired = False

    def __call__(self, topic: str, payload: bytes):
        if topic.startswith(self.prefix) and self.observer.parse(payload).iteration >= 1:
            self.fired = True
            return [(topic, payload, self.lag)]
        return [(topic, payload, 0.0)]


class TwoFinals(Insider):
    """Node INSIDER publishes its own signed final and ``k`` more, each validly signed with
    another result: one slot, several signed values."""

    def __init__(self, kit, k: int) -> None:
        super().__init__(kit, 1, "final", lambda m: m)
        self.signer = Signer(Identity.load(kit.node_dir(INSIDER) / "node.key"), self.roster.public_keys(), self.roster.run_id, LAUNCH)
        self.k = k

    def __call__(self, topic, payload):
        if not topic.startswith(f"p2pem/{self.roster.run_id}/from/{INSIDER}/") or self.fired:
            return None
        env = self.observer.parse(payload)
        if env.kind != "final" or env.round != INSIDER:  # its own final, not a relay
            return None
        self.fired = True
        msg = self.receiver[env.receivers[0]].decode(payload)
        n_iter, origin, iteration = msg.meta[:3]
        out = [(topic, payload)]
        for j in range(1, self.k + 1):
            result = np.asarray(msg.payload) * (1 + j * 1e-3)
            sig = self.signer.sign("final", (origin, n_iter, iteration), payload_digest(result))
            other = Message(INSIDER, msg.receivers, msg.iteration, msg.round, "final", result, False, (n_iter, origin, iteration, *signature_words(sig)))
            out.append((topic_for(self.roster.run_id, other), self.codec.encode(other)))
        return out


def early_stop(ins: Statements, m: Message) -> list[Message]:
    """A validly signed stop proposal as if the insider's counter had triggered a round ago,
    and the insider's primal announcing it: the others' counters contradict it."""
    e = int(ins.roster.topology().eccentricity[INSIDER])
    at = m.round - 1
    fields = (m.iteration, 0, INSIDER, at, at + e)
    stop = Message(INSIDER, m.receivers, -1, INSIDER, "stop", ins.signer.sign("stop", fields), False, fields)
    return [stop, Message(m.sender, m.receivers, m.iteration, m.round, m.kind, m.payload, m.encrypted, (m.meta[0], at + e))]


def inflated(ins: Statements, m: Message) -> list[Message]:
    """The insider's counter claimed as high as the round allows (as if settled all along)."""
    return [Message(m.sender, m.receivers, m.iteration, m.round, m.kind, m.payload, m.encrypted, (m.round - 1, m.meta[1]))]


def vote_against(victim_at: int):
    def make(ins: Statements, m: Message) -> list[Message]:
        victim = ins.roster.neighbours[INSIDER][victim_at % len(ins.roster.neighbours[INSIDER])]
        fields = (victim, m.iteration, INSIDER)
        return [Message(INSIDER, m.receivers, -1, victim * ins.roster.n_nodes + INSIDER, "drop", ins.signer.sign("drop", fields), False, fields)]
    return make


def abort_naming(how: str):
    """A signed abort: ``implausible`` names a node the insider cannot have watched (a violation
    by a non-neighbour, or a disagreement outside the final phase); ``frame`` names a
    neighbour, plausibly (nobody can disprove it, so the run stops: the claim is the insider's)."""
    def make(ins: Statements, m: Message) -> list[Message]:
        nbrs = ins.roster.neighbours[INSIDER]
        stranger = next((k for k in range(ins.roster.n_nodes) if k != INSIDER and k not in nbrs), INSIDER)  # itself, if it neighbours all
        reason, round_, culprit = {
            "implausible": (Reason.VIOLATION, m.round, stranger),
            "phase": (Reason.DISAGREE, m.round, nbrs[0]),
            "frame": (Reason.VIOLATION, m.round, nbrs[0]),
        }[how]
        return [abort_message(INSIDER, m.receivers, make_abort(ins.signer, reason, m.iteration, round_, INSIDER, (culprit,)))]
    return make


@st.composite
def attacks(draw, sent):
    """One insider: a rewrite of its nth message of some kind, or statements it signs itself."""
    what = draw(st.sampled_from(["rewrite", "early-stop", "inflate", "vote", "abort", "withhold", "perturb", "finals", "flood", "restart"]), label="attack")
    # the third red team's shapes (issue 32): each may stop the run, none may convict an honest node
    if what == "restart":  # INSIDER crashes and a new process of it starts, same key and nonce
        after = draw(st.integers(5, sum(sent.values())), label=f"after its nth of {sum(sent.values())} envelopes")
        return f"restart after {after}", "stop", after, False
    if what == "withhold":
        lag = draw(st.sampled_from([2.5, 4.5]), label="lag (timeout 2 s)")
        return f"withhold {lag} s", "stop", lambda kit: Withhold(kit, lag), True
    if what == "finals":
        k = draw(st.integers(1, 3), label="extra signed finals")
        # convicts its signer, unless every node agreed on its first final before the others came
        return f"{k} extra finals", "stop", lambda kit: TwoFinals(kit, k), False
    if what == "rewrite":
        kind = draw(st.sampled_from(["primal", "dual-init", "hello", "final", "bye", "stop"]), label="kind")
        rewrite, change = draw(rewrites(), label="rewrite")
        nth = draw(st.integers(1, sent[kind]), label=f"nth of {sent[kind]} {kind} messages")
        # a stop relay may come after every node agreed (harmless then)
        return f"rewrite {kind} {rewrite}", "stop", lambda kit: Insider(kit, nth, kind, change), kind in ("primal", "dual-init")
    # statements it signs: at one of its primals after the first EM iteration has begun (counters
    # exist), so that every run reaches it
    nth = draw(st.integers(sent["primal"] // 3, sent["primal"]), label=f"at its nth of {sent['primal']} primals")
    if what == "early-stop":
        # harmless (and unnoticed) only at its last primal of an aggregation, when the stop is due anyway
        return what, "stop", lambda kit: Statements(kit, nth, early_stop, keep=False), False
    if what == "inflate":
        return what, "stop", lambda kit: Statements(kit, nth, inflated, keep=False), False
    if what == "perturb":
        scale = draw(st.sampled_from([1 + 1e-6, 1 + 1e-4, 1 + 1e-2]), label="scale")
        return f"perturb x{scale}", "stop", lambda kit: Insider(kit, nth, "primal", lambda m: replace_payload(m, np.asarray(m.payload) * scale)), False
    if what == "flood":
        def flood(ins: Statements, m: Message) -> list[Message]:
            n_edges = sum(map(len, ins.roster.neighbours)) // 2
            return vote_against(0)(ins, m) * (statement_limit(ins.roster.n_nodes, n_edges) + 5)
        # convicts its sender (test_deploy_proof.py); here only: never an honest node
        return what, "continue", lambda kit: Statements(kit, nth, flood), False
    if what == "vote":
        on_dropout = draw(st.sampled_from(["stop", "continue"]), label="on_dropout")
        victim_at = draw(st.integers(0, 5), label="victim")
        return f"vote ({on_dropout})", on_dropout, lambda kit: Statements(kit, nth, vote_against(victim_at)), False
    how = draw(st.sampled_from(["implausible", "phase", "frame"]), label="abort")
    # a delayed statement may arrive after every node agreed: harmless then, not necessarily noticed
    return f"abort {how}", "stop", lambda kit: Statements(kit, nth, abort_naming(how)), False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_insider_never_splits_or_silently_corrupts_the_outcome(kit, honest, tmp_path_factory, data):
    """Every generated run has the insider act (the nth message it rewrites is one it sends in
    every run: an honest run sends as many, and the run is honest until then), and ends with
    every honest node exact or failed naming the insider, never split, and no honest node
    convicted (a culprit only on proof, see :func:`assert_honest_outcome`)."""
    kit, sim = kit
    _, sent = honest
    name, on_dropout, make, detected = data.draw(attacks(sent))
    if name.startswith("restart"):  # nobody misbehaves: nobody may be convicted, not even the restarted node
        codes, reports, again = run_with_restart(kit, tmp_path_factory.mktemp("run"), INSIDER, after=make)
        results = [(codes[i], reports[i]) for i in range(kit.n_nodes)]
        assert_honest_outcome(results, sim, None, unattributable=True)
        assert again is None or again["culprits"] == [], again["error"]
        return
    insider = make(kit)
    faults = Faults(np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="fault seed")), duplicate=0.05, delay=0.05, max_delay=0.002, rewrite=insider)
    if isinstance(insider, Withhold):  # its own broker path, not a rewrite
        faults = insider
    results = run_in_memory(kit, tmp_path_factory.mktemp("run"), faults, on_dropout=on_dropout)
    assert insider.fired, f"the insider never acted ({name})"
    assert_honest_outcome(results, sim, INSIDER, unattributable=name.startswith(("withhold", "perturb")), lie=name.startswith("perturb"))
    if detected:  # what no honest node sends is noticed (a control message may be rewritten harmlessly)
        assert any(code != 0 for i, (code, _) in enumerate(results) if i != INSIDER), f"{name} went unnoticed"


def test_forged_abort_is_pinned_on_its_sender(kit, tmp_path):
    """An abort in another node's name without its signature: its sender is the culprit."""
    kit, sim = kit
    roster = Roster.load(kit.roster_path)
    origin = roster.neighbours[INSIDER][0]
    framed = next(j for j in range(kit.n_nodes) if j not in (INSIDER, origin))

    def forge(m: Message) -> Message:
        return Message(INSIDER, m.receivers, -1, origin, "abort", (7, 7), False, (1, m.iteration, m.round, origin, 1, framed))

    insider = Insider(kit, 5, "primal", forge)
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert insider.fired
    assert_honest_outcome(results, sim, INSIDER)
    for j in roster.neighbours[INSIDER]:
        assert f"protocol violation by node {INSIDER}" in results[j][1]["error"] and f"not signed by node {origin}" in results[j][1]["error"]
    assert all(f"node {framed} fell silent" not in rep["error"] for i, (_, rep) in enumerate(results) if i != INSIDER)


def test_messages_queued_ahead_are_bounded(kit, tmp_path):
    """A member cannot make a neighbour queue messages for later without limit."""
    kit, sim = kit
    roster = Roster.load(kit.roster_path)
    victim = roster.neighbours[INSIDER][0]

    ahead = [Message(INSIDER, (victim,), 1, r, "dual-init", np.zeros(20), True) for r in range(6)]  # of the length of iteration 1

    class Flood(Insider):
        """Publishes its second primal unchanged, followed by six messages for the next EM iteration."""

        def __call__(self, topic, payload):
            if super().__call__(topic, payload) is None:
                return None
            return [(topic, payload)] + [(topic_for(self.roster.run_id, m), self.codec.encode(m)) for m in ahead]

    insider = Flood(kit, 2, "primal", lambda m: m)
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert_honest_outcome(results, sim, INSIDER)
    assert "check 'ahead'" in results[victim][1]["error"]


def test_dropout_continue_ends_with_the_simulation_of_the_same_schedule(kit, tmp_path):
    """A node killed mid-run: the survivors drop it, re-run that EM iteration without it and
    end with the model of the simulation with the same dropout schedule."""
    from p2pem.deploy.dropout import simulate_with_dropouts, survivor_topology
    from p2pem.simulate import protocol_streams

    kit, _ = kit
    roster = Roster.load(kit.roster_path)
    victim = next(k for k in range(kit.n_nodes) if _can_drop(roster, k, survivor_topology))
    # 30 envelopes: past the initialisation, before the end (pdmm-sp needs ~40 per EM iteration here)
    results = run_in_memory(kit, tmp_path, on_dropout="continue", kill=(victim, 30))
    survivors = [i for i in range(kit.n_nodes) if i != victim]
    assert results[victim][0] != 0
    assert all(results[i][0] == 0 for i in survivors), [results[i][1]["error"] for i in survivors]
    dropped = {tuple(sorted((d["node"], d["iteration"]) for d in results[i][1]["dropped"])) for i in survivors}
    assert len(dropped) == 1
    ((node, iteration),) = dropped.pop()
    assert node == victim and iteration >= 1
    scenario = load_scenario(kit.scenario_file)
    parts = load_data(scenario)
    params, n_iter = simulate_with_dropouts(
        parts, roster.neighbours, roster.protocol_spec(), em_settings(scenario), {victim: iteration},
        rngs=protocol_streams(scenario.streams()["protocol"], len(parts)),
    )
    ref = np.concatenate([np.ravel(params.weights), np.ravel(params.means), np.ravel(params.covariances)])
    for i in survivors:
        rep = results[i][1]
        assert rep["n_iter"] == n_iter
        assert float(np.max(np.abs(model(rep) - ref)) / np.max(np.abs(ref))) <= 1e-9


def test_dropout_stop_is_the_default(kit, tmp_path):
    kit, _ = kit
    results = run_in_memory(kit, tmp_path, kill=(2, 30))
    for i, (code, rep) in enumerate(results):
        if i != 2:
            assert code != 0 and "node 2" in rep["error"] and not rep["dropped"]
            # the same facts as fields: who noticed the silence, who was told
            assert rep["culprits"] == [] and not rep["attributable"], rep  # a silence is evidence, never proof
            assert (rep["reason"] == "silent" and rep["suspects"] == [2]) or (rep["reason"] == "aborted" and 2 in rep["suspects"]), rep
    assert any(rep["reason"] == "silent" for i, (_, rep) in enumerate(results) if i != 2)


def _can_drop(roster, k, survivor_topology) -> bool:
    try:
        survivor_topology(roster.neighbours, {k})
    except Exception:  # noqa: BLE001 - ProtocolError: this node's loss would disconnect the graph
        return False
    return True


def test_a_bug_inside_a_node_is_reported_not_raised(kit, tmp_path, monkeypatch):
    """An unexpected exception: exit code 70, one line in result.json, the others told why."""
    from p2pem.node import Node

    kit, sim = kit
    original = Node.receive
    calls = {"n": 0}

    def broken(self, msg):
        if self.node_id == 3:
            calls["n"] += 1
            if calls["n"] == 30:
                raise KeyError("bug")
        return original(self, msg)

    monkeypatch.setattr(Node, "receive", broken)
    results = run_in_memory(kit, tmp_path)
    code, rep = results[3]
    assert code == 70 and rep["status"] == "failed" and "internal error" in rep["error"] and "KeyError" in rep["error"]
    assert all(c != 0 and "node 3 reports that it hit an internal error" in r["error"] for i, (c, r) in enumerate(results) if i != 3)


def test_nodes_refuse_a_neighbour_whose_step_parameters_differ(kit, tmp_path, monkeypatch):
    """Node 2's host computes the graph's eigenvalues a little differently (another LAPACK):
    the same roster, but other heavy-ball parameters.  Left alone, the nodes would agree on a
    wrong average; the hello compares the parameters, so no node starts and all say why."""
    from p2pem.protocols.pdmm import spectra

    kit, _ = kit
    original, calls = spectra.laplacian_extremes, {"n": 0}

    def other_host(topology, weights):
        calls["n"] += 1  # runtimes are built in node order, one topology (one computation) each
        lam2, lmax = original(topology, weights)
        return (lam2 * (1 + 1e-5), lmax) if calls["n"] == 3 else (lam2, lmax)

    monkeypatch.setattr(spectra, "laplacian_extremes", other_host)
    results = run_in_memory(kit, tmp_path)
    assert calls["n"] == kit.n_nodes
    roster = Roster.load(kit.roster_path)
    for i, (code, rep) in enumerate(results):
        assert code != 0 and rep["status"] == "failed" and "weights" not in rep
        if i in roster.neighbours[2]:
            assert "neighbour node 2 derived other public step parameters" in rep["error"], rep["error"]
    assert "derived other public step parameters" in results[2][1]["error"]


def test_survivors_with_different_step_parameters_stop_instead_of_agreeing_on_a_wrong_model(kit, tmp_path, monkeypatch):
    """After a dropout the survivors derive the step parameters of the smaller graph; one of
    them rounds the eigenvalues differently.  They are bound into the survivors' tags, so its
    messages no longer authenticate and the run stops, instead of converging to a slightly
    wrong model that the final agreement (relative 1e-6) might let through."""
    from p2pem.deploy.dropout import survivor_topology
    from p2pem.protocols.pdmm import spectra

    kit, _ = kit
    roster = Roster.load(kit.roster_path)
    victim = next(k for k in range(kit.n_nodes) if _can_drop(roster, k, survivor_topology))
    original, calls = spectra.laplacian_extremes, {"n": 0}
    odd = next(i for i in range(kit.n_nodes) if i != victim)

    def other_host(topology, weights):
        lam2, lmax = original(topology, weights)
        # all nodes share this process: the node asking is the one whose task runs
        if topology.n_nodes == kit.n_nodes - 1 and NODE.get() == odd:
            calls["n"] += 1
            return lam2 * (1 + 1e-5), lmax
        return lam2, lmax

    monkeypatch.setattr(spectra, "laplacian_extremes", other_host)
    results = run_in_memory(kit, tmp_path, on_dropout="continue", kill=(victim, 30))
    assert calls["n"] == 1  # the odd survivor restarted once, with its own parameters
    survivors = [i for i in range(kit.n_nodes) if i != victim]
    for i in survivors:
        code, rep = results[i]
        assert code != 0 and rep["status"] == "failed" and "weights" not in rep, (i, rep["error"])
    # its messages of the new attempt do not authenticate, so its neighbours wait for it and name it
    assert all(results[i][1]["wire"]["rejected"].get("ForgedMessage", 0) > 0 for i in roster.neighbours[odd] if i != victim)
    assert all(re.search(rf"waiting for node {odd}\b", results[i][1]["error"]) for i in survivors if i != odd and odd in roster.neighbours[i])


def test_another_protocol_runs_through_the_unchanged_runtime(kit, tmp_path, monkeypatch):
    """secure-sum (a ring, sealed hops, one message per node and round, a different node to
    wait for) through the very runtime that runs pdmm-sp: only the roster and the deployability
    check differ.  The runtime learns the protocol's kinds, secrets and whom to wait for from
    the protocol's declarations, so the result equals `p2pem simulate` of secure-sum."""
    import p2pem.deploy.roster as roster_module
    from p2pem.protocols.exact import SecureSum

    kit, _ = kit
    scenario = load_scenario(kit.scenario_file)
    graph, spec = build_graph(scenario), SecureSum()
    ring = spec.topology(graph).ring
    doc = Roster.load(kit.roster_path).to_document()
    doc["protocol"] = {"name": spec.name, **spec.params()}
    doc["topology"]["ring"] = list(ring)
    monkeypatch.setattr(roster_module, "check_deployable", lambda spec: None)  # what issue 22's kit will do for real
    ring_kit = replace(kit, root=tmp_path / "ring")  # the same keys and data, another roster
    roster_path = ring_kit.roster_path
    roster_path.parent.mkdir()
    roster_path.write_text(roster_module.toml_dumps(doc))
    for i in range(kit.n_nodes):
        ring_kit.node_dir(i).mkdir(parents=True)
        replace(NodeConfig.load(kit.config_path(i)), roster=roster_path).save(ring_kit.config_path(i))
    broker = MemoryBroker()
    results = run_in_memory(ring_kit, tmp_path / "out", broker=broker)
    sim = run_protocol(load_data(scenario), graph, spec, em_settings(scenario), seed=scenario.streams()["protocol"])
    assert [code for code, _ in results] == [0] * kit.n_nodes, [rep["error"] for _, rep in results]
    assert all(exact(rep, sim) for _, rep in results)
    observer = Codec(Roster.load(roster_path).run_id, Roster.load(roster_path).public_keys())
    kinds = Counter((env.kind, env.encrypted) for env in (observer.parse(p) for _, p in broker.published) if env.iteration >= 0)
    assert set(kinds) == {("ring", True), ("result", False)}  # the ring's hops sealed, as the protocol declares


def test_a_bad_message_kept_before_the_receiver_started_convicts_its_sender(kit, tmp_path):
    """The insider's malformed dual-init reaches a neighbour that has not started yet (the
    insider's own hello is held back, so its neighbours wait for it while it already runs): the
    Node keeps the message, checks it as the protocol starts, and the run stops naming the
    insider, not nobody."""
    kit, sim = kit
    roster = Roster.load(kit.roster_path)
    observer = Codec(roster.run_id, roster.public_keys())
    insider = Insider(kit, 1, "dual-init", lambda m: replace_payload(m, np.ones(3)))
    bad_for = []

    def intercept(topic: str, payload: bytes):
        env = observer.parse(payload)
        if env.sender == INSIDER and env.kind == "hello":
            return [(topic, payload, 0.5)]  # half a (virtual) second late
        rewritten = insider(topic, payload)
        if rewritten is not None:
            bad_for.append(env.receivers)
            return [(t, p, 0.0) for t, p in rewritten]
        return [(topic, payload, 0.0)]

    results = run_in_memory(kit, tmp_path, intercept)
    assert insider.fired
    assert_honest_outcome(results, sim, INSIDER)
    reached = bad_for[0][0]
    code, rep = results[reached]
    assert code == 4 and (rep["reason"], rep["culprits"]) == ("violation", [INSIDER]) and "check 'shape'" in rep["error"], rep["error"]
