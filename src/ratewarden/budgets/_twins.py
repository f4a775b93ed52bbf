"""What each budgets twin pair stands on: flows written once, run on the twin's limiter.

A base class holds the flows (generators composed from the limiter's, see
``ratewarden.limiter``); its two shells are a blocking and an asyncio class
whose methods are made from the flows with ``blocking`` / ``awaiting``, which
call ``run``. ``Driven`` is that ``run``: the limiter's own, so a shell over a
``Limiter`` blocks and one over an ``AsyncLimiter`` gives an awaitable.
``OverStore`` is a twin that takes a store and builds its limiter over it
(``_driver``: ``Limiter`` or ``AsyncLimiter``, named once per shell).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from ratewarden.limiter import AsyncLimiter, Flow, Limiter

__all__ = ["Driven", "OverStore"]

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


class OverStore(Driven[L], Generic[S, L]):
    """A twin over the store it is given: ``limiter`` is a plain ``_driver(store)``."""

    #: ``Limiter`` or ``AsyncLimiter``: what the shell builds over its store.
    _driver: ClassVar[Callable[[Any], Any]]

    def __init__(self, store: S) -> None:
        self.store: S = store
        self.limiter = type(self)._driver(store)
