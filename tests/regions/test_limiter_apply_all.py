"""A Limiter's apply_all_flow over a region's store: each op answered as one by one answers it.

``Limiter.apply_all_flow`` hands its ops to any store's ``apply_all`` (``RedisStore``'s, the
region stores'). Every ``apply_all`` has one contract: each op's reply, or the error
standing for it in its place (a script error answers only its op); a raise only when the
store failed as a whole. Here a region's store, blocking and asyncio, on a real
redis-server, on a 3-primary Cluster and in this process, runs several budget ops with one
failing (a key of the wrong type, or an operation the script does not have) through a
Limiter and one ``apply`` at a time, each under its own prefix: the answers and the stored
counts are the same.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import pytest

from ratewarden import AsyncLimiter, Limiter
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage import Op
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from ratewarden.testing import ManualClock
from tests.regions.conftest import Region

START = 1_700_000_040.0  # a whole minute
MEMBERS = [f"60:60000000:{key}" for key in ("acme", "globex", "a{b}c", "initech")]
#: (member index, cost): four hits, the second one's the one that fails.
STEPS = [(0, 5), (1, 7), (2, 3), (0, 9)]
FAILING = 1


def _store(region: Region, clock: ManualClock, prefix: str, awaited: bool) -> Any:
    """The region's store under ``prefix``: its RegionStore (AsyncRegionStore) on Redis, or
    its MemoryRegionStore (AsyncMemoryRegionStore) in this process."""
    if region.in_memory:
        return region.memory_store(clock, prefix=prefix, awaited=awaited)
    if awaited:
        return AsyncRegionStore(region.alocal(), clock=clock, prefix=prefix)
    return RegionStore(region.local(), clock=clock, prefix=prefix)


def _ops(store: Any, failure: str) -> list[Op]:
    ops = [store.budget_hit(MEMBERS[m], "us", cost, 40) for m, cost in STEPS]
    if failure == "no such operation":  # the script's own error (region_budget.lua's last line)
        bad = ops[FAILING]
        ops[FAILING] = replace(bad, args=(bad.args[0], "bogus", *bad.args[2:]))
    return ops


async def _answer(found: Any) -> Any:
    return await found if inspect.isawaitable(found) else found


async def _one_by_one(store: Any, ops: list[Op]) -> list[list[int] | Exception]:
    found: list[list[int] | Exception] = []
    for op in ops:
        try:
            found.append(await _answer(store.apply(op)))
        except StorageError as error:
            found.append(error)
    return found


@pytest.mark.parametrize("failure", ["wrong type", "no such operation"])
@pytest.mark.parametrize("twin", ["blocking", "asyncio"])
async def test_a_limiter_answers_each_op_of_a_region_store_as_one_by_one(
    any_regions_or_memory: dict[str, Region], twin: str, failure: str
) -> None:
    """Four budget hits, the second failing: through ``apply_all_flow`` the first, third and
    fourth are answered by their replies and the second by the StorageError ``apply`` raises
    for it (not an outage), exactly as one ``apply`` after another; the counts stored are
    the same. Before, the region store's ``apply_all`` raised that one error and the limiter
    answered every op with it."""
    region = any_regions_or_memory["us"]
    if region.in_memory and failure == "wrong type":
        pytest.skip("a key of the wrong type is Redis's error; the memory store keeps one kind")
    awaited = twin == "asyncio"
    clock = ManualClock(START)
    new, old = (_store(region, clock, prefix, awaited) for prefix in ("new", "old"))
    new_ops, old_ops = _ops(new, failure), _ops(old, failure)
    if failure == "wrong type":
        with region.local() as client:
            for ops in (new_ops, old_ops):
                client.lpush(ops[FAILING].keys[0], "not a window hash")
    limiter: Any = (AsyncLimiter if awaited else Limiter)(new)
    try:
        found = await _answer(limiter.run(limiter.apply_all_flow(new_ops)))
        expected = await _one_by_one(old, old_ops)
        assert [type(each) for each in found] == [list, StorageError, list, list]
        assert [type(each) for each in expected] == [list, StorageError, list, list]
        assert found[0] == expected[0] == [1, 5, 40, 60_000_000]
        assert found[2:] == expected[2:] == [[1, 3, 40, 60_000_000], [1, 14, 40, 60_000_000]]
        error, want = found[FAILING], expected[FAILING]
        assert not isinstance(error, StorageUnavailableError)
        said = "WRONGTYPE" if failure == "wrong type" else "region_budget has no operation bogus"
        assert said in str(error)
        assert str(error) == str(want)
        others = [MEMBERS[m] for m in (0, 2)]
        assert await _answer(new.read_counts(others)) == await _answer(old.read_counts(others))
    finally:
        if not region.in_memory:
            await _answer(new.aclose() if awaited else new.close())
            await _answer(old.aclose() if awaited else old.close())
            await _answer(new.client.aclose() if awaited else new.client.close())
            await _answer(old.client.aclose() if awaited else old.client.close())
