"""Usage: python3 benches/cache-lab/agg.py DIR [SCENARIO...]. Medians and ranges over the rounds of DIR/<scenario>-r<N>/results.json, per scenario,
phase and contender (capstan, capstan-gdsf when run, varnish, trafficserver): DHR, offered DHR, throughput, hit mean ms, hit p99, CPU ms/1k responses;
then the goal check per scenario and phase (DHR capstan >= trafficserver; throughput and hit
mean: capstan vs varnish)."""
import glob, json, statistics, sys, os
os.chdir(sys.argv[1] if len(sys.argv) > 1 else '.')
SCEN = sys.argv[2:] or ['cache-mixed-inc', 'cache-best-effort', 'cache-image', 'cache-html', 'cache-download']
NAMES = {'capstan': 'Capstan', 'capstan-gdsf': 'Capstan GDSF', 'varnish': 'Varnish', 'trafficserver': 'Traffic Server'}
def med(xs): return statistics.median(xs)
def fmt(xs, d):
    if not xs: return '–'
    return f"{med(xs):.{d}f} ({min(xs):.{d}f}–{max(xs):.{d}f})"
goals = []
for s in SCEN:
    runs = [json.load(open(f)) for f in sorted(glob.glob(f'{s}-r*/results.json'))]
    if not runs: continue
    phases = ['top1', 'inc', 'top2'] if s.startswith('cache-mixed-inc') else ['top1', 'top2']
    print(f"\n**{s}** ({len(runs)} rounds, cache {runs[0]['cache_bytes']/2**20:.0f} MiB)\n")
    print('| phase | proxy | DHR % (offered) | responses/s | hit ms mean | hit ms p99 | errors | proxy CPU ms / 1k resp |')
    print('|---|---|---:|---:|---:|---:|---:|---:|')
    vals = {}
    for ph in phases:
        for c in NAMES:
            d = {'dhr': [], 'off': [], 'rps': [], 'hit': [], 'p99': [], 'err': [], 'cpu': []}
            for r in runs:
                cr = next((x for x in r['contenders'] if x['name'] == c), None)
                if not cr or not cr.get('result'): continue
                p = next((x for x in cr['result']['phases'] if x['name'] == ph), None)
                if not p: continue
                d['dhr'].append(100 * p['dhr']); d['off'].append(100 * p['offered_dhr'])
                d['rps'].append(p['throughput_rps']); d['hit'].append(p['hit_ms']['mean'])
                d['p99'].append(p['hit_ms']['p99']); d['err'].append(sum(p['errors'].values()))
                sp = next((x for x in (cr.get('surrogates') or {}).get('phases', []) if x['phase'] == ph), None)
                if sp and sp.get('cpu_ms_per_1k') is not None: d['cpu'].append(sp['cpu_ms_per_1k'])
            vals[(ph, c)] = d
            if not d['dhr']: continue
            print(f"| {ph} | {NAMES[c]} | {fmt(d['dhr'],1)} ({med(d['off']):.1f}) | {fmt(d['rps'],0)} | {fmt(d['hit'],2)} | {fmt(d['p99'],1)} | {sum(d['err'])} | {fmt(d['cpu'],0)} |")
        var, ats = vals[(ph,'varnish')], vals[(ph,'trafficserver')]
        for variant in [c for c in NAMES if c.startswith('capstan')]:
          cap = vals[(ph, variant)]
          if cap['dhr'] and ats['dhr'] and var['rps']:
            goals.append((s if variant == 'capstan' else f"{s} ({NAMES[variant]})", ph,
                          med(cap['dhr']) >= med(ats['dhr']) - 0.5, med(cap['dhr']), med(ats['dhr']),
                          med(cap['rps']) >= 0.98 * med(var['rps']), med(cap['rps']), med(var['rps']),
                          med(cap['hit']) <= med(var['hit']), med(cap['hit']), med(var['hit'])))
print('\n| scenario | phase | DHR ≥ ATS | throughput ≥ Varnish | hit time ≤ Varnish |')
print('|---|---|---|---|---|')
for g in goals:
    yn = lambda b: 'met' if b else '**not met**'
    print(f"| {g[0]} | {g[1]} | {yn(g[2])} ({g[3]:.1f} vs {g[4]:.1f}) | {yn(g[5])} ({g[6]:.0f} vs {g[7]:.0f}) | {yn(g[8])} ({g[9]:.2f} vs {g[10]:.2f} ms) |")
