"""Our versions of the cases of envoyproxy/ratelimit's config tests, on its valid files.

Upstream's test/config/config_test.go loads its YAML files (or configs it builds in
Go) and calls ``GetLimit`` with descriptors, checking the limit that matched and the
stats key it counts under (``test-domain.key1_value1.subkey1``). Here each case
runs over our own file in ``tests/upstream/cases/`` (our names and values, the same
shape) or inline YAML, through the real loader and the real service (``Probe``):
the status's ``current_limit`` is the limit, the Prometheus ``key`` label that
counted the hit is the stats key. docs/config.md, "Compatibility with
envoyproxy/ratelimit's config tests", maps every upstream test to the test here;
the invalid files are in ``test_config_case_errors.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ratewarden.server.config import load, loads
from tests.server.conftest import only_problem
from tests.upstream._probe import OK, OVER, Probe

CASES = Path(__file__).parent / "cases"
Entries = tuple[tuple[str, str], ...]


def probe(*files: str, merge: bool = False) -> Probe:
    return Probe(load([CASES / name for name in files], merge_domains=merge))


# ---------------------------------------------------------------- TestBasicConfig

#: entries -> (requests_per_unit, unit, name) and stats key; None: no rule.
BASIC: list[tuple[Entries, tuple[int, str, str] | None, str | None]] = [
    ((("tenant", "globex"),), None, None),
    ((("tenant", "acme"),), None, None),
    ((("client", "partner"), ("route", "x")), None, None),
    ((("batch", "nightly"), ("job", "import")), None, None),
    (
        (("tenant", "acme"), ("route", "search")),
        (4, "SECOND", ""),
        "storefront.tenant_acme.route",
    ),
    (
        (("tenant", "acme"), ("route", "checkout")),
        (8, "SECOND", ""),
        "storefront.tenant_acme.route_checkout",
    ),
    ((("client", "anyone"),), (25, "MINUTE", ""), "storefront.client"),
    ((("client", "partner"),), (35, "MINUTE", ""), "storefront.client_partner"),
    ((("client", "monitor"),), None, None),
    ((("region", "eu"),), (2, "HOUR", ""), "storefront.region"),
    ((("plan", "gold"),), (3, "DAY", "plan_daily"), "storefront.plan"),
    (
        (("batch", "nightly"), ("job", "export")),
        (40, "DAY", ""),
        "storefront.batch_nightly.job_export",
    ),
    ((("user_agent", "curl"),), (75, "MINUTE", ""), "storefront.user_agent_curl"),
    ((("user_agent", "wget"),), (75, "MINUTE", ""), "storefront.user_agent_wget"),
]


@pytest.mark.parametrize(("entries", "limit", "stats_key"), BASIC)
def test_basic_config_matches_the_rule_and_stats_key_upstream_does(
    entries: Entries, limit: tuple[int, str, str] | None, stats_key: str | None
) -> None:
    """A value beats the key alone, no fallback to a parent or a shallower rule, a node
    without limit whitelists, names and units kept, detailed_metric keys by the value."""
    seen = probe("basic.yaml").ask("storefront", *entries)
    assert (seen.limit, seen.stats_key) == (limit, stats_key)
    assert seen.code == OK


def test_basic_config_counts_every_stat_under_the_rule_key() -> None:
    """total_hits, within_limit, near_limit and over_limit all count under one key."""
    service = probe("basic.yaml")
    entries = (("tenant", "acme"), ("route", "search"))  # 4 per second
    codes = [service.ask("storefront", *entries).code for _ in range(5)]
    assert codes == [OK, OK, OK, OK, OVER]
    key = "storefront.tenant_acme.route"
    counts = {stat: service.count(stat, key) for stat in ("total_hits", "within_limit")}
    assert counts == {"total_hits": 5, "within_limit": 4}
    assert (service.count("near_limit", key), service.count("over_limit", key)) == (1, 1)


def test_an_unlimited_rule_answers_ok_and_counts_no_hits() -> None:
    """unlimited: OK with no current_limit, and no hit counted in total_hits or
    within_limit, as upstream's service, which never asks its cache about an unlimited
    descriptor (its config test increments the rule's counters by hand)."""
    service = probe("basic.yaml")
    for _ in range(3):
        seen = service.ask("storefront", ("health", "db"))
        assert seen.unlimited and seen.stats_key is None
    for stat in ("total_hits", "within_limit"):
        assert service.count(stat, "storefront.health") == 0


def test_an_unknown_domain_or_an_empty_descriptor_has_no_rule() -> None:
    """An unknown domain, and a descriptor without entries, match nothing: OK, no rule
    stats; only the unknown domain counts domain_not_found."""
    service = probe("basic.yaml")
    for domain, entries in (
        ("elsewhere", (("tenant", "acme"), ("route", "x"))),
        ("storefront", ()),
    ):
        seen = service.ask(domain, *entries)
        assert (seen.code, seen.limit, seen.stats_key) == (OK, None, None)
    assert service.domain_not_found("elsewhere") == 1
    assert service.domain_not_found("storefront") == 0


# ---------------------------------------------------------------- TestConfigLimitOverride


def test_a_limit_override_replaces_the_limit_on_one_stats_key_per_descriptor() -> None:
    """Envoy's per-descriptor limit wins; the key is the whole descriptor, whatever the limit."""
    service = probe("basic.yaml")
    entries = (("tenant", "acme"), ("route", "search"))
    first = service.ask("storefront", *entries, limit=(10, "DAY"))
    assert (first.limit, first.stats_key) == (
        (10, "DAY", ""),
        "storefront.tenant_acme.route_search",
    )
    second = service.ask("storefront", *entries, limit=(42, "HOUR"))
    assert (second.limit, second.stats_key) == ((42, "HOUR", ""), first.stats_key)
    assert service.count("total_hits", first.stats_key) == 2
    other = service.ask(
        "storefront", ("tenant", "acme"), ("route", "search_else"), limit=(42, "HOUR")
    )
    assert other.stats_key == "storefront.tenant_acme.route_search_else"
    assert service.count("total_hits", other.stats_key) == 1


def test_a_limit_override_in_an_unknown_domain_is_ignored() -> None:
    """As upstream: no domain, no limit, override or not."""
    seen = probe("basic.yaml").ask("elsewhere", ("tenant", "acme"), limit=(10, "DAY"))
    assert (seen.code, seen.limit, seen.stats_key) == (OK, None, None)


# ---------------------------------------------------------------- TestDomainMerge


def test_merged_files_make_one_domain_with_the_rules_of_both() -> None:
    """MERGE_DOMAIN_CONFIG (--merge-domains): each file's descriptors, one domain."""
    service = probe("merge_first.yaml", "merge_second.yaml", merge=True)
    assert service.ask("storefront", ("tenant", "acme")).limit == (10, "MINUTE", "")
    assert service.ask("storefront", ("client", "partner")).limit == (20, "MINUTE", "")
    assert service.ask("storefront", ("client", "other")).limit is None


def test_without_merging_the_second_file_of_a_domain_is_refused() -> None:
    """The same two files without merging: a duplicate domain, at the second file's line."""
    problem = only_problem([CASES / "merge_first.yaml", CASES / "merge_second.yaml"])
    assert (Path(problem.file).name, problem.line, problem.key) == (
        "merge_second.yaml",
        2,
        "domain",
    )
    assert "duplicate domain 'storefront'" in problem.message


# ---------------------------------------------------------------- TestShadowModeConfig

SHADOW = [
    ((("tenant", "acme"), ("route", "search")), 2, False, "storefront.tenant_acme.route"),
    ((("tenant", "acme"), ("route", "checkout")), 3, True, "storefront.tenant_acme.route_checkout"),
    ((("client", "anyone"),), 2, True, "storefront.client"),
    ((("client", "partner"),), 3, False, "storefront.client_partner"),
]


@pytest.mark.parametrize(("entries", "limit", "shadow", "stats_key"), SHADOW)
def test_shadow_mode_rules_are_counted_over_but_answer_ok(
    entries: Entries, limit: int, shadow: bool, stats_key: str
) -> None:
    """Past the limit a shadow_mode rule says OK and counts shadow_mode; the others deny."""
    service = probe("shadow_mode.yaml")
    seen = [service.ask("storefront", *entries) for _ in range(limit + 1)]
    assert {s.stats_key for s in seen} == {stats_key}
    assert seen[-1].code == (OK if shadow else OVER)
    assert service.count("over_limit", stats_key) == 1
    assert service.count("shadow_mode", stats_key) == (1 if shadow else 0)


# ---------------------------------------------------------------- TestWildcardConfig

WILDCARD: list[tuple[Entries, int | None, str | None]] = [
    ((("size", "s1"),), 20, "storefront.size"),
    ((("size", "s2"),), 20, "storefront.size"),
    ((("sku", "tee1"),), 20, "storefront.sku_tee*"),
    ((("sku", "tee2"),), 20, "storefront.sku_tee*"),
    ((("shop", "berlin"), ("sku", "mug2")), 20, "storefront.shop_berlin.sku_mug*"),
    ((("sku", "hat"),), None, None),
    ((("color", "teal1"),), None, None),
    ((("coupon", "saleax"),), 20, "storefront.coupon_sale*x"),
    ((("coupon", "sale123x"),), 20, "storefront.coupon_sale*x"),
    ((("coupon", "salex"),), 20, "storefront.coupon_sale*x"),
    ((("coupon", "salea"),), None, None),
    ((("coupon", "xsalex"),), None, None),
    ((("order", "ord1eu2paid"),), 10, "storefront.order_ord*eu*paid"),
    ((("order", "ordeupaid"),), 10, "storefront.order_ord*eu*paid"),
    ((("order", "ord1paid"),), None, None),
    ((("order", "eu2paid"),), None, None),
]


@pytest.mark.parametrize(("entries", "limit", "stats_key"), WILDCARD)
def test_wildcards_match_as_upstream_and_count_under_the_pattern(
    entries: Entries, limit: int | None, stats_key: str | None
) -> None:
    """* anywhere matches any run of characters, the empty one too; an exact value is
    not a prefix; the stats key names the pattern, not the value."""
    seen = probe("wildcard.yaml").ask("storefront", *entries)
    assert (None if seen.limit is None else seen.limit[0], seen.stats_key) == (limit, stats_key)


def test_values_a_wildcard_or_a_key_alone_matches_have_counters_of_their_own() -> None:
    """Without share_threshold each value is limited on its own, as upstream's cache keys."""
    service = probe("wildcard.yaml")

    def remaining(key: str, *values: str) -> list[int]:
        return [service.ask("storefront", (key, value)).remaining for value in values]

    assert remaining("sku", "tee1", "tee2", "tee1") == [19, 19, 18]
    assert remaining("size", "s1", "s2") == [19, 19]


# ---------------------------------------------------------------- TestShareThreshold

SHARED: list[tuple[str, list[Entries], int, str]] = [
    (
        "basic",
        [(("asset", f"img/{name}"),) for name in ("a.pdf", "b.csv", "c.txt")],
        100,
        "storefront.asset_img/*",
    ),
    (
        "with value_to_metric",
        [(("api", f"v1/{name}"), ("verb", "GET")) for name in ("users", "orders")],
        60,
        "storefront.api_v1/*.verb",
    ),
    (
        "with detailed_metric",
        [(("backend", f"svc/{name}"), ("call", "get")) for name in ("user", "cart")],
        80,
        "storefront.backend_svc/*.call_get",
    ),
    (
        "nested",
        [(("zone", "eu"), ("asset", f"eu/{name}")) for name in ("file1.txt", "file2.txt")],
        200,
        "storefront.zone_eu.asset_eu/*",
    ),
    (
        "the same key at two levels",
        [(("asset", f"cdn/{n}"), ("asset", f"eu/{n}")) for n in ("file1.txt", "file2.txt")],
        300,
        "storefront.asset_cdn/*.asset_eu/*",
    ),
    (
        "parent and child shared",
        [(("owner", f"team/{n}"), ("bucket", f"b/{n}"), ("op", "read")) for n in ("ann", "bo")],
        150,
        "storefront.owner_team/*.bucket_b/*.op",
    ),
    (
        "wildcard beside an exact value",
        [(("report", name),) for name in ("q2", "q23", "q123")],
        100,
        "storefront.report_q*",
    ),
    (
        "middle wildcard",
        [(("endpoint", name),) for name in ("/shop/v1", "/shop-beta-v1", "/shopXYZv1")],
        100,
        "storefront.endpoint_/shop*v1",
    ),
    (
        "several wildcards",
        [(("rpc", name),) for name in ("payAopBgrpc", "payXXXopYYYgrpc", "payopgrpc")],
        50,
        "storefront.rpc_pay*op*grpc",
    ),
    (
        "middle wildcard with value_to_metric",
        [(("gateway", name),) for name in ("/shop/v2", "/shop-beta-v2")],
        80,
        "storefront.gateway_/shop*v2",
    ),
    (
        "middle wildcards at two levels",
        [(("store", s), ("shelf", f)) for s, f in (("s1live", "shAv2"), ("s99live", "shBBBv2"))],
        60,
        "storefront.store_s*live.shelf_sh*v2",
    ),
]


@pytest.mark.parametrize(
    ("requests", "limit", "stats_key"),
    [pytest.param(*case[1:], id=case[0]) for case in SHARED],
)
def test_shared_wildcards_count_every_value_on_one_counter_and_one_stats_key(
    requests: list[Entries], limit: int, stats_key: str
) -> None:
    """All values a share_threshold wildcard matches use one counter (the remaining count
    goes down across them) and one stats key naming the pattern, which wins over
    value_to_metric and detailed_metric."""
    service = probe("share_threshold.yaml")
    seen = [service.ask("storefront", *entries) for entries in requests]
    assert {s.limit[0] if s.limit else None for s in seen} == {limit}
    assert [s.stats_key for s in seen] == [stats_key] * len(requests)
    assert [s.remaining for s in seen] == [limit - n for n in range(1, len(requests) + 1)]
    assert service.count("total_hits", stats_key) == len(requests)


def test_an_exact_value_keeps_its_own_limit_and_counter_beside_a_shared_wildcard() -> None:
    """report q1 is not one of q*'s values: its own 50, its own counter and stats key."""
    service = probe("share_threshold.yaml")
    assert service.ask("storefront", ("report", "q2")).remaining == 99
    exact = service.ask("storefront", ("report", "q1"))
    assert (exact.limit, exact.remaining) == ((50, "MINUTE", ""), 49)
    assert exact.stats_key == "storefront.report_q1"
    assert service.ask("storefront", ("report", "q3")).remaining == 98


def test_an_unshared_wildcard_below_a_shared_one_counts_each_of_its_values() -> None:
    """dir docs/* is shared, doc draft/* is not: dir's values share, doc's do not."""
    service = probe("share_threshold.yaml")

    def ask(folder: str, doc: str) -> tuple[int, str | None]:
        seen = service.ask("storefront", ("dir", folder), ("doc", doc), ("format", "pdf"))
        return seen.remaining, seen.stats_key

    key = "storefront.dir_docs/*.doc_draft/*.format"
    assert ask("docs/a", "draft/1") == (119, key)
    assert ask("docs/b", "draft/1") == (118, key)
    assert ask("docs/a", "draft/2") == (119, key)


def test_values_a_shared_wildcard_does_not_match_have_no_rule() -> None:
    """/shop/v3 is not /shop*v1, payABCgrpc lacks 'op': no rule, nothing counted."""
    service = probe("share_threshold.yaml")
    for entries in ((("endpoint", "/shop/v3"),), (("rpc", "payABCgrpc"),)):
        assert service.ask("storefront", *entries).limit is None


# ---------------------------------------------------------------- TestDetailedMetric

NESTED = """
domain: catalog
descriptors:
  - key: category
    detailed_metric: {parent}
    rate_limit: {{unit: minute, requests_per_unit: 100}}
    descriptors:
      - key: brand
        detailed_metric: {child}
        rate_limit: {{unit: minute, requests_per_unit: 5}}
"""
MARKETPLACE = """
domain: catalog
descriptors:
  - key: seller
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: seller
    value: seller-one
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: buyer
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: item
        detailed_metric: true
      - key: item
        value: item-42
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: buyer
    value: vip
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50000}
    descriptors:
      - key: item
        detailed_metric: true
      - key: item
        value: item-42
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
"""
SHOES = (("category", "shoes"),)
SHOES_ACME = (("category", "shoes"), ("brand", "acme"))
DETAILED: list[tuple[str, str, Entries, str]] = [
    (
        "top level detailed, request stops there",
        NESTED.format(parent="true", child="false"),
        SHOES,
        "catalog.category_shoes",
    ),
    (
        "top level not detailed, request stops there",
        NESTED.format(parent="false", child="false"),
        SHOES,
        "catalog.category",
    ),
    (
        "both detailed, request goes down",
        NESTED.format(parent="true", child="true"),
        SHOES_ACME,
        "catalog.category_shoes.brand_acme",
    ),
    (
        "neither detailed, request goes down",
        NESTED.format(parent="false", child="false"),
        SHOES_ACME,
        "catalog.category.brand",
    ),
    ("key alone, detailed", MARKETPLACE, (("seller", "seller-two"),), "catalog.seller_seller-two"),
    ("a parent with children, detailed", MARKETPLACE, (("buyer", "b-7"),), "catalog.buyer_b-7"),
    (
        "a detailed child",
        MARKETPLACE,
        (("buyer", "b-7"), ("item", "item-42")),
        "catalog.buyer_b-7.item_item-42",
    ),
]


@pytest.mark.parametrize(
    ("text", "entries", "stats_key"), [pytest.param(*case[1:], id=case[0]) for case in DETAILED]
)
def test_detailed_metric_keys_stats_by_the_request_when_the_matched_rule_asks(
    text: str, entries: Entries, stats_key: str
) -> None:
    """The rule the last entry lands on decides: detailed, the request's key_value path."""
    assert Probe(loads(text)).ask("catalog", *entries).stats_key == stats_key


# ---------------------------------------------------------------- TestValueToMetric_*


def pages(*, page: str = "true", verb: str = "true", visitor: str = "false") -> str:
    return f"""
domain: catalog
descriptors:
  - key: page
    value_to_metric: {page}
    descriptors:
      - key: verb
        value_to_metric: {verb}
        descriptors:
          - key: visitor
            detailed_metric: {visitor}
            rate_limit: {{unit: minute, requests_per_unit: 60}}
"""


TWO_LEVELS = """
domain: catalog
descriptors:
  - key: aisle
    value_to_metric: {flag}
    descriptors:
      - key: shelf
        rate_limit: {{unit: second, requests_per_unit: 1}}
"""
MID_LEVEL = """
domain: catalog
descriptors:
  - key: aisle
    descriptors:
      - key: shelf
        value_to_metric: true
        descriptors:
          - key: bin
            rate_limit: {unit: second, requests_per_unit: 1}
"""
CONFIGURED = """
domain: catalog
descriptors:
  - key: page
    value_to_metric: true
    descriptors:
      - key: verb
        value: GET
        value_to_metric: true
        descriptors:
          - key: visitor
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: verb
        value: POST
        value_to_metric: true
        descriptors:
          - key: visitor
            rate_limit: {unit: minute, requests_per_unit: 30}
"""
WILD_ACTION = """
domain: catalog
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
"""
HOME = (("page", "home"), ("verb", "GET"), ("visitor", "v1"))
VALUE_TO_METRIC: list[tuple[str, str, Entries, str]] = [
    ("runtime values", pages(), HOME, "catalog.page_home.verb_GET.visitor"),
    (
        "default key takes the value at its level",
        TWO_LEVELS.format(flag="true"),
        (("aisle", "A"), ("shelf", "foo")),
        "catalog.aisle_A.shelf",
    ),
    (
        "middle level only",
        MID_LEVEL,
        (("aisle", "X"), ("shelf", "Y"), ("bin", "Z")),
        "catalog.aisle.shelf_Y.bin",
    ),
    (
        "no flag, unchanged",
        TWO_LEVELS.format(flag="false"),
        (("aisle", "X"), ("shelf", "Y")),
        "catalog.aisle.shelf",
    ),
    (
        "detailed_metric on the leaf wins",
        pages(visitor="true"),
        HOME,
        "catalog.page_home.verb_GET.visitor_v1",
    ),
    (
        "configured value GET",
        CONFIGURED,
        (("page", "api"), ("verb", "GET"), ("visitor", "u1")),
        "catalog.page_api.verb_GET.visitor",
    ),
    (
        "configured value POST",
        CONFIGURED,
        (("page", "api"), ("verb", "POST"), ("visitor", "u2")),
        "catalog.page_api.verb_POST.visitor",
    ),
    (
        "wildcard, alice",
        WILD_ACTION,
        (("user", "alice"), ("action", "readfile"), ("resource", "docs")),
        "catalog.user_alice.action_readfile.resource",
    ),
    (
        "wildcard, bob",
        WILD_ACTION,
        (("user", "bob"), ("action", "readdata"), ("resource", "db")),
        "catalog.user_bob.action_readdata.resource",
    ),
    (
        "empty first value",
        pages(),
        (("page", ""), ("verb", "GET"), ("visitor", "v1")),
        "catalog.page.verb_GET.visitor",
    ),
    (
        "empty second value",
        pages(),
        (("page", "home"), ("verb", ""), ("visitor", "v1")),
        "catalog.page_home.verb.visitor",
    ),
    (
        "both values empty",
        pages(),
        (("page", ""), ("verb", ""), ("visitor", "v1")),
        "catalog.page.verb.visitor",
    ),
    (
        "no flags, three levels",
        pages(page="false", verb="false"),
        HOME,
        "catalog.page.verb.visitor",
    ),
    (
        "detailed leaf only",
        pages(page="false", verb="false", visitor="true"),
        HOME,
        "catalog.page_home.verb_GET.visitor_v1",
    ),
]


@pytest.mark.parametrize(
    ("text", "entries", "stats_key"),
    [pytest.param(*case[1:], id=case[0]) for case in VALUE_TO_METRIC],
)
def test_value_to_metric_puts_the_request_value_in_the_stats_key(
    text: str, entries: Entries, stats_key: str
) -> None:
    """value_to_metric on a key-only or wildcard node names the request's value (an empty
    one: the key alone); a configured value is always named; detailed_metric wins."""
    service = Probe(loads(text))
    assert service.ask("catalog", *entries).stats_key == stats_key
    assert service.count("within_limit", stats_key) == 1


# ---------------------------------------------------------------- TestWildcardStatsBehavior


def sku(value: str, *flags: str) -> str:
    lines = "".join(f"    {flag}: true\n" for flag in flags)
    return (
        f"domain: catalog\ndescriptors:\n  - key: sku\n    value: '{value}'\n{lines}"
        "    rate_limit: {unit: minute, requests_per_unit: 20}\n"
    )


OTHER_LEVEL = """
domain: catalog
descriptors:
  - key: sku
    value: tee*
    descriptors:
      - key: color
        value_to_metric: true
        descriptors:
          - key: size
            rate_limit: {unit: minute, requests_per_unit: 20}
"""
WILDCARD_STATS: list[tuple[str, str, list[Entries], str | None]] = [
    ("no flags", sku("tee*"), [(("sku", "tee1"),)], "catalog.sku_tee*"),
    ("value_to_metric", sku("tee*", "value_to_metric"), [(("sku", "tee1"),)], None),
    ("share_threshold", sku("tee*", "share_threshold"), [(("sku", "tee1"),)], "catalog.sku_tee*"),
    (
        "share_threshold and value_to_metric",
        sku("tee*", "share_threshold", "value_to_metric"),
        [(("sku", "tee1"),)],
        "catalog.sku_tee*",
    ),
    (
        "value_to_metric on another level",
        OTHER_LEVEL,
        [(("sku", "tee1"), ("color", "red"), ("size", "m"))],
        "catalog.sku_tee*.color_red.size",
    ),
    (
        "middle and trailing, no flags",
        sku("tee*v*"),
        [(("sku", "tee1v2"),), (("sku", "teeXvY"),)],
        "catalog.sku_tee*v*",
    ),
    (
        "middle and trailing, value_to_metric",
        sku("tee*v*", "value_to_metric"),
        [(("sku", "tee1v2"),)],
        None,
    ),
]


@pytest.mark.parametrize(
    ("text", "requests", "stats_key"),
    [pytest.param(*case[1:], id=case[0]) for case in WILDCARD_STATS],
)
def test_wildcard_stats_keys_name_the_pattern_unless_value_to_metric_alone_asks(
    text: str, requests: list[Entries], stats_key: str | None
) -> None:
    """A wildcard's stats key names its pattern; value_to_metric (without share_threshold)
    names the value (``None`` here: the request's own key_value)."""
    service = Probe(loads(text))
    for entries in requests:
        expected = stats_key or "catalog." + ".".join(f"{k}_{v}" for k, v in entries)
        assert service.ask("catalog", *entries).stats_key == expected


# ---------------------------------------------------------------- TestMetadata


def test_metadata_of_the_matched_descriptor_comes_back_with_its_answer() -> None:
    """Each rule's own metadata (nested mappings kept), none where the rule has none."""
    service = probe("metadata.yaml")
    route = service.ask("storefront", ("tenant", "acme"), ("route", "search"))
    assert (route.limit, route.stats_key) == ((4, "SECOND", ""), "storefront.tenant_acme.route")
    assert route.metadata == {"owner": "team_checkout"}
    checkout = service.ask("storefront", ("tenant", "acme"), ("route", "checkout"))
    assert checkout.limit == (8, "SECOND", "") and checkout.metadata == {}
    client = service.ask("storefront", ("client", "anyone"))
    assert (client.limit, client.stats_key) == ((25, "MINUTE", ""), "storefront.client")
    assert client.metadata == {"billing": {"account": "acct_2"}}


def test_metadata_is_kept_on_the_matched_node_of_the_loaded_config() -> None:
    """The config lookup itself carries the metadata, as upstream's RateLimit.Metadata."""
    loaded = load([CASES / "metadata.yaml"])
    found = loaded.match("storefront", [("client", "anyone")])
    assert found is not None and found.node.metadata_dict() == {"billing": {"account": "acct_2"}}
    assert loaded.match("storefront", []) is None


# ---------------------------------------------------------------- the table in docs/config.md


def test_the_docs_table_names_every_case_test_and_only_tests_that_exist() -> None:
    """docs/config.md's compatibility table and these modules name the same tests."""
    docs = (Path(__file__).parents[2] / "docs" / "config.md").read_text(encoding="utf-8")
    table = docs.split("## Compatibility with envoyproxy/ratelimit's config tests", 1)[1]
    named = set(re.findall(r"`(test_\w+)`", table))
    here = Path(__file__).parent
    defined = {
        name
        for module in ("test_config_cases.py", "test_config_case_errors.py")
        for name in re.findall(r"^def (test_\w+)", (here / module).read_text(), re.M)
    }
    defined.discard("test_the_docs_table_names_every_case_test_and_only_tests_that_exist")
    defined.discard("test_every_invalid_case_file_is_in_the_table")
    assert named == defined
