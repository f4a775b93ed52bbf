"""The global quota mode (``quota_mode=True``; ``--quota-mode``, upstream's ``QUOTA_MODE``).

Every descriptor but an unlimited one is then a quota descriptor, as envoyproxy/ratelimit
counts them: a request is denied only when all of them are over. A descriptor without a
rule, or a shadow rule's, is one that is never over. Each descriptor's own status is
unchanged, and the descriptors with room are charged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from tests._servers import HOST
from tests.server.conftest import OK, OVER, Harness, desc
from tests.upstream._serve import serve_rules

Make = Callable[..., Harness]

RULES = """
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: g
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra}
  - key: free
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
"""


def test_one_descriptor_over_no_longer_denies_and_the_others_are_charged(rls: Make) -> None:
    """a is over, b has room: OK overall, a's status still OVER, and b pays its hit."""
    h = rls(RULES, quota_mode=True)
    h.ask(desc(("a", "x")))
    assert h.codes(desc(("a", "x")), desc(("b", "y"))) == [OK, OVER, OK]
    assert h.remaining(("b", "y")) == 2


def test_every_descriptor_over_denies(rls: Make) -> None:
    """a and b both over (on two algorithms too): the request is denied."""
    h = rls(RULES, quota_mode=True)
    h.ask(desc(("a", "x")))
    h.ask(desc(("g", "x")))
    assert h.codes(desc(("a", "x")), desc(("g", "x"))) == [OVER, OVER, OVER]
    assert h.codes(desc(("a", "x"))) == [OVER, OVER]


def test_descriptors_without_a_rule_or_in_shadow_mode_count_as_never_over(rls: Make) -> None:
    """As upstream counts them: beside one of them, a descriptor over never denies."""
    h = rls(RULES, quota_mode=True)
    h.ask(desc(("a", "x")))
    h.ask(desc(("shadow", "s")))
    assert h.codes(desc(("a", "x")), desc(("nope", "n"))) == [OK, OVER, OK]
    assert h.codes(desc(("a", "x")), desc(("shadow", "s"))) == [OK, OVER, OK]
    assert h.codes(desc(("nope", "n"))) == [OK, OK]


def test_unlimited_descriptors_are_not_counted(rls: Make) -> None:
    """An unlimited descriptor is no quota descriptor: a over beside it still denies."""
    h = rls(RULES, quota_mode=True)
    h.ask(desc(("a", "x")))
    assert h.codes(desc(("a", "x")), desc(("free", "f"))) == [OVER, OVER, OK]


def test_a_zero_limit_beside_room_lets_the_request_through_and_charges(rls: Make) -> None:
    """A limit of 0 is over; with b beside it the request passes and b is charged."""
    h = rls(RULES, quota_mode=True)
    assert h.codes(desc(("zero", "z")), desc(("b", "y"))) == [OK, OVER, OK]
    assert h.remaining(("b", "y")) == 2
    assert h.codes(desc(("zero", "z"))) == [OVER, OVER]


def test_off_by_default(rls: Make) -> None:
    """Without the switch one descriptor over denies the request and charges none."""
    h = rls(RULES)
    h.ask(desc(("a", "x")))
    assert h.codes(desc(("a", "x")), desc(("b", "y"))) == [OVER, OVER, OK]
    assert h.remaining(("b", "y")) == 3


def test_serve_on_upstreams_quota_mode_variable_alone(tmp_path: Path) -> None:
    """QUOTA_MODE=true alone (no RATEWARDEN_* setting): through ``ratewarden serve``'s gRPC
    port, a over beside b passes, then both over deny."""
    with (
        serve_rules(tmp_path, RULES, QUOTA_MODE="true") as (_, grpc_port),
        grpc.insecure_channel(f"{HOST}:{grpc_port}") as channel,
    ):
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)

        def codes(*descriptors: Any) -> list[int]:
            request = rls_pb2.RateLimitRequest(domain="d", descriptors=list(descriptors))
            answer = stub.ShouldRateLimit(request, timeout=5)
            return [answer.overall_code, *(status.code for status in answer.statuses)]

        assert codes(desc(("a", "x"))) == [OK, OK]
        assert codes(desc(("a", "x")), desc(("b", "y"))) == [OK, OVER, OK]
        assert codes(desc(("a", "x")), desc(("zero", "z"))) == [OVER, OVER, OVER]
