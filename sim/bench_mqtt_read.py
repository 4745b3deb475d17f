"""Benchmark: the CPU a deployed node's MQTT link spends per received message, with the link's
socket reader (``p2pem.deploy.transports.reading.PacketReader``) and with paho's own reader.

A Mosquitto broker on loopback (started here, with the deployment's ``set_tcp_nodelay``), a
paho publisher in a thread sending ``--messages`` payloads of 450 bytes (about one pdmm-sp
envelope of the Parkinsons-20 scenario) in bursts of 10, and an ``MqttLink`` subscribed to them
in this process.  Prints the receiving thread's CPU per message for each reader, alternating
``--repeat`` times, and their ratio.

Usage::

    .venv/bin/python sim/bench_mqtt_read.py
    .venv/bin/python sim/bench_mqtt_read.py --messages 100000 --repeat 3

Not a test: the numbers depend on the machine and its load (printed beside them).  Needs
``mosquitto`` installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import print_table  # noqa: E402

PAYLOAD = 450


def _publish(port: int, n: int, ready: threading.Event) -> None:
    import paho.mqtt.client as paho

    client = paho.Client(paho.CallbackAPIVersion.VERSION2)
    client.connect("127.0.0.1", port)
    client.loop_start()
    ready.wait(30)
    payload = b"x" * PAYLOAD
    for k in range(n):
        client.publish("bench/from/1/all", payload, qos=0)
        if k % 10 == 9:
            time.sleep(0.0005)
    time.sleep(0.5)
    client.loop_stop()
    client.disconnect()


def _receive(port: int, n: int, fast: bool) -> float:
    """Thread CPU seconds per message for the n messages after the first."""
    from p2pem.deploy.transports import mqtt, reading

    original = reading.install
    if not fast:
        mqtt.reading.install = lambda client, sink: reading.read_in_bursts(client)  # type: ignore[assignment]

    async def main() -> float:
        ready = threading.Event()
        async with mqtt.MqttLink("127.0.0.1", port, subscriptions=["bench/#"], qos=1, subscribe_qos=0) as link:
            sender = threading.Thread(target=_publish, args=(port, n, ready))
            sender.start()
            ready.set()
            await link.receive(timeout=30)
            c0 = time.thread_time()
            for _ in range(n - 1):
                await link.receive(timeout=30)
            cpu = time.thread_time() - c0
            await asyncio.to_thread(sender.join)
        return cpu / (n - 1)

    try:
        return asyncio.run(main())
    finally:
        mqtt.reading.install = original  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000, help="messages per run (default 50 000)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each reader, alternating (default 2)")
    args = parser.parse_args(argv)

    from p2pem.deploy.broker import start_broker

    with tempfile.TemporaryDirectory(prefix="p2pem-read-") as tmp:
        broker = start_broker(tmp)
        try:
            runs: dict[str, list[float]] = {"PacketReader": [], "paho's reader (in bursts)": []}
            for _ in range(args.repeat):
                runs["PacketReader"].append(_receive(broker.port, args.messages, True))
                runs["paho's reader (in bursts)"].append(_receive(broker.port, args.messages, False))
        finally:
            broker.stop()
    print(f"{args.messages} messages of {PAYLOAD} bytes per run, {args.repeat} runs each, alternating; "
          f"load average {os.getloadavg()[0]:.1f}")
    rows = [[name, *(f"{1e6 * v:.1f}" for v in values), f"{1e6 * statistics.median(values):.1f}"] for name, values in runs.items()]
    print_table(["reader", *(f"run {k + 1} us/msg" for k in range(args.repeat)), "median us/msg"], rows)
    fast, slow = (statistics.median(v) for v in runs.values())
    print(f"ratio {fast / slow:.2f}: the link's CPU per received message with PacketReader against paho's reader")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
