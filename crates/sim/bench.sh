#!/usr/bin/env bash
# Performance numbers for crates/sim/BENCH-sim.md. Usage:
#   bash crates/sim/bench.sh [BIN] [what...]   (BIN default target/release/capstan;
#                                              what: single matrix scaling; default all three)
# Every measurement prints wall seconds, user+sys CPU seconds (from /usr/bin/time, less
# sensitive than wall time to other work on a shared machine) and the 1-minute load average
# just before it started. Runs are repeated RUNS times (default 3); take medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release/capstan}
shift || true
what=${*:-single matrix scaling}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
timed() { # label, command...
  local l; l=$(load)
  /usr/bin/time -f "%e %U %S" -o "$out/t" "${@:2}" > "$out/log" 2>&1
  read -r wall user sys < "$out/t"
  local ev; ev=$(grep -o '[0-9][0-9]* events' "$out/log" | head -1 | cut -d' ' -f1)
  printf '%-40s wall %7.2f s  cpu %7.2f s  events %10s  M events/cpu-s %5.2f  load %s\n' \
    "$1" "$wall" "$(echo "$user + $sys" | bc)" "$ev" "$(echo "scale=2; $ev / ($user + $sys) / 1000000" | bc)" "$l"
}
for w in $what; do
  case $w in
  single) # events/s on one core
    for i in $(seq "${RUNS:-3}"); do
      timed "transaction cap 8n 200/s 10m" $bin sim transaction --policies cap --nodes 8 --rate 200 \
        --duration 10m --replications 1 --seed 1 --jobs 1 --quiet --out "$out/o"
    done ;;
  matrix) # results.sh's first loop: 6 scenarios x 7 policies x 3 seeds, 2 threads
    for i in $(seq "${RUNS:-3}"); do
      l=$(load)
      /usr/bin/time -f "%e %U %S" -o "$out/t" bash -c '
        for s in publishing-static publishing-dynamic transaction commerce-secure commerce-mixed commerce; do
          '"$bin"' sim "$s" --nodes 8 --rate 200 --duration 10m --replications 3 --seed 1 --quiet --out '"$out"'/m/"$s"
        done' > "$out/log" 2>&1
      read -r wall user sys < "$out/t"
      ev=$(grep -o '[0-9][0-9]* events' "$out/log" | cut -d' ' -f1 | paste -sd+ | bc)
      printf '%-40s wall %7.2f s  cpu %7.2f s  events %10s  M events/cpu-s %5.2f  load %s\n' \
        "matrix 126 runs" "$wall" "$(echo "$user + $sys" | bc)" "$ev" "$(echo "scale=2; $ev / ($user + $sys) / 1000000" | bc)" "$l"
    done ;;
  scaling) # one thread; nodes at 25 clients/s per node, then rate at 8 nodes
    for n in 2 4 8 16 32; do
      timed "transaction cap ${n}n $((25 * n))/s 10m" $bin sim transaction --policies cap --nodes $n \
        --rate $((25 * n)) --duration 10m --replications 1 --seed 1 --jobs 1 --quiet --out "$out/o"
    done
    for r in 100 200 300 400; do
      timed "transaction cap 8n ${r}/s 10m" $bin sim transaction --policies cap --nodes 8 --rate $r \
        --duration 10m --replications 1 --seed 1 --jobs 1 --quiet --out "$out/o"
    done ;;
  esac
done
