#!/usr/bin/env bash
# Capstan as a reverse proxy, side by side with HAProxy and nginx, on this machine, in one run.
#
# Four nginx back-ends serve a 1 KB file and an empty file. In front of them, each on its own
# port and with the same number of worker threads: Capstan (round-robin and cap), HAProxy
# (roundrobin) and nginx (proxy_pass, upstream keep-alive). wrk drives each in turn; every round
# visits every proxy once, so noise from the shared machine spreads evenly; the table shows
# medians over the rounds and each proxy's ratio to HAProxy.
#
#   bash benches/proxy.sh                 # 3 rounds × 10 s per cell, 1 worker thread each
#   ROUNDS=5 SECONDS_PER_RUN=15 THREADS=2 CONNECTIONS=100 bash benches/proxy.sh
#
# Scenarios: keep-alive (1 KB, persistent client connections), close (1 KB, a new client
# connection per request) and switch capacity (the Jones thesis's test: an empty file, a new
# connection per request — connections/s).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
THREADS=${THREADS:-1}
CONNECTIONS=${CONNECTIONS:-50}
OUT=${OUT:-target/bench-proxy}

need() { command -v "$1" >/dev/null 2>&1; }
if ! need haproxy || ! need nginx || ! need wrk; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy nginx wrk >/dev/null
  else
    echo "needs haproxy, nginx and wrk (apt-get install haproxy nginx wrk)" >&2
    exit 1
  fi
fi

capstan=$(capstan_binary)
mkdir -p "$OUT"
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

nginx_backends_conf "$work" 19001
: > "$work/www/empty.html"

cat > "$work/haproxy.cfg" <<CONF
global
  nbthread $THREADS
  maxconn 8000
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:18081
  default_backend be
backend be
  balance roundrobin
  http-reuse always
$(haproxy_servers 19001)
CONF

cat > "$work/nginx-proxy.conf" <<CONF
worker_processes $THREADS;
daemon off;
pid $work/proxy.pid;
error_log $work/proxy.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 10000000;
  $(nginx_upstream 19001)
  server {
    listen 127.0.0.1:18082;
    $(nginx_proxy_location)
  }
}
CONF

nginx -c "$work/backends.conf" & pids+=($!)
for p in 19001 19002 19003 19004; do wait_port $p; done
nodes=(--node 127.0.0.1:19001 --node 127.0.0.1:19002 --node 127.0.0.1:19003 --node 127.0.0.1:19004)
declare -A proxy_pid
RUST_LOG=warn "$capstan" serve --threads "$THREADS" --listen 127.0.0.1:18080 --policy round-robin "${nodes[@]}" &
proxy_pid[capstan-rr]=$!
RUST_LOG=warn "$capstan" serve --threads "$THREADS" --listen 127.0.0.1:18083 --policy cap "${nodes[@]}" &
proxy_pid[capstan-cap]=$!
haproxy -f "$work/haproxy.cfg" &
proxy_pid[haproxy]=$!
nginx -c "$work/nginx-proxy.conf" &
proxy_pid[nginx]=$!
pids+=("${proxy_pid[@]}")
for p in 18080 18081 18082 18083; do wait_port $p; done

proxies=("capstan-rr:18080" "capstan-cap:18083" "haproxy:18081" "nginx:18082")
clk_tck=$(getconf CLK_TCK)
scenarios=("keep-alive:/1k.html:" "close:/1k.html:Connection: close" "switch-capacity:/empty.html:Connection: close")

results="$OUT/runs.tsv"
printf 'round\tscenario\tproxy\trps\tp50_ms\tp99_ms\terrors\tcpu_us_per_req\n' > "$results"
for round in $(seq "$ROUNDS"); do
  for scenario in "${scenarios[@]}"; do
    IFS=: read -r sname path header <<<"$scenario"
    for proxy in "${proxies[@]}"; do
      pname=${proxy%%:*}; port=${proxy##*:}
      args=(-t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" --latency)
      [ -n "$header" ] && args+=(-H "$header")
      echo "round $round/$ROUNDS  $sname  $pname" >&2
      cpu_before=$(cpu_ticks "${proxy_pid[$pname]}")
      wrk "${args[@]}" "http://127.0.0.1:$port$path" > "$work/wrk.out"
      cpu_after=$(cpu_ticks "${proxy_pid[$pname]}")
      wrk_row "$work/wrk.out" "$round" "$sname" "$pname" "$cpu_before" "$cpu_after" "$clk_tck" >> "$results"
    done
  done
done

python3 - "$results" "$ROUNDS" "$SECONDS_PER_RUN" "$THREADS" "$CONNECTIONS" <<'PY' | tee "$OUT/summary.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
rounds, secs, threads, conns = sys.argv[2:6]
print(f"{rounds} rounds × {secs} s, {threads} worker thread(s) per proxy, wrk -t1 -c{conns}; medians\n")
print("| scenario | proxy | req/s | ratio to HAProxy | p50 ms | p99 ms | proxy CPU µs/req | errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for scenario in dict.fromkeys(r["scenario"] for r in rows):
    med = {}
    for proxy in dict.fromkeys(r["proxy"] for r in rows):
        cell = [r for r in rows if r["scenario"] == scenario and r["proxy"] == proxy]
        med[proxy] = {k: statistics.median(float(r[k]) for r in cell) for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req")}
        med[proxy]["errors"] = sum(int(r["errors"]) for r in cell)
    base = med["haproxy"]["rps"]
    for proxy, m in med.items():
        print(f"| {scenario} | {proxy} | {m['rps']:.0f} | {m['rps'] / base:.2f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['cpu_us_per_req']:.1f} | {m['errors']} |")
PY
echo "raw runs: $results" >&2
