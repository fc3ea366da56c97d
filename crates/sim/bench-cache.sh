#!/usr/bin/env bash
# Replay speed of `capstan sim cache` for crates/sim/BENCHMARKS.md. Usage:
#   bash crates/sim/bench-cache.sh [BIN]     (BIN default target/release/capstan; RUNS=5;
#                                            OBJECTS=100000 REQUESTS=5000000 ALPHA=0.8)
# Each run replays one generated trace through every policy at the six default cache sizes on
# ONE thread (--jobs 1) and reads each policy's requests per CPU-second (thread CPU time, all six
# sizes) from the JSON; the table gives per policy the median, min and max over the runs and the
# median ratio to LRU measured in the same run. Also prints each run's wall and user+sys CPU
# seconds (/usr/bin/time) and the 1-minute load average just before it.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release/capstan}
runs=${RUNS:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(sim cache --zipf "${ALPHA:-0.8}" --objects "${OBJECTS:-100000}" --requests "${REQUESTS:-5000000}"
  --seed 1 --jobs 1 -q)
echo "command: capstan ${args[*]} --json FILE"
for i in $(seq "$runs"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%e %U %S" -o "$out/t$i" "$bin" "${args[@]}" --json "$out/r$i.json" > /dev/null 2> "$out/e$i"
  read -r wall user sys < "$out/t$i"
  printf 'run %d: wall %6.2f s  cpu %6.2f s  load %s\n' "$i" "$wall" "$(echo "$user + $sys" | bc)" "$load"
done
python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
docs = [json.load(open(f"{out}/r{i}.json")) for i in range(1, runs + 1)]
rates = {}
for d in docs:
    lru = next(p["requests_per_s"] for p in d["policies"] if p["policy"] == "lru")
    for p in d["policies"]:
        rates.setdefault(p["policy"], []).append((p["requests_per_s"] / 1e6, p["requests_per_s"] / lru))
print("| policy | M requests/CPU-s, median | min – max | × LRU (same run), median |")
print("|---|---|---|---|")
for name, xs in rates.items():
    r = [x[0] for x in xs]
    q = [x[1] for x in xs]
    print(f"| {name} | {statistics.median(r):.2f} | {min(r):.2f} – {max(r):.2f} | {statistics.median(q):.2f} |")
PY
