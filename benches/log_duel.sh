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
# nginx and taskset. As root, the two switches also share a CPU quota of SWITCH_CPU cores
# (default 0.6; `SWITCH_CPU=` for none): without it, one core of load could not saturate them on
# a 2-core machine, and two equal switches that are not saturated split the requests by chance.
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
SWITCH_CPU=${SWITCH_CPU-0.6}
OUT=${OUT:-${CARGO_TARGET_DIR:-target}/bench-log-duel}

need_packages nginx wrk
duel_cpus switches

capstan=$(capstan_binary)
mkdir -p "$OUT"
work=$(mktemp -d)
pids=()
quota=""
if [ -n "$SWITCH_CPU" ]; then
  quota=$(cpu_quota_group "$SWITCH_CPU")
  [ -n "$quota" ] || echo "note: no CPU quota for the switches (needs root and a cgroup cpu controller)" >&2
fi
limit=${quota:+$SWITCH_CPU}
limit=${limit:-1}
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"
  cpu_quota_remove "$quota"
}
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

duel() {
  local pair=$1 round=$2 a=${1%%:*} b=${1##*:} i port
  local -a duel_pids=() ports=(18290 18292) before=() wrk_pids=()
  for i in 0 1; do
    local name=$a
    [ "$i" = 1 ] && name=$b
    { echo "listen = [\"127.0.0.1:${ports[$i]}\"]"; cat "$work/$name.toml"; } > "$work/duel-$i.toml"
    RUST_LOG=warn taskset -c "$proxy_cpu" "$capstan" serve --threads 1 --config "$work/duel-$i.toml" &
    duel_pids[$i]=$!
    [ -z "$quota" ] || echo "${duel_pids[$i]}" > "$quota"
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
  local -a requests=() cpu=() spent=()
  for i in 0 1; do
    requests[$i]=$(awk '/requests in/ {print $1}' "$work/wrk-$i.out")
    spent[$i]=$(( $(cpu_ns "${duel_pids[$i]}") - before[i] ))
    cpu[$i]=$(( spent[i] / requests[i] ))
  done
  # Saturated switches use all the CPU they may: the quota, or the whole core.
  python3 -c "print(f'  the two switches used {(${spent[0]} + ${spent[1]}) / ($SECONDS_PER_RUN * 1e9):.2f} CPU of $limit')" >&2
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
done
# Every round visits every pair, so that a change in the machine over the run is felt by all.
for round in $(seq "$ROUNDS"); do
  for pair in $PAIRS; do
    echo "pair $pair  round $round/$ROUNDS" >&2
    duel "$pair" "$round" >> "$OUT/duels.tsv"
  done
done

python3 - "$OUT/duels.tsv" "$ROUNDS" "$SECONDS_PER_RUN" "${quota:+$SWITCH_CPU}" <<'PY'
import math, statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().splitlines() if line]
print(f"\n{sys.argv[2]} rounds × {sys.argv[3]} s per pair, both switches on one core at once"
      f"{', sharing a quota of ' + sys.argv[4] + ' CPU' if sys.argv[4] else ''}\n")
print("| A:B | rounds | B's req/s ÷ A's, median (range) | geometric mean | B's CPU/req ÷ A's, median | mean ± s.e. |")
print("|---|---:|---:|---:|---:|---:|")
for pair in dict.fromkeys(r[0] for r in rows):
    ratios = sorted(float(r[4]) for r in rows if r[0] == pair)
    cpu = sorted(int(r[6]) / int(r[5]) for r in rows if r[0] == pair)
    gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
    se = statistics.stdev(cpu) / math.sqrt(len(cpu)) if len(cpu) > 1 else float("nan")
    print(f"| {pair} | {len(ratios)} | {statistics.median(ratios):.3f} "
          f"({ratios[0]:.3f}–{ratios[-1]:.3f}) | {gm:.3f} | {statistics.median(cpu):.3f} "
          f"| {statistics.mean(cpu):.3f} ± {se:.3f} |")
PY
echo "raw rounds: $OUT/duels.tsv"
