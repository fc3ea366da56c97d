#!/usr/bin/env bash
# Chaos (issue 12): node faults under steady load, Capstan side by side with HAProxy.
#
# Four emulated 1-core nodes (`capstan origin --resources emulated --cores 1`), round robin,
# open-loop load of RATE requests/s (keep-alive) drawn equally from a static file and a short CGI
# (/cgi-bin/cpu_light.cgi, so requests are in flight at the nodes when the fault strikes). At
# FAULT_AT seconds one node (o2) is hit, at RECOVER_AT it comes back:
#   kill   SIGKILL, then a fresh process on the same port (a crash and a restart)
#   stop   SIGSTOP, then SIGCONT (a hung node: accepts, never answers)
# Both proxies get the same knobs: active checks of /file5k.html every 500 ms (timeout 400 ms,
# fall 3, rise 2), a 2 s first-byte timeout, idempotent requests retried on another node after a
# connect failure, an empty response or a first-byte timeout. HAProxy: `option redispatch`,
# `retries 3`, `retry-on conn-failure empty-response response-timeout`, `check inter 500ms`.
#
#   bash benches/chaos.sh
#   ROUNDS=3 SCENARIOS="kill stop" PROXIES="capstan haproxy" bash benches/chaos.sh
#   ADMISSION=off PROXIES=capstan bash benches/chaos.sh    # Capstan without admission control
#   QUEUE_TIMEOUT=5s PROXIES=capstan bash benches/chaos.sh  # another [admission] queue_timeout
#
# Prints a row per run: client-visible errors (non-2xx answers + transport errors, of the
# requests offered), the worst per-second p99 inside the fault window, the time from the fault to
# the node being out of rotation and from the recovery to it being back (polled every 100 ms
# from /status or HAProxy's stats CSV), and the load average. Raw results land in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

RATE=${RATE:-200}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-30}
FAULT_AT=${FAULT_AT:-8}
RECOVER_AT=${RECOVER_AT:-18}
ROUNDS=${ROUNDS:-1}
# ADMISSION=off runs Capstan without admission control (`[admission] limit = "off"`: no per-node
# limit, queue or shedding), like-for-like with this script's HAProxy, which has no per-server
# maxconn; the default keeps Capstan's defaults.
ADMISSION=${ADMISSION:-default}
SCENARIOS=${SCENARIOS:-"kill stop"}
PROXIES=${PROXIES:-"capstan haproxy"}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET_DIR/bench-chaos}
PORTS=(19201 19202 19203 19204)
LISTEN=18280
ADMIN=18290

capstan=$(capstan_binary)
if [[ $PROXIES == *haproxy* ]] && ! command -v haproxy >/dev/null; then
  echo "note: haproxy is not installed (apt-get install haproxy); running Capstan alone" >&2
  PROXIES=capstan
fi
mkdir -p "$OUT"
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT

start_node() { # port dir → pid in $node_pid
  "$capstan" origin --listen "127.0.0.1:$1" --name "o${1: -1}" --resources emulated \
    --cores 1 --threads 1 >> "$2/origin-$1.log" 2>&1 &
  node_pid=$!
}

capstan_config() {
  cat <<CONF
listen = ["127.0.0.1:$LISTEN"]
admin = "127.0.0.1:$ADMIN"
[policy]
name = "round-robin"
[health]
check_path = "/file5k.html"
check_interval = "500ms"
check_timeout = "400ms"
fall = 3
rise = 2
[timeouts]
first_byte = "2s"
upstream = "10s"
CONF
  if [[ $ADMISSION == off ]]; then
    printf '[admission]\nlimit = "off"\n'
  elif [[ -n ${QUEUE_TIMEOUT:-} ]]; then
    printf '[admission]\nqueue_timeout = "%s"\n' "$QUEUE_TIMEOUT"
  fi
  for port in "${PORTS[@]}"; do
    printf '[[node]]\nname = "o%s"\naddress = "127.0.0.1:%s"\n' "${port: -1}" "$port"
  done
}

haproxy_config() {
  cat <<CONF
global
  maxconn 4000
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 2s
  timeout check 400ms
  retries 3
  option redispatch 1
  retry-on conn-failure empty-response response-timeout
frontend fe
  bind 127.0.0.1:$LISTEN
  default_backend be
backend be
  balance roundrobin
  option httpchk GET /file5k.html
  http-reuse safe
CONF
  for port in "${PORTS[@]}"; do
    echo "  server o${port: -1} 127.0.0.1:$port check inter 500ms fall 3 rise 2"
  done
  printf 'listen stats\n  bind 127.0.0.1:%s\n  stats enable\n  stats uri /stats\n' "$ADMIN"
}

# Prints "out" or "in" for node o2, as the proxy sees it now.
node_state() {
  local proxy=$1
  if [[ $proxy == capstan ]]; then
    curl -s --max-time 1 "http://127.0.0.1:$ADMIN/status" | python3 -c '
import json, sys
try:
    nodes = json.load(sys.stdin)["nodes"]
except Exception:
    print("unknown"); sys.exit()
print(next(("in" if n["available"] else "out") for n in nodes if n["name"] == "o2"))' 2>/dev/null
  else
    curl -s --max-time 1 "http://127.0.0.1:$ADMIN/stats;csv" \
      | awk -F, '$1 == "be" && $2 == "o2" { print ($18 ~ /^UP/ ? "in" : "out") }'
  fi
}

# Polls the node's state every 100 ms, writing "seconds-since-start state" lines.
watch_node() {
  local proxy=$1 file=$2 start=$3
  while true; do
    local now
    now=$(date +%s.%N)
    echo "$(echo "$now - $start" | bc) $(node_state "$proxy")" >> "$file"
    sleep 0.1
  done
}

run() {
  local proxy=$1 scenario=$2 round=$3
  local dir=$OUT/$proxy-$scenario-$round
  rm -rf "$dir" && mkdir -p "$dir"
  local victim=
  for port in "${PORTS[@]}"; do
    start_node "$port" "$dir"
    pids+=("$node_pid")
    [[ $port == 19202 ]] && victim=$node_pid
  done
  for port in "${PORTS[@]}"; do wait_port "$port"; done
  if [[ $proxy == capstan ]]; then
    capstan_config > "$dir/capstan.toml"
    "$capstan" serve --config "$dir/capstan.toml" --threads 1 > "$dir/proxy.log" 2>&1 &
  else
    haproxy_config > "$dir/haproxy.cfg"
    haproxy -db -f "$dir/haproxy.cfg" > "$dir/proxy.log" 2>&1 &
  fi
  pids+=($!)
  wait_port "$LISTEN"
  printf '/file5k.html\n/cgi-bin/cpu_light.cgi\n' > "$dir/urls.txt"
  # Let the first health checks pass before the load starts.
  for _ in $(seq 50); do [[ $(node_state "$proxy") == in ]] && break; sleep 0.1; done
  local start
  start=$(date +%s.%N)
  "$capstan" bench "http://127.0.0.1:$LISTEN/" --urls "$dir/urls.txt" --rate "$RATE" --keepalive \
    --connections 64 --duration "${SECONDS_PER_RUN}s" --timeout 15s --drain 15s --max-error-rate 1 -q \
    --json "$dir/bench.json" &
  local bench=$!
  watch_node "$proxy" "$dir/states.txt" "$start" &
  local watcher=$!
  sleep "$FAULT_AT"
  case $scenario in
    kill) kill -KILL "$victim" ;;
    stop) kill -STOP "$victim" ;;
  esac
  sleep $((RECOVER_AT - FAULT_AT))
  case $scenario in
    kill) start_node 19202 "$dir"; pids+=("$node_pid") ;;
    stop) kill -CONT "$victim" ;;
  esac
  wait "$bench"
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  if [[ $proxy == capstan ]]; then
    curl -s "http://127.0.0.1:$ADMIN/metrics" > "$dir/metrics.txt"
  else
    curl -s "http://127.0.0.1:$ADMIN/stats;csv" > "$dir/stats.csv"
  fi
  stop_all
  python3 - "$dir" "$proxy" "$scenario" "$FAULT_AT" "$RECOVER_AT" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
d, proxy, scenario, fault, recover, load = sys.argv[1:7]
fault, recover = float(fault), float(recover)
b = json.load(open(f"{d}/bench.json"))
ok = b["status"].get("2xx", 0)
bad_status = sum(v for k, v in b["status"].items() if k != "2xx")
import os, re
notes = ""
if os.path.exists(f"{d}/metrics.txt"):
    m = open(f"{d}/metrics.txt").read()
    def total(name, label=""):
        pattern = rf"^{name}(?:\{{[^}}]*{label}[^}}]*\}})? (\S+)$"
        return int(sum(float(v) for v in re.findall(pattern, m, re.M)))
    kinds = sorted(set(re.findall(r'^capstan_node_errors_total\{[^}]*kind="([^"]+)"', m, re.M)))
    counts = {k: total("capstan_node_errors_total", 'kind="' + k + '"') for k in kinds}
    errs = " ".join(f"{k}={v}" for k, v in counts.items())
    notes = (f"shed={total('capstan_requests_shed_total')} retries={total('capstan_node_retries_total')} "
             f"node errors: {errs}")
elif os.path.exists(f"{d}/stats.csv"):
    rows = [l.split(",") for l in open(f"{d}/stats.csv") if l and not l.startswith("#")]
    head = open(f"{d}/stats.csv").readline().lstrip("# ").strip().split(",")
    col = {n: i for i, n in enumerate(head)}
    be = next((r for r in rows if r[0] == "be" and r[1] == "BACKEND"), None)
    if be:
        notes = f"retries={be[col['wretr']]} redispatches={be[col['wredis']]} 5xx={be[col['hrsp_5xx']]}"
transport = sum(v for k, v in b["errors"].items() if not k.startswith("http_"))
window = [s for s in b["timeline"] if fault <= s["t"] < recover + 2]
p99 = max((s["p99_ms"] for s in window), default=0.0)
states = [l.split() for l in open(f"{d}/states.txt") if len(l.split()) == 2]
out_at = next((float(t) for t, s in states if float(t) >= fault and s == "out"), None)
back_at = next((float(t) for t, s in states if float(t) >= recover and s == "in"), None)
fmt = lambda v: f"{v:.1f}" if v is not None else "never"
print(f"| {proxy} | {scenario} | {b['offered']} | {ok} | {bad_status} | {transport} "
      f"| {p99:.0f} | {fmt(out_at - fault if out_at else None)} "
      f"| {fmt(back_at - recover if back_at else None)} | {notes} | {load} |")
PY
}

echo "RATE=$RATE/s for ${SECONDS_PER_RUN}s; o2 faulted at ${FAULT_AT}s, recovered at ${RECOVER_AT}s"
echo
echo "| proxy | fault | offered | 2xx | non-2xx | transport errors | worst p99/s in fault ms | out after s | back after s | proxy's counts | load |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"
for round in $(seq "$ROUNDS"); do
  for scenario in $SCENARIOS; do
    for proxy in $PROXIES; do
      run "$proxy" "$scenario" "$round"
    done
  done
done
