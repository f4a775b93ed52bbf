"""The memory store's three faces are one store: ``MemoryStore``'s methods, the same methods
awaited (``AsyncMemoryStore``), and called without ``await`` on an async store's state (its
blocking view, ``AsyncMemoryStore.immediate``)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any

import pytest

from ratewarden import AsyncMemoryStore, MemoryStore, Rate
from ratewarden.storage import Op
from ratewarden.testing import ManualClock

#: Every operation of a store but ``hit`` (the kernel's method, or the Python path) and closing.
OPERATIONS = ("hit_all", "reset", "acquire_slot", "release_slot", "renew_slot", "apply", "ping")

RATE = Rate.parse("3/second")


def _count(args: Sequence[int | str], states: list[Any], now: int) -> tuple[list[int], list[Any]]:
    """A pure twin for ``apply``: count the calls on the op's one key, kept for a second."""
    seen = (states[0] or 0) + int(args[1])
    return [seen], [(0, seen, now + 1_000_000)]


def _calls() -> list[tuple[str, tuple[Any, ...]]]:
    """One run over every operation, with answers that depend on what came before."""
    op = Op("count", ("rw:{k}:count",), ("", 2), _count)
    return [
        ("hit_all", ("gcra", [("a", RATE, 2), ("b", RATE, 1)])),
        ("hit_all", ("gcra", [("a", RATE, 2), ("b", RATE, 1)])),
        ("reset", ("gcra", "a", RATE)),
        ("hit_all", ("token_bucket", [("a", RATE, 3)])),
        ("acquire_slot", ("s", 2, "lease-1", 1, 1_000_000)),
        ("acquire_slot", ("s", 2, "lease-2", 2, 1_000_000)),
        ("renew_slot", ("s", "lease-1", 5_000_000)),
        ("release_slot", ("s", "lease-1")),
        ("release_slot", ("s", "lease-1")),
        ("apply", (op,)),
        ("apply", (op,)),
        ("ping", ()),
    ]


@pytest.mark.parametrize("name", OPERATIONS)
def test_each_async_method_is_the_sync_one_awaited(name: str) -> None:
    """AsyncMemoryStore's operations are MemoryStore's, as coroutine methods with the same
    parameters and docstring."""
    method = getattr(AsyncMemoryStore, name)
    sync = getattr(MemoryStore, name)
    assert inspect.iscoroutinefunction(method)
    assert method.__name__ == name and method.__doc__ == sync.__doc__
    assert (
        list(inspect.signature(method).parameters)[1:]
        == list(inspect.signature(sync).parameters)[1:]
    )


def test_the_three_faces_answer_alike_and_keep_the_same_state() -> None:
    """The same calls give the same answers and leave the same stored state on a MemoryStore,
    an AsyncMemoryStore awaited, and an AsyncMemoryStore's blocking view."""
    sync = MemoryStore(clock=ManualClock())
    awaited = AsyncMemoryStore(clock=ManualClock())
    viewed = AsyncMemoryStore(clock=ManualClock())
    view = viewed.immediate
    assert view is not None

    async def run_awaited() -> list[Any]:
        return [await getattr(awaited, name)(*args) for name, args in _calls()]

    expected = [getattr(sync, name)(*args) for name, args in _calls()]
    assert asyncio.run(run_awaited()) == expected
    assert [getattr(view, name)(*args) for name, args in _calls()] == expected
    assert expected[-3:] == [[2], [4], True]
    states = list(sync._states.items())
    assert list(awaited._states.items()) == states == list(viewed._states.items())


def test_the_blocking_view_shares_the_async_stores_state_and_clock() -> None:
    """What the view does, the async store sees (one state, one lock, one clock); a new clock on
    the store is the view's too."""
    store = AsyncMemoryStore(clock=ManualClock())
    view = store.immediate
    assert view is not None
    assert view.hit("gcra", "k", RATE, 3).allowed
    assert not asyncio.run(store.hit("gcra", "k", RATE)).allowed
    later = ManualClock(1_700_000_010.0)
    store.clock = later
    assert view.clock is later and view.hit("gcra", "k", RATE).allowed


def test_the_blocking_view_offers_only_the_stores_public_methods() -> None:
    """The view reaches MemoryStore's public methods only; anything else (the store's private
    state, a name no store has) is an AttributeError that names the view and the name."""
    view = AsyncMemoryStore().immediate
    assert view is not None
    with pytest.raises(
        AttributeError, match="blocking view of an AsyncMemoryStore has no '_states'"
    ):
        view._states  # noqa: B018
    with pytest.raises(AttributeError, match="has no 'nothing'"):
        view.nothing  # noqa: B018
    with pytest.raises(AttributeError, match="has no 'prefix'"):
        view.prefix  # noqa: B018
