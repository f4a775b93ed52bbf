"""A real ``RateLimitServer`` in a background thread, for sync hypothesis tests over gRPC.

Hypothesis drives sync test functions; the server runs on its own event loop in
a thread, so a blocking gRPC client can call it on loopback.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import Settings
from ratewarden.storage import AsyncStore

HOST = "127.0.0.1"
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


class BackgroundServer:
    """``RateLimitServer`` started on an event loop in a daemon thread; ``stop`` joins it."""

    def __init__(self, settings: Settings, store: AsyncStore | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: RateLimitServer = self.run(self._start(settings, store))

    async def _start(self, settings: Settings, store: AsyncStore | None) -> RateLimitServer:
        server = RateLimitServer(settings, store=store)
        await server.start()
        return server

    def run(self, coroutine: Any, timeout: float = 30.0) -> Any:
        """Run ``coroutine`` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    @property
    def port(self) -> int:
        return self.server.grpc_port

    def stop(self) -> None:
        self.run(self.server.stop(0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@contextmanager
def background_server(
    tmp: Path, rules: str, store: AsyncStore | None = None, **options: Any
) -> Iterator[BackgroundServer]:
    """A started server on ephemeral loopback ports with ``rules``; stopped on exit."""
    path = tmp / "rules.yaml"
    path.write_text(rules)
    settings = Settings(
        config_paths=(str(path),), grpc_port=0, http_port=0, reload_interval=0, **options
    )
    server = BackgroundServer(settings, store)
    try:
        yield server
    finally:
        server.stop()
