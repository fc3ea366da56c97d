#!/usr/bin/env bash
# What the access log costs: Capstan with no log, a Combined log file and a JSON log file, side
# by side with nginx as a reverse proxy without and with its own (buffered) access log, in one
# run on this machine.
#
# Four nginx back-ends serve a 1 KB file. wrk drives each proxy in turn, every round visiting
# every proxy once so that noise from the shared machine spreads evenly; the summary shows
# medians over the rounds, each configuration's throughput relative to the same proxy without a
# log, and the proxy's CPU time per request (from /proc, user + system). Then the same ratios
# taken within each round (a logging proxy against the same proxy without a log, measured
# seconds apart), whose median and range are steadier than a ratio of medians on a shared
# machine. Odd rounds visit the proxies in order, even rounds in reverse, so that drift during
# a round favours neither side. `capstan-off-b` is a second Capstan without a log, the same
# binary and configuration as `capstan-off`: its ratio to `capstan-off` is what the machine's
# noise alone makes of two equal proxies, and the paired base of a logging Capstan is the
# geometric mean of the two.
#
#   bash benches/access_log.sh              # 3 rounds × 8 s per cell, 1 worker thread each
#   ROUNDS=5 SECONDS_PER_RUN=10 bash benches/access_log.sh
#   CAPSTAN=/path/to/capstan bash benches/access_log.sh    # skip the build
#   PROXIES="capstan-off capstan-combined" SCENARIOS=keep-alive ROUNDS=20 SECONDS_PER_RUN=3 \
#     bash benches/access_log.sh            # many short paired rounds of one comparison
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-8}
THREADS=${THREADS:-1}
CONNECTIONS=${CONNECTIONS:-50}
OUT=${OUT:-${CARGO_TARGET_DIR:-target}/bench-access-log}

need_packages nginx wrk

capstan=$(capstan_binary)
mkdir -p "$OUT"
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

nginx_backends_conf "$work" 19101
mkdir -p "$work/logs"
chmod 777 "$work/logs"

# nginx as the peer: the same proxy without and with its access log (buffered, as nginx
# recommends for busy servers).
nginx_proxy() {
  local name=$1 port=$2 log=$3
  cat > "$work/$name.conf" <<CONF
worker_processes $THREADS;
daemon off;
pid $work/$name.pid;
error_log $work/$name.err warn;
events { worker_connections 8192; }
http {
  $log
  keepalive_requests 10000000;
  $(nginx_upstream 19101)
  server {
    listen 127.0.0.1:$port;
    $(nginx_proxy_location)
  }
}
CONF
}
nginx_proxy nginx-off 18192 "access_log off;"
nginx_proxy nginx-combined 18193 "access_log $work/logs/nginx.log combined buffer=64k flush=1s;"

capstan_config() {
  local name=$1 port=$2 log=$3
  {
    echo "listen = [\"127.0.0.1:$port\"]"
    echo "$log"
    capstan_nodes 19101
  } > "$work/$name.toml"
}
capstan_config capstan-off 18190 ""
capstan_config capstan-off-b 18195 ""
capstan_config capstan-combined 18191 "$(printf '[access_log]\npath = "%s"\nformat = "combined"' "$work/logs/combined.log")"
capstan_config capstan-json 18194 "$(printf '[access_log]\npath = "%s"\nformat = "json"' "$work/logs/json.log")"

nginx -c "$work/backends.conf" & pids+=($!)
for p in 19101 19102 19103 19104; do wait_port $p; done
declare -A proxy_pid
for name in capstan-off capstan-off-b capstan-combined capstan-json; do
  RUST_LOG=warn "$capstan" serve --threads "$THREADS" --config "$work/$name.toml" &
  proxy_pid[$name]=$!
done
for name in nginx-off nginx-combined; do
  nginx -c "$work/$name.conf" &
  proxy_pid[$name]=$!
done
pids+=("${proxy_pid[@]}")
for p in 18190 18191 18192 18193 18194 18195; do wait_port $p; done

all_proxies=("capstan-off:18190" "capstan-off-b:18195" "capstan-combined:18191" "capstan-json:18194" "nginx-off:18192" "nginx-combined:18193")
all_scenarios=("keep-alive:/1k.html:" "close:/1k.html:Connection: close")
# PROXIES and SCENARIOS pick by name (default: all).
pick() {
  local wanted=$1; shift
  local item
  for item in "$@"; do
    if [ -z "$wanted" ] || [[ " $wanted " == *" ${item%%:*} "* ]]; then echo "$item"; fi
  done
}
mapfile -t proxies < <(pick "${PROXIES:-}" "${all_proxies[@]}")
mapfile -t scenarios < <(pick "${SCENARIOS:-}" "${all_scenarios[@]}")
if [ "${#proxies[@]}" = 0 ] || [ "${#scenarios[@]}" = 0 ]; then
  echo "PROXIES must name some of: capstan-off capstan-off-b capstan-combined capstan-json nginx-off nginx-combined;" \
    "SCENARIOS some of: keep-alive close" >&2
  exit 2
fi
clk_tck=$(getconf CLK_TCK)

results="$OUT/runs.tsv"
printf 'round\tscenario\tproxy\trps\tp50_ms\tp99_ms\terrors\tcpu_us_per_req\n' > "$results"
for round in $(seq "$ROUNDS"); do
  for scenario in "${scenarios[@]}"; do
    IFS=: read -r sname path header <<<"$scenario"
    order=("${proxies[@]}")
    if [ $((round % 2)) = 0 ]; then
      for ((i = ${#proxies[@]} - 1, j = 0; i >= 0; i--, j++)); do order[j]=${proxies[i]}; done
    fi
    for proxy in "${order[@]}"; do
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

echo "log lines written: $(cat "$work"/logs/combined.log | wc -l) combined, $(cat "$work"/logs/json.log | wc -l) json, $(cat "$work"/logs/nginx.log 2>/dev/null | wc -l) nginx" >&2
python3 - "$results" "$ROUNDS" "$SECONDS_PER_RUN" "$THREADS" "$CONNECTIONS" <<'PY' | tee "$OUT/summary.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
rounds, secs, threads, conns = sys.argv[2:6]
print(f"{rounds} rounds × {secs} s, {threads} worker thread(s) per proxy, wrk -t1 -c{conns}; medians (min–max of req/s)\n")
print("| scenario | proxy | req/s | range | vs same proxy, no log | p50 ms | p99 ms | proxy CPU µs/req | errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for scenario in dict.fromkeys(r["scenario"] for r in rows):
    med = {}
    for proxy in dict.fromkeys(r["proxy"] for r in rows):
        cell = [r for r in rows if r["scenario"] == scenario and r["proxy"] == proxy]
        med[proxy] = {k: statistics.median(float(r[k]) for r in cell) for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req")}
        med[proxy]["lo"] = min(float(r["rps"]) for r in cell)
        med[proxy]["hi"] = max(float(r["rps"]) for r in cell)
        med[proxy]["errors"] = sum(int(r["errors"]) for r in cell)
    for proxy, m in med.items():
        base = med.get(proxy.split("-")[0] + "-off")
        versus = f"{m['rps'] / base['rps']:.3f}" if base else "–"
        print(f"| {scenario} | {proxy} | {m['rps']:.0f} | {m['lo']:.0f}–{m['hi']:.0f} | {versus} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['cpu_us_per_req']:.1f} | {m['errors']} |")
# Within each round: a logging proxy against the same proxy without a log (for Capstan the
# geometric mean of its two copies without one, when both ran), and the second copy against
# the first (the noise floor).
cells = {(r["round"], r["scenario"], r["proxy"]): r for r in rows}
def base_of(rnd, scenario, proxy):
    if proxy == "capstan-off-b":
        names = ["capstan-off"]
    elif proxy.startswith("capstan-"):
        names = ["capstan-off", "capstan-off-b"]
    else:
        names = [proxy.split("-")[0] + "-off"]
    found = [cells[(rnd, scenario, n)] for n in names if (rnd, scenario, n) in cells]
    found = [b for b in found if b["proxy"] != proxy and float(b["rps"]) > 0 and float(b["cpu_us_per_req"]) > 0]
    if not found:
        return None
    geo = lambda key: statistics.geometric_mean(float(b[key]) for b in found)
    return geo("rps"), geo("cpu_us_per_req")
paired = {}
for (rnd, scenario, proxy), r in cells.items():
    if proxy in ("capstan-off", "nginx-off"):
        continue
    base = base_of(rnd, scenario, proxy)
    if base is None:
        continue
    pair = paired.setdefault((scenario, proxy), ([], []))
    pair[0].append(float(r["rps"]) / base[0])
    pair[1].append(float(r["cpu_us_per_req"]) / base[1])
if paired:
    print("\nPaired within each round, against the same proxy without a log (capstan-off-b: against")
    print("capstan-off, the noise floor):\n")
    print("| scenario | proxy | rounds | req/s ratio, median (range) | geometric mean | CPU/req ratio, median (range) | geometric mean |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (scenario, proxy), (rate, cpu) in paired.items():
        rate.sort(); cpu.sort()
        print(f"| {scenario} | {proxy} | {len(rate)} | {statistics.median(rate):.3f} ({rate[0]:.3f}–{rate[-1]:.3f}) | {statistics.geometric_mean(rate):.3f} "
              f"| {statistics.median(cpu):.3f} ({cpu[0]:.3f}–{cpu[-1]:.3f}) | {statistics.geometric_mean(cpu):.3f} |")
PY
echo "raw runs: $results" >&2
