#!/usr/bin/env bash
# User-space instructions per request through Capstan (and HAProxy or nginx beside it), counted by
# callgrind: deterministic to about 0.1 % between runs, where wall-clock time on this shared
# machine varies by ±15 %. Kernel time is not counted: check syscalls per request with strace
# when a change touches I/O.
#
# Four nginx back-ends serve a 1 KB file; the proxy runs under valgrind with instrumentation
# off, takes 2,000 warm-up requests (h2load, 10 connections), then counts N more.
#
#   bash benches/instructions.sh                     # h1, h2 through Capstan and HAProxy
#   MODES=h2 N=5000 bash benches/instructions.sh
#   PROXIES=capstan CAPSTAN=/path/to/capstan bash benches/instructions.sh
#   PROXIES="capstan nginx" MODES=h2 bash benches/instructions.sh   # nginx 1.22, one process
#   ACCESS_LOG=combined PROXIES=capstan MODES=h1 bash benches/instructions.sh   # Capstan with an
#                                    # access log file (common, combined or json): the log's cost
#   CACHE=1 PROXIES=capstan bash benches/instructions.sh   # Capstan with its cache on: after the
#                                    # first request every one is a hit (the file's Last-Modified is
#                                    # years old, so it is heuristically fresh): the hit path's cost
#   DISCOVERY=1 PROXIES=capstan bash benches/instructions.sh   # the nodes from a [[discovery]]
#                                    # file (looked at every 200 ms) instead of [[node]]s
#   PROFILES=/tmp/prof bash benches/instructions.sh  # keeps each count's callgrind output there
#                                    # (PROXY-MODE[-LOG].N.out, for callgrind_annotate)
#
# Modes: h1 (plain HTTP/1.1 keep-alive), h1tls (HTTP/1.1 over TLS 1.3), h2 (HTTP/2 over TLS,
# 10 streams per connection). Every proxy uses one worker thread (nginx: no master process, so
# valgrind sees the worker; it starts slowly under valgrind, minutes for three modes) and the
# committed ECDSA test certificate.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

N=${N:-5000}
read -r -a modes <<< "${MODES:-h1 h2}"
read -r -a proxies <<< "${PROXIES:-capstan haproxy}"
for tool in valgrind callgrind_control h2load nginx; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install valgrind nghttp2-client nginx)" >&2; exit 1; }
done
if [[ " ${proxies[*]} " == *" haproxy "* ]] && ! command -v haproxy >/dev/null; then
  echo "needs haproxy (apt-get install haproxy), or PROXIES=capstan" >&2; exit 1
fi
CAPSTAN=$(capstan_binary)
pki=$PWD/examples/tls
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT

nginx_backends_conf "$work" 19101
nginx -c "$work/backends.conf" & pids+=($!)
wait_port 19101

cat > "$work/capstan.toml" <<CONF
[[listener]]
address = "127.0.0.1:18450"
[[listener]]
address = "127.0.0.1:18451"
[[listener.certificate]]
cert = "$pki/localhost.pem"
key = "$pki/localhost.key"
[timeouts]
client_idle = "60s"
$(capstan_nodes 19101)
CONF
if [ -n "${DISCOVERY:-}" ]; then
  # The same four nodes from a watched [[discovery]] file instead of [[node]]s: the request
  # path must not pay for discovery (issue 32).
  sed -i '/^\[\[node\]\]$/,$d' "$work/capstan.toml"
  printf '{"nodes": [%s]}\n' "$(for p in 19101 19102 19103 19104; do printf '{"address": "127.0.0.1:%s"}' "$p"; done | sed 's/}{/}, {/g')" > "$work/nodes.json"
  printf '[[discovery]]\nfile = "%s"\ninterval = "200ms"\n' "$work/nodes.json" >> "$work/capstan.toml"
fi
if [ -n "${CACHE:-}" ]; then
  # Heuristic freshness is 10 % of the time since Last-Modified (RFC 9111 §4.2.2): years here.
  touch -d '2020-01-01' "$work/www/1k.html"
  printf '[cache]\nmemory = "64MiB"\n' >> "$work/capstan.toml"
fi
if [ -n "${ACCESS_LOG:-}" ]; then
  printf '[access_log]\npath = "%s"\nformat = "%s"\n' "$work/access.log" "$ACCESS_LOG" >> "$work/capstan.toml"
fi
cat "$pki/localhost.pem" "$pki/localhost.key" > "$work/ecdsa.pem"
cat > "$work/haproxy.cfg" <<CONF
global
  nbthread 1
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 30s
  option http-keep-alive
frontend plain
  bind 127.0.0.1:18452
  default_backend be
frontend tls
  bind 127.0.0.1:18453 ssl crt $work/ecdsa.pem alpn h2,http/1.1
  default_backend be
backend be
  balance roundrobin
  http-reuse always
$(haproxy_servers 19101)
CONF

# nginx in one process (no master), so valgrind sees the worker; the tls.sh proxy's settings.
cat > "$work/nginx.conf" <<CONF
master_process off;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 10000000;
  $(nginx_upstream 19101)
  server {
    listen 127.0.0.1:18454;
    listen 127.0.0.1:18455 ssl http2;
    ssl_certificate $pki/localhost.pem;
    ssl_certificate_key $pki/localhost.key;
    $(nginx_proxy_location)
  }
}
CONF

# count PROXY MODE → instructions per request
count() {
  local proxy=$1 mode=$2 out="$work/callgrind.out" vp plain tls url opts total
  case $proxy in
    capstan) plain=18450; tls=18451
             valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
               "$CAPSTAN" serve --config "$work/capstan.toml" --threads 1 >"$work/vg.log" 2>&1 & ;;
    haproxy) plain=18452; tls=18453
             valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
               haproxy -f "$work/haproxy.cfg" >"$work/vg.log" 2>&1 & ;;
    nginx)   plain=18454; tls=18455
             valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
               nginx -c "$work/nginx.conf" >"$work/vg.log" 2>&1 & ;;
    *) echo "unknown proxy $proxy (capstan, haproxy, nginx)" >&2; exit 1 ;;
  esac
  vp=$!
  wait_port "$plain" 60  # a proxy under valgrind starts slowly
  case $mode in
    h1) url=http://127.0.0.1:$plain/1k.html; opts=(--h1) ;;
    h1tls) url=https://127.0.0.1:$tls/1k.html; opts=(--h1) ;;
    h2) url=https://127.0.0.1:$tls/1k.html; opts=(-m 10) ;;
    *) echo "unknown mode $mode (h1, h1tls, h2)" >&2; exit 1 ;;
  esac
  h2load "${opts[@]}" -n 2000 -c 10 "$url" >/dev/null
  callgrind_control -i on "$vp" >/dev/null 2>&1
  callgrind_control -z "$vp" >/dev/null 2>&1
  h2load "${opts[@]}" -n "$N" -c 10 "$url" | grep -q "$N succeeded" || echo "warning: not every request succeeded" >&2
  callgrind_control -i off "$vp" >/dev/null 2>&1
  callgrind_control -d "$vp" >/dev/null 2>&1
  kill "$vp"; wait "$vp" 2>/dev/null || true
  total=$(cat "$out"* | awk '/^totals:/ {s += $2} END {print s}')
  if [ -n "${PROFILES:-}" ]; then
    mkdir -p "$PROFILES"
    for f in "$out"*; do cp "$f" "$PROFILES/$proxy-$mode${ACCESS_LOG:+-$ACCESS_LOG}${CACHE:+-cache}${f#"$out"}.out"; done
  fi
  rm -f "$out"*
  echo $(( total / N ))
}

echo "| proxy | mode | instructions per request |"
echo "|---|---|---:|"
for mode in "${modes[@]}"; do
  for proxy in "${proxies[@]}"; do
    echo "| $proxy | $mode | $(count "$proxy" "$mode") |"
  done
done
