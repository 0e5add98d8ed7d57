"""libshim, a PMPI shim for MPI programs, as installed from its wheel.

The package holds the three builds of the shim (one binary cannot serve two ABIs) and the
``shimrun`` launcher, which preloads the build that matches the program's MPI library::

    shimrun --stats on -- mpiexec -n 4 python app.py

``library(abi)`` gives the path of one build, for ``LD_PRELOAD`` by hand.
"""

import os

__version__ = "@VERSION@"

#: The shim build for each MPI ABI: file name in ``lib/``.
LIBRARIES = {
    "mpich": "libshim.so",  # MPICH, Intel MPI, MVAPICH (libmpi.so.12, libmpich.so.12)
    "ompi": "libshim_ompi.so",  # Open MPI (libmpi.so.40)
    "std": "libshim_abi.so",  # the MPI-5 standard ABI (libmpi_abi.so)
}

_HERE = os.path.dirname(os.path.abspath(__file__))


def lib_dir():
    """The directory of the shim's libraries."""
    return os.path.join(_HERE, "lib")


def library(abi="mpich"):
    """The path of the shim build for ``abi`` (mpich, ompi or std)."""
    try:
        name = LIBRARIES[abi]
    except KeyError:
        raise ValueError(f"unknown MPI ABI {abi!r} (one of: {', '.join(LIBRARIES)})") from None
    path = os.path.join(lib_dir(), name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"this libshim wheel has no {abi} build ({path})")
    return path


def include_dir():
    """The directory of ``shim.h``, the shim's own C API."""
    return os.path.join(_HERE, "include")


def shimrun_path():
    """The path of the ``shimrun`` launcher script (bash)."""
    return os.path.join(_HERE, "bin", "shimrun")
