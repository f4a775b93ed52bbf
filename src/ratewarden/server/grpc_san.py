"""``ClientSanCheck``: the gRPC port's ``--tls-client-san``, as a grpcio server interceptor.

grpcio verifies a client certificate's chain in the handshake (``--tls-client-ca``) but has
no hook there for the names in it; so each call, to every service on the port, reads the
names grpc-core took from the verified certificate (``peer_dns``, ``peer_ip``) and is
refused ``UNAUTHENTICATED`` before it runs when none names the host (``tls_names``). A call
to a method the port does not serve is refused so too, and answered ``UNIMPLEMENTED`` only
for a certificate that names the host: upstream refuses such a client's handshake, so it
learns nothing of the port, and neither does it here. Each refusal is counted (``refused``;
``on_refused``: serve's ``ratewarden_client_san_refused_total``) and logged at most once
every ``LOG_EVERY_S`` seconds (``client_san_refused``).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from ratewarden.server.tls_names import names_host

__all__ = ["ClientSanCheck"]

log = logging.getLogger("ratewarden.server.grpc")

#: Seconds between two log lines about refused certificates (each line counts the refusals).
LOG_EVERY_S = 10.0


def _texts(values: Iterable[Any]) -> list[str]:
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]


Behaviour = Callable[..., Any]


class ClientSanCheck(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call whose client certificate does not name ``host`` (``names_host``);
    calls ``on_refused`` for each refusal, when given."""

    def __init__(self, host: str, on_refused: Callable[[], None] | None = None) -> None:
        self.host = host
        self.refused = 0
        self._on_refused = on_refused
        self._logged_at = -LOG_EVERY_S
        self._unlogged = 0

    def allowed(self, context: Any) -> bool:
        """Whether the call's verified certificate names the host."""
        auth = context.auth_context()
        dns = _texts(auth.get("peer_dns", ()))
        ips = _texts(auth.get("peer_ip", ()))
        if names_host(self.host, dns, ips):
            return True
        self.refused += 1
        self._unlogged += 1
        if self._on_refused is not None:
            self._on_refused()
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning(
                "refused %d call(s): the client certificate does not name %s (it names %s)",
                self._unlogged,
                self.host,
                ", ".join(dns + ips) or "nothing",
                extra={"event": "client_san_refused", "peer": context.peer()},
            )
            self._logged_at, self._unlogged = now, 0
        return False

    async def _refuse(self, context: Any) -> None:
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            f"the client certificate does not name {self.host} (--tls-client-san)",
        )

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        details: Any,
    ) -> Any:
        handler = await continuation(details)
        if handler is None:  # no such method: bytes in, and no answer but the refusal
            return grpc.stream_stream_rpc_method_handler(self._unknown)
        if handler.unary_unary is not None:
            kind, behaviour = grpc.unary_unary_rpc_method_handler, handler.unary_unary
        elif handler.unary_stream is not None:
            kind, behaviour = grpc.unary_stream_rpc_method_handler, handler.unary_stream
        elif handler.stream_unary is not None:
            kind, behaviour = grpc.stream_unary_rpc_method_handler, handler.stream_unary
        else:
            kind, behaviour = grpc.stream_stream_rpc_method_handler, handler.stream_stream
        return kind(
            self._checked(behaviour),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    async def _unknown(self, requests: Any, context: Any) -> None:
        """A method the port does not serve: UNAUTHENTICATED unless the certificate names
        the host, then grpcio's own answer to an unknown method."""
        if not self.allowed(context):
            await self._refuse(context)
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    def _checked(self, behaviour: Behaviour) -> Behaviour:
        """``behaviour`` behind the check: an async generator stays one (a streaming answer),
        anything else is awaited when it returns an awaitable."""
        if inspect.isasyncgenfunction(behaviour):

            async def streamed(request: Any, context: Any) -> Any:
                if not self.allowed(context):
                    await self._refuse(context)
                inner = behaviour(request, context)
                try:
                    async for message in inner:
                        yield message
                finally:  # closed at once with this one (the quota stream's clean-up)
                    await inner.aclose()

            return streamed

        async def called(request: Any, context: Any) -> Any:
            if not self.allowed(context):
                await self._refuse(context)
            result = behaviour(request, context)
            return await result if inspect.isawaitable(result) else result

        return called
