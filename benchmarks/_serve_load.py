"""What ``python -m benchmarks --serve`` sends and checks, and the two stand-in servers.

The load itself is h2load's (``benchmarks/_h2load.py``); this module makes its
request bodies and the check every timed round starts with:

- ``rls_requests``: serialized ``RateLimitRequest``s with N one-entry descriptors;
  ``grpc_frame`` wraps one as the body h2load sends on every call of a round.
- ``Checker``: one real gRPC call, decoded, before each round: h2load counts
  HTTP 200s and a gRPC error is a 200 with ``grpc-status`` in its trailers, so a
  broken server could otherwise look fast. The harness calls it before and after
  each round; it gives the reply's size, against which the round's DATA bytes
  are weighed.

``python -m benchmarks._serve_load backend PORT`` is the trivial upstream for
Envoy: an asyncio protocol answering every request ``200 ok``, keep-alive.
``python -m benchmarks._serve_load floor PORT TRANSPORT`` is ratewarden's gRPC
server on that transport answering every call with a fixed response, on the
event loop ``ratewarden serve`` runs: what the transport alone costs.
"""

from __future__ import annotations

import asyncio
import struct
import sys
from typing import Any

HOST = "127.0.0.1"
#: Distinct values per descriptor key (so per counter) that ``rls_requests`` cycles over.
VALUES = 1_000
#: One in ``DENY_EVERY`` requests of a "deny" list carries a ``tight`` value over its limit.
DENY_EVERY = 2
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
CHECK_TIMEOUT_S = 10.0


def rls_requests(domain: str, descriptors: int, deny: bool, values: int = VALUES) -> list[bytes]:
    """``values`` serialized ``RateLimitRequest``s of ``descriptors`` one-entry descriptors.

    Descriptor ``i`` is ``(d<i>, v<n>)``. With ``deny`` the last descriptor is
    ``(tight, hot-<n>)`` on every ``DENY_EVERY``-th request (the first among them)
    and ``(tight, cold-<n>)`` otherwise: the benchmark config limits ``hot-*``
    values to 1 an hour.
    """
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
    from envoy.service.ratelimit.v3 import rls_pb2

    entry = ratelimit_pb2.RateLimitDescriptor.Entry
    found = []
    for n in range(values):
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


def grpc_frame(message: bytes) -> bytes:
    """``message`` as one uncompressed gRPC frame: flag 0, 4-byte big-endian length, bytes."""
    return b"\x00" + struct.pack(">I", len(message)) + message


def check_reply(reply: bytes, statuses: int, over_limit: bool) -> None:
    """Decode one reply fully: the overall code asked for, and ``statuses`` statuses each
    with its limit (a failure mode's answer, given when the store failed, has none)."""
    from envoy.service.ratelimit.v3 import rls_pb2

    response = rls_pb2.RateLimitResponse.FromString(reply)
    code = rls_pb2.RateLimitResponse.OVER_LIMIT if over_limit else rls_pb2.RateLimitResponse.OK
    limited = all(status.HasField("current_limit") for status in response.statuses)
    if len(response.statuses) != statuses or response.overall_code != code or not limited:
        expected = f"{rls_pb2.RateLimitResponse.Code.Name(code)} with {statuses} statuses"
        raise RuntimeError(f"expected {expected}, each with its limit; got {response}")


class Checker:
    """One gRPC channel per port (grpcio's sync client, connected on first use)."""

    def __init__(self) -> None:
        self.channels: dict[int, Any] = {}

    def call(self, port: int, message: bytes, statuses: int, over_limit: bool) -> int:
        """One ``ShouldRateLimit`` call on ``port``, checked; the size of its gRPC frame.

        Raises ``RuntimeError`` saying what came back (a gRPC error or a wrong reply).
        """
        import grpc

        if port not in self.channels:
            self.channels[port] = grpc.insecure_channel(f"{HOST}:{port}")
        # No serializers: the request is bytes already, the reply stays bytes.
        method = self.channels[port].unary_unary(METHOD)
        try:
            reply: bytes = method(message, timeout=CHECK_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise RuntimeError(f"the check call failed: {exc.code()}: {exc.details()}") from None
        check_reply(reply, statuses, over_limit)
        return len(grpc_frame(reply))

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        self.channels.clear()


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


def floor(port: int, transport: str) -> None:
    """ratewarden's gRPC server on ``transport`` (``grpcio`` or ``native``) answering every
    call with one fixed response, until killed.

    No config, no store, no metrics: what the gRPC transport alone costs per call,
    the floor under every ``ratewarden serve`` row. The loop is serve's (uvloop when
    installed).
    """
    from envoy.service.ratelimit.v3 import rls_pb2

    from ratewarden.server.process import loop_factory

    response = rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)

    async def answer(request: Any) -> Any:
        return response

    async def main() -> None:
        server: Any
        if transport == "native":
            from ratewarden.server.grpc_native import NativeGrpcServer

            server = NativeGrpcServer(answer)
        else:
            from ratewarden.server.grpc import GrpcServer

            server = GrpcServer(answer)
        await server.start(HOST, port)
        await server.set_serving(True)
        await asyncio.Event().wait()

    with asyncio.Runner(loop_factory=loop_factory("auto")) as runner:
        runner.run(main())


if __name__ == "__main__":
    if sys.argv[1:2] == ["backend"]:
        backend(int(sys.argv[2]))
    elif sys.argv[1:2] == ["floor"]:
        floor(int(sys.argv[2]), sys.argv[3])
    else:
        raise SystemExit("usage: python -m benchmarks._serve_load backend PORT | floor PORT T")
