#!/usr/bin/env bash
# HTTP/3 against HTTP/2 over TLS through the same switch (issue 34: "HTTP/3 CPU per request ≤
# 1.5 × the switch's own HTTP/2-over-TLS CPU per request, same run, same object, same
# concurrency"). No Debian package serves HTTP/3 to compare with (nginx 1.22 and HAProxy 2.6 are
# built without QUIC), so the peer is the switch's own HTTP/2.
#
# One `capstan origin` (real resources, bodies in memory) behind one switch with a TLS listener
# that has `quic = true` (the test PKI's localhost certificate) and, with MODE=hit (default), a
# cache, so every request is a hit and the protocol is most of the cost; MODE=proxy: no cache,
# every request goes to the node. ROUNDS times, alternating, `capstan bench` open loop at RATE
# requests/s over CONNECTIONS connections × STREAMS concurrent streams each, for SECONDS_RUN
# seconds, with --http2 and with --http3. CPU time of the switch (every thread, schedstat) ÷
# responses = µs per request; the ratio h3 ÷ h2 per round, then median and range.
#
#   bash benches/http3.sh
#   MODE=proxy ROUNDS=5 RATE=3000 bash benches/http3.sh
#   CAPSTAN=/path/to/capstan bash benches/http3.sh   # another build, no cargo
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib.sh
source benches/lib.sh

MODE=${MODE:-hit}
ROUNDS=${ROUNDS:-3}
SECONDS_RUN=${SECONDS_RUN:-8}
RATE=${RATE:-2000}
CONNECTIONS=${CONNECTIONS:-4}
STREAMS=${STREAMS:-8}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET_DIR/bench-http3}
ORIGIN=127.0.0.1:18690
LISTEN=127.0.0.1:18643
capstan=$(capstan_binary)
mkdir -p "$OUT"
pki=$PWD/examples/tls

trap stop_pids EXIT

"$capstan" origin --listen "$ORIGIN" --name origin --tree cap --seed 1 --files 200 \
  --resources real --data-dir "$OUT/origin-data" --threads 1 > "$OUT/origin.log" 2>&1 &
pids+=($!)
"$capstan" origin --tree cap --seed 1 --files 200 --print-filelist > "$OUT/filelist"
path=$(awk '$1 ~ /^\// { s = $NF; sub(/^#/, "", s); d = s - 1024; if (d < 0) d = -d; print d, $1 }' \
         "$OUT/filelist" | sort -n | head -1 | awk '{print $2}')
{
  printf 'listen = ["127.0.0.1:18680"]\nadmin = "127.0.0.1:18699"\n[policy]\nname = "round-robin"\n'
  printf '[[node]]\nname = "origin"\naddress = "%s"\n' "$ORIGIN"
  [ "$MODE" = hit ] && printf '[cache]\nmemory = "64MiB"\n'
  printf '[[listener]]\naddress = "%s"\nquic = true\n' "$LISTEN"
  printf '[[listener.certificate]]\ncert = "%s/localhost.pem"\nkey = "%s/localhost.key"\n' "$pki" "$pki"
} > "$OUT/switch.toml"
"$capstan" check "$OUT/switch.toml" > /dev/null
"$capstan" serve --config "$OUT/switch.toml" > "$OUT/switch.log" 2>&1 &
pid_switch=$!
pids+=("$pid_switch")
# By IP: no SNI, so the default (localhost) certificate; --insecure on both sides of the duel.
url="https://$LISTEN$path"
for _ in $(seq 200); do
  curl -sk -o /dev/null --max-time 1 "$url" && break
  sleep 0.05
done
for _ in 1 2 3; do curl -sk -o /dev/null "$url"; done

run() { # --http2|--http3 → responses errors
  "$capstan" bench "$url" "$1" --insecure \
    --rate "$RATE" -k -c "$CONNECTIONS" --streams "$STREAMS" -d "${SECONDS_RUN}s" -q \
    --json "$OUT/run.json" > "$OUT/run.out" 2>&1 || { cat "$OUT/run.out" >&2; exit 1; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["completed"], r.get("errors_total", 0), r["latency_ms"]["corrected"]["p99"])' "$OUT/run.json"
}
printf 'round\th2_us\th3_us\tratio\th2_p99_ms\th3_p99_ms\terrors\n' > "$OUT/http3.tsv"
for round in $(seq "$ROUNDS"); do
  c0=$(cpu_ns "$pid_switch"); read -r n2 e2 p2 < <(run --http2); c1=$(cpu_ns "$pid_switch")
  read -r n3 e3 p3 < <(run --http3); c2=$(cpu_ns "$pid_switch")
  python3 -c "import sys
h2, h3 = $((c1 - c0)) / $n2 / 1e3, $((c2 - c1)) / $n3 / 1e3
print(f'$round\t{h2:.2f}\t{h3:.2f}\t{h3 / h2:.3f}\t$p2\t$p3\t$((e2 + e3))')" >> "$OUT/http3.tsv"
  tail -n 1 "$OUT/http3.tsv" >&2
done
python3 - "$OUT/http3.tsv" "$MODE" "$RATE" "$CONNECTIONS" "$STREAMS" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def m(k):
    v = [float(r[k]) for r in rows]
    return f"median {statistics.median(v):.2f} (range {min(v):.2f}-{max(v):.2f})"
print(f"switch CPU µs per request, {sys.argv[2]}, {sys.argv[3]} requests/s, {sys.argv[4]} connections × {sys.argv[5]} streams, {len(rows)} rounds:")
print(f"  HTTP/2 over TLS: {m('h2_us')}   p99 {m('h2_p99_ms')} ms")
print(f"  HTTP/3 (QUIC):   {m('h3_us')}   p99 {m('h3_p99_ms')} ms")
print(f"  h3 ÷ h2: {m('ratio')}   (goal ≤ 1.5)")
print(f"  errors: {sum(int(r['errors']) for r in rows)}")
PY
