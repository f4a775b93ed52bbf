"""Who may open the dashboard: loopback clients by default, anyone with "any", nobody with "off".

The peer address is decided by the kernel, and tests stay on loopback, so a
remote client is simulated by calling the HTTP port's ASGI app in process with a
scope whose ``client`` is a documentation address (192.0.2.1, RFC 5737); the
routing code is the real one.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server.http import HttpServer
from ratewarden.server.http_app import HttpApp, _is_loopback


class Backend:
    """The smallest HttpBackend: a fixed dashboard document."""

    def serving(self) -> bool:
        return True

    def rules_text(self) -> str:
        return ""

    def rules_dict(self) -> dict[str, Any]:
        return {}

    async def should_rate_limit(self, request: Any) -> Any:
        raise AssertionError("not called")

    def metrics(self, accept: str) -> tuple[bytes, str]:
        return b"# metrics\n", "text/plain"

    def dashboard(self) -> dict[str, Any]:
        return {"rules": []}

    def rlqs_streams(self) -> int | None:
        return None  # RLQS off: /healthcheck says OK alone


async def get(app: HttpApp, path: str, peer: str) -> httpx.Response:
    """``GET path`` from a client at ``peer``."""
    transport = httpx.ASGITransport(app=app, client=(peer, 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://ratewarden") as client:
        return await client.get(path)


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("192.0.2.1", False),
        ("::ffff:192.0.2.1", False),
        ("2001:db8::1", False),
        ("", False),
        ("not-an-address", False),
    ],
)
def test_loopback_addresses_are_recognised(peer: str, loopback: bool) -> None:
    """IPv4 127/8, IPv6 ::1 and IPv4-mapped loopback count; anything unparsable does not."""
    assert _is_loopback(peer) is loopback


@pytest.mark.parametrize("path", ["/dashboard", "/dashboard.json"])
async def test_by_default_a_remote_client_gets_403_and_the_way_to_open_it(path: str) -> None:
    """Request values show on the dashboard, so a non-loopback peer is refused by default."""
    app = HttpApp(Backend())
    refused = await get(app, path, "192.0.2.1")
    assert refused.status_code == 403
    assert "--dashboard any" in refused.text
    for loopback in ("127.0.0.1", "::1"):
        assert (await get(app, path, loopback)).status_code == 200


async def test_any_opens_the_dashboard_to_remote_clients() -> None:
    """--dashboard any: a remote peer gets the page and the JSON."""
    app = HttpApp(Backend(), dashboard="any")
    for path in ("/dashboard", "/dashboard.json"):
        assert (await get(app, path, "192.0.2.1")).status_code == 200


async def test_off_removes_the_dashboard_routes() -> None:
    """--dashboard off: the two paths do not exist, even for loopback clients."""
    app = HttpApp(Backend(), dashboard="off")
    for path in ("/dashboard", "/dashboard.json"):
        assert (await get(app, path, "127.0.0.1")).status_code == 404


async def test_metrics_stay_open_to_remote_scrapers() -> None:
    """/metrics holds no request values: Prometheus scrapes it from elsewhere."""
    assert (await get(HttpApp(Backend()), "/metrics", "192.0.2.1")).status_code == 200


def test_an_unknown_access_setting_is_refused() -> None:
    """A typo must not silently open (or close) the dashboard, whichever class is built."""
    for build in (HttpServer, HttpApp):
        with pytest.raises(ConfigurationError, match="dashboard 'public'"):
            build(Backend(), dashboard="public")
