"""``server/heap.py`` on the real cycle collector, in a process of its own (a freeze is
process-wide: the test process's own objects stay out of it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import gc, weakref
    from ratewarden.server import heap

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return a

    tracked = len(gc.get_objects())
    kept = cycle()
    heap.freeze()
    assert gc.get_freeze_count() > tracked / 2, (gc.get_freeze_count(), tracked)
    assert len(gc.get_objects()) < tracked / 10  # a full collection walks these alone
    gone = weakref.ref(kept)
    del kept
    gc.collect()
    assert gone() is not None  # frozen: a collection does not see the cycle
    heap.refreeze()
    assert gone() is None  # refreeze collected it
    assert gc.get_freeze_count() > 0
    young = cycle()
    dead = weakref.ref(young)
    del young
    gc.collect()
    assert dead() is None  # what is made after a freeze is collected as always
    print("ok")
    """
)


def test_freeze_keeps_the_heap_out_of_collections_and_refreeze_frees_frozen_cycles() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
