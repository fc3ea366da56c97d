#!/usr/bin/env bash
# Soak (issue 12): DURATION (default 1 h) of mixed load through the switch — keep-alive clients
# at KA_RATE/s and a connection per request at CLOSE_RATE/s, over static files and a short CGI —
# while one of four nodes is SIGKILLed every RESTART_EVERY seconds (in turn) and restarted
# DOWN_FOR seconds later. Every 10 s: the switch's RSS, open descriptors, open client
# connections and requests in flight at the nodes. Writes $OUT/samples.csv, $OUT/soak.svg (RSS
# and descriptors over time, node restarts marked) and prints a summary: RSS first/last/max after
# warm-up, descriptors, and the clients' answers by status. Every request is an idempotent GET,
# so a node's death should cost no client an error (connect failures and resets are retried).
#
#   bash benches/soak.sh
#   DURATION=600 RESTART_EVERY=60 bash benches/soak.sh      # a 10-minute version
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

DURATION=${DURATION:-3600}
RESTART_EVERY=${RESTART_EVERY:-180}
DOWN_FOR=${DOWN_FOR:-20}
KA_RATE=${KA_RATE:-150}
CLOSE_RATE=${CLOSE_RATE:-50}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET_DIR/bench-soak}
PORTS=(19401 19402 19403 19404)
LISTEN=18480
ADMIN=18490

capstan=$(capstan_binary)
rm -rf "$OUT" && mkdir -p "$OUT"
pids=()
declare -A node_pids
stop_all() {
  for pid in "${pids[@]}" "${node_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_all EXIT

start_node() {
  "$capstan" origin --listen "127.0.0.1:$1" --name "o${1: -1}" --resources emulated \
    --cores 1 --threads 1 >> "$OUT/origin-$1.log" 2>&1 &
  node_pids[$1]=$!
}

for port in "${PORTS[@]}"; do start_node "$port"; done
for port in "${PORTS[@]}"; do wait_port "$port"; done
{
  printf 'listen = ["127.0.0.1:%s"]\nadmin = "127.0.0.1:%s"\n' "$LISTEN" "$ADMIN"
  printf '[health]\ncheck_path = "/file5k.html"\ncheck_interval = "1s"\n'
  for port in "${PORTS[@]}"; do
    printf '[[node]]\nname = "o%s"\naddress = "127.0.0.1:%s"\n' "${port: -1}" "$port"
  done
} > "$OUT/switch.toml"
"$capstan" serve --config "$OUT/switch.toml" --threads 1 > "$OUT/switch.log" 2>&1 &
switch=$!
pids+=($switch)
wait_port "$LISTEN"
printf '/file5k.html\n/file500.html\n/file50k.html\n/cgi-bin/cpu_light.cgi\n' > "$OUT/urls.txt"

start=$(date +%s)
# Nodes are killed and restarted under the load: their failed requests are measured, not fatal.
common=(--urls "$OUT/urls.txt" --duration "${DURATION}s" --timeout 15s --drain 15s --max-error-rate 1 -q)
"$capstan" bench "http://127.0.0.1:$LISTEN/" --rate "$KA_RATE" --keepalive --connections 32 \
  "${common[@]}" --json "$OUT/keepalive.json" > "$OUT/keepalive.log" 2>&1 &
ka=$!
"$capstan" bench "http://127.0.0.1:$LISTEN/" --rate "$CLOSE_RATE" "${common[@]}" \
  --json "$OUT/close.json" > "$OUT/close.log" 2>&1 &
close=$!
pids+=($ka $close)

echo "t,rss_kb,fds,client_connections,in_flight,event" > "$OUT/samples.csv"
sample() {
  local event=$1 now rss fds conns active
  now=$(( $(date +%s) - start ))
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$switch/status")
  fds=$(find "/proc/$switch/fd" -mindepth 1 2>/dev/null | wc -l)
  local metrics
  metrics=$(curl -s --max-time 2 "http://127.0.0.1:$ADMIN/metrics" || true)
  conns=$(awk '/^capstan_client_connections_open / {print $2}' <<< "$metrics")
  active=$(awk '/^capstan_node_active_requests/ {s += $2} END {print s + 0}' <<< "$metrics")
  echo "$now,$rss,$fds,${conns:-0},$active,$event" >> "$OUT/samples.csv"
}

victim=0
next_restart=$RESTART_EVERY
while kill -0 "$ka" 2>/dev/null || kill -0 "$close" 2>/dev/null; do
  elapsed=$(( $(date +%s) - start ))
  event=
  if (( elapsed >= next_restart && elapsed + DOWN_FOR < DURATION )); then
    port=${PORTS[$victim]}
    kill -KILL "${node_pids[$port]}" 2>/dev/null || true
    event="kill o${port: -1}"
    ( sleep "$DOWN_FOR"; start_node "$port"; echo "${node_pids[$port]}" > "$OUT/restarted-$port" ) &
    victim=$(( (victim + 1) % ${#PORTS[@]} ))
    next_restart=$(( next_restart + RESTART_EVERY ))
  fi
  sample "$event"
  for port in "${PORTS[@]}"; do
    if [[ -f $OUT/restarted-$port ]]; then
      node_pids[$port]=$(cat "$OUT/restarted-$port"); rm -f "$OUT/restarted-$port"
    fi
  done
  if (( elapsed % 300 < 10 )); then
    echo "soak: ${elapsed}s of ${DURATION}s, RSS $(tail -1 "$OUT/samples.csv" | cut -d, -f2) kB" >&2
  fi
  sleep 10
done
wait "$ka" "$close" || true

python3 - "$OUT" <<'PY'
import csv, json, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/samples.csv")))
t = [int(r["t"]) for r in rows]
rss = [int(r["rss_kb"]) / 1024 for r in rows]
fds = [int(r["fds"]) for r in rows]
kills = [(int(r["t"]), r["event"]) for r in rows if r["event"]]
warm = [v for tt, v in zip(t, rss) if tt >= 60] or rss
answers = {}
for name in ("keepalive", "close"):
    b = json.load(open(f"{out}/{name}.json"))
    answers[name] = {"offered": b["offered"], "status": b["status"], "errors": b["errors"]}
print(f"RSS MB: first {rss[0]:.1f}, after warm-up first {warm[0]:.1f} / last {warm[-1]:.1f} / "
      f"max {max(warm):.1f}; descriptors first {fds[0]}, last {fds[-1]}, max {max(fds)}; "
      f"{len(kills)} node kills")
for name, a in answers.items():
    print(f"{name}: offered {a['offered']}, status {a['status']}, errors {a['errors']}")
# A small SVG: RSS (MB, left axis) and descriptors (right axis) over time, kills as ticks.
W, H, L, R, T, B = 800, 300, 60, 60, 20, 40
tmax = max(t) or 1
rmax = max(rss) * 1.2 or 1
fmax = max(fds) * 1.2 or 1
def x(v): return L + (W - L - R) * v / tmax
def y(v, top): return H - B - (H - T - B) * v / top
def path(vals, top): return " ".join(f"{'M' if i == 0 else 'L'}{x(tt):.1f},{y(v, top):.1f}" for i, (tt, v) in enumerate(zip(t, vals)))
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
       f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
       f'<line x1="{W-R}" y1="{T}" x2="{W-R}" y2="{H-B}" stroke="black"/>']
for tt, ev in kills:
    svg.append(f'<line x1="{x(tt):.1f}" y1="{T}" x2="{x(tt):.1f}" y2="{H-B}" stroke="#ccc"><title>{ev}</title></line>')
svg.append(f'<path d="{path(rss, rmax)}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
svg.append(f'<path d="{path(fds, fmax)}" fill="none" stroke="#ff7f0e" stroke-width="2"/>')
for i in range(5):
    v = rmax * i / 4; f = fmax * i / 4; tt = tmax * i / 4
    svg.append(f'<text x="{L-5}" y="{y(v, rmax)+4:.1f}" text-anchor="end" fill="#1f77b4">{v:.0f}</text>')
    svg.append(f'<text x="{W-R+5}" y="{y(f, fmax)+4:.1f}" fill="#ff7f0e">{f:.0f}</text>')
    svg.append(f'<text x="{x(tt):.1f}" y="{H-B+15}" text-anchor="middle">{tt/60:.0f} min</text>')
svg.append(f'<text x="{L}" y="{T-5}" fill="#1f77b4">switch RSS (MB)</text>')
svg.append(f'<text x="{W-R}" y="{T-5}" text-anchor="end" fill="#ff7f0e">open descriptors</text>')
svg.append(f'<text x="{W/2}" y="{H-5}" text-anchor="middle">grey: a node SIGKILLed (restarted 20 s later)</text>')
svg.append('</svg>')
open(f"{out}/soak.svg", "w").write("\n".join(svg))
print(f"plot: {out}/soak.svg")
PY
