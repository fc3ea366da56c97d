#!/usr/bin/env bash
# `capstan bench` side by side with wrk, ab, httperf and h2load, in one run, against nginx serving
# a 0-byte file. Every round runs each contender once, interleaved, so a burst of other load on the
# machine hits all of them; the medians over ROUNDS rounds are printed at the end.
#
#   crates/bench/benches/compare.sh [ROUNDS] [SECONDS]
#
# Sections (SECTIONS="a b c d" by default):
#   a  keep-alive requests/s, one generator thread, CONNS connections: wrk -t1 vs capstan (closed
#      engine, and open engine at a rate beyond capacity), plus each tool's CPU per request
#   b  new connections/s (connection per request): ab vs capstan's closed engine, CONNS concurrent;
#      httperf vs capstan's open engine, both offered HP_RATE/s
#   c  open loop at OPEN_RATE req/s, connection per request: h2load -r vs httperf --rate vs capstan
#      (achieved rate; capstan's own generator lag)
#   d  peak RSS (VmHWM) of capstan at MEM_RATE req/s keep-alive for each of MEM_SECS
#
# Needs: nginx, wrk, ab (apache2-utils), httperf, h2load (nghttp2-client), jq, and a release build
# (cargo build --release -p capstan-cli). nginx gets SRV_CPU, the generators GEN_CPU (taskset).
set -euo pipefail

ROUNDS=${1:-3}
SECS=${2:-10}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CAPSTAN=${CAPSTAN:-$ROOT/target/release/capstan}
PORT=${PORT:-29480}
CONNS=${CONNS:-50}
SRV_CPU=${SRV_CPU:-0}
GEN_CPU=${GEN_CPU:-1}
OPEN_RATE=${OPEN_RATE:-5000}
OVER_RATE=${OVER_RATE:-60000}
HP_RATE=${HP_RATE:-12000}
MEM_RATE=${MEM_RATE:-20000}
MEM_SECS=${MEM_SECS:-"60 180"}
SECTIONS=${SECTIONS:-"a b c d"}
WORK=$(mktemp -d /tmp/capstan-bench-compare.XXXXXX)
URL=http://127.0.0.1:$PORT/empty
GEN="taskset -c $GEN_CPU"

for t in nginx wrk ab httperf h2load jq taskset; do
  command -v $t >/dev/null || { echo "missing: $t"; exit 1; }
done
[[ -x "$CAPSTAN" ]] || { echo "no $CAPSTAN (cargo build --release -p capstan-cli)"; exit 1; }
# A private copy: a rebuild of the shared tree during the run must not swap the binary.
cp "$CAPSTAN" "$WORK/capstan"
CAPSTAN=$WORK/capstan

cleanup() {
  [[ -f "$WORK/nginx.pid" ]] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
  sleep 0.3
  rm -rf "$WORK"
}
trap cleanup EXIT
trap "exit 1" INT TERM

chmod 755 "$WORK"
mkdir -p "$WORK/www" "$WORK/tmp"
: >"$WORK/www/empty"
cat >"$WORK/nginx.conf" <<CONF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 16384; }
http {
  access_log off;
  sendfile on;
  open_file_cache max=16;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  default_type text/plain;
  client_body_temp_path $WORK/tmp; proxy_temp_path $WORK/tmp; fastcgi_temp_path $WORK/tmp;
  uwsgi_temp_path $WORK/tmp; scgi_temp_path $WORK/tmp;
  server { listen 127.0.0.1:$PORT backlog=4096; root $WORK/www; }
}
CONF

# Other people's scripts on a shared machine may stop every nginx: check before each run.
ensure_nginx() {
  if curl -s -o /dev/null --max-time 2 "$URL"; then return; fi
  [[ -f "$WORK/nginx.pid" ]] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null && sleep 0.3
  taskset -c "$SRV_CPU" nginx -c "$WORK/nginx.conf" -p "$WORK"
  for _ in $(seq 50); do curl -s -o /dev/null --max-time 1 "$URL" && return; sleep 0.1; done
  echo "nginx did not start"; cat "$WORK/nginx-error.log"; exit 1
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
# CPU seconds (user+sys) of the command that /usr/bin/time wrote to $1.
cpu_of() { awk '{print $1 + $2}' "$1"; }
timed() { local out=$1; shift; /usr/bin/time -f "%U %S" -o "$out" "$@"; }

declare -A VALS
add() { VALS[$1]="${VALS[$1]:-} $2"; }
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
CB=(taskset -c "$GEN_CPU" "$CAPSTAN" bench "$URL" -q -t 1 --json "$WORK/r.json")
q() { jq -r "$1" "$WORK/r.json"; }

echo "capstan $("$CAPSTAN" --version 2>/dev/null || echo '?'), $(nproc) cores, nginx 1 worker on CPU $SRV_CPU, generators on CPU $GEN_CPU"
echo "rounds $ROUNDS, $SECS s each, $CONNS connections; load average at start: $(load)"

# Runs "$@" (a contender); if nginx was stopped meanwhile (by someone else's script), says so and
# runs it again, up to three times.
checked() {
  local pid
  for _ in 1 2 3; do
    ensure_nginx
    pid=$(cat "$WORK/nginx.pid")
    "$@"
    if kill -0 "$pid" 2>/dev/null && curl -s -o /dev/null --max-time 2 "$URL"; then return; fi
    echo "   (nginx was stopped during that run by something else; repeating it)"
  done
}
us_per_req() { awk -v c="$(cpu_of "$WORK/t")" -v n="$1" 'BEGIN {printf "%.2f", 1e6 * c / n}'; }

a_wrk() {
  timed "$WORK/t" $GEN wrk -t1 -c"$CONNS" -d"${SECS}s" "$URL" >"$WORK/wrk.out"
  A_RPS=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.out")
  A_US=$(us_per_req "$(awk '/requests in/ {print $1}' "$WORK/wrk.out")")
  A_MSG="errors $(awk '/Non-2xx|Socket errors/' "$WORK/wrk.out" | tr -s ' ' | tr '\n' ' ')"
}
a_closed() {
  timed "$WORK/t" "${CB[@]}" --clients "$CONNS" --keepalive -d "${SECS}s"
  A_RPS=$(q .completed_rps); A_US=$(us_per_req "$(q .completed)"); A_MSG="errors $(q .errors_total)  2xx $(q '.status["2xx"]')"
}
a_open() {
  timed "$WORK/t" "${CB[@]}" --rate "$OVER_RATE" --keepalive --connections "$CONNS" \
    --max-inflight $((CONNS * 20)) -d "${SECS}s" 2>/dev/null
  A_RPS=$(q .completed_rps); A_US=$(us_per_req "$(q .completed)")
  A_MSG="errors $(q .errors_total)  dropped $(q .dropped)"
}
b_ab() {
  $GEN ab -q -t "$SECS" -n 100000000 -c "$CONNS" "$URL" >"$WORK/ab.out" 2>&1 || true
  B_RPS=$(awk '/Requests per second/ {print $4}' "$WORK/ab.out")
  B_MSG="failed $(awk '/Failed requests/ {print $3}' "$WORK/ab.out")"
}
# httperf is an open loop: offer more than nginx can take (HP_RATE) and count replies/s. Not
# --hog: it binds ports itself and then cannot reuse the TIME_WAIT ports its own closes leave.
b_httperf() {
  $GEN httperf --server 127.0.0.1 --port "$PORT" --uri /empty --rate "$HP_RATE" \
    --num-conns $((HP_RATE * SECS)) --timeout 1 >"$WORK/hp.out" 2>&1 || true
  B_RPS=$(awk '/^Total:/ {printf "%.1f", $7 / $9}' "$WORK/hp.out")
  B_MSG="errors $(awk '/^Errors: total/ {print $3}' "$WORK/hp.out") (of $((HP_RATE * SECS)) offered)"
}
b_capstan() {
  "${CB[@]}" --clients "$CONNS" -d "${SECS}s"
  B_RPS=$(q .completed_rps); B_MSG="errors $(q .errors_total)"
}
# The like-for-like peer of httperf: capstan's open engine offered the same HP_RATE, the same
# 1 s timeout, a new connection per request.
b_open() {
  "${CB[@]}" --rate "$HP_RATE" --timeout 1s -d "${SECS}s" 2>/dev/null
  B_RPS=$(q .completed_rps); B_MSG="errors $(q .errors_total) (of $(q .started) started)"
}
# h2load's rate mode starts OPEN_RATE connections a second, one request each.
c_h2load() {
  $GEN h2load --h1 -r "$OPEN_RATE" -c "$N" -n "$N" -t 1 "$URL" >"$WORK/h2.out" 2>&1 || true
  C_RPS=$(awk '/^finished in/ {print $4}' "$WORK/h2.out")
  C_MSG="succeeded $(awk '/^requests:/ {print $8}' "$WORK/h2.out")/$N in $(awk '/^finished in/ {print $3}' "$WORK/h2.out")"
}
c_httperf() {
  $GEN httperf --server 127.0.0.1 --port "$PORT" --uri /empty --rate "$OPEN_RATE" \
    --num-conns "$N" --timeout 2 >"$WORK/hp.out" 2>&1 || true
  C_RPS=$(awk '/^Total:/ {printf "%.1f", $7 / $9}' "$WORK/hp.out")
  C_MSG="replies $(awk '/^Total:/ {print $7 "/'"$N"' in " $9 " s"}' "$WORK/hp.out")"
}
c_capstan() {
  "${CB[@]}" --rate "$OPEN_RATE" -d "${SECS}s" 2>/dev/null
  C_RPS=$(q .completed_rps)
  C_MSG="started $(q .started)/$N  errors $(q .errors_total)  lag p50 $(q .lag_ms.p50) p99 $(q .lag_ms.p99) max $(q .lag_ms.max) ms"
}

if [[ " $SECTIONS " == *" a "* ]]; then
  echo; echo "== a: keep-alive, one generator thread, $CONNS connections"
  for r in $(seq "$ROUNDS"); do
    for c in wrk closed open; do
      checked "a_$c"
      add "a_$c" "$A_RPS"; add "a_${c}_us" "$A_US"
      printf 'round %d %-8s %10s req/s  %6s µs CPU/req  %s  load %s\n' "$r" "$c" "$A_RPS" "$A_US" "$A_MSG" "$(load)"
    done
  done
fi

if [[ " $SECTIONS " == *" b "* ]]; then
  echo; echo "== b: connection per request (HTTP/1.0), $CONNS concurrent (httperf: open loop at $HP_RATE/s)"
  for r in $(seq "$ROUNDS"); do
    for c in ab httperf capstan open; do
      checked "b_$c"
      add "b_$c" "$B_RPS"
      printf 'round %d %-8s %10s conn/s  %s  load %s\n' "$r" "$c" "$B_RPS" "$B_MSG" "$(load)"
    done
  done
fi

if [[ " $SECTIONS " == *" c "* ]]; then
  N=$((OPEN_RATE * SECS))
  echo; echo "== c: open loop at $OPEN_RATE req/s for $SECS s, connection per request"
  for r in $(seq "$ROUNDS"); do
    for c in h2load httperf capstan; do
      checked "c_$c"
      add "c_$c" "$C_RPS"
      printf 'round %d %-8s %10s req/s  %s  load %s\n' "$r" "$c" "$C_RPS" "$C_MSG" "$(load)"
      if [[ $c == capstan ]]; then
        add c_lag50 "$(q .lag_ms.p50)"; add c_lag99 "$(q .lag_ms.p99)"; add c_lagmax "$(q .lag_ms.max)"
      fi
    done
  done
fi

if [[ " $SECTIONS " == *" d "* ]]; then
  echo; echo "== d: peak RSS at $MEM_RATE req/s keep-alive ($CONNS connections)"
  for s in $MEM_SECS; do
    ensure_nginx
    $GEN "$CAPSTAN" bench "$URL" -q -t 1 --rate "$MEM_RATE" --keepalive --connections "$CONNS" \
      ${MEM_FLAGS:-} -d "${s}s" --json "$WORK/r.json" 2>/dev/null &
    pid=$!
    hwm=0
    while kill -0 $pid 2>/dev/null; do
      v=$(awk '/VmHWM/ {print $2}' /proc/$pid/status 2>/dev/null || true)
      [[ -n "$v" ]] && hwm=$v
      sleep 0.5
    done
    wait $pid
    add d_hwm "${s}s:${hwm}kB"
    echo "$s s: VmHWM $((hwm / 1024)) MB ($hwm kB)  completed $(q .completed)  completed_rps $(q .completed_rps)  errors $(q .errors_total)  lag p99 $(q .lag_ms.p99) ms  load $(load)"
  done
fi

echo; echo "== medians over $ROUNDS rounds (load average now $(load))"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "-"}'; }
if [[ " $SECTIONS " == *" a "* ]]; then
  w=$(median "${VALS[a_wrk]}"); c=$(median "${VALS[a_closed]}"); o=$(median "${VALS[a_open]}")
  wu=$(median "${VALS[a_wrk_us]}"); cu=$(median "${VALS[a_closed_us]}"); ou=$(median "${VALS[a_open_us]}")
  echo "a keep-alive req/s: wrk $w, capstan closed $c (ratio $(ratio "$c" "$w")), capstan open $o (ratio $(ratio "$o" "$w"))"
  echo "a CPU µs/request:   wrk $wu, capstan closed $cu (wrk/capstan $(ratio "$wu" "$cu")), capstan open $ou (wrk/capstan $(ratio "$wu" "$ou"))"
fi
if [[ " $SECTIONS " == *" b "* ]]; then
  a=$(median "${VALS[b_ab]}"); h=$(median "${VALS[b_httperf]}"); c=$(median "${VALS[b_capstan]}"); o=$(median "${VALS[b_open]}")
  echo "b conn/s: ab $a, httperf $h, capstan closed $c (vs ab $(ratio "$c" "$a")), capstan open at $HP_RATE/s $o (vs httperf $(ratio "$o" "$h"))"
fi
if [[ " $SECTIONS " == *" c "* ]]; then
  echo "c achieved at $OPEN_RATE/s: h2load $(median "${VALS[c_h2load]}"), httperf $(median "${VALS[c_httperf]}"), capstan $(median "${VALS[c_capstan]}"); capstan lag p50 $(median "${VALS[c_lag50]}") p99 $(median "${VALS[c_lag99]}") max $(median "${VALS[c_lagmax]}") ms"
fi
if [[ " $SECTIONS " == *" d "* ]]; then
  echo "d VmHWM:${VALS[d_hwm]}"
fi
