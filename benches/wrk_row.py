"""One TSV row from a wrk --latency output (benches/lib.sh: wrk_row):
argv: WRK_OUT ROUND SCENARIO PROXY CPU_TICKS_BEFORE CPU_TICKS_AFTER CLK_TCK."""
import re, sys
text = open(sys.argv[1]).read()
SCALE = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}
def ms(v):
    m = re.match(r"([\d.]+)(us|ms|s|m|h)$", v)
    if not m:
        sys.exit(f"cannot read wrk latency {v!r} in:\n{text}")
    return float(m.group(1)) * SCALE[m.group(2)]
def find(pattern):
    m = re.search(pattern, text, re.MULTILINE)
    if not m:
        sys.exit(f"wrk output lacks {pattern!r}:\n{text}")
    return m.group(1)
rps = float(find(r"Requests/sec:\s+([\d.]+)"))
p50 = ms(find(r"^\s+50%\s+(\S+)"))
p99 = ms(find(r"^\s+99%\s+(\S+)"))
errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
errors = (sum(int(x) for x in errs.groups()) if errs else 0) + (int(non2xx.group(1)) if non2xx else 0)
requests = int(find(r"(\d+) requests in"))
cpu_us = (float(sys.argv[6]) - float(sys.argv[5])) / float(sys.argv[7]) * 1e6 / max(requests, 1)
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{rps:.0f}\t{p50:.3f}\t{p99:.3f}\t{errors}\t{cpu_us:.2f}")
