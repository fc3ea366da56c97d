#!/usr/bin/env bash
# HTTPS through Capstan and HAProxy, side by side on this machine, in one run.
#
# Four nginx back-ends serve a 1 KB file over plain HTTP. In front of them, each on its own port
# with the same number of worker threads (nginx: worker processes) and the same certificate
# (examples/tls/, ECDSA P-256 and RSA-2048): Capstan, HAProxy 2.6 and nginx 1.22, each
# terminating TLS 1.3 and forwarding HTTP/1.1 over keep-alive connections to the back-ends round
# robin. Every round visits every proxy once per scenario, so the shared
# machine's noise spreads evenly; the table shows medians and ranges over the rounds.
#
#   bash benches/tls.sh                   # 3 rounds × 10 s per cell, 1 worker thread each
#   ROUNDS=5 SECONDS_PER_RUN=15 THREADS=2 bash benches/tls.sh
#   CAPSTAN=/path/to/capstan bash benches/tls.sh    # skip the build
#   PROXIES="capstan-ecdsa nginx-ecdsa" SCENARIOS=h2 bash benches/tls.sh   # a subset
#   CAPSTAN_B=/path/to/other/capstan PROXIES="capstan-ecdsa capstanb-ecdsa haproxy-ecdsa" \
#     SCENARIOS=keep-alive bash benches/tls.sh   # A/B two builds, interleaved in every round
#   python3 benches/paired_ratios.py run1/runs.tsv run2/runs.tsv   # per-round ratios, pooled
#   DUEL="capstan-ecdsa:haproxy-ecdsa capstan-rsa:haproxy-rsa" SCENARIOS=keep-alive \
#     bash benches/tls.sh   # each pair at once on one core under one CPU quota (benches/tls_duel.sh)
#
# Scenarios: keep-alive (wrk, HTTP/1.1 over TLS, persistent connections), handshake (wrk with
# `Connection: close`: a full TLS handshake per request, wrk does not resume sessions) and h2
# (h2load, 10 connections × 10 concurrent streams).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
THREADS=${THREADS:-1}
CONNECTIONS=${CONNECTIONS:-50}
OUT=${OUT:-target/bench-tls}

need() { command -v "$1" >/dev/null 2>&1; }
if ! need haproxy || ! need nginx || ! need wrk || ! need h2load; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy nginx wrk nghttp2-client >/dev/null
  else
    echo "needs haproxy, nginx, wrk and h2load (apt-get install haproxy nginx wrk nghttp2-client)" >&2
    exit 1
  fi
fi

CAPSTAN=$(capstan_binary)
mkdir -p "$OUT/raw"
pki=$PWD/examples/tls
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

nginx_backends_conf "$work" 19101

# One Capstan, one HAProxy and one nginx per key type.
declare -A port=([capstan-ecdsa]=18441 [haproxy-ecdsa]=18442 [capstan-rsa]=18443 [haproxy-rsa]=18444
                 [nginx-ecdsa]=18445 [nginx-rsa]=18446)
[ -z "${CAPSTAN_B:-}" ] || port+=([capstanb-ecdsa]=18447 [capstanb-rsa]=18448)
for kind in ecdsa rsa; do
  base=localhost; [ "$kind" = rsa ] && base=localhost-rsa
  cat "$pki/$base.pem" "$pki/$base.key" > "$work/$kind.pem"  # HAProxy's crt: chain and key
  cat > "$work/capstan-$kind.toml" <<CONF
[[listener]]
address = "127.0.0.1:${port[capstan-$kind]}"
[[listener.certificate]]
cert = "$pki/$base.pem"
key = "$pki/$base.key"
[timeouts]
client_idle = "60s"
$(capstan_nodes 19101)
CONF
  if [ -n "${CAPSTAN_B:-}" ]; then
    sed "s/:${port[capstan-$kind]}\"/:${port[capstanb-$kind]}\"/" "$work/capstan-$kind.toml" > "$work/capstanb-$kind.toml"
  fi
  cat > "$work/haproxy-$kind.cfg" <<CONF
global
  nbthread $THREADS
  maxconn 8000
  ssl-default-bind-options ssl-min-ver TLSv1.2
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:${port[haproxy-$kind]} ssl crt $work/$kind.pem alpn h2,http/1.1
  default_backend be
backend be
  balance roundrobin
  http-reuse always
$(haproxy_servers 19101)
CONF
  cat > "$work/nginx-$kind.conf" <<CONF
worker_processes $THREADS;
daemon off;
pid $work/nginx-$kind.pid;
error_log $work/nginx-$kind.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 10000000;
  $(nginx_upstream 19101)
  server {
    listen 127.0.0.1:${port[nginx-$kind]} ssl http2;
    ssl_certificate $pki/$base.pem;
    ssl_certificate_key $pki/$base.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    $(nginx_proxy_location)
  }
}
CONF
done

nginx -c "$work/backends.conf" & pids+=($!)
for p in 19101 19102 19103 19104; do wait_port $p; done
declare -A proxy_pid
for kind in ecdsa rsa; do
  RUST_LOG=warn "$CAPSTAN" serve --threads "$THREADS" --config "$work/capstan-$kind.toml" &
  proxy_pid[capstan-$kind]=$!
  if [ -n "${CAPSTAN_B:-}" ]; then
    RUST_LOG=warn "$CAPSTAN_B" serve --threads "$THREADS" --config "$work/capstanb-$kind.toml" &
    proxy_pid[capstanb-$kind]=$!
  fi
  haproxy -f "$work/haproxy-$kind.cfg" &
  proxy_pid[haproxy-$kind]=$!
  nginx -c "$work/nginx-$kind.conf" &
  proxy_pid[nginx-$kind]=$!
done
pids+=("${proxy_pid[@]}")
for p in "${port[@]}"; do wait_port "$p"; done
for proxy in "${!port[@]}"; do  # both answer over HTTPS, HTTP/2 too
  curl -sSf --cacert "$pki/ca.pem" --http2 -o /dev/null "https://localhost:${port[$proxy]}/1k.html"
done

read -r -a proxies <<< "${PROXIES:-capstan-ecdsa haproxy-ecdsa nginx-ecdsa capstan-rsa haproxy-rsa nginx-rsa}"
read -r -a scenarios <<< "${SCENARIOS:-keep-alive handshake h2}"
for proxy in "${proxies[@]}"; do
  [ -n "${port[$proxy]:-}" ] || { echo "PROXIES: unknown proxy $proxy (one of ${!port[*]})" >&2; exit 1; }
done
clk_tck=$(getconf CLK_TCK)
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "capstan: $CAPSTAN${CAPSTAN_B:+; capstanb: $CAPSTAN_B}"
  echo "haproxy: $(haproxy -v | head -1)"
  echo "nginx: $(nginx -v 2>&1 | head -1)"
  echo "wrk: $(wrk -v 2>&1 | head -1)"; echo "h2load: $(h2load --version | head -1)"
} > "$OUT/run-info.txt"

if [ -n "${DUEL:-}" ]; then
  # shellcheck source=benches/tls_duel.sh
  source benches/tls_duel.sh
fi

results="$OUT/runs.tsv"
printf 'round\tscenario\tproxy\trps\tlatency_ms\tp99_ms\terrors\tcpu_us_per_req\n' > "$results"
run_cell() { # ROUND SCENARIO PROXY
  local round=$1 sname=$2 pname=$3 url="https://localhost:${port[$3]}/1k.html" cpu_before cpu_after
  echo "round $round/$ROUNDS  $sname  $pname" >&2
  cpu_before=$(cpu_ticks "${proxy_pid[$pname]}")
  case $sname in
    keep-alive) wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" --latency "$url" > "$work/out" ;;
    handshake) wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" --latency -H "Connection: close" "$url" > "$work/out" ;;
    h2) h2load -t1 -c10 -m10 -D"$SECONDS_PER_RUN" "$url" > "$work/out" ;;
  esac
  cpu_after=$(cpu_ticks "${proxy_pid[$pname]}")
  cp "$work/out" "$OUT/raw/$round-$sname-$pname.txt"  # status codes, h2load's failed/errored
  python3 - "$work/out" "$round" "$sname" "$pname" "$cpu_before" "$cpu_after" "$clk_tck" >> "$results" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
SCALE = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}
def ms(v):
    m = re.match(r"([\d.]+)(us|ms|s|m|h)$", v)
    if not m:
        sys.exit(f"cannot read latency {v!r} in:\n{text}")
    return float(m.group(1)) * SCALE[m.group(2)]
def find(pattern):
    m = re.search(pattern, text, re.MULTILINE)
    if not m:
        sys.exit(f"output lacks {pattern!r}:\n{text}")
    return m.group(1)
if "h2load" in text or "finished in" in text:
    rps = float(find(r"finished in [\d.]+s, ([\d.]+) req/s"))
    requests = int(find(r"requests: \d+ total, \d+ started, (\d+) done"))
    # h2load counts an errored stream (reset, connection lost) as failed too; failed also holds
    # completed streams without a 2xx/3xx status.
    errors = int(find(r"requests: .* (\d+) failed"))
    lat = ms(find(r"time for request:\s+\S+\s+\S+\s+(\S+)"))  # mean
    p99 = float("nan")
else:
    rps = float(find(r"Requests/sec:\s+([\d.]+)"))
    lat = ms(find(r"^\s+50%\s+(\S+)"))
    p99 = ms(find(r"^\s+99%\s+(\S+)"))
    errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = (sum(int(x) for x in errs.groups()) if errs else 0) + (int(non2xx.group(1)) if non2xx else 0)
    requests = int(find(r"(\d+) requests in"))
cpu_us = (float(sys.argv[6]) - float(sys.argv[5])) / float(sys.argv[7]) * 1e6 / max(requests, 1)
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{rps:.0f}\t{lat:.3f}\t{p99:.3f}\t{errors}\t{cpu_us:.2f}")
PY
}

for round in $(seq "$ROUNDS"); do
  for scenario in "${scenarios[@]}"; do
    for proxy in "${proxies[@]}"; do
      run_cell "$round" "$scenario" "$proxy"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/run-info.txt"

python3 - "$results" "$ROUNDS" "$SECONDS_PER_RUN" "$THREADS" "$CONNECTIONS" <<'PY' | tee "$OUT/summary.md"
import csv, math, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
rounds, secs, threads, conns = sys.argv[2:6]
print(f"{rounds} rounds × {secs} s, {threads} worker thread(s) per proxy, TLS 1.3; keep-alive and handshake: "
      f"wrk -t1 -c{conns} (latency p50/p99); h2: h2load -c10 -m10 (latency = mean); medians (ranges)\n")
print("| scenario | proxy | req/s | ratio to HAProxy (same key) | latency ms | p99 ms | proxy CPU µs/req | errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
def cell(values, fmt):
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "–"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"
for scenario in dict.fromkeys(r["scenario"] for r in rows):
    med = {}
    for proxy in dict.fromkeys(r["proxy"] for r in rows):
        c = [r for r in rows if r["scenario"] == scenario and r["proxy"] == proxy]
        med[proxy] = {k: [float(r[k]) for r in c] for k in ("rps", "latency_ms", "p99_ms", "cpu_us_per_req")}
        med[proxy]["errors"] = sum(int(r["errors"]) for r in c)
    for proxy, m in med.items():
        peer = med.get("haproxy-" + proxy.split("-")[1])
        ratio = statistics.median(m["rps"]) / statistics.median(peer["rps"]) if peer else float("nan")
        print(f"| {scenario} | {proxy} | {cell(m['rps'], '{:.0f}')} | {ratio:.2f} | {cell(m['latency_ms'], '{:.2f}')} "
              f"| {cell(m['p99_ms'], '{:.2f}')} | {cell(m['cpu_us_per_req'], '{:.1f}')} | {m['errors']} |")
PY
echo "raw runs: $results and $OUT/raw/; machine: $OUT/run-info.txt" >&2
