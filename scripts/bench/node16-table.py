#!/usr/bin/env python3
"""Tables of scripts/bench/node16-imb's raw outputs: median t_avg (IMB-MPI1) or t_pure
(IMB-NBC) in µs per (ranks, benchmark, bytes) and mode, the ratio to native, and geometric
means of the ratios. Usage: node16-table.py RAW_DIR [mode ...] (default: native shm shm2)."""
import collections, glob, math, os, re, statistics, sys

raw = sys.argv[1]
modes = sys.argv[2:] or ["native", "shm", "shm2"]
d = collections.defaultdict(list)
for f in glob.glob(os.path.join(raw, "n*-*-*.txt")):
    m = re.match(r"(n|nbc)(\d+)-(\w+)-(\d+)\.txt", os.path.basename(f))
    if not m:
        continue
    kind, n, mode, _ = m.groups()
    bench = None
    for line in open(f):
        b = re.match(r"# Benchmarking (\S+)", line)
        if b:
            bench = b.group(1)
            continue
        p = line.split()
        if not bench or not p or not p[0].isdigit():
            continue
        if bench == "Barrier" and len(p) == 4:
            d[(int(n), bench, 0, mode)].append(float(p[-1]))
        elif kind == "nbc" and len(p) >= 6:
            d[(int(n), bench, int(p[0]), mode)].append(float(p[3]))
        elif len(p) >= 5:
            d[(int(n), bench, int(p[0]), mode)].append(float(p[4]))
others = [m for m in modes if m != "native"]
print("| ranks | benchmark | bytes | " + " | ".join(f"{m} µs" for m in modes) + " | "
      + " | ".join(f"{m}/native" for m in others) + " |")
print("|" + "---|" * (3 + len(modes) + len(others)))
ratios = collections.defaultdict(list)
for key in sorted({k[:3] for k in d}):
    v = {m: statistics.median(d[key + (m,)]) for m in modes if d.get(key + (m,))}
    if "native" not in v:
        continue
    cells = [f"{v[m]:.2f}" if m in v else "" for m in modes]
    rs = []
    for m in others:
        if m in v:
            r = v[m] / v["native"]
            rs.append(f"{r:.2f}")
            nbc = key[1].startswith("I")
            ratios[(m, key[0], nbc, key[2] <= 4096)].append(r)
        else:
            rs.append("")
    print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " | " + " | ".join(rs) + " |")
geo = lambda x: math.exp(sum(map(math.log, x)) / len(x))
print()
for m in others:
    for n in sorted({k[1] for k in ratios if k[0] == m}):
        for nbc in (False, True):
            small = ratios.get((m, n, nbc, True), [])
            big = ratios.get((m, n, nbc, False), [])
            if small:
                what = "IMB-NBC t_pure" if nbc else "IMB-MPI1"
                print(f"- {m}, {n} ranks, {what}: geometric mean of {m}/native {geo(small):.2f} "
                      f"up to 4 KiB ({len(small)} points), {geo(small + big):.2f} over all sizes "
                      f"({len(small) + len(big)})")
