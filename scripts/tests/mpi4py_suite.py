#!/usr/bin/env python3
"""Runs mpi4py's own test suite against the system MPI, with and without libshim.

mpi4py ships its tests in the sdist. This script builds mpi4py from the sdist against the
system MPI once (the wheel is cached, the build takes minutes), then runs every test file
as its own `mpirun` job with a timeout, once per configuration, and compares per test:
every test that passes without the shim must pass with it.

Configurations are "<label>:<env>" strings, e.g. "shim:LD_PRELOAD=@LIB@"; the one labelled
"native" is the baseline. It runs last, and only the files where another configuration had
a test that did not pass, skips included (or a file that did not exit 0): a test that
passes with the shim needs no native run to show it is no regression. --native-all runs every file natively.
--skip-for LABEL=MODS leaves those files out of one configuration (and --only-for LABEL=MODS
keeps only those), for files another run covers more strongly.

Usage: mpi4py_suite.py [--mpi mpich|openmpi|NAME] [--ranks 1,2] [--config ...] [--only test_cco_buf,...]
       [--skip-for LABEL=MODS] [--only-for LABEL=MODS] [--native-all] [--binary]
With --mpi openmpi, mpi4py is built with mpicc.openmpi (its own wheel and virtualenv), run
with mpirun.openmpi, and @LIB@ is the Open MPI build of the shim (target/ompi).
--binary uses mpi4py's binary wheel with the system MPICH or Open MPI too (build/mpi4py/
<mpich|openmpi>-binary): it finds the MPI-4 functions an MPI-3.1 library lacks in the shim.
With --mpi NAME, one of scripts/tools/mpi-env's libraries (mpich4 and ompi4 are the two
above; mpich5, impi, ompi5 are the Python-wheel libraries): mpi4py's binary wheel from PyPI
(which loads the library it finds) in its own virtualenv (build/mpi4py/<NAME>), run with the
library's mpiexec, and @LIB@ is the shim build for its ABI.
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
BINARY = False  # mpi4py's binary wheel from PyPI instead of a build from the sdist
PIP_ENV = dict(os.environ)  # pip's settings (index, certificates), kept from the caller
MPI_NAMES = ["mpich4", "ompi4", "mpich5", "impi", "ompi5"]


def configure(mpi, binary=False):
    """Paths and commands for one MPI: MPICH (the default ABI), Open MPI, or a library of
    scripts/tools/mpi-env. `binary`: the system library with mpi4py's binary wheel."""
    global BUILD, CACHE, SDIST_DIR, LIB, MPIRUN, MPICC, OPENMPI, OMPI5, LAUNCHER, BINARY
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
        # these libraries come from PyPI, and so does the mpi4py their users run: its binary
        # wheel, which finds the library at run time (the MPICH and the Open MPI ABI). It
        # also saves a build of about a minute per library in CI.
        BINARY = True
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
    if binary and not BINARY:
        # the wheel looks every MPI-4 function up at run time and has its own fallback when
        # the library lacks one (Open MPI 4.1): the shim's symbols must then do the job
        BINARY = True
        BUILD = BUILD.with_name(BUILD.name + "-binary")


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
                        "--no-deps", f"mpi4py=={VERSION}", "-d", str(SDIST_DIR)], check=True, env=PIP_ENV)
    return sdist


def ensure_env():
    """A virtualenv with mpi4py built against the system MPI (or its binary wheel, for the
    libraries from PyPI), and the unpacked tests."""
    sdist = ensure_sdist()
    src = BUILD / f"mpi4py-{VERSION}"
    if not src.exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as t:
            t.extractall(BUILD, filter="data")
    venv = BUILD / "venv"
    py = venv / "bin" / "python"
    if BINARY:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=PIP_ENV)
            subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--only-binary", "mpi4py",
                            f"mpi4py=={VERSION}", "numpy"], check=True, env=PIP_ENV)
        return py, src / "test"
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


def preload_lib():
    """What @LIB@ stands for. The binary mpi4py first looks for MPI in the process itself,
    finds the preloaded shim's MPI_* symbols and takes the MPICH ABI; under Open MPI the
    library is preloaded after the shim, as scripts/tools/shimrun does for such programs."""
    if not (BINARY and OPENMPI):
        return LIB
    dirs = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    # a system Open MPI is in the linker's own path: its compiler wrapper names the folder
    dirs += subprocess.run([MPICC, "--showme:libdirs"], capture_output=True, text=True).stdout.split()
    for d in filter(None, dirs):
        for name in ("libmpi.so.40", "libmpi.so"):  # (Debian's folder has the link)
            lib = Path(d) / name
            if lib.exists() and ".so.40" in lib.resolve().name:
                return f"{LIB}:{lib.resolve()}"
    raise SystemExit("libmpi.so.40 is not on LD_LIBRARY_PATH nor in mpicc --showme:libdirs")


def passed(st):
    """A file's run where every test passed and the job exited 0. A skipped test does not
    count: the shim must not make a test skip that passes natively (a feature reported
    missing), so a file with skips gets its native run."""
    return st["returncode"] == 0 and not st["timeout"] and all(v == "ok" for v in st["tests"].values())


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
    ap.add_argument("--skip-for", action="append", default=[], help="LABEL=test_a,test_b: not in that configuration")
    ap.add_argument("--only-for", action="append", default=[], help="LABEL=test_a,test_b: only these in that configuration")
    ap.add_argument("--native-all", action="store_true", help="run every file natively, not only where another configuration failed")
    ap.add_argument("--binary", action="store_true", help="mpi4py's binary wheel for --mpi mpich/openmpi too")
    a = ap.parse_args()
    configure(a.mpi, a.binary)
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
            env[k] = v.replace("@LIB@", preload_lib())
        parsed.append((label, env))
    modules = sorted(p.stem for p in testdir.glob("test_*.py"))
    if a.only:
        modules = [m for m in modules if m in a.only.split(",")]
    ranks = [int(x) for x in a.ranks.split(",")]
    failures = []
    table = []
    def per_label(opts):
        out = {}
        for o in opts:
            label, _, mods = o.partition("=")
            out.setdefault(label, set()).update(filter(None, mods.split(",")))
        return out
    skip_for, only_for = per_label(a.skip_for), per_label(a.only_for)
    # the baseline last: it then needs only the files some other configuration failed in
    parsed.sort(key=lambda c: c[0] == "native")
    for n in ranks:
        results = {}
        for label, env in parsed:
            mods = [m for m in modules if not (m in EXCLUDE and EXCLUDE[m](n))
                    and m not in skip_for.get(label, ()) and (label not in only_for or m in only_for[label])]
            if label != "native":
                check_intercepted(py, label, env, n)
            elif not a.native_all and len(parsed) > 1:
                mods = [m for m in mods if any(not passed(r[m]) for r in results.values() if m in r)]
            res = {}
            t0 = time.time()
            for m in mods:
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
            table.append((label, n, counts, timeouts, round(time.time() - t0), len(res)))
            log(f"{label} n={n}: {counts} in {len(res)} files, timeouts={timeouts} in {round(time.time() - t0)}s")
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
            for m, other in res.items():
                st = base.get(m)
                if st is None:
                    if passed(other):
                        continue  # every test passed: no baseline needed
                    # (only with --skip-for native or --only-for native leaving it out)
                    failures.append(f"{label} n={n}: {m} did not pass and has no native run\n{other['tail']}")
                    continue
                for ident, s in st["tests"].items():
                    if s != "ok":
                        continue
                    got = other["tests"].get(ident, "timeout" if other and other["timeout"] else "missing") if other else "missing"
                    if got != "ok":
                        failures.append(f"{label} n={n}: {ident} passes natively but is {got} with {label}")
                if other and other["returncode"] != 0 and st["returncode"] == 0:
                    failures.append(f"{label} n={n}: {m} exited {other['returncode']} (natively 0)\n{other['tail']}")
    print("| configuration | ranks | files | passed | skipped | failed | errors | timed-out files | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, n, c, t, s, files in table:
        print(f"| {label} | {n} | {files} | {c['ok']} | {c['skip']} | {c['fail']} | {c['error']} | {t} | {s} |")
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
