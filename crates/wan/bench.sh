#!/usr/bin/env bash
# The WAN router's benchmark: packets per second forwarded and delay error (actual − intended
# departure) through one path at 0 (no limit), 10, 100 Mbit/s and 1 Gbit/s, with 1,500- and
# 64-byte IP packets, measured with iperf3 (UDP, offered at 95 % of the path's rate, or as fast
# as iperf3 can send for "0"), next to iperf3 directly over loopback in the same run.
#
#   sudo crates/wan/bench.sh [REPETITIONS=3] [SECONDS=4]      → markdown table on stdout
#
# Needs root, iperf3 (apt-get install iperf3) and a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-3}
SECS=${2:-4}
CAPSTAN=${CAPSTAN:-${CARGO_TARGET_DIR:-target}/release/capstan}
OUT=$(mktemp -d /tmp/wan-bench.XXXXXX)
PORT=5299
command -v iperf3 >/dev/null || { echo "iperf3 is not installed (apt-get install iperf3)" >&2; exit 1; }
[ -x "$CAPSTAN" ] || { echo "no $CAPSTAN; cargo build --release first" >&2; exit 1; }

iperf3 -s -p $PORT -D --logfile "$OUT/server.log" --pidfile "$OUT/server.pid"
trap 'kill "$(cat "$OUT/server.pid")" 2>/dev/null || true' EXIT
for i in $(seq 50); do [ -s "$OUT/server.pid" ] && break; sleep 0.1; done

# offered payload rate for iperf3 -b: 95 % of the path's IP rate, in payload bits
offered() { # rate_bits ip_size
  if [ "$1" = 0 ]; then echo 0; else python3 -c "print(int($1*0.95*($2-28)/$2))"; fi
}

echo "uptime before: $(uptime)" >&2
for rep in $(seq "$REPS"); do
  for size in 1500 64; do
    payload=$((size - 28))
    for rate in 0 10000000 100000000 1000000000; do
      b=$(offered $rate $size)
      tag="r${rate}_s${size}_${rep}"
      bw=$([ $rate = 0 ] && echo unlimited || echo "${rate}bit")
      "$CAPSTAN" wan run --quiet --bandwidth "$bw" --stats-out "$OUT/$tag.router.json" -- \
        sh -c "iperf3 -c \$CAPSTAN_WAN_SERVER -p $PORT -u -b $b -l $payload -t $SECS -J > $OUT/$tag.iperf.json" \
        || echo "run $tag failed" >&2
      sleep 0.5
    done
    # Loopback baseline, same sender, no router.
    for rate in 0 1000000000; do
      b=$(offered $rate $size)
      iperf3 -c 127.0.0.1 -p $PORT -u -b "$b" -l $payload -t "$SECS" -J > "$OUT/loop_r${rate}_s${size}_${rep}.iperf.json" || true
      sleep 0.5
    done
  done
done
# TCP bulk (1,500-byte packets, ACKs in the other direction): one stream through the router
# at no limit, 1 Gbit/s and 100 Mbit/s, and directly over loopback.
for rep in $(seq "$REPS"); do
  for bw in unlimited 1gbit 100mbit; do
    "$CAPSTAN" wan run --quiet --bandwidth "$bw" --stats-out "$OUT/tcp_${bw}_${rep}.router.json" -- \
      sh -c "iperf3 -c \$CAPSTAN_WAN_SERVER -p $PORT -t $SECS -J > $OUT/tcp_${bw}_${rep}.iperf.json" \
      || echo "tcp $bw failed" >&2
    sleep 0.5
  done
  iperf3 -c 127.0.0.1 -p $PORT -t "$SECS" -J > "$OUT/tcp_loopback_${rep}.iperf.json" || true
  sleep 0.5
done
echo "uptime after: $(uptime)" >&2

python3 - "$OUT" "$REPS" <<'EOF'
import json, sys, statistics
out, reps = sys.argv[1], int(sys.argv[2])
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
def iperf(p):
    d = load(p)
    if not d or 'end' not in d or 'sum' not in d['end']:
        return None
    s = d['end']['sum']
    secs = s['seconds'] or 1
    return {'sent': s['packets'] / secs, 'recv': (s['packets'] - s['lost_packets']) / secs, 'secs': secs}
def rng(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return 'n/a'
    m = fmt.format(statistics.median(vals))
    return m if len(vals) == 1 else f"{m} [{fmt.format(min(vals))}–{fmt.format(max(vals))}]"
name = {0: 'no limit', 10**7: '10 Mbit/s', 10**8: '100 Mbit/s', 10**9: '1 Gbit/s'}
print("| path | packet | forwarded pps (router) | iperf3 sent pps | received pps | loopback received pps | router CPU µs/packet | router drops | delay error p50 µs | p99 µs | max µs |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for size in (1500, 64):
    for rate in (0, 10**7, 10**8, 10**9):
        col = {k: [] for k in ('fwd', 'sent', 'recv', 'loop', 'cpu', 'drops', 'p50', 'p99', 'max')}
        for rep in range(1, reps + 1):
            i = iperf(f"{out}/r{rate}_s{size}_{rep}.iperf.json")
            r = load(f"{out}/r{rate}_s{size}_{rep}.router.json")
            if rate in (0, 10**9):
                l = iperf(f"{out}/loop_r{rate}_s{size}_{rep}.iperf.json")
                if l:
                    col['loop'].append(l['recv'])
            if i:
                col['sent'].append(i['sent']); col['recv'].append(i['recv'])
            if r and i:
                up, down = r['paths'][0]['up'], r['paths'][0]['down']
                col['fwd'].append(up['packets_out'] / i['secs'])
                col['cpu'].append(r['pacer']['router_cpu_s'] * 1e6 / max(1, up['packets_out'] + down['packets_out']))
                col['drops'].append(sum(up['drops'].values()))
                e = up['delay_error_us']
                col['p50'].append(e['p50']); col['p99'].append(e['p99']); col['max'].append(e['max'])
        c = lambda k, f: rng(col[k], f)
        print(f"| {name[rate]} | {size} B | {c('fwd', '{:,.0f}')} | {c('sent', '{:,.0f}')} | {c('recv', '{:,.0f}')} | {c('loop', '{:,.0f}')} | {c('cpu', '{:.1f}')} | {c('drops', '{:,.0f}')} | {c('p50', '{:.1f}')} | {c('p99', '{:.1f}')} | {c('max', '{:,.0f}')} |")
print()
print("| TCP path | goodput Mbit/s | loopback Mbit/s | forwarded pps (data) | router CPU µs/packet | delay error p50 µs | p99 µs | p99.9 µs | max µs |")
print("|---|---|---|---|---|---|---|---|---|")
for bw in ('unlimited', '1gbit', '100mbit'):
    col = {k: [] for k in ('gp', 'loop', 'fwd', 'cpu', 'p50', 'p99', 'p999', 'max')}
    for rep in range(1, reps + 1):
        d, r = load(f"{out}/tcp_{bw}_{rep}.iperf.json"), load(f"{out}/tcp_{bw}_{rep}.router.json")
        l = load(f"{out}/tcp_loopback_{rep}.iperf.json")
        if l and 'end' in l:
            col['loop'].append(l['end']['sum_received']['bits_per_second'] / 1e6)
        if d and r and 'end' in d:
            secs = d['end']['sum_received']['seconds']
            col['gp'].append(d['end']['sum_received']['bits_per_second'] / 1e6)
            up, down = r['paths'][0]['up'], r['paths'][0]['down']
            col['fwd'].append(up['packets_out'] / secs)
            col['cpu'].append(r['pacer']['router_cpu_s'] * 1e6 / max(1, up['packets_out'] + down['packets_out']))
            e = up['delay_error_us']
            for k in ('p50', 'p99', 'p999', 'max'):
                col[k].append(e[k])
    c = lambda k, f: rng(col[k], f)
    print(f"| {bw} | {c('gp', '{:,.0f}')} | {c('loop', '{:,.0f}')} | {c('fwd', '{:,.0f}')} | {c('cpu', '{:.1f}')} | {c('p50', '{:.1f}')} | {c('p99', '{:.1f}')} | {c('p999', '{:,.0f}')} | {c('max', '{:,.0f}')} |")
print(f"\nraw results: {out}")
EOF
