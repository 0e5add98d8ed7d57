#!/usr/bin/env python3
"""Merges several all-algorithms runs (scripts/bench/latency -a tables) into one tuning file.

One run's winners flip between near-equal algorithms and, on a noisy machine, sometimes
crown an algorithm that was lucky once. Here every algorithm's time at a point is divided
by the best time of that point in the same run, and the algorithm with the smallest
geometric mean of these ratios over the runs wins, unless the library's own (`native`) is
within 10% of it (NATIVE_MARGIN). Collectives decided by the process
count alone get one row at size 0: the algorithm whose worst (over sizes) mean ratio is
smallest, as scripts/bench/latency.c does for one run.

Usage: tune_merge.py PARAMS_FILE OUT TABLE.md [TABLE.md ...]
PARAMS_FILE: a tuning file whose `param` lines are kept (the first run's calibration).
"""
import math
import re
import sys

# as in scripts/bench/latency.c: sizes the shim decides by (`unsized`, `key`)
UNSIZED_ALWAYS = {"Neighbor_allgather", "Neighbor_alltoall"}
UNSIZED_EXCEPT_2 = {"Gatherv", "Scatterv", "Alltoallv", "Alltoallw"}
TOTAL_KEY = {"Reduce_scatter", "Reduce_scatter_block"}


def parse(path):
    """{(coll, ranks): {bytes: {algo: time}}} from one markdown table file (ranks: "P" or
    "P/NODES", as the tuning rows name them)."""
    out = {}
    coll = ranks = None
    algos = None
    for line in open(path):
        # "(2 ranks, blocking" on one node, "(2 ranks on 2 nodes, blocking" across nodes
        m = re.match(r"#### (\S+) \((\d+) ranks(?: on (\d+) nodes)?, blocking", line)
        if m:
            coll, algos = m.group(1), None
            ranks = m.group(2) if not m.group(3) else f"{m.group(2)}/{m.group(3)}"
            continue
        if coll is None or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "bytes":
            # | bytes | system MPI | auto | <algorithms...> | best | auto/best | auto/system |
            algos = cells[3:-3]
            continue
        if algos is None or not cells[0].isdigit():
            continue
        times = [float(x) for x in cells[3:3 + len(algos)]]
        out.setdefault((coll, ranks), {})[int(cells[0])] = dict(zip(algos, times))
    return out


# A schedule must beat the library's own by this factor (merged ratios) to be named: between
# near-equals the winner flips from run to run, and a schedule crowned by a few percent lost
# by 1.2-1.4x in the next run (Allgather at 2 x 1, 8 B and 4 KiB); the library's own cannot
# be slower than itself.
NATIVE_MARGIN = 1.10


def winner(ratios):
    """The algorithm to name at one point: the smallest merged ratio, unless the library's
    own is within NATIVE_MARGIN of it."""
    best = min(ratios, key=ratios.get)
    if "native" in ratios and ratios[best] * NATIVE_MARGIN > ratios["native"]:
        return "native"
    return best


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    params, out_path, tables = sys.argv[1], sys.argv[2], sys.argv[3:]
    runs = [parse(t) for t in tables]
    lines = [f"# merged from {len(runs)} runs by scripts/tools/tune_merge.py: smallest geometric-mean ratio to each run's best\n"]
    lines += [l for l in open(params) if l.startswith("param")]
    for key in runs[0]:
        coll, p = key
        per_size = {}
        for b in runs[0][key]:
            logs = {}
            for r in runs:
                pt = r.get(key, {}).get(b)
                if not pt:
                    continue
                best = min(pt.values())
                for a, t in pt.items():
                    logs.setdefault(a, []).append(math.log(t / best))
            per_size[b] = {a: math.exp(sum(v) / len(v)) for a, v in logs.items()}
        procs = int(p.split("/")[0])
        unsized = coll in UNSIZED_ALWAYS or (coll in UNSIZED_EXCEPT_2 and procs != 2)
        if unsized:
            algos = list(next(iter(per_size.values())))
            worst = {a: max(s[a] for s in per_size.values()) for a in algos}
            mean = {a: sum(math.log(s[a]) for s in per_size.values()) for a in algos}
            a = min(algos, key=lambda x: (round(worst[x], 9), mean[x]))
            lines.append(f"best MPI_{coll} {p} 0 {a}\n")
            continue
        for b, s in sorted(per_size.items()):
            k = b * procs if coll in TOTAL_KEY else b
            lines.append(f"best MPI_{coll} {p} {k} {winner(s)}\n")
    open(out_path, "w").writelines(lines)


if __name__ == "__main__":
    main()
