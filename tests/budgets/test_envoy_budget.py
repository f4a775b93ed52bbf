"""Token budgets through a real Envoy: checked on the request, charged when the stream is done.

Envoy's rate limit filter asks ratewarden twice per request with the same
descriptor: with ``hits_addend: {number: 0}`` before routing, and with
``apply_on_stream_done: true`` and the upstream's ``x-tokens-used`` header as
hits afterwards. The budget service runs in this process behind ratewarden's
gRPC server, on an AsyncMemoryStore with a ManualClock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from string import Template
from typing import Any

import pytest

from ratewarden import AsyncMemoryStore
from ratewarden.server.budget_service import BudgetRateLimitService
from ratewarden.testing import ManualClock
from tests._servers import HOST
from tests.budgets._model import TokenModel, token_model
from tests.e2e._envoy import ENVOY, SKIP_REASON, Envoy, envoy_on

pytestmark = [
    pytest.mark.envoy,
    pytest.mark.skipif(ENVOY is None, reason=SKIP_REASON),
]

#: Envoy -> model, with the rate limit filter asking the budget service; ``$names`` to fill.
BOOTSTRAP = Template((Path(__file__).parent / "envoy_budget.yaml.template").read_text())


class _Service:
    """The budget service behind ratewarden's gRPC server, on its own event loop thread."""

    def __init__(self, clock: ManualClock) -> None:
        from ratewarden.server.grpc import GrpcServer

        self.budget_service = BudgetRateLimitService(
            AsyncMemoryStore(clock=clock), domain="llm", descriptor_key="tenant", rate="1000/minute"
        )
        self.requests: list[Any] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0

        async def answer(request: Any) -> Any:
            self.requests.append(request)
            return await self.budget_service(request)

        async def main() -> None:
            self.server = GrpcServer(answer)
            self.port = await self.server.start(HOST, 0)
            await self.server.set_serving(True)
            self.stopping = asyncio.Event()
            self.ready.set()
            await self.stopping.wait()
            await self.server.stop(0.5)

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(main(),))
        self.thread.start()
        assert self.ready.wait(10)

    def remaining(self, tenant: str) -> int:
        budget = self.budget_service.budget
        future = asyncio.run_coroutine_threadsafe(budget.peek(f"tenant={tenant}"), self.loop)
        return int(future.result(5).axes[0].remaining)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def stack() -> Iterator[tuple[Envoy, _Service, ManualClock]]:
    clock = ManualClock()
    service = _Service(clock)
    try:
        with (
            token_model() as model,
            envoy_on(BOOTSTRAP, backend=model, ratelimit=service.port) as envoy,
        ):
            yield envoy, service, clock
    finally:
        service.stop()


def _wait_for(check: Any, timeout: float = 5.0) -> bool:
    """Poll ``check()`` until true; the stream-done call reaches ratewarden after the reply."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return bool(check())


def test_envoy_checks_on_request_and_charges_actual_tokens_on_stream_done(
    stack: tuple[Envoy, _Service, ManualClock],
) -> None:
    """1,000 tokens/min: 600 used, then 600 more (charged to empty), then 429 until time passes."""
    envoy, service, clock = stack
    tenant = {"x-tenant": "acme"}
    assert envoy.get("/?tokens=600", tenant)[0] == 200
    assert _wait_for(lambda: service.remaining("acme") == 400)
    assert envoy.get("/?tokens=600", tenant)[0] == 200  # 400 left: admitted, then overruns
    assert _wait_for(lambda: service.remaining("acme") == 0)
    calls = TokenModel.calls
    status, headers = envoy.get("/?tokens=5", tenant)
    assert status == 429 and headers.get("x-envoy-ratelimited") == "true"
    assert TokenModel.calls == calls  # refused before the model was called
    assert envoy.get("/?tokens=5", {"x-tenant": "other"})[0] == 200  # another tenant's budget
    clock.advance(30)  # half a minute gives 500 tokens back
    assert service.remaining("acme") == 500
    assert envoy.get("/?tokens=100", tenant)[0] == 200
    assert _wait_for(lambda: service.remaining("acme") == 400)
    checks = [r for r in service.requests if r.descriptors[0].HasField("hits_addend")]
    assert {r.descriptors[0].hits_addend.value for r in checks} >= {0, 600, 100}
    stats = envoy.stats("cluster.backend.ratelimit.")
    assert stats.get("cluster.backend.ratelimit.error", 0) == 0
    assert stats.get("cluster.backend.ratelimit.over_limit", 0) == 1
