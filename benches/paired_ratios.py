#!/usr/bin/env python3
"""Capstan against each peer, round by round, pooled over several benches/tls.sh runs.

On a shared machine every proxy's rate swings between rounds; a ratio taken within one round
(Capstan and the peer measured minutes apart, not hours) cancels most of that.

    python3 benches/paired_ratios.py target/bench-tls/runs.tsv [more runs.tsv ...]

Prints, per scenario, key and peer: the median and range of Capstan's req/s over the peer's,
how many rounds reached 1.0, and the median ratio of CPU time per request.
"""
import collections
import statistics
import sys


def rounds(path):
    """{(run, round, scenario): {proxy: (req/s, cpu µs per request)}} of one runs.tsv."""
    table = collections.defaultdict(dict)
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        col = {name: i for i, name in enumerate(header)}
        for line in f:
            p = line.rstrip("\n").split("\t")
            key = (path, p[col["round"]], p[col["scenario"]])
            table[key][p[col["proxy"]]] = (float(p[col["rps"]]), float(p[col["cpu_us_per_req"]]))
    return table


def main(paths):
    if not paths:
        sys.exit(__doc__.strip().splitlines()[-4].strip())
    rate = collections.defaultdict(list)
    cpu = collections.defaultdict(list)
    for path in paths:
        for (_, _, scenario), cell in rounds(path).items():
            for key in ("ecdsa", "rsa"):
                ours = cell.get(f"capstan-{key}")
                for peer in ("haproxy", "nginx"):
                    theirs = cell.get(f"{peer}-{key}")
                    if ours and theirs and theirs[0] > 0 and theirs[1] > 0:
                        rate[(scenario, key, peer)].append(ours[0] / theirs[0])
                        cpu[(scenario, key, peer)].append(ours[1] / theirs[1])
    print("| scenario | key | peer | rounds | req/s ratio, median (range) | rounds ≥ 1.0 | CPU/req ratio, median |")
    print("|---|---|---|---:|---:|---:|---:|")
    for k in sorted(rate):
        r = sorted(rate[k])
        at_least = sum(1 for x in r if x >= 1.0)
        print(f"| {k[0]} | {k[1]} | {k[2]} | {len(r)} | {statistics.median(r):.2f} "
              f"({r[0]:.2f}–{r[-1]:.2f}) | {at_least}/{len(r)} | {statistics.median(cpu[k]):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
