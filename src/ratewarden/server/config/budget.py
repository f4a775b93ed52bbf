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

``read_budget`` checks the block with a ``FieldReader`` (``fields.py``; its
limit with ``limits.py``, as ``rate_limit.py`` does), and returns the
descriptor's ``DescriptorRule`` with ``budget=True`` and one GCRA ``Limit`` counting
tokens (``DescriptorRule.to_dict`` in ``model.py`` writes the block back out). The
service answers such a descriptor by its hits
(``ratewarden.server.budget_service.RuleBudgets``): hits 0 is a check, over the limit
when no token is left; hits N > 0 are N tokens already spent (Envoy's
``apply_on_stream_done``), charged up to an empty budget and never refused.

``failure_mode: local`` is refused: the in-process fallback counts requests,
not a budget. Without a ``failure_mode`` a budget takes ``serve --failure-mode``,
except ``local``, which leaves it ``open``: its checks allow while the store is
down (its charges are owed and paid once it is back, in either mode). The other
descriptor keys (``shadow_mode``, ``quota_mode``, ``detailed_metric``,
``share_threshold``, ``value_to_metric``, ``metadata``, children) mean what they
mean next to ``rate_limit``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ratewarden.algorithms import gcra
from ratewarden.server.config.fields import Entries, FieldReader
from ratewarden.server.config.limits import read_limit
from ratewarden.server.config.model import (
    DEFAULT_FAILURE_MODE,
    FAILURE_MODES,
    ConfigProblem,
    DescriptorRule,
    Limit,
)

__all__ = ["BUDGET_FAILURE_MODES", "BUDGET_KEYS", "read_budget"]

#: The keys of a ``budget`` block.
BUDGET_KEYS = ("unit", "tokens_per_unit", "unit_multiplier", "burst", "failure_mode", "name")
#: What a budget does when the store is down: allow, or deny. Not ``local``: the in-process
#: fallback counts requests, not tokens.
BUDGET_FAILURE_MODES = tuple(mode for mode in FAILURE_MODES if mode != "local")

#: The budget's algorithm: charging up to an empty budget is a GCRA operation.
_ALGORITHM = gcra.NAME


def read_budget(
    reader: FieldReader, entries: Entries, descriptor: DescriptorRule
) -> DescriptorRule | None:
    """The descriptor's ``budget`` as a DescriptorRule, or None with its problems recorded
    on ``reader``.

    ``entries`` is the descriptor's; ``descriptor`` is the rule's domain, path and
    the descriptor's flags (a DescriptorRule without limits); the block fills in the rest.
    """
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
    return replace(
        descriptor,
        source=reader.where(key_node),
        limits=(limit,),
        name="" if name_found is None else name_found[1],
        algorithm=_ALGORITHM,
        failure_mode=failure_mode,
        budget=True,
    )


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
        given = reader.failure_mode
        return given if given in BUDGET_FAILURE_MODES else DEFAULT_FAILURE_MODE
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


def _limit(reader: FieldReader, fields: Entries, node: Any) -> Limit | None:
    return read_limit(
        reader,
        fields,
        node,
        block="budget",
        count="tokens_per_unit",
        minimum=1,
        missing="is missing; give the tokens allowed per unit",
        algorithm=_ALGORITHM,
    )
