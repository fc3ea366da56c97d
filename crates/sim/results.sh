#!/usr/bin/env bash
# Reproduces crates/sim/RESULTS.md's numbers: every scenario, the seven default policies, three
# seeds, 8 nodes, 200 new clients/s, 10 simulated minutes; plus the T_gat sweep (Figure 3) for
# publishing-static and commerce. Usage: bash crates/sim/results.sh [OUT_DIR] (default out/sim).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-out/sim}
cargo build --release --locked -p capstan-cli
bin=target/release/capstan
start=$(date +%s.%N)
for s in publishing-static publishing-dynamic transaction commerce-secure commerce-mixed commerce; do
  $bin sim "$s" --nodes 8 --rate 200 --duration 10m --replications 3 --seed 1 --quiet --out "$out/$s"
done
end=$(date +%s.%N)
echo "matrix wall time: $(echo "$end - $start" | bc) s" | tee "$out/matrix-wall.txt"
for s in publishing-static commerce; do
  $bin sim "$s" --policies cap --nodes 8 --rate 200 --duration 10m --replications 3 --seed 1 \
    --tgat-sweep 0,1,2,5,10,20 --quiet --out "$out/$s-tgat"
done
