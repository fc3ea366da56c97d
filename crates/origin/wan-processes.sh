#!/bin/sh
# Banga & Druschel §5.5 in miniature: a process-per-connection origin (Apache prefork: 152
# processes, each taking memory from the file cache) under the same offered load, direct and
# through WAN paths of growing RTT. Prints per RTT: throughput, latency, processes in use and
# waiting (sampled from the load report while the load runs), the smallest cache capacity seen,
# and the cache hit ratio of the run. Needs root (capstan bench --wan).
#
#   sudo crates/origin/wan-processes.sh [CAPSTAN] [RATE] [SECONDS]
#
# Scale: the paper's cache (97 MB) held its 80 MB working set and a process took 500 KB of it
# (0.5 %); here the cache holds the whole CAP tree of 1000 files (4.8 MB) and a process takes
# 25 KB, the same 0.5 %.
set -eu
CAPSTAN=${1:-target/release/capstan}
RATE=${2:-300}
SECS=${3:-20}
PORT=18480
REPORT=18481
OUT=$(mktemp -d)
trap 'kill $ORIGIN 2>/dev/null; rm -rf "$OUT"' EXIT

"$CAPSTAN" origin --listen 0.0.0.0:$PORT --report-listen 127.0.0.1:$REPORT --threads 1 \
  --tree cap --files 1000 --cache-fraction 1.0 \
  --process-limit 152 --process-memory 25KB >/dev/null 2>&1 &
ORIGIN=$!
until curl -sf -o /dev/null http://127.0.0.1:$REPORT/_capstan/load; do sleep 0.1; done
load() { curl -s http://127.0.0.1:$REPORT/_capstan/load; }

# Warm the cache: every file once (cold misses run at disk speed).
"$CAPSTAN" bench http://127.0.0.1:$PORT/ --tree cap --files 1000 --rate 60 --duration 25s -q

printf '%-6s %9s %9s %9s %8s %8s %8s %10s %7s\n' rtt_ms done_rps p50_ms p99_ms proc_avg proc_max waiting cache_min hit
for RTT in 0 50 100 200; do
  before=$(load)
  if [ "$RTT" = 0 ]; then WAN=""; else WAN="--wan rtt=${RTT}ms"; fi
  # shellcheck disable=SC2086
  "$CAPSTAN" bench http://127.0.0.1:$PORT/ --tree cap --files 1000 --rate "$RATE" \
    --duration "${SECS}s" --connect-timeout 3s --timeout 20s -q --json "$OUT/r.json" $WAN &
  BENCH=$!
  : >"$OUT/samples"
  while kill -0 $BENCH 2>/dev/null; do
    load | jq -c '[.processes.in_use, .processes.waiting, .cache.capacity_bytes]' >>"$OUT/samples"
    sleep 0.5
  done
  wait $BENCH
  after=$(load)
  # Let the node drain (connections of a removed client namespace end by the processes' own
  # timeouts) before the next RTT.
  until load | jq -e '.processes.in_use == 0 and .processes.waiting == 0' >/dev/null; do sleep 0.5; done
  hits=$(printf '%s\n%s\n' "$before" "$after" | jq -s '(.[1].cache.hits - .[0].cache.hits) / ((.[1].cache.hits + .[1].cache.misses) - (.[0].cache.hits + .[0].cache.misses))')
  # Samples while the load runs (skip the first second and the drain).
  stats=$(sed '1,2d' "$OUT/samples" | head -n $((SECS * 2 - 2)) | jq -s '[(map(.[0]) | add / length), (map(.[0]) | max), (map(.[1]) | max), (map(.[2]) | min)]')
  jq -r --argjson s "$stats" --arg rtt "$RTT" --argjson hit "$hits" \
    '[$rtt, .completed_rps, .latency_ms.corrected.p50, .latency_ms.corrected.p99, ($s[0]*10|round/10), $s[1], $s[2], $s[3], ($hit*1000|round/1000)] | @tsv' "$OUT/r.json" |
    awk -F'\t' '{ printf "%-6s %9s %9s %9s %8s %8s %8s %10s %7s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
done
