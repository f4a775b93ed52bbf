"""The RateLimitConfig messages built at import time read the wire format of upstream's proto."""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from ratewarden.server.xds import messages

# envoyproxy/ratelimit's api/ratelimit/config/ratelimit/v3/rls_conf.proto, field by field.
UPSTREAM_FIELDS = {
    "RateLimitConfig": {"name": 1, "domain": 2, "descriptors": 3},
    "RateLimitDescriptor": {
        "key": 1,
        "value": 2,
        "rate_limit": 3,
        "descriptors": 4,
        "shadow_mode": 5,
        "detailed_metric": 6,
        "quota_mode": 7,
        "metadata": 8,
    },
    "RateLimitPolicy": {
        "unit": 1,
        "requests_per_unit": 2,
        "unlimited": 3,
        "name": 4,
        "replaces": 5,
    },
    "RateLimitReplace": {"name": 1},
}
UPSTREAM_UNITS = {
    "UNKNOWN": 0,
    "SECOND": 1,
    "MINUTE": 2,
    "HOUR": 3,
    "DAY": 4,
    "WEEK": 7,
    "MONTH": 5,
    "YEAR": 6,
}


def test_every_field_has_upstreams_number() -> None:
    """Each message has exactly upstream's fields, with upstream's numbers."""
    for name, fields in UPSTREAM_FIELDS.items():
        descriptor = getattr(messages, name).DESCRIPTOR
        assert descriptor.full_name == f"ratelimit.config.ratelimit.v3.{name}"
        assert {field.name: field.number for field in descriptor.fields} == fields


def test_the_unit_enum_has_upstreams_numbers() -> None:
    """WEEK was added last upstream, so it is 7, after MONTH and YEAR."""
    enum = messages.RateLimitPolicy.DESCRIPTOR.fields_by_name["unit"].enum_type
    assert {value.name: value.number for value in enum.values} == UPSTREAM_UNITS
    assert {name: number for number, name in messages.UNITS.items()} == UPSTREAM_UNITS


def test_bytes_written_by_hand_to_upstreams_numbering_decode() -> None:
    """A resource encoded by hand (tags from upstream's numbers) decodes to its fields."""
    replace = b"\x0a\x03old"  # RateLimitReplace.name = 1
    policy = (
        b"\x08\x07"
        + b"\x10\x05"
        + b"\x18\x00"
        + b"\x22\x03new"
        + b"\x2a"
        + bytes([len(replace)])
        + replace
    )
    descriptor = (
        b"\x0a\x03key"
        + b"\x12\x03val"
        + b"\x1a"
        + bytes([len(policy)])
        + policy
        + b"\x28\x01"  # shadow_mode = 5
        + b"\x30\x01"  # detailed_metric = 6
        + b"\x38\x01"  # quota_mode = 7
    )
    wire = b"\x0a\x01n" + b"\x12\x01d" + b"\x1a" + bytes([len(descriptor)]) + descriptor
    config = messages.RateLimitConfig.FromString(wire)
    assert (config.name, config.domain) == ("n", "d")
    [item] = config.descriptors
    assert (item.key, item.value, item.shadow_mode, item.detailed_metric, item.quota_mode) == (
        "key",
        "val",
        True,
        True,
        True,
    )
    assert item.rate_limit.unit == 7  # WEEK
    assert item.rate_limit.requests_per_unit == 5
    assert item.rate_limit.name == "new"
    assert [r.name for r in item.rate_limit.replaces] == ["old"]


def test_the_type_url_is_the_one_upstream_subscribes_to() -> None:
    """The type URL upstream's rls_conf.proto names for the ADS requests."""
    assert messages.TYPE_URL == (
        "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
    )


def test_metadata_is_a_protobuf_struct() -> None:
    """Field 8 is google.protobuf.Struct, so a control plane's Struct reads as one."""
    field = messages.RateLimitDescriptor.DESCRIPTOR.fields_by_name["metadata"]
    assert field.message_type.full_name == "google.protobuf.Struct"
    assert field.type == descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
