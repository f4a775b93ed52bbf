"""Names that moved: the old import keeps working, with a ``DeprecationWarning``, for one release.

A module that gave up some names makes its ``__getattr__`` with ``moved``::

    __getattr__ = moved(__name__, {"RuleBudgets": "ratewarden.server.budget_service"})

``ratewarden.budgets.envoy.RuleBudgets`` (or ``from ratewarden.budgets.envoy
import RuleBudgets``) then warns ``ratewarden.budgets.envoy.RuleBudgets is
deprecated; import RuleBudgets from ratewarden.server.budget_service`` and
returns the name from its new home. The new home is imported only when an old
name is asked for, so a module below its names' new home (``budgets`` below
``server``) imports nothing from it otherwise.

A keyword that was renamed keeps its old name as a parameter defaulting to
``UNSET``, and the function takes its value with ``renamed``. The new name's
default is a sentinel of its own (here ``OPEN``, ``Default("open")``, whose repr is
``'open'``), so that the new name given at its default's value can be told from
the new name left out: with a plain ``"open"`` default, ``failure="closed",
failure_mode="open"`` would be taken as closed instead of refused::

    def __init__(self, *, failure_mode: str = OPEN, failure: str = UNSET) -> None:
        failure_mode = renamed("TwoTier", "failure", "failure_mode", failure, failure_mode, OPEN)
        if failure_mode is OPEN:  # neither given
            failure_mode = "open"

``TwoTier(failure="closed")`` then warns ``TwoTier(failure=...) is deprecated;
use failure_mode=`` and means ``TwoTier(failure_mode="closed")``; both names
given is a ``ConfigurationError``, whatever ``failure_mode`` says.

A leaf: it imports nothing of ratewarden beyond the exception tree.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ratewarden.errors import ConfigurationError

__all__ = ["OPEN", "UNSET", "Default", "moved", "renamed"]

T = TypeVar("T")


class _Unset:
    """The type of ``UNSET``: one value, told apart from every value a caller may give."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


#: The default of a renamed keyword's old name: "not given", told apart from None and any value.
UNSET: Any = _Unset()


class Default:
    """The default of a renamed keyword's new name: reads as ``value`` in a signature, and is
    told apart from ``value`` given (``OPEN``)."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


#: The default of ``failure_mode`` where ``failure`` was its old name (``TwoTier``, the
#: middlewares): ``open`` when neither was given.
OPEN: Any = Default("open")


def moved(module: str, homes: Mapping[str, str]) -> Callable[..., Any]:
    """A module ``__getattr__`` resolving each name of ``homes`` from the module named there.

    ``module`` is the old module's name (its ``__name__``); each access to a moved
    name warns with a ``DeprecationWarning`` that names the new import. Any other
    name raises ``AttributeError``, as a module without ``__getattr__`` does.
    """
    if not isinstance(module, str) or not module:
        raise ConfigurationError(f"moved: module {module!r} must be the module's __name__")
    if not isinstance(homes, Mapping) or not all(
        isinstance(name, str) and isinstance(home, str) and home for name, home in homes.items()
    ):
        raise ConfigurationError(
            f"moved: homes {homes!r} must map each moved name to the module it lives in now"
        )
    table = dict(homes)

    def resolve(name: str, depth: int = 0) -> Any:
        home = table.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        # stacklevel 2: the warning names the line that asked for the old name; a module
        # ``__getattr__`` that calls this one passes ``depth=1`` for its own frame.
        warnings.warn(
            f"{module}.{name} is deprecated; import {name} from {home}",
            DeprecationWarning,
            stacklevel=2 + depth,
        )
        return getattr(importlib.import_module(home), name)

    return resolve


def renamed(
    what: str, old: str, new: str, old_value: Any, value: T, default: T, *, stacklevel: int = 3
) -> T:
    """The value of keyword ``new`` of ``what``, or of its old name ``old`` when that was given.

    ``old_value`` is ``UNSET`` when the old keyword was not given: ``value`` (the
    new keyword's) is returned as is, at the cost of one comparison. Otherwise
    a ``DeprecationWarning`` says ``<what>(<old>=...) is deprecated; use <new>=``
    and ``old_value`` is returned; both given (``value`` is not ``default``) is a
    ``ConfigurationError``: ``default`` should be a sentinel that no caller gives
    (see the module), else the new name given at its default's value passes.
    ``stacklevel`` is ``warnings.warn``'s from here: 3, the default, names the line
    that called the function calling ``renamed``.
    """
    if old_value is UNSET:
        return value
    if value is not default and value != default:
        raise ConfigurationError(
            f"{what}: {old}= is the deprecated name of {new}=; give {new}= only "
            f"(got {old}={old_value!r} and {new}={value!r})"
        )
    warnings.warn(
        f"{what}({old}=...) is deprecated; use {new}=", DeprecationWarning, stacklevel=stacklevel
    )
    found: T = old_value
    return found
