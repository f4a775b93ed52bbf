"""The C twin of a one-rule set's scope path (``ratewarden._speedups.ScopeRule``).

``RuleSet.decide_asgi`` hands a rule set of one plain rule with the default
header plan to ``ScopeRule``: the store key read from the ASGI scope, and an
allowed decision's two RateLimit headers as ASGI byte pairs. Its Python code
(the rule's ``asgi`` extractor, ``HeaderPlan.asgi``) is the reference: the C
answer must be the same, or None / the Python extractor's where it defers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import MemoryStore, _native
from ratewarden.decision import Decision
from ratewarden.headers import HeaderOptions
from ratewarden.limiter import Limiter
from ratewarden.middleware import Rule, RuleSet, by_api_key, by_client_ip
from ratewarden.middleware._core import Compiled
from ratewarden.testing import ManualClock

pytestmark = pytest.mark.skipif(
    _native.speedups is None, reason="ratewarden._speedups is not built (or RATEWARDEN_PURE=1)"
)

_EXTRACTORS = {
    "api-key": by_api_key,
    "raw-key": lambda: by_api_key("X-Token", hashed=False),
    "client-ip": by_client_ip,
    "trusted": lambda: by_client_ip(["10.0.0.0/8"]),
}


def _rule(
    extractor: str, fallback: str = "anonymous", draft: str = "draft-11"
) -> tuple[RuleSet, Compiled, Any]:
    rules = RuleSet(
        [Rule("c", "5/second", key=_EXTRACTORS[extractor](), fallback=fallback)],
        headers=HeaderOptions(draft=draft),
    )
    single, fast = rules._single, rules._fast
    assert single is not None and fast is not None
    return rules, single, fast


def _python_key(single: Compiled, scope: Mapping[str, Any]) -> str:
    return single.prefix + (single.asgi_key(scope) or single.fallback)  # type: ignore[misc]


class _Mapping(Mapping[str, Any]):
    """A scope or message that is a Mapping but not a dict: the C code's other path."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, name: str) -> Any:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


_NAMES = st.sampled_from([b"x-api-key", b"X-API-Key", b"x-api-kez", b"x-token", b"host", b""])
_VALUES = st.sampled_from([b"k1", b"k2", b"", b"  ", b" k1 ", b"k\xe9\xff", b"10.0.0.1"])
_ITEMS = st.one_of(
    st.tuples(_NAMES, _VALUES),
    # Shapes the C code does not read itself: the Python extractor answers for them.
    st.tuples(_NAMES, _VALUES).map(list),
    st.tuples(st.just("x-api-key"), _VALUES),
    st.tuples(_NAMES, st.just("k1")),
)
_CLIENTS = st.one_of(
    st.none(), st.sampled_from([("198.51.100.7", 1), ("10.0.0.2", 2), ("2001:db8::1", 3)])
)


@settings(max_examples=300, deadline=None)
@given(
    extractor=st.sampled_from(sorted(_EXTRACTORS)),
    items=st.lists(_ITEMS, max_size=5),
    container=st.sampled_from(["list", "tuple", "missing", "mapping"]),
    client=_CLIENTS,
    fallback=st.sampled_from(["anonymous", "nokey"]),
)
def test_the_key_is_the_python_extractors(
    extractor: str, items: list[Any], container: str, client: Any, fallback: str
) -> None:
    """Present, absent, empty, repeated, upper-case or odd headers; dict or other scopes."""
    _rules, single, fast = _rule(extractor, fallback)
    scope: dict[str, Any] = {"type": "http"}
    if container != "missing":
        scope["headers"] = tuple(items) if container == "tuple" else items
    if client is not None:
        scope["client"] = client
    given_scope: Mapping[str, Any] = _Mapping(scope) if container == "mapping" else scope
    try:
        expected: object = _python_key(single, given_scope)
    except Exception as error:
        with pytest.raises(type(error)):
            fast.key(given_scope)
        return
    assert fast.key(given_scope) == expected


def _decisions(single: Compiled) -> list[Decision]:
    """Real decisions of the rule's rates, allowed and denied, at many remaining / reset."""
    clock = ManualClock()
    limiter = Limiter(MemoryStore(clock=clock))
    rates = single.rates
    found = []
    for step in range(40):
        clock.advance((step % 7) * 0.037)
        found.append(limiter.hit("c:k", rates, 1 + step % 3))
    return found


@pytest.mark.parametrize("draft", ["draft-11", "draft-10"])
def test_real_decisions_render_as_the_header_plan(draft: str) -> None:
    """Allowed decisions render as HeaderPlan.asgi, t with the draft's meaning; denials go back."""
    _rules, single, fast = _rule("api-key", draft=draft)
    decisions = _decisions(single)
    assert any(d.allowed for d in decisions) and not all(d.allowed for d in decisions)
    for decision in decisions:
        rendered = fast.headers(decision)
        if decision.allowed:
            assert rendered is not None
            assert rendered == single.headers.asgi(decision)
        else:
            assert rendered is None  # a denial is the Python Outcome's


@settings(max_examples=300, deadline=None)
@given(
    reset=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(0, 1e6),
        st.integers(-5, 10**20),
    ),
    remaining=st.one_of(st.integers(-(2**70), 2**70), st.integers(-3, 10)),
    layer_allowed=st.booleans(),
    same_rate=st.booleans(),
    draft=st.sampled_from(["draft-11", "draft-10"]),
)
def test_odd_decisions_render_the_same_or_go_back_to_python(
    reset: Any, remaining: int, layer_allowed: bool, same_rate: bool, draft: str
) -> None:
    """C renders exactly what ``HeaderPlan.asgi`` renders, or answers None (Python renders).

    ``reset`` goes into the field the draft's ``t`` is read from (draft-11:
    ``refill_after``, draft-10: ``reset_after``); the other field holds 1234.5,
    which would show if the wrong one were read.
    """
    _rules, single, fast = _rule("api-key", draft=draft)
    base = next(d for d in _decisions(single) if d.allowed)
    read, other = ("refill_after", "reset_after")[:: 1 if draft == "draft-11" else -1]
    layer = dataclasses.replace(
        base.layers[0],
        remaining=remaining,
        allowed=layer_allowed,
        **{read: reset, other: 1234.5},
    )
    if not same_rate:
        layer = dataclasses.replace(layer, rate=RuleSet([Rule("c", "6/second")]).rules[0].rates[0])
    decision = dataclasses.replace(base, layers=(layer,))
    rendered = fast.headers(decision)
    plain = isinstance(reset, float) and (not reset > 0 or reset < 9e15)
    try:
        expected = single.headers.asgi(decision)
    except (OverflowError, ValueError):
        assert rendered is None
        return
    if rendered is not None:
        assert rendered == expected
    if not same_rate:
        assert expected is None  # another Rate object: the generic path renders it
    elif plain and abs(remaining) < 2**63:
        # Deferred only where the C code says it defers.
        assert rendered is not None and rendered == expected
        assert rendered[1][1].endswith(b";t=%d" % (math.ceil(reset) if reset > 0 else 0))


def test_the_whole_call_hits_once_and_answers_as_python() -> None:
    """``fast(scope, hit)``: the headers when allowed, else ``(key, decision)``; one hit each."""
    clock = ManualClock()
    calls: list[tuple[Any, ...]] = []
    limiter = Limiter(MemoryStore(clock=clock))

    def hit(key: str, rates: Any, cost: int) -> Decision:
        calls.append((key, rates, cost))
        return limiter.hit(key, rates, cost)

    _rules, single, fast = _rule("api-key")
    scope = {"type": "http", "headers": [(b"x-api-key", b"k1")]}
    answers = [fast(scope, hit) for _ in range(7)]
    assert len(calls) == 7 and all(c == calls[0] for c in calls)
    assert calls[0][0] == _python_key(single, scope)
    allowed = [a for a in answers if type(a) is list]
    denied = [a for a in answers if type(a) is tuple]
    assert len(allowed) == 5 and len(denied) == 2
    assert all(key == calls[0][0] and not d.allowed for key, d in denied)
    assert allowed[0][0] == (b"ratelimit-policy", b'"c";q=5;w=1')
    assert allowed[-1][1] == (b"ratelimit", b'"c";r=0;t=1')


def test_no_twin_for_plans_it_does_not_render() -> None:
    """Headers other than the default plan, several rules, a custom extractor: Python."""
    custom = RuleSet([Rule("c", "5/second", key=lambda request: "x")])
    legacy = RuleSet([Rule("c", "5/second")], headers=HeaderOptions(legacy=True))
    layered = RuleSet([Rule("c", ["5/second", "100/hour"])])
    two = RuleSet([Rule("a", "5/second"), Rule("b", "5/second")])
    for rules in (custom, legacy, layered, two):
        assert rules._fast is None


def test_bad_arguments_are_type_errors() -> None:
    _rules, _single, fast = _rule("api-key")
    with pytest.raises(TypeError):
        fast({"type": "http"})
    with pytest.raises(TypeError):
        fast({"type": "http"}, print, extra=1)
    with pytest.raises(TypeError):
        _native.speedups.ScopeRule("x-api-key", str, str, "c:", "a", (1,), 1, (b"", b""), b"")


def test_store_keys_are_kept_per_header_value_and_the_cache_starts_over_when_full() -> None:
    """The same value gives the same key object; 5,000 values (past the 4,096 kept) stay right."""
    _rules, single, fast = _rule("api-key")

    def scope(value: bytes) -> dict[str, Any]:
        return {"type": "http", "headers": [(b"x-api-key", value)]}

    first = fast.key(scope(b"k-0"))
    assert fast.key(scope(b"k-0")) is first
    for i in range(5000):
        assert fast.key(scope(b"k-%d" % i)) == _python_key(single, scope(b"k-%d" % i))
    assert fast.key(scope(b"k-0")) == first


_HEADER_PAIRS = st.lists(
    st.tuples(st.sampled_from([b"a", b"b"]), st.binary(max_size=3)), max_size=3
)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["http.response.start", "http.response.body", "other", None]),
    headers=st.one_of(st.none(), _HEADER_PAIRS, _HEADER_PAIRS.map(tuple)),
    extra=_HEADER_PAIRS,
    mapping=st.booleans(),
    more=st.dictionaries(
        st.sampled_from(["status", "body", "trailers"]), st.integers(), max_size=2
    ),
)
def test_the_send_wrapper_sends_what_the_python_one_sends(
    kind: str | None, headers: Any, extra: list[Any], mapping: bool, more: dict[str, Any]
) -> None:
    """``AddHeaders`` against ``_adding``: the same message (a new one for a response start,
    the original object otherwise), the same return value, the same error for no type."""
    from ratewarden.middleware.asgi import _adding

    data: dict[str, Any] = dict(more)
    if kind is not None:
        data["type"] = kind
    if headers is not None:
        data["headers"] = headers
    sides = []
    for make in (_native.speedups.AddHeaders, _adding):
        sent: list[Any] = []

        def send(message: Any, into: list[Any] = sent) -> str:
            into.append(message)
            return "awaitable"

        message: Any = _Mapping(dict(data)) if mapping else dict(data)
        try:
            returned: object = make(send, list(extra))(message)
        except KeyError as error:
            sides.append(("KeyError", str(error)))
            continue
        assert returned == "awaitable" and len(sent) == 1
        out = sent[0]
        sides.append((dict(out), list(out.keys()), out is message))
    assert sides[0] == sides[1]
