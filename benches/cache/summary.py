#!/usr/bin/env python3
"""Rows and tables for benches/cache.sh.

  wrk WRK_OUT ROUND PATH BYTES PROXY CPU_TICKS CLK_TCK ORIGIN_REQUESTS   one hit.tsv row
  burst BURST_JSON ROUND PROXY ORIGIN_REQUESTS                          one miss.tsv row
  fixed BENCH_JSON ROUND PATH BYTES PROXY RATE                          one hit-fixed.tsv row
  report OUT_DIR ROUNDS SECONDS THREADS WRK_THREADS CONNECTIONS CACHE_MB CLIENTS DELAY_MS MEM_CACHE_MB
"""
import csv
import json
import os
import re
import statistics
import sys

SCALE = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}
# Below this share of requests answered without the origin, a contender is not caching.
MIN_HIT_RATIO = 0.95
PEERS = ("varnish", "nginx")


def wrk_row(path, rnd, obj, size, proxy, ticks, clk_tck, origin_requests):
    text = open(path).read()

    def find(pattern):
        m = re.search(pattern, text, re.MULTILINE)
        if not m:
            sys.exit(f"wrk output lacks {pattern!r}:\n{text}")
        return m.group(1)

    def ms(v):
        m = re.match(r"([\d.]+)(us|ms|s|m|h)$", v)
        if not m:
            sys.exit(f"cannot read wrk latency {v!r} in:\n{text}")
        return float(m.group(1)) * SCALE[m.group(2)]

    rps = float(find(r"Requests/sec:\s+([\d.]+)"))
    requests = int(find(r"(\d+) requests in"))
    errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = (sum(int(x) for x in errs.groups()) if errs else 0) + (int(non2xx.group(1)) if non2xx else 0)
    cpu_us = float(ticks) / float(clk_tck) * 1e6 / max(requests, 1)
    p50 = ms(find(r"^\s+50%\s+(\S+)"))
    p99 = ms(find(r"^\s+99%\s+(\S+)"))
    print("\t".join(str(x) for x in (
        rnd, obj, size, proxy, f"{rps:.0f}", f"{p50:.3f}", f"{p99:.3f}", errors, f"{cpu_us:.2f}",
        requests, origin_requests)))


def burst_row(path, rnd, proxy, origin_requests):
    b = json.load(open(path))
    non200 = sum(n for s, n in b["statuses"].items() if s != "200")
    fmt = lambda v: "" if v is None else f"{v:.1f}"
    verdicts = " ".join(f"{k}={n}" for k, n in sorted(b["verdicts"].items()))
    print("\t".join(str(x) for x in (
        rnd, proxy, b["clients"], b["ok"], b["errors"], non200, origin_requests,
        fmt(b["ttfb_first_ms"]), fmt(b["ttfb_median_ms"]), fmt(b["ttfb_last_ms"]),
        fmt(b["send_spread_ms"]), verdicts, b["miss_headers"].replace("\t", " "), (b["first_error"] or "").replace("\t", " "))))


def fixed_row(path, rnd, obj, size, proxy, rate):
    b = json.load(open(path))
    lat = b["latency_ms"]["corrected"]
    print("\t".join(str(x) for x in (
        rnd, obj, size, proxy, rate, f"{b['completed_rps']:.0f}", f"{lat['p50']:.3f}",
        f"{lat['p99']:.3f}", f"{lat.get('p999', lat['p99']):.3f}", b["errors_total"])))


def fixed_table(out, goals):
    data = rows(os.path.join(out, "hit-fixed.tsv"))
    if not data:
        return
    print("### Hit latency at a fixed rate (open loop, `capstan bench -k`, from each request's intended start)\n")
    print("| object | proxy | rate req/s | completed req/s | p50 ms | p99 ms median (range) | p99.9 ms | errors |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for obj in dict.fromkeys(r["object"] for r in data):
        for proxy in dict.fromkeys(r["proxy"] for r in data):
            cell = [r for r in data if r["object"] == obj and r["proxy"] == proxy]
            if not cell:
                continue
            f = lambda k: [float(r[k]) for r in cell]
            goals.setdefault(("fixed", obj, cell[0]["bytes"], cell[0]["rate"]), {})[proxy] = {
                "p99": statistics.median(f("p99_ms"))}
            print(f"| {obj} ({cell[0]['bytes']} B) | {proxy} | {cell[0]['rate']} "
                  f"| {statistics.median(f('completed_rps')):.0f} | {statistics.median(f('p50_ms')):.2f} "
                  f"| {spread(f('p99_ms'), '{:.2f}')} | {statistics.median(f('p999_ms')):.2f} "
                  f"| {sum(int(r['errors']) for r in cell)} |")
    print()


def rows(path):
    if not os.path.exists(path):
        return []
    return list(csv.DictReader(open(path), delimiter="\t"))


def spread(values, fmt="{:.0f}"):
    """Median and range of a cell's rounds."""
    m = statistics.median(values)
    if len(values) == 1:
        return fmt.format(m)
    return f"{fmt.format(m)} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def hit_table(out, goals):
    data = rows(os.path.join(out, "hit.tsv"))
    if not data:
        return
    print("### Hit path (keep-alive, one cached object)\n")
    print("| object | proxy | req/s median (range) | × Varnish | × nginx | p50 ms | p99 ms median (range) "
          "| proxy CPU µs/req | hit ratio (lowest round) | errors | |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for obj in dict.fromkeys(r["object"] for r in data):
        cells = {}
        for proxy in dict.fromkeys(r["proxy"] for r in data):
            cell = [r for r in data if r["object"] == obj and r["proxy"] == proxy]
            if cell:
                cells[proxy] = cell
        med = {p: statistics.median(float(r["rps"]) for r in c) for p, c in cells.items()}
        for proxy, cell in cells.items():
            f = lambda k: [float(r[k]) for r in cell]
            hit = min(max(0.0, 1 - int(r["origin_requests"]) / max(int(r["requests"]), 1)) for r in cell)
            ratios = [f"{med[proxy] / med[p]:.2f}" if p in med and med[p] else "–" for p in PEERS]
            flag = "" if hit >= MIN_HIT_RATIO else "**NOT CACHING**"
            size = cell[0]["bytes"]
            goals.setdefault(("hit", obj, size), {})[proxy] = {
                "rps": med[proxy], "p99": statistics.median(f("p99_ms")),
                "cpu": statistics.median(f("cpu_us_per_req")), "caching": hit >= MIN_HIT_RATIO}
            print(f"| {obj} ({size} B) | {proxy} | {spread(f('rps'))} | {ratios[0]} | {ratios[1]} "
                  f"| {statistics.median(f('p50_ms')):.2f} | {spread(f('p99_ms'), '{:.2f}')} "
                  f"| {statistics.median(f('cpu_us_per_req')):.1f} | {hit:.1%} "
                  f"| {sum(int(r['errors']) for r in cell)} | {flag} |")
    print()


def miss_table(out, clients, delay, goals):
    data = rows(os.path.join(out, "miss.tsv"))
    if not data:
        return
    print(f"### Miss path with coalescing ({clients} clients, one cold object, origin {delay} ms)\n")
    print("| proxy | origin requests median (range) | TTFB last client ms | TTFB median client ms "
          "| non-200 + errors | burst spread ms | answers by their cache header (last round) | |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for proxy in dict.fromkeys(r["proxy"] for r in data):
        cell = [r for r in data if r["proxy"] == proxy]
        f = lambda k: [float(r[k]) for r in cell if r[k] != ""]
        origin = f("origin_requests")
        bad = sum(int(r["non200"]) + int(r["errors"]) for r in cell)
        flag = []
        if bad:
            flag.append(f"**{bad} failed** ({cell[-1]['first_error'] or 'non-200'})")
        if min(origin) >= int(cell[0]["clients"]):
            flag.append("**no coalescing**: every client reached the origin")
        elif max(origin) > 1:
            flag.append("not fully coalesced")
        last = f("ttfb_last_ms")
        goals.setdefault(("miss",), {})[proxy] = {
            "origin": statistics.median(origin), "last": statistics.median(last) if last else None}
        print(f"| {proxy} | {spread(origin)} | {spread(last) if last else '–'} "
              f"| {spread(f('ttfb_median_ms')) if last else '–'} | {bad} | {statistics.median(f('send_spread_ms')):.0f} | {cell[-1]['verdicts'] or '–'} "
              f"| {'; '.join(flag)} |")
    print()


def mem_table(out, mem_cache, goals):
    data = rows(os.path.join(out, "mem.tsv"))
    if not data:
        return
    print(f"### Memory per stored object (cache {mem_cache} MiB, one contender at a time)\n")
    print("| proxy | objects asked | fill s | stored (sampled) | memory after, MiB | bytes/object "
          "| Δ bytes/object | × Varnish | beside the processes | |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    per = {}
    for r in data:
        stored = int(r["objects"]) * (1 - int(r["sample_misses"]) / max(int(r["sample"]), 1))
        in_memory = "tmpfs" in r["extra_what"]
        extra = int(r["extra_bytes"]) if in_memory else 0
        extra0 = int(r["extra_before_bytes"]) if in_memory else 0
        total = int(r["pss_after_kb"]) * 1024 + extra
        before = int(r["pss_before_kb"]) * 1024 + extra0
        per[r["proxy"]] = (r, stored, total, before)
    base = per.get("varnish")
    for proxy, (r, stored, total, before) in per.items():
        bpo = total / stored if stored else float("nan")
        delta = (total - before) / stored if stored else float("nan")
        ratio = "–"
        if base and base[1] and stored:
            ratio = f"{bpo / (base[2] / base[1]):.2f}"
        beside = f"{int(r['extra_bytes']) / 2**20:.0f} MiB {r['extra_what']}" if r["extra_what"] != "-" else ""
        flags = []
        if int(r["fill_responses"]) < int(r["objects"]):
            flags.append(f"**fill incomplete: {r['fill_responses']} responses**")
        if int(r["fill_non200"]):
            flags.append(f"**{r['fill_non200']} non-200**")
        if stored < 0.95 * int(r["objects"]):
            flags.append("**did not keep them all**")
        goals.setdefault(("mem",), {})[proxy] = {"bpo": bpo, "stored_all": stored >= 0.95 * int(r["objects"])}
        num = lambda v: "–" if v != v else f"{v:,.0f}"  # NaN when nothing was stored
        print(f"| {proxy} | {int(r['objects']):,} | {r['fill_s']} | {stored:,.0f} | {total / 2**20:.0f} "
              f"| {num(bpo)} | {num(delta)} | {ratio} | {beside} | {'; '.join(flags)} |")
    print()


def report(out, rounds, secs, threads, wrk_threads, conns, cache_mb, clients, delay, mem_cache):
    print(f"{rounds} rounds × {secs} s per hit cell; {threads} worker threads per proxy "
          f"(Squid: one process); cache {cache_mb} MiB; wrk -t{wrk_threads} -c{conns}; medians (ranges)\n")
    info = os.path.join(out, "run-info.txt")
    if os.path.exists(info):
        print("```\n" + open(info).read().strip() + "\n```\n")
    goals = {}
    hit_table(out, goals)
    fixed_table(out, goals)
    miss_table(out, clients, delay, goals)
    mem_table(out, mem_cache, goals)
    goal_lines(goals)


def verdict(ok):
    return "met" if ok else "**NOT met**"


def goal_lines(goals):
    """Capstan against the issue's goals, from this run's medians (peers measured alongside)."""
    lines = []
    for key, cell in goals.items():
        me = cell.get("capstan")
        if me is None:
            continue
        if key[0] == "hit":
            what = f"hit {key[1]} ({key[2]} B)"
            if not me["caching"]:
                lines.append(f"- {what}: not evaluated — Capstan did not cache")
                continue
            for peer in PEERS:
                if peer in cell:
                    p = cell[peer]
                    ok = me["rps"] >= p["rps"] and me["p99"] <= p["p99"]
                    lines.append(f"- {what} vs {peer} (req/s ≥ 1.0×, p99 no worse): {verdict(ok)} — "
                                 f"{me['rps'] / p['rps']:.2f}×, p99 {me['p99']:.2f} vs {p['p99']:.2f} ms, "
                                 f"CPU {me['cpu']:.1f} vs {p['cpu']:.1f} µs/req")
        elif key[0] == "fixed":
            for peer in PEERS:
                if peer in cell:
                    p = cell[peer]["p99"]
                    lines.append(f"- hit {key[1]} ({key[2]} B) at {key[3]} req/s vs {peer} (p99 no worse): "
                                 f"{verdict(me['p99'] <= p)} — {me['p99']:.2f} vs {p:.2f} ms")
        elif key[0] == "miss":
            lines.append(f"- miss coalescing (1 origin request): {verdict(me['origin'] <= 1)} — "
                         f"{me['origin']:.0f} origin requests; last client's TTFB "
                         + (f"{me['last']:.0f} ms" if me["last"] is not None else "–")
                         + "".join(f", {p} {c['last']:.0f} ms" for p, c in cell.items()
                                   if p in PEERS and c["last"] is not None))
        elif key[0] == "mem":
            if not me["stored_all"]:
                lines.append("- memory per object: not evaluated — Capstan did not keep the objects")
            elif "varnish" in cell:
                v = cell["varnish"]["bpo"]
                lines.append(f"- memory per object below Varnish's: {verdict(me['bpo'] < v)} — "
                             f"{me['bpo']:,.0f} vs {v:,.0f} B")
    if lines:
        print("### Capstan against the goals\n")
        print("\n".join(lines) + "\n")


COMMANDS = {"wrk": wrk_row, "burst": burst_row, "fixed": fixed_row, "report": report}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    try:
        COMMANDS[sys.argv[1]](*sys.argv[2:])
    except TypeError:
        sys.exit(__doc__)
