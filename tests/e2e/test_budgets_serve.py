"""Token budgets through a real Envoy and `ratewarden serve`, configured in the rules YAML.

Envoy (tests/budgets/envoy_budget.yaml.template) asks `ratewarden serve` twice per
request with the same ``tenant`` descriptor: with ``hits_addend: {number: 0}``
before routing (the check), and with ``apply_on_stream_done: true`` and the
upstream's ``x-tokens-used`` response header as hits once the response is done
(the charge). The budget is a descriptor's ``budget`` in the rules file; serve
runs as its own process, on the memory store and on a real redis-server.

Serve's clock cannot be a ManualClock from another process, so the budget is
small and slow: 30 tokens a minute, one token back every 2 s. The assertions
that need the budget empty run within that; the wait for a token to come back is
real and bounded.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from string import Template

import pytest

from tests._servers import HOST, RedisServer
from tests.budgets._model import TokenModel, token_model
from tests.e2e._envoy import Envoy, envoy_on
from tests.server_transport._process import ServeProcess, serving

#: Envoy -> model, checking then charging the tenant's budget: shared with tests/budgets.
BOOTSTRAP = Template(
    (Path(__file__).parents[1] / "budgets" / "envoy_budget.yaml.template").read_text()
)

RULES = """\
domain: llm
descriptors:
  - key: tenant
    budget:
      unit: minute
      tokens_per_unit: 30
      name: tenant_tokens
"""

#: Seconds for one token to come back (60 s / 30 tokens).
EMISSION_S = 2.0


@dataclass
class _Stack:
    envoy: Envoy
    serve: ServeProcess

    def get(self, tenant: str, tokens: int) -> tuple[int, dict[str, str]]:
        return self.envoy.get(f"/?tokens={tokens}", {"x-tenant": tenant})

    def remaining(self, tenant: str) -> int:
        """The tenant's tokens left, from serve's /json with a check (hits 0: charges nothing)."""
        body = {
            "domain": "llm",
            "descriptors": [{"entries": [{"key": "tenant", "value": tenant}], "hitsAddend": 0}],
        }
        request = urllib.request.Request(
            f"http://{HOST}:{self.serve.http_port}/json",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                answer = reply.read()
        except urllib.error.HTTPError as over:  # /json answers 429 when the check is over
            assert over.code == 429
            answer = over.read()
        status = json.loads(answer)["statuses"][0]
        assert status["currentLimit"]["requestsPerUnit"] == 30
        return int(status.get("limitRemaining", 0))

    def tokens_asked(self) -> float:
        """serve's total_hits for the tenant budget: every token Envoy asked it to charge."""
        url = f"http://{HOST}:{self.serve.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        prefix = (
            "ratelimit_service_rate_limit_total_hits_total"
            '{domain="llm",key="tenant",key1="tenant",key2=""}'
        )
        for line in text.splitlines():
            if line.startswith(prefix):
                return float(line.split()[-1])
        raise AssertionError(f"no {prefix} in /metrics:\n{text}")


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[_Stack]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    args: tuple[str, ...] = ()
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        server.client().flushall()
        args = ("--store", server.url, "--store-timeout", "1")  # late is not failed open
    with (
        serving(rules, *args) as serve,
        token_model() as model,
        envoy_on(BOOTSTRAP, backend=model, ratelimit=serve.grpc_port) as envoy,
    ):
        yield _Stack(envoy, serve)


def _wait_for(check: Callable[[], bool], timeout: float) -> bool:
    """Poll ``check()`` every 20 ms until true or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_serve_checks_the_budget_on_request_and_charges_reported_tokens_on_stream_done(
    stack: _Stack,
) -> None:
    """30 tokens/min: 20 used, 20 more (10 charged, empty), then 429 until a token is back."""
    assert stack.remaining("acme") == 30
    assert stack.get("acme", 20)[0] == 200
    # The charge reaches serve after the response: 20 tokens from x-tokens-used.
    assert _wait_for(lambda: stack.remaining("acme") in (10, 11), 5)
    assert stack.get("acme", 20)[0] == 200  # tokens left: admitted, and it overruns
    assert _wait_for(lambda: stack.remaining("acme") == 0, EMISSION_S)
    calls = TokenModel.calls
    status, headers = stack.get("acme", 5)
    assert status == 429 and headers.get("x-envoy-ratelimited") == "true"
    assert TokenModel.calls == calls  # refused before the model was called
    assert stack.get("other", 5)[0] == 200  # another tenant has its own budget
    # Time gives a token back (one per 2 s); the wait is real and bounded.
    started = time.monotonic()
    assert _wait_for(lambda: stack.remaining("acme") >= 1, EMISSION_S + 3)
    assert stack.get("acme", 1)[0] == 200
    assert time.monotonic() - started <= EMISSION_S + 3
    # 20 + 20 + 5 + 1 from x-tokens-used; the checks ask for 0 and the 429 charges nothing.
    assert _wait_for(lambda: stack.tokens_asked() == 46, 5), stack.tokens_asked()
    stats = stack.envoy.stats("cluster.backend.ratelimit.")
    assert stats.get("cluster.backend.ratelimit.error", 0) == 0
    assert stats.get("cluster.backend.ratelimit.over_limit", 0) == 1
