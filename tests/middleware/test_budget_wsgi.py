"""Token budgets from the WSGI middleware: Flask (its test client and a real werkzeug server)
and Django's own WSGI handler, on memory and on a real redis-server.

The request bodies are ``test_budget_wsgi_body``'s; the options both flavours share,
``test_budget_options``'s.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings
from werkzeug.serving import make_server
from werkzeug.test import Client as WerkzeugClient

from ratewarden import MemoryStore
from ratewarden.budgets import Usage
from ratewarden.middleware import (
    WSGITokenBudgetMiddleware,
    by_api_key,
)
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._django import configure_django
from tests._metrics import Recorded
from tests._servers import HOST, STORE_TIMEOUT, RedisServer, SilentServer, free_port
from tests.middleware._budget_apps import (
    KEY,
    LIMITS,
    NO_BODY,
    Actual,
    Recording,
    ask,
    estimate,
    flask_app,
)

if not settings.configured:
    configure_django()

from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse
from django.test.utils import override_settings
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["memory", "redis"])
def budget(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[Recording]:
    """10,000 tokens/min on the memory store or a real redis-server, under a ManualClock."""
    clock = ManualClock()
    if request.param == "memory":
        yield Recording(MemoryStore(clock=clock), LIMITS, max_output_tokens=4000)
        return
    redis_server.client().flushall()
    store = RedisStore.from_url(redis_server.url, clock=clock, timeout=2.0)
    try:
        yield Recording(store, LIMITS, max_output_tokens=4000)
    finally:
        store.close()


@pytest.fixture
def memory_budget() -> Recording:
    """10,000 tokens/min on the memory store, under a ManualClock."""
    return Recording(MemoryStore(clock=ManualClock()), LIMITS, max_output_tokens=4000)


def test_reserve_4000_settle_at_1500_leaves_8500(budget: Recording) -> None:
    """The worked example on Flask: 4,000 reserved, the response reports 1,500, and that very
    response says 8,500 left; the app got the body it was sent; one settlement, of 1,500."""
    served = flask_app(budget)
    sent = json.dumps(ask(1000, 3000, 500)).encode()
    response = served.client().post("/v1/chat", data=sent, headers=KEY)
    assert response.status_code == 200
    assert served.bodies == [sent]
    assert response.headers["x-tokens-used"] == "1500"
    assert response.headers["x-ratelimit-limit-tokens"] == "10000"
    assert response.headers["x-ratelimit-remaining-tokens"] == "8500"
    assert response.headers["x-ratelimit-remaining-requests"] == "99"
    assert '"tokens";q=10000;w=60;qu="tokens"' in response.headers["RateLimit-Policy"]
    assert [u.amount("tokens") for u in budget.settled] == [1500]
    assert budget.tokens_left() == 8500


def test_a_stream_settles_with_actual_once_its_body_is_sent(budget: Recording) -> None:
    """``actual`` reads what the generator left in the environ at its end; the response's
    headers are the reservation's, and the refund shows in the next request's headers."""
    actual = Actual()
    served = flask_app(budget, actual=actual)
    client = served.client()
    response = client.post("/v1/stream", json=ask(200, 3800, 300), headers=KEY)
    assert response.get_data() == b"tok tok tok "
    assert response.headers["x-ratelimit-remaining-tokens"] == "6000"
    assert len(actual.calls) == 1
    assert ("Content-Type", "text/html; charset=utf-8") in actual.calls[0]
    assert [u.amount("tokens") for u in budget.settled] == [500]
    assert budget.tokens_left() == 9500
    # With ``actual`` the usage header is not read: the next request is settled at its end.
    after = client.post("/v1/chat", json=ask(100, 100, 0), headers=KEY)
    assert after.headers["x-ratelimit-remaining-tokens"] == "9300"


def test_without_a_usage_report_the_estimate_stands(
    memory_budget: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    """No usage header, or a malformed one, settles at the estimate (logged when malformed)."""
    served = flask_app(memory_budget)
    client = served.client()
    # Read to the end: a WSGI response is settled when the server has iterated it all.
    client.post("/v1/chat", json=ask(500, 1500, 10, silent=True), headers=KEY).get_data()
    assert memory_budget.tokens_left() == 8000
    with caplog.at_level(logging.WARNING, logger="ratewarden.middleware"):
        client.post("/v1/chat", json=ask(500, 1500, 10, report="lots"), headers=KEY).get_data()
    assert memory_budget.tokens_left() == 6000
    assert "x-tokens-used 'lots' is not a whole number" in caplog.text
    assert [u.amount("tokens") for u in memory_budget.settled] == [2000, 2000]


def test_an_app_that_raises_settles_at_the_estimate(budget: Recording) -> None:
    """The view raises (propagated by Flask): the exception reaches the caller, and the
    reservation is settled once, at its estimate."""
    served = flask_app(budget)
    with pytest.raises(RuntimeError, match="the endpoint failed"):
        served.client().post("/v1/fail", json=ask(1000, 3000, 0), headers=KEY)
    assert served.calls == ["fail"]
    assert [u.amount("tokens") for u in budget.settled] == [4000]
    assert budget.tokens_left() == 6000


def test_a_stream_that_fails_midway_settles_at_the_estimate(memory_budget: Recording) -> None:
    """The generator raises after its first chunk: ``actual`` is never asked, and closing the
    response settles at the estimate, once."""
    actual = Actual()
    served = flask_app(memory_budget, actual=actual)
    response = served.client().post(
        "/v1/stream", json=ask(200, 3800, 300, fail_at=1), headers=KEY, buffered=False
    )
    with pytest.raises(RuntimeError, match="the model went away"):
        response.get_data()
    response.close()
    assert actual.calls == []
    assert [u.amount("tokens") for u in memory_budget.settled] == [4000]
    assert memory_budget.tokens_left() == 6000


def test_a_response_closed_before_its_end_settles_at_the_estimate_once(
    memory_budget: Recording,
) -> None:
    """The client goes away after the first chunk (the server closes the response): the
    estimate stands, ``actual`` is not asked, and a second close settles nothing more."""
    actual = Actual()
    served = flask_app(memory_budget, actual=actual)
    response = served.client().post(
        "/v1/stream", json=ask(200, 3800, 300), headers=KEY, buffered=False
    )
    assert memory_budget.settled == []  # the first chunk is out; the stream is not over
    response.close()
    response.close()
    assert actual.calls == []
    assert [u.amount("tokens") for u in memory_budget.settled] == [4000]
    assert memory_budget.tokens_left() == 6000


def test_a_spent_budget_is_refused_before_the_app(budget: Recording) -> None:
    """After 9,000 of 10,000 tokens, a 4,000-token estimate gets a 429 with the provider
    headers and Retry-After, and the app never runs; a HEAD gets the same headers, no body."""
    served = flask_app(budget)
    client = served.client()
    first = client.post("/v1/chat", json=ask(5000, 4000, 4000), headers=KEY)
    refused = client.post("/v1/chat", json=ask(1000, 3000, 10), headers=KEY)
    head = client.head("/v1/models", headers=KEY)
    assert first.headers["x-ratelimit-remaining-tokens"] == "1000"
    assert refused.status_code == 429
    assert served.calls == ["chat"]
    assert refused.headers["x-ratelimit-remaining-tokens"] == "1000"
    assert refused.headers["x-ratelimit-limit-requests"] == "100"
    assert int(refused.headers["Retry-After"]) >= 18  # 3,000 tokens at 10,000/min
    assert refused.headers["Cache-Control"] == "no-store"
    problem = json.loads(refused.get_data())
    assert problem["status"] == 429 and "'budget' exceeded" in problem["detail"]
    assert head.status_code == 429 and head.get_data() == b""
    assert int(head.headers["Content-Length"]) > 0  # the document a GET would have had
    assert int(head.headers["Retry-After"]) >= 3  # 500 more tokens at 10,000/min
    assert budget.settled == [Usage.of(5000, 4000)]
    assert budget.tokens_left() == 1000


def test_head_on_a_budgeted_route_is_reserved_with_headers_and_no_body(
    memory_budget: Recording,
) -> None:
    """A HEAD is budgeted like its GET: the estimate reserved, the budget headers sent,
    no body; without a usage report the estimate stands."""
    served = flask_app(memory_budget)
    response = served.client().head("/v1/models", headers=KEY)
    assert response.status_code == 200 and response.get_data() == b""
    assert response.headers["x-ratelimit-remaining-tokens"] == "8500"
    assert memory_budget.settled == [NO_BODY]


def test_paths_and_methods_select_the_budgeted_requests(memory_budget: Recording) -> None:
    """Outside ``paths``, or a method not in ``methods``, the app runs unbudgeted."""
    served = flask_app(memory_budget, methods=["POST"])
    client = served.client()
    health = client.get("/health", headers=KEY)
    models = client.get("/v1/models", headers=KEY)
    chat = client.post("/v1/chat", json=ask(100, 100, 50), headers=KEY)
    assert health.status_code == models.status_code == chat.status_code == 200
    assert "x-ratelimit-remaining-tokens" not in health.headers
    assert "x-ratelimit-remaining-tokens" not in models.headers
    assert chat.headers["x-ratelimit-remaining-tokens"] == "9850"
    assert served.calls == ["models", "chat"]


@pytest.fixture(params=["silent", "refused"])
def dead_store(request: pytest.FixtureRequest) -> Iterator[RedisStore]:
    """A RedisStore on a port that accepts and never answers, or on which nothing listens."""
    silent = SilentServer() if request.param == "silent" else None
    port = silent.port if silent is not None else free_port()
    store = RedisStore.from_url(f"redis://{HOST}:{port}/0", timeout=STORE_TIMEOUT)
    try:
        yield store
    finally:
        store.close()
        if silent is not None:
            silent.close()


@pytest.mark.redis
@pytest.mark.parametrize("failure_mode", ["open", "closed"])
def test_a_store_that_does_not_answer_gets_the_failure_mode(
    dead_store: RedisStore, failure_mode: str
) -> None:
    """Open: the app runs with nothing reserved and no budget headers; closed: 503 with
    Retry-After and the app never runs. Counted under the middleware's name either way."""
    metrics = Recorded()
    budget = Recording(dead_store, LIMITS, max_output_tokens=4000)
    served = flask_app(budget, failure_mode=failure_mode, metrics=metrics, name="llm")
    response = served.client().post("/v1/chat", json=ask(100, 100, 50), headers=KEY)
    names = [n.lower() for n in response.headers.keys()]  # noqa: SIM118 (werkzeug Headers)
    assert not [n for n in names if n.startswith(("ratelimit", "x-ratelimit"))]
    if failure_mode == "open":
        assert response.status_code == 200 and served.calls == ["chat"]
    else:
        assert response.status_code == 503 and served.calls == []
        assert response.headers["Retry-After"] == "1"
        assert json.loads(response.get_data())["status"] == 503
    assert budget.settled == []
    assert metrics.degraded_calls == [("llm", failure_mode, "StorageUnavailableError")]


@csrf_exempt
def django_chat(request: HttpRequest) -> HttpResponse:
    asked = json.loads(request.body)
    used = asked["prompt_tokens"] + asked["reply_tokens"]
    return HttpResponse(json.dumps({"echo": asked}), headers={"x-tokens-used": str(used)})


urlpatterns = [path("v1/chat", django_chat)]


@override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"])
def test_django_s_wsgi_handler_reads_the_body_and_is_settled(budget: Recording) -> None:
    """Django's own WSGIHandler behind the middleware: the view reads the replayed body
    (through CONTENT_LENGTH), and its usage header settles the reservation."""
    middleware = WSGITokenBudgetMiddleware(
        WSGIHandler(), budget=budget, key=by_api_key(), estimate=estimate, read_body=True
    )
    client = WerkzeugClient(middleware)
    asked = ask(1000, 3000, 500)
    response = client.post("/v1/chat", json=asked, headers=KEY)
    assert response.status_code == 200
    assert json.loads(response.get_data()) == {"echo": asked}
    assert response.headers["x-ratelimit-remaining-tokens"] == "8500"
    assert budget.tokens_left() == 8500


def test_a_real_werkzeug_server_reads_a_chunked_upload_and_settles_a_stream(
    memory_budget: Recording,
) -> None:
    """Over HTTP to werkzeug's threaded server: a chunked upload is read for the estimate and
    replayed to Flask, and the streamed answer is settled with ``actual`` once sent."""
    served = flask_app(memory_budget, actual=Actual())
    server = make_server(HOST, 0, served.app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    sent = json.dumps(ask(200, 3800, 300)).encode()
    try:
        with httpx.Client(base_url=f"http://{HOST}:{server.port}", timeout=10) as client:
            response = client.post(
                "/v1/stream",
                content=iter([sent[:10], sent[10:]]),  # chunked: no Content-Length
                headers={**KEY, "Content-Type": "application/json"},
            )
        assert response.request.headers["Transfer-Encoding"] == "chunked"
        assert response.text == "tok tok tok "
        assert served.bodies == [sent]
        # 200 + 3,800 reserved: the estimate came from the chunked body.
        assert response.headers["x-ratelimit-remaining-tokens"] == "6000"
        assert memory_budget.settled_event.wait(10)
    finally:
        server.shutdown()
        thread.join(10)
    assert [u.amount("tokens") for u in memory_budget.settled] == [500]
    assert memory_budget.tokens_left() == 9500
