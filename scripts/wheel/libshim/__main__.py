"""``python -m libshim ARGS`` is ``shimrun ARGS``."""

import sys

from ._shimrun import main

sys.exit(main())
