"""Reconciled budgets on MemoryRegionStores: as on Redis, alike in both twins, never mixed.

A fleet in this process (three regions, each a MemoryRegionStore that its own budget and
its peers' share) and a fleet on three real redis-servers run the same random sequences
on one ManualClock and must answer alike; the asyncio twin on AsyncMemoryRegionStores
must answer as the blocking one and leave the same state. Stores of the two kinds, or of
the other twin, are refused.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.regions import (
    AsyncDemandExchange,
    AsyncReconciledBudget,
    DemandExchange,
    PeerView,
    ReconciledBudget,
)
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.memory_regions import AsyncMemoryRegionStore, MemoryRegionStore
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from ratewarden.testing import ManualClock
from tests.regions._traffic import build_async_fleet, build_fleet
from tests.regions._twins import Twins, labels, random_steps
from tests.regions.conftest import Region

RATES = {
    "us": Rate.parse("5/s", burst=2),
    "eu": Rate.parse("3/s", burst=1),
    "ap": Rate.parse("2/s", burst=1),
}
GLOBALS = (Rate.parse("40/minute"), Rate.parse("12/s"))
#: What the random sequences hit with: each global rate alone, and both as one layered limit.
HITS = (*GLOBALS, GLOBALS)
START = 1_700_000_040.0  # a whole minute: the run starts at a window's start
OPTIONS: dict[str, Any] = {"sync_interval": 1.0, "replication_lag": 0.3}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "regions.md"


def _comparable(answer: tuple[str, Any]) -> tuple[str, Any]:
    """A fetch's PeerView without the entries (and peers' caps) of windows that no longer
    count (two or more before the view's): Redis keeps such a hash a day with an injected
    clock, the memory store drops it at its expiry; a merge ignores them either way."""
    status, view = answer
    if status != "ok" or not isinstance(view, PeerView):
        return answer
    states, budgets = [], []
    for (member, entries), found in zip(view.states, view.budgets, strict=True):
        window = view.started_us // int(member.split(":")[1])
        states.append((member, tuple(entry for entry in entries if entry[0] >= window - 1)))
        # A peer's (window, cap) of such a hash counts as no hash: the merge takes its default.
        budgets.append(tuple(b if b[0] >= window - 1 else (-1, b[1], -1) for b in found))
    return status, replace(view, states=tuple(states), budgets=tuple(budgets))


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_sequences_in_this_process_answer_as_on_redis(
    regions: dict[str, Region], memory_regions: dict[str, Region], seed: int
) -> None:
    """Hits, clock steps and rounds (some applied after the lag, so stale) on a fleet of
    RegionStores and on a fleet of MemoryRegionStores: the same Decision, PeerView (the
    windows that still count) and SyncReport at every step, and the same overshoot reports."""
    clock = ManualClock(START)
    on_redis = build_fleet(regions, RATES, clock=clock, **OPTIONS)
    in_memory = build_fleet(memory_regions, RATES, clock=clock, **OPTIONS)
    pair = Twins(regions, clock, on_redis, in_memory)
    kinds: dict[str, int] = {}
    for number, step in enumerate(random_steps(seed, 400, HITS, faults=False)):
        expected, found = await pair.step(step)
        assert _comparable(found) == _comparable(expected), f"step {number}: {step}"
        for label in labels(step, expected):
            kinds[label] = kinds.get(label, 0) + 1
    assert in_memory.metrics.reports == on_redis.metrics.reports
    print(f"\n[regions] memory against Redis, seed {seed}: {dict(sorted(kinds.items()))}")
    for label in ("allowed", "denied", "complete", "stale", "fetch"):
        assert kinds.get(label, 0) > 0, label


@pytest.mark.parametrize("seed", [1, 2])
async def test_the_asyncio_twin_in_this_process_answers_as_the_blocking_one(
    memory_regions: dict[str, Region], seed: int
) -> None:
    """The random sequences through ReconciledBudget and AsyncReconciledBudget, each on its
    own MemoryRegionStores: the same answers and overshoot reports, and each region's two
    stores hold the same state (rate caps, window hashes, active sets)."""
    clock = ManualClock(START)
    blocking = build_fleet(memory_regions, RATES, clock=clock, **OPTIONS)
    awaited = build_async_fleet(memory_regions, RATES, clock=clock, **OPTIONS)
    twins = Twins(memory_regions, clock, blocking, awaited)
    for number, step in enumerate(random_steps(seed, 400, HITS, faults=False)):
        one, two = await twins.step(step)
        assert one == two, f"step {number}: {step}"
    assert blocking.metrics.reports == awaited.metrics.reports
    for region in memory_regions.values():
        store, astore = region.stores[("rw", False)], region.stores[("rw", True)]
        assert isinstance(astore, AsyncMemoryRegionStore) and len(store.table) > 0
        assert dict(store.table._states) == dict(astore.table._states), region.name


def test_memory_and_redis_stores_are_not_mixed(regions: dict[str, Region]) -> None:
    """A budget or exchange given MemoryRegionStores and RegionStores together cannot read
    one kind's counts from the other: a ConfigurationError naming where each region's are
    kept, and nothing written anywhere."""
    memory = {name: MemoryRegionStore() for name in regions}
    redis_stores = {name: RegionStore(region.local()) for name, region in regions.items()}
    mixed = {**redis_stores, "eu": memory["eu"]}
    where = r"keep their counts \['eu'\] in this process and \['ap', 'us'\] on Redis"
    with pytest.raises(ConfigurationError, match=where):
        ReconciledBudget(
            "us", mixed["us"], {"eu": mixed["eu"], "ap": mixed["ap"]}, RATES, **OPTIONS
        )  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"\['ap', 'eu'\] on Redis.*every region a Memo"):
        ReconciledBudget(
            "us",
            memory["us"],
            {"eu": redis_stores["eu"], "ap": redis_stores["ap"]},  # type: ignore[arg-type]
            RATES,
            **OPTIONS,
        )
    with pytest.raises(ConfigurationError, match=where):
        DemandExchange("us", mixed)  # type: ignore[arg-type]
    for store in memory.values():
        assert len(store.table) == 0
    for region in regions.values():
        with region.local() as client:
            assert client.dbsize() == 0


async def test_asyncio_stores_of_both_kinds_are_not_mixed(regions: dict[str, Region]) -> None:
    """The asyncio twins refuse AsyncMemoryRegionStores beside AsyncRegionStores alike."""
    amemory = {name: AsyncMemoryRegionStore() for name in regions}
    aredis_stores = {name: AsyncRegionStore(region.alocal()) for name, region in regions.items()}
    mixed = {**aredis_stores, "ap": amemory["ap"]}
    where = r"\['ap'\] in this process and \['eu', 'us'\] on Redis.*AsyncMemoryRegionStore"
    try:
        with pytest.raises(ConfigurationError, match=where):
            AsyncReconciledBudget(
                "us", mixed["us"], {"eu": mixed["eu"], "ap": mixed["ap"]}, RATES, **OPTIONS
            )
        with pytest.raises(ConfigurationError, match=where):
            AsyncDemandExchange("us", mixed)  # type: ignore[arg-type]
    finally:
        for store in aredis_stores.values():
            await store.client.aclose()


def test_each_twin_takes_its_own_memory_stores_only() -> None:
    """A blocking memory store for an asyncio twin, an asyncio one for a blocking twin, or a
    plain MemoryStore for a region: a ConfigurationError naming what to pass."""
    stores = {name: MemoryRegionStore() for name in RATES}
    astores = {name: AsyncMemoryRegionStore() for name in RATES}
    peers = {"eu": stores["eu"], "ap": stores["ap"]}
    apeers = {"eu": astores["eu"], "ap": astores["ap"]}
    wanted = "it must be an AsyncRegionStore or an AsyncMemoryRegionStore"
    with pytest.raises(ConfigurationError, match=f"'us' is a MemoryRegionStore; {wanted}"):
        AsyncReconciledBudget("us", stores["us"], apeers, RATES, **OPTIONS)
    with pytest.raises(ConfigurationError, match=f"'eu' is a MemoryRegionStore; {wanted}"):
        AsyncDemandExchange("us", {**astores, "eu": stores["eu"]})  # type: ignore[dict-item]
    wanted = "it must be a RegionStore or a MemoryRegionStore"
    with pytest.raises(ConfigurationError, match=f"'ap' is an AsyncMemoryRegionStore; {wanted}"):
        ReconciledBudget("us", stores["us"], {**peers, "ap": astores["ap"]}, RATES, **OPTIONS)  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match=f"'us' is an AsyncMemoryRegionStore; {wanted}"):
        DemandExchange("us", {**stores, "us": astores["us"]})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="is a MemoryStore; it must be a RegionStore on"):
        ReconciledBudget("us", MemoryStore(), peers, RATES, **OPTIONS)  # type: ignore[arg-type]


def test_bad_prefixes_and_sizes_are_refused() -> None:
    """A prefix that is empty or holds a hash tag's brace, regions on different prefixes, or
    no room for a single key: ConfigurationError."""
    for prefix in ("", "a{b", "a}b"):
        with pytest.raises(ConfigurationError, match="key prefix"):
            MemoryRegionStore(prefix=prefix)
        with pytest.raises(ConfigurationError, match="key prefix"):
            AsyncMemoryRegionStore(prefix=prefix)
    with pytest.raises(ConfigurationError, match="max_keys"):
        MemoryRegionStore(max_keys=0)
    stores = {"us": MemoryRegionStore(), "eu": MemoryRegionStore(prefix="eu")}
    stores["ap"] = MemoryRegionStore()
    with pytest.raises(ConfigurationError, match="every region must use the same"):
        ReconciledBudget(
            "us", stores["us"], {"eu": stores["eu"], "ap": stores["ap"]}, RATES, **OPTIONS
        )  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="every region must use the same"):
        DemandExchange("us", stores)  # type: ignore[arg-type]


def test_the_guides_example_runs() -> None:
    """docs/regions.md's example of regions in one process runs as written."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## With no Redis: MemoryRegionStore", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "the section has no python example"
    for block in blocks:
        exec(compile(block, "docs/regions.md", "exec"), {"print": lambda *args, **kwargs: None})
