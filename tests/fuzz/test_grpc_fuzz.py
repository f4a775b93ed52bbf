"""Fuzzing ``ShouldRateLimit`` over real gRPC: a correct answer or INVALID_ARGUMENT, nothing else.

A real ``RateLimitServer`` (``ratewarden serve`` in-process, memory store on a
frozen ManualClock) answers random requests on loopback: random domains and
descriptors, empty and 100,000-character keys and values, any Unicode the wire
can carry, request and descriptor ``hits_addend`` up to the largest the proto
holds (2**32-1 and 2**64-1), and Envoy's per-descriptor limit override with
any unit. Protobuf strings must be UTF-8, so a client library cannot send
anything else; the raw-bytes tests put invalid UTF-8, truncated and random
bytes on the wire themselves.

The oracle: the rule ``k`` allows 5 hits a minute per value and the clock never
moves, so a model of every counter predicts each answer exactly (all-or-nothing
across descriptors, twins on one counter needing room for all of them, a denied
request consuming nothing). A status of UNKNOWN or INTERNAL always fails.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2
from google.protobuf import wrappers_pb2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT, RedisServer
from tests.fuzz._grpc import HOST, METHOD, BackgroundServer, background_server

LIMIT = 5
RULES = f"""\
domain: fuzz
descriptors:
  - key: k
    rate_limit: {{unit: minute, requests_per_unit: {LIMIT}}}
  - key: open
"""
SETTINGS = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
Response = rls_pb2.RateLimitResponse
ALLOWED_CODES = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    """One server for the module; the model below follows its counters across examples."""
    store = AsyncMemoryStore(clock=ManualClock())
    with background_server(tmp_path_factory.mktemp("grpc-fuzz"), RULES, store) as started:
        yield started


@pytest.fixture(scope="module")
def channel(server: BackgroundServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"{HOST}:{server.port}") as opened:
        yield opened


#: Hits consumed so far per value of ``k`` (the server's counters, predicted).
USED: defaultdict[str, int] = defaultdict(int)
#: Values of ``k`` the model lost track of: a request it does not model (a limit override,
#: which the server may ignore and then charge the configured counter) touched them.
UNCERTAIN: set[str] = set()
#: Answers the model checked exactly, by overall code (so the oracle is seen to bite).
CHECKED: defaultdict[int, int] = defaultdict(int)

# Text the wire carries: any code point but surrogates (protobuf strings are UTF-8).
wire_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
huge_text = st.builds(
    lambda char, count: char * count,
    st.characters(exclude_categories=("Cs",)),
    st.integers(1_000, 100_000),
)
odd_text = st.sampled_from(
    ["", " ", "\x00", "/", ":", "=", "*", "{", "}", "%", "rls/1:x", "\u202e", "\ufeff", "é", "é"]
)
texts = st.one_of(wire_text, odd_text, huge_text)
keys = st.one_of(st.sampled_from(["k", "open", "K", "k "]), st.just("k"), texts)
# A few values again and again, so that counters fill up and the model sees denials.
values = st.one_of(st.sampled_from(["a", "b", ""]), texts)
units = st.sampled_from([*Response.RateLimit.Unit.values(), 99])


@st.composite
def descriptors(draw: st.DrawFn) -> Any:
    entries = draw(st.lists(st.tuples(keys, values), min_size=0, max_size=3))
    descriptor = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
    )
    hits = draw(st.one_of(st.none(), st.integers(0, 7), st.sampled_from([2**32, 2**64 - 1])))
    if hits is not None:
        descriptor.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=hits))
    if draw(st.integers(0, 9)) == 0:
        descriptor.limit.requests_per_unit = draw(st.integers(0, 2**32 - 1))
        descriptor.limit.unit = draw(units)
    return descriptor


requests = st.builds(
    lambda domain, found, hits: rls_pb2.RateLimitRequest(
        domain=domain, descriptors=found, hits_addend=hits
    ),
    st.integers(0, 3).flatmap(lambda n: texts if n == 0 else st.just("fuzz")),
    st.lists(descriptors(), min_size=0, max_size=4),
    st.one_of(st.just(0), st.integers(0, 7), st.just(2**32 - 1)),
)


def expected(request: Any) -> tuple[int, list[int]] | None:
    """(overall code, status codes) the config and counters give, updating the model; or None
    when this request is outside the exact model (a limit override, or a counter such a request
    touched before)."""
    codes = [Response.OK] * len(request.descriptors)
    overridden = any(d.HasField("limit") for d in request.descriptors)
    if request.domain != "fuzz":
        return None if overridden else (Response.OK, codes)
    ruled: list[tuple[int, str, int]] = []
    for index, descriptor in enumerate(request.descriptors):
        entries = [(entry.key, entry.value) for entry in descriptor.entries]
        if len(entries) == 1 and entries[0][0] == "k":
            hits = request.hits_addend or 1
            if descriptor.HasField("hits_addend"):
                hits = descriptor.hits_addend.value
            ruled.append((index, entries[0][1], hits))
    values = {value for _, value, _ in ruled}
    if overridden or values & UNCERTAIN:
        # An override the server ignores (a unit it does not know, say) leaves the configured
        # limit, so the request may charge the counters of its other descriptors: from here on
        # the model cannot say what they hold.
        UNCERTAIN.update(values)
        return None
    if len(ruled) == 1:
        index, value, hits = ruled[0]
        if USED[value] + hits <= LIMIT:
            USED[value] += hits
        else:
            codes[index] = Response.OVER_LIMIT
    elif ruled:
        demand: defaultdict[str, int] = defaultdict(int)
        for _, value, hits in ruled:
            demand[value] += hits
        short = [i for i, value, hits in ruled if hits > 0 and LIMIT - USED[value] < demand[value]]
        if short:
            for index in short:
                codes[index] = Response.OVER_LIMIT
        else:
            for _, value, hits in ruled:
                USED[value] += hits
    overall = Response.OVER_LIMIT if Response.OVER_LIMIT in codes else Response.OK
    return overall, codes


def call(channel: grpc.Channel, payload: bytes) -> tuple[grpc.StatusCode, Any]:
    """Send raw bytes as a ShouldRateLimit request: (status code, response or None)."""
    method = channel.unary_unary(
        METHOD, request_serializer=None, response_deserializer=Response.FromString
    )
    try:
        return grpc.StatusCode.OK, method(payload, timeout=10)
    except grpc.RpcError as error:
        return error.code(), error.details()


def on_k(*hits: int, value: str = "twins") -> Any:
    """A request with one ``k`` descriptor per hits_addend, all on one value."""
    return rls_pb2.RateLimitRequest(
        domain="fuzz",
        descriptors=[
            ratelimit_pb2.RateLimitDescriptor(
                entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value=value)],
                hits_addend=wrappers_pb2.UInt64Value(value=count),
            )
            for count in hits
        ],
    )


@SETTINGS
@given(requests)
@example(request=on_k(2, 2, 2))  # twins need 6 together: denied, nothing consumed
@example(request=on_k(2, 3))  # 5 fit exactly
@example(request=on_k(0, 1))  # full: a check passes, a hit is denied
@example(request=on_k(7, value="seven"))  # more than the limit at once
def test_every_request_gets_the_right_answer_or_invalid_argument(
    channel: grpc.Channel, request: Any
) -> None:
    """Random requests over gRPC: the exact predicted answer, or INVALID_ARGUMENT when malformed."""
    code, reply = call(channel, request.SerializeToString())
    malformed = not request.domain or not request.descriptors
    if malformed:
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, reply)
        assert reply, "INVALID_ARGUMENT says what was wrong"
        return
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        # Only a limit override can be refused (an unknown unit, say), and only clearly.
        assert any(d.HasField("limit") for d in request.descriptors), reply
        return
    assert code == grpc.StatusCode.OK, (code, reply)
    assert len(reply.statuses) == len(request.descriptors)
    assert reply.overall_code in (Response.OK, Response.OVER_LIMIT)
    want = expected(request)
    if want is None:
        return
    assert (reply.overall_code, [s.code for s in reply.statuses]) == want
    CHECKED[reply.overall_code] += 1
    for status, descriptor in zip(reply.statuses, request.descriptors, strict=True):
        entries = [(entry.key, entry.value) for entry in descriptor.entries]
        if request.domain == "fuzz" and len(entries) == 1 and entries[0][0] == "k":
            assert status.current_limit.requests_per_unit == LIMIT
            assert 0 <= status.limit_remaining <= LIMIT


# -- the wire itself: bytes no protobuf library would send ------------------------------


def varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings and sub-messages."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def raw_request(domain: bytes, key: bytes, value: bytes) -> bytes:
    """RateLimitRequest{domain, descriptors: [{entries: [{key, value}]}]} from raw bytes."""
    entry = field(1, key) + field(2, value)
    return field(1, domain) + field(2, field(1, entry))


invalid_utf8 = st.sampled_from(
    [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a\x80b", b"\xe2\x82"]
)


@SETTINGS
@given(st.integers(0, 2), invalid_utf8, st.binary(max_size=8))
def test_invalid_utf8_on_the_wire_is_invalid_argument(
    channel: grpc.Channel, where: int, bad: bytes, around: bytes
) -> None:
    """Invalid UTF-8 in the domain, a key or a value: INVALID_ARGUMENT naming UTF-8."""
    parts = [b"fuzz", b"k", b"v"]
    parts[where] = around + bad + around
    code, reply = call(channel, raw_request(*parts))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, reply)
    assert "UTF-8" in reply


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes_are_an_answer_or_invalid_argument(channel: grpc.Channel, data: bytes) -> None:
    """Any bytes at all: they decode to some request (answered) or are INVALID_ARGUMENT."""
    code, reply = call(channel, data)
    assert code in ALLOWED_CODES, (code, reply)


@SETTINGS
@given(st.data())
def test_a_corrupted_valid_request_is_an_answer_or_invalid_argument(
    channel: grpc.Channel, data: st.DataObject
) -> None:
    """A valid request with bytes flipped, cut or inserted: an answer or INVALID_ARGUMENT."""
    payload = bytearray(raw_request(b"fuzz", b"k", data.draw(wire_text).encode()))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(payload)))
        operation = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if operation == "flip" and at < len(payload):
            payload[at] = data.draw(st.integers(0, 255))
        elif operation == "cut":
            del payload[at:]
        else:
            payload[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    code, reply = call(channel, bytes(payload))
    assert code in ALLOWED_CODES, (code, reply)


def test_a_request_over_the_message_size_limit_is_resource_exhausted(
    channel: grpc.Channel,
) -> None:
    """A 5 MB value is over grpc's 4 MB receive limit: RESOURCE_EXHAUSTED, not a crash."""
    code, _ = call(channel, raw_request(b"fuzz", b"k", b"v" * 5_000_000))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    code, reply = call(channel, raw_request(b"fuzz", b"k", b"after"))
    assert code == grpc.StatusCode.OK and reply.overall_code == Response.OK


def test_the_largest_hits_addend_is_over_limit_and_consumes_nothing(
    channel: grpc.Channel,
) -> None:
    """hits_addend 2**64-1 on a descriptor is denied; the value's counter is untouched."""
    descriptor = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value="largest")],
        hits_addend=wrappers_pb2.UInt64Value(value=2**64 - 1),
    )
    request = rls_pb2.RateLimitRequest(domain="fuzz", descriptors=[descriptor])
    code, reply = call(channel, request.SerializeToString())
    assert code == grpc.StatusCode.OK and reply.overall_code == Response.OVER_LIMIT
    request.descriptors[0].hits_addend.value = LIMIT
    code, reply = call(channel, request.SerializeToString())
    assert reply.overall_code == Response.OK and reply.statuses[0].limit_remaining == 0
    USED["largest"] += LIMIT


def test_the_server_is_still_serving_after_the_fuzzing(server: BackgroundServer) -> None:
    """No fuzz input cost the service an error: the --on-error fallback never answered; and
    the model checked both allowed and denied answers exactly."""
    assert server.server.errors == 0
    assert CHECKED[Response.OK] > 10 and CHECKED[Response.OVER_LIMIT] >= 3, dict(CHECKED)


# -- the same requests against a real redis-server ----------------------------------------


class Warnings(logging.Handler):
    """ratewarden log records at WARNING or above (a store error is logged so)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        # An ignored limit override (unit UNKNOWN) and a domain no rule defines (7c1e5d8) are
        # fair warnings about the request, not store errors.
        if getattr(record, "event", None) == "domain_not_found":
            return
        if not record.getMessage().startswith("ignoring a limit override"):
            self.records.append(record)


@pytest.fixture(scope="module")
def redis_channel(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[grpc.Channel, BackgroundServer, Warnings]]:
    """A server on the session's redis-server, and a handler collecting its warnings."""
    warnings = Warnings()
    logger = logging.getLogger("ratewarden")
    logger.addHandler(warnings)
    store = AsyncRedisStore.from_url(redis_server.url, prefix="fuzz", timeout=STORE_TIMEOUT)
    try:
        with (
            background_server(tmp_path_factory.mktemp("grpc-fuzz-redis"), RULES, store) as started,
            grpc.insecure_channel(f"{HOST}:{started.port}") as opened,
        ):
            yield opened, started, warnings
    finally:
        logger.removeHandler(warnings)


@settings(SETTINGS, max_examples=120)
@given(requests)
def test_on_redis_every_request_is_answered_without_a_store_error(
    redis_channel: tuple[grpc.Channel, BackgroundServer, Warnings], request: Any
) -> None:
    """Huge, empty and unusual keys and values reach Redis: answered, never a store failure.

    A store error would be hidden by the rule's failure mode (open), so the test
    also demands that nothing was logged at WARNING or above.
    """
    channel, server, warnings = redis_channel
    code, reply = call(channel, request.SerializeToString())
    assert code in ALLOWED_CODES, (code, reply)
    if code == grpc.StatusCode.OK:
        assert len(reply.statuses) == len(request.descriptors)
    assert not warnings.records, [record.getMessage() for record in warnings.records]
    assert server.server.errors == 0
