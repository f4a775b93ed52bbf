"""A ``RateLimitResponse`` written straight to its wire bytes.

The service answers every call with a ``RateLimitResponse``; a transport sends its
serialized bytes. Building the message field by field through protobuf's Python
API and then serializing it cost more than deciding the call does, so ``respond``
(``server/response.py``) writes the bytes itself:

- ``status_head(code, limit, name)``: a ``DescriptorStatus``'s fields 1 and 2
  (its code and current limit), serialized once by protobuf and remembered;
- ``encode_response(overall, statuses, tail)``: the response's bytes, from its
  overall code, a ``(head, remaining, duration_us)`` tuple per status and
  ``tail``, the bytes of the response's later fields (headers, dynamic metadata:
  rare, serialized by protobuf, ``tail_bytes``).

The bytes are the ones protobuf's ``SerializeToString`` writes for the same message
(tests/server/test_wire.py holds both functions to it). ``encode_response`` is written
in C when the optional extension ``ratewarden.server._wire`` is built (a C compiler at
install), with this module's Python function as the reference; ``RATEWARDEN_PURE=1``
in the environment keeps the C unused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from envoy.service.ratelimit.v3 import rls_pb2  # type: ignore[import-untyped, unused-ignore]

from ratewarden.server.config import Limit
from ratewarden.server.statuses import UNIT_ENUM

__all__ = ["NO_DURATION", "Status", "encode_response", "status_head", "tail_bytes"]

_Response = rls_pb2.RateLimitResponse

#: A status's ``duration_us`` when it has no ``duration_until_reset``.
NO_DURATION = -1

#: One ``DescriptorStatus``: its head (``status_head``), its ``limit_remaining`` (0: not
#: written, as proto3 omits a default) and its ``duration_until_reset`` in microseconds
#: (``NO_DURATION``: none).
Status = tuple[bytes, int, int]

_U64 = 1 << 64
_I64 = 1 << 63


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, value: int) -> bytes:
    """A varint field, or nothing for 0 (proto3 omits a default)."""
    return bytes((tag,)) + _varint(value) if value else b""


def _status_body(status: Status) -> bytes:
    head, remaining, duration_us = status
    if type(head) is not bytes:
        raise TypeError("a status's head is bytes")
    if not 0 <= remaining < _U64:
        raise OverflowError(f"limit_remaining {remaining} is not a uint64")
    if duration_us >= _I64:
        raise OverflowError(f"duration_us {duration_us} is not an int64")
    body = head + _field(0x18, remaining)
    if duration_us >= 0:
        seconds, micros = divmod(duration_us, 1_000_000)
        inner = _field(0x08, seconds) + _field(0x10, micros * 1000)
        body += b"\x22" + _varint(len(inner)) + inner
    return body


def _encode_response(overall: int, statuses: Sequence[Status], tail: bytes) -> bytes:
    """The reference: see ``encode_response``."""
    if not 0 <= overall < _U64:
        raise OverflowError(f"overall_code {overall} is not a uint64")
    bodies = [_status_body(status) for status in statuses]
    parts = [_field(0x08, overall)]
    for body in bodies:
        parts.append(b"\x12" + _varint(len(body)) + body)
    parts.append(tail)
    return b"".join(parts)


def _load() -> Callable[[int, list[Status], bytes], bytes] | None:
    if os.environ.get("RATEWARDEN_PURE", "") not in ("", "0"):
        return None
    try:
        from ratewarden.server import _wire  # type: ignore[attr-defined, unused-ignore]
    except ImportError:
        return None
    function: Callable[[int, list[Status], bytes], bytes] = _wire.encode_response
    return function


#: The C function, or None (not built, or ``RATEWARDEN_PURE=1``).
compiled = _load()

#: ``encode_response(overall, statuses, tail) -> bytes``: the response's wire bytes, from
#: its ``overall_code``, its statuses (a list of ``Status``, in order) and ``tail``, the
#: serialized fields that follow the statuses (``tail_bytes``; ``b""`` when none).
encode_response: Callable[[int, list[Status], bytes], bytes] = compiled or _encode_response

#: Status heads by (code, requests per unit, unit, name); (code, 0, "", "") for a status with
#: no current limit. Bounded (overrides make limits per request): cleared when full.
_HEADS: dict[tuple[int, int, str, str], bytes] = {}
_MAX_HEADS = 4096


def status_head(code: int, limit: Limit | None, name: str) -> bytes:
    """A ``DescriptorStatus``'s code and, when there is a limit, its current limit, serialized."""
    if limit is None:
        ident = (code, 0, "", "")
    else:
        ident = (code, limit.requests_per_unit, limit.unit, name)
    head = _HEADS.get(ident)
    if head is None:
        if len(_HEADS) >= _MAX_HEADS:
            _HEADS.clear()
        status = _Response.DescriptorStatus(code=code)
        if limit is not None:
            status.current_limit.CopyFrom(
                _Response.RateLimit(
                    requests_per_unit=limit.requests_per_unit,
                    unit=UNIT_ENUM[limit.unit],
                    name=name,
                )
            )
        head = _HEADS[ident] = status.SerializeToString()
    return head


def tail_bytes(headers: Sequence[tuple[str, str]], metadata: Any | None) -> bytes:
    """The serialized ``response_headers_to_add`` and ``dynamic_metadata`` (a ``Struct``, or
    None) of a response: the fields after its statuses."""
    response = _Response()
    for name, value in headers:
        response.response_headers_to_add.add(key=name, value=value)
    if metadata is not None:
        response.dynamic_metadata.CopyFrom(metadata)
    data: bytes = response.SerializeToString()
    return data
