"""A grpcio client that plays Envoy on StreamRateLimitQuotas, for the RLQS transport tests:
``Stream`` (send reports, read assignments), ``report``, ``assignment`` (a response as a dict),
``until`` (poll a condition) and the rules they share. The ``streams`` fixture (conftest)
closes the streams a test opened."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc
from envoy.type.v3 import ratelimit_strategy_pb2

from tests.server_transport.conftest import channel

RULES = """\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 6, burst: 4}
  - key: open
    rate_limit: {unlimited: true}
"""
Strategy = ratelimit_strategy_pb2.RateLimitStrategy
#: Seconds a test waits for one message on the stream before it fails.
WAIT = 5.0


def report(domain: str, *usages: tuple[dict[str, str], int, int]) -> Any:
    reports = rlqs_pb2.RateLimitQuotaUsageReports(domain=domain)
    for bucket, allowed, denied in usages:
        usage = reports.bucket_quota_usages.add()
        usage.bucket_id.bucket.update(bucket)
        usage.num_requests_allowed = allowed
        usage.num_requests_denied = denied
    return reports


class Stream:
    """One open StreamRateLimitQuotas call: ``send`` reports, ``next`` the next response."""

    def __init__(self, port: int) -> None:
        self.channel = channel(port)
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(self.channel)
        self.call = stub.StreamRateLimitQuotas(self._requests())

    async def _requests(self) -> AsyncIterator[Any]:
        while (message := await self.outbox.get()) is not None:
            yield message

    def send(self, message: Any) -> None:
        self.outbox.put_nowait(message)

    async def next(self) -> Any:
        return await asyncio.wait_for(self.call.read(), WAIT)

    async def close(self) -> None:
        self.outbox.put_nowait(None)
        self.call.cancel()
        await self.channel.close()


async def until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` every 10 ms until it holds; fail after ``WAIT`` seconds."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


def assignment(response: Any) -> dict[str, Any]:
    """The one bucket action of ``response`` as a dict: bucket, kind, and its numbers."""
    assert len(response.bucket_action) == 1
    action = response.bucket_action[0]
    out: dict[str, Any] = {"bucket": dict(action.bucket_id.bucket)}
    if action.HasField("abandon_action"):
        return {**out, "abandon": True}
    quota = action.quota_assignment_action
    out["ttl"] = quota.assignment_time_to_live.seconds
    strategy = quota.rate_limit_strategy
    if strategy.HasField("token_bucket"):
        bucket = strategy.token_bucket
        out["token_bucket"] = (
            bucket.max_tokens,
            bucket.tokens_per_fill.value,
            bucket.fill_interval.seconds,
        )
    else:
        out["blanket"] = Strategy.BlanketRule.Name(strategy.blanket_rule)
    return out
