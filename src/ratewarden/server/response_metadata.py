"""An answer's ``dynamic_metadata``, in one of two shapes (``--response-metadata``).

- ``merged`` (ratewarden's default): the rules' ``metadata`` of the descriptors that
  passed, merged at the top level in request order, a later key winning; none when no
  passing descriptor has any. ``response.respond`` builds it as it reads the statuses.
- ``upstream``: envoyproxy/ratelimit's shape with ``RESPONSE_DYNAMIC_METADATA=true``,
  on every answer::

      {"domain": "web",
       "descriptors": [{"entries": ["key=value", ...],
                        "limit": "requests_per_unit: 5 unit: MINUTE",  # an override, if any
                        "hitsAddend": 2},                               # if the descriptor has one
                       ...],
       "hitsAddend": 3,                                  # the request's, if not 0
       "metadata": {...}}                                # if a passing rule has some

  ``metadata`` merges the ``metadata`` of the rules (not unlimited, not overrides) whose
  status is OK, in request order, as upstream merges it: a key already there keeps its
  value unless both are mappings, which merge the same way. ``limit`` is the override in
  protobuf's text format on one line (upstream writes Go's text form, whose spacing Go
  varies on purpose: match on its fields, not its bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf import text_format

from ratewarden.errors import ConfigurationError
from ratewarden.server.descriptors import Item

__all__ = ["METADATA_MODES", "metadata_mode", "upstream_metadata"]

METADATA_MODES = ("merged", "upstream")


def metadata_mode(mode: Any) -> str:
    """``mode`` if it is one of ``METADATA_MODES``; raises ``ConfigurationError``."""
    if mode not in METADATA_MODES:
        raise ConfigurationError(f"response_metadata {mode!r} must be one of {METADATA_MODES}")
    return str(mode)


def upstream_metadata(request: Any, items: Sequence[Item]) -> dict[str, Any]:
    """Upstream's dynamic metadata for ``request``, whose descriptors ``items`` decided."""
    fields: dict[str, Any] = {
        "domain": request.domain,
        "descriptors": [_descriptor(descriptor) for descriptor in request.descriptors],
    }
    if request.hits_addend:
        fields["hitsAddend"] = request.hits_addend
    passed: dict[str, Any] = {}
    for item in items:
        rule, match = item.rule, item.match
        if rule is None or rule.unlimited or item.override or match is None:
            continue
        if item.over and not rule.shadow_mode:
            continue
        if match.nodes[-1].metadata:
            _merge(passed, match.nodes[-1].metadata_dict())
    if passed:
        fields["metadata"] = passed
    return fields


def _descriptor(descriptor: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"entries": [f"{e.key}={e.value}" for e in descriptor.entries]}
    if descriptor.HasField("limit"):
        out["limit"] = text_format.MessageToString(descriptor.limit, as_one_line=True)
    if descriptor.HasField("hits_addend"):
        out["hitsAddend"] = descriptor.hits_addend.value
    return out


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    """Upstream's merge: new keys are added; where both hold mappings they merge; otherwise
    the value already there stays."""
    for key, value in more.items():
        there = into.get(key)
        if key not in into:
            into[key] = value
        elif isinstance(there, dict) and isinstance(value, dict):
            there = into[key] = dict(there)
            _merge(there, value)
