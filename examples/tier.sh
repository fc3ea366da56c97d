#!/usr/bin/env bash
# Starts a tier of three switches sharing one cache (examples/tier.toml) — on 127.0.0.2:8080,
# 127.0.0.3:8080 and 127.0.0.4:8080, admin on port 9900 of each — in front of four emulated
# `capstan origin` nodes on 127.0.0.1:9001-9004; asks keys at every switch and shows that the
# whole tier made one node request per key, then purges one key at one switch and shows that
# every peer acknowledged it.
#
#   bash examples/tier.sh            # run, show, stop
#   KEEP=1 bash examples/tier.sh     # leave the tier running (Ctrl-C stops it)
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked --quiet -p capstan-cli
capstan=target/release/capstan
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "tier.sh needs $tool" >&2; exit 1; }
done

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1:$2" >&2
  exit 1
}

for i in 1 2 3 4; do
  "$capstan" origin --listen "127.0.0.1:900$i" --name "node$i" --tree webstone --seed "$i" &
  pids+=($!)
done
for i in 1 2 3 4; do wait_port 127.0.0.1 "900$i"; done

switches=(127.0.0.2 127.0.0.3 127.0.0.4)
for ip in "${switches[@]}"; do
  "$capstan" serve --config examples/tier.toml --listen "$ip:8080" --admin "$ip:9900" \
    --debug-headers &
  pids+=($!)
done
for ip in "${switches[@]}"; do wait_port "$ip" 8080; wait_port "$ip" 9900; done

# Node requests so far, summed over the four nodes (each origin's /status counts what it served).
node_requests() {
  local total=0
  for i in 1 2 3 4; do
    n=$(curl -s "http://127.0.0.1:900$i/_capstan/load" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("served", 0))')
    total=$((total + n))
  done
  echo "$total"
}

# Clients reach every switch by one site name (DNS round robin): the cache key holds the host.
site="Host: www.example.com"
keys=(/file500.html /file5k.html /file50k.html /file500k.html)
for key in "${keys[@]}"; do
  before=$(node_requests)
  owners=()
  for ip in "${switches[@]}"; do
    owner=$(curl -s -o /dev/null -D - -H "$site" "http://$ip:8080$key" | tr -d '\r' \
      | sed -n 's/^[Xx]-[Cc]apstan-[Tt]ier-[Oo]wner: //p')
    owners+=("${owner:-itself}")
  done
  after=$(node_requests)
  echo "$key asked at ${switches[*]} (owner as each saw it: ${owners[*]}): $((after - before)) node request(s)"
done

echo "== PURGE ${keys[0]} at ${switches[0]}"
curl -s -X PURGE -H "$site" "http://${switches[0]}:8080${keys[0]}"
echo "== the tier as ${switches[0]} sees it"
curl -s "http://${switches[0]}:9900/status" | python3 -c '
import json, sys
t = json.load(sys.stdin)["tier"]
for p in t["peers"]:
    print("  %-16s %-5s hops sent %3d, served %3d" % (p["address"], p["state"], p["hops_sent"], p["hops_served"]))'

if [ "${KEEP:-0}" = 1 ]; then
  echo "tier running: http://127.0.0.2:8080/ … http://127.0.0.4:8080/, status pages on port 9900; Ctrl-C stops"
  wait
fi
