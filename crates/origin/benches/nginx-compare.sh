#!/usr/bin/env bash
# Real-mode origin vs nginx on the same WebStone files, same load tool (wrk), same machine.
#
#   crates/origin/benches/nginx-compare.sh [RUNS] [SECONDS] [CONNECTIONS]
#
# Needs nginx and wrk (apt-get install nginx wrk) and a release build of capstan
# (cargo build --release -p capstan-cli). Prints one line per run and the medians.
# BASELINE=/path/to/older/capstan adds that binary as a third contender (port BASELINE_PORT),
# interleaved with the other two, to measure a change under the same load.
set -euo pipefail

RUNS=${1:-3}
SECS=${2:-10}
CONNS=${3:-64}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CAPSTAN=${CAPSTAN:-$ROOT/target/release/capstan}
WORK=$(mktemp -d /tmp/capstan-origin-bench.XXXXXX)
ORIGIN_PORT=${ORIGIN_PORT:-28471}
NGINX_PORT=${NGINX_PORT:-28472}
THREADS=${THREADS:-2}
BASELINE=${BASELINE:-}
BASELINE_PORT=${BASELINE_PORT:-28473}

cleanup() {
  [[ -n "${ORIGIN_PID:-}" ]] && kill "$ORIGIN_PID" 2>/dev/null || true
  [[ -n "${BASE_PID:-}" ]] && kill "$BASE_PID" 2>/dev/null || true
  [[ -f "$WORK/nginx.pid" ]] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
  sleep 0.3
  rm -rf "$WORK"
}
trap cleanup EXIT

# 1. The origin writes the tree to disk; nginx serves the very same directory.
"$CAPSTAN" origin --resources real --tree webstone --seed 1 --data-dir "$WORK/www" \
  --listen 127.0.0.1:$ORIGIN_PORT --threads "$THREADS" >"$WORK/origin.out" 2>"$WORK/origin.err" &
ORIGIN_PID=$!
for _ in $(seq 300); do grep -q listening "$WORK/origin.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$WORK/origin.out" || { echo "origin did not start:"; cat "$WORK/origin.err"; exit 1; }
if [[ -n "$BASELINE" ]]; then
  "$BASELINE" origin --resources real --tree webstone --seed 1 --data-dir "$WORK/www" \
    --listen 127.0.0.1:$BASELINE_PORT --threads "$THREADS" >"$WORK/base.out" 2>"$WORK/base.err" &
  BASE_PID=$!
  for _ in $(seq 300); do grep -q listening "$WORK/base.out" 2>/dev/null && break; sleep 0.1; done
  grep -q listening "$WORK/base.out" || { echo "baseline did not start:"; cat "$WORK/base.err"; exit 1; }
fi

cat >"$WORK/nginx.conf" <<CONF
worker_processes $THREADS;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  default_type text/html;
  client_body_temp_path $WORK/tmp; proxy_temp_path $WORK/tmp; fastcgi_temp_path $WORK/tmp;
  uwsgi_temp_path $WORK/tmp; scgi_temp_path $WORK/tmp;
  server { listen 127.0.0.1:$NGINX_PORT; root $WORK/www; }
}
CONF
mkdir -p "$WORK/tmp"
nginx -c "$WORK/nginx.conf" -p "$WORK"
sleep 0.5

# 2. The WebStone standard mix (weights 350/500/140/9/1), one path per request.
cat >"$WORK/mix.lua" <<'LUA'
local paths, cum, total = {}, {}, 0
for _, e in ipairs({{"/file500.html",350},{"/file5k.html",500},{"/file50k.html",140},
                    {"/file500k.html",9},{"/file5m.html",1}}) do
  total = total + e[2]; paths[#paths+1] = e[1]; cum[#cum+1] = total
end
math.randomseed(1)
request = function()
  local u = math.random() * total
  for i = 1, #cum do if u <= cum[i] then return wrk.format("GET", paths[i]) end end
end
LUA

bench() { # name port script-or-path
  local out
  if [[ "$3" == *.lua ]]; then
    out=$(wrk -t2 -c"$CONNS" -d"${SECS}s" -s "$3" "http://127.0.0.1:$2/")
  else
    out=$(wrk -t2 -c"$CONNS" -d"${SECS}s" "http://127.0.0.1:$2$3")
  fi
  echo "$out" | awk '/Requests\/sec/ {print $2}'
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for workload in /file5k.html "$WORK/mix.lua"; do
  name=$([[ "$workload" == *.lua ]] && echo "webstone-mix" || echo "$workload")
  o=(); n=(); b=()
  for r in $(seq "$RUNS"); do
    o+=("$(bench origin $ORIGIN_PORT "$workload")")
    n+=("$(bench nginx $NGINX_PORT "$workload")")
    if [[ -n "$BASELINE" ]]; then
      b+=("$(bench baseline $BASELINE_PORT "$workload")")
      echo "run $r $name: origin ${o[-1]} req/s, nginx ${n[-1]} req/s, baseline ${b[-1]} req/s (load $(cut -d' ' -f1 /proc/loadavg))"
    else
      echo "run $r $name: origin ${o[-1]} req/s, nginx ${n[-1]} req/s (load $(cut -d' ' -f1 /proc/loadavg))"
    fi
  done
  om=$(printf '%s\n' "${o[@]}" | median)
  nm=$(printf '%s\n' "${n[@]}" | median)
  echo "MEDIAN $name: origin $om req/s, nginx $nm req/s, ratio $(awk -v o="$om" -v n="$nm" 'BEGIN {printf "%.2f", o/n}')"
  # Each origin run is paired with the nginx run right after it, so the ratio of each pair sees
  # nearly the same background load; their median is less sensitive to load drifting.
  pr=$(for i in "${!o[@]}"; do awk -v o="${o[$i]}" -v n="${n[$i]}" 'BEGIN {printf "%.3f\n", o/n}'; done | median)
  echo "MEDIAN $name: of per-run origin/nginx ratios $pr"
  if [[ -n "$BASELINE" ]]; then
    bm=$(printf '%s\n' "${b[@]}" | median)
    echo "MEDIAN $name: baseline $bm req/s, ratio to nginx $(awk -v o="$bm" -v n="$nm" 'BEGIN {printf "%.2f", o/n}')"
  fi
done
