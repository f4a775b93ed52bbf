"""What a denied request gets, when a rule or a rule set says so: ``Denied`` and ``Denial``.

By default a denial is a 429 with a small problem document (RFC 9457). A rule
(``Rule(..., denied=...)``, ``@limit(..., denied=...)``) or a whole rule set
(``RuleSet(..., denied=...)``) can answer otherwise:

- a ``Denied``: the same status, body, type and headers for every denial;
- a callable of a ``Denial`` (the rule, its store key, the decision, the
  ``Retry-After`` seconds and the request) returning a ``Denied``, or None for
  the default answer. It runs on the request's thread (the event loop, for
  ASGI): keep it quick and free of I/O.

Whatever the body, the middleware still sends the rule's RateLimit headers,
``Retry-After`` and ``Cache-Control: no-store``, and works out
``Content-Length``; a ``Denied`` may not set those itself. A callable that
raises, or returns anything but a ``Denied`` or None, does not let the
request through: the default 429 answers it and the ``ratewarden.middleware``
logger says why, at most once a minute per rule.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ratewarden import headers as rl_headers
from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.headers import Header
from ratewarden.metrics import LogRateLimiter
from ratewarden.middleware._outcome import Outcome
from ratewarden.middleware._request import RequestInfo, from_asgi

__all__ = ["Denial", "Denied", "DeniedHook", "Responder", "check_denied"]

# RFC 9110 field names (tokens) and values (visible ASCII and Latin-1, spaces and tabs inside).
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*\Z")
# What the middleware sets on every denial, which a Denied's own headers may not repeat, and
# where each comes from (what to do instead).
_OWN = {
    "content-type": "give the body's type as content_type=",
    "content-length": "it is the length of the body",
    "retry-after": "the decision's wait, none when no wait would help; HeaderOptions"
    "(retry_jitter=) spreads it",
    "cache-control": "no-store: a denial is never cached",
    "ratelimit": "the rule's policies, by the rule set's HeaderOptions",
    "ratelimit-policy": "the rule's policies, by the rule set's HeaderOptions",
}
_LEGACY = "the rule set's HeaderOptions(legacy=True) sends the X-RateLimit-* headers"
_LOGGER = logging.getLogger("ratewarden.middleware")


def _value(what: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip() or not _FIELD_VALUE.match(value):
        raise ConfigurationError(
            f"Denied {what} {value!r} must be a non-empty string of Latin-1 characters "
            "without line breaks"
        )
    return value.strip()


def _header(name: object, value: object) -> Header:
    if not isinstance(name, str) or not _FIELD_NAME.match(name):
        raise ConfigurationError(f"Denied header name {name!r} must be an HTTP field name")
    lowered = name.lower()
    own = _OWN.get(lowered) or (_LEGACY if lowered.startswith("x-ratelimit-") else None)
    if own is not None:
        raise ConfigurationError(
            f"Denied header {name!r} is set by the middleware on every denial ({own})"
        )
    return name, _value(f"header {name!r} value", value)


def _body(body: object, content_type: str | None) -> tuple[bytes, str]:
    if isinstance(body, bytes):
        return body, content_type or "application/octet-stream"
    if isinstance(body, str):
        return body.encode("utf-8"), content_type or "text/plain; charset=utf-8"
    if isinstance(body, dict | list):
        try:
            text = json.dumps(body, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"Denied body cannot be written as JSON: {exc}") from None
        return text.encode("utf-8"), content_type or "application/json"
    raise ConfigurationError(
        f"Denied body {body!r} must be bytes, a str, or a dict or list (sent as JSON)"
    )


@dataclass(frozen=True, slots=True, init=False)
class Denied:
    """The answer to a denied request: ``status`` (400-599, 429 by default), ``body`` (bytes;
    a str is sent as UTF-8 text, a dict or list as JSON), its ``content_type`` (by default
    from the body's kind) and extra ``headers`` (a mapping or pairs)."""

    status: int
    body: bytes
    content_type: str
    headers: tuple[Header, ...]

    @keywords_checked
    def __init__(
        self,
        body: bytes | str | dict[str, Any] | list[Any] = b"",
        *,
        status: int = 429,
        content_type: str | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> None:
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ConfigurationError(f"Denied status {status!r} must be a 4xx or 5xx code")
        if content_type is not None:
            content_type = _value("content_type", content_type)
        raw, kind = _body(body, content_type)
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        try:
            found = tuple(_header(*pair) for pair in pairs)
        except TypeError:
            raise ConfigurationError(
                f"Denied headers {headers!r} must be a mapping or (name, value) pairs"
            ) from None
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "body", raw)
        object.__setattr__(self, "content_type", kind)
        object.__setattr__(self, "headers", found)


@dataclass(frozen=True, slots=True)
class Denial:
    """A denial, as a ``denied`` callable sees it: the rule's ``rule`` name, its store ``key``
    (``<rule>:<identity>``), the limiter's ``decision``, ``retry_after`` (the seconds sent in
    ``Retry-After``; None when no wait would help) and the ``request``."""

    rule: str
    key: str
    decision: Decision
    retry_after: int | None
    request: RequestInfo


#: A rule's or a rule set's ``denied``: one answer for every denial, or a callable choosing.
DeniedHook = Denied | Callable[[Denial], "Denied | None"]


def check_denied(denied: object, where: str) -> DeniedHook | None:
    """``denied`` as given, once checked: None, a ``Denied`` or a callable."""
    if denied is None or isinstance(denied, Denied) or callable(denied):
        return denied
    raise ConfigurationError(
        f"{where}: denied {denied!r} must be a Denied or a callable returning a Denied or None"
    )


def _outcome(found: list[Header], retry: int | None, answer: Denied) -> Outcome:
    headers = [*found]
    if retry is not None:
        headers.append(("Retry-After", str(retry)))
    headers += [
        ("Cache-Control", "no-store"),
        ("Content-Type", answer.content_type),
        ("Content-Length", str(len(answer.body))),
        *answer.headers,
    ]
    return Outcome(True, tuple(headers), answer.body, answer.status)


class Responder:
    """A rule's ``denied``, compiled: ``outcome(...)`` is the denial's answer."""

    __slots__ = ("_hook", "_lines", "_static")

    def __init__(self, hook: DeniedHook, clock: Clock) -> None:
        self._static = hook if isinstance(hook, Denied) else None
        self._hook = hook
        self._lines = LogRateLimiter(60.0, clock=clock)

    def outcome(
        self,
        rule: str,
        key: str,
        decision: Decision,
        retry: int | None,
        found: list[Header],
        source: RequestInfo | Mapping[str, Any],
    ) -> Outcome:
        """The denial's answer; ``found`` are the rule's RateLimit headers, ``source`` the
        request, or the ASGI scope its view is made from when a callable asks for it."""
        if self._static is not None:
            return _outcome(found, retry, self._static)
        try:
            request = source if isinstance(source, RequestInfo) else from_asgi(source)
            answer = self._hook(Denial(rule, key, decision, retry, request))  # type: ignore[operator]
            if answer is not None and not isinstance(answer, Denied):
                raise ConfigurationError(f"it returned {answer!r}, not a Denied or None")
        except Exception as exc:  # a hook's bug must not let the request through
            self._lines.log(
                _LOGGER,
                logging.ERROR,
                rule,
                "ratewarden rule %r: its denied hook failed (%s: %s); the default 429 answers",
                rule,
                type(exc).__name__,
                exc,
            )
            answer = None
        if answer is None:
            body = rl_headers.problem_body(rule, retry)
            return Outcome(True, (*found, *rl_headers.denied_headers(retry, body)), body)
        return _outcome(found, retry, answer)
