# The duel mode of benches/tls.sh (sourced by it, with its proxies running): two proxies at
# once on one CPU core, under one CPU quota, each saturated by its own load on the other cores.
# Whatever the shared machine does during a round hits both alike, and since the quota keeps
# them the bottleneck, A's req/s over B's is B's CPU time per request over A's. Sequential cells
# (tls.sh's default) compare proxies measured seconds apart, and on a 2-core machine the load
# generator, not the proxy, may be what saturates.
#
#   DUEL="capstan-ecdsa:haproxy-ecdsa capstan-rsa:haproxy-rsa" SCENARIOS=keep-alive bash benches/tls.sh
#   DUEL=capstan-ecdsa:nginx-ecdsa SCENARIOS=h2 ROUNDS=12 SECONDS_PER_RUN=4 bash benches/tls.sh
#   RATE=8000 DUEL=capstan-ecdsa:haproxy-ecdsa SCENARIOS="keep-alive h2" bash benches/tls.sh
#
# PROXY_CPU (default 0.25) is the pair's quota in cores: on a 2-core machine, one core of TLS
# load saturates about a quarter of a core of proxies (each round says how much of the quota
# the pair used). With RATE=N, each proxy instead gets N requests/s from h2load (`--rps`; no
# quota, not the handshake scenario), and the CPU per request compares the two below
# saturation. Needs root (cgroup cpu controller, taskset) and 2 CPUs. Rows of
# $OUT/duels.tsv: round, scenario, A, B, A's and B's requests, A's and B's CPU ns per request
# (every thread and child process).

PROXY_CPU=${PROXY_CPU:-0.25}
RATE=${RATE:-}
duel_cpus proxies

read -r -a pairs <<< "$DUEL"
for pair in "${pairs[@]}"; do
  for name in "${pair%%:*}" "${pair##*:}"; do
    [ -n "${proxy_pid[$name]:-}" ] || { echo "DUEL: unknown proxy $name (one of ${!proxy_pid[*]})" >&2; exit 1; }
  done
done

quota=""
limit=1  # what the pair may use: the quota, or else the whole core
if [ -z "$RATE" ]; then
  limit=$PROXY_CPU
  quota=$(cpu_quota_group "$PROXY_CPU")
  if [ -z "$quota" ]; then
    echo "DUEL needs a CPU quota (root and a cgroup cpu controller), or RATE=N" >&2
    exit 1
  fi
  trap 'cleanup; cpu_quota_remove "$quota"' EXIT
elif [[ " ${scenarios[*]} " == *" handshake "* ]]; then
  echo "RATE: h2load cannot open a connection per request; drop the handshake scenario" >&2
  exit 1
fi

# A proxy's processes: the one started and its children (nginx's workers).
processes_of() { echo "$1" $(pgrep -P "$1" || true); }
for name in "${!proxy_pid[@]}"; do
  for pid in $(processes_of "${proxy_pid[$name]}"); do
    taskset -a -p -c "$proxy_cpu" "$pid" >/dev/null
    [ -z "$quota" ] || echo "$pid" > "$quota"
  done
done
# The back-ends and whatever the load generators start run on the other cores.
for pid in "${pids[@]}"; do
  case " ${proxy_pid[*]} " in *" $pid "*) continue ;; esac
  for p in $(processes_of "$pid"); do taskset -a -p -c "$load_cpus" "$p" >/dev/null; done
done

# CPU time (ns) every thread of every process of proxy $1 has run.
cpu_ns_of() {
  # shellcheck disable=SC2046
  cpu_ns $(processes_of "${proxy_pid[$1]}")
}

# Starts scenario $1's load against proxy $2 in the background, its output to file $3.
start_load() {
  local url="https://localhost:${port[$2]}/1k.html"
  if [ -n "$RATE" ]; then
    case $1 in
      keep-alive) taskset -c "$load_cpus" h2load --h1 -t1 -c"$CONNECTIONS" --rps="$((RATE / CONNECTIONS))" \
                    -D"$SECONDS_PER_RUN" "$url" > "$3" & ;;
      h2) taskset -c "$load_cpus" h2load -t1 -c10 -m10 --rps="$((RATE / 10))" -D"$SECONDS_PER_RUN" "$url" > "$3" & ;;
      *) echo "unknown scenario $1 with RATE" >&2; exit 1 ;;
    esac
    return
  fi
  case $1 in
    keep-alive) taskset -c "$load_cpus" wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" "$url" > "$3" & ;;
    handshake) taskset -c "$load_cpus" wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" -H "Connection: close" "$url" > "$3" & ;;
    h2) taskset -c "$load_cpus" h2load -t1 -c10 -m10 -D"$SECONDS_PER_RUN" "$url" > "$3" & ;;
    *) echo "unknown scenario $1" >&2; exit 1 ;;
  esac
}

# Requests a load's output counts as answered.
answered() {
  awk '/requests in/ {print $1; exit} /^requests: .* succeeded/ {print $8; exit}' "$1"
}

duel_round() {
  local round=$1 scenario=$2 a=$3 b=$4 i
  local -a names=("$a" "$b") before=() loads=() requests=() cpu=()
  # Who starts first alternates, so that neither gets a head start every round.
  [ $((round % 2)) = 0 ] && names=("$b" "$a")
  for i in 0 1; do before[$i]=$(cpu_ns_of "${names[$i]}"); done
  for i in 0 1; do
    start_load "$scenario" "${names[$i]}" "$work/duel-$i.out"
    loads[$i]=$!
  done
  wait "${loads[@]}"
  local spent_total=0
  for i in 0 1; do
    requests[$i]=$(answered "$work/duel-$i.out")
    [ -n "${requests[$i]}" ] && [ "${requests[$i]}" -gt 0 ] || {
      echo "no requests answered by ${names[$i]}:" >&2; cat "$work/duel-$i.out" >&2; exit 1
    }
    local spent=$(( $(cpu_ns_of "${names[$i]}") - before[i] ))
    spent_total=$((spent_total + spent))
    cpu[$i]=$((spent / requests[i]))
  done
  python3 -c "print(f'  the two proxies used {$spent_total / ($SECONDS_PER_RUN * 1e9):.2f} CPU of $limit')" >&2
  if [ "${names[0]}" = "$a" ]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$scenario" "$a" "$b" \
      "${requests[0]}" "${requests[1]}" "${cpu[0]}" "${cpu[1]}"
  else
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$scenario" "$a" "$b" \
      "${requests[1]}" "${requests[0]}" "${cpu[1]}" "${cpu[0]}"
  fi
}

: > "$OUT/duels.tsv"
for round in $(seq "$ROUNDS"); do
  for scenario in "${scenarios[@]}"; do
    for pair in "${pairs[@]}"; do
      echo "round $round/$ROUNDS  $scenario  $pair" >&2
      duel_round "$round" "$scenario" "${pair%%:*}" "${pair##*:}" >> "$OUT/duels.tsv"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/run-info.txt"

how="under a $PROXY_CPU CPU quota"
[ -z "$RATE" ] || how="each offered $RATE requests/s (h2load --rps), no quota"
python3 - "$OUT/duels.tsv" "$ROUNDS" "$SECONDS_PER_RUN" "$how" <<'PY' | tee "$OUT/duel-summary.md"
import math, statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().splitlines() if line]
print(f"\n{sys.argv[2]} rounds × {sys.argv[3]} s, the two proxies of a pair at once on one core, "
      f"{sys.argv[4]}\n")
print("| scenario | A:B | rounds | A's req/s ÷ B's, median (range) | A's CPU/req ÷ B's, median (range) | mean ± s.e. |")
print("|---|---|---:|---:|---:|---:|")
for key in dict.fromkeys((r[1], r[2] + ":" + r[3]) for r in rows):
    sel = [r for r in rows if (r[1], r[2] + ":" + r[3]) == key]
    req = sorted(int(r[4]) / int(r[5]) for r in sel)
    cpu = sorted(int(r[6]) / int(r[7]) for r in sel)
    se = statistics.stdev(cpu) / math.sqrt(len(cpu)) if len(cpu) > 1 else float("nan")
    print(f"| {key[0]} | {key[1]} | {len(sel)} | {statistics.median(req):.3f} ({req[0]:.3f}–{req[-1]:.3f}) "
          f"| {statistics.median(cpu):.3f} ({cpu[0]:.3f}–{cpu[-1]:.3f}) | {statistics.mean(cpu):.3f} ± {se:.3f} |")
PY
echo "raw rounds: $OUT/duels.tsv" >&2
exit 0
