"""Invariants over random inputs: identities cannot be forged, Retry-After is never early."""

from __future__ import annotations

import ipaddress
import math

from hypothesis import given
from hypothesis import strategies as st

from ratewarden.decision import Decision
from ratewarden.headers import HeaderOptions, retry_after_seconds
from ratewarden.middleware import RequestInfo, by_client_ip

TRUSTED = ["10.0.0.0/8", "fd00::/8"]
_NETWORKS = [ipaddress.ip_network(n) for n in TRUSTED]

ipv4 = st.ip_addresses(v=4).map(str)
header_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80)
forwarded_lists = st.lists(st.one_of(ipv4, header_text), max_size=6).map(", ".join)


def _untrusted(address: str) -> bool:
    parsed = ipaddress.ip_address(address)
    return not any(parsed in network for network in _NETWORKS)


@given(peer=ipv4.filter(_untrusted), xff=forwarded_lists, forwarded=header_text)
def test_an_untrusted_peer_is_always_its_own_identity(peer: str, xff: str, forwarded: str) -> None:
    """Whatever forwarding headers an untrusted peer sends, its identity is its own address."""
    for header in ("x-forwarded-for", "forwarded"):
        extract = by_client_ip(TRUSTED, header=header)  # type: ignore[arg-type]
        request = RequestInfo(
            "GET", "/", peer, {"x-forwarded-for": xff, "forwarded": forwarded}, {}
        )
        assert extract(request) == f"ip:{peer}"


@given(
    client=ipv4.filter(_untrusted),
    proxies=st.lists(st.integers(0, 2**24 - 1), min_size=1, max_size=4),
    forged=st.lists(ipv4, max_size=3),
)
def test_behind_trusted_proxies_the_first_untrusted_hop_wins(
    client: str, proxies: list[int], forged: list[str]
) -> None:
    """Anything the client wrote left of its own address never becomes its identity."""
    hops = [str(ipaddress.IPv4Address(0x0A000000 + p)) for p in proxies]
    xff = ", ".join([*forged, client, *hops[:-1]])
    request = RequestInfo("GET", "/", hops[-1], {"x-forwarded-for": xff}, {})
    assert by_client_ip(TRUSTED)(request) == f"ip:{client}"


@given(
    retry=st.floats(0.000_001, 10_000, allow_nan=False),
    jitter=st.floats(0, 100, allow_nan=False),
    draw=st.floats(0, 1, exclude_max=True),
)
def test_retry_after_is_never_early_and_jitter_is_bounded(
    retry: float, jitter: float, draw: float
) -> None:
    """ceil(retry) <= Retry-After <= ceil(retry + jitter), for any draw in [0, 1)."""
    decision = Decision(False, 1, 0, retry, retry)
    options = HeaderOptions(retry_jitter=jitter, random=lambda: draw)
    seconds = retry_after_seconds(decision, options)
    assert seconds is not None
    assert seconds >= retry
    assert math.ceil(retry) <= seconds <= math.ceil(retry + jitter)
