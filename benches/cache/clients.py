#!/usr/bin/env python3
"""Small HTTP clients for benches/cache.sh (standard library only, loopback only).

  served URL                        the origin's request count (/_capstan/load "served")
  headers PORT PATH                 the cache-related headers of a second request for PATH
  burst PORT PATH CLIENTS           CLIENTS connections opened and all but the last byte of a
                                    request sent on each, then the last bytes at once; JSON
                                    with the clients' times to first byte
  probe PORT PREFIX N SAMPLE SEED   SAMPLE random paths PREFIX1..PREFIXN over one keep-alive
                                    connection; JSON with status counts
"""
import asyncio
import http.client
import json
import random
import sys
import time
import urllib.request

CACHE_HEADERS = ("cache-status", "x-cache", "age", "x-varnish", "via")


def verdict(fields):
    """hit, miss or unknown, from whichever cache header the proxy sends (lower-case names)."""
    status = fields.get("cache-status", "").lower()
    if status:  # RFC 9211, Capstan: "capstan; hit" or "capstan; fwd=miss"
        return "hit" if "; hit" in status or status.endswith(";hit") else "miss"
    xcache = fields.get("x-cache", "").upper()  # Varnish (our VCL), nginx, Squid
    if xcache:
        return "hit" if xcache.startswith("HIT") else "miss"
    via = fields.get("via", "")
    if "[c" in via:  # Traffic Server's Via codes: [cH…] fresh hit, [cR…] RAM hit, [cM…] miss
        code = via.split("[c", 1)[1][:1]
        return "hit" if code in "HR" else "miss"
    return "unknown"


def served(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        print(json.load(r)["served"])


def headers(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    for _ in range(2):
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
    fields = {k.lower(): v for k, v in resp.getheaders()}
    found = [f"{k}: {fields[k]}" for k in CACHE_HEADERS if k in fields]
    print(f"{resp.status} {verdict(fields)} by headers: " + ("; ".join(found) if found else "(no cache headers)"))


async def one_client(port, request, ready, start, results, index):
    """Connect, send all of the request but its last byte, report ready, then read the answer
    once the burst (the caller) has sent the last byte."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request[:-1])
        await writer.drain()
    except OSError as e:
        results[index] = {"error": f"connect: {e}"}
        ready.put_nowait(None)
        return
    ready.put_nowait((index, writer))
    await start.wait()
    try:
        first = await reader.read(1)
        ttfb = time.perf_counter()
        head = first + await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {k.strip().lower(): v.strip() for k, v in
                  (line.split(":", 1) for line in lines[1:] if ":" in line)}
        length = int(fields.get("content-length", "0"))
        await reader.readexactly(length)
        done = time.perf_counter()
        results[index] = {"ttfb": ttfb, "done": done, "status": status,
                          "verdict": verdict(fields),
                          "cache": "; ".join(f"{k}: {fields[k]}" for k in CACHE_HEADERS if k in fields)}
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
        results[index] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        writer.close()


async def burst_async(port, path, clients):
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    ready, start = asyncio.Queue(), asyncio.Event()
    results = [None] * clients
    tasks = [asyncio.create_task(one_client(port, request, ready, start, results, i)) for i in range(clients)]
    writers = [w for w in [await ready.get() for _ in range(clients)] if w is not None]
    # The burst: one tight loop of 1-byte writes (each goes straight to the socket), no task
    # switches between clients.
    t0 = time.perf_counter()
    for _, writer in writers:
        writer.write(request[-1:])
    spread = (time.perf_counter() - t0) * 1e3
    start.set()
    await asyncio.gather(*tasks)
    ok = [r for r in results if r and "error" not in r]
    errors = [r["error"] for r in results if r and "error" in r]
    ttfb = sorted((r["ttfb"] - t0) * 1e3 for r in ok)
    statuses = {}
    for r in ok:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    verdicts = {}
    for r in ok:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    # The headers of one answer the proxy says went to the origin (or of the first answer).
    example = next((r["cache"] for r in ok if r["verdict"] == "miss"), ok[0]["cache"] if ok else "")
    return {
        "clients": clients,
        "ok": len(ok),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "statuses": statuses,
        "ttfb_first_ms": ttfb[0] if ttfb else None,
        "ttfb_median_ms": ttfb[len(ttfb) // 2] if ttfb else None,
        "ttfb_last_ms": ttfb[-1] if ttfb else None,
        "send_spread_ms": spread,
        "verdicts": verdicts,
        "miss_headers": example,
    }


def burst(port, path, clients):
    print(json.dumps(asyncio.run(burst_async(int(port), path, int(clients)))))


def probe(port, prefix, n, sample, seed):
    rng = random.Random(int(seed))
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    statuses = {}
    for _ in range(int(sample)):
        conn.request("GET", f"{prefix}{rng.randint(1, int(n))}")
        resp = conn.getresponse()
        resp.read()
        statuses[resp.status] = statuses.get(resp.status, 0) + 1
        if resp.will_close:
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    print(json.dumps({"sample": int(sample), "statuses": statuses}))


COMMANDS = {"served": served, "headers": headers, "burst": burst, "probe": probe}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    try:
        COMMANDS[sys.argv[1]](*sys.argv[2:])
    except TypeError:
        sys.exit(__doc__)
    except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
        sys.exit(f"clients.py {sys.argv[1]}: {type(e).__name__}: {e}")
