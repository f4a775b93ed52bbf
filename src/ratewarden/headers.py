"""HTTP response headers for a ``Decision``: pure functions, no I/O, no clock of their own.

Three families, each optional:

- ``RateLimit-Policy`` / ``RateLimit`` per the IETF httpapi ratelimit-headers
  draft, as structured fields (RFC 8941 Lists of Strings with parameters):
  ``"contract";q=100;w=60`` and ``"contract";r=72;t=1``, with ``pk`` (a Byte
  Sequence) when a partition key is given. The draft may still change, so the
  syntax sits behind a version switch (``draft=``): ``"draft-11"`` (the default)
  and ``"draft-10"`` render the same fields, ``t`` with each draft's meaning
  (``window_t``); ``None`` turns the family off.
- The legacy ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (``Reset`` as a
  delta in seconds or as Unix epoch seconds), plus GitHub's ``X-RateLimit-Used``
  and ``X-RateLimit-Resource``.
- On a denial: ``Retry-After`` in delay-seconds, rounded up, with optional bounded
  jitter, and under draft-11 never earlier than the ``t`` of an exhausted (``r=0``)
  policy, as that draft asks; ``Cache-Control: no-store``; a small
  ``application/problem+json`` body (RFC 9457). A denial no wait can help (a cost
  above what a rate can ever allow) has no ``Retry-After`` and no
  ``X-RateLimit-Reset``, and no policy at ``r=0`` (``never_r``).

Every time value is rounded up to whole seconds: a client that waits what it
is told is never early. ``now`` (epoch seconds) is passed in by the caller, who
owns the clock.
"""

from __future__ import annotations

import base64
import json
import math
import random as _random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from ratewarden.checks import check_bool, init_checked, is_number
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate

__all__ = [
    "DRAFT_VERSIONS",
    "HeaderOptions",
    "Header",
    "binding_layer",
    "denied_headers",
    "limit_item",
    "never_allowed",
    "policy_item",
    "problem_body",
    "rate_limit_headers",
    "retry_after_seconds",
    "sf_string",
    "split_outside_quotes",
    "window",
    "window_t",
]

#: Draft revisions whose ``RateLimit-Policy`` / ``RateLimit`` syntax this module renders.
DRAFT_VERSIONS = ("draft-10", "draft-11")

#: One response header, ``(name, value)``.
Header = tuple[str, str]

PROBLEM_CONTENT_TYPE = "application/problem+json"


def _check_number(what: str, value: object, *, minimum: float = 0.0) -> float:
    if not is_number(value, minimum):
        raise ConfigurationError(f"HeaderOptions {what}={value!r} must be a finite number >= 0")
    return float(value)


@init_checked
@dataclass(frozen=True, slots=True)
class HeaderOptions:
    """Which headers to render, and how.

    - ``draft``: ``"draft-11"`` / ``"draft-10"`` for ``RateLimit-Policy`` and
      ``RateLimit``; ``None`` for neither.
    - ``legacy``: ``X-RateLimit-Limit``, ``-Remaining``, ``-Reset``.
    - ``reset``: ``"delta"`` (seconds from now) or ``"epoch"`` (Unix seconds, as
      GitHub does) for ``X-RateLimit-Reset``.
    - ``github``: also ``X-RateLimit-Used`` and ``X-RateLimit-Resource`` (needs ``legacy``).
    - ``partition_key``: add ``pk`` to the draft fields (the caller passes the bytes;
      the middleware passes a hash of the limit key, never the key itself).
    - ``all_policies``: list every layer of the binding rule in the draft fields,
      not only the binding one.
    - ``retry_jitter``: at most this many seconds added to ``Retry-After``
      (uniform, from ``random``, which returns floats in ``[0, 1)``; a value out of
      range is clamped, a non-number counts as 0), so that throttled clients do not
      all come back in the same second. Never subtracted.
    """

    draft: str | None = "draft-11"
    legacy: bool = False
    reset: Literal["delta", "epoch"] = "delta"
    github: bool = False
    partition_key: bool = False
    all_policies: bool = False
    retry_jitter: float = 0.0
    random: Callable[[], float] = field(default=_random.random, repr=False, compare=False)

    def __post_init__(self) -> None:
        for what in ("legacy", "github", "partition_key", "all_policies"):
            check_bool(f"HeaderOptions {what}", getattr(self, what))
        if self.draft is not None and self.draft not in DRAFT_VERSIONS:
            raise ConfigurationError(
                f"HeaderOptions draft={self.draft!r} is not one of {DRAFT_VERSIONS} (or None)"
            )
        if self.reset not in ("delta", "epoch"):
            raise ConfigurationError(
                f"HeaderOptions reset={self.reset!r} must be 'delta' or 'epoch'"
            )
        if self.github and not self.legacy:
            raise ConfigurationError(
                "HeaderOptions github=True adds to the legacy X-RateLimit-* headers; "
                "set legacy=True as well"
            )
        _check_number("retry_jitter", self.retry_jitter)
        if not callable(self.random):
            raise ConfigurationError(f"HeaderOptions random={self.random!r} must be callable")


def ceil_seconds(seconds: float) -> int:
    """Whole seconds, rounded up (0 stays 0); a client waiting this long is never early."""
    return max(0, math.ceil(seconds))


def window(rate: Rate) -> tuple[int, int]:
    """``(q, w)``: the rate as a quota per whole-second window, never promising more.

    A period of whole seconds is reported as is. Otherwise the window is the
    period rounded up to whole seconds and the quota is what the rate allows in
    it, rounded down: ``10/100ms`` is ``q=100;w=1``.
    """
    seconds, rest = divmod(rate.period_us, 1_000_000)
    if rest == 0:
        return rate.limit, seconds
    w = seconds + 1
    return rate.limit * w * 1_000_000 // rate.period_us, w


@lru_cache(maxsize=1024)
def sf_string(text: str) -> str:
    """``text`` as an RFC 8941 String: quoted, ``\\`` and ``"`` escaped, non-printables as ``?``."""
    printable = "".join(ch if " " <= ch <= "~" else "?" for ch in text)
    return '"' + printable.replace("\\", "\\\\").replace('"', '\\"') + '"'


def split_outside_quotes(text: str, separator: str) -> list[str]:
    """``text`` cut at each ``separator`` outside a quoted string (``\\`` escapes inside one).

    How a header list is read into members (``,``) and a member into parameters
    (``;``): ``RateLimit`` by the retrying client, ``Forwarded`` by the middleware.
    Quotes and escapes are kept in the parts; a part is never stripped.
    """
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _sf_bytes(data: bytes) -> str:
    return ":" + base64.b64encode(data).decode("ascii") + ":"


@lru_cache(maxsize=1024)
def policy_item(name: str, quota: int, window_s: int | None, partition: bytes | None = None) -> str:
    """One ``RateLimit-Policy`` list member: ``"name";q=100;w=60[;pk=:...:]``."""
    item = f"{sf_string(name)};q={max(0, quota)}"
    if window_s is not None:
        item += f";w={window_s}"
    if partition is not None:
        item += f";pk={_sf_bytes(partition)}"
    return item


def limit_item(name: str, remaining: int, reset_s: int, partition: bytes | None = None) -> str:
    """One ``RateLimit`` list member: ``"name";r=72;t=25[;pk=:...:]`` (``t`` as given)."""
    item = f"{sf_string(name)};r={max(0, remaining)};t={reset_s}"
    if partition is not None:
        item += f";pk={_sf_bytes(partition)}"
    return item


def layer_names(name: str, decision: Decision) -> list[tuple[str, Decision]]:
    """Each layer of ``decision`` with its policy name: ``name``, or ``name.1``, ``name.2``..."""
    layers = decision.layers or (decision,)
    if len(layers) == 1:
        return [(name, layers[0])]
    return [(f"{name}.{i}", layer) for i, layer in enumerate(layers, start=1)]


def binding_layer(decision: Decision) -> Decision:
    """The layer that ``decision`` reports (its ``rate``); the decision itself when no
    layer is (one rate, or a decision the store did not make)."""
    for layer in decision.layers:
        if layer.rate is not None and layer.rate == decision.rate:
            return layer
    return decision


def _binding(name: str, decision: Decision) -> tuple[str, Decision]:
    """``binding_layer`` with its policy name."""
    layer = binding_layer(decision)
    named = layer_names(name, decision)
    for layer_name, candidate in named:
        if candidate is layer:
            return layer_name, layer
    return named[0][0], layer


def never_allowed(decision: Decision) -> bool:
    """A denial no wait can turn into an allow: the cost is above what a rate can ever give."""
    return not decision.allowed and math.isinf(decision.retry_after)


def _remaining(decision: Decision, never: bool = False) -> int:
    """``r``: what is left. A denial reports 0 (wait ``t``), unless no wait would help
    (``never``): then what is left, at least 1 (``never_r``)."""
    if never:
        return never_r(decision.remaining)
    return max(0, decision.remaining) if decision.allowed else 0


def never_r(remaining: int) -> int:
    """The ``r`` of a policy in a denial no wait can help: what is left, at least 1. In a
    429 ``r=0`` asks for a wait of ``t``, which would not help; so even a spent key's policy
    shows 1, and "no ``Retry-After``, no policy at ``r=0``" holds whatever the key's state."""
    return remaining if remaining > 0 else 1


def window_t(layer: Decision, draft: str) -> int:
    """The ``t`` of ``layer`` in the ``RateLimit`` field of ``draft``, whole seconds rounded up.

    draft-11: the effective window, the seconds within which no more than ``r``
    can be used (``refill_after``). draft-10: the seconds until the quota is
    whole again (``reset_after``), that draft's meaning.
    """
    return ceil_seconds(layer.reset_after if draft == "draft-10" else layer.refill_after)


def _draft_items(
    name: str, decision: Decision, options: HeaderOptions
) -> list[tuple[str, Decision, int]]:
    """The policies the draft fields list, each as ``(name, layer, r)``.

    A denial reports ``r=0`` for the policy it names. With ``all_policies`` a
    layer that did not deny (nothing was taken from it) shows what it has left,
    so that ``r=0`` marks exactly the policies that are exhausted. A denial that
    no wait can help (``never_allowed``) shows no ``r=0`` (``never_r``).
    """
    never = never_allowed(decision)
    if options.all_policies:
        return [
            (layer_name, layer, _remaining(layer, never))
            for layer_name, layer in layer_names(name, decision)
        ]
    layer_name, layer = _binding(name, decision)
    return [(layer_name, layer, _remaining(layer, never) if decision.allowed or never else 0)]


def _draft_headers(
    name: str, decision: Decision, options: HeaderOptions, partition: bytes | None
) -> list[Header]:
    draft = options.draft or "draft-11"
    policies, states = [], []
    for layer_name, layer, remaining in _draft_items(name, decision, options):
        if layer.rate is not None:
            quota, window_s = window(layer.rate)
        else:
            quota, window_s = layer.limit, None
        policies.append(policy_item(layer_name, quota, window_s, partition))
        states.append(limit_item(layer_name, remaining, window_t(layer, draft), partition))
    return [("RateLimit-Policy", ", ".join(policies)), ("RateLimit", ", ".join(states))]


def _legacy_headers(
    name: str, decision: Decision, options: HeaderOptions, now: float
) -> list[Header]:
    never = never_allowed(decision)
    # Limit and Remaining of one layer (a layered denial's remaining is the least of every
    # layer's). When no wait helps, what is truly left: no Reset is the signal here.
    layer = binding_layer(decision)
    remaining = max(0, layer.remaining) if decision.allowed or never else 0
    headers = [
        ("X-RateLimit-Limit", str(decision.limit)),
        ("X-RateLimit-Remaining", str(remaining)),
    ]
    # No Reset on a denial no wait can help: a client reads it as the time to retry. Else
    # the binding layer's, as Limit and Remaining are (not when every rate is whole again).
    if not never:
        reset_after = layer.reset_after
        reset = ceil_seconds(reset_after)
        if options.reset == "epoch":
            reset = math.ceil(now + reset_after)
        headers.append(("X-RateLimit-Reset", str(reset)))
    if options.github:
        capacity = decision.rate.capacity if decision.rate is not None else decision.limit
        headers.append(("X-RateLimit-Used", str(max(0, capacity - remaining))))
        headers.append(("X-RateLimit-Resource", name))
    return headers


def rate_limit_headers(
    name: str,
    decision: Decision,
    options: HeaderOptions,
    *,
    now: float,
    partition: bytes | None = None,
) -> list[Header]:
    """The RateLimit headers describing ``decision`` of the policy ``name``, allowed or not.
    ``now`` is epoch seconds (read by ``reset="epoch"``); ``partition`` the ``pk`` bytes."""
    headers: list[Header] = []
    pk = partition if options.partition_key else None
    if options.draft is not None:
        headers.extend(_draft_headers(name, decision, options, pk))
    if options.legacy:
        headers.extend(_legacy_headers(name, decision, options, now))
    return headers


def retry_after_seconds(decision: Decision, options: HeaderOptions) -> int | None:
    """``Retry-After`` for a denial: seconds rounded up, plus bounded jitter; None if never.

    None when the request can never be allowed (its cost is above the
    capacity): no wait would help, so no hint is given. Under draft-11 it is
    never earlier than the ``t`` of a policy the ``RateLimit`` field reports
    exhausted (``r=0``): the draft says Retry-After should not point before the
    end of the effective window. For a cost of 1 the two are the same time; a
    larger cost waits longer than one unit anyway, so the floor only guards
    against rounding.
    """
    if math.isinf(decision.retry_after):
        return None
    extra = 0.0
    if options.retry_jitter > 0:
        extra = _unit(options.random()) * options.retry_jitter
    wait = ceil_seconds(decision.retry_after + extra)
    if options.draft == "draft-11":
        for _, layer, remaining in _draft_items("", decision, options):
            if remaining <= 0:
                wait = max(wait, window_t(layer, "draft-11"))
    return wait


def _unit(draw: object) -> float:
    """A jitter draw clamped to [0, 1], a non-number or NaN as 0 (as the client does): a
    wrong ``random`` must not turn each 429 into a 500."""
    if isinstance(draw, bool) or not isinstance(draw, int | float) or math.isnan(draw):
        return 0.0
    return min(max(float(draw), 0.0), 1.0)


def problem_body(name: str, retry_after: int | None) -> bytes:
    """The 429 body: a small RFC 9457 problem document naming the policy and the wait."""
    if retry_after is None:
        detail = f"This request costs more than the rate limit {name!r} can ever allow."
    else:
        detail = f"Rate limit {name!r} exceeded; retry in {retry_after} s."
    problem: dict[str, object] = {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": detail,
        "policy": name,
    }
    if retry_after is not None:
        problem["retry_after"] = retry_after
    return json.dumps(problem, separators=(",", ":")).encode()


def denied_headers(retry_after: int | None, body: bytes) -> list[Header]:
    """Headers a 429 carries besides the RateLimit ones: Retry-After, no caching, the body type."""
    headers: list[Header] = []
    if retry_after is not None:
        headers.append(("Retry-After", str(retry_after)))
    headers += [
        ("Cache-Control", "no-store"),
        ("Content-Type", PROBLEM_CONTENT_TYPE),
        ("Content-Length", str(len(body))),
    ]
    return headers
