#!/usr/bin/env bash
# Start every node of a prepared kit on this machine, the moving parts in plain sight:
# one Mosquitto with KIT/broker/mosquitto.conf and one `p2pem node` per KIT/nodes/node*/node.toml.
#
#   p2pem deploy scenarios/parkinsons-20.toml --out KIT --prepare-only
#   nodes/launch.sh KIT                  # Ctrl-C stops every process it started
#
# `p2pem deploy --kit KIT` does the same and also checks that the nodes agree and writes
# KIT/result.json.  Environment: P2PEM (default: p2pem), MOSQUITTO (default: found on PATH
# or /usr/sbin/mosquitto), BROKER_RUNNING=1 to use a broker that is already up.
set -euo pipefail

kit=${1:?usage: nodes/launch.sh KIT_DIR}
p2pem=${P2PEM:-p2pem}
mosquitto=${MOSQUITTO:-$(command -v mosquitto || echo /usr/sbin/mosquitto)}

pids=()
cleanup() {
    trap - INT TERM EXIT
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

if [[ -z "${BROKER_RUNNING:-}" ]]; then
    "$mosquitto" -c "$kit/broker/mosquitto.conf" &
    pids+=("$!")
    sleep 0.5
fi

# A fresh launch nonce, shared by every node of this launch: messages (e.g. retained aborts)
# of an earlier launch of the same kit are then refused.
launch=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
node_pids=()
for config in "$kit"/nodes/node*/node.toml; do
    "$p2pem" -v node --config "$config" --launch "$launch" 2>>"$(dirname "$config")/node.log" &
    node_pids+=("$!")
    pids+=("$!")
done
echo "started ${#node_pids[@]} nodes; logs in $kit/nodes/node*/node.log" >&2

status=0
for pid in "${node_pids[@]}"; do
    wait "$pid" || status=$?
done
echo "nodes finished (exit status $status); results in $kit/nodes/node*/result.json" >&2
exit "$status"
