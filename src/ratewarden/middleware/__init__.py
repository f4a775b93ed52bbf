"""HTTP middleware: ASGI and WSGI rate limiting with identity, layered rules and headers.

``RateLimitMiddleware`` (ASGI) and ``WSGIRateLimitMiddleware`` share one
sans-I/O core, ``RuleSet``. ``ConcurrencyMiddleware`` and
``WSGIConcurrencyMiddleware`` hold a concurrency slot per identity while a
response is sent; ``TokenBudgetMiddleware`` and ``WSGITokenBudgetMiddleware``
reserve on a token budget before the app and settle after; ``SheddingMiddleware`` and
``WSGISheddingMiddleware`` put a load shedder in front of the app, refusing the
lowest traffic classes first under load. See docs/middleware.md.
"""

from __future__ import annotations

from ratewarden.middleware._core import AsyncHitter, Hitter, Outcome, RuleSet
from ratewarden.middleware._denied import Denial, Denied
from ratewarden.middleware._identity import (
    ANONYMOUS,
    ClientIP,
    KeyFunc,
    by_api_key,
    by_client_ip,
    by_user,
    first_of,
)
from ratewarden.middleware._request import RequestInfo
from ratewarden.middleware._routes import (
    RouteLimits,
    django_endpoint,
    exempt,
    flask_endpoint,
    limit,
    override,
    starlette_endpoint,
)
from ratewarden.middleware._rules import Rule
from ratewarden.middleware._shadow import ShadowSummary, TopKey
from ratewarden.middleware.asgi import RateLimitMiddleware
from ratewarden.middleware.budget import TokenBudgetMiddleware, WSGITokenBudgetMiddleware
from ratewarden.middleware.concurrency import (
    ConcurrencyMiddleware,
    SlotPolicy,
    WSGIConcurrencyMiddleware,
)
from ratewarden.middleware.shedding import (
    ClassFunc,
    SheddingMiddleware,
    WSGISheddingMiddleware,
    class_from_header,
)
from ratewarden.middleware.wsgi import WSGIRateLimitMiddleware

__all__ = [
    "ANONYMOUS",
    "AsyncHitter",
    "ClassFunc",
    "ClientIP",
    "ConcurrencyMiddleware",
    "Denial",
    "Denied",
    "Hitter",
    "KeyFunc",
    "Outcome",
    "RateLimitMiddleware",
    "RequestInfo",
    "RouteLimits",
    "Rule",
    "RuleSet",
    "ShadowSummary",
    "SheddingMiddleware",
    "SlotPolicy",
    "TokenBudgetMiddleware",
    "TopKey",
    "WSGIConcurrencyMiddleware",
    "WSGIRateLimitMiddleware",
    "WSGISheddingMiddleware",
    "WSGITokenBudgetMiddleware",
    "by_api_key",
    "by_client_ip",
    "by_user",
    "class_from_header",
    "django_endpoint",
    "exempt",
    "first_of",
    "flask_endpoint",
    "limit",
    "override",
    "starlette_endpoint",
]
