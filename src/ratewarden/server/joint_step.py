"""Several descriptors decided in one atomic store step (``hit_all``): all charged or none.

The service tries it when a request has several descriptors to charge (step 3 of how one
request is decided, in ``server/service.py``): ``joint_step_algorithm`` says whether they
may go together, ``joint_step`` runs the step as a limiter flow, and when the store fails
it, each rule's ``failure_mode`` answers, still all or nothing. With ``check`` the step
charges nothing: the service checks a request's descriptors so when the over-limit cache
already denies one of them (``cached_check`` answers that one). These take the limiter and
the reports they need, not the service.
"""

from __future__ import annotations

from ratewarden.decision import Decision
from ratewarden.errors import CircuitOpenError
from ratewarden.limiter import AsyncLimiter, Flow, Limiter
from ratewarden.server.config import DescriptorRule
from ratewarden.server.descriptors import Item, Result, joint_algorithm, settled
from ratewarden.server.hooks import Reports

__all__ = ["cached_check", "joint_step", "joint_step_algorithm"]


def _rule(item: Item) -> DescriptorRule:
    assert item.rule is not None  # every item the store decides has a rule
    return item.rule


def cached_check(item: Item, limiter: Limiter | AsyncLimiter) -> Result | None:
    """A check (cost 0) of ``item`` the limiter's over-limit cache answers, or None.

    A check asks on behalf of the descriptor's own hits: a denial of them answers it
    (the limiter's flow answers a check from the store).
    """
    if item.cost == 0 or limiter.negative is None:
        return None
    rule = _rule(item)
    cached = limiter.cached_denial(item.key, rule.rates, item.cost, algorithm=rule.algorithm)
    return None if cached is None else Result(False, cached, None, False, cached=True)


def joint_step_algorithm(stored: list[Item], limiter: Limiter | AsyncLimiter) -> str | None:
    """The algorithm of one atomic store step deciding every descriptor, or None (then the
    request is checked, then charged): the items may go together (``joint_algorithm``) and
    none is in the limiter's over-limit cache. Ask only of a store that has ``hit_all``."""
    algorithm = joint_algorithm(stored)
    negative = limiter.negative
    if algorithm is None or negative is None or len(negative) == 0:
        return algorithm  # nothing remembered (the usual case): no denial to look up
    for item in stored:
        rates = _rule(item).rates
        if limiter.cached_denial(item.key, rates, item.cost, algorithm=algorithm) is not None:
            return None
    return algorithm


def joint_step(
    stored: list[Item],
    algorithm: str,
    limiter: Limiter | AsyncLimiter,
    reports: Reports,
    *,
    check: bool = False,
) -> Flow[bool]:
    """The one atomic step, each item getting its ``result``; False when the store cannot
    take these keys together (then nothing was decided). ``check``: at cost 0 for every
    item, which charges nothing (a check of each, taken at one instant)."""
    calls = [(item.key, _rule(item).rates, 0 if check else item.cost) for item in stored]
    try:
        decisions = yield from limiter.hit_all_flow(calls, algorithm=algorithm)
    except Exception as error:  # every store failure is the failure modes', never a crash
        _degrade(stored, error, limiter, reports, check)
        return True
    if decisions is None:
        return False
    for item, decision in zip(stored, decisions, strict=True):
        allowed = decision.allowed
        item.result = Result(allowed, decision, None, allowed and decision.cost > 0)
    return True


def _degrade(
    stored: list[Item],
    error: Exception,
    limiter: Limiter | AsyncLimiter,
    reports: Reports,
    check: bool,
) -> None:
    """The store failed the joint step: each rule's failure_mode, still all or nothing.

    ``closed`` rules deny, so then the ``local`` ones are only checked; else the
    ``local`` ones are decided together by the limiter in this process (only checked
    too when the step was a ``check``).
    """
    for item in stored:
        reports.store_error(_rule(item), error)
    closed = any(_rule(item).failure_mode == "closed" for item in stored)
    local = [item for item in stored if _rule(item).failure_mode == "local"]
    decisions: dict[int, Decision] = {}
    if local:
        found = limiter.local_all(
            [(item.key, _rule(item).rates, 0 if closed or check else item.cost) for item in local],
            algorithm=_rule(local[0]).algorithm,
        )
        decisions = {id(item): decision for item, decision in zip(local, found, strict=True)}
    refused = isinstance(error, CircuitOpenError)  # the open breaker: the store not asked
    for item in stored:
        decision = decisions.get(id(item))
        if decision is not None:
            item.result = settled(decision, decision.cost)
        else:
            mode = _rule(item).failure_mode
            item.result = Result(mode == "open", None, mode, False)
        item.result.refused = refused
