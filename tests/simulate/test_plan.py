"""`ratewarden plan`: the worked example exactly, each formula, bounds, errors, and --measure."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

import ratewarden.plan
from ratewarden.cli import main
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.plan import PlanInput, Region, format_plan, plan
from ratewarden.rate import Rate
from ratewarden.regions import overshoot_bound
from ratewarden.storage import measure as measuring
from ratewarden.storage.measure import Measured, measure, state_keys
from ratewarden.storage.redis import RedisStore
from tests._servers import STORE_TIMEOUT, RedisCluster, RedisServer, free_port

CAPACITY_MD = Path(__file__).resolve().parents[2] / "docs" / "capacity.md"

WORKED = ["plan", "--rps", "30000", "--local-reject", "10%", "--global-share", "60%",
          "--descriptors", "1.5", "--keys", "5000000", "--key-bytes", "100",
          "--primaries", "4"]  # fmt: skip


def test_the_worked_example_of_issue_5_exactly() -> None:
    """30,000 req/s, 10% local, 60% global, 1.5 descriptors, 4 primaries, 5M keys at 100 B."""
    result = plan(PlanInput(rps=30_000, local_reject=0.1, global_share=0.6, descriptors=1.5,
                            keys=5_000_000, key_bytes=100, primaries=4))  # fmt: skip
    assert result.calls_per_second == pytest.approx(24_300)
    assert result.calls_per_primary_second == pytest.approx(6_075)
    assert result.memory_bytes == pytest.approx(500e6)
    assert result.bandwidth_bytes == pytest.approx(7.29e6)  # "about 7 MB/s"


def test_the_command_prints_the_worked_example(capsys: pytest.CaptureFixture[str]) -> None:
    """The same figures on the command line, each with its formula."""
    assert main(WORKED) == 0
    out = capsys.readouterr().out
    for figure in ("24,300/s", "6,075/s", "500.0 MB", "7.3 MB/s", "27,000 x 0.6 x 1.5"):
        assert figure in out
    assert "give --calls-per-primary" in out  # not guessed


def test_primaries_needed_fill_each_to_the_utilization_cap() -> None:
    """ceil(calls / (per-primary capacity x 50%)): 24,300 / (20,000 x 0.5) -> 3."""
    result = plan(PlanInput(rps=24_300, calls_per_primary=20_000))
    assert result.primaries_needed == 3


def test_latency_is_the_round_trip_plus_queueing_at_the_utilization() -> None:
    """M/M/1: rtt + service / (1 - rho); 10,000 calls/s on 2 primaries of 10,000 -> rho 0.5."""
    result = plan(PlanInput(rps=10_000, primaries=2, calls_per_primary=10_000, rtt_ms=0.5,
                            timeout_ms=20))  # fmt: skip
    assert result.latency_ms == pytest.approx(0.5 + 0.1 / 0.5)
    assert "headroom" in format_plan(result)


def test_an_overloaded_shard_has_unbounded_latency() -> None:
    """At or past capacity the queue grows without bound; the plan says so."""
    result = plan(PlanInput(rps=30_000, primaries=1, calls_per_primary=20_000, rtt_ms=1))
    assert result.latency_ms == math.inf
    assert "cannot serve" in format_plan(result)


def test_replicas_multiply_memory() -> None:
    """Each replica holds a full copy of its primary."""
    result = plan(PlanInput(rps=1, keys=1_000, key_bytes=150, replicas=2))
    assert result.memory_bytes == 450_000


def test_over_admission_bounds_for_failover_leases_and_regions() -> None:
    """B + r x lag; instances x (k - 1); the sum over regions of burst + ceil(rate x (sync +
    lag)): 1 + ceil(6 x 1.07) + 1 + ceil(3 x 1.07) + 1 + ceil(1 x 1.07) = 8 + 5 + 3."""
    limit = Rate.parse("600/minute", burst=50)
    regions = {
        name: Rate.parse(text, burst=1)
        for name, text in (("eu", "360/minute"), ("us", "180/minute"), ("ap", "1/s"))
    }
    result = plan(PlanInput(
        rps=1, limit=limit, replication_lag_ms=200, instances=40, lease=10,
        regions=tuple(Region(name, rate) for name, rate in regions.items()),
        sync_interval_ms=1_000, region_lag_ms=70,
    ))  # fmt: skip
    assert result.over_admission["failover"] == pytest.approx(50 + 10 * 0.2)
    assert result.over_admission["leases"] == 40 * 9
    assert result.over_admission["regions"] == 16 == overshoot_bound(regions, 1, 0.07)


def test_regions_default_to_each_at_the_full_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """--regions 3 at 60/minute with a 1 s sync, no --burst: each region's burst is the limit's
    capacity, 60, so 3 x (60 + ceil(1/s x 1 s)) = 183 requests."""
    code = main(["plan", "--rps", "100", "--limit", "60/minute", "--regions", "3",
                 "--sync-interval-ms", "1000"])  # fmt: skip
    assert code == 0
    assert re.search(r"regions +183 requests .*: 3 x \(60 \+ 1\)$", capsys.readouterr().out, re.M)


def _regions_line(out: str) -> int:
    """The number on the plan's ``regions`` line."""
    found = re.search(r"^  regions +([0-9,]+) requests ", out, re.M)
    assert found, out
    return int(found[1].replace(",", ""))


def _same(rate: str, burst: int | None, names: str = "abc") -> dict[str, Rate]:
    return {name: Rate.parse(rate, burst) for name in names}


@pytest.mark.parametrize(
    ("argv", "rates", "sync_interval", "lag", "expected"),
    [
        # The walk-through: 3 x (50 + 10), as python -m ratewarden.regions bound prints.
        (["--regions", "3", "--limit", "600/minute", "--burst", "50",
          "--sync-interval-ms", "1000"], _same("600/minute", 50), 1, 0, 180),
        # No --burst: each region's burst is the Rate default, the limit (600 + 10 each).
        (["--regions", "3", "--limit", "600/minute", "--sync-interval-ms", "1000"],
         _same("600/minute", None), 1, 0, 1_830),
        # 100/minute x 0.32 s = 0.53 requests: the ceiling makes it 1 per region.
        (["--regions", "2", "--limit", "100/minute", "--burst", "5", "--sync-interval-ms", "250",
          "--region-lag-ms", "70"], _same("100/minute", 5, "ab"), 0.25, 0.07, 12),
        # docs/capacity.md's example: 1 + 7, 1 + 4, 1 + 2; --burst is the limit's, not theirs.
        (["--burst", "50", "--region-rate", "eu=360/minute:1", "--region-rate",
          "us=180/minute:1", "--region-rate", "ap=60/minute:1", "--sync-interval-ms", "1000",
          "--region-lag-ms", "70"],
         {"eu": Rate.parse("360/minute", 1), "us": Rate.parse("180/minute", 1),
          "ap": Rate.parse("60/minute", 1)}, 1, 0.07, 16),
        # The same regions with no :BURST: each region's limit is its burst (367 + 184 + 62).
        (["--region-rate", "eu=360/minute", "--region-rate", "us=180/minute", "--region-rate",
          "ap=60/minute", "--sync-interval-ms", "1000", "--region-lag-ms", "70"],
         {"eu": Rate.parse("360/minute"), "us": Rate.parse("180/minute"),
          "ap": Rate.parse("60/minute")}, 1, 0.07, 613),
        # Fractional rates: 7/minute x 1.53 s = 0.18 -> 1, 1/hour x 1.53 s -> 1.
        (["--region-rate", "eu=7/minute:2", "--region-rate", "us=1/hour", "--sync-interval-ms",
          "1500", "--region-lag-ms", "30"],
         {"eu": Rate.parse("7/minute", 2), "us": Rate.parse("1/hour")}, 1.5, 0.03, 5),
    ],
)  # fmt: skip
def test_the_regions_bound_is_the_librarys_overshoot_bound(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    rates: dict[str, Rate],
    sync_interval: float,
    lag: float,
    expected: int,
) -> None:
    """The plan's regions line is ratewarden.regions.overshoot_bound of the same region caps:
    each region's burst plus its rate times the staleness, rounded up, per region."""
    assert main(["plan", "--rps", "100", *argv]) == 0
    assert _regions_line(capsys.readouterr().out) == overshoot_bound(rates, sync_interval, lag)
    assert overshoot_bound(rates, sync_interval, lag) == expected


@pytest.mark.parametrize("measuring", [False, True], ids=["plain", "before --measure"])
def test_a_region_rate_given_twice_is_refused(
    capsys: pytest.CaptureFixture[str], measuring: bool
) -> None:
    """--region-rate eu=... twice exits 2 with one line naming the flag and the region, prints
    no plan, and is refused before --measure would reach a server (exit 1 there: none listens)."""
    argv = ["plan", "--rps", "10", "--region-rate", "eu=10/s", "--region-rate", "us=5/s",
            "--region-rate", "eu=20/s", "--sync-interval-ms", "1000"]  # fmt: skip
    if measuring:
        argv += ["--measure", f"redis://127.0.0.1:{free_port()}/0"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert "--region-rate" in err
    assert "'eu'" in err


def test_the_capacity_example_prints_its_over_admission_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/capacity.md's over-admission example shows what the command prints."""
    text = CAPACITY_MD.read_text(encoding="utf-8")
    block = re.search(r"```console\n\$ (ratewarden plan [^`]*?)\n\.\.\.\n([^`]*)```", text)
    assert block, "docs/capacity.md has no over-admission example"
    argv = block[1].replace("\\\n", " ").split()[1:]
    assert main(argv) == 0
    assert block[2] in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rps": 0}, "rps 0 must be a finite number above 0"),
        ({"local_reject": 1.0}, "local_reject 1.0 must be a share from 0 to below 1"),
        ({"global_share": 1.5}, "global_share 1.5 must be a share"),
        ({"descriptors": float("nan")}, "descriptors nan"),
        ({"algorithm": "moving_window"}, "unknown algorithm"),
        ({"keys": 0}, "keys 0 must be a whole number >= 1"),
        ({"instances": 4}, "leases need both"),
        ({"regions": (Region("eu", Rate.parse("1/s")),)}, "regions need sync_interval_ms"),
        (
            {
                "regions": (Region("eu", Rate.parse("1/s")), Region("eu", Rate.parse("2/s"))),
                "sync_interval_ms": 1_000,
            },
            "regions name 'eu' twice",
        ),
        (
            {"regions": (Region("e:u", Rate.parse("1/s")),), "sync_interval_ms": 1_000},
            "region name 'e:u'",
        ),
        ({"max_utilization": 0}, "max_utilization 0 must be a share above 0 to below 1"),
    ],
)
def test_bad_inputs_are_configuration_errors(kwargs: dict[str, object], message: str) -> None:
    """Each input is checked on construction and named in the error."""
    arguments: dict[str, object] = {"rps": 100}
    arguments.update(kwargs)
    with pytest.raises(ConfigurationError, match=message):
        PlanInput(**arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: --rps"),
        (["--rps", "many"], "--rps 'many' is not a number"),
        (["--rps", "10", "--local-reject", "110%"], "must be from 0 to below 1"),
        (["--rps", "10", "--limit", "5/fortnight"], "--limit '5/fortnight'"),
        (["--rps", "10", "--lease", "5"], "--instances and --lease go together"),
        (["--rps", "10", "--instances", "5"], "--instances and --lease go together"),
        (["--rps", "10", "--regions", "3"], "need --sync-interval-ms"),
        (["--rps", "10", "--region-rate", "eu=1/s"], "need --sync-interval-ms"),
        (["--rps", "10", "--max-utilization", "0"], "--max-utilization '0' leaves nothing"),
        (["--rps", "10", "--max-utilization", "0%"], "--max-utilization '0%' leaves nothing"),
        (["--rps", "10", "--regions", "2", "--region-rate", "eu=1/s"], "not allowed with"),
        (["--rps", "10", "--region-rate", "eu"], "--region-rate 'eu' must be NAME=RATE"),
        (["--rps", "10", "--region-rate", "eu=1/s:x"], "--region-rate 'eu=1/s:x': burst 'x'"),
        (["--rps", "10", "--key-bytes", "9", "--measure", "redis://x"], "not both"),
        (["--rps", "10", "--measure", "nosuch://host"], "ratewarden plan: error:"),
    ],
)
def test_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Bad input exits 2 with the flag and value in one line."""
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


@contextmanager
def opened(url: str) -> Iterator[RedisStore]:
    """The store ``ratewarden plan --measure`` opens on ``url``, closed afterwards."""
    store = RedisStore.from_url(url, timeout=2.0)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.redis
def test_measure_reads_memory_usage_and_leaves_nothing(redis_client: redis.Redis) -> None:
    """GCRA's key is small, a full sliding log is about limit entries larger; no key is left."""
    url = f"redis://127.0.0.1:{redis_client.connection_pool.connection_kwargs['port']}/0"
    redis_client.set("unrelated", "x")
    with opened(url) as store:
        gcra = measure(store, "gcra", Rate.parse("100/minute"), key_length=32, calls=300)
        log = measure(store, "sliding_log", Rate.parse("100/minute"), key_length=32, calls=300)
    assert 32 < gcra.key_bytes < 400
    assert log.key_bytes > gcra.key_bytes + 100 * 8
    assert gcra.usec_per_call is not None and gcra.usec_per_call > 0
    assert redis_client.keys("*") == [b"unrelated"]


@pytest.mark.redis
def test_state_keys_are_the_keys_a_redis_store_writes(redis_client: redis.Redis) -> None:
    """state_keys names exactly the Redis keys a hit on (key, rates) creates, one per rate."""
    rates = [Rate.parse("10/second"), Rate.parse("100/minute")]
    store = RedisStore(redis_client, prefix="p", timeout=STORE_TIMEOUT)
    store.hit("sliding_window", "user:{7}", rates)
    names = state_keys("sliding_window", "p", "user:{7}", rates)
    assert len(names) == 2
    assert sorted(redis_client.keys("*")) == sorted(name.encode() for name in names)


def test_state_keys_checks_its_input_like_a_hit() -> None:
    """An unknown algorithm or an empty key is a ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match="moving_window"):
        state_keys("moving_window", "rw", "k", Rate.parse("1/s"))
    with pytest.raises(ConfigurationError, match="key must not be empty"):
        state_keys("gcra", "rw", "", Rate.parse("1/s"))


@pytest.mark.redis
def test_measure_refuses_to_touch_an_existing_key(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test key that already exists stops the measurement; the existing key stays as it was."""
    url = f"redis://127.0.0.1:{redis_client.connection_pool.connection_kwargs['port']}/0"
    rate = Rate.parse("100/minute")
    monkeypatch.setattr(measuring, "_keys", lambda length, count: ["taken"])
    name = state_keys("gcra", "rw", "taken", rate)[0]
    redis_client.set(name, "someone's state")
    with opened(url) as store, pytest.raises(ConfigurationError, match="already exists"):
        measure(store, "gcra", rate, key_length=5, calls=10)
    assert redis_client.get(name) == b"someone's state"


def test_measure_on_a_closed_port_is_a_storage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listening: StorageUnavailableError naming the server, exit 1 on the CLI."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    with opened(url) as store, pytest.raises(StorageUnavailableError, match=r"127\.0\.0\.1"):
        measure(store, "gcra", Rate.parse("100/minute"), calls=5)
    assert main(["plan", "--rps", "10", "--measure", url]) == 1
    assert "--measure failed" in capsys.readouterr().err


@pytest.mark.redis
def test_the_command_uses_the_measured_bytes(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """--measure prints what it measured, on which server, and sizes memory with it."""
    code = main(["plan", "--rps", "1000", "--keys", "1000000", "--measure", redis_server.url])
    assert code == 0
    out = capsys.readouterr().out
    assert f"measured on {redis_server.url} (2,000 decisions, gcra)" in out
    assert "MEMORY USAGE of one key" in out
    assert "1,000,000 keys x" in out


@pytest.mark.redis
@pytest.mark.cluster
def test_measure_on_a_cluster_reads_memory_only(redis_cluster: RedisCluster) -> None:
    """On a Cluster the key's node answers MEMORY USAGE; script time is not read (None);
    nothing is left behind."""
    client = redis_cluster.client()
    try:
        client.flushall(target_nodes=client.PRIMARIES)  # other tests' keys may still live
        with opened(redis_cluster.url) as store:
            found = measure(store, "gcra", Rate.parse("100/minute"), calls=50)
        assert 32 < found.key_bytes < 400
        assert found.usec_per_call is None
        assert client.dbsize() == 0
    finally:
        client.close()


def test_plan_works_without_redis_and_measure_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only --measure needs redis-py; without it, the other figures still print."""
    monkeypatch.setitem(sys.modules, "redis", None)
    # As if never imported: the store module must now fail to import, as without the extra.
    monkeypatch.delitem(sys.modules, "ratewarden.storage.redis", raising=False)
    assert main(["plan", "--rps", "100"]) == 0
    assert main(["plan", "--rps", "100", "--measure", "redis://127.0.0.1:1/0"]) == 2
    assert "pip install 'ratewarden[redis]'" in capsys.readouterr().err


def test_the_old_plan_names_warn_and_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    """ratewarden.plan.Measured is storage's class and ratewarden.plan.measure(url, ...) still
    opens the store and measures, each with a DeprecationWarning naming the new import."""
    with pytest.warns(DeprecationWarning, match="import Measured from ratewarden.storage.measure"):
        assert ratewarden.plan.Measured is Measured
    with pytest.warns(DeprecationWarning, match=r"ratewarden\.storage\.measure\.measure\(store"):
        old = ratewarden.plan.measure
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(StorageUnavailableError, match=r"127\.0\.0\.1"):
        old(url, "gcra", Rate.parse("100/minute"), calls=5)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ratewarden.plan.nope  # noqa: B018
