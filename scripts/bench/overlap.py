#!/usr/bin/env python3
"""Overlap benchmark driver: scripts/bench/overlap.c under four configurations, side by side.

Configurations: the system MPI; the system MPI with its own progress thread
(MPIR_CVAR_ASYNC_PROGRESS=1); the shim with SHIM_PROGRESS=none; the shim with
SHIM_PROGRESS=thread. Environments: shared memory (the MPI library's defaults), the
emulated network (a network namespace whose loopback is shaped to 2 Gbit/s with
tbf; UCX over TCP; design notes README "Running MPI here") and `cluster`: the ranks spread
over the emulated cluster's nodes (scripts/tools/cluster up, one rank per node up to 4
nodes, links of --cluster-rate, 10 Gbit/s by default; needs root; brought up and down here). Each configuration runs
`--repeat` times; per point the median of each metric is reported.

Outputs (build/bench/overlap-results/): all.csv (every row of every run), summary.md (medians,
one table per environment and mode), overlap-<env>.png (OSU overlap versus size, one panel
per collective, one line per configuration), and the target check on stdout.

With --mpi openmpi: Debian's Open MPI (mpirun.openmpi, the benchmark built with
mpicc.openmpi, the shim's Open MPI build), over TCP (`--mca pml ob1 --mca btl tcp,self`)
in both environments; Open MPI has no progress-thread setting, so three configurations.

Usage: overlap.py [--mpi mpich|openmpi] [--env shm,net,cluster] [--ranks 2] [--repeat 3]
                  [--iters 10] [--colls Ibcast,...] [--min 1024] [--max 4194304]
                  [--configs system,shim-none,shim-thread]
Run it through scripts/bench/run-overlap, which builds the benchmark and a venv with matplotlib.
"""
import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is scripts/bench/overlap.py)
OUT = ROOT / "build" / "bench" / "overlap-results"
LIB = os.environ.get("SHIM_LIB_PATH", str(ROOT / "target" / "release" / "libshim.so"))
OMPI_LIB = os.environ.get("SHIM_OMPI_LIB_PATH", str(ROOT / "target" / "ompi" / "release" / "libshim.so"))
CONFIGS = [
    ("system", {}),
    ("system+async", {"MPIR_CVAR_ASYNC_PROGRESS": "1"}),
    ("shim-none", {"LD_PRELOAD": LIB, "SHIM_PROGRESS": "none"}),
    ("shim-thread", {"LD_PRELOAD": LIB, "SHIM_PROGRESS": "thread"}),
    # the library's progress thread runs the shim's schedules (MPICH 4.3 and later: run with
    # MPICC/MPIRUN from `scripts/tools/mpi-env mpich5`)
    ("shim-library", {"LD_PRELOAD": LIB, "SHIM_PROGRESS": "library", "MPIR_CVAR_ASYNC_PROGRESS": "1"}),
]
OMPI_CONFIGS = [
    ("system", {}),
    ("shim-none", {"LD_PRELOAD": OMPI_LIB, "SHIM_PROGRESS": "none"}),
    ("shim-thread", {"LD_PRELOAD": OMPI_LIB, "SHIM_PROGRESS": "thread"}),
]
OPENMPI = False
NETNS = "shimnet"
CLUSTER = ROOT / "scripts" / "tools" / "cluster"
METRICS = ["t_blk_us", "t_pure_us", "t_cpu_us", "t_ovl_us", "t_comp_us", "t_test_us", "t_mpi_us", "wl_ovh_us",
           "osu_pct", "imb_pct", "beta", "thr_pct", "wl_pct"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def setup_netns():
    """The emulated network: a namespace with a 2 Gbit/s tbf on its loopback."""
    have = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    if NETNS not in have.split():
        subprocess.run(["ip", "netns", "add", NETNS], check=True)
    subprocess.run(["ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "netns", "exec", NETNS, "tc", "qdisc", "replace", "dev", "lo", "root", "tbf", "rate",
                    "2gbit", "burst", "256kb", "latency", "100ms"], check=True)


FAILURES = []


def run(env_name, label, extra, args, binary, coll):
    """One mpirun per collective, so that a hang (MPICH's progress thread hangs now and
    then on the emulated network) costs one collective, not the whole configuration."""
    envs = [f"{k}={v}" for k, v in extra.items()]
    if OPENMPI:
        # TCP over loopback (Open MPI's TCP BTL skips lo unless told to use it)
        cmd = ["timeout", "-k", "10", str(args.timeout), os.environ.get("MPIRUN_OMPI", "mpirun.openmpi"),
               "--allow-run-as-root", "--oversubscribe", "-n", str(args.ranks), "--mca", "pml", "ob1",
               "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    else:
        cmd = ["timeout", "-k", "10", str(args.timeout), os.environ.get("MPIRUN", "mpirun.mpich"), "-n", str(args.ranks)]
    cmd += ["env"] + envs + [str(binary), "-c", coll, "-s", str(args.min), "-S", str(args.max),
                             "-i", str(args.iters), "-l", label]
    if env_name == "net":
        cmd = ["ip", "netns", "exec", NETNS, "env", "UCX_TLS=tcp,self", "UCX_NET_DEVICES=lo"] + cmd
    if env_name == "cluster":
        # timeout, then the cluster's run (the launcher must follow its --), then mpirun
        nodes = min(args.ranks, 4)
        ppn = -(-args.ranks // nodes)
        cmd = cmd[:4] + [str(CLUSTER), "run", "--nodes", str(nodes), "--ppn", str(ppn), "--min-bytes", "0",
                         "--"] + cmd[4:]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        why = "timed out (hung)" if p.returncode in (124, 137) else f"failed ({p.returncode})"
        log(f"{env_name}/{label}/{coll} {why}:\n{p.stderr[-1000:]}")
        FAILURES.append(f"{env_name} {label} {coll}: {why}")
        return []
    rows = [r for r in csv.DictReader(io.StringIO(p.stdout))]
    for r in rows:
        r["env"] = env_name
    return rows


def plot(rows, env_name, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not available: no plot (scripts/bench/run-overlap installs it in a venv)")
        return
    colls = sorted({r["collective"] for r in rows if r["collective"] != "Ibarrier"})
    n = len(colls)
    cols = 3
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(13, 3.4 * ((n + cols - 1) // cols)), squeeze=False)
    for ax, coll in zip(axes.flat, colls):
        for label, _ in CONFIGS:
            pts = sorted((int(r["bytes"]), float(r["osu_pct"])) for r in rows
                         if r["collective"] == coll and r["label"] == label and r["mode"] == "overlap")
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_ylim(-2, 102)
        ax.set_title(f"{coll} ({env_name})")
        ax.set_xlabel("bytes")
        ax.set_ylabel("OSU overlap %")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    log(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", choices=["mpich", "openmpi"], default="mpich")
    ap.add_argument("--env", default="shm,net")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--colls", default="Ibarrier,Ibcast,Ireduce,Iallreduce,Igather,Iscatter,Iallgather,Ialltoall,"
                                       "Ireduce_scatter_block")
    ap.add_argument("--min", type=int, default=1024)
    ap.add_argument("--max", type=int, default=4 << 20)
    ap.add_argument("--binary", default=None, help="default build/bench/overlap (overlap-ompi for Open MPI)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per mpirun (one collective)")
    ap.add_argument("--cluster-rate", default="10gbit", help="the emulated cluster's link rate (a tc rate)")
    ap.add_argument("--configs", default="", help="comma list of configuration labels to run (default all)")
    args = ap.parse_args()
    global OUT, CONFIGS, OPENMPI
    if args.mpi == "openmpi":
        OPENMPI, CONFIGS, OUT = True, OMPI_CONFIGS, OUT.with_name("overlap-results-ompi")
    if args.configs:
        CONFIGS = [c for c in CONFIGS if c[0] in args.configs.split(",")]
    if args.binary is None:
        args.binary = str(ROOT / "build" / "bench" / ("overlap-ompi" if OPENMPI else "overlap"))
    OUT.mkdir(parents=True, exist_ok=True)
    envs = args.env.split(",")
    if "net" in envs:
        setup_netns()
    if "cluster" in envs:
        subprocess.run([str(CLUSTER), "up", str(min(args.ranks, 4)), "--rate", args.cluster_rate], check=True)
    allrows = []
    for env_name in envs:
        for rep in range(args.repeat):
            for label, extra in CONFIGS:
                log(f"{env_name} run {rep + 1}/{args.repeat}: {label}")
                for coll in args.colls.split(","):
                    allrows += run(env_name, label, extra, args, args.binary, coll)
    if "cluster" in envs:
        subprocess.run([str(CLUSTER), "down"], check=False)
    with open(OUT / "all.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["env"] + list(allrows[0].keys() - {"env"}) if allrows else ["env"])
        w.writeheader()
        w.writerows(allrows)
    # medians per (env, label, collective, bytes, mode)
    groups = {}
    for r in allrows:
        groups.setdefault((r["env"], r["label"], r["collective"], int(r["bytes"]), r["mode"]), []).append(r)
    med = []
    for (env_name, label, coll, b, mode), rs in groups.items():
        m = {"env": env_name, "label": label, "collective": coll, "bytes": b, "mode": mode}
        for k in METRICS:
            m[k] = statistics.median(float(r[k]) for r in rs)
        med.append(m)
    labels = [l for l, _ in CONFIGS]
    lines = []
    for env_name in envs:
        for mode, what, key in [("overlap", "OSU overlap % (I*, compute, Wait)", "osu_pct"),
                                ("overlap", "IMB-NBC overlap %", "imb_pct"),
                                ("overlap+test", "OSU overlap % with MPI_Test during the compute", "osu_pct"),
                                ("overlap", "pure communication time (us): I* + Wait", "t_pure_us"),
                                ("overlap", "CRESTA beta", "beta"),
                                ("long", "workload-based overhead, % of a compute 3x as long as the communication", "wl_pct"),
                                ("long", "progress thread CPU, % of that compute", "thr_pct")]:
            lines.append(f"\n### {env_name}: {what}\n")
            lines.append("| collective | bytes | " + " | ".join(labels) + " |")
            lines.append("|---|---|" + "---|" * len(labels))
            keys = sorted({(m["collective"], m["bytes"]) for m in med if m["env"] == env_name and m["mode"] == mode},
                          key=lambda x: (args.colls.split(",").index(x[0]) if x[0] in args.colls.split(",") else 99, x[1]))
            for coll, b in keys:
                vals = []
                for l in labels:
                    v = [m[key] for m in med if m["env"] == env_name and m["label"] == l and m["collective"] == coll
                         and m["bytes"] == b and m["mode"] == mode]
                    vals.append(f"{v[0]:.1f}" if v else "-")
                lines.append(f"| {coll} | {b} | " + " | ".join(vals) + " |")
        plot([dict(m, osu_pct=m["osu_pct"]) for m in med if m["env"] == env_name], env_name,
             OUT / f"overlap-{env_name}.png")
    if FAILURES:
        lines.append("\n### runs that did not finish\n")
        lines += [f"- {f}" for f in FAILURES]
    (OUT / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    # target check (issue 4; issue 35 across nodes): network, thread, 64 KiB..4 MiB
    for net in [e for e in envs if e in ("net", "cluster")]:
        targets = ["Ibcast", "Iallreduce", "Ialltoall", "Iallgather", "Igather", "Ireduce"]
        print(f"\n### target check ({net}, SHIM_PROGRESS=thread)\n")
        for m in sorted(med, key=lambda m: (m["collective"], m["bytes"])):
            if m["env"] != net or m["label"] != "shim-thread" or m["mode"] != "overlap":
                continue
            if m["collective"] not in targets or not (64 << 10) <= m["bytes"] <= (4 << 20):
                continue
            sys_pure = [x["t_pure_us"] for x in med if x["env"] == net and x["label"] == "system"
                        and x["collective"] == m["collective"] and x["bytes"] == m["bytes"] and x["mode"] == "overlap"]
            ratio = m["t_pure_us"] / sys_pure[0] if sys_pure else float("nan")
            longrow = [x for x in med if x["env"] == net and x["label"] == "shim-thread" and x["mode"] == "long"
                       and x["collective"] == m["collective"] and x["bytes"] == m["bytes"]]
            thr = longrow[0]["thr_pct"] if longrow else float("nan")
            print(f"{m['collective']:>11} {m['bytes']:>8}: OSU overlap {m['osu_pct']:5.1f}% "
                  f"{'ok ' if m['osu_pct'] >= 90 else 'MISS'} | pure comm {ratio:4.2f}x system "
                  f"{'ok ' if ratio <= 1.05 else 'MISS'} | thread CPU {thr:4.1f}% of compute {'ok' if thr <= 5 else 'MISS'}")
    log(f"results in {OUT}")


if __name__ == "__main__":
    main()
