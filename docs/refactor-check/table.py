import json,sys
rows={}
for name in ['old-1','new-1','old-2','new-2']:
    try: d=json.load(open(f'./{name}.json'))
    except Exception: continue
    for s in d['sweep']:
        rows.setdefault((s['load'],s['mode']),{})[name]=s
    for i in d.get('idle') or []:
        rows.setdefault(('idle',i['mode']),{})[name]={'p50_ms':0,'p99_ms':0,'ru_per_min':i.get('ru_per_min_per_replica',0),'ru_per_wake':0}
print('| load | mode | old p50 / p99 ms (runs 1, 2) | new p50 / p99 ms (runs 1, 2) | old RU/min | new RU/min |')
print('| --- | --- | --- | --- | --- | --- |')
for (load,mode),r in sorted(rows.items()):
    def f(k): 
        s=r.get(k); 
        return '—' if not s else f"{s['p50_ms']:.1f} / {s['p99_ms']:.0f}"
    def ru(k):
        s=r.get(k); return '—' if not s else f"{s['ru_per_min']:.0f}"
    print(f"| {load} | {mode} | {f('old-1')}; {f('old-2')} | {f('new-1')}; {f('new-2')} | {ru('old-1')}; {ru('old-2')} | {ru('new-1')}; {ru('new-2')} |")
