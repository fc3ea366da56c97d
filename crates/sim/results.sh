#!/usr/bin/env bash
# Regenerates crates/sim/BENCHMARKS-papers.md: runs every scenario with the seven default policies (three
# seeds, 8 nodes, 200 new clients/s, 10 simulated minutes), the T_gat sweeps of the paper's
# Figure 3 (publishing and commerce, with CAP, RAN and RR as flat baselines), the node-count and
# arrival-rate sweeps of its Table 1 ranges, and the commerce variants that explain why CAP is not
# best here; then renders crates/sim/BENCHMARKS-papers.template.md with the numbers into BENCHMARKS-papers.md.
# Usage: bash crates/sim/results.sh [OUT_DIR] (default out/sim).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-out/sim}
mkdir -p "$out"
cargo build --release --locked -p capstan-cli
bin=${CARGO_TARGET_DIR:-target}/release/capstan
common=(--rate 200 --duration 10m --replications 3 --seed 1 --quiet)
start=$(date +%s.%N)
for s in publishing-static publishing-dynamic transaction commerce-secure commerce-mixed commerce; do
  $bin sim "$s" --nodes 8 "${common[@]}" --out "$out/$s"
done
end=$(date +%s.%N)
printf '%.0f s (load average %s)\n' "$(echo "$end - $start" | bc)" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/matrix-wall.txt"
# Figure 3a/3b: WRR_num and WRR_time against T_gat; CAP, RAN and RR do not gather state.
for s in publishing-static commerce; do
  $bin sim "$s" --policies cap,random,round-robin --nodes 8 "${common[@]}" \
    --tgat-sweep 0,1,2,5,10,20 --out "$out/$s-tgat"
done
# Table 1's ranges: 2–32 nodes (at 100 clients/s, the range's low end) and 100–300 clients/s.
sweep_policies=cap,weighted-round-robin,lard,round-robin,random
$bin sim commerce --policies $sweep_policies --nodes-sweep 2,4,8,16,32 \
  --rate 100 --duration 10m --replications 3 --seed 1 --quiet --out "$out/commerce-nodes"
$bin sim commerce --policies $sweep_policies --nodes 8 --rate-sweep 100,150,200,250,300 \
  --duration 10m --replications 3 --seed 1 --quiet --out "$out/commerce-rate"
# Why LARD, not CAP, is best on commerce here: one paper-silent or paper-given factor at a time.
variant() { # NAME then --set arguments
  local name=$1; shift
  $bin sim commerce --policies cap,weighted-round-robin,lard,round-robin --nodes 8 \
    "${common[@]}" "$@" --out "$out/commerce-$name"
}
variant ssl-x10 --set node.ssl.rsa_kbit_per_s=3.85 --set node.ssl.des3_kbit_per_s=4688.6
variant ssl-x30 --set node.ssl.rsa_kbit_per_s=1.283 --set node.ssl.des3_kbit_per_s=1562.9
variant cache-all --set node.cache_fraction=1.0
variant zipf-0.6 --set workload.zipf-alpha=0.6
variant ssl-x10-cache-all --set node.ssl.rsa_kbit_per_s=3.85 \
  --set node.ssl.des3_kbit_per_s=4688.6 --set node.cache_fraction=1.0
$bin sim results-md --template crates/sim/BENCHMARKS-papers.template.md --results "$out" \
  --out crates/sim/BENCHMARKS-papers.md
echo "wrote crates/sim/BENCHMARKS-papers.md from $out"
