#!/usr/bin/env bash
# Starts an example cluster — four emulated `capstan origin` nodes on 127.0.0.1:9001-9004 and the
# switch on 127.0.0.1:8080 (admin 127.0.0.1:9900) — sends a small request mix through it once per
# policy, and prints where each class of request went.
#
#   bash examples/cluster.sh                 # every policy, then stop
#   bash examples/cluster.sh cap lard        # just these policies
#   KEEP=1 bash examples/cluster.sh cap      # leave the cluster running (Ctrl-C stops it)
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked --quiet -p capstan-cli
capstan=target/release/capstan
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "cluster.sh needs $tool" >&2; exit 1; }
done

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  exit 1
}

for i in 1 2 3 4; do
  "$capstan" origin --listen "127.0.0.1:900$i" --name "node$i" --tree webstone --seed "$i" &
  pids+=($!)
done
for i in 1 2 3 4; do wait_port "900$i"; done

policies=("$@")
if [ ${#policies[@]} -eq 0 ]; then
  mapfile -t policies < <("$capstan" serve --help | sed -n 's/.*possible values: \(.*\)]/\1/p' | tr -d ' ' | tr ',' '\n')
fi

mix=()
for _ in $(seq 6); do
  mix+=(/file500.html /file5k.html /file50k.html /file5k.html /cgi-bin/cpu_light.cgi
        /cgi-bin/cpu_med.cgi "/cgi-bin/disk_load.cgi?file=file5k.html" /secure/file5k.html)
done

for policy in "${policies[@]}"; do
  "$capstan" serve --listen 127.0.0.1:8080 --admin 127.0.0.1:9900 --debug-headers \
    --policy "$policy" \
    --node node1=127.0.0.1:9001 --node node2=127.0.0.1:9002 \
    --node node3=127.0.0.1:9003 --node node4=127.0.0.1:9004 &
  switch=$!
  pids+=($switch)
  wait_port 8080
  printf '%s\n' "${mix[@]}" | xargs -P 8 -I{} curl -s -o /dev/null "http://127.0.0.1:8080{}"
  echo "== $policy: requests placed per node and class"
  curl -s http://127.0.0.1:9900/status | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("  %-6s %6s %9s  %s" % ("node", "served", "p99 ms", "  ".join("%8s" % c for c in s["classes"])))
for n in s["nodes"]:
    print("  %-6s %6d %9.1f  %s" % (n["name"], n["served"], n["latency_ms"]["p99"],
          "  ".join("%8d" % n["classes"][c] for c in s["classes"])))'
  if [ "${KEEP:-0}" = 1 ]; then
    echo "cluster running: http://127.0.0.1:8080/ (switch), http://127.0.0.1:9900/ (status page); Ctrl-C stops"
    wait "$switch"
  fi
  kill -TERM "$switch"; wait "$switch" || true
done
