"""Reading a descriptor's ``budget``: a token budget Envoy checks on the request, charges after.

ratewarden's extension to the envoyproxy/ratelimit YAML, in place of a
descriptor's ``rate_limit`` (a descriptor has one or the other)::

    - key: tenant
      budget:
        unit: minute
        tokens_per_unit: 100000
        burst: 150000          # optional: tokens at once from rest (default tokens_per_unit)
        unit_multiplier: 1     # optional, as in rate_limit
        failure_mode: closed   # open (default) or closed
        name: tenant_tokens    # optional, reported as current_limit.name

``read_budget`` checks the block with a ``FieldReader`` (``fields.py``), as
``rate_limit.py`` does for ``rate_limit``, and returns a ``Rule`` with
``budget=True`` and one GCRA ``Limit`` counting tokens (``Rule.to_dict`` in
``model.py`` writes the block back out). The service answers such a descriptor by its hits
(``ratewarden.server.budget_service.RuleBudgets``): hits 0 is a check, over the limit
when no token is left; hits N > 0 are N tokens already spent (Envoy's
``apply_on_stream_done``), charged up to an empty budget and never refused.

``failure_mode: local`` is refused: the in-process fallback counts requests,
not a budget. The other descriptor keys (``shadow_mode``, ``quota_mode``,
``detailed_metric``, ``share_threshold``, ``value_to_metric``, ``metadata``,
children) mean what they mean next to ``rate_limit``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from ratewarden.algorithms import gcra
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.server.config.fields import Entries, FieldReader
from ratewarden.server.config.model import (
    DEFAULT_FAILURE_MODE,
    UNIT_NAMES,
    ConfigProblem,
    Limit,
    Rule,
)

__all__ = ["BUDGET_FAILURE_MODES", "BUDGET_KEYS", "read_budget"]

#: The keys of a ``budget`` block.
BUDGET_KEYS = ("unit", "tokens_per_unit", "unit_multiplier", "burst", "failure_mode", "name")
#: What a budget does when the store is down: allow, or deny.
BUDGET_FAILURE_MODES = ("open", "closed")

_UINT32_MAX = 2**32 - 1
#: The budget's algorithm: charging up to an empty budget is a GCRA operation.
_ALGORITHM = gcra.NAME


def read_budget(
    reader: FieldReader,
    entries: Entries,
    *,
    domain: str,
    path: str,
    shadow_mode: bool,
    quota_mode: bool,
    detailed_metric: bool,
) -> Rule | None:
    """The descriptor's ``budget`` as a Rule, or None with its problems recorded on ``reader``."""
    key_node, node = entries["budget"]
    before = len(reader.problems)
    if "rate_limit" in entries:
        reader.problem(
            key_node,
            "budget",
            "a descriptor has rate_limit or budget, not both; put the request limit on "
            "another descriptor (its own rate_limits entry in Envoy)",
        )
    fields = reader.mapping(node, "budget", BUDGET_KEYS)
    _say_tokens(reader.problems, before)
    if fields is None:
        return None
    name_found = reader.text(fields, "name")
    failure_mode = _failure_mode(reader, fields)
    limit = _limit(reader, fields, node)
    if limit is None or len(reader.problems) != before:
        return None
    rule = Rule(
        domain=domain,
        path=path,
        source=reader.where(key_node),
        limits=(limit,),
        name="" if name_found is None else name_found[1],
        algorithm=_ALGORITHM,
        failure_mode=failure_mode,
        shadow_mode=shadow_mode,
        quota_mode=quota_mode,
        detailed_metric=detailed_metric,
        budget=True,
    )
    return rule


#: Keys of rate_limit that the loader would send back to rate_limit, and what a budget says.
_RATE_LIMIT_ONLY = {
    "requests_per_unit": "a budget counts tokens, not requests: write tokens_per_unit",
    "algorithm": "a budget is always gcra (charging up to an empty budget): drop algorithm",
}


def _say_tokens(problems: list[ConfigProblem], start: int) -> None:
    """Past ``start``, rate_limit's keys written in a budget are told what to write instead.

    The loader's own message sends them to rate_limit, which a budget descriptor cannot have.
    """
    for index in range(start, len(problems)):
        message = _RATE_LIMIT_ONLY.get(problems[index].key)
        if message is not None:
            problems[index] = replace(problems[index], message=message)


def _failure_mode(reader: FieldReader, fields: Entries) -> str:
    found = reader.text(fields, "failure_mode")
    if found is None:
        return DEFAULT_FAILURE_MODE
    node, value = found
    if value == "local":
        reader.problem(
            node,
            "failure_mode",
            "local is not available for a budget (the in-process fallback counts requests, "
            "not tokens); use open or closed",
        )
    elif value not in BUDGET_FAILURE_MODES:
        reader.problem(
            node,
            "failure_mode",
            f"unknown failure_mode {value!r}; use one of {', '.join(BUDGET_FAILURE_MODES)}",
        )
    return value


def _unit(reader: FieldReader, fields: Entries, node: Any) -> str | None:
    found = reader.text(fields, "unit")
    if found is None:
        reader.problem(node, "unit", f"is missing; use one of {', '.join(UNIT_NAMES)}")
        return None
    if found[1].lower() not in UNIT_NAMES:
        reader.problem(
            found[0],
            "unit",
            f"invalid budget unit {found[1]!r}; use one of {', '.join(UNIT_NAMES)}",
        )
        return None
    return found[1].lower()


def _limit(reader: FieldReader, fields: Entries, node: Any) -> Limit | None:
    before = len(reader.problems)
    unit = _unit(reader, fields, node)
    counted = len(reader.problems)
    tokens = reader.integer(fields, "tokens_per_unit", 1, _UINT32_MAX)
    if tokens is None and len(reader.problems) == counted:
        reader.problem(node, "tokens_per_unit", "is missing; give the tokens allowed per unit")
    multiplier = reader.integer(fields, "unit_multiplier", 1, 1_000_000)
    burst = reader.integer(fields, "burst", 1, _UINT32_MAX)
    if unit is None or tokens is None or len(reader.problems) != before:
        return None
    limit = Limit(
        requests_per_unit=tokens[1],
        unit=unit,
        unit_multiplier=1 if multiplier is None else multiplier[1],
        burst=None if burst is None else burst[1],
    )
    try:
        rate = Rate(tokens[1], timedelta(microseconds=limit.period_us), limit.burst)
        gcra.params(rate)
    except ConfigurationError as exc:
        blame = burst if burst is not None else tokens
        reader.problem(blame[0], "burst" if burst is not None else "tokens_per_unit", str(exc))
        return None
    return Limit(limit.requests_per_unit, unit, limit.unit_multiplier, limit.burst, rate)
