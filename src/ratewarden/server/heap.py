"""The serve process's long-lived objects, kept out of Python's cycle collector.

CPython's cycle collector runs a full collection whenever enough objects have
survived into its oldest generation, and a full collection walks every object
that is tracked, however old. In ``ratewarden serve`` nearly all of them are
there for the process's life (modules, protobuf descriptors, the config and its
compiled rules, the stores), and under load the calls in flight keep promoting a
few more, so a full collection came every 0.2-0.3 s and held the event loop for
20-35 ms (collecting nothing): at 64 calls in flight on Redis (3 descriptors) every
call in flight then waited, and p99 was 23-56 ms against a p50 of 3.5-6 ms.

``freeze`` (once the server has started) collects, then moves every object alive
into the permanent generation (``gc.freeze``), which collections skip: a full
collection then walks only what was made since, ~0.25 ms, and p99 fell to 7.7-11
ms (``docs/performance-serve.md``). Reference counting still frees a frozen
object the moment it is no longer used; only a frozen *cycle* would stay.

A reload builds a whole new config on a worker thread, which holds the GIL while
it runs Python: 110,000 tracked objects for 10,000 descriptors. Each of them survives
into the oldest generation, so full collections came again and again during the
load, each walking all that the load had built so far (up to 0.45 s, every call
waiting), and one more, as long, came between the load and the swap. ``loading``
holds full collections off while a load runs (the young generations are still
collected) and, when it ends, freezes what is alive, the new config included,
without walking it; ``refreeze``, after the swap, does the same for what came since.
The replaced config is frozen, and is freed by reference counting as it is replaced:
a config holds no reference cycle (``tests/server/test_reload_heap_4.py`` checks it),
so nothing frozen needs to be given back to the collector.

Process-wide: only the process's owner (``server/process.py``) calls ``freeze`` and
``refreeze``, not a server embedded in another program, and ``loading`` does nothing
in a process whose heap was never frozen.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["freeze", "loading", "refreeze"]

#: The oldest generation's threshold while a load runs: never reached.
_NEVER = 1 << 30


class _Heap:
    """Whether this process froze its heap, and the loads running (each on a worker thread)."""

    def __init__(self) -> None:
        self.frozen = False
        self.loads = 0
        self.threshold = gc.get_threshold()
        self.lock = threading.Lock()


_heap = _Heap()


def freeze() -> None:
    """Collect, then keep every object alive now out of later collections."""
    gc.collect()
    gc.freeze()
    _heap.frozen = True


def refreeze() -> None:
    """After a config swap: collect the young generations, then freeze every object alive
    (no full collection: module docstring)."""
    gc.collect(1)
    gc.freeze()


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """No full collection while the block runs (a config load), and what is alive at its
    end frozen (``refreeze``), once the heap is frozen."""
    if not _heap.frozen:
        yield
        return
    with _heap.lock:
        _heap.loads += 1
        if _heap.loads == 1:
            _heap.threshold = gc.get_threshold()
            young, middle, _ = _heap.threshold
            gc.set_threshold(young, middle, _NEVER)
    try:
        yield
    finally:
        with _heap.lock:
            _heap.loads -= 1
            if _heap.loads == 0:
                refreeze()  # before a full collection may come: it would walk the new config
                gc.set_threshold(*_heap.threshold)
