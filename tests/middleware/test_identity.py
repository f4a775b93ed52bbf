"""Key extractors: API keys, users, and client IPs behind (or pretending to be behind) proxies."""

from __future__ import annotations

import pytest

from ratewarden import ConfigurationError
from ratewarden.middleware import (
    RequestInfo,
    by_api_key,
    by_client_ip,
    by_user,
    first_of,
)
from ratewarden.middleware._identity import forwarded_for
from ratewarden.middleware._request import from_asgi, from_wsgi, list_value


def _request(peer: str | None, **headers: str) -> RequestInfo:
    lowered = {name.replace("_", "-").lower(): value for name, value in headers.items()}
    return RequestInfo("GET", "/", peer, lowered, {})


def test_no_trusted_proxy_means_the_socket_peer_whatever_the_headers_say() -> None:
    """A forged X-Forwarded-For or Forwarded from an untrusted peer is ignored."""
    ip = by_client_ip()
    forged = _request("203.0.113.9", x_forwarded_for="1.1.1.1", forwarded="for=1.1.1.1")
    assert ip(forged) == "ip:203.0.113.9"


def test_untrusted_peer_is_not_trusted_even_when_others_are() -> None:
    """Trusting 10.0.0.0/8 does not make a peer outside it a proxy."""
    ip = by_client_ip(["10.0.0.0/8"])
    assert ip(_request("198.51.100.7", x_forwarded_for="1.1.1.1")) == "ip:198.51.100.7"


def test_right_to_left_skipping_trusted_hops() -> None:
    """Behind two trusted proxies, the first untrusted hop from the right is the client."""
    ip = by_client_ip(["10.0.0.0/8", "192.168.1.1"])
    request = _request("10.0.0.2", x_forwarded_for="6.6.6.6, 198.51.100.20, 192.168.1.1, 10.0.0.1")
    # 6.6.6.6 was written by the client itself; 198.51.100.20 is where our edge saw it.
    assert ip(request) == "ip:198.51.100.20"


def test_all_hops_trusted_gives_the_leftmost() -> None:
    """When every hop is a trusted proxy, the leftmost address is the best known client."""
    ip = by_client_ip(["10.0.0.0/8"])
    assert ip(_request("10.0.0.3", x_forwarded_for="10.0.0.9, 10.0.0.1")) == "ip:10.0.0.9"


def test_trusted_peer_without_header_is_the_peer() -> None:
    """A trusted proxy's own requests (no header) are limited by its address."""
    assert by_client_ip(["10.0.0.0/8"])(_request("10.0.0.3")) == "ip:10.0.0.3"


def test_garbage_hop_stops_at_the_last_trusted_address() -> None:
    """An unparseable hop ends the walk at the last address read, never unlimited."""
    ip = by_client_ip(["10.0.0.0/8"])
    assert ip(_request("10.0.0.3", x_forwarded_for="1.2.3.4, nonsense")) == "ip:10.0.0.3"


def test_forwarded_rfc7239_with_quotes_ports_and_ipv6() -> None:
    """Forwarded for= values: quoted, with ports, bracketed IPv6; obfuscated names stop."""
    value = (
        'for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711", for=10.0.0.1'
    )
    assert forwarded_for(value) == ["192.0.2.60", '"[2001:db8:cafe::17]:4711"', "10.0.0.1"]
    ip = by_client_ip(["10.0.0.0/8"], header="forwarded", ipv6_prefix=128)
    assert ip(_request("10.0.0.2", forwarded=value)) == "ip:2001:db8:cafe::17"
    hidden = by_client_ip(["10.0.0.0/8"], header="forwarded")
    assert hidden(_request("10.0.0.2", forwarded="for=_hidden, for=10.0.0.5")) == "ip:10.0.0.5"


def test_only_the_configured_header_is_read() -> None:
    """Configured for Forwarded, an X-Forwarded-For (maybe passed through) is ignored."""
    ip = by_client_ip(["10.0.0.0/8"], header="forwarded")
    request = _request("10.0.0.2", x_forwarded_for="6.6.6.6", forwarded="for=198.51.100.1")
    assert ip(request) == "ip:198.51.100.1"


def test_ipv6_clients_are_grouped_by_prefix_and_mapped_ipv4_unwrapped() -> None:
    """IPv6 peers share a /64 bucket by default; ::ffff:a.b.c.d is the IPv4 address."""
    ip = by_client_ip()
    assert ip(_request("2001:db8:1:2:aaaa::1")) == "ip:2001:db8:1:2::/64"
    assert ip(_request("2001:db8:1:2:bbbb::9")) == "ip:2001:db8:1:2::/64"
    assert ip(_request("::ffff:192.0.2.1")) == "ip:192.0.2.1"


def test_unknown_peer_has_no_ip_identity() -> None:
    """Without a peer (a Unix socket) the extractor finds nothing; rules then use their fallback."""
    assert by_client_ip()(_request(None)) is None


def test_api_key_is_hashed_by_default_and_missing_is_none() -> None:
    """The key is stored as a SHA-256 prefix (no secrets in Redis); no header means no identity."""
    extract = by_api_key("X-Api-Key")
    hashed = extract(_request("1.2.3.4", x_api_key="s3cret"))
    assert hashed is not None and hashed.startswith("key:") and "s3cret" not in hashed
    assert hashed != extract(_request("1.2.3.4", x_api_key="s3cret2"))
    assert by_api_key(hashed=False)(_request("1.2.3.4", x_api_key="s3cret")) == "key:s3cret"
    assert extract(_request("1.2.3.4")) is None


def test_user_callback_and_first_of() -> None:
    """by_user prefixes the callback's answer; first_of takes the first identity found."""
    user = by_user(lambda request: request.headers.get("x-user"))
    chain = first_of(user, by_client_ip())
    assert chain(_request("1.2.3.4", x_user="alice")) == "user:alice"
    assert chain(_request("1.2.3.4")) == "ip:1.2.3.4"


def test_asgi_and_wsgi_requests_read_alike() -> None:
    """A list field's repeated lines are read joined in order (list_value); both server
    interfaces give the same facts."""
    scope = {
        "type": "http",
        "method": "post",
        "path": "/a",
        "client": ("10.0.0.1", 5000),
        "headers": [(b"x-forwarded-for", b"1.1.1.1"), (b"X-Forwarded-For", b"2.2.2.2")],
    }
    asgi = from_asgi(scope)
    assert list_value(asgi, "x-forwarded-for") == "1.1.1.1, 2.2.2.2"
    assert (asgi.method, asgi.path, asgi.peer) == ("POST", "/a", "10.0.0.1")
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/a",
        "REMOTE_ADDR": "10.0.0.1",
        "HTTP_X_FORWARDED_FOR": "1.1.1.1, 2.2.2.2",
    }
    wsgi = from_wsgi(environ)
    assert list_value(wsgi, "x-forwarded-for") == "1.1.1.1, 2.2.2.2"
    assert (wsgi.method, wsgi.path, wsgi.peer, dict(wsgi.headers)) == (
        "POST",
        "/a",
        "10.0.0.1",
        {"x-forwarded-for": "1.1.1.1, 2.2.2.2"},
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: by_client_ip(["10.0.0.0/33"]), "10.0.0.0/33"),
        (lambda: by_client_ip(["proxy.internal"]), "proxy.internal"),
        (lambda: by_client_ip(header="x-real-ip"), "x-real-ip"),  # type: ignore[arg-type]
        (lambda: by_client_ip(ipv6_prefix=0), "ipv6_prefix"),
        (lambda: by_api_key(""), "header"),
        (lambda: by_user("alice"), "callable"),  # type: ignore[arg-type]
        (first_of, "one or more"),
    ],
)
def test_bad_identity_configuration(build: object, message: str) -> None:
    """Each bad setting is a ConfigurationError naming the offending value."""
    with pytest.raises(ConfigurationError, match=message):
        build()  # type: ignore[operator]
