#!/usr/bin/env bash
# What the access log costs, measured as a duel: two Capstans, one without a log and one with,
# share one CPU core and are saturated at the same time, each by its own wrk. The core's time is
# split evenly between the two, so the logging switch's req/s over the other's is the other's
# CPU time per request over its own: the log's cost, with whatever the shared machine does to
# the core during the round felt by both alike. Both are started afresh every round, so that a
# process's own luck (where its memory landed) is spread over the rounds too. `off:off-b` duels
# two equal switches: the noise floor.
#
# Four nginx back-ends and the two wrk run on the other CPUs. Needs 2 CPUs at least, wrk,
# nginx and taskset.
#
#   bash benches/log_duel.sh                      # 10 rounds × 3 s for each pair
#   CAPSTAN=/path/to/capstan ROUNDS=20 bash benches/log_duel.sh
#   PAIRS="off:combined combined:off" bash benches/log_duel.sh
#
# Pairs are A:B of off, off-b, combined, json; each row of $OUT/duels.tsv is one round: pair,
# round, A's and B's requests, B's over A's, A's and B's CPU ns per request (all their threads).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

ROUNDS=${ROUNDS:-10}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-3}
CONNECTIONS=${CONNECTIONS:-50}
PAIRS=${PAIRS:-"off:off-b off:combined combined:off"}
OUT=${OUT:-${CARGO_TARGET_DIR:-target}/bench-log-duel}

need_packages nginx wrk
cpus=$(nproc)
if [ "$cpus" -lt 2 ]; then
  echo "needs 2 CPUs at least (the switches on one, the load on the others)" >&2
  exit 1
fi
proxy_cpu=$((cpus - 1))
load_cpus="0-$((cpus - 2))"

capstan=$(capstan_binary)
mkdir -p "$OUT"
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

nginx_backends_conf "$work" 19101
mkdir -p "$work/logs"
capstan_config() {
  local name=$1 log=$2
  { echo "$log"; capstan_nodes 19101; } > "$work/$name.toml"
}
capstan_config off ""
capstan_config off-b ""
capstan_config combined "$(printf '[access_log]\npath = "%s"\nformat = "combined"' "$work/logs/combined.log")"
capstan_config json "$(printf '[access_log]\npath = "%s"\nformat = "json"' "$work/logs/json.log")"

taskset -c "$load_cpus" nginx -c "$work/backends.conf" & pids+=($!)
for p in 19101 19102 19103 19104; do wait_port $p; done

# CPU time (ns) every thread of process $1 has run.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d", s}'; }

duel() {
  local pair=$1 round=$2 a=${1%%:*} b=${1##*:} i port
  local -a duel_pids=() ports=(18290 18292) before=() wrk_pids=()
  for i in 0 1; do
    local name=$a
    [ "$i" = 1 ] && name=$b
    { echo "listen = [\"127.0.0.1:${ports[$i]}\"]"; cat "$work/$name.toml"; } > "$work/duel-$i.toml"
    RUST_LOG=warn taskset -c "$proxy_cpu" "$capstan" serve --threads 1 --config "$work/duel-$i.toml" &
    duel_pids[$i]=$!
  done
  for i in 0 1; do wait_port "${ports[$i]}"; done
  for i in 0 1; do
    taskset -c "$load_cpus" wrk -t1 -c"$CONNECTIONS" -d1s "http://127.0.0.1:${ports[$i]}/1k.html" >/dev/null &
    wrk_pids[$i]=$!
  done
  wait "${wrk_pids[@]}"
  for i in 0 1; do before[$i]=$(cpu_ns "${duel_pids[$i]}"); done
  for i in 0 1; do
    taskset -c "$load_cpus" wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" \
      "http://127.0.0.1:${ports[$i]}/1k.html" > "$work/wrk-$i.out" &
    wrk_pids[$i]=$!
  done
  wait "${wrk_pids[@]}"
  local -a requests=() cpu=()
  for i in 0 1; do
    requests[$i]=$(awk '/requests in/ {print $1}' "$work/wrk-$i.out")
    cpu[$i]=$(( ($(cpu_ns "${duel_pids[$i]}") - before[i]) / requests[i] ))
  done
  kill "${duel_pids[@]}"
  wait "${duel_pids[@]}" 2>/dev/null || true
  rm -f "$work"/logs/*
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$pair" "$round" "${requests[0]}" "${requests[1]}" \
    "$(python3 -c "print(round(${requests[1]} / ${requests[0]}, 4))")" "${cpu[0]}" "${cpu[1]}"
}

: > "$OUT/duels.tsv"
for pair in $PAIRS; do
  for name in ${pair%%:*} ${pair##*:}; do
    [ -f "$work/$name.toml" ] || { echo "unknown configuration $name (off, off-b, combined, json)" >&2; exit 1; }
  done
  for round in $(seq "$ROUNDS"); do
    echo "pair $pair  round $round/$ROUNDS" >&2
    duel "$pair" "$round" >> "$OUT/duels.tsv"
  done
done

python3 - "$OUT/duels.tsv" "$ROUNDS" "$SECONDS_PER_RUN" <<'PY'
import math, statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().splitlines() if line]
print(f"\n{sys.argv[2]} rounds × {sys.argv[3]} s per pair, both switches on one core at once\n")
print("| A:B | rounds | B's req/s ÷ A's, median (range) | geometric mean | B's CPU/req ÷ A's, median |")
print("|---|---:|---:|---:|---:|")
for pair in dict.fromkeys(r[0] for r in rows):
    ratios = sorted(float(r[4]) for r in rows if r[0] == pair)
    cpu = sorted(int(r[6]) / int(r[5]) for r in rows if r[0] == pair)
    gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"| {pair} | {len(ratios)} | {statistics.median(ratios):.3f} "
          f"({ratios[0]:.3f}–{ratios[-1]:.3f}) | {gm:.3f} | {statistics.median(cpu):.3f} |")
PY
echo "raw rounds: $OUT/duels.tsv"
