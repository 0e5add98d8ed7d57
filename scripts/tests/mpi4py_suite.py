#!/usr/bin/env python3
"""Runs mpi4py's own test suite against the system MPI, with and without libshim.

mpi4py ships its tests in the sdist. This script builds mpi4py from the sdist against the
system MPI once (the wheel is cached, the build takes minutes), then runs every test file
as its own `mpirun` job with a timeout, once per configuration, and compares per test:
every test that passes without the shim must pass with it.

Configurations are "<label>:<ranks>:<env>" strings, e.g. "shim:2:LD_PRELOAD=@LIB@"; the
first configuration of each rank count whose label is "native" is the baseline.

Usage: mpi4py_suite.py [--mpi mpich|openmpi|NAME] [--ranks 1,2] [--config ...] [--only test_cco_buf,...]
With --mpi openmpi, mpi4py is built with mpicc.openmpi (its own wheel and virtualenv), run
with mpirun.openmpi, and @LIB@ is the Open MPI build of the shim (target/ompi).
With --mpi NAME, one of scripts/tools/mpi-env's libraries (mpich4 and ompi4 are the two
above; mpich5, impi, ompi5 are the Python-wheel libraries): mpi4py is built from the sdist
with that library's mpicc into its own wheel (cache: <cache>/<NAME>) and virtualenv
(build/mpi4py/<NAME>), run with its mpiexec, and @LIB@ is the shim build for its ABI.
Results: build/mpi4py/<label>-n<ranks>.json (build/mpi4py/openmpi/... for Open MPI,
build/mpi4py/<NAME>/... for the others) and a summary on stdout.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is scripts/tests/mpi4py_suite.py)
VERSION = os.environ.get("MPI4PY_VERSION", "4.1.2")
# Set by configure() from --mpi.
BUILD = CACHE = SDIST_DIR = LIB = None
MPIRUN = MPICC = ""
OPENMPI = False
OMPI5 = False  # Open MPI 5's mpiexec (PRRTE) names per-rank output differently
LAUNCHER = []  # an mpi-env library's mpiexec with its flags
MPI_NAMES = ["mpich4", "ompi4", "mpich5", "impi", "ompi5"]


def configure(mpi):
    """Paths and commands for one MPI: MPICH (the default ABI), Open MPI, or a library of
    scripts/tools/mpi-env."""
    global BUILD, CACHE, SDIST_DIR, LIB, MPIRUN, MPICC, OPENMPI, OMPI5, LAUNCHER
    mpi = {"mpich4": "mpich", "ompi4": "openmpi"}.get(mpi, mpi)  # the same wheels and venvs
    OPENMPI = mpi == "openmpi"
    BUILD = ROOT / "build" / "mpi4py"
    CACHE = SDIST_DIR = Path(os.environ.get("SHIM_TEST_CACHE", Path.home() / ".cache" / "libshim-tests"))
    if mpi in MPI_NAMES:
        sys.path.insert(0, str(ROOT / "scripts" / "tools"))
        from mpi_env import mpi_env
        env = mpi_env(mpi)
        LIB = env.pop("SHIM_LIB_FOR")  # (the ranks would warn of an unknown SHIM_ variable)
        os.environ.clear()
        os.environ.update(env)  # PATH, LD_LIBRARY_PATH and the library's own variables
        CACHE, BUILD = CACHE / mpi, BUILD / mpi
        MPICC, LAUNCHER = env["MPICC"], shlex.split(env["MPIRUN"])
        OPENMPI = env["MPI_FAMILY"] == "ompi"
        OMPI5 = mpi == "ompi5"
    elif OPENMPI:
        # a second wheel and virtualenv: mpi4py links one MPI library
        CACHE, BUILD = CACHE / "openmpi", BUILD / "openmpi"
        MPIRUN = os.environ.get("MPIRUN_OMPI", "mpirun.openmpi")
        MPICC = os.environ.get("MPICC_OMPI", "mpicc.openmpi")
        LIB = os.environ.get("SHIM_OMPI_LIB_PATH", str(ROOT / "target" / "ompi" / "release" / "libshim.so"))
    else:
        MPIRUN = os.environ.get("MPIRUN", "mpirun.mpich")
        MPICC = os.environ.get("MPICC", "mpicc.mpich")
        LIB = os.environ.get("SHIM_LIB_PATH", str(ROOT / "target" / "release" / "libshim.so"))


def mpirun(ranks, logdir=None):
    """The launcher command line; per-rank stderr goes to files under logdir."""
    if OMPI5:
        return LAUNCHER + ["-n", str(ranks)] + (["--output", f"dir={logdir / 'out'}"] if logdir else [])
    if LAUNCHER and not OPENMPI:
        extra = ["-errfile-pattern", str(logdir / "err.%r")] if logdir else []
        return LAUNCHER + ["-n", str(ranks)] + extra
    if not OPENMPI:
        extra = ["-errfile-pattern", str(logdir / "err.%r")] if logdir else []
        return [MPIRUN, "-n", str(ranks)] + extra
    # Open MPI as root needs --allow-run-as-root, and --oversubscribe beyond the 2 cores
    extra = ["--output-filename", str(logdir / "out")] if logdir else []
    return [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-n", str(ranks)] + extra


def rank_stderr(logdir, r):
    """Where mpirun() put rank r's stderr."""
    if not OPENMPI:
        return logdir / f"err.{r}"
    # out/1/rank.r/stderr (Open MPI 4.1), out/<job name>/rank.r/stderr (5.0)
    found = list((logdir / "out").glob(f"*/rank.{r}/stderr"))
    return found[0] if found else logdir / "out" / "1" / f"rank.{r}" / "stderr"

# Test files excluded at some rank counts, and why (they fail or hang without the shim).
EXCLUDE = {
    # hangs at 2+ ranks with the system MPI alone (noted in the foundation issue)
    "test_util_sync": lambda n: n >= 2,
    # Open MPI 4.1 as root in this container: MPI_Comm_spawn hangs (120 s timeout) natively
    "test_spawn": lambda n: OPENMPI,
}

RESULT_RE = re.compile(
    r"^(test\w*) \(([\w.]+)\)(?:\n(?!test\w* \().*?)?\s\.\.\.\s"
    r"(ok|FAIL|ERROR|skipped|expected failure|unexpected success)",
    re.M | re.S,
)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def ensure_sdist():
    CACHE.mkdir(parents=True, exist_ok=True)
    sdist = SDIST_DIR / f"mpi4py-{VERSION}.tar.gz"
    if not sdist.exists():
        log(f"downloading the mpi4py {VERSION} sdist")
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", "mpi4py",
                        "--no-deps", f"mpi4py=={VERSION}", "-d", str(SDIST_DIR)], check=True)
    return sdist


def ensure_env():
    """A virtualenv with mpi4py built against the system MPI, and the unpacked tests."""
    sdist = ensure_sdist()
    src = BUILD / f"mpi4py-{VERSION}"
    if not src.exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as t:
            t.extractall(BUILD, filter="data")
    wheels = list(CACHE.glob(f"mpi4py-{VERSION}-*.whl"))
    if not wheels:
        log(f"building mpi4py with {MPICC} (under a minute; the wheel is cached in {CACHE})")
        # -O0 -g0: the one large generated C file builds in ~25 s instead of ~170 s at
        # Python's -O3 -g, and the suite then runs ~10% slower, a net saving of minutes per
        # wheel in CI (which starts with an empty cache). CFLAGS from the caller win.
        env = dict(os.environ, MPICC=MPICC)
        env.setdefault("CFLAGS", "-O0 -g0")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(src),
                        "-w", str(CACHE)], check=True, env=env)
        wheels = list(CACHE.glob(f"mpi4py-{VERSION}-*.whl"))
    venv = BUILD / "venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(wheels[0]), "numpy"], check=True)
    return py, src / "test"


def parse(text):
    out = {}
    for m in RESULT_RE.finditer(text):
        name, ident, status = m.group(1), m.group(2), m.group(3)
        out[ident] = {"ok": "ok", "FAIL": "fail", "ERROR": "error", "skipped": "skip",
                      "expected failure": "ok", "unexpected success": "fail"}[status]
    return out


def run_module(py, testdir, module, ranks, env_extra, timeout):
    logdir = BUILD / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    for f in logdir.glob("err.*"):
        f.unlink()
    shutil.rmtree(logdir / "out", ignore_errors=True)
    env = dict(os.environ)
    env.update(env_extra)
    cmd = ["timeout", "-k", "5", str(timeout)] + mpirun(ranks, logdir) + [str(py), "main.py", "-v", module]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=testdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace")
    dt = time.time() - t0
    per_rank = []
    for r in range(ranks):
        f = rank_stderr(logdir, r)
        per_rank.append(f.read_text(errors="replace") if f.exists() else "")
    timed_out = p.returncode in (124, 137)
    results = {}
    for text in per_rank:
        for ident, st in parse(text).items():
            prev = results.get(ident)
            # combine ranks: the worst outcome wins
            order = ["ok", "skip", "fail", "error"]
            if prev is None or order.index(st) > order.index(prev):
                results[ident] = st
    summary_ok = any(re.search(r"^OK\b", t, re.M) for t in per_rank)
    return {
        "module": module, "returncode": p.returncode, "seconds": round(dt, 2), "timeout": timed_out,
        "tests": results, "ran": summary_ok,
        "tail": ("\n".join(per_rank[0].splitlines()[-15:]) + "\n" + p.stdout[-2000:]) if p.returncode else "",
    }


PROBE = """
import array, ctypes, sys
from mpi4py import MPI
buf = array.array("i", [1])
MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, [buf, MPI.INT])
assert buf[0] == MPI.COMM_WORLD.Get_size()
MPI.COMM_WORLD.Barrier()
lib = ctypes.CDLL(None)
try:
    f = lib.shim_call_count
except AttributeError:
    sys.exit("libshim is not loaded in the mpi4py process")
f.restype = ctypes.c_uint64
n = f(b"MPI_Allreduce") + f(b"MPI_Allreduce_c") + f(b"MPI_Barrier")
sys.exit(0 if n >= 2 else f"mpi4py's calls were not intercepted ({n})")
"""


def check_intercepted(py, label, env_extra, ranks):
    env = dict(os.environ)
    env.update(env_extra)
    p = subprocess.run(["timeout", "-k", "5", "60"] + mpirun(ranks) + [str(py), "-c", PROBE],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        log(p.stdout)
        raise SystemExit(f"{label}: interception check failed")
    log(f"{label} n={ranks}: mpi4py's MPI calls go through libshim")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", choices=["mpich", "openmpi"] + MPI_NAMES, default="mpich")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--config", action="append", default=[],
                    help="label:env1=v1,env2=v2 (env may use @LIB@); default native and shim")
    ap.add_argument("--only", default="", help="comma list of test modules")
    ap.add_argument("--timeout", type=int, default=int(os.environ.get("MPI4PY_TIMEOUT", "120")))
    ap.add_argument("--setup-only", action="store_true")
    a = ap.parse_args()
    configure(a.mpi)
    py, testdir = ensure_env()
    if a.setup_only:
        return 0
    configs = a.config or ["native:", "shim:LD_PRELOAD=@LIB@"]
    parsed = []
    for c in configs:
        label, _, envs = c.partition(":")
        env = {}
        for kv in filter(None, envs.split(",")):
            k, _, v = kv.partition("=")
            env[k] = v.replace("@LIB@", LIB)
        parsed.append((label, env))
    modules = sorted(p.stem for p in testdir.glob("test_*.py"))
    if a.only:
        modules = [m for m in modules if m in a.only.split(",")]
    ranks = [int(x) for x in a.ranks.split(",")]
    failures = []
    table = []
    for n in ranks:
        results = {}
        for label, env in parsed:
            if label != "native":
                check_intercepted(py, label, env, n)
            res = {}
            t0 = time.time()
            for m in modules:
                if m in EXCLUDE and EXCLUDE[m](n):
                    continue
                res[m] = run_module(py, testdir, m, n, env, a.timeout)
                st = res[m]
                if st["timeout"]:
                    log(f"  {label} n={n} {m}: TIMEOUT after {st['seconds']}s")
            results[label] = res
            (BUILD / f"{label}-n{n}.json").write_text(json.dumps(res, indent=1))
            counts = {"ok": 0, "skip": 0, "fail": 0, "error": 0}
            timeouts = 0
            for m, st in res.items():
                timeouts += st["timeout"]
                for s in st["tests"].values():
                    counts[s] += 1
            table.append((label, n, counts, timeouts, round(time.time() - t0)))
            log(f"{label} n={n}: {counts} timeouts={timeouts} in {round(time.time() - t0)}s")
        base = results.get("native")
        if base is None:
            # no baseline: every test must pass or be skipped
            for label, res in results.items():
                for m, st in res.items():
                    bad = [i for i, v in st["tests"].items() if v not in ("ok", "skip")]
                    if bad or st["timeout"] or st["returncode"] != 0:
                        failures.append(f"{label} n={n}: {m}: exit {st['returncode']}, failing {bad[:10]}\n{st['tail']}")
            continue
        for label, res in results.items():
            if label == "native":
                continue
            for m, st in base.items():
                other = res.get(m)
                for ident, s in st["tests"].items():
                    if s != "ok":
                        continue
                    got = other["tests"].get(ident, "timeout" if other and other["timeout"] else "missing") if other else "missing"
                    if got != "ok":
                        failures.append(f"{label} n={n}: {ident} passes natively but is {got} with {label}")
                if other and other["returncode"] != 0 and st["returncode"] == 0:
                    failures.append(f"{label} n={n}: {m} exited {other['returncode']} (natively 0)\n{other['tail']}")
    print("| configuration | ranks | passed | skipped | failed | errors | timed-out files | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for label, n, c, t, s in table:
        print(f"| {label} | {n} | {c['ok']} | {c['skip']} | {c['fail']} | {c['error']} | {t} | {s} |")
    if failures:
        print(f"\n{len(failures)} regressions against the system MPI alone:")
        for f in failures[:200]:
            print("  " + f)
        return 1
    if any(label == "native" for label, _ in parsed):
        print("\nno regressions: every test that passes without the shim passes with it")
    else:
        print("\nevery test passed (or was skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
