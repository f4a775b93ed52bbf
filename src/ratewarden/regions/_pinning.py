"""HomeRegion / AsyncHomeRegion: every check of a tenant goes to its home region's store.

One store holds a tenant's state, so the limit is exact (the store's own
guarantee, no reconciliation and no over-admission from regions). The price
is latency: a request served outside the tenant's home region makes its
check across regions, so it pays that link's round trip (70 ms transatlantic)
on the request path, and a partition between the two regions is a store
outage there, handled by the failure mode of the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from ratewarden.checks import keywords_checked
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import AsyncLimiter, FailureHook, Limiter
from ratewarden.rate import Rate
from ratewarden.regions._gcounter import check_region

__all__ = ["AsyncHomeRegion", "HomeRegion"]

L = TypeVar("L", Limiter, AsyncLimiter)


def _tenant_is_key(key: str) -> str:
    return key


class _Pinning(Generic[L]):
    #: The kind every region's limiter must be: ``Limiter`` (a ``TwoTier`` is one) or
    #: ``AsyncLimiter``.
    _kind: type

    @keywords_checked
    def __init__(
        self,
        limiters: Mapping[str, L],
        homes: Mapping[str, str],
        default: str,
        *,
        tenant_of: Callable[[str], str] = _tenant_is_key,
    ) -> None:
        caller = type(self).__name__
        if not isinstance(limiters, Mapping) or not limiters:
            raise ConfigurationError(
                f"{caller}: limiters must map at least one region to its Limiter, not {limiters!r}"
            )
        if not isinstance(homes, Mapping):
            raise ConfigurationError(
                f"{caller}: homes must map each tenant to its home region (such as "
                f"{{'acme': 'eu'}}), not {homes!r} ({type(homes).__name__})"
            )
        if not callable(tenant_of):
            raise ConfigurationError(
                f"{caller}: tenant_of must be a function from a key to its tenant (such as "
                f"lambda key: key.split('/', 1)[0]), not {tenant_of!r}"
            )
        for region, limiter in limiters.items():
            check_region(region)
            if not isinstance(limiter, self._kind):
                kind = self._kind.__name__
                article = "an" if kind[0] in "AEIOU" else "a"
                raise ConfigurationError(
                    f"limiters[{region!r}] is {limiter!r}; {type(self).__name__} takes "
                    f"{article} {kind} (or a two-tier one) for each region"
                )
        if default not in limiters:
            raise ConfigurationError(
                f"default home {default!r} is not one of the regions {sorted(limiters)}"
            )
        for tenant, home in homes.items():
            if home not in limiters:
                raise ConfigurationError(
                    f"tenant {tenant!r} is homed in {home!r}, which is not one of the "
                    f"regions {sorted(limiters)}"
                )
        self.limiters: dict[str, L] = dict(limiters)
        self.homes = dict(homes)
        self.default = default
        self.tenant_of = tenant_of

    def home_of(self, key: str) -> str:
        """The region whose store decides ``key``: its tenant's home, else the default."""
        return self.homes.get(self.tenant_of(key), self.default)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(regions={sorted(self.limiters)}, "
            f"tenants={len(self.homes)}, default={self.default!r})"
        )


class HomeRegion(_Pinning[Limiter]):
    """Sends each check to the ``Limiter`` of the key's home region.

    ``limiters`` maps region -> Limiter (or TwoTier) over that region's store
    (remote ones reached over the cross-region link; give their stores a timeout
    above the link's round trip, and a failure mode for a partition). ``homes``
    maps tenant -> region; ``tenant_of(key)`` finds a key's tenant (the key
    itself by default).
    """

    _kind = Limiter

    def hit(
        self,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int = 1,
        *,
        shadow: bool = False,
        failure_mode: str | None = None,
        on_failure: FailureHook | None = None,
    ) -> Decision:
        """``Limiter.hit`` on the home region's limiter, with the same options."""
        limiter = self.limiters[self.home_of(key)]
        return limiter.hit(
            key, rates, cost, shadow=shadow, failure_mode=failure_mode, on_failure=on_failure
        )

    def peek(
        self, key: str, rates: Rate | Sequence[Rate], *, failure_mode: str | None = None
    ) -> Decision:
        """``Limiter.peek`` on the home region's limiter: the key's state, nothing consumed."""
        return self.limiters[self.home_of(key)].peek(key, rates, failure_mode=failure_mode)

    def reset(self, key: str, rates: Rate | Sequence[Rate]) -> None:
        """``Limiter.reset`` on the home region's limiter."""
        self.limiters[self.home_of(key)].reset(key, rates)


class AsyncHomeRegion(_Pinning[AsyncLimiter]):
    """The asyncio twin of ``HomeRegion`` over ``AsyncLimiter``s (or ``AsyncTwoTier``s)."""

    _kind = AsyncLimiter

    async def hit(
        self,
        key: str,
        rates: Rate | Sequence[Rate],
        cost: int = 1,
        *,
        shadow: bool = False,
        failure_mode: str | None = None,
        on_failure: FailureHook | None = None,
    ) -> Decision:
        """See ``HomeRegion.hit``."""
        limiter = self.limiters[self.home_of(key)]
        return await limiter.hit(
            key, rates, cost, shadow=shadow, failure_mode=failure_mode, on_failure=on_failure
        )

    async def peek(
        self, key: str, rates: Rate | Sequence[Rate], *, failure_mode: str | None = None
    ) -> Decision:
        """See ``HomeRegion.peek``."""
        return await self.limiters[self.home_of(key)].peek(key, rates, failure_mode=failure_mode)

    async def reset(self, key: str, rates: Rate | Sequence[Rate]) -> None:
        """See ``HomeRegion.reset``."""
        await self.limiters[self.home_of(key)].reset(key, rates)
