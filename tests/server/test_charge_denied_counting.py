"""--charge-denied: a fixed window counts every hit charged to it, a denied call's too.

envoyproxy/ratelimit INCRBYs every descriptor of every call (unless
STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true), so a counter can pass its limit, and a
check (hits_addend 0) of a counter past it is over. Its integration tests token-quota.sh and
multiservice-tokenquota.sh rely on that: Envoy checks on the request (hits 0) and charges
when the stream is done (hits 1), and request 4 of a 2-a-minute quota is rejected. Over
every backend (memory, Redis, Cluster) and both twins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server import config
from ratewarden.server.service import RateLimitService
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock
from tests.server.conftest import ALIGNED, OK, OVER, Harness, desc

Make = Callable[..., Harness]

RULES = """\
domain: d
descriptors:
  # upstream's service_2 in its integration tests: 2 a minute, quota_mode
  - key: service
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: layered
    rate_limit:
      limits:
        - {unit: minute, requests_per_unit: 5}
        - {unit: hour, requests_per_unit: 4}
  - key: g
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: gcra}
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}
"""


def token_quota(h: Harness, requests: int) -> list[int]:
    """Upstream's /tokenquota through Envoy: a check (hits 0) on the request; an admitted
    request's stream then ends, charging 1. Each request's overall code."""
    codes = []
    for _ in range(requests):
        [code, _status] = h.codes(desc(("service", "service_2"), hits=0))
        codes.append(code)
        if code == OK:
            h.ask(desc(("service", "service_2"), hits=1))
    return codes


def test_charge_denied_rejects_the_fourth_token_quota_request(rls: Make) -> None:
    """token-quota.sh: requests 1-3 pass (the third's charge takes the counter to 3 of 2),
    the fourth is rejected, and the window's end lets requests through again."""
    h = rls(RULES, charge_denied=True)
    assert token_quota(h, 5) == [OK, OK, OK, OVER, OVER]
    h.clock.advance(60)
    assert token_quota(h, 1) == [OK]


def test_a_remembered_denial_does_not_answer_the_check(rls: Make) -> None:
    """With the over-limit cache the third charge's denial is remembered; the fourth
    request's check (hits 0) still asks the store, and the counter there is past the limit."""
    h = rls(RULES, charge_denied=True, over_limit_cache=100)
    assert token_quota(h, 4) == [OK, OK, OK, OVER]


def test_by_default_a_denied_charge_is_not_counted(rls: Make) -> None:
    """ratewarden's default: the charge that would pass the limit is denied and counts
    nothing, so the counter stays at 2 of 2 and every check fits (the budget: extension is
    the way to limit this pattern without --charge-denied)."""
    h = rls(RULES)
    assert token_quota(h, 5) == [OK] * 5


def test_a_denied_call_counts_its_hits_as_upstreams_incrby(rls: Make) -> None:
    """b at 5 a minute: 3 hits OK (2 left); 3 more are OVER_LIMIT and counted (6 of 5), so a
    request of 1 hit is OVER_LIMIT too, and a check: upstream's answers."""
    h = rls(RULES, charge_denied=True)
    assert h.ask(desc(("b", "y")), hits=3).statuses[0].limit_remaining == 2
    assert h.codes(desc(("b", "y")), hits=3) == [OVER, OVER]
    assert h.codes(desc(("b", "y"))) == [OVER, OVER]
    response = h.ask(desc(("b", "y"), hits=0))
    assert response.overall_code == OVER
    assert response.statuses[0].duration_until_reset.seconds == 60


def test_every_limit_of_a_descriptor_counts_the_denied_call(rls: Make) -> None:
    """Several limits (5 a minute, 4 an hour): the fifth hit is over the hour's limit and
    counted on both, so after the minute the hour still says over, a check included. Every
    limit counts every call, as upstream's one key per limit does: all of them, always."""
    h = rls(RULES, charge_denied=True)
    assert [h.codes(desc(("layered", "l")))[0] for _ in range(5)] == [OK] * 4 + [OVER]
    h.clock.advance(60)
    assert h.codes(desc(("layered", "l"), hits=0)) == [OVER, OVER]


def test_the_other_descriptors_of_a_denied_request_are_charged_too(rls: Make) -> None:
    """service over its quota and b beside it: each counted on its own, b charged."""
    h = rls(RULES, charge_denied=True)
    token_quota(h, 3)
    assert h.codes(desc(("service", "service_2")), desc(("b", "y"))) == [OVER, OVER, OK]
    assert h.remaining(("b", "y")) == 4


def test_bucket_and_sliding_algorithms_keep_a_denied_call_uncounted(rls: Make) -> None:
    """gcra and sliding_window: a call over the limit consumes nothing, even with
    --charge-denied (only fixed windows count past their limit), so the check after the
    limit is reached fits: the token-quota pattern needs a fixed window or a budget."""
    h = rls(RULES, charge_denied=True)
    for key in ("g", "sw"):
        assert [h.codes(desc((key, "k")))[0] for _ in range(3)] == [OK, OK, OVER]
        assert h.codes(desc((key, "k"), hits=0)) == [OK, OK]


def test_the_counters_are_not_fixed_windows_of_the_other_setting(rls: Make) -> None:
    """--charge-denied counts on counters of its own: the default's fixed window over the
    same store does not see them (a service started with the other setting counts afresh)."""
    h = rls(RULES, charge_denied=True)
    token_quota(h, 3)
    assert h.remaining(("b", "y")) == 5
    other = type(h.service)(h.service.config, h.store)
    other.hooks = h.service.hooks
    h.service = other
    assert token_quota(h, 1) == [OK]
    assert h.remaining(("service", "service_2")) == 1


def test_a_store_without_apply_keeps_the_fixed_window() -> None:
    """A custom store with only hit (no apply) keeps fixed_window's counting under
    --charge-denied: the over call is not counted, and the checks after it fit."""

    class HitOnly:
        def __init__(self) -> None:
            self.inner = MemoryStore(clock=ManualClock(ALIGNED))
            self.clock = self.inner.clock

        def hit(self, *args: Any) -> Any:
            return self.inner.hit(*args)

    service = RateLimitService(config.loads(RULES, "t.yaml"), HitOnly(), charge_denied=True)  # type: ignore[arg-type]

    def code(hits: int) -> int:
        request = rls_pb2.RateLimitRequest(
            domain="d", descriptors=[desc(("service", "service_2"), hits=hits)]
        )
        return int(service.should_rate_limit(request).overall_code)

    assert [code(1) for _ in range(3)] == [OK, OK, OVER]
    assert code(0) == OK
