# Shell helpers the benchmark scripts share; `source benches/lib.sh` from the repo root.

# Waits (up to $2 seconds, default 10) until something accepts on 127.0.0.1:$1; exits the
# script otherwise.
wait_port() {
  for _ in $(seq $(( ${2:-10} * 20 ))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  exit 1
}

# Four nginx back-ends on 127.0.0.1 ports $2 to $2+3, serving $1/www (where a 1 KB 1k.html is
# written): writes $1/backends.conf, to start with `nginx -c "$1/backends.conf"`.
nginx_backends_conf() {
  local work=$1 first=$2 port
  chmod 755 "$work"  # the nginx workers run as another user
  mkdir -p "$work/www"
  python3 -c "import sys; sys.stdout.write('x' * 1024)" > "$work/www/1k.html"
  {
    cat <<CONF
worker_processes 1;
daemon off;
pid $work/backends.pid;
error_log $work/backends.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 10000000;
CONF
    for port in $(seq "$first" $((first + 3))); do
      echo "  server { listen 127.0.0.1:$port; root $work/www; }"
    done
    echo "}"
  } > "$work/backends.conf"
}

# An nginx proxy's way to the four back-ends from FIRST_PORT on, to paste into a config: the
# `upstream be` block (keep-alive connections, as every proxy in these benches has) for its
# `http` block, and the `location` for its `server` block.
nginx_upstream() {
  local first=$1 port
  echo "upstream be {"
  for port in $(seq "$first" $((first + 3))); do
    echo "    server 127.0.0.1:$port;"
  done
  echo "    keepalive 256;"
  echo "  }"
}
# The same four back-ends as `[[node]]` tables of a Capstan configuration, and as the `server`
# lines of an HAProxy backend.
capstan_nodes() {
  local first=$1 port
  for port in $(seq "$first" $((first + 3))); do
    printf '[[node]]\naddress = "127.0.0.1:%s"\n' "$port"
  done
}
haproxy_servers() {
  local first=$1 port
  for port in $(seq "$first" $((first + 3))); do
    echo "  server s$((port - first + 1)) 127.0.0.1:$port"
  done
}
nginx_proxy_location() {
  echo 'location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; }'
}

# Makes sure the named commands exist (each a Debian package of that name): as root, installs
# the missing ones with apt-get; otherwise says what to install and exits the script.
need_packages() {
  local missing=() tool
  for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  [ "${#missing[@]}" = 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "needs ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 1
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# The capstan binary to measure: $CAPSTAN when set (another build, or to skip the build),
# otherwise this tree's release build, built now (cargo's output to stderr).
capstan_binary() {
  if [ -n "${CAPSTAN:-}" ]; then
    echo "$CAPSTAN"
  else
    cargo build --release --locked --quiet -p capstan-cli >&2
    echo "${CARGO_TARGET_DIR:-$PWD/target}/release/capstan"
  fi
}

# CPU clock ticks (user + system) used so far by process $1 and its children (nginx workers).
cpu_ticks() {
  local total=0 pid
  for pid in "$1" $(pgrep -P "$1"); do
    total=$(awk -v t="$total" '{print t + $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo "$total")
  done
  echo "$total"
}

# One TSV row from a wrk --latency output file:
#   wrk_row WRK_OUT ROUND SCENARIO PROXY CPU_TICKS_BEFORE CPU_TICKS_AFTER CLK_TCK
# → round, scenario, proxy, req/s, p50 ms, p99 ms, errors, proxy CPU µs per request.
wrk_row() {
  python3 benches/wrk_row.py "$@"
}

# A CPU quota for the processes being compared, so that they, not the load generators and
# back-ends, are the bottleneck: on a 2-core machine one core of load could not saturate one
# core of switches (2026-11-28: the load core 97 % busy, the switches' 92 %), and two unsaturated
# switches split the requests by chance (0.59-1.55 between equal ones). Prints the file to write
# a pid into to put it under the quota (a cgroup of $1 CPUs, over a 10 ms period so that a
# throttled process waits 10 ms at most), or nothing where cgroups cannot be made (not root, no
# cpu controller). `cpu_quota_remove FILE` takes it down.
cpu_quota_group() {
  local share=$1 dir quota period=10000
  quota=$(python3 -c "print(int($share * $period))")
  if [ -w /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    dir=/sys/fs/cgroup/cpu/capstan-bench-$$
    mkdir -p "$dir" && echo "$period" > "$dir/cpu.cfs_period_us" && echo "$quota" > "$dir/cpu.cfs_quota_us" &&
      echo "$dir/cgroup.procs"
  elif [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    dir=/sys/fs/cgroup/capstan-bench-$$
    echo +cpu > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    mkdir -p "$dir" && echo "$quota $period" > "$dir/cpu.max" && echo "$dir/cgroup.procs"
  fi
}
cpu_quota_remove() {
  local procs=$1 dir pid
  [ -n "$procs" ] || return 0
  dir=$(dirname "$procs")
  # A cgroup with processes in it cannot be removed: move any left to the root group.
  for pid in $(cat "$procs" 2>/dev/null); do echo "$pid" > "$(dirname "$dir")/cgroup.procs" 2>/dev/null || true; done
  rmdir "$dir" 2>/dev/null || true
}

# CPU time (ns) every thread of the processes $@ has run (from schedstat: finer than ticks).
cpu_ns() {
  local pid total=0 ns
  for pid in "$@"; do
    ns=$(cat /proc/"$pid"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}')
    total=$((total + ${ns:-0}))
  done
  echo "$total"
}

# For a duel: sets proxy_cpu (the last CPU, for the two contenders) and load_cpus (the others,
# for the load and the back-ends); exits unless there are 2 CPUs at least. $1 names the
# contenders in the message.
duel_cpus() {
  local cpus
  cpus=$(nproc)
  if [ "$cpus" -lt 2 ]; then
    echo "needs 2 CPUs at least (the $1 on one, the load on the others)" >&2
    exit 1
  fi
  proxy_cpu=$((cpus - 1))
  load_cpus="0-$((cpus - 2))"
}

# Processes a script started: `pids+=($!)` after each, and `trap stop_pids EXIT` once; stops
# them all (TERM, then waits) and empties the list.
pids=()
stop_pids() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
