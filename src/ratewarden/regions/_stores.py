"""What the strategies take from their caller: a region store per region.

``ReconciledBudget`` and ``DemandExchange`` talk to each region's state only
through the stores they are given: ``RegionStore``s on each region's Redis
(``ratewarden.storage.regions``) or ``MemoryRegionStore``s in this process
(``ratewarden.storage.memory_regions``), never a mix; their asyncio twins
through ``AsyncRegionStore``s or ``AsyncMemoryRegionStore``s. Nothing in
``ratewarden.regions`` opens a connection or imports a Redis client. Until the
next release the blocking ones still take redis clients, as before, with a
``DeprecationWarning``: ``deprecated_clients`` wraps them.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any

from ratewarden.checks import refuse_class
from ratewarden.errors import ConfigurationError

__all__ = ["check_stores", "deprecated_clients", "is_client", "named"]

#: The stores a twin takes (by whether it awaits them): on each region's Redis, in this process.
_KINDS = {
    False: ("RegionStore", "MemoryRegionStore"),
    True: ("AsyncRegionStore", "AsyncMemoryRegionStore"),
}


def named(kind: type) -> str:
    """A class's name with its article: ``a RegionStore``, ``an AsyncRegionStore``."""
    return named_as(kind.__name__)


def named_as(name: str) -> str:
    """``name`` with its article."""
    return f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"


def is_client(value: object) -> bool:
    """Whether ``value`` looks like a redis client (the deprecated form), not a store."""
    return not hasattr(value, "budget_hit") and callable(getattr(value, "register_script", None))


def check_stores(
    caller: str, stores: Mapping[str, object], *, awaited: bool = False
) -> dict[str, Any]:
    """``stores`` (region -> store) as given, once each is a region store of the twin's kind
    (a RegionStore or MemoryRegionStore; their asyncio twins when ``awaited``), all kept in
    one place (on Redis, or in this process) and with one prefix."""
    on_redis, in_process = _KINDS[awaited]
    wanted = f"{named_as(on_redis)} or {named_as(in_process)}"
    prefixes = set()
    kept: dict[str, list[str]] = {}
    for region, store in stores.items():
        refuse_class(caller, f"the store of region {region!r}", store, needs="budget_hit")
        found = f"{caller}: the store of region {region!r} is {named(type(store))}"
        if not callable(getattr(store, "budget_hit", None)):
            raise ConfigurationError(
                f"{found}; it must be {named_as(on_redis)} on that region's Redis "
                f"(ratewarden.storage.regions) or {named_as(in_process)} in this process "
                "(ratewarden.storage.memory_regions)"
            )
        if inspect.iscoroutinefunction(getattr(store, "apply", None)) != awaited:
            raise ConfigurationError(
                f"{found}; it must be {wanted}: the asyncio twins take AsyncRegionStores "
                "(on redis.asyncio clients) or AsyncMemoryRegionStores, the blocking ones "
                "RegionStores or MemoryRegionStores"
            )
        prefixes.add(getattr(store, "prefix", None))
        kept.setdefault(str(getattr(store, "kept", "elsewhere")), []).append(region)
    if len(kept) > 1:
        places = " and ".join(f"{sorted(names)} {place}" for place, names in sorted(kept.items()))
        raise ConfigurationError(
            f"{caller}: the regions' stores keep their counts {places}; a store cannot read "
            f"another's across the two: give every region {named_as(on_redis)} (on Redis) "
            f"or every region {named_as(in_process)} (in this process)"
        )
    if len(prefixes) > 1:
        raise ConfigurationError(
            f"{caller}: the regions' stores use the key prefixes {sorted(map(str, prefixes))}; "
            "every region must use the same one, or they cannot read each other's counts"
        )
    return dict(stores)


def deprecated_clients(
    caller: str, clients: Mapping[str, Any], *, stacklevel: int = 3, **options: Any
) -> dict[str, Any]:
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
