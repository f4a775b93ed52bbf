"""YAML that envoyproxy/ratelimit loads, read as its yaml.v2 reads it.

Upstream does not check what ``metadata`` holds: a key that is not a string becomes one
(the text written at the top of ``metadata``, ``fmt.Sprintf("%v", key)`` deeper), and
yaml.v2 keeps a date a string, key or value, in ``metadata`` and in a descriptor's
``value``. These files load here too, with the same metadata in the answer; what neither
can read is refused at its line, without a Python repr in the message.
"""

from __future__ import annotations

import pytest

from ratewarden.server.config import ConfigError, loads
from tests.upstream._probe import Probe

NAME = "rules.yaml"


def rules(*lines: str, value: str = "") -> str:
    """One descriptor ``a`` (with ``value``), 5 a minute, and ``lines`` beside its key."""
    body = "".join(f"    {line}\n" for line in lines)
    given = f"    value: {value}\n" if value else ""
    limit = "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
    return f"domain: d\ndescriptors:\n  - key: a\n{given}{body}{limit}"


def answered(text: str, value: str = "x") -> dict[str, object]:
    """The dynamic metadata of the answer to a=``value`` under ``text``."""
    seen = Probe(loads(text, NAME)).ask("d", ("a", value))
    assert seen.limit == (5, "MINUTE", "")
    return seen.metadata


def test_top_level_keys_that_are_not_strings_are_the_text_written() -> None:
    """metadata: {7: .., 0x1F: .., yes: .., 1.5: .., ~: ..}: yaml.v2 reads a key of Go's
    map[string]interface{} as its text ("" for null)."""
    text = rules("metadata: {7: seven, 0x1F: hex, yes: bool, 1.5: half, ~: null_key}")
    assert answered(text) == {
        "7": "seven",
        "0x1F": "hex",
        "yes": "bool",
        "1.5": "half",
        "": "null_key",
    }


def test_deeper_keys_are_the_values_yaml_gives_printed_as_go_prints_them() -> None:
    """Inside metadata, keys go through fmt.Sprintf("%v"): the value, not the text."""
    keys = "{1: i, 0x1F: h, yes: b, 1.5: f, 1000000.0: e, 100000.0: w, 0.00001: s, "
    keys += "0.0001: t, -2.0: n, .inf: p, .nan: q, ~: z}"
    assert answered(rules(f"metadata: {{nested: {keys}}}")) == {
        "nested": {
            "1": "i",
            "31": "h",
            "true": "b",
            "1.5": "f",
            "1e+06": "e",
            "100000": "w",
            "1e-05": "s",
            "0.0001": "t",
            "-2": "n",
            "+Inf": "p",
            "NaN": "q",
            "<nil>": "z",
        }
    }


def test_keys_inside_lists_are_turned_into_strings_too() -> None:
    """metadata: {tiers: [{1: gold}]}: upstream converts the mappings of a list as well."""
    assert answered(rules("metadata: {tiers: [{1: gold}, {2: silver}]}")) == {
        "tiers": [{"1": "gold"}, {"2": "silver"}]
    }


def test_dates_are_kept_as_the_text_written() -> None:
    """A date or a time, as a key or a value, is the text written, as yaml.v2 keeps it."""
    text = rules("metadata: {since: 2024-01-01, at: 2001-12-14t21:59:43.10-05:00, 2024-02-01: key}")
    assert answered(text) == {
        "since": "2024-01-01",
        "at": "2001-12-14t21:59:43.10-05:00",
        "2024-02-01": "key",
    }


def test_a_value_like_a_date_no_calendar_has_is_its_text() -> None:
    """value: 2020-13-45 (no such month) loads as the text, as upstream loads it, and
    matches that request value."""
    assert answered(rules(value="2020-13-45"), "2020-13-45") == {}


def test_binary_sets_and_ordered_maps_read_as_yaml_v2_reads_them() -> None:
    """!!binary is its text, !!set a mapping of nulls, !!omap a list of one-key mappings."""
    text = rules("metadata: {b: !!binary aGVsbG8=, s: !!set {x, y}, o: !!omap [k: 1, l: 2]}")
    assert answered(text) == {
        "b": "hello",
        "s": {"x": None, "y": None},
        "o": [{"k": 1}, {"l": 2}],
    }


@pytest.mark.parametrize(
    ("line", "where", "message"),
    [
        ("metadata: {a: !!binary //79}", 4, "cannot be read: !!binary must be base64 of UTF-8"),
        ("metadata: {a: !!int zz}", 4, "cannot be read: 'zz' is not a valid !!int"),
        ("metadata:\n      deep:\n        ? [1, 2]\n        : x", 6, "a key is a list or mapping"),
    ],
)
def test_what_cannot_be_read_is_refused_at_its_line(line: str, where: int, message: str) -> None:
    """A problem names the file and line; no Python value's repr in the message."""
    with pytest.raises(ConfigError) as caught:
        loads(rules(line), NAME)
    (problem,) = caught.value.errors
    assert (problem.file, problem.line, problem.key) == (NAME, where, "metadata")
    assert message in problem.message
    assert "datetime" not in problem.message and "b'" not in problem.message
