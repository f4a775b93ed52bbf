"""Reading a descriptor's ``metadata`` as envoyproxy/ratelimit reads it: into JSON values.

Upstream reads its files with yaml.v2 and does not check what ``metadata`` holds: it
turns it into a protobuf Struct. ``read_metadata`` takes the same values out of the
YAML node tree:

- A key that is not a string becomes one. At the top of ``metadata`` (a Go
  ``map[string]interface{}``) it is the key as written (``7``, ``0x1F``, ``yes``, ``1.5``;
  ``~`` is ``""``). Deeper (``map[interface{}]interface{}``, turned into strings by
  ``fmt.Sprintf("%v", key)``) it is the value YAML gives, as Go prints it: ``0x1F`` is
  ``"31"``, ``yes`` ``"true"``, ``1.5`` ``"1.5"``, ``1000000.0`` ``"1e+06"``, ``~``
  ``"<nil>"``. Two keys that become the same string: the later one's value stays.
- A timestamp (``2024-01-01``), key or value, is the text written, as yaml.v2 keeps it.
- ``!!binary`` is the text it encodes (refused when that is not UTF-8, as upstream's
  Struct refuses it); ``!!set`` is a mapping of nulls, ``!!omap`` and ``!!pairs`` a list
  of one-key mappings, as yaml.v2 reads them. A tag YAML does not define (``!secret``) is
  refused, as everywhere in the file (yaml.v2 ignores it).

What cannot be read is a ``ConstructError``: where (its mark's line) and what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]

from ratewarden.server.config.fields import CONSTRUCT_ERRORS, _shorten

__all__ = ["ConstructError", "read_metadata"]

ConstructError = yaml.constructor.ConstructorError
_BINARY = "tag:yaml.org,2002:binary"


def read_metadata(node: Any) -> Mapping[str, Any]:
    """The frozen value of a ``metadata`` mapping node; ``ConstructError`` when unreadable
    (``CONSTRUCT_ERRORS`` for a scalar whose text does not fit its tag)."""
    reader = _Upstream()
    reader.flatten_mapping(node)
    found: dict[str, Any] = {}
    for key_node, value_node in node.value:
        found[_top_key(reader, key_node)] = reader.construct_object(value_node, deep=True)
    frozen = _freeze(found)
    assert isinstance(frozen, Mapping)
    return frozen


def _top_key(reader: _Upstream, node: Any) -> str:
    """A top-level key as yaml.v2 reads it into a string: its text as written."""
    if not isinstance(node, yaml.ScalarNode):
        raise ConstructError(
            None, None, "a key is a list or mapping; use a string", node.start_mark
        )
    key = reader.construct_object(node)  # refuses a text that does not fit its tag
    if key is None:
        return ""
    return key if node.tag == _BINARY else str(node.value)


class _Upstream(yaml.constructor.SafeConstructor):  # type: ignore[misc]
    """PyYAML's safe reading, with yaml.v2's readings where the two differ (module docstring)."""

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.MarkedYAMLError:
            raise
        except CONSTRUCT_ERRORS as exc:  # a text that does not fit its tag: `!!int zz`
            tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
            what = _shorten(str(node.value)) if isinstance(node, yaml.ScalarNode) else node.id
            raise ConstructError(
                None, None, f"{what} is not a valid {tag}", node.start_mark
            ) from exc

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[str, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise ConstructError(
                None, None, f"expected a mapping, found {node.id}", node.start_mark
            )
        self.flatten_mapping(node)
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                raise ConstructError(
                    None, None, "a key is a list or mapping; use a string", key_node.start_mark
                )
            mapping[_go_text(key)] = self.construct_object(value_node, deep=deep)
        return mapping

    def _timestamp(self, node: Any) -> Any:
        return self.construct_scalar(node)

    def _binary(self, node: Any) -> str:
        try:
            return base64.decodebytes(str(node.value).encode("ascii")).decode("utf-8")
        except (binascii.Error, UnicodeError):
            raise ConstructError(
                None, None, "!!binary must be base64 of UTF-8 text", node.start_mark
            ) from None

    def _list_of_mappings(self, node: Any) -> list[Any]:
        if not isinstance(node, yaml.SequenceNode):
            raise ConstructError(None, None, f"expected a list, found {node.id}", node.start_mark)
        return [self.construct_object(item, deep=True) for item in node.value]


for _tag, _read in (
    ("tag:yaml.org,2002:timestamp", _Upstream._timestamp),
    (_BINARY, _Upstream._binary),
    ("tag:yaml.org,2002:set", _Upstream.construct_mapping),
    ("tag:yaml.org,2002:omap", _Upstream._list_of_mappings),
    ("tag:yaml.org,2002:pairs", _Upstream._list_of_mappings),
):
    _Upstream.add_constructor(_tag, _read)


def _go_text(key: Any) -> str:
    """``fmt.Sprintf("%v", key)`` of the value yaml.v2 reads."""
    if isinstance(key, str):
        return key
    if key is None:
        return "<nil>"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float):
        return _go_float(key)
    return str(key)


def _go_float(number: float) -> str:
    """Go's ``%v`` of a float64: the shortest digits that read back (Python's ``repr`` finds
    the same), in ``%e`` form when the first digit's exponent is below -4 or at least 6, as
    strconv's shortest ``g`` decides (``1e+06``, ``100000``, ``1.5e-05``, ``0.0001``)."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    sign, digits, exponent = Decimal(repr(number)).normalize().as_tuple()
    assert isinstance(exponent, int)
    minus = "-" if sign else ""
    text = "".join(map(str, digits))
    if number == 0:
        return minus + "0"
    point = len(text) + exponent - 1  # the exponent of the first digit
    if point < -4 or point >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'-' if point < 0 else '+'}{abs(point):02d}"
    if point < 0:
        return f"{minus}0.{'0' * (-point - 1)}{text}"
    whole, fraction = text[: point + 1].ljust(point + 1, "0"), text[point + 1 :]
    return minus + whole + ("." + fraction if fraction else "")


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(item) for item in value)
    return value
