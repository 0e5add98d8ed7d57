#!/usr/bin/env python3
"""Tables of scripts/bench/node16-overlap's raw outputs (the raw/ folder of its raw.tgz).

Per ranks, collective and size, the median over repeats, one column per configuration:
OSU overlap % (I*, compute, Wait), the pure communication time I*+Wait in µs with its ratio
to `system`, IMB-NBC overlap %, OSU overlap % with MPI_Test during the compute, and the
workload-based overhead (% of a compute three times the communication: CPU taken from the
application). Then per ranks and configuration: the median overlap % over the points, the
geometric mean of the pure-time ratio to `system`, and how many points shim-library wins
against shim-thread and system+async; then the runs that failed or were skipped.
Usage: node16-overlap-table.py RAW_DIR [config ...]
(default configs: system system+async shim-none shim-thread shim-library)."""
import collections, csv, glob, math, os, re, statistics, sys

raw = sys.argv[1]
configs = sys.argv[2:] or ["system", "system+async", "shim-none", "shim-thread", "shim-library"]
COLL_ORDER = ["Iallreduce", "Ibcast", "Ireduce", "Iallgather", "Ialltoall"]
vals = collections.defaultdict(list)  # (n, coll, bytes, mode, cfg, metric) -> [values]
for f in sorted(glob.glob(os.path.join(raw, "n*-r*-*.csv"))):
    m = re.match(r"n(\d+)-r(\d+)-([A-Za-z_]+)-(.+)\.csv$", os.path.basename(f))
    if not m:
        continue
    n, cfg = int(m.group(1)), m.group(4)
    with open(f) as fh:
        lines = [l for l in fh if l.count(",") >= 16]  # the CSV rows (a run cut off leaves fewer)
    for r in csv.DictReader(lines):
        try:
            for k in ("osu_pct", "imb_pct", "t_pure_us", "wl_pct", "thr_pct"):
                vals[(n, r["collective"], int(r["bytes"]), r["mode"], cfg, k)].append(float(r[k]))
        except (KeyError, TypeError, ValueError):
            continue


def med(n, c, b, mode, cfg, k):
    v = vals.get((n, c, b, mode, cfg, k))
    return statistics.median(v) if v else None


points = sorted({(n, c, b) for (n, c, b, *_rest) in vals},
                key=lambda p: (p[0], COLL_ORDER.index(p[1]) if p[1] in COLL_ORDER else 99, p[2]))
ranks = sorted({p[0] for p in points})
reps = collections.Counter(len(v) for k, v in vals.items() if k[3] == "overlap" and k[5] == "osu_pct")


def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 and b % (1 << 20) == 0 else f"{b >> 10} KiB" if b % 1024 == 0 else str(b)


def table(title, mode, k, fmt, ratio=False):
    print(f"\n### {title}\n")
    for n in ranks:
        print(f"\n{n} ranks\n")
        print("| collective | bytes | " + " | ".join(configs) + " |")
        print("|---|---:|" + "---:|" * len(configs))
        for (pn, c, b) in points:
            if pn != n:
                continue
            base = med(n, c, b, mode, "system", k)
            cells = []
            for cfg in configs:
                v = med(n, c, b, mode, cfg, k)
                if v is None:
                    cells.append("-")
                elif ratio and cfg != "system" and base:
                    cells.append(f"{v:{fmt}} ({v / base:.2f})")
                else:
                    cells.append(f"{v:{fmt}}")
            print(f"| {c} | {size(b)} | " + " | ".join(cells) + " |")


print(f"Raw: {raw}; repeats per cell: "
      + ", ".join(f"{k} ({v} cells)" for k, v in sorted(reps.items())))
table("OSU overlap % (I*, compute as long as the pure time, Wait; no MPI call during the compute)",
      "overlap", "osu_pct", ".1f")
table("pure communication time I*+Wait (µs; in parentheses the ratio to `system`)", "overlap", "t_pure_us", ".1f",
      ratio=True)
table("IMB-NBC overlap %", "overlap", "imb_pct", ".1f")
table("OSU overlap % with 8 MPI_Test calls spread over the compute", "overlap+test", "osu_pct", ".1f")
table("workload-based overhead: % of a compute 3x the pure time taken from it (t_ovl - t_cpu)", "long", "wl_pct",
      ".1f")

print("\n### summary per ranks and configuration\n")
print("Median over the points of the OSU overlap % (no MPI call during the compute); geometric mean over the "
      "points of the pure-time ratio to `system`; for shim-library, the points where its overlap % is above "
      "shim-thread's and above system+async's.\n")
print("| ranks | configuration | median overlap % | pure time / system (geomean) | median workload overhead % |")
print("|---:|---|---:|---:|---:|")
for n in ranks:
    pts = [(c, b) for (pn, c, b) in points if pn == n]
    for cfg in configs:
        ov = [med(n, c, b, "overlap", cfg, "osu_pct") for c, b in pts]
        ov = [v for v in ov if v is not None]
        wl = [med(n, c, b, "long", cfg, "wl_pct") for c, b in pts]
        wl = [v for v in wl if v is not None]
        rs = []
        for c, b in pts:
            v, s = med(n, c, b, "overlap", cfg, "t_pure_us"), med(n, c, b, "overlap", "system", "t_pure_us")
            if v and s:
                rs.append(math.log(v / s))
        g = f"{math.exp(sum(rs) / len(rs)):.2f}" if rs else "-"
        print(f"| {n} | {cfg} | {statistics.median(ov):.1f} | {g} | {statistics.median(wl):.1f} |" if ov else
              f"| {n} | {cfg} | - | - | - |")
for n in ranks:
    pts = [(c, b) for (pn, c, b) in points if pn == n]
    for other in ("shim-thread", "system+async"):
        both = [(med(n, c, b, "overlap", "shim-library", "osu_pct"), med(n, c, b, "overlap", other, "osu_pct"))
                for c, b in pts]
        both = [(a, o) for a, o in both if a is not None and o is not None]
        if both:
            wins = sum(a > o for a, o in both)
            print(f"\n{n} ranks: shim-library's overlap % above {other}'s at {wins} of {len(both)} points "
                  f"(median difference {statistics.median(a - o for a, o in both):+.1f} points)")

runs = os.path.join(raw, "runs.txt")
if os.path.exists(runs):
    lines = open(runs).read().split("\n")
    bad = [l for l in lines if l and " rc=0 " not in l]
    print(f"\n{len([l for l in lines if l])} mpiexec runs, {len(bad)} not finished with status 0"
          + ("".join(f"\n- {l}" for l in bad)))
skipped = os.path.join(raw, "skipped.txt")
if os.path.exists(skipped):
    s = open(skipped).read().split()
    print(f"\n{len(s)} runs skipped for the time budget: " + ", ".join(s[:40]) + (" ..." if len(s) > 40 else ""))
