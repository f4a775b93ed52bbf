"""A descriptor's ``rlqs_weights``: what loads, what it writes back, and every error.

Peer names map to whole-number weights (1 to 1,000,000); ``default`` weighs the Envoys
not named (1 unless given). Each broken file fails with one problem naming its file,
line and key, and what to do.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ratewarden.server.config import ConfigError, load, loads

FIXTURES = Path(__file__).parent / "fixtures"

WEIGHTED = """\
domain: edge
descriptors:
  - key: tenant
    rlqs_weights: {edge-eu: 3, edge-us: 1, default: 2}
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 60}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 5}
"""

ERRORS = {
    "weights_error_zero.yaml": (6, "the weight of 'us' is '0'; give a whole number from 1"),
    "weights_error_fraction.yaml": (4, "the weight of 'eu' is '1.5'"),
    "weights_error_too_large.yaml": (4, "from 1 to 1000000"),
    "weights_error_not_a_mapping.yaml": (4, "must be a mapping of peer names to weights"),
    "weights_error_empty.yaml": (4, "must be a mapping of peer names to weights"),
    "weights_error_name_with_space.yaml": (5, "printable ASCII without spaces"),
    "weights_error_name_not_a_string.yaml": (5, "must be a string; quote it"),
    "weights_error_name_twice.yaml": (6, "names 'eu' twice (first on line 5)"),
    "weights_error_without_a_rule.yaml": (4, "has no limit to weigh"),
    "weights_error_unlimited.yaml": (4, "no meaning with unlimited: true"),
}


def test_weights_load_by_peer_name_with_a_default_for_the_others() -> None:
    """Named peers get their weight, any other Envoy (or one naming none) the default."""
    rules = {rule.path: rule for rule in loads(WEIGHTED, "w.yaml").rules}
    tenant = rules["edge.tenant"]
    assert tenant.rlqs_weights == (("default", 2), ("edge-eu", 3), ("edge-us", 1))
    assert [tenant.rlqs_weight(peer) for peer in ("edge-eu", "edge-us", "other", "")] == [
        3,
        1,
        2,
        2,
    ]
    assert "rlqs_weights=default:2,edge-eu:3,edge-us:1" in tenant.describe()
    assert rules["edge.path"].rlqs_weights == ()
    assert rules["edge.path"].rlqs_weight("edge-eu") == 1


def test_without_a_default_key_the_envoys_not_named_weigh_one() -> None:
    text = WEIGHTED.replace(", default: 2", "")
    [tenant, _] = loads(text, "w.yaml").rules
    assert tenant.rlqs_weight("other") == 1


def test_weights_write_back_as_loadable_yaml_next_to_the_rate_limit() -> None:
    """``to_dict`` keeps them on the descriptor, and the written YAML loads to the same rule."""
    config = loads(WEIGHTED, "w.yaml")
    written = yaml.safe_dump({"domain": "edge", **config.domains["edge"].to_dict()})
    [node, _] = yaml.safe_load(written)["descriptors"]
    assert node["rlqs_weights"] == {"default": 2, "edge-eu": 3, "edge-us": 1}
    assert loads(written, "again.yaml").rules[0].rlqs_weights == config.rules[0].rlqs_weights


def test_every_weights_error_fixture_is_in_the_table() -> None:
    files = {path.name for path in FIXTURES.glob("weights_error_*.yaml")}
    assert files - {"weights_error_inside_rate_limit.yaml"} == set(ERRORS)


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_a_weights_error_names_file_line_and_key(name: str) -> None:
    """One problem, at ``file:line: rlqs_weights:``, saying what is wrong and what to do."""
    line, words = ERRORS[name]
    path = FIXTURES / name
    with pytest.raises(ConfigError) as caught:
        load([path])
    [problem] = caught.value.errors
    assert (problem.file, problem.line, problem.key) == (str(path), line, "rlqs_weights")
    assert words in problem.message


def test_weights_inside_rate_limit_are_pointed_to_the_descriptor() -> None:
    """As ``shadow_mode``: a descriptor key written in the rule's block says where it goes."""
    path = FIXTURES / "weights_error_inside_rate_limit.yaml"
    with pytest.raises(ConfigError) as caught:
        load([path])
    [problem] = caught.value.errors
    assert (problem.line, problem.key) == (7, "rlqs_weights")
    assert "belongs in the descriptor (next to rate_limit)" in problem.message


def test_a_quoted_weight_is_named_a_string() -> None:
    """``{a: "3"}`` is a string in YAML: the message says so, not just that '3' is refused."""
    text = WEIGHTED.replace("edge-eu: 3", 'edge-eu: "3"')
    with pytest.raises(ConfigError) as caught:
        loads(text, "w.yaml")
    assert (
        "the weight of 'edge-eu' is the string '3' (quoted: write the number without quotes)"
        in (str(caught.value))
    )
