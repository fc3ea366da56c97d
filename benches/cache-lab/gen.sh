#!/bin/bash
# Usage: bash benches/cache-lab/gen.sh [BIN] [DIR]. Generator checks of issue 14: (a) 1,600 robots at 1 req/s (the mixed test's peak, 1,600 req/s)
# for 20 s, thesis content mix, origin think time normal(0.3 s, 0.1 s); (b) best-effort robots
# asking small (100 B) cached objects as fast as answered — both through `capstan serve` with
# its cache in front of `capstan origin`; 3 rounds each; the generator's CPU from --json.
set -u
B=$(realpath "${1:-target/release/capstan}")
D=${2:-cache-lab-gen}; mkdir -p "$D"
cd "$D"
cat > serve.toml <<T
listen = ["127.0.0.1:18481"]
admin = "127.0.0.1:18482"
[policy]
name = "round-robin"
[[node]]
name = "origin"
address = "127.0.0.1:18480"
[admission]
limit = "off"
[cache]
memory = "64MiB"
policy = "lru"
max_object = "8MiB"
T
cat > peak.toml <<T
seed = 1
robots = 1600
req_rate = 1.0
open_conn_limit = 4
cache_size = "64MB"
working_set_length = "5s"
popularity = "uniform"
[[phase]]
name = "top"
load = "100%"
recurrence = "95%"
duration = "20s"
T
cat > hits.toml <<T
seed = 1
robots = 64
open_conn_limit = 1
cache_size = "64MB"
working_set_length = "1s"
popularity = "uniform"
think = { dist = "const", value = 0.0 }
[[content]]
name = "img"
share = 1.0
size = { dist = "const", value = 100.0 }
cachable = 1.0
life = { dist = "const", value = 1e9 }
ext = ".gif"
[[phase]]
name = "warm"
load = "100%"
recurrence = "50%"
duration = "2s"
[[phase]]
name = "top"
load = "100%"
recurrence = "100%"
duration = "15s"
T
$B origin --listen 127.0.0.1:18480 --name origin --threads 1 --seed 1 > origin.log 2>&1 &
OP=$!
$B serve --config serve.toml --threads 2 > serve.log 2>&1 &
SP=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18481/pg/w0/other/0_16_u.bin && break; sleep 0.2; done
for r in 1 2 3; do
  for w in peak hits; do
    echo "== $w round $r load $(cut -d' ' -f1-3 /proc/loadavg)"
    s0=$(awk '{print $14+$15}' /proc/$SP/stat)
    $B bench http://127.0.0.1:18481/ --polygraph $w.toml --json $w-$r.json --duration 120s > $w-$r.txt 2>&1
    s1=$(awk '{print $14+$15}' /proc/$SP/stat)
    python3 - $w-$r.json $((s1-s0)) <<'P'
import json,sys
r=json.load(open(sys.argv[1])); p=r['phases'][-1]
print(f"generator CPU {r['generator_cpu_percent']} % of a core over {r['duration_s']:.1f} s; phase {p['name']}: offered {p['offered_rps']:.0f}/s, {p['throughput_rps']:.0f} responses/s, DHR {100*p['dhr']:.1f} %, hit p50 {p['hit_ms']['p50']} ms p99 {p['hit_ms']['p99']} ms, errors {sum(p['errors'].values())}; capstan serve CPU {int(sys.argv[2])/100:.2f} s")
P
  done
done
kill $SP $OP; wait
