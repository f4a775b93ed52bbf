"""Checks the C kernel's tests share: no leak, and threads that race."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any


def assert_no_leak(round_of_calls: Callable[[int], object]) -> None:
    """Run ``round_of_calls(i)`` 2,000 times to warm up, then 20,000 more: the interpreter's
    allocated blocks may grow by fewer than 2,000 (a reference leaked once a round would add
    20,000)."""
    for i in range(2_000):
        round_of_calls(i)
    gc.collect()
    before = sys.getallocatedblocks()
    for i in range(20_000):
        round_of_calls(i)
    gc.collect()
    assert sys.getallocatedblocks() - before < 2_000


def run_racing(worker: Callable[..., object], args: Iterable[tuple[Any, ...]]) -> None:
    """One thread a ``worker(*a)`` for each ``a`` of ``args``, all run to their end with the
    interpreter switching threads as often as it can (the switch interval put back after)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=a) for a in args]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
