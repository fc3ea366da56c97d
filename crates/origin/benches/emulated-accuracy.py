#!/usr/bin/env python3
"""Are emulated nodes' modelled times still accurate when 16 of them run on this machine at once?

    crates/origin/benches/emulated-accuracy.py [NODES] [REQUESTS_PER_SERVICE]

Starts NODES `capstan origin` processes (emulated, 1 core each), then drives every node at once
with one closed-loop client per node (keep-alive), in turn: cpu_light.cgi (40 ms of CPU),
cpu_med.cgi (100 ms), disk_load.cgi (100 ms of disk) and a memory-cache hit of /file50k.html
(1 ms + 0.51 ms copy + 4.1 ms on the 100 Mbit/s NIC = 5.61 ms). With one request at a time per
node there is no queueing, so each response should take exactly the modelled demand; the client
sees that plus loopback HTTP overhead. Prints the median and p95 relative error per service, and
the same for a request that costs no modelled time at all (a 404), which measures that overhead
(the client's, the loopback's and the scheduler's) on its own.
"""
import http.client, os, statistics, subprocess, sys, threading, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CAPSTAN = os.environ.get("CAPSTAN", os.path.join(ROOT, "target", "release", "capstan"))
NODES = int(sys.argv[1]) if len(sys.argv) > 1 else 16
N = int(sys.argv[2]) if len(sys.argv) > 2 else 30

SERVICES = [
    ("no_model", "/no-such-object", 0.0),
    ("cpu_light", "/cgi-bin/cpu_light.cgi", 40.0),
    ("cpu_med", "/cgi-bin/cpu_med.cgi", 100.0),
    ("disk_load", "/cgi-bin/disk_load.cgi?file=/file50k.html", 100.0),
    # nic time of the body is modelled too: 51250 B at 100 Mbit/s = 4.1 ms
    ("static_hit", "/file50k.html", 1.0 + 51250 / 100e6 * 1e3 + 51250 * 8 / 100e6 * 1e3),
]

procs, addrs = [], []
try:
    for i in range(NODES):
        p = subprocess.Popen([CAPSTAN, "origin", "--listen", "127.0.0.1:0", "--threads", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = p.stdout.readline().strip()
        assert line.startswith("listening on "), line
        procs.append(p)
        addrs.append(line.split()[-1])

    results = {name: [] for name, _, _ in SERVICES}
    lock = threading.Lock()

    def client(addr):
        host, port = addr.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port))
        c.request("GET", "/file50k.html"); c.getresponse().read()  # warm the memory cache
        for name, path, _ in SERVICES:
            for _ in range(N):
                t = time.perf_counter()
                c.request("GET", path)
                r = c.getresponse(); r.read()
                dt = (time.perf_counter() - t) * 1e3
                assert r.status == (404 if name == "no_model" else 200), (path, r.status)
                with lock:
                    results[name].append(dt)

    threads = [threading.Thread(target=client, args=(a,)) for a in addrs]
    for t in threads: t.start()
    for t in threads: t.join()

    print(f"{NODES} emulated nodes at once, {N} sequential requests per service per node")
    print(f"{'service':<11} {'model ms':>9} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} "
          f"{'median err':>11} {'p95 err':>8} {'median +ms':>11}")
    for name, _, model in SERVICES:
        xs = sorted(results[name])
        med = statistics.median(xs)
        p95 = xs[int(0.95 * (len(xs) - 1))]
        rel = (lambda x: f"{100*(x-model)/model:.1f}%") if model > 0 else (lambda x: "-")
        print(f"{name:<11} {model:9.2f} {med:10.2f} {p95:8.2f} {xs[-1]:8.2f} {rel(med):>11} "
              f"{rel(p95):>8} {med-model:11.3f}")

    # The nodes' own view: how late their modelled waits ended past the deadlines.
    import json
    waits, late, worst, early, leads = 0, 0.0, 0.0, 0, []
    for addr in addrs:
        host, port = addr.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port))
        c.request("GET", "/_capstan/load")
        t = json.loads(c.getresponse().read()).get("timer")
        if not t:  # an older node without the figure
            continue
        waits += t["waits"]; late += t["mean_late_us"] * t["waits"]; worst = max(worst, t["max_late_us"])
        early += t.get("early_waits", 0); leads.append(t.get("lead_us", 0.0))
    print(f"node-side: {waits} modelled waits, mean {late / max(waits, 1):.0f} us late, max {worst:.0f} us, "
          f"{early} early; lead now median {statistics.median(leads) if leads else 0:.0f} us")
finally:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()
