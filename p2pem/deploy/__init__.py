"""Run p2pem nodes as separate OS processes that talk through an MQTT broker.

The same :class:`~p2pem.node.Node` state machine that the simulator drives runs here, one
per process, next to its own data file.  Rooms:

``p2pem.deploy.roster``, ``p2pem.deploy.config``
    The two documents a node reads: the *roster* (public, identical at every node: run id,
    topology, EM settings, protocol parameters, every node's pinned public keys) and its own
    *node config* (node id, key file, data file, broker, timeouts).
``p2pem.deploy.runtime``
    One node: :class:`~p2pem.deploy.runtime.NodeRuntime` composes the parts below and runs the
    loop between them (wait for a message or a timer, admit it, hand it on, send what comes out).
``p2pem.deploy.bootstrap``
    Start-up: load the files, connect, the hello exchange (roster and step-parameter digests).
``p2pem.deploy.admission``
    What a node accepts from the wire: authentication, topic, neighbour, iteration window,
    replay guard; a pure verdict, no I/O.
``p2pem.deploy.control``
    The runtime's own messages: hello, final (the agreement on the model), bye, signed aborts
    and drops.
``p2pem.deploy.outbox``
    Publishing without waiting, re-publishing, reconnection.
``p2pem.deploy.watchdog``
    Silent neighbours and stalled runs, on clock times passed in.
``p2pem.deploy.failures``
    Why a node stops: one enum of reasons, one typed failure (node, reason, culprits on proof, suspects).
``p2pem.deploy.report``, ``p2pem.deploy.process``
    The node's ``result.json``; the process entry (signals, a result file whatever happens).
``p2pem.deploy.clock``
    The clock the timeouts read, and a virtual-time event loop for tests.
``p2pem.deploy.dropout``
    Going on without a node that dropped out: the survivors' graph, and the matching simulation.
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
``p2pem.deploy.assemble``
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
