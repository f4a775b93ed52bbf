"""A real `RateLimitServer` on loopback (ephemeral ports), and clients for its two transports.

test_cli.py runs ``main(["serve", ...])`` in this process, which configures serve's loggers;
``serve_logging_untouched`` (tests/_serve_logging.py) starts every test here from them
untouched and puts them back after.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import Settings
from ratewarden.storage import AsyncStore
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests._serve_logging import serve_logging_untouched  # noqa: F401  (autouse)
from tests.server_transport._process import ServeProcess, serving

if TYPE_CHECKING:
    from tests.server_transport._rlqs import Stream

HOST = "127.0.0.1"

#: api_key counts per hour: a served process (or a server on a store URL) decides on the
#: system clock or Redis TIME, and a minute's epoch-aligned end among the calls a test counts
#: would start a new window (shown with the end forced between the calls).
RULES = """\
domain: transport
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: open
"""

Response = rls_pb2.RateLimitResponse
OK = Response.OK
OVER_LIMIT = Response.OVER_LIMIT


def request(domain: str, *descriptors: dict[str, str]) -> Any:
    """A RateLimitRequest with one descriptor per dict (its items are the entries, in order)."""
    return rls_pb2.RateLimitRequest(
        domain=domain,
        descriptors=[
            ratelimit_pb2.RateLimitDescriptor(
                entries=[
                    ratelimit_pb2.RateLimitDescriptor.Entry(key=key, value=value)
                    for key, value in entries.items()
                ]
            )
            for entries in descriptors
        ],
    )


def channel(port: int) -> grpc.aio.Channel:
    """An insecure gRPC channel to the server's port on loopback."""
    return grpc.aio.insecure_channel(f"{HOST}:{port}")


def rules_file(directory: Path, text: str = RULES) -> Path:
    """``text`` written to ``directory``/rules.yaml, for ``ratewarden serve --config``."""
    path = directory / "rules.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    """``RULES`` in a file."""
    return rules_file(tmp_path)


@pytest.fixture
def served(rules: Path) -> Iterator[ServeProcess]:
    """``ratewarden serve --config rules`` as a process, serving; stopped after the test."""
    with serving(rules) as server:
        yield server


class PingStore(AsyncMemoryStore):
    """A memory store whose ping answers what the test says (a store that went away)."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock())
        self.alive = False

    async def ping(self) -> bool:
        return self.alive


StartServer = Callable[..., Awaitable[RateLimitServer]]


@pytest.fixture
async def start_server(tmp_path: Path) -> AsyncIterator[StartServer]:
    """``await start_server(rules=RULES, store=None, **settings)``: a started server, stopped after.

    Ports are 0 (the kernel picks free ones), hot reload polling is off (tests call
    ``server.watcher.check_once()``), and the store is a memory store on a
    ManualClock unless the test passes one, or a ``store_url`` the server opens
    itself as ``ratewarden serve --store`` does.
    """
    servers: list[RateLimitServer] = []

    async def start(
        rules: str = RULES, *, store: AsyncStore | None = None, **options: Any
    ) -> RateLimitServer:
        path = tmp_path / f"rules-{len(servers)}.yaml"
        path.write_text(rules)
        options = {"grpc_port": 0, "http_port": 0, "reload_interval": 0, **options}
        settings = Settings(config_paths=(str(path),), **options)
        if store is None and "store_url" not in options:
            store = AsyncMemoryStore(clock=ManualClock())
        server = RateLimitServer(settings, store=store)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop(0)


@dataclass(frozen=True, slots=True)
class HttpReply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def http(
    port: int, method: str, target: str, body: bytes | None = None, headers: str = ""
) -> HttpReply:
    """One HTTP/1.1 request on a fresh connection (``Connection: close``)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        payload = body or b""
        head = f"{method} {target} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n{headers}"
        if body is not None:
            head += f"Content-Length: {len(payload)}\r\n"
        writer.write(head.encode() + b"\r\n" + payload)
        await writer.drain()
        return parse_reply(await reader.read())
    finally:
        writer.close()


def parse_reply(raw: bytes) -> HttpReply:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return HttpReply(int(lines[0].split(" ")[1]), headers, body)


@pytest.fixture
async def streams() -> AsyncIterator[list[Stream]]:
    """The RLQS streams a test opens (``tests.server_transport._rlqs.Stream``), closed after it."""
    opened: list[Stream] = []
    yield opened
    for stream in opened:
        await stream.close()
