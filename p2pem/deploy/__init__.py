"""Run p2pem nodes as separate OS processes that talk through an MQTT broker.

The same :class:`~p2pem.node.Node` state machine that the simulator drives runs here, one
per process, next to its own data file.  Rooms:

``p2pem.deploy.config``
    The two documents a node reads: the *roster* (public, identical at every node: run id,
    topology, EM settings, protocol parameters, every node's pinned public keys) and its own
    *node config* (node id, key file, data file, broker, timeouts).
``p2pem.deploy.runtime``
    The asyncio node process: MQTT link + signed/encrypted codec + replay guard + Node,
    with the start-up handshake, heartbeats, reconnection and clean failure.
``p2pem.deploy.launcher``
    ``p2pem deploy``: chains the four modules below, one job each.
``p2pem.deploy.kit``
    Split a scenario into per-node kits on disk (data, keys, configs, roster, broker auth)
    and start the kit's broker.
``p2pem.deploy.keys``
    Key and credential files: the broker's passwords and ACL, public identities.
``p2pem.deploy.supervise``
    Start, watch and stop the node processes.
``p2pem.deploy.results``
    Merge the nodes' results into one ``result.json`` and check that they agree.
``p2pem.deploy.roster``
    Multi-host set-up: a roster assembled from the nodes' public keys.
``p2pem.deploy.cli``
    The ``node``, ``deploy`` and ``keys`` subcommands.
``p2pem.deploy.crypto``, ``p2pem.deploy.codec``, ``p2pem.deploy.broker``, ``p2pem.deploy.transports``
    Identities, edge keys, AES-SIV sealing and signatures (the only importer of
    ``cryptography``); the wire envelopes; the Mosquitto broker; the links (in-memory with
    fault injection, MQTT: the only importer of ``aiomqtt``).  Only a deployment needs them,
    so the estimator and the simulator import none of them.

Nothing is imported here, so that ``p2pem --help`` stays fast.
"""

from __future__ import annotations
