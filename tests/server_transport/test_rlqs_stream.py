"""StreamRateLimitQuotas on a real RateLimitServer over loopback, driven by a grpcio client.

The server runs with ``rlqs=True`` (grpcio transport); the client plays Envoy: it opens
the stream, sends usage reports and reads the assignments. The shares' arithmetic is
tested on its own in tests/rlqs; here: the wire, the settings, reload and bad reports.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.errors import ConfigurationError
from ratewarden.server.settings import Settings
from tests.server_transport._rlqs import RULES, WAIT, Stream, assignment, report, until
from tests.server_transport.conftest import OK, StartServer, channel, http, request


async def test_the_first_report_of_a_bucket_gets_its_token_bucket_at_once(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """One Envoy alone holds the whole rule: 6 tokens a minute, 4 at once, for --rlqs-ttl."""
    server = await start_server(RULES, rlqs=True, rlqs_ttl=7)
    assert server.transport == "grpcio"
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(report("edge", ({"tenant": "a"}, 1, 0)))
    got = assignment(await stream.next())
    assert got == {"bucket": {"tenant": "a"}, "ttl": 7, "token_bucket": (4, 6, 60)}


async def test_a_bucket_without_a_rule_and_an_unlimited_one_are_allowed_all(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """No rule (unknown key, unknown domain) or an unlimited one: ALLOW_ALL, as the RLS says OK."""
    server = await start_server(RULES, rlqs=True)
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(report("edge", ({"nobody": "x"}, 1, 0)))
    assert assignment(await stream.next())["blanket"] == "ALLOW_ALL"
    stream.send(report("", ({"open": "y"}, 1, 0)))  # later reports may leave the domain out
    assert assignment(await stream.next())["blanket"] == "ALLOW_ALL"
    other = Stream(server.grpc_port)
    streams.append(other)
    other.send(report("elsewhere", ({"tenant": "a"}, 1, 0)))
    assert assignment(await other.next())["blanket"] == "ALLOW_ALL"
    assert server.quota is not None and server.quota.quota.stats.unknown_buckets == 2


async def test_two_envoys_share_the_limit_after_the_next_round(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """The second Envoy waits for the next round; then both hold parts that add up to 6."""
    server = await start_server(RULES, rlqs=True, rlqs_interval=0.2, rlqs_ttl=2)
    first, second = Stream(server.grpc_port), Stream(server.grpc_port)
    streams += [first, second]
    first.send(report("edge", ({"tenant": "a"}, 3, 0)))
    assert assignment(await first.next())["token_bucket"] == (4, 6, 60)
    second.send(report("edge", ({"tenant": "a"}, 3, 0)))
    one, two = assignment(await first.next()), assignment(await second.next())
    assert one["token_bucket"][1] + two["token_bucket"][1] == 6
    assert one["token_bucket"][0] + two["token_bucket"][0] == 4


async def test_rlqs_json_shows_streams_and_assignments_and_is_404_when_off(
    start_server: StartServer, streams: list[Stream]
) -> None:
    server = await start_server(RULES, rlqs=True)
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(report("edge", ({"tenant": "a"}, 2, 1)))
    await stream.next()
    state = (await http(server.http_port, "GET", "/rlqs.json")).json()
    assert state["streams"] == 1 and state["buckets"] == 1
    assert state["stats"]["reports"] == 1
    assert state["assignments"] == [
        {
            "domain": "edge",
            "bucket": {"tenant": "a"},
            "rule": "edge.tenant",
            "stream": 1,
            "peer": "",
            "assignment": {"tokens_per_fill": 6, "max_tokens": 4},
        }
    ]
    off = await start_server(RULES)
    reply = await http(off.http_port, "GET", "/rlqs.json")
    assert reply.status == 404 and b"--rlqs" in reply.body


async def test_metrics_count_reports_by_rule_and_show_what_is_assigned(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """/metrics: reported requests by rule and outcome, streams and tokens assigned per rule;
    a bucket without a rule is counted under rule="none", never under its values."""
    server = await start_server(RULES, rlqs=True)
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(report("edge", ({"tenant": "a"}, 2, 1), ({"who": "secret-value"}, 5, 0)))
    await stream.next()
    text = (await http(server.http_port, "GET", "/metrics")).body.decode()
    expected = [
        'ratewarden_rlqs_reported_requests_total{outcome="allowed",rule="edge.tenant"} 2.0',
        'ratewarden_rlqs_reported_requests_total{outcome="denied",rule="edge.tenant"} 1.0',
        'ratewarden_rlqs_reported_requests_total{outcome="allowed",rule="none"} 5.0',
        'ratewarden_rlqs_assigned_streams{rule="edge.tenant"} 1.0',
        'ratewarden_rlqs_assigned_tokens_per_fill{rule="edge.tenant"} 6.0',
        "ratewarden_rlqs_streams 1.0",
        "ratewarden_rlqs_buckets 2.0",
        "ratewarden_rlqs_reports_total 1.0",
        "ratewarden_rlqs_unknown_buckets_total 1.0",
    ]
    assert [line for line in expected if line not in text.splitlines()] == []
    assert "secret-value" not in text


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (report("", ({"tenant": "a"}, 1, 0)), "domain is empty"),
        (report("edge", ({}, 1, 0)), "empty bucket_id"),
        (report("edge", ({"tenant": ""}, 1, 0)), "empty key or value"),
        (report("edge", ({"tenant": "a"}, 10**13, 0)), "requests in one report"),
    ],
    ids=["no-domain", "empty-bucket", "empty-value", "huge-count"],
)
async def test_a_bad_report_ends_its_stream_with_invalid_argument_and_changes_nothing(
    start_server: StartServer, streams: list[Stream], message: Any, reason: str
) -> None:
    server = await start_server(RULES, rlqs=True)
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(message)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stream.next()
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in (raised.value.details() or "")
    assert server.quota is not None
    quota = server.quota.quota
    assert quota.buckets == 0
    # the client may see the status before the handler's cleanup has run: wait for it
    await until(lambda: quota.streams == 0)


async def test_a_failure_inside_the_service_ends_the_stream_with_internal_and_no_trace(
    start_server: StartServer, streams: list[Stream], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug while taking a report (injected here) is logged; Envoy gets INTERNAL and a short
    message, not the exception; other streams keep working."""
    server = await start_server(RULES, rlqs=True)
    assert server.quota is not None
    quota = server.quota.quota
    healthy = Stream(server.grpc_port)
    streams.append(healthy)
    healthy.send(report("edge", ({"tenant": "a"}, 1, 0)))
    await healthy.next()

    def broken(*args: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(quota, "_apply_flow", broken)  # where a report is applied
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(report("edge", ({"tenant": "b"}, 1, 0)))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stream.next()
    assert raised.value.code() == grpc.StatusCode.INTERNAL
    assert raised.value.details() == "the quota service failed; see its log"
    monkeypatch.undo()
    healthy.send(report("edge", ({"tenant": "c"}, 1, 0)))
    assert assignment(await healthy.next())["bucket"] == {"tenant": "c"}


async def test_bytes_that_are_not_a_report_end_the_stream_with_invalid_argument(
    start_server: StartServer,
) -> None:
    server = await start_server(RULES, rlqs=True)
    async with channel(server.grpc_port) as chan:
        call = chan.stream_stream(
            "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"
        )(iter([b"\xff\xff\xff"]))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await asyncio.wait_for(call.read(), WAIT)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a RateLimitQuotaUsageReports" in (raised.value.details() or "")


async def test_a_rule_removed_on_reload_abandons_its_buckets(
    start_server: StartServer, streams: list[Stream]
) -> None:
    server = await start_server(RULES, rlqs=True)
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(report("edge", ({"tenant": "a"}, 1, 0)))
    assert "token_bucket" in assignment(await stream.next())
    path = server.settings.config_paths[0]
    with open(path, "w") as rules:
        rules.write("domain: edge\ndescriptors:\n  - key: open\n")
    assert server.watcher.check_once()
    assert assignment(await stream.next()) == {"bucket": {"tenant": "a"}, "abandon": True}


async def test_a_period_changed_on_reload_changes_what_envoy_compares(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """Envoy keeps the bucket it holds when the new one has the same max_tokens,
    tokens_per_fill and fill_interval nanoseconds (it does not compare the seconds): 6 a
    minute become 6 an hour, and the bucket sent differs in those fields too, while Envoy's
    whole-second reading of the interval is the new period exactly."""
    server = await start_server(RULES, rlqs=True, rlqs_interval=0.2, rlqs_ttl=2)
    stream = Stream(server.grpc_port)
    streams.append(stream)

    def compared(response: Any) -> tuple[int, int, int, int]:
        bucket = response.bucket_action[0].quota_assignment_action.rate_limit_strategy
        tb = bucket.token_bucket
        return (
            tb.max_tokens,
            tb.tokens_per_fill.value,
            tb.fill_interval.nanos,
            tb.fill_interval.seconds,
        )

    stream.send(report("edge", ({"tenant": "a"}, 1, 0)))
    before = compared(await stream.next())
    assert before[::3] == (4, 60)
    path = server.settings.config_paths[0]
    with open(path) as rules:
        text = rules.read()
    with open(path, "w") as rules:
        rules.write(text.replace("unit: minute", "unit: hour"))
    assert server.watcher.check_once()
    after = before
    for _ in range(10):  # the rounds are 0.2 s apart: the new period comes in the next few
        stream.send(report("edge", ({"tenant": "a"}, 1, 0)))
        after = compared(await stream.next())
        if after[3] == 3600:
            break
    assert after[3] == 3600
    assert after[:2] == before[:2]
    assert after[:3] != before[:3]


async def test_the_rate_limit_service_answers_beside_the_quota_service(
    start_server: StartServer,
) -> None:
    """--rlqs changes nothing of ShouldRateLimit on the same port."""
    server = await start_server(RULES, rlqs=True)
    async with channel(server.grpc_port) as chan:
        reply = await rls_pb2_grpc.RateLimitServiceStub(chan).ShouldRateLimit(
            request("edge", {"open": "x"})
        )
    assert reply.overall_code == OK


def test_rlqs_with_the_native_transport_is_refused_naming_the_way_out() -> None:
    with pytest.raises(ConfigurationError, match="--transport grpcio") as raised:
        Settings(config_paths=("r",), rlqs=True, transport="native")
    assert "bidirectional stream" in str(raised.value)


def test_rlqs_with_several_workers_needs_a_shared_store_and_a_ttl_above_the_interval() -> None:
    """Workers over Redis share the shares through the store; on the memory store each
    worker would keep its own, and that is refused as for every limit."""
    Settings(config_paths=("r",), rlqs=True, workers=2, store_url="redis://h:6379/0")
    with pytest.raises(ConfigurationError, match="memory store would each keep their own"):
        Settings(config_paths=("r",), rlqs=True, workers=2)
    with pytest.raises(ConfigurationError, match="--rlqs-ttl 2 must be above --rlqs-interval 2"):
        Settings(config_paths=("r",), rlqs=True, rlqs_interval=2, rlqs_ttl=2)


def test_transport_auto_picks_grpcio_when_rlqs_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from ratewarden.server import settings as settings_module

    monkeypatch.setattr(settings_module, "native_installed", lambda: True)
    assert Settings(config_paths=("r",)).grpc_transport == "native"
    assert Settings(config_paths=("r",), rlqs=True).grpc_transport == "grpcio"
