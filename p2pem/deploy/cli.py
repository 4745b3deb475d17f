"""The ``node``, ``deploy`` and ``keys`` subcommands (registered by :mod:`p2pem.cli`).

Only argument parsing and printing live here; the work is in :mod:`p2pem.deploy.runtime`
and :mod:`p2pem.deploy.process` (a node), :mod:`p2pem.deploy.launcher` and the modules it chains (a whole deployment),
:mod:`p2pem.deploy.keys` and :mod:`p2pem.deploy.assemble` (keys), imported when a command runs
so that ``p2pem --help`` stays fast.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from p2pem.errors import ConfigError

NODE_HELP = """\
Run one node of a deployment: load this node's own data file, connect to the MQTT broker,
wait until every neighbour is online, take part in the consensus (messages authenticated, initial
duals encrypted per edge) and write the fitted model to the result file named in the
config.  Exits 0 when the model is complete; otherwise exits non-zero within the configured
timeout with one line naming the node that failed and the EM iteration and protocol round.
See nodes/README.md for the config file.
"""

DEPLOY_HELP = """\
Deploy a scenario on this machine as one OS process per node, talking through an MQTT
broker: split the data into per-node files, generate keys, roster and node configs in DIR,
start Mosquitto on a free loopback port (unless --broker is given), start the nodes, show
progress, check that every node ended with the same model and write DIR/result.json in the
schema of `p2pem simulate` plus a "deployment" section (per-node timings and message
counts).  Every node draws its secrets (initial duals) from the OS's entropy, so the result
equals `p2pem simulate` up to the consensus error; --insecure-reproducible-seed draws them
from the scenario seed instead (bit-identical to simulate, NOT private: whoever has the
scenario file undoes the privacy noise).  Every message is validated; a node that breaks the
protocol is named and the run stops; no node reports success before every node showed it the
same signed final model.  A node is named a culprit only on proof (a statement it signed
that no honest node makes); a silence, a slow link or a different final model stops the run
as unattributable, naming the suspects.  With `on_dropout = "continue"` in the scenario's
[deploy] table the run goes on without a node that a quorum of its neighbours (more than
`tolerate`, or all of them) signed fell silent (each eviction is printed with its witnesses).  Every protocol but centralized deploys (federated and
dp-central with a server process beside the nodes).  --tls makes a CA and a broker certificate
and runs the broker with TLS; --sites 2 runs two brokers joined by a Mosquitto bridge, as two
sites would.  Ctrl-C, or killing this launcher, stops every node process and the broker.
"""

KEYS_HELP = """\
Node identities for a multi-host deployment: `keys new` on every host (the private key
never leaves it), `keys roster` on the coordinator to assemble the roster from the public
files and write the broker's password file and ACL, `keys tls` for the broker's TLS
certificate, `keys show` to print the fingerprints to compare out of band.  See
nodes/README.md.
"""


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``node``, ``deploy`` and ``keys`` on the top-level subparsers."""
    raw = argparse.RawDescriptionHelpFormatter

    node = sub.add_parser("node", help="run one node of a deployment (one process per node)", description=NODE_HELP, formatter_class=raw)
    node.add_argument("--config", required=True, metavar="NODE_TOML", help="this node's config file (node.toml)")
    node.add_argument("--progress", action="store_true", help="print machine-readable progress lines ('online', 'progress K N') to stdout")
    node.add_argument("--exit-with-parent", action="store_true", help="stop when the process that started this node exits (used by `p2pem deploy`)")
    node.add_argument(
        "--launch",
        metavar="HEX",
        default=os.environ.get("P2PEM_LAUNCH", ""),
        help="nonce of this launch (hex, same for every node; default $P2PEM_LAUNCH): bound into every message, "
        "so messages of an earlier launch of the same roster are refused. `p2pem deploy` and nodes/launch.sh draw a fresh one; "
        "a node refuses to start without one",
    )
    node.add_argument(
        "--insecure-no-launch-nonce",
        action="store_true",
        help="INSECURE, for trying things out only: start without a launch nonce, so that messages (and retained aborts) "
        "of an earlier launch of this roster are accepted by this one",
    )
    node.set_defaults(func=cmd_node)

    dep = sub.add_parser("deploy", help="run a scenario as one process per node over an MQTT broker", description=DEPLOY_HELP, formatter_class=raw)
    dep.add_argument("scenario", nargs="?", help="scenario TOML file, e.g. scenarios/parkinsons-20.toml")
    dep.add_argument("--out", metavar="DIR", help="output folder for the kit, logs and result.json (created with its parents)")
    dep.add_argument("--kit", metavar="DIR", help="run a kit prepared earlier with --prepare-only instead of a scenario")
    dep.add_argument("--protocol", metavar="NAME", help="which of the scenario's protocols to deploy: its name (the first of that name) or its position 1, 2, ... (default: the first); every protocol but centralized deploys")
    dep.add_argument("--broker", metavar="HOST:PORT", help="use this running broker instead of starting one (it must load DIR/broker/passwords and DIR/broker/acl, or allow anonymous clients)")
    dep.add_argument("--listen", metavar="HOST", default="127.0.0.1", help="address of the broker the launcher starts (default 127.0.0.1)")
    dep.add_argument("--run-id", metavar="ID", help="run id bound into message tags, keys and topics (default: scenario name + random suffix)")
    dep.add_argument("--timeout", type=float, metavar="S", help="seconds a node waits for a silent neighbour before the run stops (default: [deploy] timeout or 20)")
    dep.add_argument("--startup-timeout", type=float, metavar="S", help="seconds every node's neighbours have to come online (default: [deploy] startup_timeout or 60)")
    dep.add_argument("--insecure-reproducible-seed", action="store_true", help="TESTING ONLY: draw the nodes' protocol noise from the scenario seed so that the result equals `p2pem simulate` bit for bit; anyone with the scenario file can then undo the privacy noise (recorded in result.json and the logs)")
    dep.add_argument("--os-entropy", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old scripts
    dep.add_argument("--tls", action="store_true", help="generate a CA and a broker certificate (in DIR/broker) and run the broker with TLS; every node trusts that CA only")
    dep.add_argument("--sites", type=int, choices=(1, 2), default=1, help="2: two brokers joined by a Mosquitto bridge (odd nodes use the second), as two sites would (default 1)")
    dep.add_argument("--prepare-only", action="store_true", help="write the kit (keys, roster, configs, broker files) and stop; run it later with --kit DIR or nodes/launch.sh DIR")
    dep.add_argument("--check", action="store_true", help="also run `p2pem simulate` on the same scenario and print the largest relative difference")
    dep.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    dep.set_defaults(func=cmd_deploy)

    keys = sub.add_parser("keys", help="generate node keys and assemble a roster (multi-host deployments)", description=KEYS_HELP, formatter_class=raw)
    ksub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    new = ksub.add_parser("new", help="generate this host's node identity", description="Generate an Ed25519 signing key and an X25519 agreement key, write both to KEY_FILE (mode 0600) and the public half to KEY_FILE with suffix .pub, and print the public half.")
    new.add_argument("--out", metavar="KEY_FILE", help="private key file to write (default with --node-id I: nodeI.key, so every host's .pub file has its own name)")
    new.add_argument("--node-id", type=int, metavar="I", help="record this node id in the .pub file (the roster needs it)")
    new.add_argument("--force", action="store_true", help="overwrite an existing key file (a roster that pins the old key stops working)")
    new.set_defaults(func=cmd_keys_new, out_kind="file")
    show = ksub.add_parser(
        "show",
        help="print the public keys and fingerprints of a key file, a .pub file or a roster",
        description="Print the public keys and fingerprint of a private key file or a .pub file, as TOML; for a roster, every "
        "node's (and the server's) fingerprint, one line each: what the owners compare over a second channel.",
    )
    show.add_argument("key_file", metavar="FILE", help="a private key file (mode 0600), a .pub file or roster.toml")
    show.set_defaults(func=cmd_keys_show)
    tls = ksub.add_parser(
        "tls",
        help="make a certificate authority and the broker's TLS certificate",
        description="Write ca.crt (give it to every node: its broker.ca_file), server.crt and server.key (mode 0600, for the broker: "
        "the certfile and keyfile of nodes/mosquitto.conf.template) into DIR.  The certificate names every --host, the "
        "addresses the nodes connect to (IP addresses or DNS names); the CA's private key is not kept, so nothing else can "
        "ever be signed by it.",
    )
    tls.add_argument("--host", action="append", required=True, metavar="ADDRESS", help="the broker's address as the nodes write it in broker.host (repeat for several)")
    tls.add_argument("--out", required=True, metavar="DIR", help="folder to write ca.crt, server.crt and server.key into")
    tls.add_argument("--days", type=int, default=90, metavar="N", help="validity in days (default 90)")
    tls.set_defaults(func=cmd_keys_tls)
    roster = ksub.add_parser(
        "roster",
        help="assemble roster.toml from the nodes' public key files",
        description="Write the roster of a run: the scenario's graph (node ids, neighbours, diameter), EM settings and protocol, "
        "and the public keys of every node from the .pub files written by `p2pem keys new --node-id I`. "
        "With --broker-dir, also write the broker's hashed password file, ACL and one password file per node.",
    )
    roster.add_argument("scenario", help="scenario TOML file giving the graph, EM settings and protocol")
    roster.add_argument("--public", nargs="+", required=True, metavar="PUB", help=".pub files, or folders holding them (each must carry its node id)")
    roster.add_argument("--out", required=True, metavar="ROSTER_TOML", help="roster file to write")
    roster.add_argument("--run-id", metavar="ID", help="run id (default: scenario name + random suffix)")
    roster.add_argument("--protocol", metavar="NAME", help="which of the scenario's protocols (default: the first)")
    roster.add_argument("--broker-dir", metavar="DIR", help="also write the broker's passwords, acl, node<i>.password and credentials.toml here")
    roster.add_argument("--columns", metavar="NAMES", type=lambda text: [c.strip() for c in text.split(",")],
                        help="for a scenario without a [data] table: the column names of every node's data file, in order, "
                        "comma-separated (the roster's public schema; each node checks its own file against it)")
    roster.add_argument("--n-features", type=int, metavar="N",
                        help="for a scenario without a [data] table whose data files have no column names: their width")
    roster.set_defaults(func=cmd_keys_roster, out_kind="file")


# ------------------------------------------------------------------------------------ node


def cmd_node(args: argparse.Namespace) -> int:
    from p2pem.deploy.config import NodeConfig
    from p2pem.deploy.process import run_node
    from p2pem.deploy.report import write_failure
    from p2pem.deploy.runtime import NodeRuntime
    from p2pem.deploy.server import ServerRuntime
    from p2pem.errors import P2pemError
    from p2pem.messages import SERVER

    parent = os.getppid() if args.exit_with_parent else None
    if parent is not None:
        from p2pem.deploy.broker import die_with_parent

        die_with_parent()
    try:
        launch = bytes.fromhex(args.launch)
    except ValueError:
        raise ConfigError(f"--launch must be hex digits, got {args.launch!r}") from None
    if not launch and not args.insecure_no_launch_nonce:
        raise ConfigError(
            "no launch nonce: give --launch HEX (or $P2PEM_LAUNCH), the same fresh one for every node of this launch "
            "(`p2pem deploy` and nodes/launch.sh draw one); to try things out without, --insecure-no-launch-nonce"
        )
    if not launch:
        import logging

        logging.getLogger(__name__).warning(
            "INSECURE: NO LAUNCH NONCE (--insecure-no-launch-nonce): messages and retained aborts of an earlier launch "
            "of this roster are accepted by this one"
        )

    def progress(event: str, n_iter: int, max_iter: int) -> None:
        _say("online" if event == "online" else f"progress {n_iter} {max_iter}")

    config = NodeConfig.load(args.config)
    party = ServerRuntime if config.node_id == SERVER else NodeRuntime
    try:
        runtime = party(config, progress=progress if args.progress else None, parent_pid=parent, launch=launch)
    except P2pemError as exc:
        write_failure(config, exc)
        raise
    report = run_node(runtime)
    args.exit_at_once = True  # the result file is written: p2pem.cli.main may skip the interpreter's teardown
    if not args.progress and config.node_id != SERVER:
        ll = report["loglik"][-1] if report["loglik"] else float("nan")
        loglik = "no log-likelihood released (private)" if ll is None or math.isnan(ll) else f"final loglik {ll:.6f}"
        _say(
            f"node {report['node_id']}: {report['n_iter']} EM iterations, {loglik}, "
            f"{report['messages']} messages, result in {config.result}"
        )
    return 0


def _say(line: str) -> None:
    """Print a line; if nobody reads stdout any more (the launcher died), drop it quietly."""
    try:
        print(line, flush=True)
    except (BrokenPipeError, ValueError):
        # Point stdout at /dev/null so that the interpreter's final flush cannot fail either.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass


# ---------------------------------------------------------------------------------- deploy


def cmd_deploy(args: argparse.Namespace) -> int:
    from p2pem.scenario import parse_broker_address
    from p2pem.deploy.kit import Kit, prepare_kit
    from p2pem.deploy.launcher import deploy, run_kit
    from p2pem.deploy.results import compare_with_simulate

    if (args.scenario is None) == (args.kit is None):
        raise ConfigError("give either a SCENARIO (with --out DIR) or --kit DIR")
    broker = parse_broker_address(args.broker) if args.broker else None
    t0 = time.perf_counter()
    progress = None if args.quiet else _ProgressBar()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if args.kit is not None:
            kit = Kit.load(args.kit)
            if broker is not None:
                kit = kit.set_broker(*broker)
            doc = run_kit(kit, start_broker=broker is None, progress=progress)
        else:
            from p2pem.deploy.kit import deploy_settings
            from p2pem.scenario import load_scenario

            if not args.out:
                raise ConfigError("--out DIR is required with a SCENARIO")
            scenario = load_scenario(args.scenario)
            overrides = {k: v for k, v in (("timeout", args.timeout), ("startup_timeout", args.startup_timeout)) if v is not None}
            timeouts, _, _ = deploy_settings(scenario, overrides)
            if args.prepare_only:
                from p2pem.deploy.broker import free_port

                address = broker or deploy_settings(scenario)[2] or (args.listen, free_port(args.listen))
                kit = prepare_kit(
                    scenario, args.out, broker=address, protocol=args.protocol, run_id=args.run_id, seeded=args.insecure_reproducible_seed,
                    timeouts=timeouts, tls=args.tls, sites=args.sites, force=args.force,
                )
                print(f"prepared {kit.n_nodes} node kits for run {kit.run_id} in {kit.root} (broker {kit.broker_host}:{kit.broker_port})")
                print(f"start them with: p2pem deploy --kit {kit.root}   or   nodes/launch.sh {kit.root}")
                return 0
            kit, doc = deploy(
                scenario,
                args.out,
                protocol=args.protocol,
                broker=broker,
                listen=args.listen,
                run_id=args.run_id,
                seeded=args.insecure_reproducible_seed,
                timeouts=timeouts,
                progress=progress,
                tls=args.tls,
                sites=args.sites,
                force=args.force,
            )
    finally:
        signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.close()
    _print_summary(kit, doc, time.perf_counter() - t0)
    if args.check:
        err = compare_with_simulate(kit, doc)
        print(f"largest relative difference to `p2pem simulate`: {err:.2e}")
    return 0


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


class _ProgressBar:
    """A tqdm bar over the slowest node's EM iterations, with the number of nodes online."""

    def __init__(self) -> None:
        self.bar: Any = None  # a tqdm bar once the first progress arrives
        self.last: tuple[int, int, int, int] | None = None

    def __call__(self, p) -> None:
        from tqdm import tqdm

        state = (p.max_iter, p.min_iter, p.online, p.exited)
        if state == self.last:
            return
        self.last = state
        if self.bar is None:
            self.bar = tqdm(desc="deploy", unit="EM it", file=sys.stderr, leave=False, dynamic_ncols=True, total=None, disable=None)
        if p.max_iter and self.bar.total != p.max_iter:
            self.bar.total = p.max_iter
        if self.bar.n != p.min_iter:
            self.bar.n = p.min_iter
        self.bar.set_postfix_str(f"online {p.online}/{p.n_nodes}" + (f", exited {p.exited}" if p.exited else ""), refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _print_summary(kit, doc: dict, elapsed: float) -> None:
    run = doc["protocols"][0]
    dep = doc["deployment"]
    cons = run["consensus_iterations"]
    mean_cons = sum(cons) / len(cons) if cons else float("nan")
    print(f"run {kit.run_id}: {dep['n_processes']} node processes, broker {dep['broker']}, {doc['n_rows']} rows")
    final = run["loglik"][-1] if run["loglik"] else None
    loglik = "no log-likelihood released (private)" if final is None else f"final loglik {final:.6f}"
    print(
        f"  {run['protocol']}: {run['n_iter']} EM iterations, {loglik}, "
        f"{mean_cons:.1f} consensus rounds per iteration, node spread {run['node_spread']:.1e}"
    )
    print(
        f"  {run['messages']} protocol messages ({run['bytes'] / 1e6:.2f} MB payload); on the wire "
        f"{dep['envelopes_published']} envelopes ({dep['wire_bytes'] / 1e6:.2f} MB), {dep['deliveries']} deliveries, "
        f"{dep['duplicates']} duplicates, {dep['rejected']} rejected, {dep['reconnects']} reconnects"
    )
    for d in dep.get("evicted", []):
        witnesses = ", ".join(map(str, d["witnesses"]))
        print(
            f"  EVICTED: node {d['node']} in EM iteration {d['iteration']}, on the signed word of its neighbours {witnesses} "
            f"that it fell silent; the model is the EM of the other nodes' rows only"
        )
    if dep.get("seeded"):
        print("  INSECURE: protocol noise from the scenario seed (--insecure-reproducible-seed); not private")
    startup = dep["startup_s"]
    print(
        f"  wall {run['wall_s']:.2f} s (all nodes online {startup:.2f} s after launch, consensus {dep['run_s']:.2f} s); "
        f"wrote {Path(kit.root) / 'result.json'} in {elapsed:.2f} s"
    )


# ------------------------------------------------------------------------------------ keys


def cmd_keys_new(args: argparse.Namespace) -> int:
    from p2pem.deploy.crypto import Identity
    from p2pem.deploy.keys import public_path, public_toml
    from p2pem.files import atomic_write

    if args.node_id is not None and args.node_id < 0:
        raise ConfigError(f"--node-id must be >= 0, got {args.node_id}")
    if args.out is None and args.node_id is None:
        raise ConfigError("give --node-id I (the key file is then nodeI.key) or --out KEY_FILE")
    path = Path(args.out if args.out is not None else f"node{args.node_id}.key")
    identity = Identity.generate()
    identity.save(path, overwrite=args.force)
    text = public_toml(identity.public, args.node_id)
    pub = public_path(path)
    atomic_write(pub, text)
    print(f"# wrote private key {path} (mode 0600; never copy it off this host) and public half {pub}")
    print(text, end="")
    return 0


def cmd_keys_show(args: argparse.Namespace) -> int:
    from p2pem.deploy.crypto import Identity
    from p2pem.deploy.keys import public_toml, read_public

    kind, doc = read_public(Path(args.key_file))
    if kind == "roster":
        from p2pem.deploy.roster import Roster

        roster = Roster.load(args.key_file)
        print(f"# roster of run {roster.run_id}: compare each fingerprint with the one its owner's `p2pem keys new` printed")
        for i, key in enumerate(roster.keys):
            name = f" ({roster.parties[i]})" if roster.parties is not None else ""
            print(f"node {i}{name}: {key.fingerprint}")
        if roster.server_key is not None:
            print(f"server: {roster.server_key.fingerprint}")
        return 0
    if kind == "public":
        print(public_toml(doc[1], doc[0]), end="")
        return 0
    print(public_toml(Identity.load(args.key_file).public), end="")
    return 0


def cmd_keys_tls(args: argparse.Namespace) -> int:
    from p2pem.deploy.crypto import write_tls_files

    if args.days < 1:
        raise ConfigError(f"--days must be >= 1, got {args.days}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ca, cert, key = write_tls_files(out, list(args.host), days=args.days, files=("ca.crt", "server.crt", "server.key"))
    print(f"wrote {ca} (give it to every node: broker.ca_file), {cert} and {key} (the broker's certfile and keyfile; keep the key there)")
    print(f"  the certificate names {', '.join(args.host)}, valid {args.days} days; nodes must connect to one of these addresses")
    return 0


def cmd_keys_roster(args: argparse.Namespace) -> int:
    from p2pem.deploy.assemble import assemble_roster

    roster, broker_files = assemble_roster(
        args.scenario, args.public, args.out, run_id=args.run_id, protocol=args.protocol, broker_dir=args.broker_dir,
        n_features=args.n_features, columns=args.columns,
    )
    print(f"wrote {args.out}: run {roster.run_id}, {roster.n_nodes} nodes, diameter {roster.diameter}")
    print("  fingerprints (each node's owner compares its own over a second channel):")
    for i, key in enumerate(roster.keys):
        print(f"    node {i}{f' ({roster.parties[i]})' if roster.parties is not None else ''}: {key.fingerprint}")
    if roster.server_key is not None:
        print(f"    server: {roster.server_key.fingerprint}")
    if broker_files is not None:
        print(f"wrote broker files to {broker_files}: give node<i>.password to node i's host; load passwords and acl into Mosquitto")
    return 0
