"""What a budget built wrongly says: the class the caller built, and what to do."""

from __future__ import annotations

import pytest

from ratewarden import AsyncMemoryStore, ConfigurationError, MemoryStore
from ratewarden.budgets import AsyncTokenBudget, TokenBudget


@pytest.mark.parametrize(
    ("cls", "store", "twin"),
    [
        (TokenBudget, AsyncMemoryStore, "AsyncTokenBudget"),
        (AsyncTokenBudget, MemoryStore, "TokenBudget"),
    ],
)
def test_a_store_of_the_other_twin_is_refused_naming_the_budget_and_its_twin(
    cls: type, store: type, twin: str
) -> None:
    """Not ``Limiter: ... or use the asyncio twin``: the caller built no Limiter."""
    with pytest.raises(ConfigurationError) as refused:
        cls(store(), {"tokens": "100/s"}, max_output_tokens=10)
    said = str(refused.value)
    assert said.startswith(f"{cls.__name__}: store is ") and said.endswith(f"or use {twin}")
    assert "Limiter" not in said and "the asyncio twin" not in said


@pytest.mark.parametrize(
    ("axis", "meant"),
    [("token", "tokens"), ("request", "requests"), ("input_token", "input_tokens")],
)
def test_an_axis_spelt_almost_as_an_understood_one_is_refused_when_built(
    axis: str, meant: str
) -> None:
    """``token`` was taken as a custom unit, failing only at the first reserve."""
    with pytest.raises(
        ConfigurationError, match=f"TokenBudget: axis '{axis}': did you mean '{meant}'"
    ):
        TokenBudget(MemoryStore(), {axis: "100/s"}, max_output_tokens=10)


def test_custom_axes_far_from_the_understood_names_are_taken() -> None:
    budget = TokenBudget(MemoryStore(), {"images": "10/s", "tokens_in": "5/s"}, max_output_tokens=1)
    assert [name for name, _ in budget.axes] == ["images", "tokens_in"]
