"""The ``RateLimitResponse`` of a decided request, and what it tells ``ServiceHooks``.

``respond`` writes the response's wire bytes (``server/wire.py``): one
``DescriptorStatus`` per descriptor (code, current limit, remaining, and the wait in whole
seconds, rounded up, as envoyproxy/ratelimit's: ``_whole_seconds_us``), the overall
code, the response headers and the matched rules' dynamic metadata; then it gives the
request's descriptors with a rule to ``on_decisions``, each as a ``DescriptorOutcome``.
It takes values (the service's settings, its clock, the hook), not the service;
nothing here touches a store.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from envoy.service.ratelimit.v3 import rls_pb2  # type: ignore[import-untyped, unused-ignore]
from google.protobuf import struct_pb2  # type: ignore[import-untyped, unused-ignore]

from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.headers import binding_layer
from ratewarden.server.config import DescriptorRule, Limit
from ratewarden.server.descriptors import Item, Verdict
from ratewarden.server.response_headers import LEGACY_NAMES, response_headers
from ratewarden.server.response_metadata import upstream_metadata
from ratewarden.server.wire import NO_DURATION, Status, encode_response, status_head, tail_bytes

__all__ = [
    "UNLIMITED_REMAINING",
    "DescriptorOutcome",
    "ResponseMessage",
    "fallback_response",
    "respond",
    "shown_layer",
]

# The service's logger: records keep the name operators filter on.
log = logging.getLogger("ratewarden.server.service")

_Response = rls_pb2.RateLimitResponse
#: The message class of what ``respond`` writes (``ResponseMessage.FromString(data)``).
ResponseMessage: Any = _Response
_OK = _Response.OK
_OVER_LIMIT = _Response.OVER_LIMIT
#: ``limit_remaining`` of an ``unlimited`` rule, as envoyproxy/ratelimit reports it.
UNLIMITED_REMAINING = 2**32 - 1
#: The status of a descriptor with no rule (OK, nothing else) and of an unlimited rule.
_BARE: Status = (status_head(_OK, None, ""), 0, NO_DURATION)
_UNLIMITED: Status = (_BARE[0], UNLIMITED_REMAINING, NO_DURATION)


class DescriptorOutcome(NamedTuple):
    """What happened to one request descriptor that had a rule; given to ``ServiceHooks``.

    Immutable, and a named tuple rather than a frozen dataclass: one is built per
    descriptor on every call, and a named tuple is built in half the time.

    - ``metric_key``: envoyproxy/ratelimit's stats key (``domain.key_value.key``),
      with request values where ``detailed_metric`` or ``value_to_metric`` ask.
    - ``hits``: the descriptor's hits_addend (0 for a check, and for an unlimited rule: its
      hits are not counted, as envoyproxy/ratelimit, which never asks its cache about one).
    - ``over_limit``: the limit said no (before shadow mode).
    - ``shadowed``: over the limit, but reported OK because of ``shadow_mode``.
    - ``near_limit_hits``: hits that landed above ``near_limit_ratio`` of the limit.
    - ``failure``: the failure mode that decided because the store failed, else None.
    - ``charged``: the hits were consumed.
    - ``decision``: the store's Decision (None for unlimited, a 0 limit, or open/closed).
    - ``entries``: the request descriptor's ``(key, value)`` entries, in order.
    - ``local_cache``: denied from the over-limit cache, without a store call.
    """

    domain: str
    metric_key: str
    rule: DescriptorRule
    hits: int
    over_limit: bool
    shadowed: bool
    near_limit_hits: int
    failure: str | None
    charged: bool
    decision: Decision | None
    entries: tuple[tuple[str, str], ...] = ()
    local_cache: bool = False


#: ``ServiceHooks.on_decisions``: (domain, the outcomes of a request's descriptors with a rule).
OnDecisions = Callable[[str, Sequence["DescriptorOutcome"]], None]


def respond(
    domain: str,
    items: list[Item],
    *,
    shadow: bool,
    header_mode: str,
    header_names: Sequence[str] = LEGACY_NAMES,
    near_limit_ratio: float,
    clock: Clock,
    on_decisions: OnDecisions,
    metadata_mode: str = "merged",
    request: Any = None,
    quota_mode: bool = False,
) -> bytes:
    """The serialized response for the decided ``items``; then ``on_decisions`` with the
    outcome of each one with a rule.

    ``shadow``: the overall code is OK whatever the descriptors say; ``header_mode``:
    the response headers (``server.response_headers``) and ``header_names`` the legacy
    ones' names; ``near_limit_ratio``: where a hit counts as near the limit; ``clock``:
    the time of a 0-limit rule's window; ``metadata_mode``: the ``dynamic_metadata``'s
    shape (``server/response_metadata.py``), ``upstream`` reading ``request``;
    ``quota_mode``: the global quota mode (``Verdict``). The bytes are a
    ``RateLimitResponse``'s (``server/wire.py``).
    """
    statuses: list[Status] = []
    headers = header_mode != "off"
    windows: list[int | None] = []
    quota: list[bool] = []  # per status, for the headers: a quota descriptor's?
    metadata: dict[str, Any] | None = None
    verdict = Verdict(quota_mode)  # denied(items), from the over flags this loop reads anyway
    merged = metadata_mode == "merged"
    outcomes: list[DescriptorOutcome] = []
    for item in items:
        rule = item.rule
        result = item.result
        decision = None
        if rule is None or rule.unlimited:
            over = False
            reported = None
            statuses.append(_BARE if rule is None else _UNLIMITED)
            if quota_mode:
                verdict.add(rule, False)
        else:
            if rule.always_over:
                over = True
                status, reported = _zero_status(clock, rule)
            else:
                assert result is not None
                over = not result.allowed
                decision = result.decision
                status, reported = _status(rule, decision, over)
            statuses.append(status)
            verdict.add(rule, over)
        if headers:
            # The reported limit's window in seconds, for the headers.
            windows.append(None if reported is None else _seconds(reported.period_us))
            quota.append(quota_mode or (rule is not None and rule.quota_mode))
        match = item.match
        if (
            merged
            and match is not None
            and match.nodes[-1].metadata
            and (rule is None or not over or rule.shadow_mode)
        ):
            if metadata is None:
                metadata = {}
            metadata.update(match.nodes[-1].metadata_dict())
        if rule is None:
            continue
        cost = 0 if rule.unlimited else item.cost
        # Hits that landed above ``near_limit_ratio`` of the limit (none when far below).
        near = 0
        if not over and decision is not None and decision.allowed and decision.rate is not None:
            capacity = decision.rate.capacity
            used_after = capacity - decision.remaining
            threshold = math.floor(capacity * near_limit_ratio)
            if used_after > threshold:
                near = used_after - max(threshold, used_after - cost)
        # The fields in DescriptorOutcome's order (``tuple.__new__``: see ``_tuple``).
        outcomes.append(
            _tuple(
                DescriptorOutcome,
                (
                    domain,
                    item.metric_key,
                    rule,
                    cost,
                    over,
                    over and rule.shadow_mode,
                    near,
                    None if result is None else result.failure,
                    result is not None and result.charged,
                    decision,
                    item.entries,
                    result is not None and result.cached,
                ),
            )
        )
    overall = _OK if shadow or not verdict.denied else _OVER_LIMIT
    if not merged:
        metadata = upstream_metadata(request, items)
    tail = b""
    if headers or metadata:
        added: list[tuple[str, str]] = []
        if headers:
            # The headers read the statuses as messages: parse the ones just written.
            written = _Response.FromString(encode_response(overall, statuses, b"")).statuses
            added = response_headers(header_mode, written, windows, header_names, quota)
        struct = None
        if metadata:
            struct = struct_pb2.Struct()
            struct.update(metadata)
        tail = tail_bytes(added, struct)
    if outcomes:
        try:
            on_decisions(domain, outcomes)
        except Exception:
            log.exception(
                "hook on_decisions failed; the answer is unaffected",
                extra={"event": "hook_failed", "hook": "on_decisions"},
            )
    return encode_response(overall, statuses, tail)


def _zero_status(clock: Clock, rule: DescriptorRule) -> tuple[Status, Limit]:
    """The status of a rule with a limit of 0 (always over, never asked of a store): its
    window ends with the period's; and that limit."""
    code = _OK if rule.shadow_mode else _OVER_LIMIT
    zero = next(limit for limit in rule.limits if limit.rate is None)
    period = zero.period_us
    wait = period - clock.now_us() % period
    return (status_head(code, zero, rule.name), 0, _whole_seconds_us(max(wait, 0))), zero


def _status(
    rule: DescriptorRule, decision: Decision | None, over: bool
) -> tuple[Status, Limit | None]:
    """The status of a limited rule the store (or a failure mode) decided, and the limit it
    reports.

    That is None when there is no limit to report in headers: a failure mode
    that answered without a decision. Its status has no current limit either: with one,
    Envoy would send ``x-ratelimit-remaining: 0`` on an answer that counted nothing (Envoy
    skips a status without one; upstream sends no status when its store fails).
    """
    code = _OVER_LIMIT if over and not rule.shadow_mode else _OK
    if decision is None:
        return (status_head(code, None, ""), 0, NO_DURATION), None
    # Several limits: the status reports one of them, the binding one (its reset when
    # allowed, not the time until every limit is back to full, the decision's own
    # ``reset_after``), or the longest wait of a denial no wait can pass (``shown_layer``).
    shown = shown_layer(decision)
    limit = rule.limit_for(shown.rate)
    head = status_head(code, limit, rule.name)
    if limit is None:
        return (head, 0, NO_DURATION), None
    # A descriptor over its limit has nothing left for this request: 0, as upstream reports it
    # (and as the headers say), a shadow rule's too (its status keeps the numbers of the
    # denial it would make). The denied hits are not charged: the counter may still hold room.
    remaining = 0 if over else min(max(decision.remaining, 0), UNLIMITED_REMAINING)
    wait = shown.reset_after
    if not shown.allowed and math.isfinite(shown.retry_after):
        wait = shown.retry_after
    if not math.isfinite(wait) or wait <= 0:
        return (head, remaining, 0), limit
    # Whole microseconds first (the store's unit: a float's last bits are not a wait), and
    # never 0 for a wait above 0.
    return (head, remaining, _whole_seconds_us(max(round(wait * 1_000_000), 1))), limit


def shown_layer(decision: Decision) -> Decision:
    """The layer a status reports: the decision itself for one limit; of several, the binding
    one, unless the call costs
    more than one of them can ever hold (its ``retry_after`` is never). That layer's reset
    is no time to wait for: the call never passes, and another limit may be holding the key
    longer (with ``--charge-denied`` the denied cost was counted against it), so the denied
    layer that waits longest is reported: its ``retry_after`` where one exists, else its
    reset."""
    if len(decision.layers) < 2:
        return decision
    if decision.allowed or math.isfinite(decision.retry_after):
        return binding_layer(decision)
    return max((layer for layer in decision.layers if not layer.allowed), key=_wait)


def _wait(layer: Decision) -> float:
    return layer.retry_after if math.isfinite(layer.retry_after) else layer.reset_after


#: ``tuple.__new__``: a ``DescriptorOutcome`` per descriptor without the named tuple's
#: keyword ``__new__``, which costs more than the tuple.
_tuple = tuple.__new__


def _seconds(microseconds: int) -> int:
    return -(-microseconds // 1_000_000)


def _whole_seconds_us(microseconds: int) -> int:
    """A wait in microseconds rounded up to whole seconds (in microseconds): a status's
    ``duration_until_reset`` is whole seconds, as envoyproxy/ratelimit's always is, because
    Envoy's ``x-ratelimit-reset`` keeps the seconds and drops the rest (0.99 s would read 0,
    "retry now"). Never earlier than the exact wait; 0 only for 0."""
    return _seconds(microseconds) * 1_000_000


def fallback_response(request: Any, *, deny: bool) -> Any:
    """The answer when the service failed: every descriptor OK (open) or OVER_LIMIT (closed)."""
    code = _OVER_LIMIT if deny else _OK
    return _Response(
        overall_code=code,
        statuses=[_Response.DescriptorStatus(code=code) for _ in request.descriptors],
    )
