"""``storage._decisions.single`` built in C (``_speedups.DecisionMaker``) against ``_single``.

The Python function is the reference (and what ``RATEWARDEN_PURE=1`` runs): random rates,
outcomes and costs go to both, and the Decisions must be equal field by field, with the
same types and the same floats (``repr`` of every field), the same errors for bad input.
Outcomes the C does not read (numbers beyond 2**53, floats, lists) go to the Python
function, so they are compared too.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.decision import Decision
from ratewarden.storage import _decisions, _kernel
from tests.storage._kernel_checks import assert_no_leak

pytestmark = pytest.mark.skipif(
    _kernel.speedups is None, reason="ratewarden.storage._speedups is not built"
)

FIELDS = Decision.__slots__


def fields(decision: Decision) -> list[tuple[str, str, str]]:
    """Every field's name, type and repr, the layers' too."""
    out = []
    for name in FIELDS:
        value = getattr(decision, name)
        if name == "layers":
            out += [("layer", "", repr(fields(layer))) for layer in value]
        else:
            out.append((name, type(value).__name__, repr(value)))
    return out


def answer(make: Any, *args: Any, **kwargs: Any) -> object:
    """``make``'s Decision as fields, or its error's type and text."""
    try:
        return fields(make(*args, **kwargs))
    except Exception as error:  # the errors themselves are compared
        return (type(error).__name__, str(error))


EDGE = [0, 1, -1, 2, 999_999, 1_000_000, 333_334, 2**53, 2**53 + 1, -(2**53), -(2**53) - 1]
micros = st.one_of(st.sampled_from(EDGE), st.integers(-(2**60), 2**60), st.integers(0, 10**7))
outcome = st.tuples(
    st.sampled_from([True, False, 1, 0]),
    st.integers(-5, 10**6),
    micros,
    micros,
    st.one_of(st.just(0), micros),
    micros,
)
rates = st.sampled_from(
    [Rate.parse("3/second"), Rate.parse("10/minute", burst=4), Rate(7, timedelta(seconds=1.5))]
)


@settings(max_examples=500, deadline=None)
@given(rate=rates, outcome=outcome, cost=st.sampled_from([0, 1, 5, 2**70]))
def test_c_and_python_build_the_same_decision(
    rate: Rate, outcome: tuple[Any, ...], cost: int
) -> None:
    """The same fields, types and floats, for whole numbers in and beyond the C range."""
    built = _decisions.single(rate, outcome, cost)  # type: ignore[arg-type]
    assert built == _decisions._single(rate, outcome, cost)  # type: ignore[arg-type]
    assert fields(built) == fields(_decisions._single(rate, outcome, cost))  # type: ignore[arg-type]
    assert built.layers[0].layers == () and built.layers[0] == built.layers[0]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((Rate.parse("3/second"), (True, 2, 1.5, 0, 0, 7), 1), {}),  # a float: Python's
        ((Rate.parse("3/second"), [True, 2, 1, 0, 0, 7], 1), {}),  # a list: Python's
        ((Rate.parse("3/second"), (True, 2, 1, 0, 0), 1), {}),  # five: Python's error
        ((Rate.parse("3/second"), (True, 2, 1, 0, 0, "7"), 1), {}),
        ((object(), (True, 2, 1, 0, 0, 7), 1), {}),  # no limit: the same AttributeError
        ((Rate.parse("3/second"), (True, 2, 1, 0, 0, 7)), {}),  # too few arguments
        ((), {"rate": Rate.parse("3/second"), "outcome": (True, 2, 1, 0, 0, 7), "cost": 1}),
        ((Rate.parse("3/second"), (True, 2, -1, -1, -1, -1), 3), {}),  # NEVER: inf, but refill
    ],
)
def test_unusual_calls_answer_as_the_python_function(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    assert answer(_decisions.single, *args, **kwargs) == answer(_decisions._single, *args, **kwargs)


def test_the_builder_is_the_c_one_and_never_is_infinite() -> None:
    assert type(_decisions.single).__name__ == "builtin_function_or_method"
    decision = _decisions.single(Rate.parse("3/second"), (False, 0, -1, -1, -1, 5), 9)
    assert decision.retry_after == math.inf and decision.delay == math.inf
    assert decision.refill_after == 0.000005 and decision.layers[0].cost == 9
    with pytest.raises(TypeError, match="no object slot allowed"):
        _kernel.speedups.DecisionMaker(decision_type=Rate, fallback=_decisions._single)


def test_the_builder_leaks_nothing() -> None:
    rate = Rate.parse("3/second")

    def round_of_calls(i: int) -> None:
        _decisions.single(rate, (True, i, i, 0, i % 2, 7), 1)
        _decisions.single(rate, (False, 0, 2**60, 2**60, 0, 7), 1)  # handed to Python
        with pytest.raises(ValueError):
            _decisions.single(rate, (True, 1), 1)  # type: ignore[arg-type]

    assert_no_leak(round_of_calls)
