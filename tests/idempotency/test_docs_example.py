"""docs/client.md's "Requiring a key" example runs as written, and requires keys as it says."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx

PAGE = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def example() -> dict[str, Any]:
    """The namespace the section's python block leaves behind."""
    section = PAGE.read_text(encoding="utf-8").split("### Requiring a key", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None, "the section has no python example"
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(block.group(1), str(PAGE), "exec"), namespace)
    return namespace


async def _posts(app: Any) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return [
            await client.post("/payments"),
            await client.patch("/payments/7", headers={"Idempotency-Key": ""}),
            await client.post("/payments", headers={"Idempotency-Key": "pay-1"}),
            await client.post("/notes"),
        ]


def test_the_required_key_example_runs_and_requires_keys() -> None:
    """Starlette: /payments and below need a key (400 linking the docs), /notes does not;
    Flask: every POST needs one."""
    namespace = example()
    missing, empty, keyed, note = asyncio.run(_posts(namespace["app"]))
    for refused in (missing, empty):
        assert refused.status_code == 400
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["type"] == "https://api.example.com/docs/idempotency"
    assert "required for POST /payments:" in missing.json()["detail"]
    assert "required for PATCH /payments/7:" in empty.json()["detail"]
    assert (keyed.status_code, note.status_code) == (201, 201)
    client = namespace["flask_app"].test_client()
    refused = client.post("/orders")
    assert refused.status_code == 400 and refused.get_json()["title"] == "Bad Request"
    assert client.post("/orders", headers={"Idempotency-Key": "o-1"}).status_code == 201
