"""The environment of one of the five MPI libraries, for the Python test drivers: what
`eval "$(scripts/tools/mpi-env NAME)"` leaves in a shell (installing a wheel library into
its venv on first use), as a dict of every variable. Imported by scripts/tests/conform.py
and scripts/tests/mpi4py_suite.py (their --mpi NAME)."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is scripts/tools/mpi_env.py)
NAMES = ["mpich4", "ompi4", "mpich5", "impi", "ompi5"]


def mpi_env(name):
    """os.environ as mpi-env NAME changes it (MPICC, MPIRUN, SHIM_LIB_FOR, PATH, ...)."""
    # set -a: mpi-env's plain assignments (MPICC=...) are exported too
    script = 'set -a; eval "$(bash "$1" "$2")" && env -0'
    out = subprocess.run(["bash", "-c", script, "mpi-env", str(ROOT / "scripts" / "tools" / "mpi-env"), name],
                         check=True, stdout=subprocess.PIPE).stdout
    env = {}
    for item in out.split(b"\0"):
        k, sep, v = item.decode(errors="replace").partition("=")
        if sep:
            env[k] = v
    return env
