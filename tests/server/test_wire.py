"""A RateLimitResponse's wire bytes written by ``server/wire.py``: its Python function and its C
twin (when built) against protobuf's own ``SerializeToString`` of the same message."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden.server import wire
from ratewarden.server.config import Limit
from ratewarden.server.statuses import UNIT_ENUM

R = rls_pb2.RateLimitResponse

ENCODERS = [pytest.param(wire._encode_response, id="python")]
if wire.compiled is not None:
    ENCODERS.append(pytest.param(wire.compiled, id="c"))

codes = st.sampled_from([R.UNKNOWN, R.OK, R.OVER_LIMIT])
units = st.sampled_from(sorted(UNIT_ENUM))
limits = st.none() | st.builds(Limit, st.integers(0, 2**32 - 1), units)
names = st.sampled_from(["", "per-ip", "ünïcode name", "x" * 200])
remainings = st.integers(0, 2**32 - 1) | st.sampled_from([0, 1, 127, 128, 2**32 - 1, 2**64 - 1])
durations = st.sampled_from([wire.NO_DURATION, -5, 0, 1, 999_999, 1_000_000, 2**62]) | st.integers(
    0, 10**13
)
statuses = st.lists(st.tuples(codes, limits, names, remainings, durations), max_size=12)
headers = st.lists(
    st.tuples(st.sampled_from(["RateLimit", "x-a"]), st.text(max_size=20)), max_size=3
)


def _message(overall: int, found: list[tuple[Any, ...]], added: list[tuple[str, str]]) -> Any:
    """The same response built through protobuf's API."""
    response = R(overall_code=overall)
    for code, limit, name, remaining, duration_us in found:
        status = response.statuses.add(code=code)
        if limit is not None:
            status.current_limit.CopyFrom(
                R.RateLimit(
                    requests_per_unit=limit.requests_per_unit, unit=UNIT_ENUM[limit.unit], name=name
                )
            )
        status.limit_remaining = remaining
        if duration_us >= 0:
            status.duration_until_reset.seconds = duration_us // 1_000_000
            status.duration_until_reset.nanos = duration_us % 1_000_000 * 1000
    for key, value in added:
        response.response_headers_to_add.add(key=key, value=value)
    return response


def _limited(found: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    # limit_remaining is a uint32 in the proto: protobuf itself refuses more.
    return [(c, lim, n, r % 2**32, d) for c, lim, n, r, d in found]


@pytest.mark.parametrize("encode", ENCODERS)
@settings(max_examples=300, deadline=None)
@given(overall=codes, found=statuses, added=headers)
def test_the_bytes_are_protobufs(encode: Any, overall: int, found: list[Any], added: Any) -> None:
    found = _limited(found)
    tuples = [(wire.status_head(c, lim, n), r, d) for c, lim, n, r, d in found]
    data = encode(overall, tuples, wire.tail_bytes(added, None))
    assert data == _message(overall, found, added).SerializeToString()
    assert data == wire._encode_response(overall, tuples, wire.tail_bytes(added, None))


@pytest.mark.parametrize("encode", ENCODERS)
def test_remaining_above_uint32_is_written_as_a_varint_all_the_same(encode: Any) -> None:
    """The encoder writes any uint64 (the service clamps to uint32 before)."""
    head = wire.status_head(R.OK, None, "")
    assert encode(0, [(head, 2**64 - 1, wire.NO_DURATION)], b"") == wire._encode_response(
        0, [(head, 2**64 - 1, wire.NO_DURATION)], b""
    )


def test_metadata_goes_in_the_tail() -> None:
    struct = struct_pb2.Struct()
    struct.update({"tier": "gold", "n": 2})
    head = wire.status_head(R.OK, Limit(5, "minute"), "r")
    data = wire.encode_response(
        R.OK, [(head, 4, 30_000_000)], wire.tail_bytes([("a", "b")], struct)
    )
    message = R.FromString(data)
    assert message.dynamic_metadata == struct
    assert [(h.key, h.value) for h in message.response_headers_to_add] == [("a", "b")]
    assert message.statuses[0].current_limit.name == "r"
    assert message.statuses[0].duration_until_reset.seconds == 30


@pytest.mark.parametrize("encode", ENCODERS)
@pytest.mark.parametrize(
    ("overall", "found", "tail", "error"),
    [
        (-1, [], b"", OverflowError),
        (2**64, [], b"", OverflowError),
        (1, [(b"\x08\x01", -1, 0)], b"", OverflowError),
        (1, [(b"\x08\x01", 2**64, 0)], b"", OverflowError),
        (1, [(b"\x08\x01", 0, 2**63)], b"", OverflowError),
        (1, [("not bytes", 0, 0)], b"", TypeError),
        (1, [(b"\x08\x01", "1", 0)], b"", TypeError),
    ],
)
def test_what_is_not_a_response_raises(
    encode: Any, overall: int, found: list[Any], tail: bytes, error: type[Exception]
) -> None:
    with pytest.raises(error):
        encode(overall, found, tail)


@pytest.mark.skipif(wire.compiled is None, reason="ratewarden.server._wire is not built")
@pytest.mark.parametrize(
    "args",
    [
        (1, ((b"", 0, 0),), b""),  # statuses not a list
        (1, [(b"", 0)], b""),  # a status of two
        (1, [[b"", 0, 0]], b""),  # a status that is a list
        (1, [], "tail"),  # a tail that is str
    ],
)
def test_the_c_function_refuses_other_shapes(args: tuple[Any, ...]) -> None:
    assert wire.compiled is not None
    with pytest.raises(TypeError):
        wire.compiled(*args)


def test_many_statuses_take_the_heap() -> None:
    """More than the C function's eight statuses on the stack, the same bytes."""
    head = wire.status_head(R.OVER_LIMIT, Limit(10, "second"), "n")
    found = [(head, i, i * 1000) for i in range(40)]
    assert wire.encode_response(R.OVER_LIMIT, found, b"") == wire._encode_response(
        R.OVER_LIMIT, found, b""
    )


def test_heads_are_bounded() -> None:
    wire._HEADS.clear()
    for i in range(wire._MAX_HEADS + 10):
        wire.status_head(R.OK, Limit(i, "second"), "")
    assert len(wire._HEADS) <= wire._MAX_HEADS
