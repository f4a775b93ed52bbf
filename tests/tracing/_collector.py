"""OTLP trace collectors the tracing tests start on loopback: one over HTTP (``POST
/v1/traces``, protobuf bodies, on a thread), one over gRPC (``TraceService/Export``). Both keep
every span they receive, with its resource's attributes, as ``Received``."""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

HOST = "127.0.0.1"
#: Seconds a test waits for spans to arrive before it fails.
WAIT_S = 10.0


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


@dataclass(frozen=True, slots=True)
class Received:
    """One span as the collector got it."""

    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    resource: dict[str, Any]


class Collector:
    """What both collectors share: the spans, and waiting for them."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.requests = 0
        self._lock = threading.Lock()
        self.port = 0

    def take(self, body: bytes) -> None:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        with self._lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append(
                            Received(
                                name=span.name,
                                kind=span.kind,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                attributes=attributes(span.attributes),
                                status_code=span.status.code,
                                status_message=span.status.message,
                                resource=resource,
                            )
                        )

    async def wait_for(self, count: int, timeout: float = WAIT_S) -> list[Received]:
        """The spans, once there are ``count`` at least (fails after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while len(self.spans) < count:
            assert time.monotonic() < deadline, f"{len(self.spans)} spans of {count} arrived"
            await asyncio.sleep(0.02)
        return list(self.spans)

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"


class HttpCollector(Collector):
    """OTLP over HTTP: ``POST /v1/traces`` with a protobuf body (gzip or not)."""

    def __init__(self) -> None:
        super().__init__()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                collector.take(body)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        await asyncio.to_thread(self._server.shutdown)
        self._server.server_close()


class GrpcCollector(Collector):
    """OTLP over gRPC: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``."""

    def __init__(self) -> None:
        super().__init__()
        self._server: Any = None

    async def start(self) -> None:
        self._server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(
            self._export,
            request_deserializer=None,
            response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
        )
        self._server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}
                ),
            )
        )
        self.port = self._server.add_insecure_port(f"{HOST}:0")
        await self._server.start()

    async def _export(self, body: bytes, context: Any) -> Any:
        self.take(body)
        return trace_service_pb2.ExportTraceServiceResponse()

    async def stop(self) -> None:
        await self._server.stop(0)
