"""What the strategies take from their caller: a ``RegionStore`` per region.

``ReconciledBudget`` and ``DemandExchange`` talk to Redis only through the
``RegionStore``s they are given (``ratewarden.storage.regions``), their asyncio
twins through ``AsyncRegionStore``s; nothing in ``ratewarden.regions`` opens a
connection or imports a Redis client. Until the next release the blocking ones
still take redis clients, as before, with a ``DeprecationWarning``:
``deprecated_clients`` wraps them.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ratewarden.errors import ConfigurationError

if TYPE_CHECKING:
    from ratewarden.storage.regions import RegionStore

__all__ = ["check_stores", "deprecated_clients", "is_client", "named"]


def named(kind: type) -> str:
    """A class's name with its article: ``a RegionStore``, ``an AsyncRegionStore``."""
    name = kind.__name__
    return f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"


def is_client(value: object) -> bool:
    """Whether ``value`` looks like a redis client (the deprecated form), not a store."""
    return not hasattr(value, "budget_hit") and callable(getattr(value, "register_script", None))


def check_stores(
    caller: str, stores: Mapping[str, object], *, awaited: bool = False
) -> dict[str, Any]:
    """``stores`` (region -> store) as given, once each is a RegionStore (an AsyncRegionStore
    when ``awaited``) with one prefix."""
    wanted = "an AsyncRegionStore" if awaited else "a RegionStore"
    prefixes = set()
    for region, store in stores.items():
        found = f"{caller}: the store of region {region!r} is {named(type(store))}"
        if not callable(getattr(store, "budget_hit", None)):
            raise ConfigurationError(
                f"{found}; it must be {wanted} (ratewarden.storage.regions) on that region's "
                "Redis: multi-region budgets run on Redis only"
            )
        if inspect.iscoroutinefunction(getattr(store, "apply", None)) != awaited:
            raise ConfigurationError(
                f"{found}; it must be {wanted}: the asyncio twins take AsyncRegionStores "
                "(on redis.asyncio clients), the blocking ones RegionStores"
            )
        prefixes.add(getattr(store, "prefix", None))
    if len(prefixes) > 1:
        raise ConfigurationError(
            f"{caller}: the regions' stores use the key prefixes {sorted(map(str, prefixes))}; "
            "every region must use the same one, or they cannot read each other's counts"
        )
    return dict(stores)


def deprecated_clients(
    caller: str, clients: Mapping[str, Any], *, stacklevel: int = 3, **options: Any
) -> dict[str, RegionStore]:
    """The deprecated form, kept for one release: redis clients, each wrapped in a RegionStore
    made with ``options`` (those given: ``clock``, ``prefix``, ``timeout``).

    This function's only job is the deprecation. It is the one place ``ratewarden.regions``
    imports ``ratewarden.storage`` at run time, and only when an old caller passes clients.
    """
    warnings.warn(
        f"{caller} with redis clients is deprecated and will be removed in the next release; "
        "pass a ratewarden.storage.regions.RegionStore per region instead "
        "(RegionStore(client, clock=..., prefix=..., timeout=...))",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    from ratewarden.storage.regions import RegionStore

    given = {name: value for name, value in options.items() if value is not None}
    return {region: RegionStore(client, **given) for region, client in clients.items()}
