"""``required``: the Idempotency-Key a keyed endpoint insists on, on both flavours.

Starlette under uvicorn and Flask under werkzeug's threaded server, on loopback, each
behind the middleware three ways: ``required=True`` (every POST and PATCH needs a
key), path patterns with ``required_docs`` (only ``/orders/keyed-*`` needs one, and
the 400 links the docs), and the default ``required=False``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore, MemoryIdempotencyStore
from tests.client._live import LiveASGI, LiveWSGI
from tests.idempotency._apps import Orders, flask_orders, starlette_orders

DOCS = "https://api.example.com/docs/idempotency"
MODES: dict[str, dict[str, Any]] = {
    "all": {"required": True},
    "paths": {"required": ["/orders/keyed-*"], "required_docs": DOCS},
    "off": {},
}


class Served:
    """One middleware configuration served for real: its URL, store and execution counts."""

    def __init__(self, flavour: str, options: dict[str, Any]) -> None:
        self.orders = Orders()
        self.server: LiveASGI | LiveWSGI
        if flavour == "asgi":
            self.store: Any = AsyncMemoryIdempotencyStore()
            app = starlette_orders(self.orders)
            self.server = LiveASGI(IdempotencyMiddleware(app, self.store, **options))
        else:
            self.store = MemoryIdempotencyStore()
            flask = flask_orders(self.orders)
            flask.wsgi_app = WSGIIdempotencyMiddleware(flask.wsgi_app, self.store, **options)  # type: ignore[method-assign]
            self.server = LiveWSGI(flask)

    def send(self, method: str, path: str, **headers: str) -> httpx.Response:
        """``method path`` with ``headers`` (``Idempotency_Key`` for the key), body "a pear"."""
        sent = {name.replace("_", "-"): value for name, value in headers.items()}
        content = None if method == "GET" else b"a pear"
        return httpx.request(
            method, self.server.url + path, content=content, headers=sent, timeout=10
        )


@pytest.fixture(scope="module")
def served() -> Iterator[dict[tuple[str, str], Served]]:
    """Every (flavour, mode) running at once."""
    running = {
        (flavour, mode): Served(flavour, options)
        for flavour in ("asgi", "wsgi")
        for mode, options in MODES.items()
    }
    yield running
    for each in running.values():
        each.server.stop()


@pytest.fixture(params=["asgi", "wsgi"])
def flavour(request: pytest.FixtureRequest) -> str:
    """Each flavour in turn."""
    return str(request.param)


def assert_key_required(response: httpx.Response, method: str, path: str) -> dict[str, Any]:
    """The missing-key 400: a problem document naming the header, method and path."""
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["cache-control"] == "no-store"
    assert int(response.headers["content-length"]) == len(response.content)
    problem: dict[str, Any] = response.json()
    assert problem["status"] == 400
    assert f"Idempotency-Key header is required for {method} {path}" in problem["detail"]
    return problem


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_a_missing_key_is_400_and_nothing_runs_or_is_stored(
    served: dict[tuple[str, str], Served], flavour: str, method: str, name: str
) -> None:
    """required=True: no header, no run: a 400 problem document, and the store stays empty."""
    it = served[flavour, "all"]
    path = f"/orders/{name}"
    problem = assert_key_required(it.send(method, path), method, path)
    assert (problem["type"], problem["title"]) == ("about:blank", "Bad Request")
    assert it.orders.executed[name] == 0
    assert len(it.store) == 0


def test_an_empty_key_is_a_missing_key(
    served: dict[tuple[str, str], Served], flavour: str, name: str
) -> None:
    """An empty header is no key: the same 400, nothing run or stored."""
    it = served[flavour, "all"]
    path = f"/orders/{name}"
    assert_key_required(it.send("POST", path, Idempotency_Key=""), "POST", path)
    assert it.orders.executed[name] == 0
    assert len(it.store) == 0


def test_with_a_key_the_request_runs_once_and_replays(
    served: dict[tuple[str, str], Served], flavour: str, name: str
) -> None:
    """A keyed request is handled as ever: it runs, is stored, and its retry is replayed."""
    it = served[flavour, "all"]
    first = it.send("POST", f"/orders/{name}", Idempotency_Key=f"{name}-1")
    retry = it.send("POST", f"/orders/{name}", Idempotency_Key=f"{name}-1")
    assert first.status_code == retry.status_code == 201
    assert first.json() == retry.json() == {"order": 1, "body": "a pear"}
    assert retry.headers["idempotent-replayed"] == "true"
    assert it.orders.executed[name] == 1


def test_methods_not_handled_need_no_key(
    served: dict[tuple[str, str], Served], flavour: str, name: str
) -> None:
    """GET is not in ``methods``: it runs without a key, every time."""
    it = served[flavour, "all"]
    assert it.send("GET", f"/orders/{name}").status_code == 201
    assert it.send("GET", f"/orders/{name}").status_code == 201
    assert it.orders.executed[name] == 2


def test_path_patterns_require_a_key_there_only_and_link_the_docs(
    served: dict[tuple[str, str], Served], flavour: str, name: str
) -> None:
    """required=["/orders/keyed-*"]: a 400 there, of type required_docs; elsewhere, it runs."""
    it = served[flavour, "paths"]
    keyed, free = f"/orders/keyed-{name}", f"/orders/free-{name}"
    problem = assert_key_required(it.send("POST", keyed), "POST", keyed)
    assert (problem["type"], problem["title"]) == (DOCS, "Idempotency-Key is required")
    assert it.send("POST", free).json() == {"order": 1, "body": "a pear"}
    assert it.send("POST", keyed, Idempotency_Key="k").status_code == 201
    assert it.orders.executed[f"keyed-{name}"] == it.orders.executed[f"free-{name}"] == 1


def test_required_false_leaves_a_keyless_request_alone(
    served: dict[tuple[str, str], Served], flavour: str, name: str
) -> None:
    """The default: no key runs unguarded (twice is twice); a blank key is a malformed key."""
    it = served[flavour, "off"]
    assert it.send("POST", f"/orders/{name}").json()["order"] == 1
    assert it.send("POST", f"/orders/{name}").json()["order"] == 2
    blank = it.send("POST", f"/orders/{name}", Idempotency_Key="")
    assert blank.status_code == 400
    assert "1-255 visible ASCII characters" in blank.json()["detail"]
    assert it.orders.executed[name] == 2


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"required": 1}, "required=1: True, False, or path patterns"),
        ({"required": None}, "required=None: True, False, or path patterns"),
        ({"required": "orders"}, "required='orders': 'orders' is not a path pattern"),
        ({"required": ["/a", 3]}, r"required=\['/a', 3\]: 3 is not a path pattern"),
        ({"required": re.compile(b"/a")}, r"required=re.compile\(b'/a'\): re.compile"),
        ({"required": []}, r"required=\[\]: no path pattern"),
        ({"required": True, "required_docs": "see docs"}, "required_docs='see docs': an absolute"),
        ({"required": True, "required_docs": 7}, "required_docs=7: an absolute URL"),
        ({"required_docs": DOCS}, "required_docs='https.*set required= too"),
    ],
)
@pytest.mark.parametrize("kind", ["asgi", "wsgi"])
def test_bad_required_options_are_refused(options: dict[str, Any], words: str, kind: str) -> None:
    """Each bad value is refused when the middleware is built, naming the option and value."""
    make, app, store = (
        (IdempotencyMiddleware, starlette_orders(Orders()), AsyncMemoryIdempotencyStore())
        if kind == "asgi"
        else (WSGIIdempotencyMiddleware, flask_orders(Orders()), MemoryIdempotencyStore())
    )
    with pytest.raises(ConfigurationError, match=f"idempotency middleware {words}"):
        make(app, store, **options)
