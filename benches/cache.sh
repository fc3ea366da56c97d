#!/usr/bin/env bash
# Capstan's HTTP cache side by side with Varnish, Traffic Server, nginx (proxy_cache) and Squid,
# on this machine, in one run, against the same `capstan origin`, with the same objects, load,
# cache size and worker threads.
#
#   bash benches/cache.sh [ROUNDS] [SECONDS]        # defaults: 3 rounds × 10 s per hit cell
#   SECTIONS=hit CONTENDERS=capstan,varnish,nginx bash benches/cache.sh 5 8
#   SECTIONS=mem MEM_OBJECTS=200000 bash benches/cache.sh
#   PIN=1 SECTIONS=hit CONTENDERS=capstan,varnish bash benches/cache.sh 3 8   # proxy on CPU 1,
#                                   # load on CPU 0 (hit-threads.tsv: ms of CPU per proxy thread)
#   QUOTA=1 SECTIONS=hit CONTENDERS=capstan,varnish bash benches/cache.sh 3 8  # each proxy in a
#                                   # cgroup of 1 CPU (root), the generator gets the rest
#
# Sections (SECTIONS=hit,miss,mem):
#   hit   keep-alive GETs of one cached object (≈1 KB and ≈100 KB), wrk: requests/s, p50/p99, CPU
#         µs per request of the proxy's processes (/proc/PID/stat), and the hit ratio the origin
#         saw (1 − origin requests / requests). Every round visits every contender once.
#   miss  MISS_CLIENTS connections ask one cold object at once; the origin takes MISS_DELAY_MS
#         per response so the requests overlap: origin requests (1 = coalesced) and the time to
#         first byte of the last client.
#   mem   MEM_OBJECTS distinct small objects stored, one contender running at a time: memory
#         (PSS of its processes, plus nginx's cache files and Traffic Server's span on tmpfs) per
#         stored object; the stored count is estimated by re-asking a random sample and counting
#         what reaches the origin. Its cache is MEM_CACHE_MB (8 GiB), enough for every contender
#         to keep them all (Squid needs ~8 KB per 1 KB object).
#
# Contenders (CONTENDERS=capstan,varnish,trafficserver,nginx,squid): each missing Debian package
# is installed with apt-get (as root); a contender that cannot be installed or started is
# skipped with a message. Capstan's block (start_capstan) uses benches/cache/capstan.toml; while
# `capstan check` refuses its [cache] table, Capstan runs as a plain proxy and is flagged as not
# caching (CAPSTAN_CACHE=auto|on|off). Everything is on loopback; every process the script starts
# is stopped on exit (also on Ctrl-C / SIGTERM) and its temporary files are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh
here=$PWD/benches/cache

ROUNDS=${1:-${ROUNDS:-3}}
SECONDS_PER_RUN=${2:-${SECONDS_PER_RUN:-10}}
SECTIONS=${SECTIONS:-hit,miss,mem}
# Hit section: after each closed-loop wrk run, the same object at this fixed rate (req/s) with
# `capstan bench` (open loop, keep-alive, CONNECTIONS connections); 0 skips it.
FIXED_RATE=${FIXED_RATE:-5000}
CONTENDERS=${CONTENDERS:-capstan,varnish,trafficserver,nginx,squid}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-50}
WRK_THREADS=${WRK_THREADS:-1}
CACHE_MB=${CACHE_MB:-1024}
HIT_SIZES=${HIT_SIZES:-1024,102400}
MISS_CLIENTS=${MISS_CLIENTS:-500}
MISS_DELAY_MS=${MISS_DELAY_MS:-1000}
MEM_OBJECTS=${MEM_OBJECTS:-1000000}
MEM_SIZE=${MEM_SIZE:-1024}
MEM_CACHE_MB=${MEM_CACHE_MB:-8192}
MEM_SAMPLE=${MEM_SAMPLE:-1000}
MEM_FILL_TIMEOUT=${MEM_FILL_TIMEOUT:-1800}
CAPSTAN_CACHE=${CAPSTAN_CACHE:-auto}
ATS_SPAN=${ATS_SPAN:-tmpfs}
BASE_PORT=${BASE_PORT:-18400}
OUT=${OUT:-target/bench-cache}
ORIGIN_FILES=${ORIGIN_FILES:-5000}

die() { echo "cache.sh: $*" >&2; exit 1; }
for v in ROUNDS SECONDS_PER_RUN THREADS CONNECTIONS WRK_THREADS CACHE_MB MISS_CLIENTS MISS_DELAY_MS \
         MEM_OBJECTS MEM_SIZE MEM_CACHE_MB MEM_SAMPLE MEM_FILL_TIMEOUT BASE_PORT ORIGIN_FILES; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, not '${!v}'"
done
[[ $HIT_SIZES =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "HIT_SIZES must be sizes in bytes separated by commas, not '$HIT_SIZES'"
[[ $CAPSTAN_CACHE =~ ^(auto|on|off)$ ]] || die "CAPSTAN_CACHE must be auto, on or off, not '$CAPSTAN_CACHE'"
[[ $ATS_SPAN =~ ^(tmpfs|disk)$ ]] || die "ATS_SPAN must be tmpfs or disk, not '$ATS_SPAN'"
IFS=, read -r -a sections <<<"$SECTIONS"
for s in "${sections[@]}"; do [[ $s =~ ^(hit|miss|mem)$ ]] || die "unknown section '$s' (hit, miss, mem)"; done
IFS=, read -r -a wanted <<<"$CONTENDERS"
declare -A port=([capstan]=$BASE_PORT [varnish]=$((BASE_PORT + 1)) [trafficserver]=$((BASE_PORT + 2))
                 [nginx]=$((BASE_PORT + 3)) [squid]=$((BASE_PORT + 4)))
for c in "${wanted[@]}"; do [ -n "${port[$c]:-}" ] || die "unknown contender '$c' (capstan, varnish, trafficserver, nginx, squid)"; done
capstan_admin_port=$((BASE_PORT + 10))
fast_origin_port=$((BASE_PORT + 20))
slow_origin_port=$((BASE_PORT + 21))
has_section() { [[ ,$SECTIONS, == *,$1,* ]]; }

# ---------------------------------------------------------------------------------------------
# Packages: the Debian ones each contender needs; one `apt-get update` before the first install.
declare -A package=([varnish]=varnish [trafficserver]=trafficserver [nginx]=nginx [squid]=squid)
declare -A binary=([varnish]=varnishd [trafficserver]=traffic_server [nginx]=nginx [squid]=squid)
declare -A skipped=()
updated=
install() {  # install PACKAGE: 0 when its binary is (now) there
  if [ "$(id -u)" != 0 ]; then echo "needs package $1 (apt-get install $1; run as root to let the script do it)" >&2; return 1; fi
  if [ -z "$updated" ]; then apt-get update -qq >&2 || true; updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null 2>&1
}
command -v wrk >/dev/null || install wrk || die "wrk is needed (apt-get install wrk)"
for c in "${wanted[@]}"; do
  [ "$c" = capstan ] && continue
  if ! PATH=$PATH:/usr/sbin command -v "${binary[$c]}" >/dev/null; then
    install "${package[$c]}" || { skipped[$c]="package ${package[$c]} could not be installed"; echo "SKIP $c: ${skipped[$c]}" >&2; }
  fi
done
export PATH=$PATH:/usr/sbin

CAPSTAN=$(capstan_binary)
[ -x "$CAPSTAN" ] || die "no capstan binary at $CAPSTAN"

# The memory section's hungriest contender (Squid: a 4 KiB memory page per small object, and
# more) needs about 8 KB per object; warn rather than let the machine swap or kill something.
if has_section mem; then
  avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
  if [ $((MEM_OBJECTS * 10)) -gt "$avail_kb" ]; then
    echo "WARNING: the mem section may need ~$((MEM_OBJECTS * 10 / 1024)) MiB and $((avail_kb / 1024)) MiB are available" >&2
  fi
fi

for p in "${port[@]}" "$capstan_admin_port" "$fast_origin_port" "$slow_origin_port"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "port $p is in use (set BASE_PORT)"; fi
done

# ---------------------------------------------------------------------------------------------
# Temporary files and processes, all released on exit.
mkdir -p "$OUT"
rm -f "$OUT/hit.tsv" "$OUT/miss.tsv" "$OUT/mem.tsv" "$OUT/hit-headers.txt"
work=$(mktemp -d /tmp/capstan-cachebench.XXXXXX)
shm=$(mktemp -d /dev/shm/capstan-cachebench.XXXXXX)  # nginx's cache files, ATS's span (tmpfs = memory)
chmod 755 "$work" "$shm"  # proxies drop to their own users
pids=()
declare -A running=()  # contender → pid of its main process
declare -A running_dir=()  # contender → its directory in $work
cleanup() {
  trap - INT TERM
  local p live=()
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && live+=("$p"); done
  if [ ${#live[@]} -gt 0 ]; then
    kill -TERM "${live[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
      local any=
      for p in "${live[@]}"; do kill -0 "$p" 2>/dev/null && any=1; done
      [ -z "$any" ] && break
      sleep 0.1
    done
    kill -KILL "${live[@]}" 2>/dev/null || true
  fi
  wait 2>/dev/null || true
  rm -rf "$work" "$shm"
}
trap cleanup EXIT
trap 'echo "cache.sh: interrupted" >&2; exit 130' INT
trap 'echo "cache.sh: terminated" >&2; exit 143' TERM

# Run a command in the background and wait for it, so that INT/TERM reach the traps at once.
run() { "$@" & local p=$!; pids+=("$p"); wait "$p"; }
# PIN=1: the contender on CPU 1 and the load generators on CPU 0, so the generator never takes
# CPU from the proxy (nor the proxy from the generator) and each proxy's threads share one core.
pin_proxy=() pin_load=()
if [ "${PIN:-0}" = 1 ]; then
  command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ] || die "PIN=1 needs taskset and two CPUs"
  pin_proxy=(taskset -c 1) pin_load=(taskset -c 0)
fi
# Each thread's CPU time (ns, from schedstat) of process $1, as "tid name ns" lines.
thread_ns() {
  local t
  for t in /proc/"$1"/task/*; do
    printf '%s %s %s\n' "${t##*/}" "$(cat "$t/comm" 2>/dev/null)" "$(awk '{print $1}' "$t/schedstat" 2>/dev/null)"
  done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_http() {  # PORT PID SECONDS: a 200 for an object of the tree through PORT, while PID lives
  local deadline=$((SECONDS + $3))
  while [ $SECONDS -lt $deadline ]; do
    kill -0 "$2" 2>/dev/null || return 1
    if port_open "$1" && [ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:$1$probe_path")" = 200 ]; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

# The process and its descendants (nginx workers, Varnish's cache process).
tree_pids() { local c; echo "$1"; for c in $(pgrep -P "$1" || true); do tree_pids "$c"; done; }
cpu_ticks() {  # user + system clock ticks of the tree so far
  local total=0 p
  for p in $(tree_pids "$1"); do
    total=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk -v t="$total" '{print t + $12 + $13}' || echo "$total")
  done
  echo "$total"
}
pss_kb() {  # proportional set size of the tree (shared pages split, not counted per process)
  local total=0 p
  for p in $(tree_pids "$1"); do
    total=$(awk -v t="$total" '/^Pss:/ {t += $2} END {print t}' "/proc/$p/smaps_rollup" 2>/dev/null || echo "$total")
  done
  echo "$total"
}
served() { python3 "$here/clients.py" served "http://127.0.0.1:$1/_capstan/load"; }

render() {  # TEMPLATE OUT KEY=VALUE…: replace every @KEY@
  local template=$1 out=$2 kv script=()
  shift 2
  for kv in "$@"; do script+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
  sed "${script[@]}" "$template" > "$out"
  if grep -q '@[A-Z_]*@' "$out"; then die "unfilled placeholder in $out: $(grep -o '@[A-Z_]*@' "$out" | head -1)"; fi
}

# ---------------------------------------------------------------------------------------------
# One function per contender: start_NAME DIR ORIGIN_PORT CACHE_MB starts it in the background,
# sets `started` to its pid and writes its log to DIR/log.
capstan_note=
start_capstan() {  # ===== CAPSTAN BLOCK: adjust here when the cache lands =====
  local dir=$1 conf=$1/capstan.toml
  render "$here/capstan.toml" "$conf" PORT="${port[capstan]}" ADMIN_PORT=$capstan_admin_port \
    ORIGIN_PORT="$2" CACHE_MB="$3"
  if [ "$CAPSTAN_CACHE" = off ]; then
    sed -i '/^\[cache\]/,$d' "$conf"
    capstan_note="CAPSTAN_CACHE=off: plain proxy, no [cache]"
  elif ! "$CAPSTAN" check "$conf" > "$dir/check.out" 2>&1; then
    if [ "$CAPSTAN_CACHE" = on ]; then
      reason="CAPSTAN_CACHE=on but this build refuses its config: $(head -1 "$dir/check.out")"
      return 1
    fi
    sed -i '/^\[cache\]/,$d' "$conf"
    capstan_note="this build refuses [cache] ($(head -1 "$dir/check.out")): running as a plain proxy"
  fi
  [ -n "$capstan_note" ] && echo "NOTE capstan: $capstan_note" >&2
  RUST_LOG=warn "${pin_proxy[@]}" "$CAPSTAN" serve --config "$conf" --threads "$THREADS" > "$dir/stdout.log" 2>&1 &
  started=$!
}  # ===== end of CAPSTAN BLOCK =====

start_varnish() {
  local dir=$1
  render "$here/varnish.vcl" "$dir/default.vcl" ORIGIN_PORT="$2"
  chmod 644 "$dir/default.vcl"
  "${pin_proxy[@]}" varnishd -F -n "$dir/varnish" -a "127.0.0.1:${port[varnish]}" -T none -f "$dir/default.vcl" \
    -s "malloc,${3}M" -p thread_pools="$THREADS" > "$dir/stdout.log" 2>&1 &
  started=$!
}

start_trafficserver() {
  local dir=$1 f span_dir=$1/cache
  # Its objects live in the span (the RAM cache holds copies of those read back): on tmpfs by
  # default, so that like every other contender it keeps them in memory (ATS_SPAN=disk: a
  # sparse file under /tmp). The span holds as many bytes as every other contender's cache.
  [ "$ATS_SPAN" = tmpfs ] && span_dir=$(mktemp -d "$shm/trafficserver.XXXXXX")
  echo "$span_dir" > "$dir/span_dir"
  mkdir -p "$dir/etc" "$dir/run" "$dir/log" "$span_dir"
  render "$here/trafficserver/runroot.yaml" "$dir/runroot.yaml" DIR="$dir"
  render "$here/trafficserver/records.config" "$dir/etc/records.config" PORT="${port[trafficserver]}" \
    THREADS="$THREADS" CACHE_BYTES=$(($3 * 1048576))
  render "$here/trafficserver/remap.config" "$dir/etc/remap.config" ORIGIN_PORT="$2"
  render "$here/trafficserver/storage.config" "$dir/etc/storage.config" SPAN_DIR="$span_dir" SPAN_MB="$3"
  cp "$here/trafficserver/ip_allow.yaml" "$dir/etc/"
  # The other files it reads at start, empty: defaults.
  for f in plugin.config cache.config hosting.config parent.config volume.config splitdns.config \
           ssl_multicert.config socks.config logging.yaml sni.yaml strategies.yaml; do : > "$dir/etc/$f"; done
  traffic_server --run-root="$dir/runroot.yaml" > "$dir/stdout.log" 2>&1 &
  started=$!
}

start_nginx() {
  local dir=$1 cache_dir
  cache_dir=$(mktemp -d "$shm/nginx.XXXXXX")
  chmod 755 "$cache_dir"
  echo "$cache_dir" > "$dir/cache_dir"
  render "$here/nginx.conf" "$dir/nginx.conf" THREADS="$THREADS" DIR="$dir" CACHE_DIR="$cache_dir" \
    CACHE_MB="$3" NGINX_KEYS_MB=$(($3 / 8 > 64 ? $3 / 8 : 64)) ORIGIN_PORT="$2" PORT="${port[nginx]}"
  "${pin_proxy[@]}" nginx -e "$dir/error.log" -c "$dir/nginx.conf" > "$dir/stdout.log" 2>&1 &
  started=$!
}

start_squid() {
  local dir=$1
  render "$here/squid.conf" "$dir/squid.conf" PORT="${port[squid]}" ORIGIN_PORT="$2" CACHE_MB="$3" DIR="$dir"
  chown -R proxy: "$dir" 2>/dev/null || true
  squid -N -f "$dir/squid.conf" > "$dir/stdout.log" 2>&1 &
  started=$!
}

start() {  # NAME SECTION ORIGIN_PORT CACHE_MB: 0 when it serves
  local name=$1 dir=$work/$2/$1
  [ -n "${skipped[$name]:-}" ] && return 1
  mkdir -p "$dir"
  reason=
  if ! "start_$name" "$dir" "$3" "$4"; then
    skipped[$name]=${reason:-could not be configured}
    echo "SKIP $name: ${skipped[$name]}" >&2
    return 1
  fi
  pids+=("$started")
  running[$name]=$started
  running_dir[$name]=$dir
  if ! wait_http "${port[$name]}" "$started" 60; then
    if kill -0 "$started" 2>/dev/null; then
      skipped[$name]="did not serve $probe_path on port ${port[$name]} within 60 s"
    else
      skipped[$name]="exited at start"
    fi
    echo "SKIP $name: ${skipped[$name]}; its log:" >&2
    tail -n 20 "$dir"/*.log "$dir"/log/diags.log 2>/dev/null | sed 's/^/    /' >&2 || true
    stop "$name"
    return 1
  fi
  put_under_quota "$name" "$started"
}

# QUOTA=N: each contender's processes (all of them, with the threads and children they have
# once serving) in a cgroup of N CPUs, as benches/tls_duel.sh does, so every proxy gets the same
# CPU and the load generator the rest.
declare -A quota_procs=()
put_under_quota() {
  [ -n "${QUOTA:-}" ] || return 0
  local procs p
  procs=$(cpu_quota_group "$QUOTA")
  [ -n "$procs" ] || die "QUOTA=$QUOTA needs root and the cgroup cpu controller"
  quota_procs[$1]=$procs
  for p in $2 $(pgrep -P "$2" 2>/dev/null) $(pgrep -P "$(pgrep -P "$2" 2>/dev/null | tr '\n' ',' | sed 's/,$//')" 2>/dev/null); do
    echo "$p" > "$procs" 2>/dev/null || true
  done
}

stop() {
  local p=${running[$1]:-}
  [ -z "$p" ] && return 0
  kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  # Its cache on tmpfs is memory: give it back before the next contender fills its own.
  local f
  for f in cache_dir span_dir; do
    [ -f "${running_dir[$1]}/$f" ] && rm -rf "$(cat "${running_dir[$1]}/$f")"
  done
  unset "running[$1]" "running_dir[$1]"
  if [ -n "${quota_procs[$1]:-}" ]; then cpu_quota_remove "${quota_procs[$1]}"; unset "quota_procs[$1]"; fi
}

give_up() {  # NAME REASON: a contender that broke during a section is skipped from then on
  skipped[$1]=$2
  echo "SKIP $1: $2" >&2
  stop "$1"
}

active() {  # the wanted contenders not skipped
  local c
  for c in "${wanted[@]}"; do [ -z "${skipped[$c]:-}" ] && echo "$c"; done
}

# ---------------------------------------------------------------------------------------------
# Origins: a fast real-mode one (hit and mem sections; bodies kept in memory) and a slow emulated
# one (miss section). Both serve the same `cap` tree, so paths and bytes are the same; with 5000
# files (27 MB, all kept in the real node's memory) it has objects of 1,024 and 102,831 bytes.
"$CAPSTAN" origin --tree cap --seed 1 --files "$ORIGIN_FILES" --print-filelist > "$work/filelist"
nearest() {  # SIZE: path of the tree's object closest in size
  awk -v want="$1" '$1 ~ /^\// { s = $NF; sub(/^#/, "", s); d = s - want; if (d < 0) d = -d;
                     if (best == "" || d < bd) { best = $1; bd = d; bs = s } }
                     END { print best " " bs }' "$work/filelist"
}
read -r probe_path _ < <(nearest 1024)
hit_objects=()
IFS=, read -r -a hit_sizes <<<"$HIT_SIZES"
for s in "${hit_sizes[@]}"; do read -r p b < <(nearest "$s"); hit_objects+=("$p:$b"); done
read -r mem_path mem_bytes < <(nearest "$MEM_SIZE")
read -r miss_path miss_bytes < <(nearest 1024)

"$CAPSTAN" origin --listen "127.0.0.1:$fast_origin_port" --name fast --tree cap --seed 1 --files "$ORIGIN_FILES" \
  --resources real --data-dir "$work/origin-data" --threads 1 > "$work/fast-origin.log" 2>&1 &
pids+=($!)
origin_pid=$!
render "$here/slow-origin.toml" "$work/slow-origin.toml" MISS_DELAY_MS="$MISS_DELAY_MS" FILES="$ORIGIN_FILES"
"$CAPSTAN" origin --config "$work/slow-origin.toml" --listen "127.0.0.1:$slow_origin_port" --name slow \
  --threads 1 > "$work/slow-origin.log" 2>&1 &
pids+=($!)
slow_pid=$!
wait_http "$fast_origin_port" "$origin_pid" 60 || die "the origin did not start: $(cat "$work/fast-origin.log")"
for _ in $(seq 100); do port_open "$slow_origin_port" && break; kill -0 "$slow_pid" 2>/dev/null || break; sleep 0.1; done
port_open "$slow_origin_port" || die "the slow origin did not start: $(cat "$work/slow-origin.log")"

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "load at start: $(uptime | sed 's/.*load average/load average/')"
  echo "capstan: $("$CAPSTAN" --version 2>&1 | head -1)"
  for c in "${wanted[@]}"; do
    case $c in
      varnish) echo "varnish: $(varnishd -V 2>&1 | head -1)" ;;
      trafficserver) echo "trafficserver: $(traffic_server -V 2>&1 | grep -m1 'Traffic Server')" ;;
      nginx) echo "nginx: $(nginx -v 2>&1)" ;;
      squid) echo "squid: $(squid -v 2>&1 | head -1)" ;;
    esac
  done
  echo "wrk: $(wrk -v 2>&1 | head -1)"
  echo "objects (cap tree, seed 1): hit ${hit_objects[*]}; miss $miss_path ($miss_bytes B); mem $mem_path ($mem_bytes B)"
} > "$OUT/run-info.txt" 2>/dev/null || true
cat "$OUT/run-info.txt" >&2
clk_tck=$(getconf CLK_TCK)

# ---------------------------------------------------------------------------------------------
hit_section() {
  local c obj path bytes round s0 s1 c0 c1
  echo "== hit: starting contenders (cache ${CACHE_MB} MiB, $THREADS threads)" >&2
  for c in $(active); do start "$c" hit "$fast_origin_port" "$CACHE_MB" || true; done
  : > "$OUT/hit-headers.txt"
  for c in $(active); do
    for obj in "${hit_objects[@]}"; do
      path=${obj%%:*}
      for _ in 1 2 3; do curl -s -o /dev/null "http://127.0.0.1:${port[$c]}$path"; done
      echo "$c $path: $(python3 "$here/clients.py" headers "${port[$c]}" "$path")" | tee -a "$OUT/hit-headers.txt" >&2
    done
  done
  printf 'round\tobject\tbytes\tproxy\trps\tp50_ms\tp99_ms\terrors\tcpu_us_per_req\trequests\torigin_requests\n' > "$OUT/hit.tsv"
  printf 'round\tobject\tbytes\tproxy\trate\tcompleted_rps\tp50_ms\tp99_ms\tp999_ms\terrors\n' > "$OUT/hit-fixed.tsv"
  printf 'round\tobject\tproxy\tcpu_ms_of_busiest_threads\n' > "$OUT/hit-threads.tsv"
  for round in $(seq "$ROUNDS"); do
    for obj in "${hit_objects[@]}"; do
      path=${obj%%:*}; bytes=${obj##*:}
      for c in $(active); do
        echo "hit round $round/$ROUNDS  $path ($bytes B)  $c" >&2
        s0=$(served "$fast_origin_port"); c0=$(cpu_ticks "${running[$c]}")
        thread_ns "${running[$c]}" > "$work/threads.0"
        if run "${pin_load[@]}" wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" --latency \
             "http://127.0.0.1:${port[$c]}$path" > "$work/wrk.out" 2>&1 && kill -0 "${running[$c]}" 2>/dev/null; then
          c1=$(cpu_ticks "${running[$c]}"); s1=$(served "$fast_origin_port")
          python3 "$here/summary.py" wrk "$work/wrk.out" "$round" "$path" "$bytes" "$c" "$((c1 - c0))" \
            "$clk_tck" "$((s1 - s0))" >> "$OUT/hit.tsv"
          # How the proxy's CPU time spread over its threads (the busiest first): an event
          # loop per thread with unevenly spread connections shows here.
          thread_ns "${running[$c]}" > "$work/threads.1"
          printf '%s\t%s\t%s\t%s\n' "$round" "$path" "$c" "$(awk 'NR==FNR {a[$1]=$3; next} {d=$3-a[$1]; if (d>0) print d/1e6}' \
            "$work/threads.0" "$work/threads.1" | sort -rn | head -4 | awk '{printf "%s%.0f", (NR>1?" ":""), $1}')" >> "$OUT/hit-threads.tsv"
          # The same object at a fixed rate below every contender's capacity (open loop, latency
          # from each request's intended start): the tail a user sees, not a saturated queue.
          if [ "$FIXED_RATE" -gt 0 ] && run "${pin_load[@]}" "$CAPSTAN" bench "http://127.0.0.1:${port[$c]}$path" \
               --rate "$FIXED_RATE" -k -c "$CONNECTIONS" -d "${SECONDS_PER_RUN}s" -q \
               --json "$work/fixed.json" > "$work/fixed.out" 2>&1; then
            python3 "$here/summary.py" fixed "$work/fixed.json" "$round" "$path" "$bytes" "$c" \
              "$FIXED_RATE" >> "$OUT/hit-fixed.tsv"
          fi
        else
          if kill -0 "${running[$c]}" 2>/dev/null; then
            give_up "$c" "wrk failed against it in the hit section: $(grep -v '^ ' "$work/wrk.out" | tail -n 1)"
          else
            give_up "$c" "exited during the hit section"
          fi
        fi
      done
    done
  done
  for c in $(active); do stop "$c"; done
}

miss_section() {
  local c round path s0 s1
  echo "== miss: starting contenders in front of the slow origin ($MISS_DELAY_MS ms per response)" >&2
  for c in $(active); do start "$c" miss "$slow_origin_port" "$CACHE_MB" || true; done
  printf 'round\tproxy\tclients\tok\terrors\tnon200\torigin_requests\tttfb_first_ms\tttfb_median_ms\tttfb_last_ms\tsend_spread_ms\tverdicts\tmiss_headers\tfirst_error\n' > "$OUT/miss.tsv"
  for round in $(seq "$ROUNDS"); do
    for c in $(active); do
      path="$miss_path?cold=$round-$c-$RANDOM$RANDOM"
      echo "miss round $round/$ROUNDS  $c  $MISS_CLIENTS clients → $path" >&2
      s0=$(served "$slow_origin_port")
      if run python3 "$here/clients.py" burst "${port[$c]}" "$path" "$MISS_CLIENTS" > "$work/burst.json"; then
        s1=$(served "$slow_origin_port")
        python3 "$here/summary.py" burst "$work/burst.json" "$round" "$c" "$((s1 - s0))" >> "$OUT/miss.tsv"
      else
        give_up "$c" "failed in the miss section"
      fi
    done
  done
  for c in $(active); do stop "$c"; done
}

# Bytes a contender keeps outside its processes: nginx's cache files, Traffic Server's span
# (allocated blocks of the sparse file), and what they are.
beside_bytes() {  # NAME DIR
  local where
  case $1 in
    nginx) echo "$(du -sB1 "$(cat "$2/cache_dir")" | cut -f1) cache files on tmpfs" ;;
    trafficserver)
      if [ "$ATS_SPAN" = tmpfs ]; then where="span on tmpfs (allocated)"; else where="span on disk (allocated, not memory)"; fi
      echo "$(du -sB1 "$(cat "$2/span_dir")" | cut -f1) $where" ;;
    *) echo "0 -" ;;
  esac
}

mem_section() {
  local c dir m0 m1 s0 s1 s2 s3 extra extra0 what fill_responses fill_bad
  printf 'proxy\tobjects\tobject_bytes\tfill_responses\tfill_non200\tfill_origin_requests\tfill_s\tsample\tsample_misses\tpss_before_kb\tpss_after_kb\textra_before_bytes\textra_bytes\textra_what\n' > "$OUT/mem.tsv"
  for c in $(active); do
    echo "== mem: $c alone, $MEM_OBJECTS objects of $mem_bytes B (cache ${MEM_CACHE_MB} MiB)" >&2
    start "$c" mem "$fast_origin_port" "$MEM_CACHE_MB" || continue
    dir=$work/mem/$c
    sleep 1
    m0=$(pss_kb "${running[$c]}")
    read -r extra0 _ < <(beside_bytes "$c" "$dir")
    s0=$(served "$fast_origin_port")
    rm -f "$work/fill.out"
    local t0=$SECONDS
    FILL_PATH=$mem_path FILL_N=$MEM_OBJECTS FILL_OUT=$work/fill.out \
      run wrk -t1 -c64 -d"${MEM_FILL_TIMEOUT}s" -s "$here/fill.lua" "http://127.0.0.1:${port[$c]}/" > "$work/fill.wrk" 2>&1 || true
    local fill_s=$((SECONDS - t0))
    s1=$(served "$fast_origin_port")
    fill_responses=0; fill_bad=0
    [ -f "$work/fill.out" ] && read -r fill_responses fill_bad < "$work/fill.out"
    sleep 2  # let background writers (ATS, nginx's cache manager) settle
    m1=$(pss_kb "${running[$c]}")
    read -r extra what < <(beside_bytes "$c" "$dir")
    s2=$(served "$fast_origin_port")
    if ! python3 "$here/clients.py" probe "${port[$c]}" "$mem_path?fill=" "$MEM_OBJECTS" "$MEM_SAMPLE" 7 > "$work/probe.json"; then
      give_up "$c" "failed in the mem section (sampling after the fill)"
      continue
    fi
    s3=$(served "$fast_origin_port")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$MEM_OBJECTS" "$mem_bytes" \
      "$fill_responses" "$fill_bad" "$((s1 - s0))" "$fill_s" "$MEM_SAMPLE" "$((s3 - s2))" "$m0" "$m1" "$extra0" "$extra" "$what" >> "$OUT/mem.tsv"
    stop "$c"
  done
}

for s in "${sections[@]}"; do "${s}_section"; done

echo "load at end: $(uptime | sed 's/.*load average/load average/')" >> "$OUT/run-info.txt"
{
  for c in "${wanted[@]}"; do [ -n "${skipped[$c]:-}" ] && echo "skipped $c: ${skipped[$c]}"; done
  [ -n "$capstan_note" ] && echo "capstan: $capstan_note"
} >> "$OUT/run-info.txt" || true
python3 "$here/summary.py" report "$OUT" "$ROUNDS" "$SECONDS_PER_RUN" "$THREADS" "$WRK_THREADS" \
  "$CONNECTIONS" "$CACHE_MB" "$MISS_CLIENTS" "$MISS_DELAY_MS" "$MEM_CACHE_MB" | tee "$OUT/summary.md"
echo "raw runs: $OUT/{hit,miss,mem}.tsv" >&2
