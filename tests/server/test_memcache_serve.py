"""``ratewarden serve --store memcache://...``: the service on a real memcached, over real gRPC.

The server is a ``RateLimitServer`` on loopback whose store comes from ``Settings.store_url``
(as ``ratewarden serve --store`` opens it), or ``ratewarden serve`` itself as a process for
``--workers``. What is in memcached is read back with memcached's own commands: one item per
counter key, its entries as ``storage/_memcache_items`` writes them
(``{"rw": 1, "e": {entry: [state, expiry]}}``; a fixed window's state is ``[window, count]``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratewarden.cli import main
from ratewarden.errors import ConfigurationError
from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import Settings
from ratewarden.storage.memcache import AsyncMemcacheStore
from ratewarden.storage.split import AsyncSplitStore
from tests._memcached import MemcachedServer
from tests.server_transport._process import RATEWARDEN, ServeProcess
from tests.server_transport._rlqs import RULES as RLQS_RULES
from tests.server_transport._rlqs import Stream, assignment, report
from tests.server_transport.conftest import OK, OVER_LIMIT, channel, request
from tests.server_transport.test_serve_process import serving_workers, wait_for

#: api_key and user count per hour: serve on a store URL decides on the system clock, and a
#: minute's epoch-aligned end among the calls a test counts (or before it reads the items
#: back) would start a new window (shown with the end forced between the calls). burst is
#: per second so that --store-per-second takes it: its test starts in a fresh window.
RULES = """\
domain: mc
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: burst
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 2}
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 100, failure_mode: open}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 100, failure_mode: closed}
"""
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

MakeMemcached = Callable[..., MemcachedServer]


def items(server: MemcachedServer) -> dict[str, dict[str, Any]]:
    """Every item ``server`` holds: its name -> its entries (``{entry: [state, expiry]}``)."""
    with server.connect(timeout=5) as sock:
        sock.sendall(b"lru_crawler metadump all\r\n")
        dump = b""
        while not dump.endswith(b"END\r\n"):
            chunk = sock.recv(65536)
            assert chunk, dump
            dump += chunk
        names = [
            unquote(field.removeprefix("key="))
            for line in dump.decode().splitlines()
            for field in line.split(" ")[:1]
            if field.startswith("key=")
        ]
        found = {}
        for name in names:
            sock.sendall(f"mg {name} v\r\n".encode())
            reply = b""
            while not reply.endswith(b"\r\n") or reply.count(b"\r\n") < 2:
                reply += sock.recv(65536)
            head, _, value = reply.partition(b"\r\n")
            assert head.startswith(b"VA "), reply
            found[name] = json.loads(value)["e"]
    return found


async def fresh_window(period: float, margin: float = 3.0) -> None:
    """Return once at least ``margin`` seconds of the current epoch-aligned fixed window of
    ``period`` seconds are left, waiting at most ``margin`` seconds: for calls that must be
    counted in one window on the system clock, when the rule cannot have a longer one."""
    left = period - time.time() % period
    if left < margin:
        await asyncio.sleep(left + 0.05)


def count(entries: dict[str, Any]) -> int:
    """The count of the one fixed-window entry of an item."""
    [(entry, (state, _expiry))] = entries.items()
    assert ":fixed_window:" in entry, entries
    window_count: int = state[1]
    return window_count


@asynccontextmanager
async def served(
    tmp_path: Path, store_url: str, rules: str = RULES, **options: Any
) -> AsyncIterator[RateLimitServer]:
    """A started ``RateLimitServer`` on ``rules`` whose store ``store_url`` names (1 s timeout
    unless given: a busy machine must not fail a call open), stopped after the block."""
    (tmp_path / "rules.yaml").write_text(rules)
    options = {"grpc_port": 0, "http_port": 0, "reload_interval": 0, **options}
    options.setdefault("store_timeout", 1.0)
    settings = Settings(config_paths=(str(tmp_path),), store_url=store_url, **options)
    server = RateLimitServer(settings)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(0)


async def ask(server: RateLimitServer, *descriptors: dict[str, str]) -> list[int]:
    """``[overall code, code of each descriptor]`` of one ShouldRateLimit over gRPC."""
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        reply = await stub.ShouldRateLimit(request("mc", *descriptors), timeout=5)
    return [reply.overall_code, *(status.code for status in reply.statuses)]


async def health_of(port: int) -> int:
    async with channel(port) as chan:
        reply = await health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest())
        return int(reply.status)


async def test_a_limit_of_three_answers_ok_three_times_then_over_limit_counted_in_memcached(
    tmp_path: Path, memcached: MemcachedServer
) -> None:
    """3 an hour: OK three times, then OVER_LIMIT; memcached holds one item for the key,
    named with the settings' key prefix, counting 3 (the denied call charged nothing); the
    store is the memcache store with the settings' timeout."""
    async with served(tmp_path, memcached.url, key_prefix="edge") as server:
        assert isinstance(server.store, AsyncMemcacheStore)
        assert server.store.timeout == 1.0
        codes = [(await ask(server, {"api_key": "k1"}))[0] for _ in range(4)]
    assert codes == [OK, OK, OK, OVER_LIMIT]
    [(name, entries)] = items(memcached).items()
    assert name.startswith("edge:{") and "api_key" in name and "k1" in name
    assert count(entries) == 3


async def test_two_descriptors_in_one_request_are_two_items_and_a_denial_charges_neither(
    tmp_path: Path, memcached: MemcachedServer
) -> None:
    """api_key (3 an hour) and user (5) in one request: each its own item; the fourth request
    is denied by api_key, and user's count stays at 3 (checked, then charged: memcached has
    no step over two items)."""
    async with served(tmp_path, memcached.url) as server:
        answers = [await ask(server, {"api_key": "k2"}, {"user": "u2"}) for _ in range(4)]
    assert answers == [[OK, OK, OK]] * 3 + [[OVER_LIMIT, OVER_LIMIT, OK]]
    found = items(memcached)
    assert len(found) == 2
    [api_key] = [entries for name, entries in found.items() if "api_key" in name]
    [user] = [entries for name, entries in found.items() if "user" in name]
    assert (count(api_key), count(user)) == (3, 3)


async def test_health_follows_memcached_and_the_rules_failure_modes_answer_while_it_is_down(
    tmp_path: Path, make_memcached: MakeMemcached
) -> None:
    """SERVING while memcached answers; stopped: NOT_SERVING, and each rule's failure_mode
    answers (open: OK, closed: OVER_LIMIT) without a gRPC error; started again on its port:
    SERVING, and decisions are memcached's again."""
    server_one = make_memcached()
    async with served(tmp_path, server_one.url, store_timeout=0.2) as server:
        assert await health_of(server.grpc_port) == SERVING
        assert await ask(server, {"open": "x"}, {"closed": "x"}) == [OK, OK, OK]
        server_one.stop()
        assert not await server.refresh_health()
        assert await health_of(server.grpc_port) == NOT_SERVING
        for _ in range(7):  # past the breaker's 5 failures: it answers at once then
            assert await ask(server, {"open": "x"}) == [OK, OK]
            assert await ask(server, {"closed": "x"}) == [OVER_LIMIT, OVER_LIMIT]
        again = make_memcached(port=server_one.port)
        assert await server.refresh_health()
        assert await health_of(server.grpc_port) == SERVING
        assert await ask(server, {"api_key": "back"}) == [OK, OK]
    assert [count(entries) for entries in items(again).values()] == [1]


async def test_per_second_limits_on_a_memcached_of_their_own(
    tmp_path: Path, memcached: MemcachedServer, make_memcached: MakeMemcached
) -> None:
    """--store-per-second memcache://...: burst (2 per 30 s) counts in the second memcached,
    api_key (per hour) in the main one; a request over both is checked, then charged. (The
    calls start in a fresh 30 s window: its end among them would refill burst.)"""
    fast = make_memcached()
    async with served(tmp_path, memcached.url, store_per_second=fast.url) as server:
        assert isinstance(server.store, AsyncSplitStore)
        await fresh_window(30)
        answers = [await ask(server, {"burst": "b"}, {"api_key": "b"}) for _ in range(3)]
    assert answers == [[OK, OK, OK], [OK, OK, OK], [OVER_LIMIT, OVER_LIMIT, OK]]
    [(fast_name, fast_entries)] = items(fast).items()
    [(main_name, main_entries)] = items(memcached).items()
    assert "burst" in fast_name and "api_key" in main_name
    assert (count(fast_entries), count(main_entries)) == (2, 2)


@pytest.mark.timeout(120)
def test_two_workers_share_the_counters_in_memcached(
    tmp_path: Path, memcached: MemcachedServer
) -> None:
    """ratewarden serve --workers 2 --store memcache://...: both processes serve, counting
    together (3 an hour: the fourth call, on a new connection each, is denied whichever
    worker answers); the serving line names the store."""
    (tmp_path / "rules.yaml").write_text(RULES)
    args = ("--workers", "2", "--store", memcached.url, "--store-timeout", "1")
    server = ServeProcess(tmp_path / "rules.yaml", *args)
    try:
        server.wait_serving()
        wait_for(lambda: serving_workers(server) == {0, 1}, timeout=20)
        codes = []
        for _ in range(4):  # a new connection each time: the kernel spreads them over workers
            with grpc.insecure_channel(server.grpc_target) as chan:
                stub = rls_pb2_grpc.RateLimitServiceStub(chan)
                reply = stub.ShouldRateLimit(request("mc", {"api_key": "w"}), timeout=5)
                codes.append(reply.overall_code)
        assert codes == [OK, OK, OK, OVER_LIMIT]
        stores = {e["store"] for e in server.logs() if e.get("event") == "serving"}
        assert stores == {memcached.url}
    finally:
        server.stop()
    [entries] = items(memcached).values()
    assert count(entries) == 3


async def test_two_rlqs_replicas_on_one_memcached_split_one_limit(
    tmp_path: Path, memcached: MemcachedServer
) -> None:
    """--rlqs on memcached takes the fleet path: a bucket's round is one item, written with
    compare-and-set. The first Envoy alone holds the whole rule (6 a minute, 4 at once); a
    second one on the other replica gets DENY_ALL, then both move to half; the two never
    hold more than the rule (as tests/server_transport/test_rlqs_fleet.py on Redis)."""
    options: dict[str, Any] = {"rlqs": True, "rlqs_interval": 0.2, "rlqs_ttl": 2}
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    async with (
        served(tmp_path / "one", memcached.url, RLQS_RULES, **options) as one,
        served(tmp_path / "two", memcached.url, RLQS_RULES, **options) as two,
    ):
        first, second = Stream(one.grpc_port), Stream(two.grpc_port)
        try:
            first.send(report("edge", ({"tenant": "a"}, 6, 0)))
            assert assignment(await first.next())["token_bucket"] == (4, 6, 60)
            second.send(report("edge", ({"tenant": "a"}, 6, 0)))
            assert assignment(await second.next())["blanket"] == "DENY_ALL"
            held = {"first": (4, 6, 60), "second": (0, 0, 60)}
            for _ in range(40):
                for name, stream in (("first", first), ("second", second)):
                    got = assignment(await stream.next())
                    held[name] = got.get("token_bucket", (0, 0, 60))
                    assert held["first"][1] + held["second"][1] <= 6, held
                    assert held["first"][0] + held["second"][0] <= 4, held
                if held == {"first": (2, 3, 60), "second": (2, 3, 60)}:
                    break
            assert held == {"first": (2, 3, 60), "second": (2, 3, 60)}
        finally:
            await first.close()
            await second.close()
    assert any(":rlqs:" in entry for entries in items(memcached).values() for entry in entries)


def test_memcache_urls_share_counters_between_workers_and_the_messages_name_them() -> None:
    """A memcache:// (or memcached://) store is shared: --workers 2 is accepted on it, for the
    per-second store too; the messages that list the stores name it."""
    Settings(config_paths=("r",), store_url="memcache://127.0.0.1:11211", workers=2)
    Settings(
        config_paths=("r",),
        store_url="redis://127.0.0.1:6379/0",
        store_per_second="MEMCACHED://127.0.0.1:11211,127.0.0.1:11212",
        workers=2,
    )
    with pytest.raises(ConfigurationError, match=r"use --store redis://\.\.\. or memcache://"):
        Settings(config_paths=("r",), workers=2)
    with pytest.raises(ConfigurationError, match=r"no scheme; use memory, .* memcache://host"):
        Settings(config_paths=("r",), store_url="localhost")
    with pytest.raises(ConfigurationError, match="use a Redis or memcache URL, or one worker"):
        Settings(
            config_paths=("r",), store_url="memcache://h:1", store_per_second="memory", workers=2
        )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--store", "memcache://127.0.0.1:0"], "'memcache://127.0.0.1:0': port '0'"),
        (["--store", "memcache://127.0.0.1:11211/0"], "'memcache://127.0.0.1:11211/0': only"),
        (["--store-per-second", "memcached://a:1,a:1"], "names a server twice"),
        (
            ["--store", "foo://x"],
            "valkey+cluster://, ...), memcache:// (memcached://, memcaches://",
        ),
    ],
)
def test_a_store_url_that_cannot_be_used_exits_2_naming_it(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    """ratewarden serve with a memcache URL the store refuses (or an unknown scheme, whose
    message lists memcache:// beside Redis's schemes): exit 2, one line naming the URL. (A
    process with a deadline: a URL taken by mistake would serve until stopped.)"""
    (tmp_path / "rules.yaml").write_text(RULES)
    ports = ("--grpc-port", "0", "--http-port", "0")
    done = subprocess.run(
        [*RATEWARDEN, "serve", "--config", str(tmp_path / "rules.yaml"), *ports, *argv],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("RATEWARDEN_")},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("ratewarden serve: error: ")
    assert message in done.stderr


def test_plan_measures_a_redis_only_and_says_so_for_memcached(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ratewarden plan --measure memcache://...: exit 2, saying only a Redis can be measured
    (memory per key, script time) and to give --key-bytes."""
    assert main(["plan", "--rps", "100", "--measure", "memcache://127.0.0.1:11211"]) == 2
    err = capsys.readouterr().err
    assert "--measure 'memcache://127.0.0.1:11211': only a Redis can be measured" in err
    assert "--key-bytes" in err
