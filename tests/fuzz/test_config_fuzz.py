"""Fuzzing the server's YAML rule loader: a valid config or a ConfigError with file:line.

Two sources of input: random YAML documents built from the config's own
vocabulary (so they get past the first check and into the schema), and
mutations of a valid file that uses every feature (lines deleted, duplicated,
swapped, re-indented, values replaced, text inserted). Whatever comes in, the
loader returns a ``RateLimitConfig`` or raises ``ConfigError`` whose problems
each name the file, a line inside it, the key and what to do.

Known escapes (control characters, explicit ``!!`` tags with bad content, and
5,000-digit numbers) are kept out of the property tests and pinned by strict
xfails at the end.
"""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ratewarden.server import config
from ratewarden.server.config import ConfigError, RateLimitConfig

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
]  # fmt: skip

# YAML refuses these characters outright (yaml.reader.Reader.NON_PRINTABLE).
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


def has_cycle(text: str) -> bool:
    """Whether the YAML node graph refers back to itself (an alias inside its own anchor)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return False

    def walk(node: object, path: set[int]) -> bool:
        if id(node) in path:
            return True
        children: list[object] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        return any(walk(child, path | {id(node)}) for child in children)

    return root is not None and walk(root, set())


def known_bug(text: str) -> bool:
    """Inputs that currently escape as another exception (see the xfails below)."""
    return (
        bool(_NON_PRINTABLE.search(text))
        or "!!" in text
        or bool(re.search(r"\d{4300}", text))
        or has_cycle(text)
    )


def check(text: str) -> None:
    assume(not known_bug(text))
    try:
        loaded = config.loads(text, NAME)
    except ConfigError as exc:
        lines = text.count("\n") + 1
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


# -- known bugs, pinned (src/ratewarden/server/config.py) --------------------------------

RULE_WITH = (
    "domain: x\ndescriptors:\n- key: a\n  rate_limit: {{unit: second, requests_per_unit: {}}}\n"
)


@pytest.mark.xfail(
    strict=True,
    reason="config.py _FileReader.read catches only yaml.MarkedYAMLError; a control "
    "character makes yaml.reader.ReaderError escape instead of a ConfigError with file:line",
)
def test_a_control_character_is_a_config_error() -> None:
    """A NUL or BEL in a file is bad input: ConfigError naming the file."""
    with pytest.raises(ConfigError, match=NAME):
        config.loads("domain: a\x07\n", NAME)


@pytest.mark.xfail(
    strict=True,
    reason="config.py _FileReader.scalar catches only yaml.MarkedYAMLError; an explicit tag "
    "with bad content (!!int abc, !!bool maybe, !!timestamp 2020-13-45) raises "
    "ValueError/KeyError from SafeConstructor",
)
@pytest.mark.parametrize("value", ["!!int abc", "!!bool maybe", "!!timestamp 2020-13-45"])
def test_a_tagged_scalar_with_bad_content_is_a_config_error(value: str) -> None:
    """requests_per_unit: !!int abc names file:line and the key, like any bad value."""
    text = RULE_WITH.format(value)
    with pytest.raises(ConfigError, match=f"{NAME}:4"):
        config.loads(text, NAME)


@pytest.mark.xfail(
    strict=True,
    reason="config.py _FileReader.scalar: SafeConstructor's int() of a 5,000-digit number "
    "raises ValueError (Python's int string limit), which escapes",
)
def test_a_five_thousand_digit_number_is_a_config_error() -> None:
    """A number too long to read is a bad value at its line, not a crash."""
    text = RULE_WITH.format("9" * 5000)
    with pytest.raises(ConfigError, match=f"{NAME}:4"):
        config.loads(text, NAME)


@pytest.mark.xfail(
    strict=True,
    reason="config.py _FileReader.merge and _FileReader.level recurse into YAML aliases "
    "without noticing a cycle: '<<: *self' inside its own anchor, or descriptors "
    "that alias their parent list, raise RecursionError",
)
@pytest.mark.parametrize(
    "text",
    [
        "domain: x\ndescriptors:\n  - key: a\n    rate_limit: &s\n"
        "      unit: second\n      requests_per_unit: 1\n      <<: *s\n",
        "domain: x\ndescriptors: &d\n  - key: a\n    descriptors: *d\n",
    ],
    ids=["merge-into-itself", "descriptors-alias-their-parent"],
)
def test_a_self_referencing_alias_is_a_config_error(text: str) -> None:
    """A YAML alias inside its own anchor is refused with file:line, never a RecursionError."""
    with pytest.raises(ConfigError, match=NAME):
        config.loads(text, NAME)
