#!/usr/bin/env python3
"""Draws the timing simulator's predictions (scripts/tools/simulate) as an SVG.

Usage: plot.py PREDICTED.csv OUT.svg [--measured MEASURED.csv] [--ppn 1,16,128]

One panel per collective and size: predicted time against nodes, log-log, one colour per
ranks-per-node, flat dashed and two-level solid. Measured points (columns
params,coll,bytes,nodes,ppn,measured_flat_us,measured_two_level_us) are drawn over them:
hollow squares flat, filled circles two-level. Hand-written SVG because matplotlib is not
installed where this runs.
"""

import csv
import math
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
W, H = 420, 300  # one panel
ML, MR, MT, MB = 62, 14, 30, 42  # its margins


def num(s):
    """A float, or None for an empty cell (a case the simulator skipped)."""
    try:
        v = float(s)
        return v if v > 0 else None
    except (TypeError, ValueError):
        return None


def read(path, flat_col, two_col):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append(
                {
                    "key": (r["coll"], int(r["bytes"])),
                    "nodes": int(r["nodes"]),
                    "ppn": int(r["ppn"]),
                    "flat": num(r.get(flat_col)),
                    "two": num(r.get(two_col)),
                    "params": r.get("params", ""),
                }
            )
    return rows


def size_label(b):
    if b == 0:
        return ""
    if b >= 1024 and b % 1024 == 0:
        return f"{b // 1024} KiB"
    return f"{b} B"


def decades(lo, hi):
    """Log-axis ticks: powers of ten spanning [lo, hi], or 1-2-5 steps in a narrow range."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks = [10.0**e for e in range(a, b + 1)]
    if b - a <= 2:
        ticks = sorted(m * 10.0**e for e in range(a, b + 1) for m in (1, 2, 5))
    return [t for t in ticks if lo / 1.01 <= t <= hi * 1.01]


def fmt(v):
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def panel(x0, y0, key, rows, measured, ppns, title_params):
    """SVG elements of one panel at (x0, y0)."""
    out = []
    pts = [(r["nodes"], v) for r in rows + measured for v in (r["flat"], r["two"]) if v]
    if not pts:
        return out
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    xlo, xhi = min(xs), max(xs)
    if xlo == xhi:
        xhi = xlo * 2
    ylo, yhi = min(ys) / 1.3, max(ys) * 1.3
    pw, ph = W - ML - MR, H - MT - MB

    def X(v):
        return x0 + ML + pw * (math.log(v) - math.log(xlo)) / (math.log(xhi) - math.log(xlo))

    def Y(v):
        return y0 + MT + ph * (1 - (math.log(v) - math.log(ylo)) / (math.log(yhi) - math.log(ylo)))

    coll, b = key
    out.append(
        f'<text x="{x0 + W / 2}" y="{y0 + 18}" text-anchor="middle" font-weight="bold">'
        f"{coll} {size_label(b)}</text>"
    )
    out.append(
        f'<rect x="{x0 + ML}" y="{y0 + MT}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>'
    )
    n = 2
    while n <= xhi:
        if n >= xlo:
            out.append(
                f'<line x1="{X(n):.1f}" y1="{y0 + MT}" x2="{X(n):.1f}" y2="{y0 + MT + ph}" stroke="#ddd"/>'
                f'<text x="{X(n):.1f}" y="{y0 + MT + ph + 14}" text-anchor="middle" font-size="10">{n}</text>'
            )
        n *= 2
    for t in decades(ylo, yhi):
        out.append(
            f'<line x1="{x0 + ML}" y1="{Y(t):.1f}" x2="{x0 + ML + pw}" y2="{Y(t):.1f}" stroke="#ddd"/>'
            f'<text x="{x0 + ML - 4}" y="{Y(t) + 3:.1f}" text-anchor="end" font-size="10">{fmt(t)}</text>'
        )
    out.append(
        f'<text x="{x0 + ML + pw / 2}" y="{y0 + H - 8}" text-anchor="middle" font-size="11">nodes</text>'
        f'<text x="{x0 + 14}" y="{y0 + MT + ph / 2}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 {x0 + 14} {y0 + MT + ph / 2})">predicted µs ({title_params})</text>'
    )
    for i, ppn in enumerate(ppns):
        c = COLOURS[i % len(COLOURS)]
        for col, dash in (("flat", ' stroke-dasharray="5,4"'), ("two", "")):
            line = sorted((r["nodes"], r[col]) for r in rows if r["ppn"] == ppn and r[col])
            if len(line) >= 2:
                d = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in line)
                out.append(
                    f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="1.6"{dash}/>'
                )
            elif len(line) == 1:
                x, y = line[0]
                out.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="2" fill="{c}"/>')
    for r in measured:
        c = COLOURS[ppns.index(r["ppn"]) % len(COLOURS)] if r["ppn"] in ppns else "#777"
        if r["flat"]:
            x, y = X(r["nodes"]), Y(r["flat"])
            out.append(
                f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" fill="white" stroke="{c}" stroke-width="1.5"/>'
            )
        if r["two"]:
            out.append(f'<circle cx="{X(r["nodes"]):.1f}" cy="{Y(r["two"]):.1f}" r="3.5" fill="{c}"/>')
    return out


def main(argv):
    args = argv[1:]
    measured_path = None
    ppns = [1, 16, 128]
    if "--measured" in args:
        i = args.index("--measured")
        measured_path = args[i + 1]
        del args[i : i + 2]
    if "--ppn" in args:
        i = args.index("--ppn")
        ppns = [int(x) for x in args[i + 1].split(",")]
        del args[i : i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    rows = read(args[0], "flat_us", "two_level_us")
    measured = read(measured_path, "measured_flat_us", "measured_two_level_us") if measured_path else []
    keys = []
    for r in rows:
        if r["key"] not in keys:
            keys.append(r["key"])
    params = ",".join(sorted({r["params"] for r in rows})) or "?"
    cols = 2
    nrows = (len(keys) + cols - 1) // cols
    legend_h = 40
    width, height = cols * W, nrows * H + legend_h
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for k, key in enumerate(keys):
        x0, y0 = (k % cols) * W, legend_h + (k // cols) * H
        svg += panel(
            x0,
            y0,
            key,
            [r for r in rows if r["key"] == key and r["ppn"] in ppns],
            [r for r in measured if r["key"] == key],
            ppns,
            params,
        )
    # legend: colours per ppn, dash for flat
    x = 10
    for i, ppn in enumerate(ppns):
        c = COLOURS[i % len(COLOURS)]
        svg.append(
            f'<line x1="{x}" y1="16" x2="{x + 24}" y2="16" stroke="{c}" stroke-width="2"/>'
            f'<text x="{x + 28}" y="20">{ppn} per node</text>'
        )
        x += 120
    svg.append(
        f'<line x1="{x}" y1="16" x2="{x + 24}" y2="16" stroke="#000" stroke-dasharray="5,4"/>'
        f'<text x="{x + 28}" y="20">flat</text>'
        f'<line x1="{x + 70}" y1="16" x2="{x + 94}" y2="16" stroke="#000"/>'
        f'<text x="{x + 98}" y="20">two-level</text>'
    )
    if measured:
        svg.append(
            f'<text x="{x + 180}" y="20">measured: □ flat, ● two-level</text>'
        )
    svg.append("</svg>")
    with open(args[1], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main(sys.argv)
