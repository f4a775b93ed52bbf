"""RLQS end to end with a budget of changes: real Envoys, `ratewarden serve --rlqs
--rlqs-change-rounds 8`.

Over any 8 rounds (8 s) a bucket's changed shares hand out at most one full burst
(docs/rlqs.md, the budget of changes). The first Envoy's first share spends it; a second
Envoy that subscribes at once waits with DENY_ALL, the first one keeping its assignment,
until those 8 s are over; then the two hold the limit between them. No test sleeps for a
window: each polls with a deadline, and the request counts are bounded.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator

import pytest

from tests.e2e._envoy import Backend
from tests.e2e._rlqs import RLQS_FLAGS, SHARED_RULES, serving
from tests.e2e.test_rlqs import DEADLINE, first_200, held, rlqs_envoy
from tests.server_transport._process import ServeProcess

#: The budget's rounds; with --rlqs-interval 1, seconds.
K = 8


@pytest.fixture
def ratewarden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    directory = tmp_path_factory.mktemp("rlqs-change-rounds")
    with serving(directory, SHARED_RULES, *RLQS_FLAGS, "--rlqs-change-rounds", str(K)) as (server,):
        yield server


def test_a_second_envoy_waits_for_the_window_of_the_first_ones_share(
    backend: Backend, ratewarden: ServeProcess
) -> None:
    """6 a minute (M = max(6, 2) = 6). The first Envoy's share (6 of 6) hands out the whole
    budget of changes; the second's report makes it a member, but the split would hand out 6
    more: it holds DENY_ALL and the first keeps 6 of 6, sent unchanged, until K s after the
    first share, then both hold a part. What both admit stays within r*W + M*(floor(W/(K*I))
    + 2)."""
    with rlqs_envoy(backend, ratewarden) as first, rlqs_envoy(backend, ratewarden) as second:
        first_200(first, "shared")
        started = time.monotonic()
        admitted = 1
        whole = {"max_tokens": 6, "tokens_per_fill": 6}
        waiting = sorted(json.dumps(x, sort_keys=True) for x in ["deny_all", whole])
        seen_waiting = 0
        deadline = started + K + DEADLINE
        while True:
            status = second.get("/", {"x-tenant": "shared"})[0]
            if status == 200:
                admitted += 1
                break
            assert time.monotonic() < deadline, held(ratewarden, "shared")
            shares = sorted(json.dumps(x, sort_keys=True) for x in held(ratewarden, "shared"))
            seen_waiting += shares == waiting
            admitted += first.get("/", {"x-tenant": "shared"})[0] == 200
            time.sleep(0.1)
        waited = time.monotonic() - started
        assert waited >= K - 1.5, waited  # K = 1 gives it its part at the next round
        assert seen_waiting > 0
        for _ in range(10):
            admitted += first.get("/", {"x-tenant": "shared"})[0] == 200
            admitted += second.get("/", {"x-tenant": "shared"})[0] == 200
        width = time.monotonic() - started + 1  # the first share came before started
        assert admitted <= 6 / 60 * width + 6 * (math.floor(width / K) + 2)
        shares = held(ratewarden, "shared")
        assert len(shares) == 2 and all(isinstance(share, dict) for share in shares), shares
        assert sum(share["tokens_per_fill"] for share in shares) == 6  # type: ignore[index]
