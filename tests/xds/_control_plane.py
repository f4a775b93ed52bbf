"""An xDS management server for the tests: ADS (state of the world) on a loopback port.

Written with the ADS service of ``xds-protos`` and grpc.aio. It serves whatever
``RateLimitConfig`` resources the test gives ``publish`` (built with the message
classes of ``ratewarden.server.xds.messages``) to every open stream, sends the
current ones to each new subscription, and records every request it receives:
the subscriptions, the ACKs and the NACKs with their ``error_detail``, and the
call's metadata. ``stop`` drops every stream (a control plane going down);
``start`` on the same port brings it back. With ``credentials`` it speaks TLS.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2

from ratewarden.server.xds.messages import TYPE_URL

HOST = "127.0.0.1"
WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class Received:
    """One DiscoveryRequest and the metadata of the stream it came on."""

    request: Any
    metadata: dict[str, str]
    stream: int

    @property
    def is_ack(self) -> bool:
        return bool(self.request.response_nonce) and not self.request.HasField("error_detail")

    @property
    def is_nack(self) -> bool:
        return self.request.HasField("error_detail")


def pack(*resources: Any) -> list[Any]:
    """``RateLimitConfig`` messages as the ``Any`` a DiscoveryResponse carries."""
    packed = []
    for resource in resources:
        item = any_pb2.Any()
        item.Pack(resource)
        packed.append(item)
    return packed


class ControlPlane(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    """``await ControlPlane.started()``; ``publish(version, *resources)``; ``await stop()``."""

    def __init__(self, credentials: grpc.ServerCredentials | None = None) -> None:
        self.credentials = credentials  # TLS, when given
        self.port = 0
        self.received: list[Received] = []
        self.version = ""
        self.resources: list[Any] = []
        self.type_url = TYPE_URL
        self._server: grpc.aio.Server | None = None
        self._queues: list[asyncio.Queue[Any]] = []
        self._nonces = itertools.count(1)
        self._streams = itertools.count(1)
        self.sent: list[Any] = []

    @classmethod
    async def started(
        cls, port: int = 0, credentials: grpc.ServerCredentials | None = None
    ) -> ControlPlane:
        plane = cls(credentials)
        await plane.start(port)
        return plane

    async def start(self, port: int | None = None) -> None:
        """Listen on ``port`` (the last one when None: a restart)."""
        self._server = grpc.aio.server()
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(self, self._server)
        address = f"{HOST}:{self.port if port is None else port}"
        if self.credentials is None:
            self.port = self._server.add_insecure_port(address)
        else:
            self.port = self._server.add_secure_port(address, self.credentials)
        await self._server.start()

    async def stop(self) -> None:
        """Close every stream and the port."""
        for queue in self._queues:
            queue.put_nowait(None)
        if self._server is not None:
            await self._server.stop(0)
            self._server = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def publish(self, version: str, *resources: Any, type_url: str = TYPE_URL) -> None:
        """Make ``resources`` the current state, and send it to every open stream."""
        self.version = version
        self.resources = pack(*resources)
        self.type_url = type_url
        for queue in self._queues:
            queue.put_nowait(self._response())

    def publish_raw(self, version: str, resources: Sequence[Any]) -> None:
        """Like ``publish``, with ``Any`` resources as given (of any type, or undecodable)."""
        self.version = version
        self.resources = list(resources)
        for queue in self._queues:
            queue.put_nowait(self._response())

    def _response(self) -> Any:
        response = discovery_pb2.DiscoveryResponse(
            version_info=self.version,
            resources=self.resources,
            type_url=self.type_url,
            nonce=str(next(self._nonces)),
        )
        self.sent.append(response)
        return response

    async def StreamAggregatedResources(  # noqa: N802 - the gRPC method's name
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        stream = next(self._streams)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._queues.append(queue)
        metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}

        async def read() -> None:
            async for request in request_iterator:
                self.received.append(Received(request, metadata, stream))
                if not request.response_nonce and self.version:
                    queue.put_nowait(self._response())  # a new subscription: the current state
            queue.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (response := await queue.get()) is not None:
                yield response
        finally:
            reader.cancel()
            self._queues.remove(queue)

    # --- what the tests ask -----------------------------------------------------------

    def subscriptions(self) -> list[Received]:
        return [item for item in self.received if not item.request.response_nonce]

    def answers_to(self, response: Any) -> list[Received]:
        """The requests that ACK or NACK ``response`` (by its nonce)."""
        return [item for item in self.received if item.request.response_nonce == response.nonce]

    async def answer(self, response: Any) -> Received:
        """The ACK or NACK of ``response``, waited for (a few seconds at most)."""
        await until(lambda: bool(self.answers_to(response)), f"an answer to {response.nonce}")
        [answer] = self.answers_to(response)
        return answer


async def until(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g}s for {what}")
        await asyncio.sleep(0.01)
