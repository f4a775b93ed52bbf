"""What each budgets twin pair stands on: flows written once, run on the twin's limiter.

A base class holds the flows (generators composed from the limiter's, see
``ratewarden.limiter``); its two shells are a blocking and an asyncio class
whose methods are made from the flows with ``blocking`` / ``awaiting``, which
call ``run``. ``Driven`` is that ``run``: the limiter's own, so a shell over a
``Limiter`` blocks and one over an ``AsyncLimiter`` gives an awaitable.
``OverStore`` is a twin that takes a store and builds its limiter over it
(``_driver``: ``Limiter`` or ``AsyncLimiter``, named once per shell). ``check_limiter``
refuses, at construction, a limiter of the other twin: a blocking shell over an
``AsyncLimiter`` would hand back un-awaited coroutines, and an asyncio one over a
``Limiter`` would fail at its first ``await``. ``undo_cancelled`` runs what a
cancelled asyncio call must take back (a reservation its script may have made).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Generic, TypeVar

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import AsyncLimiter, Flow, Limiter
from ratewarden.limiter import undo_cancelled as limiter_undo

__all__ = ["UNDO_WAIT", "Driven", "OverStore", "a_kind", "check_limiter", "undo_cancelled"]

log = logging.getLogger("ratewarden.budgets")

#: Seconds a cancelled call waits for its undo before its CancelledError goes on; the
#: undo itself runs on (bounded by the store's own timeout).
UNDO_WAIT = 2.0

#: The store a shell takes: ``Store`` or ``AsyncStore``.
S = TypeVar("S")
#: The limiter a shell runs its flows on.
L = TypeVar("L", bound=Limiter | AsyncLimiter)
T = TypeVar("T")


class Driven(Generic[L]):
    """Runs this object's flows on ``limiter``."""

    limiter: L

    def run(self, flow: Flow[T]) -> Any:
        """Drive ``flow`` (one of this object's ``*_flow`` methods, or a composition of them)
        on ``limiter``: ``limiter.run(flow)``, to be awaited on the asyncio twin."""
        return self.limiter.run(flow)


def a_kind(value: object) -> str:
    """``a Limiter``, ``an AsyncLimiter``: the type of ``value`` with its article (the value
    itself is not shown: a store URL given by mistake may hold a password)."""
    name = type(value).__name__
    return f"{'an' if name[:1] in 'AEIOU' else 'a'} {name}"


def check_limiter(owner: str, limiter: object, *, awaited: bool, twin: str) -> None:
    """Refuse a ``limiter`` that is not a ``Limiter`` (``awaited``: an ``AsyncLimiter``),
    saying which to give and ``twin``, the other shell, for a limiter of the other kind."""
    wanted, other = (AsyncLimiter, Limiter) if awaited else (Limiter, AsyncLimiter)
    if isinstance(limiter, wanted):
        return
    need = "an AsyncLimiter" if awaited else "a Limiter"
    if isinstance(limiter, other):
        kind = "a blocking" if awaited else "an asyncio"
        raise ConfigurationError(
            f"{owner}: limiter is {a_kind(limiter)}, {kind} limiter; {owner} needs {need}: "
            f"give {need}, or use {twin} over {a_kind(limiter)}"
        )
    raise ConfigurationError(
        f"{owner}: limiter is {a_kind(limiter)}, not a limiter; give {need} "
        f"({wanted.__name__}(store))"
    )


async def undo_cancelled(what: str, undo: Coroutine[Any, Any, Any]) -> None:
    """The limiter's ``undo_cancelled``, waited for ``UNDO_WAIT`` seconds and logged as
    ``budget_undo_failed`` on this package's logger."""
    await limiter_undo(what, undo, wait=UNDO_WAIT, event="budget_undo_failed", logger=log)


class OverStore(Driven[L], Generic[S, L]):
    """A twin over the store it is given: ``limiter`` is a plain ``_driver(store)``."""

    #: ``Limiter`` or ``AsyncLimiter``: what the shell builds over its store.
    _driver: ClassVar[Callable[[Any], Any]]

    def __init__(self, store: S) -> None:
        if store is None:
            # A limiter given no store makes a MemoryStore of its own: a budget per process,
            # which a gateway whose store setting came out empty would never notice. That is
            # given only when asked for by name.
            name = type(self).__name__
            memory = "AsyncMemoryStore" if type(self)._driver is AsyncLimiter else "MemoryStore"
            raise ConfigurationError(
                f"{name}: store is None; give {memory}() for a budget in this process only "
                "(each process keeping its own), or a Redis store shared by every process "
                f"({memory.replace('Memory', 'Redis')}.from_url(url))"
            )
        self.store: S = store
        try:
            self.limiter = type(self)._driver(store)
        except ConfigurationError as error:
            raise ConfigurationError(_named(type(self).__name__, str(error))) from None


def _named(owner: str, message: str) -> str:
    """The limiter's refusal of ``store`` said by ``owner`` (the class the caller built,
    naming its twin): the caller never built a ``Limiter``."""
    mine, other = ("asyncio", "blocking") if owner.startswith("Async") else ("blocking", "asyncio")
    twin = owner.removeprefix("Async") if mine == "asyncio" else f"Async{owner}"
    _, _, said = message.partition(": ")
    said = said.replace(f"the {mine} twin", owner).replace(f"the {other} twin", twin)
    return f"{owner}: {said}"
