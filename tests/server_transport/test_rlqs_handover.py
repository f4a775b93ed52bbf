"""The graceful stop of ``--rlqs`` on real RateLimitServers, a grpcio client as each Envoy.

On ``stop`` (SIGTERM), before the streams end, each is sent its assignments again with a
time to live of 0 (Envoy expires them at once: its ``expired_assignment_behavior``), then
the stream ends with OK; with several replicas over one redis-server, the stopped one's
shares are released in the store, so the other replica's next round hands out the whole
limit instead of waiting for the share's TTL. The pure part is tests/rlqs/test_handover.py.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from envoy.service.rate_limit_quota.v3 import rlqs_pb2

from tests._servers import RedisServer
from tests.server_transport._rlqs import RULES, Stream, assignment, report
from tests.server_transport.conftest import StartServer

#: Messages a stream may take (one a round, rounds every 0.2 s) before the test fails:
#: 8 s, far under the 30 s an unreleased share stays held.
MOST_MESSAGES = 40


async def test_a_graceful_stop_sends_each_assignment_again_with_a_ttl_of_0_then_ends(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """The token bucket it holds and the ALLOW_ALL of an unlimited rule, each with TTL 0, then
    the stream ends with OK; the log says how many streams were handed over."""
    server = await start_server(RULES, rlqs=True, rlqs_ttl=30)
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(report("edge", ({"tenant": "a"}, 1, 0)))
    assert assignment(await stream.next())["token_bucket"] == (4, 6, 60)
    stream.send(report("edge", ({"open": "x"}, 1, 0)))
    assert assignment(await stream.next())["blanket"] == "ALLOW_ALL"
    await server.stop(grace=5)
    last = await stream.next()
    got = sorted((assignment_of(action) for action in last.bucket_action), key=str)
    assert got == [
        {"bucket": {"open": "x"}, "ttl": 0, "blanket": "ALLOW_ALL"},
        {"bucket": {"tenant": "a"}, "ttl": 0, "token_bucket": (4, 6, 60)},
    ]
    assert last.bucket_action[0].quota_assignment_action.HasField("assignment_time_to_live")
    assert await stream.next() is grpc.aio.EOF
    assert await stream.call.code() == grpc.StatusCode.OK


def assignment_of(action: Any) -> dict[str, Any]:
    """``assignment`` of one bucket action."""
    return assignment(rlqs_pb2.RateLimitQuotaResponse(bucket_action=[action]))


@pytest.mark.redis
async def test_the_stopped_replicas_share_goes_to_the_other_replica_at_its_next_round(
    start_server: StartServer, streams: list[Stream], redis_server: RedisServer
) -> None:
    """Two replicas split 6 a minute (3 and 3); the second stops gracefully: its Envoy is told
    to expire its share, and the first replica's Envoy holds all 6 within a few rounds, where
    the share would have stayed held for --rlqs-ttl (30 s) and an interval without the
    release."""
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    options: dict[str, Any] = {"rlqs": True, "rlqs_interval": 0.2, "rlqs_ttl": 30}
    one = await start_server(RULES, store_url=url, store_timeout=1.0, **options)
    two = await start_server(RULES, store_url=url, store_timeout=1.0, **options)
    first, second = Stream(one.grpc_port), Stream(two.grpc_port)
    streams += [first, second]
    first.send(report("edge", ({"tenant": "a"}, 6, 0)))
    await first.next()
    second.send(report("edge", ({"tenant": "a"}, 6, 0)))
    held = {"first": (4, 6, 60), "second": (0, 0, 60)}
    for _ in range(MOST_MESSAGES):
        for name, stream in (("first", first), ("second", second)):
            held[name] = assignment(await stream.next()).get("token_bucket", (0, 0, 60))
        if held == {"first": (2, 3, 60), "second": (2, 3, 60)}:
            break
    assert held == {"first": (2, 3, 60), "second": (2, 3, 60)}
    await two.stop(grace=5)
    while (message := await second.next()) is not grpc.aio.EOF:
        last = assignment(message)
    assert last == {"bucket": {"tenant": "a"}, "ttl": 0, "token_bucket": (2, 3, 60)}
    first.send(report("edge", ({"tenant": "a"}, 6, 0)))
    for _ in range(MOST_MESSAGES):
        if assignment(await first.next()).get("token_bucket") == (4, 6, 60):
            break
    else:
        raise AssertionError("the released share never reached the other replica")
