"""The ``shimrun`` console script: runs the package's bash launcher, which finds the shim's
libraries next to itself (``bin/../lib``)."""

import os
import shutil
import sys

from . import shimrun_path


def main():
    script = shimrun_path()
    bash = shutil.which("bash") or "/bin/bash"
    try:
        os.execv(bash, [bash, script, *sys.argv[1:]])
    except OSError as exc:
        print(f"shimrun: cannot run {script} with {bash}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
