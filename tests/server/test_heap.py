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
    young = cycle()
    dead = weakref.ref(young)
    del young
    gc.collect()
    assert dead() is None  # what is made after a freeze is collected as always
    fresh = cycle()
    dropped = cycle()
    lost = weakref.ref(dropped)
    del dropped
    heap.refreeze()  # the young generations collected, then what is alive frozen
    assert lost() is None
    assert not any(each is fresh for each in gc.get_objects())  # frozen
    assert len(gc.get_objects()) < tracked / 10
    assert gc.get_freeze_count() > 0
    print("ok")
    """
)


def test_freeze_keeps_the_heap_out_of_collections_and_refreeze_freezes_what_came_since() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
