"""What ``--tracing`` costs the event loop per ShouldRateLimit call (docs/operations.md#traces).

    .venv/bin/python -m benchmarks.tracing_cost

One ``Tracing`` (OTLP over HTTP to a collector on a free loopback port, the tests' collector),
then, per case, 20,000 calls' worth of ``start`` and ``answered`` for a request of 3
descriptors: a sampled W3C parent, no parent at a rate of 1, and no parent at a rate of 0 (not
sampled). Prints the wall time per call in this thread (what the event loop pays: the export
runs on the SDK's own thread) and the spans the collector received; the SDK drops spans once
its queue of 2,048 is full, as it does under such a burst.
"""

from __future__ import annotations

import asyncio
import os
import time

from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server.tracing import Tracing
from tests.server_transport.conftest import request
from tests.tracing._collector import HttpCollector

CALLS = 20_000
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def main() -> None:
    collector = HttpCollector()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.endpoint
    answer = rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)
    call = request("bench", {"a": "1"}, {"b": "2"}, {"c": "3"})
    cases = (("sampled parent", 1.0, (("traceparent", PARENT),)), ("no parent, rate 1", 1.0, ()))
    for name, rate, metadata in (*cases, ("no parent, rate 0", 0.0, ())):
        tracing = Tracing("http", rate, {})
        before = len(collector.spans)
        started = time.perf_counter()
        for _ in range(CALLS):
            tracing.answered(tracing.start(call, metadata), answer)
        spent = time.perf_counter() - started
        await asyncio.to_thread(tracing.shutdown)
        received = len(collector.spans) - before
        print(f"{name:18} {1e6 * spent / CALLS:6.1f} us a call, {received:6} spans received")
    await collector.stop()


if __name__ == "__main__":
    asyncio.run(main())
