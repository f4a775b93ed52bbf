"""Reading one descriptor's ``rate_limit``: its limits, algorithm, failure mode, name, replaces.

``read_rate_limit`` checks a ``rate_limit`` block with a ``FieldReader``
(``fields.py``; each limit with ``limits.py``) and returns its ``DescriptorRule``, or None
with every problem recorded on the reader, as ``budget.py`` does for a
descriptor's ``budget``. ``reader.py``
walks the descriptors and calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import yaml

from ratewarden import algorithms
from ratewarden.server.config.fields import Entries, FieldReader
from ratewarden.server.config.limits import read_limit
from ratewarden.server.config.model import (
    ALGORITHM_NAMES,
    DEFAULT_ALGORITHM,
    FAILURE_MODES,
    DescriptorRule,
    Limit,
)

__all__ = ["RATE_LIMIT_KEYS", "read_rate_limit"]

#: The keys of a ``rate_limit`` block.
RATE_LIMIT_KEYS = (
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "unit_multiplier",
    "failure_mode",
    "limits",
)
_LIMIT_KEYS = ("unit", "requests_per_unit", "unit_multiplier", "burst")


def read_rate_limit(
    reader: FieldReader, outer: Entries, descriptor: DescriptorRule
) -> DescriptorRule | None:
    """The descriptor's ``rate_limit`` as a DescriptorRule, or None with its problems
    recorded on reader.

    ``outer`` is the descriptor's entries; ``descriptor`` is the rule's domain, path
    and the descriptor's flags (a DescriptorRule without limits); the block fills in the rest.
    """
    key_node, node = outer["rate_limit"]
    entries = reader.mapping(node, "rate_limit", RATE_LIMIT_KEYS)
    if entries is None:
        return None
    before = len(reader.problems)
    name_found = reader.text(entries, "name")
    name = "" if name_found is None else name_found[1]
    replaces = _replaces(reader, entries, name)
    flagged = len(reader.problems)
    unlimited = reader.flag(entries, "unlimited")
    bad_flag_alone = len(reader.problems) != flagged and not any(
        key in entries for key in ("limits", *_LIMIT_KEYS)
    )
    _refuse_empty(reader, entries)
    algorithm = _choice(reader, entries, "algorithm", ALGORITHM_NAMES, DEFAULT_ALGORITHM)
    failure_mode = _choice(reader, entries, "failure_mode", FAILURE_MODES, reader.failure_mode)
    limits: tuple[Limit, ...] = ()
    if unlimited:
        _check_unlimited(reader, entries)
    elif bad_flag_alone:
        pass  # unlimited: "true" (not a bool) is said; its limit is not missing on top of it
    elif "limits" in entries:
        for key in _LIMIT_KEYS:
            if key in entries:
                reader.problem(
                    entries[key][0],
                    key,
                    "goes inside each item of limits when limits is given, not beside it",
                )
        listed = len(reader.problems)
        items = reader.sequence(entries["limits"][1], "limits")
        if not items and len(reader.problems) == listed:  # not a list: said already
            reader.problem(entries["limits"][0], "limits", "is empty; give at least one limit")
        built = [_limit(reader, item, algorithm) for item in items]
        limits = tuple(limit for limit in built if limit is not None)
        _check_distinct(reader, entries["limits"][0], limits)
    else:
        single = _limit_fields(reader, entries, node, algorithm)
        limits = () if single is None else (single,)
    if len(reader.problems) != before:
        return None
    return replace(
        descriptor,
        source=reader.where(key_node),
        limits=limits,
        unlimited=unlimited,
        name=name,
        replaces=replaces,
        algorithm=algorithm,
        failure_mode=failure_mode,
    )


def _check_unlimited(reader: FieldReader, entries: Entries) -> None:
    unit = reader.text(entries, "unit")
    if unit is not None and unit[1]:
        reader.problem(
            entries["unit"][0],
            "unit",
            "must not be given with unlimited: true; drop the unit (or unlimited)",
        )
    for key in ("limits", "burst", "unit_multiplier", "algorithm", "failure_mode"):
        if key in entries:
            reader.problem(entries[key][0], key, "has no meaning with unlimited: true; drop it")


def _limit(reader: FieldReader, item: Any, algorithm: str) -> Limit | None:
    entries = reader.mapping(item, "a limits item", _LIMIT_KEYS)
    if entries is None:
        return None
    _refuse_empty(reader, entries)
    return _limit_fields(reader, entries, item, algorithm)


def _limit_fields(reader: FieldReader, entries: Entries, node: Any, algorithm: str) -> Limit | None:
    return read_limit(
        reader,
        entries,
        node,
        block="rate limit",
        count="requests_per_unit",
        minimum=0,
        missing="is missing; give a whole number (0 blocks every request)",
        algorithm=algorithm,
    )


#: ratewarden's own keys (upstream's configs have none of them), and what to write in one.
#: Given empty (``failure_mode:``, ``~``, ``null``) such a key is a line left half-edited,
#: not a request for its default: a ``closed`` rule would silently be open.
_OWN_KEYS = {
    "algorithm": f"one of {', '.join(ALGORITHM_NAMES)} ({DEFAULT_ALGORITHM} without the line)",
    "failure_mode": f"one of {', '.join(FAILURE_MODES)} (--failure-mode's without the line)",
    "burst": "a whole number (requests_per_unit without the line)",
}


def _refuse_empty(reader: FieldReader, entries: Entries) -> None:
    for key, what in _OWN_KEYS.items():
        found = entries.get(key)
        if found is None:
            continue
        node = found[1]
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            reader.problem(node, key, f"is empty; give {what}")


def _check_distinct(reader: FieldReader, node: Any, limits: tuple[Limit, ...]) -> None:
    periods: dict[int, Limit] = {}
    for limit in limits:
        if limit.period_us in periods:
            reader.problem(
                node,
                "limits",
                f"{periods[limit.period_us]} and {limit} count over the same period; "
                "keep the stricter one",
            )
        periods[limit.period_us] = limit


def _choice(
    reader: FieldReader, entries: Entries, key: str, choices: Sequence[str], default: str
) -> str:
    found = reader.text(entries, key)
    if found is None:
        return default
    node, value = found
    if value not in choices:
        reader.problem(node, key, f"unknown {key} {value!r}; use one of {', '.join(choices)}")
        return default
    if key == "algorithm" and value not in algorithms.ALGORITHMS:
        built = ", ".join(sorted(algorithms.ALGORITHMS))
        reader.problem(node, key, f"{value!r} is not available in this build; use one of {built}")
    return value


def _replaces(reader: FieldReader, entries: Entries, name: str) -> tuple[str, ...]:
    if "replaces" not in entries:
        return ()
    names: list[str] = []
    for item in reader.sequence(entries["replaces"][1], "replaces"):
        before = len(reader.problems)
        fields = reader.mapping(item, "a replaces item", ("name",))
        if fields is None:
            continue
        found = reader.text(fields, "name")
        if len(reader.problems) != before:  # a key or value said wrong: not empty too
            continue
        if found is None or not found[1]:
            reader.problem(
                item, "replaces", "has an empty entry; give the name of the rule to replace"
            )
        elif found[1] == name:
            reader.problem(
                found[0],
                "replaces",
                f"names its own rule {name!r}; a rule cannot replace itself",
            )
        else:
            names.append(found[1])
            reader.replaced.append((found[1], found[0]))
    return tuple(names)
