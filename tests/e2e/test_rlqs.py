"""RLQS end to end: real Envoys with the rate_limit_quota filter, `ratewarden serve --rlqs`.

Envoy enforces the assignments itself: after the first report it holds a token bucket
from ratewarden and answers 429 on its own. No test sleeps for a window: each polls with
a deadline of a few seconds, and the request counts are bounded. Envoy 1.40 reports every
5 s whatever its reporting_interval says; ratewarden's rounds are a second apart.
"""

from __future__ import annotations

import json
import math
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.e2e._envoy import RLQS_BOOTSTRAP, Backend, Envoy, envoy_on, start_envoy
from tests.e2e._rlqs import RLQS_FLAGS, serving
from tests.server_transport._process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
RULES = """\
domain: edge
descriptors:
  - key: tenant
    value: solo
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 3}
  - key: tenant
    value: shared
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 6}
  - key: tenant
    value: moving
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 6}
  - key: tenant
    value: watched
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 3}
    shadow_mode: true
"""
#: Seconds a test polls for a change before it fails; requests are 20 ms apart at most.
DEADLINE = 6.0


@pytest.fixture(scope="module")
def ratewarden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serving(tmp_path_factory.mktemp("rlqs"), RULES, *RLQS_FLAGS) as (server,):
        yield server


def rlqs_envoy(backend: Backend, ratewarden: ServeProcess) -> AbstractContextManager[Envoy]:
    """An Envoy whose buckets (by x-tenant) deny until their first assignment."""
    return envoy_on(
        RLQS_BOOTSTRAP,
        backend=backend.port,
        ratewarden=ratewarden.grpc_port,
        domain="edge",
        no_assignment="DENY_ALL",
    )


def first_200(proxy: Envoy, tenant: str) -> int:
    """Poll until Envoy admits one request for ``tenant`` (its assignment arrived); the
    number of 429s before it."""
    deadline = time.monotonic() + DEADLINE
    denied = 0
    while time.monotonic() < deadline:
        status, _ = proxy.get("/", {"x-tenant": tenant})
        if status == 200:
            return denied
        assert status == 429
        denied += 1
        time.sleep(0.02)
    raise AssertionError(f"Envoy admitted nothing for {tenant!r} within {DEADLINE} s")


def test_envoy_enforces_the_assigned_token_bucket_and_keeps_it_across_rounds(
    backend: Backend, ratewarden: ServeProcess
) -> None:
    """3 a minute: 429 until the assignment (no_assignment DENY_ALL), then exactly 3 x 200,
    then 429 for the next 1.5 s: the rounds re-send the same bucket, which Envoy keeps
    rather than starting a full new one."""
    with rlqs_envoy(backend, ratewarden) as proxy:
        first_200(proxy, "solo")
        statuses = [proxy.get("/", {"x-tenant": "solo"})[0] for _ in range(5)]
        assert statuses == [200, 200, 429, 429, 429]
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            assert proxy.get("/", {"x-tenant": "solo"})[0] == 429
            time.sleep(0.05)
        assert proxy.get("/")[0] == 200  # no x-tenant: no bucket, not limited


def test_two_envoys_share_one_limit_within_the_stated_bound(
    backend: Backend, ratewarden: ServeProcess
) -> None:
    """6 a minute between two Envoys: the second gets a share at the next round, and what
    both admit stays within r*W + M*(floor(W/I) + 2) (docs/rlqs.md), M = max(6, 2)."""
    with rlqs_envoy(backend, ratewarden) as first, rlqs_envoy(backend, ratewarden) as second:
        started = time.monotonic()
        admitted = 0
        first_200(first, "shared")
        admitted += 1
        admitted += sum(first.get("/", {"x-tenant": "shared"})[0] == 200 for _ in range(10))
        first_200(second, "shared")  # a share moved to the newcomer
        admitted += 1
        for _ in range(10):
            admitted += first.get("/", {"x-tenant": "shared"})[0] == 200
            admitted += second.get("/", {"x-tenant": "shared"})[0] == 200
        width = time.monotonic() - started
        assert admitted <= 6 / 60 * width + 6 * (math.floor(width) + 2)
        assert first.get("/", {"x-tenant": "shared"})[0] == 429
        assert second.get("/", {"x-tenant": "shared"})[0] == 429


def held(server: ServeProcess, tenant: str) -> list[object]:
    """What each stream holds for the bucket ``{tenant: ...}``, from ``/rlqs.json``."""
    url = f"http://127.0.0.1:{server.http_port}/rlqs.json"
    with urllib.request.urlopen(url, timeout=2) as reply:
        state = json.load(reply)
    return [
        entry["assignment"]
        for entry in state["assignments"]
        if entry["bucket"] == {"tenant": tenant}
    ]


def test_when_one_envoy_goes_quiet_its_share_moves_to_the_busy_one(
    backend: Backend, ratewarden: ServeProcess
) -> None:
    """Both Envoys ask: both hold a part of the 6 a minute. Then only one asks (about 10 a
    second, far over the limit): once the quiet one's last 2 reports count nothing (Envoy 1.40
    reports every 5 s: within 3 reports, 15 s, and a round) it holds DENY_ALL and the busy one
    all 6 (docs/rlqs.md, how fast shares move)."""
    with rlqs_envoy(backend, ratewarden) as quiet, rlqs_envoy(backend, ratewarden) as busy:
        first_200(quiet, "moving")
        first_200(busy, "moving")
        deadline = time.monotonic() + DEADLINE
        while len(held(ratewarden, "moving")) < 2:  # the newcomer's round
            assert time.monotonic() < deadline, held(ratewarden, "moving")
            quiet.get("/", {"x-tenant": "moving"})
            busy.get("/", {"x-tenant": "moving"})
            time.sleep(0.04)
        both = held(ratewarden, "moving")
        assert all(isinstance(share, dict) for share in both), both
        assert sum(share["tokens_per_fill"] for share in both) == 6  # type: ignore[index]
        deadline = time.monotonic() + 3 * 5 + 1.25 + 3  # 3 s of slack on a shared machine
        moved = sorted(json.dumps(x) for x in ["deny_all", {"max_tokens": 6, "tokens_per_fill": 6}])
        while sorted(json.dumps(x, sort_keys=True) for x in held(ratewarden, "moving")) != moved:
            assert time.monotonic() < deadline, held(ratewarden, "moving")
            busy.get("/", {"x-tenant": "moving"})
            time.sleep(0.1)


def test_a_shadow_rule_allows_all_and_counts_what_it_would_have_denied(
    backend: Backend, ratewarden: ServeProcess
) -> None:
    """shadow_mode: Envoy is assigned ALLOW_ALL (20 x 200 for a rule of 3 a minute); at its next
    report (5 s in Envoy 1.40) ratewarden counts the requests beyond the would-be share."""
    url = f"http://127.0.0.1:{ratewarden.http_port}/rlqs.json"

    def would_deny() -> int:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return int(json.load(reply)["stats"]["would_deny"])

    before = would_deny()
    with rlqs_envoy(backend, ratewarden) as proxy:
        first_200(proxy, "watched")
        assert held(ratewarden, "watched") == ["allow_all"]
        statuses = [proxy.get("/", {"x-tenant": "watched"})[0] for _ in range(20)]
        assert statuses == [200] * 20
        deadline = time.monotonic() + 5 + 1.25 + 3
        while would_deny() - before < 20 - 3 - 1:  # 3 tokens, at most 1 refilled in 6 s
            assert time.monotonic() < deadline, would_deny() - before
            time.sleep(0.2)


def poll(proxy: Envoy, tenant: str, wanted: int, within: float = DEADLINE) -> list[int]:
    """Requests for ``tenant`` 20 ms apart until one answers ``wanted`` (``within`` seconds at
    most); the statuses seen."""
    deadline = time.monotonic() + within
    seen: list[int] = []
    while time.monotonic() < deadline:
        seen.append(proxy.get("/", {"x-tenant": tenant})[0])
        if seen[-1] == wanted:
            return seen
        time.sleep(0.02)
    raise AssertionError(f"no {wanted} for {tenant!r} within {within} s: {seen}")


def test_a_reload_that_changes_only_a_rules_period_reaches_envoy(
    backend: Backend, tmp_path: Path
) -> None:
    """10 a second, then 10 an hour: the token bucket keeps its max_tokens and
    tokens_per_fill, and Envoy compares a new bucket with the one it holds by those and its
    fill_interval's nanos alone. The assignment still differs in what Envoy compares, so
    Envoy takes the new bucket: within a few rounds of the reload it admits nothing for a
    whole second (on the old bucket it would keep admitting 10 a second)."""
    rules = (
        "domain: edge\ndescriptors:\n  - key: tenant\n    value: period\n"
        "    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 10}\n"
    )
    flags = (*RLQS_FLAGS, "--reload-interval", "0.2")
    with (
        serving(tmp_path, rules, *flags) as (server,),
        rlqs_envoy(backend, server) as proxy,
    ):
        first_200(proxy, "period")
        (tmp_path / "rules.yaml").write_text(rules.replace("unit: second", "unit: hour"))
        deadline = time.monotonic() + DEADLINE
        while not any(line.get("event") == "config_reloaded" for line in server.logs()):
            assert time.monotonic() < deadline, "the rules were not reloaded"
            time.sleep(0.05)
        deadline = time.monotonic() + DEADLINE
        last_200 = time.monotonic()
        while time.monotonic() - last_200 < 1.0:
            assert time.monotonic() < deadline, "Envoy kept the bucket of 10 a second"
            if proxy.get("/", {"x-tenant": "period"})[0] == 200:
                last_200 = time.monotonic()
            time.sleep(0.02)


def test_ratewarden_stopped_gracefully_hands_over_and_a_restart_enforces_again(
    backend: Backend, tmp_path: Path
) -> None:
    """docs/rlqs.md, stopping: on SIGTERM ratewarden sends Envoy its assignment again with a
    TTL of 0, so Envoy falls back at once (no expired_assignment_behavior here: its
    no_assignment_behavior, ALLOW_ALL: 200), not when the 30 s --rlqs-ttl runs out;
    restarted on the same port, it takes Envoy's next report (5 s apart in Envoy 1.40) as a
    new subscription and Envoy enforces again."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    options = ("--rlqs", "--rlqs-interval", "1", "--rlqs-ttl", "30")
    first = ServeProcess(rules, *options)
    port = {"RATEWARDEN_GRPC_PORT": str(first.grpc_port)}
    try:
        first.wait_serving()
        with envoy_on(
            RLQS_BOOTSTRAP,
            backend=backend.port,
            ratewarden=first.grpc_port,
            domain="edge",
            no_assignment="ALLOW_ALL",
        ) as proxy:
            poll(proxy, "solo", 429)  # allowed until the assignment, then its 3 tokens spent
            stopping = time.monotonic()
            assert first.signal(signal.SIGTERM) == 0
            seen = poll(proxy, "solo", 200)  # expired at once: no assignment, ALLOW_ALL
            assert time.monotonic() - stopping < DEADLINE < 30, seen
            assert any(line.get("event") == "rlqs_hand_over" for line in first.logs())
            again = ServeProcess(rules, *options, env=port)
            try:
                again.wait_serving()
                poll(proxy, "solo", 429)  # Envoy resubscribed and enforces a new bucket
            finally:
                again.stop()
    finally:
        first.stop()


def test_ratewarden_killed_leaves_envoy_on_its_assignment_until_the_ttl(
    backend: Backend, tmp_path: Path
) -> None:
    """A crash (SIGKILL) hands nothing over: Envoy keeps its assignment until --rlqs-ttl
    (still 429), then falls back to no_assignment_behavior (ALLOW_ALL here: 200).

    The last renewal reached Envoy at most 1.25 s (a round and a tick) before the kill on an
    idle machine, later when a busy one delays a round: allowing 2 s for that, the 6 s TTL
    cannot run out before 4 s after the kill; it runs out 6 s after the last renewal."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    server = ServeProcess(rules, "--rlqs", "--rlqs-interval", "1", "--rlqs-ttl", "6")
    try:
        server.wait_serving()
        with envoy_on(
            RLQS_BOOTSTRAP,
            backend=backend.port,
            ratewarden=server.grpc_port,
            domain="edge",
            no_assignment="ALLOW_ALL",
        ) as proxy:
            poll(proxy, "solo", 429)
            stopping = time.monotonic()
            server.signal(signal.SIGKILL)
            held = [proxy.get("/", {"x-tenant": "solo"})[0] for _ in range(3)]
            assert time.monotonic() - stopping < 4, "the kill took too long to tell"
            assert held == [429, 429, 429]  # ratewarden is gone; the assignment holds
            seen = poll(proxy, "solo", 200, 6 + DEADLINE)  # TTL out: no assignment, ALLOW_ALL
            assert time.monotonic() - stopping >= 4, seen
    finally:
        server.stop()


def test_the_example_runs_as_written_with_the_example_rules(
    backend: Backend, tmp_path: Path
) -> None:
    """examples/envoy-rlqs.yaml (ports changed) over `ratewarden serve --rlqs --config
    examples/ratelimit.yaml`: an API key of 100 a minute is held to a couple at once."""
    bootstrap = (ROOT / "examples" / "envoy-rlqs.yaml").read_text()
    ports = {"10000": "listener", "8000": "backend", "8081": "ratewarden", "9901": "admin"}
    assert sorted(re.findall(r"port_value: (\d+)", bootstrap)) == sorted(ports)
    server = ServeProcess(ROOT / "examples" / "ratelimit.yaml", "--rlqs")
    try:
        server.wait_serving()

        def fill(listener: int, admin: int) -> str:
            actual = {"listener": listener, "backend": backend.port}
            actual |= {"ratewarden": server.grpc_port, "admin": admin}
            filled = bootstrap
            for port, name in ports.items():
                filled = filled.replace(f"port_value: {port}", f"port_value: {actual[name]}")
            return filled

        proxy = start_envoy(fill)
        try:
            statuses = []
            deadline = time.monotonic() + DEADLINE
            while 429 not in statuses and time.monotonic() < deadline:
                sent = time.monotonic()
                statuses.append(proxy.get("/", {"x-api-key": "abc"})[0])
            assert 429 in statuses, statuses  # allowed until the assignment, then 2 tokens
            # then 100 a minute refill (a token per 0.6 s): at most one more 200 among the
            # answers back within half a second of the 429's sending. An answer later than
            # that (a busy machine) may have come after a second token: not counted.
            end = sent + 0.5
            after = []
            while time.monotonic() < end:
                status = proxy.get("/", {"x-api-key": "abc"})[0]
                if time.monotonic() < end:
                    after.append(status)
                time.sleep(0.02)
            assert after.count(200) <= 1, after
        finally:
            proxy.stop()
    finally:
        server.stop()
