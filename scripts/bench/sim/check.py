#!/usr/bin/env python3
"""Checks the timing simulator against measured points (issue 35 item 4).

Usage: check.py PREDICTED.csv MEASURED_DIR OUT_MEASURED.csv

PREDICTED.csv: `scripts/tools/simulate` with SIM_LAYOUTS set to the measured layouts (its
flat_algo column names the flat algorithm predicted). MEASURED_DIR: the tables of
`scripts/bench/sim/measure` (latency-<nodes>x<ppn>.md, latency.c's all-algorithms mode).
For every point the measured time of that same flat algorithm and of `shm` (the two-level
algorithm across nodes) is set beside the prediction; prints a markdown table with the
ratio predicted/measured and whether it is within 25%, and writes the measured points in
the form plot.py overlays.
"""

import csv
import re
import sys
from pathlib import Path

NAMES = {"Barrier": "barrier", "Bcast": "bcast", "Allreduce": "allreduce", "Reduce": "reduce"}


def tables(path):
    """{(coll, bytes): {column: median us}} from one latency.c -a output."""
    out, coll, head = {}, None, None
    for line in Path(path).read_text().splitlines():
        m = re.match(r"#### (\w+) \(", line)
        if m:
            coll, head = NAMES.get(m.group(1)), None
            continue
        if coll and line.startswith("| bytes"):
            head = [c.strip() for c in line.strip("|").split("|")]
            continue
        if coll and head and re.match(r"\| \d", line):
            cells = [c.strip() for c in line.strip("|").split("|")]
            row = dict(zip(head, cells))
            vals = {}
            for k, v in row.items():
                try:
                    vals[k] = float(v)
                except ValueError:
                    pass
            out[(coll, int(row["bytes"]))] = vals
    return out


def main():
    pred_csv, mdir, out_csv = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    rows = list(csv.DictReader(open(pred_csv, newline="")))
    measured = {}
    print("| collective | bytes | layout | flat algorithm | flat predicted | measured | ratio "
          "| two-level predicted | measured | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    within = total = 0
    with open(out_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["params", "coll", "bytes", "nodes", "ppn", "measured_flat_us", "measured_two_level_us"])
        for r in rows:
            layout = f"{r['nodes']}x{r['ppn']}"
            md = mdir / f"latency-{layout}.md"
            if not md.exists():
                continue
            t = measured.setdefault(layout, tables(md)).get((r["coll"], int(r["bytes"])), {})
            mf, mt = t.get(r["flat_algo"]), t.get("shm")
            cells = []
            for p, m in ((r["flat_us"], mf), (r["two_level_us"], mt)):
                if p and m:
                    ratio = float(p) / m
                    ok = abs(ratio - 1) <= 0.25
                    within += ok
                    total += 1
                    cells += [f"{float(p):.1f}", f"{m:.1f}", f"{ratio:.2f}{'' if ok else ' (miss)'}"]
                else:
                    cells += [p or "-", f"{m:.1f}" if m else "-", "-"]
            print(f"| {r['coll']} | {r['bytes']} | {layout} | {r['flat_algo']} | " + " | ".join(cells) + " |")
            w.writerow([r["params"], r["coll"], r["bytes"], r["nodes"], r["ppn"], mf or "", mt or ""])
    print(f"\nwithin 25%: {within} of {total} points")


if __name__ == "__main__":
    main()
