"""``python -m ratewarden ...``: the ``ratewarden`` command, for when its script is not on PATH."""

from __future__ import annotations

import sys

from ratewarden.cli import main

if __name__ == "__main__":
    sys.exit(main())
