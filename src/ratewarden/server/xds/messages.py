"""The ``ratelimit.config.ratelimit.v3`` messages, built at import time from their definition.

A control plane sends the rules as ``RateLimitConfig`` resources. The message is
envoyproxy/ratelimit's own (its ``api/ratelimit/config/ratelimit/v3/rls_conf.proto``),
not Envoy's, so ``xds-protos`` does not ship it; here it is written out field by
field as a ``FileDescriptorProto``, with the numbers and types of that file, and the
message classes come from protobuf's message factory. No generated code, no
``grpcio-tools``: the wire format is all that has to match.

``TYPE_URL`` is what the resources' ``Any`` carry and what the ADS subscription asks for.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, struct_pb2

__all__ = [
    "PACKAGE",
    "TYPE_URL",
    "UNITS",
    "RateLimitConfig",
    "RateLimitDescriptor",
    "RateLimitPolicy",
    "RateLimitReplace",
]

PACKAGE = "ratelimit.config.ratelimit.v3"
TYPE_URL = f"type.googleapis.com/{PACKAGE}.RateLimitConfig"

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

#: ``RateLimitUnit`` by number, as rls_conf.proto numbers them (WEEK came last: 7).
UNITS = {
    0: "UNKNOWN",
    1: "SECOND",
    2: "MINUTE",
    3: "HOUR",
    4: "DAY",
    5: "MONTH",
    6: "YEAR",
    7: "WEEK",
}

# (message, [(field name, number, label, type, type name of a message or enum field)])
_MESSAGES: tuple[tuple[str, tuple[tuple[str, int, int, int, str], ...]], ...] = (
    (
        "RateLimitConfig",
        (
            ("name", 1, _OPTIONAL, _F.TYPE_STRING, ""),
            ("domain", 2, _OPTIONAL, _F.TYPE_STRING, ""),
            ("descriptors", 3, _REPEATED, _F.TYPE_MESSAGE, "RateLimitDescriptor"),
        ),
    ),
    (
        "RateLimitDescriptor",
        (
            ("key", 1, _OPTIONAL, _F.TYPE_STRING, ""),
            ("value", 2, _OPTIONAL, _F.TYPE_STRING, ""),
            ("rate_limit", 3, _OPTIONAL, _F.TYPE_MESSAGE, "RateLimitPolicy"),
            ("descriptors", 4, _REPEATED, _F.TYPE_MESSAGE, "RateLimitDescriptor"),
            ("shadow_mode", 5, _OPTIONAL, _F.TYPE_BOOL, ""),
            ("detailed_metric", 6, _OPTIONAL, _F.TYPE_BOOL, ""),
            ("quota_mode", 7, _OPTIONAL, _F.TYPE_BOOL, ""),
            ("metadata", 8, _OPTIONAL, _F.TYPE_MESSAGE, ".google.protobuf.Struct"),
        ),
    ),
    (
        "RateLimitPolicy",
        (
            ("unit", 1, _OPTIONAL, _F.TYPE_ENUM, "RateLimitUnit"),
            ("requests_per_unit", 2, _OPTIONAL, _F.TYPE_UINT32, ""),
            ("unlimited", 3, _OPTIONAL, _F.TYPE_BOOL, ""),
            ("name", 4, _OPTIONAL, _F.TYPE_STRING, ""),
            ("replaces", 5, _REPEATED, _F.TYPE_MESSAGE, "RateLimitReplace"),
        ),
    ),
    ("RateLimitReplace", (("name", 1, _OPTIONAL, _F.TYPE_STRING, ""),)),
)


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="ratelimit/config/ratelimit/v3/rls_conf.proto",
        package=PACKAGE,
        syntax="proto3",
        dependency=["google/protobuf/struct.proto"],
    )
    for name, fields in _MESSAGES:
        message = file.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            field = message.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                field.type_name = type_name if type_name[0] == "." else f".{PACKAGE}.{type_name}"
    unit = file.enum_type.add(name="RateLimitUnit")
    for number, name in sorted(UNITS.items()):
        unit.value.add(name=name, number=number)
    return file


def _classes() -> dict[str, Any]:
    # A pool of our own, seeded with Struct's file: the default pool may already hold a
    # definition of this file (a generated module another library imported), and a second,
    # different one there would be refused.
    pool = descriptor_pool.DescriptorPool()
    struct_file = descriptor_pb2.FileDescriptorProto()
    struct_pb2.DESCRIPTOR.CopyToProto(struct_file)
    pool.Add(struct_file)
    pool.Add(_file())
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name, _fields in _MESSAGES
    }


_CLASSES = _classes()
RateLimitConfig: Any = _CLASSES["RateLimitConfig"]
RateLimitDescriptor: Any = _CLASSES["RateLimitDescriptor"]
RateLimitPolicy: Any = _CLASSES["RateLimitPolicy"]
RateLimitReplace: Any = _CLASSES["RateLimitReplace"]
