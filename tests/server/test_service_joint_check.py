"""A request the over-limit cache already denies: its other descriptors are checked in one
store step (``hit_all`` at cost 0), not one store call each.

Over every backend and both twins (the ``rls`` harness), and against a service whose
store has no ``hit_all`` at all (every descriptor checked, then charged, on its own):
the same answers.
"""

from __future__ import annotations

from typing import Any

from envoy.service.ratelimit.v3 import rls_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden.server import config
from ratewarden.server.service import RateLimitService
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock
from tests.server.conftest import ALIGNED, OK, OVER, SERVICE_RULES, desc

Make = Any


def _steps(h: Any) -> list[tuple[str, list[int]]]:
    """Each store call since the last clear: its kind and the costs it asked."""
    return [(kind, [cost for _, cost in calls]) for kind, calls in h.store.steps]


def _cache_a_denial(h: Any) -> None:
    """(a, x) used up (2 a minute) and its denial remembered by the over-limit cache."""
    h.ask(desc(("a", "x")), hits=2)
    assert h.codes(desc(("a", "x"))) == [OVER, OVER]
    h.store.steps.clear()


def test_a_cached_denial_checks_the_others_in_one_store_step(rls: Make) -> None:
    h = rls(SERVICE_RULES, over_limit_cache=100)
    _cache_a_denial(h)
    response = h.ask(desc(("b", "y")), desc(("a", "x")), desc(("c", "z")))
    assert [response.overall_code, *(s.code for s in response.statuses)] == [OVER, OK, OVER, OK]
    assert [s.limit_remaining for s in response.statuses] == [5, 0, 9]
    assert response.statuses[1].duration_until_reset.seconds == 60
    if h.clustered:  # keys on three slots: a check each
        assert _steps(h) == [("hit", [0]), ("hit", [0])]
    else:
        assert _steps(h) == [("hit_all", [0, 0])]
    # The denial is still the cache's (no store call for it), and nothing was charged.
    assert [outcome.local_cache for outcome in h.hooks.outcomes[-3:]] == [False, True, False]
    assert (h.remaining(("b", "y")), h.remaining(("c", "z"))) == (5, 9)


def test_with_one_other_descriptor_the_check_is_one_hit(rls: Make) -> None:
    h = rls(SERVICE_RULES, over_limit_cache=100)
    _cache_a_denial(h)
    assert h.codes(desc(("b", "y")), desc(("a", "x"))) == [OVER, OK, OVER]
    assert _steps(h) == [("hit", [0])]


def test_an_outage_in_the_joint_check_answers_each_by_its_failure_mode(rls: Make) -> None:
    """open allows, local is checked in this process (it takes nothing: the request is
    denied), one store call for both."""
    h = rls(SERVICE_RULES, over_limit_cache=100)
    _cache_a_denial(h)
    h.outage.down = True
    codes = h.codes(desc(("local", "l")), desc(("a", "x")), desc(("open", "o")))
    assert codes == [OVER, OK, OVER, OK]
    if not h.clustered:
        assert _steps(h) == [("hit_all", [0, 0])]
    assert len(h.hooks.store_errors) == 2  # one per descriptor the step was for
    assert h.codes(desc(("local", "l")), hits=2) == [OK, OK]  # the local 2/min still there


class _NoJointStep:
    """A memory store without ``hit_all``: the service then checks and charges descriptor by
    descriptor (the path every request took before joint steps)."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.clock = inner.clock
        self.hit = inner.hit
        self.reset = inner.reset


_KEYS = [("a", "x"), ("b", "y"), ("c", "z"), ("g", "v")]
_requests = st.lists(
    st.tuples(
        st.lists(st.sampled_from(_KEYS), min_size=1, max_size=4),
        st.integers(0, 3),  # the request's hits_addend (0: 1)
        st.integers(0, 15),  # seconds to wait before it
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(requests=_requests)
def test_answers_equal_deciding_descriptor_by_descriptor(requests: Any) -> None:
    """Joint steps and joint checks (with the over-limit cache on) answer every request as
    checking then charging each descriptor on its own does, field for field."""
    rules = config.loads(SERVICE_RULES)
    clock = ManualClock(ALIGNED)
    joint = RateLimitService(rules, MemoryStore(clock=clock), over_limit_cache=100)
    alone = RateLimitService(rules, _NoJointStep(MemoryStore(clock=clock)), over_limit_cache=100)  # type: ignore[arg-type]
    for entries, hits, wait in requests:
        clock.advance(wait)
        request = rls_pb2.RateLimitRequest(
            domain="d", descriptors=[desc(entry) for entry in entries], hits_addend=hits
        )
        assert joint.should_rate_limit(request) == alone.should_rate_limit(request)
