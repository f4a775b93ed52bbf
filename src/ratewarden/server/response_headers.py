"""``response_headers_to_add``: rate limit headers the service asks Envoy to add.

Envoy can write ``x-ratelimit-*`` headers on its own from the statuses
(``enable_x_ratelimit_headers: DRAFT_VERSION_03`` on the filter); nothing here is
needed for that. These headers are for clients that expect the names of
envoyproxy/ratelimit or of the IETF draft. Envoy adds them to the response it
sends downstream, allowed or denied. The ``--response-headers`` setting picks
the set:

- ``off`` (the default): none.
- ``legacy``: ``RateLimit-Limit``, ``RateLimit-Remaining``, ``RateLimit-Reset``,
  as envoyproxy/ratelimit writes them when ``LIMIT_RESPONSE_HEADERS_ENABLED`` is on
  (other names with ``--legacy-header-names``, upstream's ``LIMIT_*_HEADER``).
- ``draft-10``: ``RateLimit-Policy`` and ``RateLimit`` as structured fields, per
  draft-ietf-httpapi-ratelimit-headers-10 (``"name";q=100;w=60`` and
  ``"name";r=42;t=17``).

Both sets describe one descriptor, the one closest to its limit, chosen as
envoyproxy/ratelimit's ``shouldRateLimitWorker`` chooses it: in request order, a
descriptor with fewer requests remaining than the one chosen so far is chosen (the
first of equals stays), and a regular descriptor over its limit is chosen whatever
came before, and counts as 0 remaining after it. A ``quota_mode`` descriptor over its
limit (every descriptor, with the global quota mode) is chosen only by its remaining
count, 0: so not after a regular one over its limit, nor after one with 0 left.
Descriptors without a limit, and ``unlimited`` ones, are never chosen; with none
left there are no headers.
The reset is the status's ``duration_until_reset`` rounded up to whole seconds,
which for the window algorithms is the end of the window and for the bucket
algorithms the time until the bucket is full again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from envoy.service.ratelimit.v3 import rls_pb2  # type: ignore[import-untyped, unused-ignore]

from ratewarden.headers import limit_item, policy_item

__all__ = [
    "HEADER_MODES",
    "LEGACY_NAMES",
    "RESERVED_NAMES",
    "check_header_names",
    "response_headers",
]

HEADER_MODES = ("off", "legacy", "draft-10")
#: The ``legacy`` headers' names: the limit, the remaining count, the reset.
LEGACY_NAMES = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
#: An HTTP field name (RFC 9110's token).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Names HTTP itself owns (framing, connection, the message's own content) or that every
#: response already carries: a second one from ``response_headers_to_add`` would break or
#: contradict the response Envoy sends.
RESERVED_NAMES = frozenset(
    (
        "connection", "content-encoding", "content-length", "content-range", "content-type",
        "date", "expect", "host", "keep-alive", "location", "proxy-connection", "server",
        "set-cookie", "te", "trailer", "transfer-encoding", "upgrade", "vary", "via",
    )
)  # fmt: skip


def check_header_names(names: Sequence[str]) -> tuple[str, str, str]:
    """Three distinct HTTP field names (limit, remaining, reset), none of ``RESERVED_NAMES``;
    ``ValueError`` naming the one that is not."""
    if len(names) != 3:
        raise ValueError(f"give three header names (limit, remaining, reset), not {len(names)}")
    for name in names:
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
        if name.lower() in RESERVED_NAMES:
            raise ValueError(
                f"{name!r} is a header HTTP reserves or a response already carries (a second "
                f"one would break or contradict it); pick another name, such as "
                f"{LEGACY_NAMES[names.index(name)]}"
            )
    if len({name.lower() for name in names}) != 3:
        raise ValueError(f"the three header names must differ: {', '.join(names)}")
    return names[0], names[1], names[2]


_OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT
#: Upstream's starting minimum (``MaxUint32``): a status must have fewer remaining to be chosen.
_MAX_REMAINING = 2**32 - 1


def response_headers(
    mode: str,
    statuses: Sequence[Any],
    windows: Sequence[int | None],
    names: Sequence[str] = LEGACY_NAMES,
    quota: Sequence[bool] | None = None,
) -> list[tuple[str, str]]:
    """The ``(name, value)`` headers for ``mode``; ``windows[i]`` is status i's window in seconds;
    ``names``: the ``legacy`` headers' names; ``quota[i]``: whether status i is a quota
    descriptor's (its rule's ``quota_mode``, or the global one; None: none is).

    A status whose window is None has no limit to report (no rule, or unlimited).
    """
    if mode == "off":
        return []
    if mode not in HEADER_MODES:
        raise ValueError(f"response headers mode {mode!r} is not one of {HEADER_MODES}")
    chosen: tuple[Any, int] | None = None
    least = _MAX_REMAINING
    for i, (status, window) in enumerate(zip(statuses, windows, strict=True)):
        if window is None:
            continue
        if status.limit_remaining < least:
            chosen, least = (status, window), status.limit_remaining
        if status.code == _OVER_LIMIT and not (quota is not None and quota[i]):
            chosen, least = (status, window), 0
    if chosen is None:
        return []
    status, window = chosen
    limit = status.current_limit.requests_per_unit
    remaining = 0 if status.code == _OVER_LIMIT else status.limit_remaining
    reset = _ceil_seconds(status.duration_until_reset)
    if mode == "legacy":
        return [(names[0], str(limit)), (names[1], str(remaining)), (names[2], str(reset))]
    name = status.current_limit.name or "default"
    return [
        ("RateLimit-Policy", policy_item(name, limit, window)),
        ("RateLimit", limit_item(name, remaining, reset)),
    ]


def _ceil_seconds(duration: Any) -> int:
    return int(duration.seconds) + (1 if duration.nanos > 0 else 0)
