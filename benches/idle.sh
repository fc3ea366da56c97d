#!/usr/bin/env bash
# Idle connections (issue 12): what N client connections that hold still cost the proxy, Capstan
# beside HAProxy in front of the same node, same run.
#   silent     connect and send nothing (a flood of idle sockets)
#   keepalive  one GET answered on a keep-alive connection, then nothing (browsers' idle pools)
#   slowloris  half a request head, then one header line every 5 s
#   none       no connections held: the probe's baseline
# For each: the proxy's RSS before and with the N connections held (VmRSS, after 10 s), the
# increase per connection, how many of them the proxy has accepted (from /proc/PID/fd), and a probe
# client's latency (capstan bench, 50 requests/s for 5 s) while they are held.
#
#   bash benches/idle.sh
#   N=10000 MODES="silent keepalive" PROXIES="capstan haproxy" bash benches/idle.sh
#   CAPSTAN=/path/to/older/capstan bash benches/idle.sh   # measure another build, no cargo (CAPSTAN_BIN too)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

N=${N:-5000}
HOLD=${HOLD:-10}
MODES=${MODES:-"silent keepalive slowloris"}
PROXIES=${PROXIES:-"capstan haproxy"}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET_DIR/bench-idle}
NODE=19301
LISTEN=18380

CAPSTAN=${CAPSTAN:-${CAPSTAN_BIN:-}}
capstan=$(capstan_binary)
if [[ $PROXIES == *haproxy* ]] && ! command -v haproxy >/dev/null; then
  echo "note: haproxy is not installed (apt-get install haproxy); running Capstan alone" >&2
  PROXIES=capstan
fi
ulimit -n "$(ulimit -Hn)"   # the holder and the proxy each need N descriptors
mkdir -p "$OUT"
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT

rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
# (Connections close while find walks the table; a vanished entry is not a failure.)
sockets() { { find "/proc/$1/fd" -lname 'socket:*' 2>/dev/null || true; } | wc -l; }

start_proxy() { # proxy dir → pid in $proxy_pid
  if [[ $1 == capstan ]]; then
    printf 'listen = ["127.0.0.1:%s"]\n[limits]\nmax_connections = 100000\n[[node]]\naddress = "127.0.0.1:%s"\n' \
      "$LISTEN" "$NODE" > "$2/capstan.toml"
    "$capstan" serve --config "$2/capstan.toml" --threads 1 > "$2/proxy.log" 2>&1 &
  else
    # maxconn: HAProxy wants 2 descriptors per connection; 9900 fits the usual hard limit of
    # 20000 (ulimit -Hn), so hold N ≤ 9000 against it.
    cat > "$2/haproxy.cfg" <<CONF
global
  maxconn 9900
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 30s
  timeout http-request 60s
  timeout http-keep-alive 60s
frontend fe
  bind 127.0.0.1:$LISTEN
  default_backend be
backend be
  server n1 127.0.0.1:$NODE
CONF
    haproxy -db -f "$2/haproxy.cfg" > "$2/proxy.log" 2>&1 &
  fi
  proxy_pid=$!
}

# Holds N connections in MODE until killed; prints "ready" once all are open.
hold() {
  exec python3 - "$LISTEN" "$1" "$2" <<'PY'
import socket, sys, time
port, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if mode == "none":
    n = 0
conns = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    if mode == "keepalive":
        s.sendall(b"GET /file500.html HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
        while len(body) < length:
            body += s.recv(65536)
    elif mode == "slowloris":
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    conns.append(s)
print("ready", flush=True)
while True:
    time.sleep(5)
    if mode == "slowloris":
        for s in conns:
            try:
                s.sendall(b"X-a: b\r\n")
            except OSError:
                pass
PY
}

run() {
  local proxy=$1 mode=$2
  local dir=$OUT/$proxy-$mode
  rm -rf "$dir" && mkdir -p "$dir"
  "$capstan" origin --listen "127.0.0.1:$NODE" --threads 1 > "$dir/origin.log" 2>&1 &
  pids+=($!)
  wait_port "$NODE"
  start_proxy "$proxy" "$dir"
  pids+=("$proxy_pid")
  wait_port "$LISTEN"
  "$capstan" bench "http://127.0.0.1:$LISTEN/file500.html" --rate 200 --duration 2s -q > /dev/null
  sleep 1
  local before
  before=$(rss_kb "$proxy_pid")
  hold "$N" "$mode" > "$dir/hold.out" &
  local holder=$!
  for _ in $(seq 600); do grep -q ready "$dir/hold.out" 2>/dev/null && break; sleep 0.1; done
  sleep "$HOLD"
  local with held
  with=$(rss_kb "$proxy_pid")
  held=$(sockets "$proxy_pid")
  "$capstan" bench "http://127.0.0.1:$LISTEN/file500.html" --rate 50 --duration 5s -q \
    --json "$dir/probe.json" > /dev/null
  kill "$holder"; wait "$holder" 2>/dev/null || true
  stop_all
  python3 - "$dir" "$proxy" "$mode" "$N" "$before" "$with" "$held" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
d, proxy, mode, n, before, with_, held, load = sys.argv[1:9]
n, before, with_ = int(n), int(before), int(with_)
if mode == "none":
    n = 0
per_conn = f"{(with_ - before) / n:.2f}" if n else "-"
probe = json.load(open(f"{d}/probe.json"))
lat = probe["latency_ms"]["corrected"]
print(f"| {proxy} | {mode} | {n} | {before / 1024:.1f} | {with_ / 1024:.1f} "
      f"| {per_conn} | {held} | {probe['status'].get('2xx', 0)}/{probe['offered']} "
      f"| {lat['p50']:.2f} / {lat['p99']:.2f} | {load} |")
PY
}

echo "N=$N connections held ${HOLD}s"
echo
echo "| proxy | mode | N | RSS before MB | RSS held MB | KB per connection | sockets open | probe 2xx | probe p50 / p99 ms | load |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for mode in $MODES; do
  for proxy in $PROXIES; do
    run "$proxy" "$mode"
  done
done
