"""The live dashboard in headless Chromium, against a real `ratewarden serve`.

The page must load with no console error, no uncaught exception and no CSP
violation, then show a rule going over its limit while the test drives gRPC
traffic, without a reload. A screenshot is saved as a test artifact in
``$RATEWARDEN_ARTIFACTS`` (default ``build/test-artifacts``).

Needs a Chromium binary (Debian: ``apt-get install chromium``); skipped with that
reason when there is none.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from tests._servers import HOST
from tests.server_transport._cdp import Browser, Page, find_chromium
from tests.server_transport._process import ServeProcess, serving
from tests.server_transport.conftest import OK, OVER_LIMIT, request, rules_file

RULES = """\
domain: transport
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: dark
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
"""
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("RATEWARDEN_ARTIFACTS", ROOT / "build" / "test-artifacts"))
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium binary (apt-get install chromium, or set RATEWARDEN_CHROMIUM)",
)


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    """This module's RULES (a shadow rule beside api_key), served by the conftest's ``served``."""
    return rules_file(tmp_path, RULES)


@pytest.fixture
def page() -> Iterator[Page]:
    assert CHROMIUM is not None
    browser = Browser(CHROMIUM)
    try:
        tab = browser.page()
        yield tab
        tab.close()
    finally:
        browser.close()


def drive(target: str, key: str, value: str, calls: int) -> list[int]:
    with grpc.insecure_channel(target) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        return [
            int(stub.ShouldRateLimit(request("transport", {key: value}), timeout=10).overall_code)
            for _ in range(calls)
        ]


def row_status(rule: str) -> str:
    """A JavaScript expression (parenthesised, so it can be compared): the rule row's status."""
    return f"(document.querySelector('#rules tr[data-rule=\"{rule}\"]')?.dataset.status ?? '')"


@needs_chromium
def test_the_dashboard_shows_a_rule_going_over_its_limit_live(
    served: ServeProcess, page: Page
) -> None:
    """Loaded idle, then 6 calls on a 3/minute key turn the rule's row "over" and list the key
    on top; a shadow rule's would-have-blocked count shows; a hostile key renders as text."""
    url = f"http://{HOST}:{served.http_port}/dashboard?interval=250"
    page.call("Page.navigate", url=url)
    page.wait_for("document.getElementById('status').dataset.state === 'live'")
    assert page.evaluate(row_status("transport.api_key")) == "idle"
    assert page.evaluate(row_status("transport.dark")) == "idle"

    assert drive(served.grpc_target, "api_key", "greedy", 6) == [OK] * 3 + [OVER_LIMIT] * 3
    assert drive(served.grpc_target, "dark", HOSTILE, 3) == [OK] * 3
    page.wait_for(f"{row_status('transport.api_key')} === 'over'")
    page.wait_for("!!document.querySelector('#top-over tr[data-key=\"api_key=greedy\"]')")
    over_cell = page.evaluate(
        "document.querySelector('#top-over tr[data-key=\"api_key=greedy\"] td.num').textContent"
    )
    assert over_cell == "3"
    page.wait_for(f"{row_status('transport.dark')} === 'shadow'")
    shadow_total = page.evaluate(
        "document.querySelector('#shadow tr[data-rule=\"transport.dark\"] td.num').textContent"
    )
    assert shadow_total == "2"
    shown = page.evaluate("document.querySelector('#top-shadow td.key').textContent")
    assert shown == f"dark={HOSTILE}"
    assert page.evaluate("document.querySelectorAll('main img').length") == 0
    assert page.evaluate("document.title") == "ratewarden dashboard"

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = page.call("Page.captureScreenshot", format="png")
    (ARTIFACTS / "dashboard.png").write_bytes(base64.b64decode(shot["data"]))
    assert page.errors() == []


@needs_chromium
def test_the_page_says_so_when_the_server_goes_away(served: ServeProcess, page: Page) -> None:
    """The page keeps polling: when the server stops, it shows an error state, not stale "live"."""
    page.call("Page.navigate", url=f"http://{HOST}:{served.http_port}/dashboard?interval=250")
    page.wait_for("document.getElementById('status').dataset.state === 'live'")
    served.signal()
    page.wait_for("document.getElementById('status').dataset.state === 'error'")
    text = page.evaluate("document.getElementById('status').textContent")
    assert text.startswith("cannot reach the server")


def test_the_dashboard_json_and_page_headers(served: ServeProcess) -> None:
    """/dashboard is HTML with a CSP that names its own script; /dashboard.json lists the rules."""
    with urllib.request.urlopen(f"http://{HOST}:{served.http_port}/dashboard") as reply:
        csp = reply.headers["Content-Security-Policy"]
        body = reply.read().decode()
        assert reply.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "script-src 'sha256-" in csp and "default-src 'none'" in csp
    # Nothing is loaded from elsewhere: no src/href but the inline empty icon, no @import.
    assert re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", body) == ["data:,"]
    assert "@import" not in body and "<script src" not in body
    with urllib.request.urlopen(f"http://{HOST}:{served.http_port}/dashboard.json") as reply:
        view = json.loads(reply.read())
        assert reply.headers["Cache-Control"] == "no-store"
    assert [r["path"] for r in view["rules"]] == ["transport.api_key", "transport.dark"]
    assert view["workers"] == 1


def test_dashboard_off_removes_the_routes(tmp_path: Path) -> None:
    """--dashboard off: both routes answer 404; /metrics stays."""
    with serving(rules_file(tmp_path, RULES), "--dashboard", "off") as server:
        for path in ("/dashboard", "/dashboard.json"):
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(f"http://{HOST}:{server.http_port}{path}")
            assert caught.value.code == 404
        with urllib.request.urlopen(f"http://{HOST}:{server.http_port}/metrics") as reply:
            assert reply.status == 200
