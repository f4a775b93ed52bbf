"""A missing argument is Python's TypeError, naming the class or method the user called.

Classes built on private bases (``TokenBudget`` on ``_BudgetBase``) and methods run as flows
(``TokenBudget.settle`` is ``settle_flow``) used to say ``_BudgetBase.__init__() missing 1
required positional argument`` or ``_BudgetBase.settle_flow() missing ...``: a name the user
never wrote. A TypeError raised inside the body is left as it is.
"""

from __future__ import annotations

import asyncio

import pytest

from ratewarden.budgets import AsyncTokenBudget, TokenBudget
from ratewarden.checks import keywords_checked, named_for
from ratewarden.limiter import Limiter
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore

LIMITS = {"tokens": "1000/minute"}


def test_a_missing_constructor_argument_names_the_public_class() -> None:
    with pytest.raises(TypeError, match=r"^TokenBudget\(\) missing 1 required positional "):
        TokenBudget(limits=LIMITS)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^AsyncTokenBudget\(\) missing 1 required positional "):
        AsyncTokenBudget(limits=LIMITS)  # type: ignore[call-arg]


def test_a_missing_method_argument_names_the_public_method() -> None:
    budget = TokenBudget(MemoryStore(), LIMITS, max_output_tokens=100)
    held = budget.reserve("k", input_tokens=10)
    with pytest.raises(
        TypeError, match=r"^TokenBudget\.settle\(\) missing 1 required keyword-only argument: "
    ):
        budget.settle(held)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^Limiter\.hit\(\) missing 2 required positional"):
        Limiter(MemoryStore()).hit()  # type: ignore[call-arg]


def test_the_asyncio_twins_methods_too() -> None:
    async def run() -> None:
        budget = AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=100)
        held = await budget.reserve("k", input_tokens=10)
        with pytest.raises(TypeError, match=r"^AsyncTokenBudget\.settle\(\) missing 1 "):
            await budget.settle(held)  # type: ignore[call-arg]

    asyncio.run(run())


def test_a_type_error_from_inside_is_left_alone() -> None:
    class _Base:
        @keywords_checked
        def __init__(self, value: int) -> None:
            raise TypeError("value must be an int, not str")

    class Public(_Base):
        pass

    with pytest.raises(TypeError, match=r"^value must be an int, not str$"):
        Public(1)
    assert named_for(TypeError("other"), _Base.__init__, "Public()") is None
