"""The rate limit service (``RateLimitServer``, over real gRPC on loopback) under store faults.

The server's store is an ``AsyncRedisStore`` at the FaultProxy's port. Three
rules differ only in ``failure_mode``. Under each fault every gRPC call answers
within the bound, each rule answers per its failure mode (open: OK, closed:
OVER_LIMIT, local: the in-process bucket), every such answer is counted as
degraded by the service hooks, no call fails as a gRPC error, and once the
fault is removed the answers come from Redis again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.server.config import DescriptorRule
from ratewarden.server.service import DescriptorOutcome, ServiceHooks
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.faults._load import BOUND_S, REPORT, TIMEOUT, Phase
from tests.faults._proxy import Fault, FaultProxy
from tests.server_transport.conftest import OK, OVER_LIMIT, StartServer, channel, request

pytestmark = [pytest.mark.faults, pytest.mark.redis]

RULES = """\
domain: faults
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 1000, failure_mode: open}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 1000, failure_mode: closed}
  - key: local
    rate_limit: {unit: hour, requests_per_unit: 1000, failure_mode: local}
"""
MODES = ("open", "closed", "local")
#: What each failure mode answers while Redis is unreachable.
DEGRADED_CODE = {"open": OK, "closed": OVER_LIMIT, "local": OK}
#: A gRPC round trip on loopback on top of the store's bound.
CALL_BOUND_S = BOUND_S + 0.1
#: How long the service may take to use Redis again once the fault is gone.
RECOVERY_LIMIT_S = 5.0


class Outcomes(ServiceHooks):
    """Every descriptor outcome, in order."""

    def __init__(self) -> None:
        self.seen: list[DescriptorOutcome] = []

    def on_decision(self, domain: str, rule: DescriptorRule, outcome: DescriptorOutcome) -> None:
        self.seen.append(outcome)


async def phase(stub: Any, hooks: Outcomes, test: str, name: str, rounds: int) -> dict[str, Phase]:
    """``rounds`` rounds of one call per rule, all three in flight at once."""
    phases = {mode: Phase(f"{test} {mode}", name) for mode in MODES}
    REPORT.extend(phases.values())
    await play(stub, hooks, test, name, phases, rounds)
    return phases


async def recover(stub: Any, hooks: Outcomes, test: str) -> tuple[dict[str, Phase], float]:
    """Rounds 50 ms apart until every rule has been decided on the store again (a circuit
    breaker may hold the failure mode for its cool-down); the phases and the seconds it took."""
    phases = {mode: Phase(f"{test} {mode}", "recovery") for mode in MODES}
    REPORT.extend(phases.values())
    started = time.monotonic()
    while not all(p.decided for p in phases.values()):
        assert time.monotonic() - started < RECOVERY_LIMIT_S, "the service never went back"
        await play(stub, hooks, test, "recovery", phases, 1)
        await asyncio.sleep(0.05)
    return phases, time.monotonic() - started


async def play(
    stub: Any, hooks: Outcomes, test: str, name: str, phases: dict[str, Phase], rounds: int
) -> None:
    first = len(hooks.seen)

    async def ask(mode: str) -> None:
        started = time.monotonic()
        reply = await stub.ShouldRateLimit(request("faults", {mode: "tenant"}), timeout=5)
        elapsed = time.monotonic() - started
        assert elapsed < CALL_BOUND_S, f"{test}/{name}: a {mode} call took {elapsed:.3f} s"
        p = phases[mode]
        p.calls += 1
        p.worst_s = max(p.worst_s, elapsed)
        p.allowed += reply.overall_code == OK

    for _ in range(rounds):
        await asyncio.gather(*(ask(mode) for mode in MODES))
    for outcome in hooks.seen[first:]:
        p = phases[outcome.rule.failure_mode]
        if outcome.failure is None:
            p.decided += 1
        else:
            assert outcome.failure == outcome.rule.failure_mode
            p.unavailable += 1


@pytest.mark.parametrize("fault", [Fault.BLACKHOLE, Fault.RESET], ids=lambda f: f.value)
async def test_the_service_answers_by_failure_mode_during_a_fault_and_recovers(
    proxied_redis: tuple[RedisServer, FaultProxy], start_server: StartServer, fault: Fault
) -> None:
    """Bounded gRPC answers per failure mode, each counted degraded, then Redis again."""
    _, proxy = proxied_redis
    test = f"serve {fault.value}"
    store = AsyncRedisStore.from_url(proxy.url, clock=ManualClock(), timeout=TIMEOUT)
    server = await start_server(RULES, store=store)
    hooks = Outcomes()
    server.service.hooks = hooks
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        before = await phase(stub, hooks, test, "before", 20)
        proxy.set_fault(fault)
        during = await phase(stub, hooks, test, "during", 15)
        proxy.set_fault(Fault.NONE)
        recovery, took = await recover(stub, hooks, test)
        after = await phase(stub, hooks, test, "after", 20)
    print(f"\n{test}: every rule decided on Redis again {took:.2f} s after the fault ended")
    for mode in MODES:
        assert before[mode].decided == before[mode].calls == before[mode].allowed == 20
        # Every answer during the fault came from the failure mode, and was counted.
        assert during[mode].unavailable == during[mode].calls == 15
        expected_ok = 15 if DEGRADED_CODE[mode] == OK else 0
        assert during[mode].allowed == expected_ok
        assert recovery[mode].decided >= 1
        # Back on Redis: decided there, and allowed (1000/hour is far away).
        assert after[mode].decided == after[mode].allowed == 20
    assert server.errors == 0, "a call failed outside the failure mode"


async def test_a_malformed_request_under_a_fault_is_still_invalid_argument(
    proxied_redis: tuple[RedisServer, FaultProxy], start_server: StartServer
) -> None:
    """A store fault does not turn a bad request into an answer: INVALID_ARGUMENT, fast."""
    _, proxy = proxied_redis
    store = AsyncRedisStore.from_url(proxy.url, clock=ManualClock(), timeout=TIMEOUT)
    server = await start_server(RULES, store=store)
    proxy.set_fault(Fault.BLACKHOLE)
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ShouldRateLimit(request("faults"), timeout=5)
        assert time.monotonic() - started < CALL_BOUND_S
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert server.errors == 0
