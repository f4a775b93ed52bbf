"""The load side of ``python -m benchmarks --serve``: a gRPC / HTTP load generator and a backend.

``python -m benchmarks._serve_load load`` is a long-lived load generator. It
reads one JSON command per line on stdin and answers one JSON line on stdout
per command, so one process (and its gRPC channels, connected once) serves
every round of a run. A command says what to drive:

- ``{"kind": "grpc", "target": "127.0.0.1:PORT", "domain": ..., "descriptors": N, ...}``:
  ``ShouldRateLimit`` calls, each with ``N`` one-entry descriptors;
- ``{"kind": "http", "port": PORT, ...}``: ``GET /`` over HTTP/1.1 keep-alive
  connections (Envoy's listener).

and how: ``in_flight`` calls outstanding at every moment (one task per call
slot, each sending its next call as soon as the last one answers), warm-up
load until the wall-clock time ``start_at``, then ``seconds`` timed. Every
call that starts inside the timed window is timed with ``perf_counter_ns``
around its own await, and every latency is written (``array('q')`` bytes) to
the command's ``latencies`` file: no sampling. The reply counts calls,
errors and denials (``OVER_LIMIT`` / HTTP 429) and gives the timed span.

Requests are serialized once, up front: a C++ Envoy does not pay Python's
protobuf cost per call, so neither does this generator. They cycle over
``VALUES`` distinct values per descriptor key. ``channels`` separate HTTP/2
connections (a local subchannel pool each) carry the calls round-robin, so
``ratewarden serve --workers 2``, whose workers share the port through
SO_REUSEPORT, gets connections on both workers.

``python -m benchmarks._serve_load backend PORT`` is the trivial upstream for
Envoy: an asyncio protocol answering every request ``200 ok``, keep-alive.
``python -m benchmarks._serve_load floor PORT`` is ratewarden's gRPC server
answering every call with a fixed response: the transport's own cost.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
#: Distinct values per descriptor key (so per counter) that the requests cycle over.
VALUES = 1_000
#: One in ``DENY_EVERY`` requests of a "deny" command carries a ``tight`` value over its limit.
DENY_EVERY = 2
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#: ``RateLimitResponse.overall_code = OVER_LIMIT`` serialized: field 1 (varint) = 2. Protobuf
#: writes fields in number order, so a denial's reply starts with these two bytes.
_OVER_LIMIT_PREFIX = b"\x08\x02"
CALL_TIMEOUT_S = 5.0


def rls_requests(domain: str, descriptors: int, deny: bool) -> list[bytes]:
    """``VALUES`` serialized ``RateLimitRequest``s of ``descriptors`` one-entry descriptors.

    Descriptor ``i`` is ``(d<i>, v<n>)``. With ``deny`` the last descriptor is
    ``(tight, hot-<n>)`` on every ``DENY_EVERY``-th request and ``(tight, cold-<n>)``
    otherwise: the benchmark config limits ``hot-*`` values to 1 an hour.
    """
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
    from envoy.service.ratelimit.v3 import rls_pb2

    entry = ratelimit_pb2.RateLimitDescriptor.Entry
    found = []
    for n in range(VALUES):
        pairs = [(f"d{i}", f"v{n}") for i in range(descriptors)]
        if deny:
            pairs[-1] = ("tight", f"{'hot' if n % DENY_EVERY == 0 else 'cold'}-{n}")
        message = rls_pb2.RateLimitRequest(
            domain=domain,
            descriptors=[
                ratelimit_pb2.RateLimitDescriptor(entries=[entry(key=k, value=v)]) for k, v in pairs
            ],
        )
        found.append(message.SerializeToString())
    return found


def check_reply(reply: bytes, descriptors: int) -> None:
    """Decode one reply fully: it must carry a status per descriptor (a sanity check per run)."""
    from envoy.service.ratelimit.v3 import rls_pb2

    response = rls_pb2.RateLimitResponse.FromString(reply)
    if len(response.statuses) != descriptors:
        raise RuntimeError(f"expected {descriptors} statuses, got {response}")


@dataclass(slots=True)
class Tally:
    """What one timed window saw."""

    latencies: array[int] = field(default_factory=lambda: array("q"))
    errors: int = 0
    denied: int = 0
    first_error: str | None = None
    last_end: int = 0

    def error(self, exc: BaseException) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"[:200]


Call = Callable[[int], Awaitable[bool]]
"""``call(n)`` sends request ``n`` and says whether it was denied; raises on failure."""


async def drive(calls: list[Call], in_flight: int, start_ns: int, seconds: float) -> Tally:
    """``in_flight`` tasks calling until the window closes; only calls started inside it count.

    Task ``i`` uses ``calls[i % len(calls)]`` (its connection) and requests ``i``,
    ``i + in_flight``, ... so the tasks together cycle over every value.
    """
    tally = Tally()
    end_ns = start_ns + int(seconds * 1e9)
    record = tally.latencies.append

    async def task(i: int) -> None:
        call = calls[i % len(calls)]
        n = i
        while True:
            t0 = time.perf_counter_ns()
            if t0 >= end_ns:
                return
            try:
                denied = await call(n)
            except Exception as exc:  # counted, and the load goes on
                if t0 >= start_ns:
                    tally.error(exc)
                n += in_flight
                continue
            t1 = time.perf_counter_ns()
            if t0 >= start_ns:
                record(t1 - t0)
                tally.denied += denied
                tally.last_end = max(tally.last_end, t1)
            n += in_flight

    await asyncio.gather(*(task(i) for i in range(in_flight)))
    return tally


class Grpc:
    """Cached gRPC channels per target; ``calls`` gives one call function per channel."""

    def __init__(self) -> None:
        self.channels: dict[tuple[str, int], list[Any]] = {}

    async def calls(self, target: str, count: int, requests: list[bytes]) -> list[Call]:
        import grpc

        key = (target, count)
        if key not in self.channels:
            self.channels[key] = [
                grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(count)
            ]
            for channel in self.channels[key]:
                await asyncio.wait_for(channel.channel_ready(), 10)
        found = []
        for channel in self.channels[key]:
            # No serializers: the requests are bytes already, the reply stays bytes.
            method = channel.unary_unary(METHOD)
            found.append(_grpc_call(method, requests))
        return found


def _grpc_call(method: Any, requests: list[bytes]) -> Call:
    size = len(requests)

    async def call(n: int) -> bool:
        reply: bytes = await method(requests[n % size], timeout=CALL_TIMEOUT_S)
        return reply[:2] == _OVER_LIMIT_PREFIX

    return call


async def http_calls(port: int, count: int) -> tuple[list[Call], list[asyncio.StreamWriter]]:
    """``count`` keep-alive HTTP/1.1 connections to ``port``, one call function each."""
    found: list[Call] = []
    writers = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(HOST, port)
        found.append(_http_call(reader, writer))
        writers.append(writer)
    return found, writers


def _http_call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Call:
    async def call(n: int) -> bool:
        key = n % VALUES
        writer.write(
            b"GET / HTTP/1.1\r\nHost: bench\r\nX-Api-Key: k%d\r\nX-Tenant: t%d\r\n\r\n"
            % (key, key % 100)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.lower().split(b"\r\n"):
            if line.startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
        status = int(head[9:12])
        if status not in (200, 429):
            raise RuntimeError(f"HTTP {status}")
        return status == 429

    return call


async def run(command: dict[str, Any], grpc_cache: Grpc) -> dict[str, Any]:
    """One command: connect (or reuse), warm up until ``start_at``, time ``seconds``."""
    in_flight = int(command["in_flight"])
    writers: list[asyncio.StreamWriter] = []
    if command["kind"] == "grpc":
        descriptors = int(command["descriptors"])
        requests = rls_requests(command["domain"], descriptors, bool(command.get("deny")))
        calls = await grpc_cache.calls(command["target"], int(command["channels"]), requests)
        channel = grpc_cache.channels[(command["target"], int(command["channels"]))][0]
        reply = await channel.unary_unary(METHOD)(requests[0], timeout=10)
        check_reply(reply, int(command.get("statuses", descriptors)))
    else:
        # One connection per call slot: HTTP/1.1 has one request in flight per connection.
        calls, writers = await http_calls(int(command["port"]), in_flight)
    start_ns = time.perf_counter_ns() + int((float(command["start_at"]) - time.time()) * 1e9)
    try:
        tally = await drive(calls, in_flight, start_ns, float(command["seconds"]))
    finally:
        for writer in writers:
            writer.close()
    Path(command["latencies"]).write_bytes(tally.latencies.tobytes())
    return {
        "calls": len(tally.latencies),
        "errors": tally.errors,
        "denied": tally.denied,
        "elapsed_s": max(0, tally.last_end - start_ns) / 1e9,
        "first_error": tally.first_error,
    }


def load() -> None:
    """Answer commands from stdin until it closes (the benchmark's load generator process)."""
    loop = asyncio.new_event_loop()
    grpc_cache = Grpc()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = loop.run_until_complete(run(json.loads(line), grpc_cache))
        except Exception as exc:
            reply = {"failed": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
    loop.close()


_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n"


class _Backend(asyncio.Protocol):
    """Answers each request head ``200 ok``; GETs only, so a head ends each request."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        heads = self.buffer.count(b"\r\n\r\n")
        if heads:
            self.buffer = self.buffer[self.buffer.rfind(b"\r\n\r\n") + 4 :]
            self.transport.write(_OK * heads)


def backend(port: int) -> None:
    """Serve the trivial upstream on ``127.0.0.1:port`` until killed."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Backend, HOST, port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def floor(port: int) -> None:
    """ratewarden's ``GrpcServer`` answering every call with one fixed response, until killed.

    No config, no store, no metrics: what the gRPC transport alone costs per call,
    the floor under every ``ratewarden serve`` row.
    """
    from envoy.service.ratelimit.v3 import rls_pb2

    from ratewarden.server.grpc import GrpcServer

    response = rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)

    async def answer(request: Any) -> Any:
        return response

    async def main() -> None:
        server = GrpcServer(answer)
        await server.start(HOST, port)
        await server.set_serving(True)
        await asyncio.Event().wait()

    asyncio.run(main())


if __name__ == "__main__":
    if sys.argv[1:2] == ["load"]:
        load()
    elif sys.argv[1:2] == ["backend"]:
        backend(int(sys.argv[2]))
    elif sys.argv[1:2] == ["floor"]:
        floor(int(sys.argv[2]))
    else:
        raise SystemExit("usage: python -m benchmarks._serve_load load | backend PORT | floor PORT")
