"""A BucketId matched against a domain's descriptors in the config's own key order."""

from __future__ import annotations

from ratewarden.server.config import loads
from ratewarden.server.rlqs.buckets import bucket_entries, bucket_rule

RULES = """\
domain: edge
descriptors:
  - key: tenant
    value: gold
    rate_limit: {unit: second, requests_per_unit: 100}
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    value: "bot-*"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: region
    descriptors:
      - key: tenant
        rate_limit: {unit: hour, requests_per_unit: 7}
"""
DOMAIN = loads(RULES).domains["edge"]


def path_of(bucket: dict[str, str]) -> str | None:
    rule = bucket_rule(DOMAIN, bucket)
    return None if rule is None else rule.path


def test_the_order_is_the_configs_whatever_the_maps() -> None:
    """{path, tenant} reads as [(tenant, gold), (path, /x)]: the tree names tenant first."""
    assert bucket_entries(DOMAIN, {"path": "/x", "tenant": "gold"}) == (
        ("tenant", "gold"),
        ("path", "/x"),
    )
    assert path_of({"path": "/x", "tenant": "gold"}) == "edge.tenant_gold.path"
    assert path_of({"tenant": "gold", "path": "/x"}) == "edge.tenant_gold.path"


def test_values_match_as_descriptor_entries_do() -> None:
    """Exact value first, then the first wildcard, then the key-only node; when the first key
    of a level leads nowhere, the next key of the level is tried (region before tenant)."""
    assert path_of({"tenant": "gold"}) == "edge.tenant_gold"
    assert path_of({"tenant": "silver"}) == "edge.tenant"
    assert path_of({"user": "bot-7"}) == "edge.user_bot-*"
    assert path_of({"region": "eu", "tenant": "x"}) == "edge.region.tenant"


def test_a_bucket_with_a_key_the_walk_never_reaches_or_an_unmatched_value_has_no_rule() -> None:
    assert path_of({"tenant": "silver", "path": "/x"}) is None  # silver's node has no children
    assert path_of({"user": "alice"}) is None
    assert path_of({"colour": "red"}) is None
    assert path_of({"region": "eu"}) is None  # the node reached has no rule
    assert bucket_entries(DOMAIN, {"colour": "red"}) is None
    assert bucket_entries(DOMAIN, {}) is None


def test_the_walk_is_the_descriptor_the_rls_would_match() -> None:
    """Every bucket with a rule is a descriptor whose RLS match has that same rule."""
    for bucket in (
        {"tenant": "gold", "path": "/a"},
        {"tenant": "bronze"},
        {"user": "bot-1"},
        {"tenant": "t", "region": "us"},
    ):
        entries = bucket_entries(DOMAIN, bucket)
        assert entries is not None and dict(entries) == bucket
        match = DOMAIN.match(entries)
        assert match is not None and match.rule is bucket_rule(DOMAIN, bucket)
