"""``RateLimitConfig`` resources into rules, through the same reader and checks as rule files.

Each resource becomes the YAML document envoyproxy/ratelimit would have read from a
file (upstream turns the message into its YAML structure the same way): a field at
its proto3 default is left out, as an absent key, and the unit is the enum's name.
The documents are then loaded as the files of one directory, in the order the
resources came, so every check, every error message and ``--merge-domains``
(upstream's ``MERGE_DOMAIN_CONFIG``) are the files' own (a message says "resource"
where it says "file"). A problem names the resource, ``xds:<name>:<line>: key: what is
wrong``, the line counting in that resource's document (``document`` gives it, as the
log of a rejected update does); a resource without a name of its own, or with one an
earlier resource of the update has, is named by its position, ``xds:resource[<index>]``.
Two resources of one name are a problem themselves, as they are to Envoy's xDS clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from ratewarden.server import config as rules
from ratewarden.server.xds.messages import TYPE_URL, UNITS, RateLimitConfig

__all__ = ["decode", "document", "load_resources", "source_names", "to_mapping"]


def source_names(resources: Sequence[Any]) -> list[str]:
    """What problems in each of ``resources`` are named by: ``xds:<resource name>``, else
    (no name, or a name taken by an earlier one) ``xds:resource[<index>]``, as ``decode``
    names them, so that no two resources of an update share a name."""
    names: list[str] = []
    for index, resource in enumerate(resources):
        name = f"xds:{resource.name}"
        names.append(name if resource.name and name not in names else f"xds:resource[{index}]")
    return names


def to_mapping(resource: Any) -> dict[str, Any]:
    """A ``RateLimitConfig`` message as the mapping a rule file's YAML holds."""
    out: dict[str, Any] = {}
    if resource.domain:
        out["domain"] = resource.domain
    if resource.descriptors:
        out["descriptors"] = [_descriptor(item) for item in resource.descriptors]
    return out


def document(resource: Any) -> str:
    """``resource`` as the text of a rule file: what its problems' line numbers count in."""
    text: str = yaml.safe_dump(to_mapping(resource), sort_keys=False, allow_unicode=True)
    return text


def _descriptor(item: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"key": item.key}
    if item.value:
        out["value"] = item.value
    if item.HasField("rate_limit"):
        out["rate_limit"] = _policy(item.rate_limit)
    if item.descriptors:
        out["descriptors"] = [_descriptor(child) for child in item.descriptors]
    for flag in ("shadow_mode", "detailed_metric", "quota_mode"):
        if getattr(item, flag):
            out[flag] = True
    if item.HasField("metadata"):
        out["metadata"] = json_format.MessageToDict(item.metadata)
    return out


def _policy(policy: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # UNKNOWN (0) is an unset unit: absent, so the reader says it is missing (or, with
    # unlimited: true, that none is needed); a number no name has is passed on to be refused.
    if policy.unit:
        out["unit"] = UNITS.get(policy.unit, str(policy.unit))
    if not policy.unlimited or policy.requests_per_unit:
        out["requests_per_unit"] = policy.requests_per_unit
    if policy.unlimited:
        out["unlimited"] = True
    if policy.name:
        out["name"] = policy.name
    if policy.replaces:
        out["replaces"] = [{"name": replace.name} for replace in policy.replaces]
    return out


def decode(packed: Sequence[Any]) -> list[Any]:
    """The ``RateLimitConfig`` messages of a response's ``Any`` resources, in order.

    Raises ``ConfigError`` naming each resource that is of another type or does not decode.
    """
    problems: list[rules.ConfigProblem] = []
    decoded = []
    for index, item in enumerate(packed):
        where = f"xds:resource[{index}]"
        if item.type_url != TYPE_URL:
            problems.append(
                rules.ConfigProblem(
                    where, 0, "type_url", f"is {item.type_url!r}; only {TYPE_URL!r} is read"
                )
            )
            continue
        resource = RateLimitConfig()
        try:
            resource.ParseFromString(item.value)
        except DecodeError as exc:
            problems.append(rules.ConfigProblem(where, 0, "value", f"does not decode: {exc}"))
            continue
        decoded.append(resource)
    if problems:
        raise rules.ConfigError(problems)
    return decoded


def load_resources(
    resources: Sequence[Any],
    *,
    merge_domains: bool = False,
    default_failure_mode: str = rules.DEFAULT_FAILURE_MODE,
) -> rules.RateLimitConfig:
    """The rules of ``RateLimitConfig`` messages, loaded as files are (``default_failure_mode``:
    ``--failure-mode``); ``ConfigError`` with every problem otherwise, two resources of one
    name among them."""
    names = source_names(resources)
    problems = _same_names(resources)
    documents = [
        (name, document(resource)) for name, resource in zip(names, resources, strict=True)
    ]
    try:
        loaded = rules.load_documents(
            documents,
            merge_domains=merge_domains,
            unit="resource",
            default_failure_mode=default_failure_mode,
        )
    except rules.ConfigError as exc:
        raise rules.ConfigError([*problems, *exc.errors]) from None
    if problems:
        raise rules.ConfigError(problems)
    return loaded


def _same_names(resources: Sequence[Any]) -> list[rules.ConfigProblem]:
    """A resource named as an earlier one of the update: a state-of-the-world response names
    each resource once, and Envoy's own xDS clients reject the update ("duplicate listener
    ... found", "duplicate cluster ... found"); so do we, rather than apply both."""
    first: dict[str, int] = {}
    problems = []
    for index, resource in enumerate(resources):
        if not resource.name:
            continue
        earlier = first.setdefault(resource.name, index)
        if earlier != index:
            problems.append(
                rules.ConfigProblem(
                    f"xds:resource[{index}]", 0, "name",
                    f"{resource.name!r} is resource[{earlier}]'s name too: an update names each "
                    "resource once (Envoy refuses a duplicate name as well); rename one",
                )
            )  # fmt: skip
    return problems
