"""The RateLimit headers of one rule, with everything that does not depend on a decision done once.

``ratewarden.headers.rate_limit_headers`` works out, on every call, each layer's
policy name, its quota and window, the quoted names and the whole
``RateLimit-Policy`` value, none of which change from one request to the next
for a given rule. ``HeaderPlan`` renders them when the rule is compiled and
fills in the numbers per request (``r`` and ``t``). The output is the same,
header for header; a test compares the two over random decisions and every
option.

Anything this does not precompute goes through ``ratewarden.headers``
unchanged: a partition key (its bytes differ per key), and a decision whose
layers are not the rule's rates (a failure mode's answer, say).
"""

from __future__ import annotations

import dataclasses
import math

from ratewarden import headers as rl_headers
from ratewarden.decision import Decision
from ratewarden.headers import (
    Header,
    HeaderOptions,
    ceil_seconds,
    never_allowed,
    never_r,
    policy_item,
    sf_string,
)
from ratewarden.rate import Rate

__all__ = ["HeaderPlan"]


class HeaderPlan:
    """``render(decision, now)``: the headers of rule ``name`` with ``rates`` under ``options``."""

    __slots__ = (
        "_all_policies",
        "_asgi_policy",
        "_asgi_prefix",
        "_draft",
        "_joined_policy",
        "_legacy",
        "_name",
        "_options",
        "_policies",
        "_policy_header",
        "_prefixes",
        "_rate",
        "_rates",
        "_refill",
        "_simple",
    )

    def __init__(self, name: str, rates: tuple[Rate, ...], options: HeaderOptions) -> None:
        self._name = name
        self._rates = rates
        self._rate = rates[0]
        self._options = options
        self._draft = options.draft is not None
        # t: draft-11's effective window (refill_after), else draft-10's time to whole again.
        self._refill = options.draft == "draft-11"
        self._all_policies = options.all_policies
        # The legacy family depends on the decision alone; rendered by headers.py itself.
        self._legacy = (
            dataclasses.replace(options, draft=None, partition_key=False)
            if options.legacy
            else None
        )
        names = [name] if len(rates) == 1 else [f"{name}.{i}" for i in range(1, len(rates) + 1)]
        self._policies = tuple(
            policy_item(n, *rl_headers.window(r), None) for n, r in zip(names, rates, strict=True)
        )
        self._joined_policy = ", ".join(self._policies)
        self._prefixes = tuple(f"{sf_string(n)};r=" for n in names)
        self._simple = (
            len(rates) == 1
            and self._draft
            and not self._all_policies
            and self._legacy is None
            and not options.partition_key
        )
        self._policy_header = ("RateLimit-Policy", self._policies[0])
        # The same two headers as ASGI wants them (lower-case names, latin-1 bytes), for asgi().
        self._asgi_policy: tuple[bytes, bytes] | None = None
        self._asgi_prefix = b""
        if self._simple:
            try:
                self._asgi_policy = (b"ratelimit-policy", self._policies[0].encode("latin-1"))
                self._asgi_prefix = self._prefixes[0].encode("latin-1")
            except UnicodeEncodeError:  # render() and the middleware's encoding decide then
                self._asgi_policy = None

    def render(self, decision: Decision, now: float, partition: bytes | None) -> list[Header]:
        """The headers for ``decision`` (``now``: epoch seconds, read only by epoch resets)."""
        if self._simple:
            # The default: one rate, the draft fields of the binding layer, nothing else.
            numbers = self._simple_numbers(decision)
            if numbers is not None:
                remaining, t = numbers
                return [self._policy_header, ("RateLimit", f"{self._prefixes[0]}{remaining};t={t}")]
        if partition is not None and self._options.partition_key:
            return self._generic(decision, now, partition)
        layers = decision.layers or (decision,)
        rates = self._rates
        if len(layers) != len(rates):
            return self._generic(decision, now, partition)
        found: list[Header] = []
        if self._draft:
            draft = self._draft_pair(decision, layers, rates)
            if draft is None:
                return self._generic(decision, now, partition)
            found.extend(draft)
        if self._legacy is not None:
            found.extend(rl_headers.rate_limit_headers(self._name, decision, self._legacy, now=now))
        return found

    def asgi(self, decision: Decision) -> list[tuple[bytes, bytes]] | None:
        """``render``'s headers encoded for an ASGI response, or None unless the default plan
        (one rate, the draft fields) applies to ``decision``: the middleware's allowed path.

        ``_simple_numbers`` inline: this is the whole rendering cost of an allowed request.
        """
        policy = self._asgi_policy
        if policy is None:
            return None
        layers = decision.layers
        rate = self._rate
        if len(layers) != 1 or decision.rate is not rate:
            return None
        layer = layers[0]
        if layer.rate is not rate:
            return None
        window = layer.refill_after if self._refill else layer.reset_after
        remaining = layer.remaining
        if not (decision.allowed and layer.allowed and remaining > 0):
            remaining = never_r(remaining) if never_allowed(decision) else 0
        t = math.ceil(window) if window > 0 else 0
        return [policy, (b"ratelimit", b"%s%d;t=%d" % (self._asgi_prefix, remaining, t))]

    def _simple_numbers(self, decision: Decision) -> tuple[int, int] | None:
        """The default plan's ``r`` and ``t`` for ``decision``: None unless its one layer is
        the rule's one rate (a failure mode's answer, say, takes the generic path)."""
        layers = decision.layers
        rate = self._rate
        if len(layers) != 1 or decision.rate is not rate or layers[0].rate is not rate:
            return None
        layer = layers[0]
        window = layer.refill_after if self._refill else layer.reset_after
        t = math.ceil(window) if window > 0 else 0
        remaining = layer.remaining
        if not (decision.allowed and layer.allowed and remaining > 0):
            # A denial says 0 (wait t), unless no wait can help: then what is left, at least 1.
            remaining = never_r(remaining) if never_allowed(decision) else 0
        return remaining, t

    def _draft_pair(
        self, decision: Decision, layers: tuple[Decision, ...], rates: tuple[Rate, ...]
    ) -> tuple[Header, Header] | None:
        for layer, rate in zip(layers, rates, strict=True):
            if layer.rate is not rate and layer.rate != rate:
                return None
        allowed = decision.allowed
        never = never_allowed(decision)
        if self._all_policies:
            # Every layer shows what it has left: in a denial, those that did not deny too.
            states = ", ".join(self._state(i, layer, True, never) for i, layer in enumerate(layers))
            return ("RateLimit-Policy", self._joined_policy), ("RateLimit", states)
        if len(layers) == 1:
            i, layer = 0, layers[0]
            if layer.rate is not decision.rate and layer.rate != decision.rate:
                return None
        else:
            found = self._binding(decision, layers)
            if found is None:
                return None
            i, layer = found
        return ("RateLimit-Policy", self._policies[i]), (
            "RateLimit",
            self._state(i, layer, allowed, never),
        )

    @staticmethod
    def _binding(decision: Decision, layers: tuple[Decision, ...]) -> tuple[int, Decision] | None:
        binding = decision.rate
        for i, layer in enumerate(layers):
            if layer.rate is binding or (layer.rate is not None and layer.rate == binding):
                return i, layer
        return None

    def _state(self, i: int, layer: Decision, shown: bool, never: bool) -> str:
        """Policy ``i``'s ``RateLimit`` member. ``never``: a denial no wait can turn into an
        allow, where every policy shows what it has left (nothing was taken), at least 1."""
        if never:
            remaining = never_r(layer.remaining)
        else:
            remaining = layer.remaining if shown and layer.allowed and layer.remaining > 0 else 0
        t = ceil_seconds(layer.refill_after if self._refill else layer.reset_after)
        return f"{self._prefixes[i]}{remaining};t={t}"

    def _generic(self, decision: Decision, now: float, partition: bytes | None) -> list[Header]:
        return rl_headers.rate_limit_headers(
            self._name, decision, self._options, now=now, partition=partition
        )
