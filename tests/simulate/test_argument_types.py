"""run and run_layered refuse a wrongly typed pattern or rate with a ConfigurationError that
says how to make the right one, as they refuse a bad algorithm or duration: not an internal
AttributeError from the middle of the run."""

from __future__ import annotations

import pytest

from ratewarden import ConfigurationError, Rate
from ratewarden.simulate import parse, run, run_layered

RATE = Rate.parse("10/second")
LAYERS = [Rate.parse("10/second"), Rate.parse("100/minute")]


def test_run_refuses_a_pattern_given_as_text() -> None:
    """The text of a pattern is refused with the parse call that reads it."""
    with pytest.raises(ConfigurationError) as raised:
        run("steady", "gcra", RATE, 1)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "pattern 'steady' is text, not a Pattern; read it with ratewarden.simulate.parse('steady')"
    )


def test_run_refuses_something_that_is_no_pattern() -> None:
    """Neither a Pattern nor text: refused, naming what a pattern is."""
    with pytest.raises(ConfigurationError, match=r"pattern 3 must be a Pattern: parse\("):
        run(3, "gcra", RATE, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rate", "said"),
    [
        ("10/s", "rate '10/s' is not a Rate; use Rate.parse('10/s')"),
        (LAYERS, "run takes one Rate, not 2; several rates on one key are run_layered's"),
        (10, "rate 10 must be a Rate (Rate.parse('10/second'))"),
    ],
    ids=["text", "list", "number"],
)
def test_run_refuses_a_rate_that_is_not_one_rate(rate: object, said: str) -> None:
    """Text, several rates or a number for the rate: each refused, saying what to pass."""
    with pytest.raises(ConfigurationError) as raised:
        run(parse("steady:load=1"), "gcra", rate, 1)  # type: ignore[arg-type]
    assert str(raised.value) == said


def test_run_layered_refuses_a_pattern_given_as_text() -> None:
    """run_layered checks its pattern as run does."""
    with pytest.raises(ConfigurationError, match="pattern 'steady' is text, not a Pattern"):
        run_layered("steady", "gcra", LAYERS, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rates", "said"),
    [
        (
            "10/s,100/m",
            "rates '10/s,100/m' are text, not Rates; read them with parse_layers('10/s,100/m')",
        ),
        (
            RATE,
            "rates '10/second' is one Rate; a layered limit is a list of two or more (one rate "
            "alone is a single-rate run)",
        ),
        (["10/s", "100/m"], "layer '10/s' is not a Rate; use Rate.parse('10/s')"),
    ],
    ids=["text", "one-rate", "texts"],
)
def test_run_layered_refuses_rates_that_are_not_a_list_of_rates(rates: object, said: str) -> None:
    """Text (parse_layers reads it), one Rate, or a list of texts: each refused plainly."""
    with pytest.raises(ConfigurationError) as raised:
        run_layered(parse("steady"), "gcra", rates, 1)  # type: ignore[arg-type]
    assert str(raised.value) == said


def test_right_arguments_still_run() -> None:
    """The checks take a Pattern and Rates as before: steady at the rate is all admitted."""
    assert run(parse("steady:load=1"), "gcra", RATE, 2).summary().denied == 0
    assert run_layered(parse("steady:load=0.5"), "gcra", LAYERS, 2).summary().denied == 0
