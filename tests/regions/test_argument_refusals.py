"""Bad arguments to the regions' classes and functions are ConfigurationErrors saying what and
where, at construction (or at the call that takes them), and change nothing; never a raw
Python error, nor a failure left for later (a round, a reader, a thread)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from ratewarden import AsyncLimiter, Limiter
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.regions import (
    AsyncReconciledBudget,
    AsyncRegionalQuota,
    DemandExchange,
    HomeRegion,
    ReconciledBudget,
    RegionalQuota,
    SyncTask,
    SyncThread,
    traffic_weights,
)
from ratewarden.regions.__main__ import main
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.memory_regions import AsyncMemoryRegionStore, MemoryRegionStore
from ratewarden.storage.regions import RegionStore
from ratewarden.testing import ManualClock
from tests.regions.conftest import Region

RATES = {
    "us": Rate.parse("30/s", burst=1),
    "eu": Rate.parse("20/s", burst=1),
    "ap": Rate.parse("10/s", burst=1),
}
SHARES = {"us": 60, "eu": 30, "ap": 10}
START = 1_700_000_040.0


def _budget(regions: dict[str, Region], clock: ManualClock, **options: Any) -> ReconciledBudget:
    options = {"sync_interval": 1.0, "replication_lag": 0.2, **options}
    return ReconciledBudget(
        "eu",
        RegionStore(regions["eu"].local(), clock=clock, timeout=0.5),
        {peer: RegionStore(regions[peer].remote()) for peer in ("us", "ap")},
        RATES,
        **options,
    )


def _async_budget(clock: ManualClock, **options: Any) -> AsyncReconciledBudget:
    stores = {region: AsyncMemoryRegionStore(clock=clock) for region in RATES}
    options = {"sync_interval": 1.0, "replication_lag": 0.2, **options}
    peers = {region: store for region, store in stores.items() if region != "eu"}
    return AsyncReconciledBudget("eu", stores["eu"], peers, RATES, **options)


def test_each_syncer_refuses_the_other_twins_budget_naming_its_own(
    regions: dict[str, Region],
) -> None:
    """SyncThread runs a ReconciledBudget, SyncTask an AsyncReconciledBudget: each refuses the
    other's (and anything else) at once, naming the syncer to use; no thread starts."""
    clock = ManualClock(START)
    with pytest.raises(ConfigurationError, match=r"use SyncTask\(budget\) for it"):
        SyncThread(_async_budget(clock))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"use SyncThread\(budget\) for it"):
        SyncTask(_budget(regions, clock))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="SyncThread takes a ReconciledBudget, not None"):
        SyncThread(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="SyncTask takes an AsyncReconciledBudget"):
        SyncTask("eu")  # type: ignore[arg-type]


def test_a_sync_threads_unexpected_error_is_logged_and_raised_by_stop(
    regions: dict[str, Region], caplog: pytest.LogCaptureFixture
) -> None:
    """A round that raises something other than a RatewardenError (a bug) ends the thread
    with an error logged at once, naming the region; ``stop()`` raises it."""
    budget = _budget(regions, ManualClock(START), sync_interval=0.001)

    def broken() -> Any:
        raise RuntimeError("boom")

    budget.sync = broken  # type: ignore[method-assign]
    sync = SyncThread(budget)
    with caplog.at_level(logging.ERROR, logger="ratewarden.regions"):
        sync.start()
        sync._thread.join(5.0)
    assert not sync._thread.is_alive()
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage().startswith("region eu: sync rounds stopped by an unexpected error")
    assert "RuntimeError: boom" in record.getMessage()
    with pytest.raises(RuntimeError, match="boom"):
        sync.stop()


def test_a_sync_tasks_unexpected_error_is_logged_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same for SyncTask: the task ends, the error is logged when it happens (not only
    when someone calls ``stop()``), and ``stop()`` raises it."""
    clock = ManualClock(START)
    budget = _async_budget(clock)

    async def broken() -> Any:
        raise RuntimeError("boom")

    budget.sync = broken  # type: ignore[method-assign]

    async def run() -> None:
        sync = SyncTask(budget, clock=clock).start()
        assert sync.task is not None
        await asyncio.wait({sync.task})
        assert [r.getMessage()[:50] for r in caplog.records if r.levelno == logging.ERROR] == [
            "region eu: sync rounds stopped by an unexpected er"
        ]
        with pytest.raises(RuntimeError, match="boom"):
            await sync.stop()

    with caplog.at_level(logging.ERROR, logger="ratewarden.regions"):
        asyncio.run(run())


def test_regional_quotas_refuse_what_is_not_their_limiter_with_the_same_words() -> None:
    """Anything but the twin's limiter (a store, None) is refused at construction, in the
    words the twin says for the other twin's limiter."""
    store = MemoryStore()
    cases: list[tuple[type, Any, str, str]] = [
        (RegionalQuota, store, "a Limiter", "a MemoryStore"),
        (RegionalQuota, None, "a Limiter", "None"),
        (RegionalQuota, AsyncLimiter(AsyncMemoryStore()), "a Limiter", "an AsyncLimiter"),
        (AsyncRegionalQuota, store, "an AsyncLimiter", "a MemoryStore"),
        (AsyncRegionalQuota, Limiter(store), "an AsyncLimiter", "a Limiter"),
    ]
    for kind, limiter, wanted, found in cases:
        with pytest.raises(ConfigurationError) as refused:
            kind("eu", limiter, shares=SHARES)
        name = kind.__name__
        assert str(refused.value) == f"{name} needs {wanted} over this region's store, not {found}"


@pytest.mark.parametrize(
    ("interval", "demand", "words"),
    [
        (2, -500, "demand -500 of region 'eu' must be a whole number >= 0"),
        ("1", 5, "interval '1' must be a whole number"),
        (1, 2.5, "demand 2.5 of region 'eu' must be a whole number >= 0"),
        (True, 5, "interval True must be a whole number"),
        (1, None, "demand None of region 'eu' must be a whole number >= 0"),
    ],
)
def test_publish_refuses_a_bad_count_in_the_writer(
    regions: dict[str, Region], interval: Any, demand: Any, words: str
) -> None:
    """``DemandExchange.publish`` checks its input: a ConfigurationError in the region that
    writes it, and nothing is written (the readers see no count), where before -500 was
    published and failed every region's rebalance round."""
    stores = {name: RegionStore(region.local()) for name, region in regions.items()}
    exchange = DemandExchange("eu", stores)
    with pytest.raises(ConfigurationError) as refused:
        exchange.publish(interval, demand)
    assert str(refused.value).startswith("DemandExchange.publish: " + words)
    assert DemandExchange("us", stores).collect(2)[0]["eu"] == 0
    assert "eu" in DemandExchange("us", stores).collect(2)[1]


def test_bad_intervals_are_configuration_errors_naming_the_budget(
    regions: dict[str, Region],
) -> None:
    """``sync_interval=None`` (or ``replication_lag=None``) was a TypeError from ``float``."""
    clock = ManualClock(START)
    with pytest.raises(ConfigurationError, match=r"^ReconciledBudget: sync_interval None must"):
        _budget(regions, clock, sync_interval=None)
    with pytest.raises(ConfigurationError, match=r"^ReconciledBudget: replication_lag None must"):
        _budget(regions, clock, replication_lag=None)
    with pytest.raises(ConfigurationError, match=r"^AsyncReconciledBudget: sync_interval None"):
        _async_budget(clock, sync_interval=None)


def test_home_region_refuses_bad_homes_and_tenant_of_at_construction() -> None:
    """``homes`` as a list was an AttributeError; ``tenant_of=5`` was accepted and failed at
    the first hit."""
    limiters = {region: Limiter(MemoryStore()) for region in SHARES}
    with pytest.raises(ConfigurationError, match=r"^HomeRegion: homes must map each tenant"):
        HomeRegion(limiters, homes=["acme"], default="us")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^HomeRegion: tenant_of must be a function"):
        HomeRegion(limiters, homes={}, default="us", tenant_of=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^HomeRegion: limiters must map"):
        HomeRegion([limiters["us"]], homes={}, default="us")  # type: ignore[arg-type]


def test_traffic_weights_of_no_regions_is_refused() -> None:
    """``traffic_weights({}, ())`` was a ZeroDivisionError."""
    with pytest.raises(ConfigurationError, match=r"regions \(\) must name at least one region"):
        traffic_weights({}, ())


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("e u", "holds whitespace (U+0020) at position 1"),
        ("e\nu", "holds whitespace (U+000A) at position 1"),
        ("eu\x00", "holds a control character (U+0000) at position 2"),
        ("e\u200bu", "holds a control character (U+200B) at position 1"),
    ],
)
def test_region_names_with_whitespace_or_control_characters_are_refused(
    name: str, said: str
) -> None:
    """Such a name went verbatim into keys and log lines; now it is refused, saying which
    character and where."""
    with pytest.raises(ConfigurationError) as refused:
        RegionalQuota(name, Limiter(MemoryStore()), shares={name: 1})
    assert said in str(refused.value)
    with pytest.raises(ConfigurationError, match=r"whitespace|control"):
        ReconciledBudget(
            name,
            MemoryRegionStore(),
            {"us": MemoryRegionStore()},
            {name: RATES["eu"], "us": RATES["us"]},
            sync_interval=1.0,
            replication_lag=0.1,
        )


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--sync-interval", "0"], "--sync-interval 0.0 must be a finite number of seconds > 0"),
        (
            ["--sync-interval", "1", "--replication-lag", "-0.1"],
            "--replication-lag -0.1 must be a finite number of seconds >= 0",
        ),
    ],
)
def test_the_bound_command_names_its_flags(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's errors name its flags, not the Python parameters."""
    assert main(["bound", "--region", "us=100/s", *flags]) == 2
    assert capsys.readouterr().err == f"error: {said}\n"


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--region", "eu=50/s", "--sync-interval", "1", "--replication-lag", "1e300"],
            "--replication-lag 1e+300 is more than a day (86,400 s)",
        ),
        (
            ["--region", "eu=50/s", "--sync-interval", "90000"],
            "--sync-interval 90000.0 is more than a day (86,400 s)",
        ),
        (["--sync-interval", "1"], "give at least two --region"),
    ],
)
def test_the_bound_command_refuses_a_lag_past_a_day_and_a_lone_region(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A huge lag printed a 300-digit bound, and one region alone was taken: both are refused,
    and so is a budget built with such a lag."""
    assert main(["bound", "--region", "us=100/s", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and err.count("\n") == 1
