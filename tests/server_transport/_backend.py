"""The smallest HttpBackend, for tests of the HTTP port that need no real service."""

from __future__ import annotations

from typing import Any


class StaticBackend:
    """Serving, no rules, a fixed metrics text and an empty dashboard; ``should_rate_limit``
    is for subclasses that are called (this one fails the test if it is)."""

    def serving(self) -> bool:
        return True

    def rules_text(self) -> str:
        return ""

    def rules_dict(self) -> dict[str, Any]:
        return {}

    async def should_rate_limit(self, request: Any) -> Any:
        raise AssertionError("not called")

    def metrics(self, accept: str) -> tuple[bytes, str]:
        return b"# metrics\n", "text/plain"

    def dashboard(self) -> dict[str, Any]:
        return {"rules": []}

    def rlqs_streams(self) -> int | None:
        return None  # RLQS off: /healthcheck says OK alone
