"""nodes/README.md's multi-host deployment, followed from scratch on loopback: keys on every
"host", the roster and broker files on the coordinator, Mosquitto from the template with TLS
(its commands of step 3 run as written, as root: Mosquitto then drops to its own user and
must still read the 0600 files `keys roster` wrote), and one `p2pem node` per host."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from p2pem.cli import main
from p2pem.deploy.broker import find_mosquitto, free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
NODES = ROOT / "nodes"

pytestmark = [pytest.mark.mqtt, pytest.mark.slow]

#: the coordinator's scenario: no [data] table (the page's command gives the nodes' columns)
STUDY = """
seed = 1
[graph]
kind = "edges"
edges = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]
[em]
n_components = 2
max_iter = 8
[[protocols]]
name = "pdmm-sp"
"""


@pytest.fixture
def world() -> Iterator[Path]:
    """A folder the broker's user can reach (pytest's own tmp folders are private to their owner)."""
    path = Path(tempfile.mkdtemp(prefix="p2pem-readme-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _step3_blocks() -> list[str]:
    """The README's step-3 shell blocks (the certificate recipe, then the installation)."""
    text = (NODES / "README.md").read_text()
    step = re.search(r"### 3\. On the broker host(.*?)\n### 4", text, re.S)
    assert step, "nodes/README.md has no step 3"
    blocks = re.findall(r"```sh\n(.*?)```", step.group(1), re.S)
    assert len(blocks) == 2, "nodes/README.md's step 3 has a certificate block and an installation block"
    return blocks


def _step2_command() -> list[str]:
    """The README's step-2 command (``p2pem keys roster ...``), as words, without the leading ``p2pem``."""
    text = (NODES / "README.md").read_text()
    step = re.search(r"### 2\. On the coordinator(.*?)\n### 3", text, re.S)
    assert step, "nodes/README.md has no step 2"
    blocks = re.findall(r"```sh\n(.*?)```", step.group(1), re.S)
    assert len(blocks) == 1, "nodes/README.md's step 2 has one command block"
    words = shlex.split(blocks[0].replace("\\\n", " "))
    assert words[:3] == ["p2pem", "keys", "roster"], words
    return words[1:]


def _step3_commands(etc: Path, log: Path) -> list[str]:
    """The README's step-3 installation block, with this test's folders for /etc/mosquitto and /var/log."""
    lines = [line.split("#")[0].strip() for line in _step3_blocks()[1].splitlines()]
    commands = [line.removeprefix("sudo ") for line in lines if line.startswith("sudo install")]
    assert len(commands) >= 4 and any("broker/passwords broker/acl" in c for c in commands), commands
    return [c.replace("/etc/mosquitto", str(etc)).replace("/var/log/mosquitto", str(log)) for c in commands]


def test_the_multi_host_page_followed_on_loopback(world: Path, capsys, monkeypatch) -> None:
    mosquitto = find_mosquitto()
    assert mosquitto is not None, "make test installs mosquitto"
    hosts = [world / f"host{i}" for i in range(4)]
    # 1. every node host: an identity
    for i, host in enumerate(hosts):
        host.mkdir()
        monkeypatch.chdir(host)
        assert main(["keys", "new", "--node-id", str(i), "-q"]) == 0  # the page's command: node<i>.key, node<i>.pub
    # 2. the coordinator: the roster and the broker files (from the .pub files only)
    coordinator = world / "coordinator"
    (coordinator / "pubs").mkdir(parents=True)
    for i, host in enumerate(hosts):
        shutil.copy(host / f"node{i}.pub", coordinator / "pubs")
    (coordinator / "study.toml").write_text(STUDY)
    monkeypatch.chdir(coordinator)
    command = _step2_command()  # the page's command as written: the columns as options, no [data] needed
    assert main(command) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert all(f"node {i}: " in out for i in range(4))  # every fingerprint, for the owners to compare
    columns = command[command.index("--columns") + 1].split(",")
    assert (coordinator / "broker" / "passwords").stat().st_mode & 0o777 == 0o600
    # 3. the broker host: the template, the files installed as the page says
    etc, log = world / "etc" / "mosquitto", world / "log"
    (etc / "certs").mkdir(parents=True)
    # the page's recipe for the broker's certificate, for the address the nodes connect to (here: localhost)
    recipe = _step3_blocks()[0].split("#")[0].split()
    assert recipe[:5] == ["p2pem", "keys", "tls", "--host", "10.20.0.7"] and recipe[5:] == ["--out", "tls/"], recipe
    assert main(["keys", "tls", "--host", "localhost", "--host", "127.0.0.1", "--out", str(world / "tls"), "-q"]) == 0
    certs = world / "tls"
    certs.chmod(0o755)
    as_root = os.geteuid() == 0
    if as_root:  # the case the page is about: Mosquitto drops to its own user
        for command in _step3_commands(etc, log):
            subprocess.run(command, shell=True, check=True, cwd=coordinator if "broker/" in command else world)
        password_dir = etc / "p2pem"
    else:  # an ordinary user's Mosquitto stays that user and reads the files in place
        password_dir, log = coordinator / "broker", world / "log"
        log.mkdir()
        for name in ("ca.crt", "server.crt", "server.key"):
            shutil.copy(certs / name, etc / "certs" / name)
    port = free_port()
    config = (NODES / "mosquitto.conf.template").read_text()
    config = (config.replace("/etc/mosquitto/certs", str(etc / "certs")).replace("/etc/mosquitto/p2pem", str(password_dir))
              .replace("/var/log/mosquitto", str(log)).replace("listener 8883", f"listener {port} 127.0.0.1"))
    if not as_root:
        config = config.replace("user mosquitto", f"user {os.environ.get('USER', 'nobody')}")
    (world / "mosquitto.conf").write_text(config)
    broker = subprocess.Popen([str(mosquitto), "-c", str(world / "mosquitto.conf")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for_port("127.0.0.1", port, 15, process=broker)
        # 4. every node host: its rows, its config from the template, the node
        rng = np.random.default_rng(0)
        launch = os.urandom(16).hex()
        procs = []
        for i, host in enumerate(hosts):
            X = np.vstack([rng.normal(size=(12, 2)), rng.normal(size=(12, 2)) + 4])
            np.savetxt(host / "data.csv", X, delimiter=",", header=",".join(columns), comments="")
            shutil.copy(coordinator / "roster.toml", host)
            shutil.copy(coordinator / "broker" / f"node{i}.password", host / "broker.password")
            shutil.copy(certs / "ca.crt", host)
            node = (NODES / "node.toml.template").read_text().replace("<I>", str(i)).replace("<broker.example.org>", "localhost")
            node = re.sub(r"(?m)^port = 8883.*$", f"port = {port}", node)
            node = re.sub(r'(?m)^# ca_file = "ca.crt".*$', 'ca_file = "ca.crt"', node)
            (host / "node.toml").write_text(node)
            procs.append(subprocess.Popen([sys.executable, "-m", "p2pem", "-v", "node", "--config", str(host / "node.toml"), "--launch", launch],
                                          cwd=host, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outputs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outputs]
        results = [json.loads((host / "result.json").read_text()) for host in hosts]
        means = np.array([r["means"] for r in results])
        # every node holds the same model, up to the consensus error (each drew its secrets from the OS)
        assert np.max(np.abs(means - means[0])) <= 1e-9 * np.max(np.abs(means[0]))
        assert sorted(means[0][:, 0].round(0)) == [0.0, 4.0]  # the two clusters of the rows
    finally:
        broker.terminate()
        log_text = broker.communicate(timeout=10)[0].decode(errors="replace")
    assert "Unable to open" not in log_text + ((log / "p2pem.log").read_text() if (log / "p2pem.log").exists() else "")
