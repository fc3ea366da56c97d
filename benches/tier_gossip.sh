#!/usr/bin/env bash
# The tier's gossip cost (issue 33): PEERS switch processes (16) in one tier, each with NODES
# (1,000) nodes, idle (no requests, no health checks: all they do is gossip), once with
# `gossip_period = "100ms"` and once with `"off"`. For each switch the CPU time it used over
# SECONDS (30) after a WARMUP (5 s) is read from /proc (schedstat: every thread), as % of one core;
# the cost of gossip is the on-minus-off difference of the medians. A round sends every node's
# counts to every other peer only every 10th time (and in a run's first 3); in between only the
# counts that changed, so an idle tier's round is one small datagram per peer. The goal is ≤ 1 %
# of a core per switch at 1,000 nodes and 16 peers.
#
#   bash benches/tier_gossip.sh
#   PEERS=16 NODES=1000 SECONDS_RUN=30 bash benches/tier_gossip.sh
#   CAPSTAN=/path/to/capstan bash benches/tier_gossip.sh   # another build, no cargo
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

PEERS=${PEERS:-16}
NODES=${NODES:-1000}
SECONDS_RUN=${SECONDS_RUN:-30}
WARMUP=${WARMUP:-5}
PERIODS=${PERIODS:-"100ms off"}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET_DIR/bench-tier-gossip}
capstan=$(capstan_binary)
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)"

trap stop_pids EXIT

listener() { echo "127.0.3.$((10 + $1)):8080"; }
admin() { echo "127.0.3.$((10 + $1)):9900"; }

# One config for every switch: NODES nodes nobody asks (addresses on 127.0.4.0/22 that nothing
# listens on; no health checks, so they are never contacted), and the tier.
write_config() { # period → file
  local file=$OUT/tier-$1.toml i peers=""
  for i in $(seq 0 $((PEERS - 1))); do peers+="\"$(listener "$i")\", "; done
  {
    echo "listen = [\"$(listener 0)\"]"
    echo "admin = \"$(admin 0)\""
    printf '[policy]\nname = "least-connections"\n'
    for i in $(seq 0 $((NODES - 1))); do
      printf '[[node]]\naddress = "127.0.%d.%d:9"\n' $((4 + i / 250)) $((1 + i % 250))
    done
    printf '[tier]\npeers = [%s]\ngossip_period = "%s"\n' "${peers%, }" "$1"
  } > "$file"
  echo "$file"
}

# Waits until switch $1's /status says it hears every other peer's gossip (or, with gossip off,
# until it answers at all).
wait_heard() { # index period
  local url="http://$(admin "$1")/status" deadline=$((SECONDS + 30))
  while (( SECONDS < deadline )); do
    if body=$(curl -s --max-time 1 "$url"); then
      [[ $2 == off ]] && return 0
      heard=$(python3 -c 'import json,sys
t=json.load(sys.stdin).get("tier",{})
print(sum(1 for p in t.get("peers",[]) if p.get("gossip_reports",0) > 0))' <<<"$body" 2>/dev/null || echo 0)
      (( heard >= PEERS - 1 )) && return 0
    fi
    sleep 0.2
  done
  echo "switch $1 did not hear its $((PEERS - 1)) peers within 30 s (/status: $url)" >&2
  return 1
}

printf 'period\tswitch\tcpu_pct_of_core\n' > "$OUT/cpu.tsv"
for period in $PERIODS; do
  config=$(write_config "$period")
  "$capstan" check "$config" > /dev/null
  for i in $(seq 0 $((PEERS - 1))); do
    "$capstan" serve --config "$config" --listen "$(listener "$i")" --admin "$(admin "$i")" \
      > "$OUT/switch-$period-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq 0 $((PEERS - 1))); do wait_heard "$i" "$period"; done
  curl -s "http://$(admin 0)/status" > "$OUT/status-$period.json"
  sleep "$WARMUP"
  before=(); for pid in "${pids[@]}"; do before+=("$(cpu_ns "$pid")"); done
  start=$(date +%s%N)
  sleep "$SECONDS_RUN"
  end=$(date +%s%N)
  for i in "${!pids[@]}"; do
    used=$(( $(cpu_ns "${pids[$i]}") - before[i] ))
    python3 -c "print('$period\t$i\t%.3f' % (100 * $used / ($end - $start)))" >> "$OUT/cpu.tsv"
  done
  stop_pids
done

python3 - "$OUT/cpu.tsv" "$PEERS" "$NODES" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by = {}
for r in rows:
    by.setdefault(r["period"], []).append(float(r["cpu_pct_of_core"]))
print(f"{sys.argv[2]} switches, {sys.argv[3]} nodes each, idle: CPU per switch, % of one core")
for period, v in by.items():
    print(f"  gossip {period:>6}: median {statistics.median(v):.3f}  range {min(v):.3f}-{max(v):.3f}")
if "off" in by and len(by) > 1:
    off = statistics.median(by["off"])
    for period, v in by.items():
        if period != "off":
            print(f"  gossip {period} costs {statistics.median(v) - off:.3f} % of a core per switch (median on − median off)")
PY
