"""envoyproxy/ratelimit's token-quota pattern through a real Envoy and `ratewarden serve`.

Upstream's integration test token-quota.sh: Envoy asks with ``(service=service_2)`` twice
per request, with ``hits_addend: 0`` before routing (the check) and with
``hits_addend: 1`` and ``apply_on_stream_done: true`` once the response is done (the
charge); service_2 is a quota_mode rule of 2 requests. Upstream INCRBYs every call, so the
third request's charge takes the counter to 3 and the fourth request's check is over: it is
rejected. With ``--charge-denied`` (upstream's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false)
ratewarden counts the same; by default a denied charge counts nothing and every check fits.

Serve's clock is real, so the rule's window is 1000 days (epoch-aligned): none ends during
the test. Each charge reaches serve after its response; the test waits for it (polled,
bounded) before the next request.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from string import Template

import pytest

from tests._servers import HOST, RedisServer
from tests.e2e._envoy import Backend, Envoy, envoy_on
from tests.server_transport._process import ServeProcess, serving

#: Envoy -> backend, checking (hits 0) then charging on stream done (hits 1) service_2.
BOOTSTRAP = Template((Path(__file__).parent / "token-quota-bootstrap.yaml.template").read_text())

RULES = """\
domain: rl
descriptors:
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: day, unit_multiplier: 1000, requests_per_unit: 2}
"""


@dataclass
class _Stack:
    envoy: Envoy
    serve: ServeProcess

    def hits(self) -> float:
        """serve's total_hits for service_2: the hits every call asked for (checks ask 0)."""
        url = f"http://{HOST}:{self.serve.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        for line in text.splitlines():
            if line.startswith("ratelimit_service_rate_limit_total_hits_total{") and (
                'domain="rl"' in line
            ):
                return float(line.split()[-1])
        return 0.0

    def requests(self, count: int) -> list[int]:
        """``count`` requests one after the other, each after the charge of the one before
        reached serve (polled every 20 ms, for 5 s at most): their status codes."""
        codes = []
        for _ in range(count):
            charged = self.hits()
            status, _ = self.envoy.get("/tokenquota")
            codes.append(status)
            if status == 200:
                assert _wait_for(lambda charged=charged: self.hits() == charged + 1, 5)
        return codes


def _wait_for(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


@pytest.fixture
def start(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., _Stack]]:
    """``start(*serve_args, store=...)``: serve on the memory store or a real redis-server,
    a backend and Envoy in front; all stopped after the test."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    with ExitStack() as running:
        backend = Backend()
        running.callback(backend.stop)

        def make(*args: str, store: str = "memory") -> _Stack:
            if store == "redis":
                server: RedisServer = request.getfixturevalue("redis_server")
                server.client().flushall()
                args = (*args, "--store", server.url)
            serve = running.enter_context(serving(rules, *args))
            envoy = running.enter_context(
                envoy_on(BOOTSTRAP, backend=backend.port, ratelimit=serve.grpc_port)
            )
            return _Stack(envoy, serve)

        yield make


@pytest.mark.parametrize("store", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_charge_denied_rejects_the_fourth_request_as_upstream(
    start: Callable[..., _Stack], store: str
) -> None:
    """--charge-denied: requests 1-3 pass (the third's charge passes the limit), the fourth
    and fifth are rejected by their checks, as upstream's token-quota.sh expects."""
    stack = start("--charge-denied", store=store)
    assert stack.requests(5) == [200, 200, 200, 429, 429]
    stats = stack.envoy.stats("cluster.backend.ratelimit.")
    assert stats.get("cluster.backend.ratelimit.error", 0) == 0
    assert stats.get("cluster.backend.ratelimit.over_limit", 0) == 2


def test_by_default_the_pattern_never_rejects(start: Callable[..., _Stack]) -> None:
    """ratewarden's default: the third charge is denied and counts nothing, so the counter
    stays at its limit and every check fits (what a budget: rule is for)."""
    stack = start()
    assert stack.requests(5) == [200] * 5
