#!/usr/bin/env python3
"""OpenCoarrays as a real client: the test programs Debian ships with libcoarrays-mpich-dev
(OpenCoarrays 2.10.1, built against MPICH) run natively, under the shim and with ghost
processes, each under a timeout, and their verdicts compared.

A test passes when it exits with status 0 and prints OpenCoarrays' "Test passed" (its
CMake PASS_REGULAR_EXPRESSION). Under the shim every test that passes natively must pass.
A test whose verdicts differ is run twice more in every configuration: some of these
programs race, and a test that fails natively in any run is reported as the system MPI's
failure, not the shim's. RACES lists the programs whose race is known and explained; with
ghosts their failures are printed, not counted.

Usage: caf_suite.py [--images 4] [--nodes 1] [--config label:VAR=v,VAR=v ...] [--only a,b]
                    [--timeout S]
  Each config is a label and its environment (@LIB@: libshim.so); with SHIM_GHOSTS=g in
  it, g more processes per node are launched (--nodes: how many nodes MPIRUN spreads the
  processes over, e.g. scripts/tools/cluster-mpirun), so the program sees the same images.
Logs: build/caf/<test>.<label>.n<images>.log
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is scripts/tests/caf_suite.py)
OUT = ROOT / "build" / "caf"
TESTS = Path("/usr/lib/x86_64-linux-gnu/open-coarrays/mpich/bin/OpenCoarrays-2.10.1-tests")
LIB = os.environ.get("SHIM_LIB_PATH", str(ROOT / "target" / "release" / "libshim.so"))
MPIRUN = os.environ.get("MPIRUN", "mpirun.mpich")
# Tests of failed images (Fortran 2018 FAIL IMAGE): OpenCoarrays runs them only when built
# with MPI fault tolerance (ULFM), which Debian's MPICH build is not.
NEEDS_FT = ("image_fail", "image_status_test", "sync_image_ring_abort_on_stopped_image")
# Programs that read another image's coarray before any image control statement, while
# that image may still be storing the coarray's initial value into memory it got from
# MPI_Win_allocate: a local store and a remote MPI_Get with no synchronization between
# them (MPI-4.1 12.7, a conflicting access). Natively the target's MPICH grants the lock
# only once it calls MPI again, after the store, which hides the race; a ghost grants it
# at once (that is what ghosts are for), so the Get can read the memory before the
# initial value. Seen under load: increment_my_neighbor's first MPI_Get returned 0 on
# image 1, which then wrote 0+1 (Debian's binary has no SYNC ALL before that access).
RACES = {"increment_my_neighbor": "reads b(:)[left] before image 'left' stored b's initial value"}


def run(test, images, nodes, env, timeout):
    g = int(env.get("SHIM_GHOSTS", "0")) * nodes
    e = {k: v for k, v in os.environ.items() if k != "SHIM_LIB_PATH"}
    e.update(env)
    t = time.time()
    try:
        p = subprocess.run([MPIRUN, "-n", str(images + g), str(TESTS / test)], env=e,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, start_new_session=True)
        out, rc = p.stdout.decode(errors="replace"), p.returncode
    except subprocess.TimeoutExpired as x:
        out, rc = (x.stdout or b"").decode(errors="replace"), "hang"
        subprocess.run(["pkill", "-9", "-f", str(TESTS / test)])
    ok = rc == 0 and "test passed" in out.lower()
    return ok, rc, out, time.time() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    if not TESTS.is_dir():
        sys.exit(f"caf_suite: {TESTS} missing (apt-get install libcoarrays-mpich-dev)")
    configs = [("native", {})]
    for c in a.config:
        label, _, spec = c.partition(":")
        env = dict(kv.split("=", 1) for kv in spec.split(",") if kv)
        configs.append((label, {k: v.replace("@LIB@", LIB) for k, v in env.items()}))
    only = set(filter(None, a.only.split(",")))
    tests = sorted(t.name for t in TESTS.iterdir()
                   if (not only or t.name in only) and not t.name.startswith(NEEDS_FT))
    OUT.mkdir(parents=True, exist_ok=True)
    failures, native_fail, t0 = [], [], time.time()
    for test in tests:
        runs = {}  # label -> [(ok, rc, seconds)]
        tries = 0
        while tries < 3:
            tries += 1
            for label, env in configs:
                ok, rc, out, dt = run(test, a.images, a.nodes, env, a.timeout)
                (OUT / f"{test}.{label}.n{a.images}.log").write_text(out)
                runs.setdefault(label, []).append((ok, rc, dt))
            oks = {label: all(r[0] for r in v) for label, v in runs.items()}
            if len(set(oks.values())) == 1:
                break
        nat_ok = oks["native"]
        line = " ".join(
            f"{l}=" + "/".join(("ok" if ok else f"FAIL({rc})") + f"({dt:.1f}s)" for ok, rc, dt in v)
            for l, v in runs.items())
        print(f"{test:44s} {line}", flush=True)
        if not nat_ok:
            native_fail.append(test)
        for label, v in list(runs.items())[1:]:
            if (nat_ok and not oks[label] and test in RACES and "SHIM_GHOSTS" in dict(configs)[label]
                    and all(r[1] != "hang" for r in v)):
                print(f"  (not counted: {test} races with ghosts, it {RACES[test]})", flush=True)
            elif nat_ok and not oks[label]:
                rc = next(r[1] for r in v if not r[0])
                failures.append(f"{test} {label}: {'hang' if rc == 'hang' else 'status ' + str(rc)}")
    print(f"\n{len(tests)} tests at {a.images} images in {time.time() - t0:.0f}s; "
          f"{len(native_fail)} fail natively: {', '.join(native_fail) or '-'}")
    if failures:
        print(f"{len(failures)} FAILURES under the shim:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("OpenCoarrays: every test that passes natively passes in every configuration")


if __name__ == "__main__":
    main()
