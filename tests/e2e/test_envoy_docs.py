"""docs/envoy.md, run as written: its Envoy bootstrap and its rules, only the ports changed.

The two-tier setup: the local token bucket dark-launched (counting, not enforcing) until the
runtime flips it, then the global filter asking ratewarden, with the route actions that build
the descriptors.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e._envoy import Backend, Envoy, start_envoy
from tests.server_transport._process import ServeProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "envoy.md"
#: The ports the page uses: listener, backend, ratewarden's gRPC, Envoy admin.
DOC_PORTS = {"listener": 10000, "backend": 8000, "ratewarden": 8081, "admin": 9901}
LOCAL = "http_local_rate_limiter.http_local_rate_limit."


def doc_block(name: str) -> str:
    """The fenced block of docs/envoy.md whose info string is ``yaml <name>``."""
    blocks = re.findall(rf"^```yaml {re.escape(name)}\n(.*?)^```", DOC.read_text(), re.M | re.S)
    assert len(blocks) == 1, f"docs/envoy.md should have exactly one ```yaml {name} block"
    return str(blocks[0])


@dataclass
class DocStack:
    envoy: Envoy
    ratewarden: ServeProcess
    backend: Backend

    def get(self, path: str, api_key: str | None = None) -> tuple[int, dict[str, str]]:
        return self.envoy.get(path, {"x-api-key": api_key} if api_key else {})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocStack]:
    """The page's configuration with free ports; the module's tests share it."""
    rules = tmp_path_factory.mktemp("docs") / "ratewarden.yaml"
    rules.write_text(doc_block("ratewarden.yaml"))
    bootstrap = doc_block("envoy.yaml")
    assert sorted(map(int, re.findall(r"port_value: (\d+)", bootstrap))) == sorted(
        DOC_PORTS.values()
    ), "the page's bootstrap uses other ports than this test replaces"
    backend = Backend()
    ratewarden = ServeProcess(rules)
    envoy = None
    try:
        ratewarden.wait_serving()

        def fill(listener: int, admin: int) -> str:
            actual = {
                "listener": listener,
                "backend": backend.port,
                "ratewarden": ratewarden.grpc_port,
                "admin": admin,
            }
            filled = bootstrap
            for name, port in DOC_PORTS.items():
                filled = filled.replace(f"port_value: {port}}}", f"port_value: {actual[name]}}}")
            return filled

        envoy = start_envoy(fill)
        yield DocStack(envoy, ratewarden, backend)
    finally:
        if envoy is not None:
            envoy.stop()
        ratewarden.stop()
        backend.stop()


def fresh_window(
    stack: DocStack, path: str, api_key: str
) -> tuple[str, tuple[int, dict[str, str]]]:
    """The key to use and its first reply, moved past a minute boundary if one is near.

    The api_key rule is envoyproxy/ratelimit's epoch-aligned fixed window: counting five
    requests across the boundary would see two windows. At most one short wait.
    """
    reply = stack.get(path, api_key)
    reset = int(reply[1]["x-ratelimit-reset"])
    if reset < 3:
        time.sleep(reset + 0.2)
        api_key += "-next"
        reply = stack.get(path, api_key)
    return api_key, reply


def test_the_ratelimit_cluster_health_check_passes(stack: DocStack) -> None:
    """Envoy's grpc_health_check on the ratelimit cluster gets SERVING from ratewarden."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if stack.envoy.stats("cluster.ratelimit.health_check.success").get(
            "cluster.ratelimit.health_check.success", 0
        ):
            break
        time.sleep(0.1)
    stats = stack.envoy.stats("cluster.ratelimit.health_check.")
    assert stats["cluster.ratelimit.health_check.success"] >= 1
    assert stats["cluster.ratelimit.health_check.failure"] == 0


def test_an_api_key_gets_5_per_minute_then_429_with_headers(stack: DocStack) -> None:
    """GET / with x-api-key: five 200s, then 429 with x-ratelimit-* from ratewarden's answer."""
    key, first = fresh_window(stack, "/", "k1")
    replies = [first] + [stack.get("/", key) for _ in range(5)]
    assert [status for status, _ in replies] == [200, 200, 200, 200, 200, 429]
    assert [h["x-ratelimit-remaining"] for _, h in replies] == ["4", "3", "2", "1", "0", "0"]
    # DRAFT_VERSION_03: the binding limit, then every policy of the call (api_key, address).
    assert replies[-1][1]["x-ratelimit-limit"] == "5, 5;w=60, 50;w=1"
    assert replies[-1][1]["x-envoy-ratelimited"] == "true"
    assert "x-local-rate-limit" not in replies[-1][1]


def test_checkout_adds_a_gcra_burst_per_key(stack: DocStack) -> None:
    """GET /checkout: the nested (generic_key=checkout, api_key) rule allows a burst of 2."""
    replies = [stack.get("/checkout", "k2") for _ in range(3)]
    assert [status for status, _ in replies] == [200, 200, 429]
    assert replies[-1][1]["x-ratelimit-limit"] == "1, 5;w=60, 1;w=1, 50;w=1"
    assert replies[-1][1]["x-ratelimit-remaining"] == "0"


def test_without_an_api_key_only_the_shadow_rule_applies(stack: DocStack) -> None:
    """No x-api-key: only (remote_address) is sent, whose rule is in shadow mode: never 429."""
    assert {stack.get("/")[0] for _ in range(5)} == {200}


def test_the_local_tier_counts_in_the_dark_then_enforces_after_the_runtime_flip(
    stack: DocStack,
) -> None:
    """0% enforced: the bucket rate-limits in its stats but every request passes; at 100%: 429s."""
    before = stack.envoy.stats(LOCAL).get(LOCAL + "rate_limited", 0)
    # 60 requests outrun the bucket (20 tokens, 20 more per second) whatever this machine's speed.
    dark = [stack.get("/")[0] for _ in range(60)]
    stats = stack.envoy.stats(LOCAL)
    assert set(dark) == {200}
    assert stats[LOCAL + "rate_limited"] > before
    assert stats.get(LOCAL + "enforced", 0) == 0
    stack.envoy.runtime(local_rate_limit_enforced=100)
    try:
        lit = [stack.get("/") for _ in range(60)]
    finally:
        stack.envoy.runtime(local_rate_limit_enforced=0)
    limited = [headers for status, headers in lit if status == 429]
    assert limited, "no request was rejected with the local tier enforced"
    assert all(h.get("x-local-rate-limit") == "true" for h in limited)
    assert all("x-ratelimit-limit" not in h for h in limited)
    assert stack.envoy.stats(LOCAL)[LOCAL + "enforced"] == len(limited)
