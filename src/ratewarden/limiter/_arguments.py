"""A limiter method's arguments refused in the project's words, naming the public method.

Python's TypeError for a bad call names the function that defines it: a private
flow (``Operations.peek_flow() got an unexpected keyword argument 'cost'``) or the
base class (``Limiter.hit()`` called on a ``TwoTier``). ``refuse_arguments`` says it
as ``checks.keywords_checked`` does for constructors: a ``ConfigurationError``
naming the public method, what it takes, and the nearest name. ``blocking`` /
``awaiting`` (``_limiters``) use it for the flows; ``arguments_checked`` for a
method written out, such as ``Limiter.hit`` under ``TwoTier``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from ratewarden.checks import named_for, refuse_unknown
from ratewarden.deprecation import UNSET
from ratewarden.errors import ConfigurationError

__all__ = ["argument_error", "arguments_checked", "placed", "public_name", "refuse_arguments"]

T = TypeVar("T")
P = ParamSpec("P")


#: Why a method takes no ``cost``, for one given it (else the nearest keyword is named).
_NO_COST = {
    "peek": "it consumes nothing (a hit of cost 0), so a cost c fits when remaining >= c",
    "reset": "it forgets all of the key's usage, however much was consumed",
}


def arguments_checked(method: Callable[Concatenate[Any, P], T]) -> Callable[Concatenate[Any, P], T]:
    """``method`` (a method written out, such as ``Limiter.hit``) as a subclass's, refusing a
    keyword it does not take or too many positional arguments with a ConfigurationError that
    names the subclass (``TwoTier.hit: unknown keyword 'shadw'; ... did you mean shadow?``),
    as ``blocking`` / ``awaiting`` do for the flows: Python's TypeError names the class that
    defines it (``Limiter.hit()``). The arguments are looked at only when the call raised a
    TypeError; one raised inside with good arguments is raised as it was. One frame more per
    call: ``Limiter.hit`` itself, the plain limiter's hot path, is not wrapped."""

    def refused(self: Any, error: TypeError, args: Any, kwargs: Any) -> TypeError:
        return argument_error(self, method, error, args, kwargs)

    if inspect.iscoroutinefunction(method):

        async def checked_async(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> Any:
            try:
                called = method(self, *args, **kwargs)
            except TypeError as exc:
                error = refused(self, exc, args, kwargs)
                if error is exc:
                    raise
                raise error from None
            return await called

        return functools.wraps(method)(checked_async)  # type: ignore[return-value]

    def checked(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except TypeError as exc:
            error = refused(self, exc, args, kwargs)
            if error is exc:
                raise
            raise error from None

    return functools.wraps(method)(checked)


def argument_error(
    self: Any, function: Callable[..., Any], error: TypeError, args: Any, kwargs: Any
) -> TypeError:
    """What to raise for ``error``, a TypeError from calling ``function`` (a flow, or a method
    written out) on ``self``: the ConfigurationError of a keyword it does not take or too many
    positional arguments (raised here), a missing argument's TypeError naming the public
    method, or ``error`` itself when the arguments were good (raised inside)."""
    refuse_arguments(self, function, args, kwargs)
    return named_for(error, function, f"{public_name(self, function)}()") or error


def refuse_arguments(
    self: Any, flow: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """A ConfigurationError naming the public method for a keyword ``flow`` does not take or
    too many positional arguments, as ``checks.keywords_checked`` does for constructors
    (Python's TypeError names the private flow: ``Operations.peek_flow() got an unexpected
    keyword argument 'cost'``); nothing otherwise (a missing argument stays Python's
    TypeError, renamed by the caller with ``checks.named_for``)."""
    params = list(inspect.signature(flow).parameters.values())[1:]
    named = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    # A renamed keyword's old name (its default UNSET: ``failure``) is taken, but not offered.
    takes = [p.name for p in named if p.default is not UNSET]
    old = [p.name for p in named if p.default is UNSET]
    name = public_name(self, flow)
    why = _NO_COST.get(flow.__name__.removesuffix("_flow"))
    if "cost" in kwargs and "cost" not in takes and why is not None:
        raise ConfigurationError(
            f"{name}: unknown keyword 'cost'; {why}; it takes {', '.join(takes)}"
        )
    refuse_unknown(name, kwargs, takes, old=old)
    positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    if len(args) > len(positional):
        raise ConfigurationError(
            f"{name}: {len(args)} positional arguments given, but it takes at most "
            f"{len(positional)} ({', '.join(p.name for p in positional)})"
            + ("; give the rest by keyword" if len(takes) > len(positional) else "")
        )


def public_name(self: Any, flow: Callable[..., Any]) -> str:
    """The public method a flow is called as: ``TokenBudget.settle``."""
    return f"{type(self).__name__}.{flow.__name__.removesuffix('_flow')}"


def placed(error: ConfigurationError, where: str) -> None:
    """Begin ``error``'s message with ``where``, the method called (``Limiter.hit: cost 1.5
    must be ...``), as its keyword and shadow errors begin: the store or the flow that
    checks the key, cost, rates and failure mode does not know it. A message that names
    the class or the method already (``TwoTier.hit: ...``, ``release_slot: ...``) is left as
    it is. Only a failed call pays: the callers catch the error in a ``try``, which costs a
    call that succeeds nothing."""
    message = str(error)
    owner, _, method = where.partition(".")
    if not message.startswith((f"{owner}.", f"{owner}:", f"{method}:")):
        error.args = (f"{where}: {message}",)
