"""Reading one limit's fields, written alike in a ``rate_limit`` and in a ``budget``.

A limit is a ``unit``, a count per unit (``requests_per_unit`` in a
``rate_limit``, ``tokens_per_unit`` in a ``budget``), an optional
``unit_multiplier`` and an optional ``burst``. ``read_limit`` checks them with a
``FieldReader`` (``fields.py``), builds the ``Rate`` and lets the algorithm
check it (window algorithms refuse a burst), and returns the ``Limit``, or
None with every problem recorded on the reader. ``rate_limit.py`` and
``budget.py`` call it with their count's name and bounds.

The whole period (``unit`` x ``unit_multiplier``) is at most ``MAX_PERIOD_US``, the
longest period a ``Rate`` takes: 100 years (36,500 days), since a state holds instants up
to a period ahead of now and a Redis Lua number (a double) is exact only below 2**53
microseconds. A longer period is refused naming ``unit_multiplier`` and the largest it can
be for that unit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ratewarden import algorithms
from ratewarden.errors import ConfigurationError
from ratewarden.rate import MAX_PERIOD_US, UNITS, Rate
from ratewarden.server.config.fields import Entries, FieldReader
from ratewarden.server.config.model import UNIT_NAMES, Limit

__all__ = ["MAX_PERIOD_US", "MAX_UNIT_MULTIPLIER", "UINT32_MAX", "read_limit"]

#: The largest count or burst: envoyproxy/ratelimit's ``uint32``.
UINT32_MAX = 2**32 - 1
#: The largest ``unit_multiplier`` of any unit (seconds, minutes and hours stop here).
MAX_UNIT_MULTIPLIER = 1_000_000


def read_limit(
    reader: FieldReader,
    entries: Entries,
    node: Any,
    *,
    block: str,
    count: str,
    minimum: int,
    missing: str,
    algorithm: str,
) -> Limit | None:
    """The limit in ``entries`` (the mapping at ``node``), or None with its problems recorded.

    ``block`` names the block in the unit's message (``rate limit``, ``budget``);
    ``count`` is the count's key, from ``minimum`` to ``UINT32_MAX``, and ``missing``
    what to say when it is absent. A count of 0 is a limit without a rate (every
    request over), which takes no burst.
    """
    before = len(reader.problems)
    unit = _unit(reader, entries, node, block)
    counted = len(reader.problems)
    per_unit = reader.integer(entries, count, minimum, UINT32_MAX)
    if per_unit is None and len(reader.problems) == counted:
        reader.problem(node, count, missing)
    multiplier = reader.integer(entries, "unit_multiplier", 1, MAX_UNIT_MULTIPLIER)
    if unit is not None and multiplier is not None:
        _check_period(reader, unit, multiplier)
    burst = reader.integer(entries, "burst", 1, UINT32_MAX)
    if unit is None or per_unit is None or len(reader.problems) != before:
        return None
    limit = Limit(
        requests_per_unit=per_unit[1],
        unit=unit,
        unit_multiplier=1 if multiplier is None else multiplier[1],
        burst=None if burst is None else burst[1],
    )
    rate = None
    if limit.requests_per_unit > 0:
        try:
            rate = Rate(
                limit.requests_per_unit, timedelta(microseconds=limit.period_us), limit.burst
            )
            module = algorithms.ALGORITHMS.get(algorithm)
            if module is not None:
                # The algorithm's own checks: window algorithms refuse a burst.
                module.params(rate)
        except ConfigurationError as exc:
            blame = "burst" if burst is not None else count
            reader.problem((burst or per_unit)[0], blame, str(exc))
            return None
    elif burst is not None:
        reader.problem(burst[0], "burst", f"has no meaning with {count}: 0")
        return None
    return Limit(limit.requests_per_unit, unit, limit.unit_multiplier, limit.burst, rate)


def _check_period(reader: FieldReader, unit: str, multiplier: tuple[Any, int]) -> None:
    """Refuse a period longer than ``MAX_PERIOD_US``, naming the largest multiplier of ``unit``."""
    node, value = multiplier
    if UNITS[unit] * value <= MAX_PERIOD_US:
        return
    most = MAX_PERIOD_US // UNITS[unit]
    reader.problem(
        node,
        "unit_multiplier",
        f"{value} x {unit} is too long a period to count exactly: the longest is "
        f"{MAX_PERIOD_US // UNITS['day']:,} days (about {MAX_PERIOD_US // UNITS['year']} years); "
        f"with unit: {unit} use unit_multiplier {most:,} or less",
    )


def _unit(reader: FieldReader, entries: Entries, node: Any, block: str) -> str | None:
    before = len(reader.problems)
    found = reader.text(entries, "unit")
    if found is None and len(reader.problems) != before:  # a list or mapping: said already
        return None
    if found is None:
        reader.problem(node, "unit", f"is missing; use one of {', '.join(UNIT_NAMES)}")
        return None
    if found[1].lower() not in UNIT_NAMES:
        reader.problem(
            found[0],
            "unit",
            f"invalid {block} unit {found[1]!r}; use one of {', '.join(UNIT_NAMES)}",
        )
        return None
    return found[1].lower()
