"""RateLimitConfig resources load through the rule files' reader: same rules, same errors."""

from __future__ import annotations

import pytest
from google.protobuf import any_pb2

from ratewarden.server import config as rules
from ratewarden.server.xds import messages
from ratewarden.server.xds.rules import decode, document, load_resources
from tests.xds._control_plane import pack
from tests.xds.conftest import limit, resource

EQUIVALENT_FILE = """\
domain: shop
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /checkout
    shadow_mode: true
    rate_limit: {unit: week, requests_per_unit: 10, name: checkout}
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 0, replaces: [{name: checkout}]}
  - key: internal
    rate_limit: {unlimited: true}
  - key: tagged
    quota_mode: true
    metadata: {team: payments, tier: 2}
    rate_limit: {unit: hour, requests_per_unit: 7}
"""


def _shop() -> object:
    user = messages.RateLimitDescriptor(
        key="user",
        detailed_metric=True,
        rate_limit=messages.RateLimitPolicy(
            unit=1, requests_per_unit=0, replaces=[messages.RateLimitReplace(name="checkout")]
        ),
    )
    checkout = messages.RateLimitDescriptor(
        key="path",
        value="/checkout",
        shadow_mode=True,
        rate_limit=messages.RateLimitPolicy(unit=7, requests_per_unit=10, name="checkout"),
        descriptors=[user],
    )
    tagged = limit("tagged", 0, quota_mode=True)
    tagged.rate_limit.unit = 3  # HOUR
    tagged.rate_limit.requests_per_unit = 7
    tagged.metadata.update({"team": "payments", "tier": 2})
    unlimited = messages.RateLimitDescriptor(
        key="internal", rate_limit=messages.RateLimitPolicy(unlimited=True)
    )
    return resource("shop-rules", "shop", limit("api_key", 3), checkout, unlimited, tagged)


def test_a_resource_loads_to_the_rules_of_the_equivalent_file() -> None:
    """Every field upstream's message has (units, values, nesting, shadow_mode,
    detailed_metric, quota_mode, metadata, unlimited, name, replaces) means what it means in
    a rule file."""
    from_xds = load_resources([_shop()])
    from_file = rules.loads(EQUIVALENT_FILE, "shop.yaml")
    assert from_xds.to_dict() == from_file.to_dict()
    assert [rule.describe().split("  (")[0] for rule in from_xds.rules] == [
        rule.describe().split("  (")[0] for rule in from_file.rules
    ]


def test_a_problem_names_the_resource_and_its_line() -> None:
    """A limit without a unit (UNKNOWN, proto3's default) is the file's 'unit is missing',
    named ``xds:<resource>:<line>``, the line counting in the resource's document."""
    bad = resource(
        "shop-rules",
        "shop",
        messages.RateLimitDescriptor(
            key="api_key", rate_limit=messages.RateLimitPolicy(requests_per_unit=3)
        ),
    )
    with pytest.raises(rules.ConfigError) as caught:
        load_resources([bad])
    [problem] = caught.value.errors
    assert problem.file == "xds:shop-rules"
    assert problem.key == "unit"
    assert "is missing; use one of second, minute" in problem.message
    # The rate_limit block starts there (its first field: the unit would have come first).
    assert document(bad).splitlines()[problem.line - 1].strip() == "requests_per_unit: 3"


def test_unlimited_with_a_unit_is_refused_as_in_a_file() -> None:
    """unlimited with a unit: the file's own message, named by the resource."""
    bad = resource(
        "r",
        "d",
        messages.RateLimitDescriptor(
            key="k", rate_limit=messages.RateLimitPolicy(unlimited=True, unit=1)
        ),
    )
    with pytest.raises(
        rules.ConfigError, match=r"xds:r:\d+: unit: must not be given with unlimited"
    ):
        load_resources([bad])


def test_every_problem_of_every_resource_is_reported() -> None:
    """Two bad resources: both named, as two bad files would be."""
    first = resource("first", "a", messages.RateLimitDescriptor(key=""))
    second = resource("second", "", limit("k", 1))
    with pytest.raises(rules.ConfigError) as caught:
        load_resources([first, second])
    assert {problem.file for problem in caught.value.errors} == {"xds:first", "xds:second"}


def test_one_domain_in_two_resources_is_refused_unless_merged() -> None:
    """As two files: a duplicate domain, unless merge_domains (upstream's MERGE_DOMAIN_CONFIG)."""
    one = resource("one", "shop", limit("a", 1))
    two = resource("two", "shop", limit("b", 2))
    with pytest.raises(rules.ConfigError, match=r"xds:two:1: domain: duplicate domain 'shop'"):
        load_resources([one, two])
    merged = load_resources([one, two], merge_domains=True)
    assert [rule.describe().split(":")[0] for rule in merged.rules] == ["shop.a", "shop.b"]


def test_resources_without_a_name_of_their_own_are_named_by_their_position() -> None:
    """Two unnamed resources of one domain, or two of one name, are told apart by their
    index (as decode names a resource), not both called by the domain or the name."""
    one, two = resource("", "edge", limit("a", 1)), resource("", "edge", limit("b", 2))
    with pytest.raises(rules.ConfigError) as caught:
        load_resources([one, two])
    assert [str(problem) for problem in caught.value.errors] == [
        "xds:resource[1]:1: domain: duplicate domain 'edge', already defined at "
        "xds:resource[0]:1; merge the two resources, rename one domain, or start with "
        "--merge-domains"
    ]
    same = [resource("r", "edge", limit("a", 1)), resource("r", "shop", limit("", 2))]
    with pytest.raises(rules.ConfigError) as caught:
        load_resources(same)
    # Its own problem, and the name it shares (refused too: see below).
    assert [problem.file for problem in caught.value.errors] == ["xds:resource[1]"] * 2
    merged = load_resources([resource("", "edge", limit("a", 1)), resource("x", "shop")])
    assert merged.files == ("xds:resource[0]", "xds:x")


def test_messages_about_resources_say_resource_where_files_say_file() -> None:
    """A resource without a domain, two with one domain, one descriptor in two merged
    resources: the words a file's problem has, about a resource."""
    with pytest.raises(rules.ConfigError, match="every RateLimitConfig resource names its domain"):
        load_resources([resource("r", "", limit("a", 1))])
    twice = [resource("one", "shop", limit("a", 1)), resource("two", "shop", limit("a", 2))]
    with pytest.raises(rules.ConfigError, match="merge the two resources, rename one domain"):
        load_resources(twice)
    with pytest.raises(
        rules.ConfigError, match=r"in the merged domain .*; keep it in one resource$"
    ):
        load_resources(twice, merge_domains=True)
    with pytest.raises(rules.ConfigError, match="every config file names its domain"):
        rules.loads("descriptors: []\n")


def test_no_resource_is_no_rule() -> None:
    """An update without resources (the control plane removed them all) is a config with no
    domain: every request is allowed, as upstream does."""
    assert load_resources([]).domains == {}


def test_a_resource_of_another_type_or_undecodable_is_named_by_its_index() -> None:
    """An Any of another type, or bytes that do not decode, are problems named by position."""
    other = any_pb2.Any(type_url="type.googleapis.com/envoy.config.cluster.v3.Cluster")
    garbage = any_pb2.Any(type_url=messages.TYPE_URL, value=b"\x0a\xff\xff")
    with pytest.raises(rules.ConfigError) as caught:
        decode([*pack(resource("fine", "d")), other, garbage])
    assert [str(problem).split(": ")[0:2] for problem in caught.value.errors] == [
        ["xds:resource[1]", "type_url"],
        ["xds:resource[2]", "value"],
    ]


def test_two_resources_of_one_name_are_refused_as_envoy_refuses_them() -> None:
    """A state-of-the-world update names each resource once; Envoy's own xDS clients NACK a
    duplicate ("duplicate listener ... found"). So the update is refused, naming the second
    one and the first, beside any other problem, and nothing of it is applied."""
    same = [resource("edge-rules", "edge", limit("a", 1)), resource("edge-rules", "edge2")]
    with pytest.raises(rules.ConfigError) as caught:
        load_resources(same)
    assert [str(problem) for problem in caught.value.errors] == [
        "xds:resource[1]: name: 'edge-rules' is resource[0]'s name too: an update names each "
        "resource once (Envoy refuses a duplicate name as well); rename one"
    ]
    also_bad = [*same, resource("x", "")]
    with pytest.raises(rules.ConfigError) as caught:
        load_resources(also_bad)
    assert [problem.file for problem in caught.value.errors] == ["xds:resource[1]", "xds:x"]
