"""Reading a descriptor's ``rlqs_weights``: how its RLQS limit is weighted between Envoys.

``rlqs_weights`` maps peer names (what each Envoy sends in the ``x-ratewarden-rlqs-peer``
header of its quota stream, docs/rlqs.md) to whole-number weights; the key ``default``
weighs every Envoy not named (1 unless given). ``read_rlqs_weights`` checks the mapping
with a ``FieldReader`` and returns it as sorted ``(name, weight)`` pairs, recording each
problem as ``file:line: rlqs_weights: what is wrong and what to do``; ``check_weighted``
refuses weights on a descriptor whose rule has no limit to split.
"""

from __future__ import annotations

from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]

from ratewarden.server.config.fields import CONSTRUCT_ERRORS, Entries, FieldReader, _shorten
from ratewarden.server.config.model import DescriptorRule

__all__ = ["MAX_PEER_NAME", "MAX_WEIGHT", "check_weighted", "peer_name_problem",
           "read_rlqs_weights"]  # fmt: skip

KEY = "rlqs_weights"
#: Largest weight (as ``FairShare``'s): weights times demands stay within what doubles hold
#: closely enough for the store's script and its twin to agree.
MAX_WEIGHT = 1_000_000
#: Longest peer name, in characters (a gRPC metadata value, shown in ``/rlqs.json``).
MAX_PEER_NAME = 128


def peer_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a peer name, or None: 1 to 128 printable ASCII characters
    without spaces (what a gRPC metadata value can carry)."""
    if not name:
        return "is empty"
    if len(name) > MAX_PEER_NAME:
        return f"is longer than {MAX_PEER_NAME} characters"
    if not all("!" <= char <= "~" for char in name):
        return "must be printable ASCII without spaces (a gRPC metadata value)"
    return None


def read_rlqs_weights(reader: FieldReader, entries: Entries) -> tuple[tuple[str, int], ...]:
    """The descriptor's ``rlqs_weights`` as sorted ``(name, weight)`` pairs (``()`` when
    absent or wrong, its problems recorded on ``reader``)."""
    if KEY not in entries:
        return ()
    node = entries[KEY][1]
    if not isinstance(node, yaml.MappingNode) or not node.value:
        reader.problem(
            node, KEY, "must be a mapping of peer names to weights, like {edge-eu: 3, default: 1}"
        )
        return ()
    own, merged = reader.merge(node, KEY)
    weights: dict[str, int] = {}
    lines: dict[str, int] = {}
    wrong = False
    for index, (key_node, value_node) in enumerate(own + merged):
        name = _name(reader, key_node)
        if name is not None and name in lines:
            if index < len(own):  # a merged name is overridden by the mapping's own
                reader.problem(
                    key_node, KEY, f"names {_shorten(name)} twice (first on line {lines[name]})"
                )
                wrong = True
            continue
        weight = None if name is None else _weight(reader, value_node, name)
        if name is None or weight is None:
            wrong = True
            continue
        lines[name] = key_node.start_mark.line + 1
        weights[name] = weight
    return () if wrong else tuple(sorted(weights.items()))


def check_weighted(reader: FieldReader, entries: Entries, rule: DescriptorRule | None) -> None:
    """Weights need a limit to split: on a descriptor without a rule, or with an
    ``unlimited`` one, they are refused."""
    if KEY not in entries:
        return
    if rule is None:
        reader.problem(
            entries[KEY][0],
            KEY,
            "has no limit to weigh: give the descriptor a rate_limit (or budget), or drop it",
        )
    elif rule.unlimited:
        reader.problem(
            entries[KEY][0],
            KEY,
            "has no meaning with unlimited: true (every Envoy is allowed all); drop it",
        )


def _name(reader: FieldReader, node: Any) -> str | None:
    if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
        text = str(getattr(node, "value", "?"))
        reader.problem(node, KEY, f"peer name {_shorten(text)} must be a string; quote it")
        return None
    problem = peer_name_problem(node.value)
    if problem is not None:
        reader.problem(node, KEY, f"peer name {_shorten(node.value)} {problem}")
        return None
    return str(node.value)


def _weight(reader: FieldReader, node: Any, name: str) -> int | None:
    value: Any = None
    if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int":
        try:
            value = reader.constructor.construct_object(node)
        except CONSTRUCT_ERRORS:
            value = None
    if isinstance(value, int) and 1 <= value <= MAX_WEIGHT:
        return value
    text = _shorten(str(getattr(node, "value", "?")))
    if isinstance(node, yaml.ScalarNode) and node.style in ("'", '"'):
        text = f"the string {text} (quoted: write the number without quotes)"
    reader.problem(
        node,
        KEY,
        f"the weight of {_shorten(name)} is {text}; give a whole number from 1 to {MAX_WEIGHT} "
        "(weights are relative: 3 and 1 split a saturated limit 3:1)",
    )
    return None
