"""Two RateLimitServers with ``--rlqs`` over one real redis-server: one budget, shared.

Each server is a replica with its own streams; a bucket's shares go through the store
(``Fleet``, the ``quota_shares`` script, Redis ``TIME`` as the clock). A grpcio client
plays each Envoy. What is checked here is the wire and the composition: the arithmetic
and its bound are tested in tests/rlqs/test_fleet.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests._servers import RedisServer
from tests.server_transport._rlqs import RULES, Stream, assignment, report
from tests.server_transport.conftest import StartServer, http

pytestmark = pytest.mark.redis

#: Messages a stream may take (one a round, rounds every 0.2 s) before the test fails.
MOST_MESSAGES = 40


async def test_two_replicas_split_one_limit_and_never_hand_out_more_than_it(
    start_server: StartServer,
    streams: list[Stream],
    redis_server: RedisServer,
    redis_client: redis.Redis,
) -> None:
    """The first Envoy, alone, holds the whole rule (6 a minute, 4 at once). A second Envoy on
    the other replica gets DENY_ALL while the first holds it all, then each replica's next
    round moves both to half (3 a minute, 2 at once); the two never hold more than 6."""
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    options: dict[str, Any] = {"rlqs": True, "rlqs_interval": 0.2, "rlqs_ttl": 2}
    one = await start_server(RULES, store_url=url, store_timeout=1.0, **options)
    two = await start_server(RULES, store_url=url, store_timeout=1.0, **options)
    first, second = Stream(one.grpc_port), Stream(two.grpc_port)
    streams += [first, second]
    first.send(report("edge", ({"tenant": "a"}, 6, 0)))
    assert assignment(await first.next())["token_bucket"] == (4, 6, 60)
    second.send(report("edge", ({"tenant": "a"}, 6, 0)))
    assert assignment(await second.next())["blanket"] == "DENY_ALL"
    held = {"first": (4, 6, 60), "second": (0, 0, 60)}
    for _ in range(MOST_MESSAGES):
        for name, stream in (("first", first), ("second", second)):
            got = assignment(await stream.next())
            held[name] = got.get("token_bucket", (0, 0, 60))
            assert held["first"][1] + held["second"][1] <= 6, held
            assert held["first"][0] + held["second"][0] <= 4, held
        if held == {"first": (2, 3, 60), "second": (2, 3, 60)}:
            break
    assert held == {"first": (2, 3, 60), "second": (2, 3, 60)}
    fields = redis_client.hgetall("rw:{" + '["edge", [["tenant", "a"]]]' + "}:rlqs:shares")
    names = [
        (await http(server.http_port, "GET", "/rlqs.json")).json()["replica"]
        for server in (one, two)
    ]
    assert sorted(name.decode() for name in fields) == sorted(f"{name}:1" for name in names)
