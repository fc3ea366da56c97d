#!/usr/bin/env bash
# A cache hit through a peer of the tier against a local hit (issue 33: "a hit through a peer
# costs ≤ 2 × a local hit's CPU at the asking switch, and the owner's work is a local hit's").
#
# One `capstan origin` (real resources, bodies in memory), a lone switch S with a cache, and a
# tier of two switches A and B sharing one cache (`[tier]`, local copies off, gossip off so only
# the hop is measured). A key B owns is found by asking A for ≈1 KB objects until A's /status
# counts a hop. Then, ROUNDS times, alternating: the key at S (local hits) and the key at A
# (every request a hop to B, answered from B's cache), each by `capstan bench` open loop at RATE
# requests/s on keep-alive connections for SECONDS. CPU time of each switch (every thread, from
# schedstat) over its run ÷ responses = µs per request; the ratios A ÷ S (the asking switch) and
# B ÷ S (the owner) per round, then medians and ranges.
#
#   bash benches/tier_hop.sh
#   ROUNDS=5 SECONDS_RUN=8 RATE=3000 bash benches/tier_hop.sh
#   CAPSTAN=/path/to/capstan bash benches/tier_hop.sh   # another build, no cargo
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

ROUNDS=${ROUNDS:-3}
SECONDS_RUN=${SECONDS_RUN:-8}
RATE=${RATE:-2000}
CONNECTIONS=${CONNECTIONS:-8}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET_DIR/bench-tier-hop}
ORIGIN=127.0.0.1:18590
S=127.0.3.60:18500; A=127.0.3.61:18500; B=127.0.3.62:18500
capstan=$(capstan_binary)
mkdir -p "$OUT"

trap stop_pids EXIT

wait_http() { # URL
  for _ in $(seq 200); do curl -s -o /dev/null --max-time 1 "$1" && return 0; sleep 0.05; done
  echo "nothing answers at $1" >&2; exit 1
}

"$capstan" origin --listen "$ORIGIN" --name origin --tree cap --seed 1 --files 200 \
  --resources real --data-dir "$OUT/origin-data" --threads 1 > "$OUT/origin.log" 2>&1 &
pids+=($!)
"$capstan" origin --tree cap --seed 1 --files 200 --print-filelist > "$OUT/filelist"

config() { # file [tier]   (each switch is started with its own --listen; a tier's file names a peer)
  {
    printf 'listen = ["%s"]\n[policy]\nname = "round-robin"\n' "$([ -n "${2:-}" ] && echo "$A" || echo "$S")"
    printf '[[node]]\nname = "origin"\naddress = "%s"\n' "$ORIGIN"
    printf '[cache]\nmemory = "64MiB"\n'
    if [ -n "${2:-}" ]; then
      printf '[tier]\npeers = ["%s", "%s"]\nlocal_copy_after = 0\ngossip_period = "off"\n' "$A" "$B"
    fi
  } > "$1"
}
config "$OUT/alone.toml"
config "$OUT/tier.toml" tier
start_switch() { # config listen admin-ip → pid in $started
  "$capstan" serve --config "$1" --listen "$2" --admin "${3}:9900" > "$OUT/switch-${2%%:*}.log" 2>&1 &
  started=$!
  pids+=("$started")
}
start_switch "$OUT/alone.toml" "$S" 127.0.3.60; pid_s=$started
start_switch "$OUT/tier.toml" "$A" 127.0.3.61; pid_a=$started
start_switch "$OUT/tier.toml" "$B" 127.0.3.62; pid_b=$started
wait_http "http://$ORIGIN/"
for x in $S $A $B; do wait_http "http://${x%%:*}:9900/status"; done

hops() { curl -s "http://127.0.3.61:9900/status" | python3 -c 'import json,sys
print(sum(p["hops_sent"] for p in json.load(sys.stdin)["tier"]["peers"]))'; }
# ≈1 KB objects, nearest first; the first that A sends to B is the key.
key=""
while read -r path; do
  before=$(hops)
  curl -s -o /dev/null "http://$A$path"
  if [ "$(hops)" -gt "$before" ]; then key=$path; break; fi
done < <(awk '$1 ~ /^\// { s = $NF; sub(/^#/, "", s); d = s - 1024; if (d < 0) d = -d; print d, $1 }' \
           "$OUT/filelist" | sort -n | head -40 | awk '{print $2}')
[ -n "$key" ] || { echo "no key among the 40 objects nearest 1 KB is owned by B" >&2; exit 1; }
for _ in 1 2 3; do curl -s -o /dev/null "http://$S$key"; curl -s -o /dev/null "http://$A$key"; done
echo "key $key: $(curl -s -D - -o /dev/null "http://$A$key" | grep -i '^cache-status' | tr -d '\r')" >&2

run() { # target → responses
  "$capstan" bench "http://$1$key" --rate "$RATE" -k -c "$CONNECTIONS" -d "${SECONDS_RUN}s" -q \
    --json "$OUT/run.json" > "$OUT/run.out" 2>&1
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["completed"], r.get("errors_total", 0))' "$OUT/run.json"
}
printf 'round\tlocal_us\tasking_us\towner_us\tasking_ratio\towner_ratio\terrors\n' > "$OUT/hop.tsv"
for round in $(seq "$ROUNDS"); do
  s0=$(cpu_ns "$pid_s"); read -r n_s e_s < <(run "$S"); s1=$(cpu_ns "$pid_s")
  a0=$(cpu_ns "$pid_a"); b0=$(cpu_ns "$pid_b"); read -r n_a e_a < <(run "$A")
  a1=$(cpu_ns "$pid_a"); b1=$(cpu_ns "$pid_b")
  python3 - "$round" "$((s1 - s0))" "$n_s" "$((a1 - a0))" "$((b1 - b0))" "$n_a" "$((e_s + e_a))" >> "$OUT/hop.tsv" <<'PY'
import sys
rnd, s, ns, a, b, na, err = sys.argv[1], *map(int, sys.argv[2:])
local, asking, owner = s / ns / 1e3, a / na / 1e3, b / na / 1e3
print(f"{rnd}\t{local:.2f}\t{asking:.2f}\t{owner:.2f}\t{asking / local:.3f}\t{owner / local:.3f}\t{err}")
PY
  tail -n 1 "$OUT/hop.tsv" >&2
done
python3 - "$OUT/hop.tsv" "$RATE" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def col(k): return [float(r[k]) for r in rows]
def m(k): v = col(k); return f"median {statistics.median(v):.2f} (range {min(v):.2f}-{max(v):.2f})"
print(f"CPU µs per request at {sys.argv[2]} requests/s, {len(rows)} rounds:")
print(f"  local hit (lone switch):          {m('local_us')}")
print(f"  hit through a peer, asking switch: {m('asking_us')}")
print(f"  hit through a peer, owner:         {m('owner_us')}")
print(f"  asking ÷ local: {m('asking_ratio')}   (goal ≤ 2)")
print(f"  owner ÷ local:  {m('owner_ratio')}   (goal: a local hit's, ≈ 1)")
print(f"  errors: {sum(int(r['errors']) for r in rows)}")
PY
