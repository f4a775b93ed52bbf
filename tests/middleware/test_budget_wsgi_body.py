"""The WSGI token budget middleware reading request bodies: Content-Length, chunked uploads
on a server that terminates its input, bodies without a length, short and oversized ones;
the app always reads what was sent."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from werkzeug.test import EnvironBuilder

from ratewarden import MemoryStore
from ratewarden.budgets import Usage
from ratewarden.middleware import WSGITokenBudgetMiddleware, by_api_key
from ratewarden.testing import ManualClock
from tests.middleware._budget_apps import (
    KEY,
    LIMITS,
    NO_BODY,
    Recording,
    ask,
    estimate,
    flask_app,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def memory_budget() -> Recording:
    """10,000 tokens/min on the memory store, under a ManualClock."""
    return Recording(MemoryStore(clock=ManualClock()), LIMITS, max_output_tokens=4000)


def test_a_body_past_max_body_is_413_and_nothing_is_reserved(memory_budget: Recording) -> None:
    """Over ``max_body`` by its Content-Length, or read to its end from a chunked upload
    (``wsgi.input_terminated``): 413 with a problem document; the app never runs."""
    served = flask_app(memory_budget, max_body=64)
    client = served.client()
    big = json.dumps(ask(1, 1, 1, pad="x" * 100)).encode()
    large = client.post("/v1/chat", data=big, headers=KEY)
    chunked = client.post(
        "/v1/chat",
        input_stream=io.BytesIO(big),
        headers={**KEY, "Transfer-Encoding": "chunked"},
        environ_base={"wsgi.input_terminated": True},
    )
    for response in (large, chunked):
        assert response.status_code == 413
        assert json.loads(response.get_data())["status"] == 413
    assert served.calls == []
    assert memory_budget.tokens_left() == 10000


class Unreadable(io.RawIOBase):
    """An input that must not be read."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise AssertionError("the input was read")


def test_a_content_length_past_max_body_is_413_before_any_read(memory_budget: Recording) -> None:
    """A Content-Length over ``max_body`` is answered 413 from the header alone: not a byte
    of the input is read (a gigabyte upload is not taken in to be refused)."""
    served = flask_app(memory_budget, max_body=64)
    environ = EnvironBuilder("/v1/chat", method="POST", headers=KEY).get_environ()
    environ.update({"CONTENT_LENGTH": str(10**9), "wsgi.input": Unreadable()})
    started: list[str] = []
    body = b"".join(
        served.app.wsgi_app(environ, lambda status, headers, exc=None: started.append(status))
    )
    assert started == ["413 Content Too Large"]
    assert json.loads(body)["status"] == 413
    assert served.calls == []


class Trickle(io.RawIOBase):
    """A server's dechunked input: at most 7 bytes a read, then its end."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        taken, self.data = self.data[: min(7, len(buffer))], self.data[7:]
        buffer[: len(taken)] = taken
        return len(taken)


def test_a_chunked_body_is_read_and_the_app_still_reads_it(memory_budget: Recording) -> None:
    """A chunked upload (no Content-Length) on a server that terminates its input is read to
    its end for the estimate, and the app reads the same bytes by the CONTENT_LENGTH set to
    their length (as Django reads a body)."""
    seen: list[bytes] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])))
        start_response("200 OK", [("x-tokens-used", "0")])
        return [b"ok"]

    sent = json.dumps(ask(300, 100, 0)).encode()
    environ = EnvironBuilder("/", method="POST", headers=KEY).get_environ()
    environ.pop("CONTENT_LENGTH", None)
    environ.update(
        {
            "HTTP_TRANSFER_ENCODING": "chunked",
            "wsgi.input": Trickle(sent),
            "wsgi.input_terminated": True,
        }
    )
    middleware = WSGITokenBudgetMiddleware(
        app, budget=memory_budget, key=by_api_key(), estimate=estimate, read_body=True
    )
    started: list[tuple[str, dict[str, str]]] = []
    body = b"".join(
        middleware(
            environ, lambda status, headers, exc=None: started.append((status, dict(headers)))
        )
    )
    assert body == b"ok" and seen == [sent]
    assert started[0][0] == "200 OK"
    assert memory_budget.settled == [Usage.of(0, 0)]  # 0 used of 400 reserved
    assert started[0][1]["x-ratelimit-remaining-tokens"] == "10000"


def test_an_unterminated_body_without_a_length_is_not_read(memory_budget: Recording) -> None:
    """No Content-Length on a server that does not terminate its input: reading could hang,
    so the estimate gets ``b""`` and the app the input as it was (werkzeug's own choice)."""
    seen: list[bytes] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ["wsgi.input"].read(5))
        start_response("200 OK", [])
        return [b"ok"]

    environ = EnvironBuilder("/", method="POST", data=b"hello", headers=KEY).get_environ()
    del environ["CONTENT_LENGTH"]
    middleware = WSGITokenBudgetMiddleware(
        app, budget=memory_budget, key=by_api_key(), estimate=estimate, read_body=True
    )
    started: list[str] = []
    body = b"".join(middleware(environ, lambda status, headers, exc=None: started.append(status)))
    assert (started, body, seen) == (["200 OK"], b"ok", [b"hello"])
    assert memory_budget.settled == [NO_BODY]


def test_a_body_shorter_than_its_content_length_is_neither_reserved_nor_run(
    memory_budget: Recording,
) -> None:
    """The input ends before its Content-Length (the client left): a bare 400, nothing
    reserved, the app not called."""
    served = flask_app(memory_budget)
    environ = EnvironBuilder(
        "/v1/chat", method="POST", data=b'{"prompt_tokens": 10', headers=KEY
    ).get_environ()
    environ["CONTENT_LENGTH"] = "100"
    started: list[str] = []
    body = b"".join(
        served.app.wsgi_app(environ, lambda status, headers, exc=None: started.append(status))
    )
    assert (started, body) == (["400 Bad Request"], b"")
    assert served.calls == []
    assert memory_budget.tokens_left() == 10000
