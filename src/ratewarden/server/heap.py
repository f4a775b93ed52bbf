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
object the moment it is no longer used; only a frozen *cycle* would stay. So
``refreeze``, after each config swap, gives the frozen objects back to the
collector, collects (the replaced config's cycles with them: one full collection
per reload) and freezes again, the new config included.

Process-wide: only the process's owner (``server/process.py``) calls these, not a
server embedded in another program.
"""

from __future__ import annotations

import gc

__all__ = ["freeze", "refreeze"]


def freeze() -> None:
    """Collect, then keep every object alive now out of later collections."""
    gc.collect()
    gc.freeze()


def refreeze() -> None:
    """``freeze`` again, after collecting what was frozen and is garbage now."""
    gc.unfreeze()
    freeze()
