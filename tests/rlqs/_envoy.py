"""A fake of Envoy's rate_limit_quota filter for the quota service's pure tests.

``SimEnvoy`` does what Envoy's filter does with an assignment (a new or changed token
bucket starts full, an unchanged one is kept, an expired one is gone), with no network
delay; the real Envoy is in tests/e2e/test_rlqs.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from ratewarden.server.rlqs import ALLOW_ALL, Action, Share


@dataclass
class SimEnvoy:
    """One Envoy's bucket as the rate_limit_quota filter keeps it (no network delay); with no
    assignment it denies (no_assignment_behavior DENY_ALL)."""

    stream: int = 0
    assignment: object = None
    fill_s: int = 1
    tokens: Fraction = Fraction(0)
    last: float = 0.0
    expires: float = 0.0
    counted: int = 0
    last_report: float = 0.0
    admitted: list[int] = field(default_factory=list)

    def apply(self, action: Action, now: float) -> None:
        if action.assignment is None:
            self.assignment = None
            return
        if isinstance(action.assignment, Share) and (action.assignment, action.fill_s) != (
            self.assignment,
            self.fill_s,
        ):
            self.tokens, self.last = Fraction(action.assignment.max_tokens), now
        self.assignment, self.fill_s = action.assignment, action.fill_s
        self.expires = now + action.ttl_s

    def admit(self, now: float) -> bool:
        self.counted += 1
        if now >= self.expires:
            self.assignment = None
        if not isinstance(self.assignment, Share):
            return self.assignment == ALLOW_ALL
        share = self.assignment
        refill = Fraction(share.tokens_per_fill) * Fraction(now - self.last) / self.fill_s
        self.tokens = min(Fraction(share.max_tokens), self.tokens + refill)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False
