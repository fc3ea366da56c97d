#!/usr/bin/env bash
# Packets per second through one path of the WAN router with a lean sender: the goal is
# ≥ 200 k packets/s, and iperf3 (bench.sh) could not send that fast on this 2-core machine.
# `udp_flood` (crates/wan/examples) sends 64-byte (or SIZE) IP packets with sendmmsg(2) in
# batches of 64 from the client namespace to a UDP socket in the root namespace that never reads
# (its buffer fills and the kernel drops the rest after the router: what counts is what the
# router forwarded; a bound socket, so no ICMP port-unreachable comes back through it). Each run
# is one `capstan wan run` with no bandwidth limit (or BANDWIDTH); the router's own counters give
# the forwarded packets and its CPU per packet. Prints a markdown table: median [range].
#
#   sudo crates/wan/pps.sh [ROUNDS=5] [SECONDS=4] [SIZE=64] [BANDWIDTH=unlimited]
#
# Needs root and a release build: cargo build --release -p capstan-cli
#                                 cargo build --release -p capstan-wan --example udp_flood
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}
SECS=${2:-4}
SIZE=${3:-64}
BW=${4:-unlimited}
TARGET=${CARGO_TARGET_DIR:-target}
CAPSTAN=${CAPSTAN:-$TARGET/release/capstan}
FLOOD=${FLOOD:-$TARGET/release/examples/udp_flood}
for b in "$CAPSTAN" "$FLOOD"; do
  [ -x "$b" ] || { echo "no $b; see the build commands at the top of $0" >&2; exit 1; }
done
OUT=$(mktemp -d /tmp/wan-pps.XXXXXX)
PORT=${PORT:-5309}
python3 -c "import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('0.0.0.0', $PORT))
time.sleep(86400)" &
SINK=$!
trap 'kill $SINK 2>/dev/null || true' EXIT
echo "uptime before: $(uptime)" >&2
for r in $(seq "$ROUNDS"); do
  "$CAPSTAN" wan run --quiet --bandwidth "$BW" --stats-out "$OUT/router$r.json" -- \
    sh -c "$FLOOD \$CAPSTAN_WAN_SERVER:$PORT $SIZE $SECS > $OUT/flood$r.json"
  sleep 0.5
done
echo "uptime after: $(uptime)" >&2
python3 - "$OUT" "$ROUNDS" "$SIZE" "$BW" <<'PY'
import json, statistics, sys
out, rounds, size, bw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
col = {k: [] for k in ('sent', 'fwd', 'drops', 'cpu', 'p50', 'p99')}
for r in range(1, rounds + 1):
    f = json.load(open(f"{out}/flood{r}.json"))
    rt = json.load(open(f"{out}/router{r}.json"))
    up = rt['paths'][0]['up']
    col['sent'].append(f['pps'])
    col['fwd'].append(up['packets_out'] / f['seconds'])
    col['drops'].append(sum(up['drops'].values()))
    col['cpu'].append(rt['pacer']['router_cpu_s'] * 1e6 / max(1, up['packets_out']))
    col['p50'].append(up['delay_error_us']['p50']); col['p99'].append(up['delay_error_us']['p99'])
def rng(v, fmt):
    m = fmt.format(statistics.median(v))
    return m if len(v) == 1 else f"{m} [{fmt.format(min(v))}–{fmt.format(max(v))}]"
print("| path | packet | sent pps (udp_flood) | forwarded pps (router) | router drops | router CPU µs/packet | delay error p50 µs | p99 µs |")
print("|---|---|---|---|---|---|---|---|")
print(f"| {bw} | {size} B | {rng(col['sent'], '{:,.0f}')} | {rng(col['fwd'], '{:,.0f}')} | {rng(col['drops'], '{:,.0f}')} | {rng(col['cpu'], '{:.2f}')} | {rng(col['p50'], '{:.1f}')} | {rng(col['p99'], '{:.1f}')} |")
print(f"\nraw results: {out}")
PY
