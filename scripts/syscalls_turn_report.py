"""Per-turn table of scripts/syscalls_turn.sh: OUT_DIR BARE_RPS WINDOW_S."""
import sys, re, collections
o, brps, w = sys.argv[1], float(sys.argv[2] or 0), float(sys.argv[3])
def perf(name):
    by_kind, by_thread = collections.Counter(), collections.Counter()
    for line in open(f"{o}/{name}.perf"):
        m = re.match(r"\s*(\S+)-(\d+)\s+([\d,]+)\s+(\S+)", line)
        if not m: continue
        th = re.sub(r"-?\d+$", "", m.group(1)) or m.group(1)
        n = int(m.group(3).replace(",", ""))
        ev = m.group(4).replace("syscalls:sys_enter_", "")
        if n == 0: continue
        by_kind[ev] += n; by_thread[(th, ev)] += n
    return by_kind, by_thread
def ctx(name):
    a = {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in open(f"{o}/{name}.ctx0")}
    b = {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in open(f"{o}/{name}.ctx1")}
    return {k: (b[k][0]-a.get(k,(0,0))[0], b[k][1]-a.get(k,(0,0))[1]) for k in b}
ta, tb = map(int, open(f"{o}/hale.turns").read().split())
turns = {"bare": brps * w, "hale": tb - ta}
res = {}
for name in ("bare", "hale"):
    k, t = perf(name); c = ctx(name); n = turns[name]
    res[name] = (k, t, c, n)
    print(f"== {name}: {n:.0f} turns in {w:.0f}s")
    sysc = k["raw_syscalls:sys_enter"]
    print(f"  syscalls/turn {sysc/n:.2f}  context-switches/turn {k['context-switches']/n:.2f}")
    vol = sum(v for v, _ in c.values()); inv = sum(i for _, i in c.values())
    print(f"  ctx vol/turn {vol/n:.2f} invol/turn {inv/n:.2f}  by thread: " + ", ".join(f"{th} {v/n:.2f}/{i/n:.2f}" for th, (v, i) in sorted(c.items()) if v+i))
kinds = set(res["bare"][0]) | set(res["hale"][0])
print(f"{'per turn':<24}{'bare':>8}{'hale':>8}{'diff':>8}")
rows = sorted(kinds, key=lambda e: -(res['hale'][0][e]/res['hale'][3] - res['bare'][0][e]/max(res['bare'][3],1)))
for e in rows:
    b = res['bare'][0][e]/max(res['bare'][3],1); h = res['hale'][0][e]/res['hale'][3]
    if b < 0.005 and h < 0.005: continue
    print(f"{e:<24}{b:>8.2f}{h:>8.2f}{h-b:>+8.2f}")
print("hale by thread (per turn):")
for (th, e), v in sorted(res['hale'][1].items(), key=lambda x: -x[1]):
    if v/res['hale'][3] >= 0.02: print(f"  {th:<22}{e:<22}{v/res['hale'][3]:>7.2f}")
