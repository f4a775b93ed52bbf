"""Operating RLQS on a real server over loopback: the health line, /rlqs.json's buckets,
the opt-in per-bucket metrics, the dashboard's panel.

A grpcio client plays Envoy (``Stream`` from test_rlqs_stream); every wait is bounded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.rate_limit_quota.v3 import rlqs_pb2_grpc

from ratewarden.server.dashboard.page import PAGE
from tests._servers import HOST
from tests.server_transport._cdp import Browser, find_chromium
from tests.server_transport._process import serving
from tests.server_transport._rlqs import RULES, Stream, report
from tests.server_transport.conftest import StartServer, http, rules_file


async def test_healthcheck_gives_the_stream_count_with_rlqs_and_is_unchanged_without(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """With --rlqs a second line counts the open streams, the status still 200; without
    it the answer is the same ``OK`` as before."""
    server = await start_server(RULES, rlqs=True)
    reply = await http(server.http_port, "GET", "/healthcheck")
    assert (reply.status, reply.body) == (200, b"OK\nrlqs_streams 0\n")
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(report("edge", ({"tenant": "a"}, 1, 0)))
    await stream.next()
    reply = await http(server.http_port, "GET", "/healthcheck")
    assert (reply.status, reply.body) == (200, b"OK\nrlqs_streams 1\n")
    off = await start_server(RULES)
    reply = await http(off.http_port, "GET", "/healthcheck")
    assert (reply.status, reply.body) == (200, b"OK\n")


async def test_rlqs_json_lists_buckets_by_demand_with_what_they_hold_and_report(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """``buckets``: each bucket's rule, answer, demand, assignment and counts, the busiest
    first; ``other`` sums what is not listed (nothing here)."""
    server = await start_server(RULES, rlqs=True)
    stream = Stream(server.grpc_port)
    streams.append(stream)
    stream.send(report("edge", ({"tenant": "a"}, 2, 1), ({"tenant": "b"}, 5, 0)))
    await stream.next()
    state = (await http(server.http_port, "GET", "/rlqs.json")).json()
    assert [b["bucket"] for b in state["top_buckets"]] == ["tenant=b", "tenant=a"]
    busiest = state["top_buckets"][0]
    assert busiest["rule"] == "edge.tenant" and busiest["answer"] == "token_bucket"
    assert (busiest["allowed"], busiest["denied"], busiest["demand_per_s"]) == (5, 0, 5.0)
    assert busiest["assigned_per_s"] == pytest.approx(0.1)  # 6 a minute
    assert state["other_buckets"]["buckets"] == 0
    assert state["streams"] == 1 and len(state["assignments"]) == 2  # as before


async def test_per_bucket_metrics_follow_the_flag(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """Off by default (no bucket value on the open /metrics); ``--rlqs-bucket-metrics 1``
    gives the busiest bucket its series and the rest ``other``."""
    quiet = await start_server(RULES, rlqs=True)
    loud = await start_server(RULES, rlqs=True, rlqs_bucket_metrics=1)
    for server in (quiet, loud):
        stream = Stream(server.grpc_port)
        streams.append(stream)
        stream.send(report("edge", ({"tenant": "a"}, 2, 1), ({"tenant": "b"}, 5, 0)))
        await stream.next()
    text = (await http(quiet.http_port, "GET", "/metrics")).body.decode()
    assert "tenant=" not in text and "ratewarden_rlqs_bucket_" not in text
    lines = (await http(loud.http_port, "GET", "/metrics")).body.decode().splitlines()
    labels = 'bucket="tenant=b",domain="edge",rule="edge.tenant"'
    assert f"ratewarden_rlqs_bucket_demand{{{labels}}} 5.0" in lines
    counted = 'bucket="tenant=b",domain="edge",outcome="allowed",rule="edge.tenant"'
    assert f"ratewarden_rlqs_bucket_reported_requests_total{{{counted}}} 5.0" in lines
    assert 'ratewarden_rlqs_bucket_demand{bucket="other",domain="",rule=""} 3.0' in lines
    assert not [line for line in lines if "tenant=a" in line]


def test_the_dashboard_page_has_a_hidden_quota_panel_fed_by_rlqs_json() -> None:
    """The panel shows only once ``rlqs.json`` answers (404 while RLQS is off)."""
    assert b'<section class="wide" id="rlqs-panel" hidden>' in PAGE
    assert b'fetch("rlqs.json"' in PAGE


@pytest.mark.skipif(find_chromium() is None, reason="no Chromium binary (apt-get install chromium)")
def test_the_dashboard_shows_the_quota_panel_with_a_reported_bucket(tmp_path: Path) -> None:
    """In headless Chromium against ``ratewarden serve --rlqs``: once an Envoy (a grpcio
    client) reports a bucket, the panel appears with its row and figures ("1 stream"), and the
    page logs no error."""
    chromium = find_chromium()
    assert chromium is not None
    done = threading.Event()

    def reports() -> Iterator[Any]:
        yield report("edge", ({"tenant": "a"}, 4, 1))
        done.wait(20)  # the stream stays open while the page looks

    with (
        serving(rules_file(tmp_path, RULES), "--rlqs") as server,
        grpc.insecure_channel(server.grpc_target) as chan,
    ):
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(chan)
        answers = stub.StreamRateLimitQuotas(reports(), timeout=30)
        try:
            next(answers)  # the bucket's assignment: it is tracked
            browser = Browser(chromium)
            try:
                page = browser.page()
                page.call("Page.navigate", url=f"http://{HOST}:{server.http_port}/dashboard")
                page.wait_for("!document.getElementById('rlqs-panel').hidden")
                row = '#rlqs tr[data-bucket="tenant=a"]'
                page.wait_for(f"!!document.querySelector('{row}')")
                cells = page.evaluate(
                    f"[...document.querySelectorAll('{row} td')].map(td => td.textContent)"
                )
                assert cells[:4] == ["edge", "tenant=a", "edge.tenant", "token_bucket"]
                assert cells[-2:] == ["4", "1"]
                figures = page.evaluate(
                    "Object.fromEntries([...document.querySelectorAll('#rlqs-figures .figure')]"
                    ".map(f => [f.dataset.figure, f.textContent]))"
                )
                # One stream and one bucket: counted in the singular, not "1 streams".
                assert figures["streams"] == "1stream" and figures["buckets"] == "1bucket"
                assert page.errors() == []
                page.close()
            finally:
                browser.close()
        finally:
            done.set()
            answers.cancel()
