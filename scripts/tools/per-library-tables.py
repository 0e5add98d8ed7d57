#!/usr/bin/env python3
"""Writes the README's per-library benchmark tables (between the PER-LIBRARY markers) from the
recorded results: scripts/bench/results/imb-NAME.md (scripts/bench/run-imb, MPICH-ABI libraries)
and scripts/bench/results/latency-NAME.md (scripts/bench/run-latency, the Open MPI libraries,
which the IMB binaries cannot run on). Usage: scripts/tools/per-library-tables.py"""
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RES = ROOT / "scripts/bench/results"
TITLES = {"mpich4": "Debian's MPICH 4.0.2", "mpich5": "MPICH 5.0.2 (wheel)", "impi": "Intel MPI 2021.19 (wheel)",
          "ompi4": "Debian's Open MPI 4.1.4", "ompi5": "Open MPI 5.0.11 (wheel)"}


def imb(name):
    text = (RES / f"imb-{name}.md").read_text()
    s = text[text.index("## Summary"):]
    rows = re.findall(r"^\| (\w+) \| ([0-9.]+) \| ([0-9.]+) at (\d+) B \| (\d+) of (\d+) \|$", s, re.M)
    geo = re.search(r"all (\d+) points: \*\*([0-9.]+)\*\*", s)
    worst = re.search(r"from 4 KiB up: \*\*([0-9.]+)\*\* \(([^)]*)\)", s)
    slower = re.search(r"more than 5%: \*\*(\d+) of (\d+)\*\*", s)
    ov = re.search(r"native \*\*([0-9.]+)%\*\*, shim \*\*([0-9.]+)%\*\*", text)
    out = [f"**{TITLES[name]}** (Intel's IMB-MPI1, `scripts/bench/results/imb-{name}.md`): geometric-mean "
           f"speedup native/shim **{geo.group(2)}** over {geo.group(1)} points; worst shim/native from 4 KiB "
           f"up **{worst.group(1)}** ({worst.group(2)}); **{slower.group(1)} of {slower.group(2)}** points from "
           f"4 KiB up more than 5% slower" + (f"; IMB-NBC median overlap from 256 KiB: native {ov.group(1)}%, "
                                              f"shim with its thread {ov.group(2)}%." if ov else ".")]
    out.append("")
    out.append("| collective | geo-mean speedup | worst shim/native from 4 KiB | > 5% slower from 4 KiB |")
    out.append("|---|---|---|---|")
    for c, g, w, at, k, n in rows:
        out.append(f"| {c} | {g} | {w} at {at} B | {k} of {n} |")
    return out


def latency(name):
    f = RES / f"latency-{name}.md"
    rows = re.findall(r"^\| (\w+) \| blocking \| (\d+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$", f.read_text(), re.M)
    per = {}
    for c, b, sysus, shimus, r in rows:
        per.setdefault(c, []).append((int(b), float(sysus), float(shimus)))
    ratios = [s / n for v in per.values() for _, n, s in v if n > 0 and s > 0]
    geo = math.exp(-sum(math.log(x) for x in ratios) / len(ratios))
    big = [(s / n, c, b) for c, v in per.items() for b, n, s in v if b >= 4096 and n > 0]
    worst = max(big)
    slow = sum(1 for r, _, _ in big if r > 1.05)
    out = [f"**{TITLES[name]}** (the project's `scripts/bench/latency.c`, blocking, 8 B-4 MiB, "
           f"`scripts/bench/results/latency-{name}.md`): geometric-mean speedup system/shim **{geo:.3f}** over "
           f"{len(ratios)} points; worst shim/system from 4 KiB up **{worst[0]:.2f}** ({worst[1]} {worst[2]} B); "
           f"**{slow} of {len(big)}** points from 4 KiB up more than 5% slower.", "",
           "| collective | geo-mean speedup | worst shim/system from 4 KiB | > 5% slower from 4 KiB |", "|---|---|---|---|"]
    for c, v in per.items():
        rs = [s / n for _, n, s in v if n > 0 and s > 0]
        g = math.exp(-sum(math.log(x) for x in rs) / len(rs))
        bv = [(s / n, b) for b, n, s in v if b >= 4096 and n > 0]
        w = max(bv)
        out.append(f"| {c} | {g:.3f} | {w[0]:.2f} at {w[1]} B | {sum(1 for r, _ in bv if r > 1.05)} of {len(bv)} |")
    return out


def main():
    lines = []
    for name in ["mpich4", "mpich5", "impi"]:
        if (RES / f"imb-{name}.md").exists():
            lines += imb(name) + [""]
    for name in ["ompi4", "ompi5"]:
        if (RES / f"latency-{name}.md").exists():
            lines += latency(name) + [""]
    readme = ROOT / "README.md"
    s = readme.read_text()
    a, b = "<!-- BEGIN PER-LIBRARY -->\n", "<!-- END PER-LIBRARY -->"
    s = s[: s.index(a) + len(a)] + "\n".join(lines) + s[s.index(b):]
    readme.write_text(s)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
