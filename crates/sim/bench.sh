#!/usr/bin/env bash
# Performance numbers for crates/sim/BENCHMARKS.md. Usage:
#   bash crates/sim/bench.sh [BIN] [what...]   (BIN default target/release/capstan;
#                                              what: single matrix scaling scale; default the
#                                              first three)
# scale: 1,000 nodes at 100 k requests/s (`commerce`, SCALE_SECS simulated seconds, default 10):
# one replication on one thread (cap, then lard, least-connections and weighted-round-robin,
# the policies that look at every node), then N=nproc replications on N threads; medians and
# ranges over RUNS runs of wall time, CPU time, events/CPU-s and wall/CPU s per simulated second.
# Every measurement prints wall seconds, user+sys CPU seconds (from /usr/bin/time, less
# sensitive than wall time to other work on a shared machine) and the 1-minute load average
# just before it started. Runs are repeated RUNS times (default 3); take medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release/capstan}
shift || true
what=${*:-single matrix scaling}
rows=
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
timed() { # label, command...
  local l; l=$(load)
  /usr/bin/time -f "%e %U %S" -o "$out/t" "${@:2}" > "$out/log" 2>&1
  read -r wall user sys < "$out/t"
  local ev; ev=$(grep -o '[0-9][0-9]* events' "$out/log" | head -1 | cut -d' ' -f1)
  printf '%-40s wall %7.2f s  cpu %7.2f s  events %10s  M events/cpu-s %5.2f  load %s\n' \
    "$1" "$wall" "$(echo "$user + $sys" | bc)" "$ev" "$(echo "scale=2; $ev / ($user + $sys) / 1000000" | bc)" "$l" \
    | tee -a "$out/rows"
}
summary() { # label prefix, simulated seconds per run: medians and ranges of the matching rows
  grep -F -- "$1" "$out/rows" | awk -v label="$1" -v secs="$2" '
    function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    { n++; w[n] = $(NF - 11); c[n] = $(NF - 8); e[n] = $(NF - 2); ev[n] = $(NF - 5); l[n] = $NF
      ew[n] = ev[n] / w[n] / 1e6; ws[n] = w[n] / secs; cs[n] = c[n] / secs }
    END { if (!n) exit
      for (i = 1; i <= n; i++) { W[i] = w[i]; C[i] = c[i]; E[i] = e[i]; EW[i] = ew[i]; WS[i] = ws[i]; CS[i] = cs[i]; L[i] = l[i] }
      printf "%s: %d runs, median (min-max): wall %.2f s (%.2f-%.2f), cpu %.2f s (%.2f-%.2f), M events/cpu-s %.2f (%.2f-%.2f), M events/wall-s %.2f (%.2f-%.2f), wall s per simulated s %.3f (%.3f-%.3f), cpu s per simulated s %.3f (%.3f-%.3f), load %.2f (%.2f-%.2f)\n",
        label, n, med(W, n), wmin(w, n), wmax(w, n), med(C, n), wmin(c, n), wmax(c, n), med(E, n), wmin(e, n), wmax(e, n),
        med(EW, n), wmin(ew, n), wmax(ew, n), med(WS, n), wmin(ws, n), wmax(ws, n), med(CS, n), wmin(cs, n), wmax(cs, n), med(L, n), wmin(l, n), wmax(l, n) }
    function wmin(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
    function wmax(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }'
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
  scale) # 1,000 nodes at 100 k requests/s: one replication on one core, then N in parallel
    secs=${SCALE_SECS:-10}
    n=$(nproc)
    sim=("$bin" sim commerce --nodes 1000 --request-rate 100k --duration "${secs}s" --warmup 1s
      --seed 1 --quiet --out "$out/o")
    for i in $(seq "${RUNS:-3}"); do
      for p in cap lard least-connections weighted-round-robin; do
        timed "scale1 $p 1000n 100k/s ${secs}s x1 j1" "${sim[@]}" --policies $p --replications 1 --jobs 1
      done
      timed "scaleN cap 1000n 100k/s ${secs}s x$n j$n" "${sim[@]}" --policies cap --replications "$n" --jobs "$n"
    done
    for p in cap lard least-connections weighted-round-robin; do
      summary "scale1 $p " "$secs"
    done
    summary "scaleN cap " "$((secs * n))" ;;
  esac
done
