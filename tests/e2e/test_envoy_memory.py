"""HTTP through a real Envoy, limited by `ratewarden serve` on the memory store.

Each test uses its own API key value, so the tests share one stack and never
share a counter.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Stack, start_stack

RULES = """\
domain: e2e
descriptors:
  - key: api_key
    value: fixed-*
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: api_key
    value: shadow-*
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: api_key
    value: gcra-*
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 1, burst: 4}
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, stack_factory: list[Stack]) -> Stack:
    rules = tmp_path_factory.mktemp("e2e") / "rules.yaml"
    rules.write_text(RULES)
    stack_factory.append(start_stack(Path(rules), domain="e2e"))
    return stack_factory[-1]


@pytest.fixture(autouse=True)
def no_rate_limit_errors(stack: Stack) -> object:
    """After each test: Envoy never failed a rate limit call (no error, no failure mode)."""
    yield None
    stats = stack.filter_stats()
    assert stats.get("error", 0) == 0
    assert stats.get("failure_mode_allowed", 0) == 0


def test_200_until_the_limit_then_429_with_x_ratelimit_headers(stack: Stack) -> None:
    """3/hour: three 200s counting x-ratelimit-remaining down, then 429 with the same limit."""
    replies = [stack.get("fixed-one") for _ in range(5)]
    assert [status for status, _ in replies] == [200, 200, 200, 429, 429]
    assert [h["x-ratelimit-remaining"] for _, h in replies] == ["2", "1", "0", "0", "0"]
    for _, headers in replies:
        assert headers["x-ratelimit-limit"] == "3, 3;w=3600"
        assert 0 < int(headers["x-ratelimit-reset"]) <= 3600
    assert replies[3][1]["x-envoy-ratelimited"] == "true"


def test_keys_are_limited_separately(stack: Stack) -> None:
    """A wildcard rule counts each API key on its own counter."""
    assert [stack.get("fixed-two")[0] for _ in range(4)] == [200, 200, 200, 429]
    assert stack.get("fixed-three")[0] == 200


def test_a_shadow_rule_never_blocks(stack: Stack) -> None:
    """1/hour in shadow mode: every request passes, while the headers show it is over."""
    replies = [stack.get("shadow-one") for _ in range(4)]
    assert [status for status, _ in replies] == [200, 200, 200, 200]
    assert replies[-1][1]["x-ratelimit-remaining"] == "0"


def test_a_gcra_rule_admits_its_burst_then_one_per_emission_interval(stack: Stack) -> None:
    """1/second, burst 4: four back to back, then denied with x-ratelimit-reset: 1 (the wait,
    under a second, rounded up); a second later one more, then denied.

    The expectations hold when the requests are quick enough: the five within 0.9 s of the
    first one's sending, the last two within 1.9 s of it (the token after the one that
    comes back at 1 s comes at 2 s). A machine too busy for that tries again on a new key,
    three times at most."""
    for attempt in range(3):
        key = f"gcra-{attempt}"
        started = time.monotonic()
        burst = [stack.get(key) for _ in range(5)]
        elapsed = time.monotonic() - started
        if elapsed >= 0.9:
            continue  # a token may have come back before the fifth: not this test's case
        assert [status for status, _ in burst] == [200, 200, 200, 200, 429]
        assert [h["x-ratelimit-remaining"] for _, h in burst[:4]] == ["3", "2", "1", "0"]
        # The wait is under a second (less than one interval since the first request); Envoy
        # keeps the whole seconds of duration_until_reset, which ratewarden rounds up: 1,
        # never 0 ("retry now") on a 429.
        assert burst[4][1]["x-ratelimit-reset"] == "1"
        time.sleep(1.05)  # one emission interval and a margin: the only wait in this suite
        after = [stack.get(key)[0] for _ in range(2)]
        if time.monotonic() - started < 1.9:
            assert after == [200, 429]
            return
    raise AssertionError("three tries on a machine too busy for the timing this test needs")
