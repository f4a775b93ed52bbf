"""envoyproxy/ratelimit's stats over StatsD, read by listeners the tests start (issue 19, item 3).

The counts come from a real service (memory store, ManualClock) through ``ServiceStats``;
the lines are read off real UDP and TCP sockets on loopback and parsed, and the same counts
are read back from the Prometheus exposition under upstream's labels (``key1``, ``key2``).
The last test starts ``ratewarden serve`` with upstream's variables only and reads its lines
over TCP, upstream's default sink.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.errors import ConfigurationError
from ratewarden.server import config
from ratewarden.server.service import RateLimitService
from ratewarden.server.stats import ServiceStats
from ratewarden.server.stats_upstream import upstream_keys
from ratewarden.server.statsd import StatsdSink, parse_address, parse_tags, stats_name
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, free_port
from tests.server.conftest import ALIGNED, desc
from tests.server_transport.test_serve_process import post_json
from tests.upstream._serve import upstream_serve

RULES = """\
domain: web
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: client_ip
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plan
    value: free
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 1}
"""
P = "ratelimit.service.rate_limit."


def lines_of(payload: bytes) -> dict[str, list[str]]:
    """StatsD lines, ``name:value|type``, as name -> ["value|type", ...]."""
    out: dict[str, list[str]] = {}
    for line in payload.decode().splitlines():
        name, _, rest = line.rpartition(":")
        out.setdefault(name, []).append(rest)
    return out


def counters(payload: bytes) -> dict[str, int]:
    """The counter lines summed by name (timers aside)."""
    out: dict[str, int] = {}
    for name, values in lines_of(payload).items():
        for value in values:
            number, _, kind = value.partition("|")
            if kind == "c":
                out[name] = out.get(name, 0) + int(number)
    return out


def decided(stats: ServiceStats) -> None:
    """Seven calls on a 5/minute key (5 within, 2 over, the 5th near the limit), one on a
    detailed IPv4 key, two on a nested rule of 1 (one over)."""
    from envoy.service.ratelimit.v3 import rls_pb2

    service = RateLimitService(
        config.loads(RULES, "rules.yaml"), MemoryStore(clock=ManualClock(ALIGNED)), hooks=stats
    )

    def ask(*entries: tuple[str, str]) -> None:
        service.should_rate_limit(
            rls_pb2.RateLimitRequest(domain="web", descriptors=[desc(*entries)])
        )

    for _ in range(7):
        ask(("api_key", "a"))
    ask(("client_ip", "10.1.2.3"))
    ask(("plan", "free"), ("path", "/x"))
    ask(("plan", "free"), ("path", "/x"))
    stats.config_load(True)


def decided_and_sent(stats: ServiceStats, sink: StatsdSink) -> None:
    """``decided`` with ``sink`` on ``stats``, two calls answered in 2.1 and 14.9 ms, then one
    flush and one send."""
    stats.sinks.append(sink)
    decided(stats)
    for seconds in (0.0021, 0.0149):
        stats.request(seconds)
    stats.flush()
    asyncio.run(sink.send())


def test_upstream_names_values_and_tags_over_udp() -> None:
    """Every per-key counter under upstream's name (zeros not sent), the tags appended as
    upstream's statsd library writes them, IPv4 dots and ':' cleaned, the service counters
    and one timer line per call; datagrams of at most 1,432 bytes, lines never split."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind((HOST, 0))
        listener.settimeout(5)
        port = listener.getsockname()[1]
        stats = ServiceStats(clock=ManualClock(ALIGNED))
        sink = StatsdSink("udp", HOST, port, tags=parse_tags("env:prod,zone:eu.west-1"))
        decided_and_sent(stats, sink)
        payload = b""
        while not payload.endswith(b"|ms\n") or payload.count(b"|ms\n") < 2:
            datagram = listener.recv(65536)
            assert len(datagram) <= 1432
            payload += datagram
    tags = ".__env=prod.__zone=eu_west-1"
    got = counters(payload)
    assert got == {
        f"{P}web.api_key.total_hits{tags}": 7,
        f"{P}web.api_key.within_limit{tags}": 5,
        f"{P}web.api_key.over_limit{tags}": 2,
        f"{P}web.api_key.near_limit{tags}": 1,
        f"{P}web.client_ip_10_1_2_3.total_hits{tags}": 1,
        f"{P}web.client_ip_10_1_2_3.within_limit{tags}": 1,
        f"{P}web.plan_free.path.total_hits{tags}": 2,
        f"{P}web.plan_free.path.within_limit{tags}": 1,
        f"{P}web.plan_free.path.over_limit{tags}": 1,
        f"{P}web.plan_free.path.near_limit{tags}": 1,
        f"ratelimit.service.config_load_success{tags}": 1,
        f"ratelimit_server.ShouldRateLimit.total_requests{tags}": 2,
    }
    assert lines_of(payload)[f"ratelimit_server.ShouldRateLimit.response_time{tags}"] == [
        "2|ms",
        "14|ms",
    ]
    # Sent once: the next send has nothing new.
    assert sink.lines() == []


def test_prometheus_has_the_same_counts_under_upstreams_labels() -> None:
    """/metrics counts what StatsD gets, with key1 and key2 as upstream's statsd mapping
    gives them (key2 empty, so absent, for a one-part key) beside ratewarden's key."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    decided(stats)
    body, _ = stats.exposition()
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "ratelimit_service_rate_limit_total_hits_total":
                labels = sample.labels
                found[(labels["key"], labels["key1"], labels.get("key2", ""))] = sample.value
    assert found == {
        ("api_key", "api_key", ""): 7,
        ("client_ip_10.1.2.3", "client_ip_10_1_2_3", ""): 1,
        ("plan_free.path", "plan_free", "path"): 2,
    }


def test_stat_names_are_cleaned_as_upstream_cleans_them() -> None:
    """':' and '|' become '_', and so do the dots of an IPv4 address, not other dots."""
    assert stats_name("web.ip_10.0.0.1:80|x.path_/a.b") == "web.ip_10_0_0_1_80_x.path_/a.b"
    assert upstream_keys("a.b.c.d") == ("a", "b")
    assert upstream_keys("remote_address_192.168.0.1") == ("remote_address_192_168_0_1", "")


def test_addresses_and_tags_are_checked() -> None:
    """HOST:PORT is TCP (upstream's sink); a scheme other than tcp or udp, a missing port
    and a tag without a value's colon are refused, naming what is wrong."""
    assert parse_address("stats:8125") == ("tcp", "stats", 8125)
    assert parse_address("udp://[::1]:9125") == ("udp", "::1", 9125)
    for bad in ("http://stats:8125", "stats", "tcp://:8125", "tcp://stats:99999"):
        with pytest.raises(ConfigurationError):
            parse_address(bad)
    assert parse_tags(" b:2 , a:1,,empty:") == (("a", "1"), ("b", "2"))
    with pytest.raises(ConfigurationError, match="'novalue' is not NAME:VALUE"):
        parse_tags("a:1,novalue")


def test_tcp_sends_reconnect_and_a_down_server_drops_one_interval_only() -> None:
    """Over TCP the sink keeps one connection; when the server is gone the interval's lines
    are dropped (no exception, a warning), and the next interval reaches the new server."""

    async def scenario() -> None:
        received: list[bytes] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(65536):
                received.append(data)
            writer.close()

        server = await asyncio.start_server(handle, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        sink = StatsdSink("tcp", HOST, port)
        sink.count("ratelimit.service.config_load_success")
        await sink.send()
        await _until(lambda: b"config_load_success:1|c\n" in b"".join(received))
        server.close()
        await server.wait_closed()
        await sink._close_tcp()  # the server went away with the connection
        sink.count("ratelimit.service.config_load_error")
        await sink.send()
        assert sink.dropped == 1
        server = await asyncio.start_server(handle, HOST, port)
        sink.count("ratelimit.service.config_load_success", 3)
        await sink.send()
        await _until(lambda: b"config_load_success:3|c\n" in b"".join(received))
        assert b"config_load_error" not in b"".join(received)
        await sink.close()
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())


async def _until(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@pytest.fixture
def tcp_listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP StatsD stand-in on loopback: its port and the bytes received so far."""
    received: list[bytes] = []
    server = socket.socket()
    server.bind((HOST, 0))
    server.listen()
    server.settimeout(0.2)
    stop = False

    def serve() -> None:
        while not stop:
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(0.2)
                while not stop:
                    try:
                        data = connection.recv(65536)
                    except TimeoutError:
                        continue
                    if not data:
                        break
                    received.append(data)

    import threading

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        stop = True
        thread.join(5)
        server.close()


def test_serve_with_upstreams_statsd_settings_sends_upstreams_stats(
    tmp_path: Path, tcp_listener: tuple[int, list[bytes]]
) -> None:
    """USE_STATSD, STATSD_HOST, STATSD_PORT, EXTRA_TAGS and STATS_FLUSH_INTERVAL alone (no
    RATEWARDEN_* setting): the process sends the per-key counts of its decisions over TCP."""
    port, received = tcp_listener
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "web.yaml").write_text(RULES)
    http = free_port()
    environ = dict(
        RUNTIME_ROOT=str(tmp_path),
        PORT=str(http),
        GRPC_PORT=str(free_port()),
        USE_STATSD="true",
        STATSD_HOST=HOST,
        STATSD_PORT=str(port),
        EXTRA_TAGS="env:test",
        STATS_FLUSH_INTERVAL="200ms",
    )
    with upstream_serve(environ, http) as log_path:
        body = {"domain": "web", "descriptors": [{"entries": [{"key": "api_key", "value": "s"}]}]}
        statuses = [post_json(http, body) for _ in range(6)]
        assert statuses == [200] * 5 + [429]
        name = f"{P}web.api_key.total_hits.__env=test"
        deadline = time.monotonic() + 10
        while counters(b"".join(received)).get(name, 0) < 6:
            assert time.monotonic() < deadline, (b"".join(received), log_path.read_text())
            time.sleep(0.05)
        got = counters(b"".join(received))
        assert got[name] == 6
        assert got[f"{P}web.api_key.over_limit.__env=test"] == 1
        assert got["ratelimit.service.config_load_success.__env=test"] == 1
