"""PEP 517 build backend of the libshim wheel (in the tree: pyproject.toml's backend-path).

It needs nothing but the standard library and cargo. ``build_wheel`` runs the three cargo builds
of the shim (incremental: the same target directories as ``cargo build --release``,
``scripts/tools/build-ompi`` and ``scripts/tools/build-abi``) and writes, with zipfile, a wheel
(https://packaging.python.org/specifications/binary-distribution-format/) holding

    libshim/__init__.py, _shimrun.py, __main__.py      (scripts/wheel/libshim/)
    libshim/lib/libshim.so        MPICH ABI            (target/release/libshim.so)
    libshim/lib/libshim_ompi.so   Open MPI ABI         (target/ompi/release/libshim.so)
    libshim/lib/libshim_abi.so    MPI-5 standard ABI   (target/abi/release/libshim.so)
    libshim/bin/shimrun           the launcher         (scripts/tools/shimrun; finds ../lib)
    libshim/include/shim.h        the shim's C API
    libshim-VERSION.dist-info/    METADATA, WHEEL, entry_points.txt (the `shimrun` console
                                  script), LICENSE, RECORD

The tag is py3-none-manylinux_2_N_ARCH, N the newest glibc symbol version the libraries use
(they need only libc, libm, libgcc_s and the loader, as manylinux allows), or linux_ARCH when
readelf is missing or a library needs anything else.

Settings (environment, or pip's --config-settings KEY=VALUE with the lower-case key):
    LIBSHIM_WHEEL_ABIS=mpich,ompi,std   (abis)      the builds to include; by default all three,
        except that std is left out, with a warning, while Cargo.toml has no abi-std feature
    LIBSHIM_WHEEL_NO_BUILD=1            (no-build)  package what target/ holds, run no cargo
    LIBSHIM_WHEEL_PLAT=TAG              (plat)      the platform tag instead of the computed one
"""

import base64
import csv
import hashlib
import io
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import zipfile

NAME = "libshim"
SUMMARY = "libshim: a drop-in PMPI shim (MPICH, Open MPI and MPI-5 standard ABI builds) and its shimrun launcher"
LICENSE = "MIT"
REQUIRES_PYTHON = ">=3.8"

# abi: (file in libshim/lib, cargo arguments, the library cargo writes, relative to the root)
BUILDS = {
    "mpich": ("libshim.so", ["--release"], "target/release/libshim.so"),
    "ompi": (
        "libshim_ompi.so",
        ["--release", "--no-default-features", "--features", "abi-ompi", "--target-dir", "target/ompi"],
        "target/ompi/release/libshim.so",
    ),
    "std": (
        "libshim_abi.so",
        ["--release", "--no-default-features", "--features", "abi-std", "--target-dir", "target/abi"],
        "target/abi/release/libshim.so",
    ),
}
# the libraries a manylinux wheel may need from the system (PEP 599/600)
MANYLINUX_LIBS = {
    "libc.so.6", "libm.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2", "librt.so.1",
    "libutil.so.1", "libstdc++.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
    "ld-linux.so.2",
}


def _log(msg):
    print(f"libshim_build: {msg}", file=sys.stderr, flush=True)


def _root():
    # PEP 517 runs the backend in the source tree; fall back to this file's place in it
    for d in (os.getcwd(), os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))):
        if os.path.isfile(os.path.join(d, "Cargo.toml")) and os.path.isfile(os.path.join(d, "scripts", "tools", "shimrun")):
            return d
    raise RuntimeError("libshim_build: not run in the libshim source tree (no Cargo.toml and scripts/tools/shimrun)")


def _cargo_toml(root):
    with open(os.path.join(root, "Cargo.toml"), encoding="utf-8") as f:
        return f.read()


def _version(root):
    text = _cargo_toml(root)
    pkg = re.search(r"^\[package\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    m = re.search(r'^version\s*=\s*"([^"]+)"', pkg.group(1) if pkg else text, re.M)
    if not m:
        raise RuntimeError("libshim_build: no version in Cargo.toml's [package]")
    # Cargo (semver) to PEP 440: 1.2.3-rc.1 -> 1.2.3rc1, 1.2.3-alpha.2 -> 1.2.3a2
    v = m.group(1).split("+")[0]
    v = re.sub(r"-(alpha|a)\.?(\d*)$", lambda x: "a" + (x.group(2) or "0"), v)
    v = re.sub(r"-(beta|b)\.?(\d*)$", lambda x: "b" + (x.group(2) or "0"), v)
    v = re.sub(r"-rc\.?(\d*)$", lambda x: "rc" + (x.group(1) or "0"), v)
    return v


def _has_feature(root, feature):
    text = _cargo_toml(root)
    feats = re.search(r"^\[features\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    return bool(feats and re.search(rf"^{re.escape(feature)}\s*=", feats.group(1), re.M))


def _setting(config_settings, key, env):
    if config_settings and key in config_settings and config_settings[key] is not None:
        return str(config_settings[key])
    return os.environ.get(env)


def _abis(root, config_settings):
    wanted = _setting(config_settings, "abis", "LIBSHIM_WHEEL_ABIS")
    if wanted:
        abis = [a.strip() for a in wanted.split(",") if a.strip()]
        bad = [a for a in abis if a not in BUILDS]
        if bad:
            raise RuntimeError(f"libshim_build: unknown ABI {bad} in LIBSHIM_WHEEL_ABIS (known: {', '.join(BUILDS)})")
        return abis
    abis = ["mpich", "ompi", "std"]
    if not _has_feature(root, "abi-std"):
        _log("WARNING: Cargo.toml has no abi-std feature yet: the wheel leaves out libshim_abi.so (MPI-5 standard ABI)")
        abis.remove("std")
    return abis


def _cargo():
    for c in (os.environ.get("CARGO"), shutil.which("cargo"), os.path.expanduser("~/.cargo/bin/cargo")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise RuntimeError("libshim_build: cargo not found (set CARGO, or put cargo on the PATH; or LIBSHIM_WHEEL_NO_BUILD=1)")


def _build(root, abis, config_settings):
    no_build = _setting(config_settings, "no-build", "LIBSHIM_WHEEL_NO_BUILD") not in (None, "", "0")
    libs = {}
    for abi in abis:
        name, args, out = BUILDS[abi]
        if not no_build:
            cmd = [_cargo(), "build", "--quiet", *args]
            _log(f"{abi}: {' '.join(cmd[1:])}")
            t0 = time.time()
            r = subprocess.run(cmd, cwd=root, stdout=sys.stderr, stderr=sys.stderr)
            if r.returncode != 0:
                raise RuntimeError(f"libshim_build: the {abi} build failed: {' '.join(cmd)} (exit {r.returncode})")
            _log(f"{abi}: built in {time.time() - t0:.1f}s")
        path = os.path.join(root, out)
        if not os.path.isfile(path):
            raise RuntimeError(f"libshim_build: {path} is missing (the {abi} build)")
        libs[name] = path
    return libs


def _elf_info(path):
    """(NEEDED libraries, newest GLIBC_2.N minor) of a shared library, by readelf; None without it."""
    readelf = shutil.which("readelf")
    if not readelf:
        return None
    out = subprocess.run([readelf, "-dV", path], capture_output=True, text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\).*\[(.+?)\]", out))
    minors = [int(m) for m in re.findall(r"GLIBC_2\.(\d+)", out)]
    return needed, max(minors, default=17)


def _platform_tag(libs, config_settings):
    plat = _setting(config_settings, "plat", "LIBSHIM_WHEEL_PLAT")
    if plat:
        return plat
    arch = platform.machine()
    if sys.platform != "linux":
        raise RuntimeError("libshim_build: libshim is built for Linux only")
    newest = 17
    for path in libs.values():
        info = _elf_info(path)
        if info is None:
            _log("readelf not found: tagging the wheel linux_" + arch)
            return "linux_" + arch
        needed, minor = info
        extra = needed - MANYLINUX_LIBS
        if extra:
            _log(f"{path} needs {sorted(extra)}, which manylinux does not allow: tagging the wheel linux_{arch}")
            return "linux_" + arch
        newest = max(newest, minor)
    return f"manylinux_2_{newest}_{arch}"


def _metadata(version):
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        f"Summary: {SUMMARY}\n"
        f"License: {LICENSE}\n"
        f"Requires-Python: {REQUIRES_PYTHON}\n"
        "Classifier: License :: OSI Approved :: MIT License\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Programming Language :: Rust\n"
        "Classifier: Topic :: System :: Distributed Computing\n"
        "Description-Content-Type: text/markdown\n"
        "\n"
        "libshim sits between an unmodified MPI program and the system MPI through the PMPI\n"
        "profiling interface. This wheel holds its three builds (MPICH ABI: libshim.so, Open MPI\n"
        "ABI: libshim_ompi.so, MPI-5 standard ABI: libshim_abi.so) in the package's lib/ and the\n"
        "launcher `shimrun`, which preloads the build that matches the program's MPI library:\n"
        "\n"
        "    shimrun --stats on -- mpiexec -n 4 python app.py\n"
    )


ENTRY_POINTS = "[console_scripts]\nshimrun = libshim._shimrun:main\n"


def _dist_info_files(root, version, tag=None):
    files = {
        "METADATA": _metadata(version).encode(),
        "entry_points.txt": ENTRY_POINTS.encode(),
        "top_level.txt": b"libshim\n",
    }
    with open(os.path.join(root, "LICENSE"), "rb") as f:
        files["LICENSE"] = f.read()
    if tag:
        files["WHEEL"] = (
            "Wheel-Version: 1.0\n"
            "Generator: libshim_build (scripts/wheel/libshim_build.py)\n"
            "Root-Is-Purelib: false\n"
            f"Tag: {tag}\n"
        ).encode()
    return files


def _date_time():
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    t = time.gmtime(int(epoch)) if epoch and epoch.isdigit() else time.gmtime(315532800)  # 1980-01-01
    return tuple(t[:6]) if t.tm_year >= 1980 else (1980, 1, 1, 0, 0, 0)


class _WheelWriter:
    """Writes files into a wheel and records each in RECORD (sha256, urlsafe base64, size)."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records = []
        self.date_time = _date_time()

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, self.date_time)
        info.external_attr = (stat.S_IFREG | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append((arcname, f"sha256={digest}", str(len(data))))

    def close(self, record_name):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for row in self.records:
            w.writerow(row)
        w.writerow((record_name, "", ""))
        info = zipfile.ZipInfo(record_name, self.date_time)
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, buf.getvalue().encode())
        self.zip.close()


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- PEP 517 hooks ----------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    root = _root()
    version = _version(root)
    name = f"{NAME}-{version}.dist-info"
    d = os.path.join(metadata_directory, name)
    os.makedirs(d, exist_ok=True)
    for fname, data in _dist_info_files(root, version).items():
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    root = _root()
    version = _version(root)
    abis = _abis(root, config_settings)
    libs = _build(root, abis, config_settings)
    tag = "py3-none-" + _platform_tag(libs, config_settings)
    os.makedirs(wheel_directory, exist_ok=True)
    filename = f"{NAME}-{version}-{tag}.whl"
    path = os.path.join(wheel_directory, filename)
    _log(f"writing {filename} with {', '.join(sorted(libs))}")
    pkg = os.path.join(root, "scripts", "wheel", "libshim")
    w = _WheelWriter(path + ".part")
    try:
        for fname in sorted(os.listdir(pkg)):
            if fname.endswith(".py"):
                data = _read(os.path.join(pkg, fname))
                if fname == "__init__.py":
                    data = data.replace(b"@VERSION@", version.encode())
                w.add(f"libshim/{fname}", data)
        w.add("libshim/bin/shimrun", _read(os.path.join(root, "scripts", "tools", "shimrun")), 0o755)
        for name, src in sorted(libs.items()):
            w.add(f"libshim/lib/{name}", _read(src), 0o755)
        w.add("libshim/include/shim.h", _read(os.path.join(root, "include", "shim.h")))
        dist_info = f"{NAME}-{version}.dist-info"
        for fname, data in _dist_info_files(root, version, tag).items():
            w.add(f"{dist_info}/{fname}", data)
        w.close(f"{dist_info}/RECORD")
    except BaseException:
        w.zip.close()
        os.unlink(path + ".part")
        raise
    os.replace(path + ".part", path)
    return filename


def _sdist_files(root):
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            rel = os.path.relpath(d, root)
            dirs[:] = [x for x in dirs if not (rel == "." and x in ("target", "build", ".git")) and x != "__pycache__"]
            files += [os.path.normpath(os.path.join(rel, n)) for n in names]
    return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))


def build_sdist(sdist_directory, config_settings=None):
    """The tracked source (git ls-files) with PKG-INFO, as NAME-VERSION.tar.gz."""
    root = _root()
    version = _version(root)
    base = f"{NAME}-{version}"
    os.makedirs(sdist_directory, exist_ok=True)
    filename = f"{base}.tar.gz"
    mtime = time.mktime((*_date_time(), 0, 0, -1))

    def norm(ti):
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = mtime
        return ti

    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for f in _sdist_files(root):
            tar.add(os.path.join(root, f), arcname=f"{base}/{f}", recursive=False, filter=norm)
        data = _metadata(version).encode()
        ti = norm(tarfile.TarInfo(f"{base}/PKG-INFO"))
        ti.size = len(data)
        ti.mode = 0o644
        tar.addfile(ti, io.BytesIO(data))
    return filename
