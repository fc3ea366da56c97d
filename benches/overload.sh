#!/usr/bin/env bash
# Overload (issue 12): two emulated 1-core nodes (`capstan origin --resources emulated --cores 1`)
# behind the switch; /cgi-bin/cpu_med.cgi (100 ms of CPU each, so the cluster's capacity is
# 2 / 0.1 s = 20 requests/s) offered open loop at RATE (default 100/s, 5× capacity) for
# SECONDS_PER_RUN, with a cheap static request (/file5k.html at STATIC_RATE/s) sent beside it.
#
# Modes, each on fresh nodes and a fresh switch:
#   off       the switch as it was before issue 12: no admission limit, no outlier detection,
#             first-byte timeout = upstream timeout = 30 s
#   adaptive  the defaults: adaptive per-node limit, queue 100 / 1 s, outlier detection,
#             first-byte timeout 15 s
#   fixed     admission.limit = FIXED_LIMIT (default 2) per node, other defaults
#   (QUEUE_TIMEOUT=5s sets [admission] queue_timeout in the adaptive mode)
#
#   bash benches/overload.sh
#   ROUNDS=2 MODES="off adaptive fixed" bash benches/overload.sh
#
# Prints one row per run: cpu_med.cgi's 2xx (all, and per second inside the run's window:
# goodput), its 5xx, requests shed by admission (503 + Retry-After; static ones included, and a
# request that timed out in one node's queue and was then served by the other counts there
# too), node timeouts (each a 504 unless retried), the static request's answers and p50/p99,
# the switch's RSS (start → max, 2 samples/s) and the most requests in flight at the nodes.
# Raw results land in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

RATE=${RATE:-100}
STATIC_RATE=${STATIC_RATE:-20}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
ROUNDS=${ROUNDS:-1}
MODES=${MODES:-"off adaptive"}
FIXED_LIMIT=${FIXED_LIMIT:-2}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET_DIR/bench-overload}

capstan=$(capstan_binary)
mkdir -p "$OUT"
work=$(mktemp -d)
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT

switch_config() {
  local mode=$1
  cat <<CONF
listen = ["127.0.0.1:18180"]
admin = "127.0.0.1:18190"
debug_headers = true
CONF
  case $mode in
    off) printf '[admission]\nlimit = "off"\n[outlier]\nconsecutive_failures = 0\n[timeouts]\nfirst_byte = "30s"\n' ;;
    adaptive) [[ -n ${QUEUE_TIMEOUT:-} ]] && printf '[admission]\nqueue_timeout = "%s"\n' "$QUEUE_TIMEOUT" ;;
    fixed) printf '[admission]\nlimit = %s\n' "$FIXED_LIMIT" ;;
    *) echo "unknown mode $mode (off, adaptive, fixed)" >&2; exit 1 ;;
  esac
  printf '[[node]]\nname = "o1"\naddress = "127.0.0.1:19101"\n'
  printf '[[node]]\nname = "o2"\naddress = "127.0.0.1:19102"\n'
}

# Samples the switch's RSS (kB) and the requests in flight at the nodes, twice a second.
sample() {
  local pid=$1 file=$2
  while kill -0 "$pid" 2>/dev/null; do
    local rss active
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    active=$(curl -s --max-time 1 http://127.0.0.1:18190/metrics \
      | awk '/^capstan_node_active_requests/ {s += $2} END {print s + 0}')
    echo "$rss $active" >> "$file"
    sleep 0.5
  done
}

run() {
  local mode=$1 round=$2
  local dir=$OUT/$mode-$round
  rm -rf "$dir" && mkdir -p "$dir"
  for port in 19101 19102; do
    "$capstan" origin --listen "127.0.0.1:$port" --name "o${port: -1}" --resources emulated \
      --cores 1 --threads 1 > "$dir/origin-$port.log" 2>&1 &
    pids+=($!)
  done
  wait_port 19101; wait_port 19102
  switch_config "$mode" > "$dir/switch.toml"
  "$capstan" serve --config "$dir/switch.toml" --threads 1 > "$dir/switch.log" 2>&1 &
  local switch=$!
  pids+=($switch)
  wait_port 18180
  sample "$switch" "$dir/samples.txt" &
  pids+=($!)
  # Past capacity by design: the failed requests are the finding, not a failed run.
  local common=(--duration "${SECONDS_PER_RUN}s" --timeout 40s --drain 40s --max-error-rate 1 -q)
  "$capstan" bench http://127.0.0.1:18180/cgi-bin/cpu_med.cgi --rate "$RATE" "${common[@]}" \
    --json "$dir/cpu_med.json" &
  local heavy=$!
  "$capstan" bench http://127.0.0.1:18180/file5k.html --rate "$STATIC_RATE" "${common[@]}" \
    --json "$dir/static.json"
  wait "$heavy"
  curl -s http://127.0.0.1:18190/metrics > "$dir/metrics.txt"
  curl -s http://127.0.0.1:18190/status > "$dir/status.json"
  stop_all
  python3 - "$dir" "$mode" "$SECONDS_PER_RUN" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, re, sys
d, mode, seconds, load = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
heavy = json.load(open(f"{d}/cpu_med.json"))
static = json.load(open(f"{d}/static.json"))
metrics = open(f"{d}/metrics.txt").read()
def total(name, label=""):
    pattern = rf"^{name}\{{[^}}]*{label}[^}}]*\}} (\S+)$"
    return int(sum(float(v) for v in re.findall(pattern, metrics, re.M)))
full = total("capstan_requests_shed_total", 'reason="queue-full"')
late = total("capstan_requests_shed_total", 'reason="queue-timeout"')
timeouts = total("capstan_node_errors_total", 'kind="timeout"')
samples = [list(map(int, l.split())) for l in open(f"{d}/samples.txt") if l.strip()]
rss = [s[0] for s in samples] or [0]
active = [s[1] for s in samples] or [0]
ok = heavy["status"].get("2xx", 0)
in_window = sum(t["completed"] - t["errors"] for t in heavy["timeline"] if t["t"] < seconds)
transport = sum(v for k, v in heavy["errors"].items() if not k.startswith("http_"))
lat = static["latency_ms"]["corrected"]
print(f"| {mode} | {heavy['offered']} | {ok} | {in_window / seconds:.1f} | {heavy['status'].get('5xx', 0)} "
      f"| {full} / {late} | {timeouts} | {transport} | {static['status'].get('2xx', 0)}/{static['offered']} "
      f"| {lat['p50']:.1f} / {lat['p99']:.1f} | {rss[0] / 1024:.0f} → {max(rss) / 1024:.0f} "
      f"| {max(active)} | {load} |")
PY
}

echo "RATE=$RATE/s of cpu_med.cgi for ${SECONDS_PER_RUN}s (capacity 20/s), static $STATIC_RATE/s"
echo
echo "| mode | cpu_med offered | cpu_med 2xx | goodput /s | cpu_med 5xx | shed: queue full / timeout | node timeouts (504) | transport errors | static 2xx | static p50 / p99 ms | switch RSS MB | max in flight at nodes | load |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    run "$mode" "$round"
  done
done
