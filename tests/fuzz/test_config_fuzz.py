"""Fuzzing the server's YAML rule loader: a valid config or a ConfigError with file:line.

Two sources of input: random YAML documents built from the config's own
vocabulary (so they get past the first check and into the schema), and
mutations of a valid file that uses every feature (lines deleted, duplicated,
swapped, re-indented, values replaced, text inserted). Whatever comes in, the
loader returns a ``RateLimitConfig`` or raises ``ConfigError`` whose problems
each name the file, a line inside it, the key and what to do.

The escapes these fuzzers found (control characters, explicit ``!!`` tags with
bad content, 5,000-digit numbers, self-referencing aliases) are fixed; each has
its own test at the end, and the property tests feed them again at random.
"""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden.server import config
from ratewarden.server.config import ConfigError, RateLimitConfig
from ratewarden.server.config.reader import MAX_ALIAS_COPIES

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAME = "fuzz.yaml"

VALID = """\
domain: fuzz
descriptors:
  - key: generic_key
    value: default
    rate_limit:
      unit: minute
      requests_per_unit: 100
      name: base
  - key: remote_address
    rate_limit: &shared
      unit: second
      requests_per_unit: 10
      algorithm: gcra
      burst: 20
      failure_mode: local
    descriptors:
      - key: path
        value: "/api/*"
        share_threshold: true
        rate_limit:
          limits:
            - {unit: second, requests_per_unit: 5}
            - {unit: hour, requests_per_unit: 1000, unit_multiplier: 2}
  - key: tenant
    shadow_mode: true
    detailed_metric: true
    metadata: {team: edge}
    rate_limit:
      <<: *shared
      replaces: [{name: base}]
  - key: blocked
    rate_limit: {unlimited: true}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 0}
"""

VOCABULARY = [
    "domain", "descriptors", "key", "value", "rate_limit", "unit", "requests_per_unit",
    "unlimited", "name", "replaces", "shadow_mode", "detailed_metric", "value_to_metric",
    "share_threshold", "quota_mode", "metadata", "algorithm", "burst", "unit_multiplier",
    "failure_mode", "limits", "second", "minute", "hour", "day", "gcra", "token_bucket",
    "fixed_window", "sliding_window", "open", "closed", "local", "*", "/api/*", "<<",
]  # fmt: skip
SCALAR_TOKENS = [
    "-1", "0", "1", "4294967296", "1.5", "1e3", "~", "null", "yes", "no", "true", "[]",
    "{}", "''", '""', "&a x", "*a", "*undefined", "|", ">", "'unterminated", "[1, 2",
    "{a: 1", "- item", "? complex", "%TAG ! x", "---", "...", "@", "`", "\t", "é", "\U0001d4cd",
    "!!int abc", "!!bool maybe", "!!timestamp 2020-13-45", "!!float x", "!!int 0x", "!!str 1",
    "9" * 5000, "\x00", "\x07", "\x1b[0m", "\ufffe", "&s {<<: *s}", "<<: *s", "*s",
    "[" * 400, "{a: " * 300,
]  # fmt: skip


YAML_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")


def check(text: str) -> None:
    try:
        loaded = config.loads(text, NAME)
    except ConfigError as exc:
        # Lines as YAML counts them: PyYAML also breaks lines at \r, NEL, LS and PS.
        lines = len(YAML_LINE_BREAK.split(text))
        assert exc.errors, "a ConfigError lists at least one problem"
        for problem in exc.errors:
            assert problem.file == NAME
            assert 1 <= problem.line <= lines, f"{problem} points outside the file"
            assert problem.message  # (the key is the offending text, which may be empty)
            assert f"{NAME}:{problem.line}: " in str(exc)
        return
    assert isinstance(loaded, RateLimitConfig)
    loaded.describe()  # a loaded config can always be described and dumped
    loaded.to_dict()


scalars = st.one_of(
    st.sampled_from(VOCABULARY),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.sampled_from(VOCABULARY), st.text(max_size=6)), inner, max_size=5
        ),
    ),
    max_leaves=25,
)


@SETTINGS
@given(documents)
def test_random_yaml_documents_load_or_fail_with_file_and_line(document: object) -> None:
    """Random trees of the config's own words: a config, or problems with file:line."""
    check(yaml.safe_dump(document, allow_unicode=True))


@SETTINGS
@given(
    st.fixed_dictionaries(
        {"domain": st.one_of(st.text(max_size=8), st.integers()), "descriptors": documents}
    )
)
def test_documents_with_a_domain_reach_the_schema_checks(document: object) -> None:
    """With a domain key present, the descriptor checks see random trees too."""
    check(yaml.safe_dump(document, allow_unicode=True))


def mutate(lines: list[str], data: st.DataObject) -> list[str]:
    index = data.draw(st.integers(0, len(lines) - 1))
    operation = data.draw(
        st.sampled_from(["delete", "duplicate", "swap", "indent", "dedent", "value", "insert"])
    )
    line = lines[index]
    if operation == "delete":
        return lines[:index] + lines[index + 1 :]
    if operation == "duplicate":
        return [*lines[: index + 1], line, *lines[index + 1 :]]
    if operation == "swap":
        other = data.draw(st.integers(0, len(lines) - 1))
        lines = list(lines)
        lines[index], lines[other] = lines[other], lines[index]
        return lines
    if operation == "indent":
        return [*lines[:index], "  " + line, *lines[index + 1 :]]
    if operation == "dedent":
        return [*lines[:index], line[2:], *lines[index + 1 :]]
    if operation == "value":
        head, colon, _ = line.partition(": ")
        token = data.draw(st.sampled_from(SCALAR_TOKENS + VOCABULARY))
        return [*lines[:index], f"{head}{colon or ': '}{token}", *lines[index + 1 :]]
    at = data.draw(st.integers(0, len(line)))
    junk = data.draw(st.one_of(st.sampled_from(SCALAR_TOKENS), st.text(max_size=4)))
    return [*lines[:index], line[:at] + junk + line[at:], *lines[index + 1 :]]


def test_the_base_document_is_valid() -> None:
    """The mutations start from a config that loads (else they would test nothing)."""
    loaded = config.loads(VALID, NAME)
    assert loaded.domains["fuzz"].name == "fuzz"
    assert len(loaded.rules) == 6


@SETTINGS
@given(st.data())
def test_mutations_of_a_valid_config_load_or_fail_with_file_and_line(data: st.DataObject) -> None:
    """One to four edits of a valid file: a config, or problems pointing into the file."""
    lines = VALID.splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        lines = mutate(lines, data) or ["domain: x"]
    check("\n".join(lines) + "\n")


# -- escapes the fuzzers found, now fixed (src/ratewarden/server/config/) ---------------------

RULE_WITH = (
    "domain: x\ndescriptors:\n- key: a\n  rate_limit: {{unit: second, requests_per_unit: {}}}\n"
)


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\ufffe"])
def test_a_control_character_is_a_config_error_at_its_line(char: str) -> None:
    """A NUL, BEL, ESC or non-character in a file: ConfigError with file:line, not ReaderError."""
    with pytest.raises(ConfigError, match=f"{NAME}:2: yaml: .*{re.escape(repr(char))}") as caught:
        config.loads(f"domain: a\ndescriptors: b{char}\n", NAME)
    assert len(caught.value.errors) == 1


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ("!!int abc", "!!int"),
        ("!!bool maybe", "!!bool"),
        ("!!timestamp 2020-13-45", "!!timestamp"),
        ("!!timestamp 2020-13-4520", "!!timestamp"),  # PyYAML: AttributeError, not ValueError
    ],
)
def test_a_tagged_scalar_with_bad_content_is_a_config_error(value: str, tag: str) -> None:
    """requests_per_unit: !!int abc names file:line, the key and the tag, like any bad value."""
    text = RULE_WITH.format(value)
    with pytest.raises(ConfigError, match=f"{NAME}:4: requests_per_unit: .* not a valid {tag}"):
        config.loads(text, NAME)


def test_bad_tagged_metadata_is_a_config_error() -> None:
    """metadata is read deep: a bad tagged scalar inside it is a problem at the metadata line."""
    text = "domain: x\ndescriptors:\n- key: a\n  metadata: {team: !!int abc}\n"
    with pytest.raises(ConfigError, match=f"{NAME}:4: metadata: cannot be read"):
        config.loads(text, NAME)


def test_a_five_thousand_digit_number_is_a_config_error() -> None:
    """A number too long to read is a bad value at its line, shown cut short, not a crash."""
    text = RULE_WITH.format("9" * 5000)
    with pytest.raises(ConfigError, match=f"{NAME}:4: .*5000 characters") as caught:
        config.loads(text, NAME)
    assert len(str(caught.value)) < 300, "the message must not echo 5,000 digits"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "domain: x\ndescriptors:\n  - key: a\n    rate_limit: &s\n"
            "      unit: second\n      requests_per_unit: 1\n      <<: *s\n",
            4,
        ),
        ("domain: x\ndescriptors: &d\n  - key: a\n    descriptors: *d\n", 2),
    ],
    ids=["merge-into-itself", "descriptors-alias-their-parent"],
)
def test_a_self_referencing_alias_is_a_config_error(text: str, line: int) -> None:
    """A YAML alias inside its own anchor is refused with file:line, never a RecursionError."""
    with pytest.raises(ConfigError, match=f"{NAME}:{line}: .*cycle"):
        config.loads(text, NAME)


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "{a: " * 3000 + "1" + "}" * 3000])
def test_nesting_deeper_than_the_stack_is_a_config_error(text: str) -> None:
    """Thousands of nested brackets: 'nested too deeply' at a line, not a RecursionError."""
    with pytest.raises(ConfigError, match=f"{NAME}:2: yaml: .*nested too deeply"):
        config.loads(f"domain: x\ndescriptors: {text}\n", NAME)


def chained_aliases(links: int) -> str:
    """Each list aliases the previous one twice: 2**links descriptors from ~3*links lines."""
    text = "domain: x\ndescriptors:\n  - key: root\n    descriptors: &l0\n      - {key: a}\n"
    for i in range(1, links):
        text += f"  - key: r{i}\n    descriptors: &l{i}\n"
        text += "".join(f"      - {{key: k{j}, descriptors: *l{i - 1}}}\n" for j in range(2))
    return text


def test_a_small_alias_chain_still_expands_like_yaml_v2() -> None:
    """Aliasing a descriptor list is legal (yaml.v2 expands it): 2**6 copies load fine."""
    loaded = config.loads(chained_aliases(6), NAME)
    assert len(loaded.domains["x"].root.nodes) == 6


def test_an_exponential_alias_chain_is_refused_quickly() -> None:
    """30 links would be 2**30 descriptors: refused past MAX_ALIAS_COPIES, not expanded."""
    with pytest.raises(ConfigError, match=f"more than {MAX_ALIAS_COPIES} descriptors"):
        config.loads(chained_aliases(30), NAME)


def test_merges_of_merges_stay_linear() -> None:
    """Each rate_limit merges the two before it: 40 links load (first source wins per key)."""
    text = "domain: x\ndescriptors:\n"
    text += "  - key: a0\n    rate_limit: &a0 {unit: second, requests_per_unit: 1}\n"
    text += "  - key: b0\n    rate_limit: &b0 {unit: minute, requests_per_unit: 2}\n"
    for i in range(1, 40):
        text += f"  - key: a{i}\n    rate_limit: &a{i}\n      <<: [*a{i - 1}, *b{i - 1}]\n"
        text += f"  - key: b{i}\n    rate_limit: &b{i}\n      <<: [*b{i - 1}, *a{i - 1}]\n"
    loaded = config.loads(text, NAME)
    rules = {rule.path: rule for rule in loaded.rules}
    assert str(rules["x.a39"].rates[0]) == "1/second"
    assert str(rules["x.b39"].rates[0]) == "2/minute"
