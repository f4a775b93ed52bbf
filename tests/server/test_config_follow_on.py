"""One mistake, one problem: a value that failed its type check is not also reported missing
or empty, and a misplaced ``rate_limit`` or ``budget`` is sent to a descriptor."""

from __future__ import annotations

import pytest

from ratewarden.server.config import ConfigError, loads

HEAD = "domain: d\ndescriptors:\n"


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        loads(text, "t.yaml")
    return [str(problem) for problem in caught.value.errors]


@pytest.mark.parametrize(
    ("text", "only"),
    [
        (
            "domain: [a, b]\ndescriptors: []\n",
            "t.yaml:1: domain: must be a single value, not a list or mapping",
        ),
        (
            HEAD + "  - key: {a: 1}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
            "t.yaml:3: key: must be a single value, not a list or mapping",
        ),
        (
            HEAD + '  - key: k\n    rate_limit: {unlimited: "true"}\n',
            "t.yaml:4: unlimited: must be true or false, not 'true'",
        ),
        (
            HEAD + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a}\n"
            "  - key: j\n    rate_limit: {unit: second, requests_per_unit: 1, "
            "replaces: [{nam: a}]}\n",
            "t.yaml:6: nam: unknown key in a replaces item; allowed here: name",
        ),
        (
            HEAD + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a}\n"
            "  - key: j\n    rate_limit: {unit: second, requests_per_unit: 1, "
            "replaces: [{name: [a]}]}\n",
            "t.yaml:6: name: must be a single value, not a list or mapping",
        ),
        (
            HEAD + "  - key: k\n    rate_limit: {unit: [second], requests_per_unit: 1}\n",
            "t.yaml:4: unit: must be a single value, not a list or mapping",
        ),
        (
            HEAD + "  - key: k\n    budget: {unit: {a: 1}, tokens_per_unit: 1}\n",
            "t.yaml:4: unit: must be a single value, not a list or mapping",
        ),
        (
            HEAD + "  - key: k\n    rate_limit: {limits: 5}\n",
            "t.yaml:4: limits: must be a list (each item starting with '- ')",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_one_problem(text: str, only: str) -> None:
    """Before, each of these also said '... is missing' or 'has an empty entry', with advice
    (give a unit, give a name) that did not fit the mistake."""
    assert problems(text) == [only]


@pytest.mark.parametrize("block", ["rate_limit", "budget"])
def test_a_misplaced_block_at_the_top_level_is_sent_to_a_descriptor(block: str) -> None:
    """Not 'belongs in the descriptor (next to rate_limit)': rate_limit beside itself."""
    found = problems(f"domain: d\n{block}: {{unit: second}}\ndescriptors: []\n")
    assert found == [
        f"t.yaml:2: {block}: unknown key in the top level; '{block}' belongs in a descriptor "
        "(an item of descriptors:)"
    ]


def test_a_block_inside_the_other_is_sent_to_a_descriptor_too() -> None:
    """``budget`` written inside ``rate_limit``: the same place, a descriptor."""
    text = HEAD + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, budget: {}}\n"
    assert problems(text) == [
        "t.yaml:4: budget: unknown key in rate_limit; 'budget' belongs in a descriptor "
        "(an item of descriptors:)"
    ]
