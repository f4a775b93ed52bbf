"""The memory store's optional C kernel, ``ratewarden.storage._speedups``, or None.

Built from ``storage/_speedups.c`` at install when a C compiler is there. It holds
two types: ``MemoryKernel``, the memory store's base class, deciding one-rate gcra
and fixed_window calls (and ``hit_all`` batches of them) over the state table it is
handed, with the Python path in ``storage/memory.py`` as the reference and the
fallback; ``DecisionMaker`` and ``BatchDecoder``, which ``storage/_decisions.py`` builds its
one-rate Decisions and decodes a one-rate ``hit_all`` reply with; and ``BatchPlanner``, which
plans a Redis store's one-rate ``hit_all`` (``storage/_redis_store.py``). ``RATEWARDEN_PURE=1``
in the environment keeps it unused.
Private to the storage package.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["speedups"]


def _load() -> Any:
    if os.environ.get("RATEWARDEN_PURE", "") not in ("", "0"):
        return None
    try:
        from ratewarden.storage import _speedups
    except ImportError:
        return None
    return _speedups


#: ``ratewarden.storage._speedups``, or None (not built, or ``RATEWARDEN_PURE=1``).
speedups: Any = _load()
