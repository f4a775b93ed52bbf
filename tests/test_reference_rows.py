"""docs/reference.md rows whose signatures and claims are checked against the code."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError
from ratewarden.client import retry_hint
from ratewarden.storage._memcache_base import MemcacheBase
from ratewarden.storage.memcache import AsyncMemcacheStore, MemcacheStore

REFERENCE = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text("utf-8")


def _row(start: str) -> str:
    (row,) = [line for line in REFERENCE.splitlines() if line.startswith(f"| `{start}")]
    return row


def _names(func: Callable[..., Any]) -> str:
    """``func``'s parameters as the reference writes them: names, ``*``/``**`` for the rest."""
    prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    params = inspect.signature(func).parameters.values()
    return ", ".join(prefix.get(p.kind, "") + p.name for p in params if p.name != "self")


@pytest.mark.parametrize(
    ("name", "func"),
    [("retry_hint", retry_hint), ("MemcacheStore", MemcacheStore.__init__)],
)
def test_a_row_s_signature_is_the_code_s(name: str, func: Callable[..., Any]) -> None:
    """retry_hint takes ``now`` as well as ``headers``; MemcacheStore takes ``**options``."""
    assert f"`{name}({_names(func)})`" in _row(name)


def test_the_memcache_row_names_every_keyword_the_stores_take() -> None:
    """Each keyword MemcacheBase takes is named, with its default, in the MemcacheStore row."""
    row = _row("MemcacheStore(")
    keywords = [
        p
        for p in inspect.signature(MemcacheBase.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert keywords
    for p in keywords:
        shown = repr(p.default).replace("'", '"')
        assert f"`{p.name}={shown}`" in row, p.name
    assert "any other keyword is refused" in row


@pytest.mark.parametrize("store", [MemcacheStore, AsyncMemcacheStore])
def test_a_memcache_store_refuses_an_unknown_keyword(store: type[MemcacheBase]) -> None:
    """A misspelt keyword (``timout``) is refused, as the row says, before anything connects."""
    with pytest.raises(ConfigurationError, match="unknown option 'timout'; it takes clock, "):
        store("memcache://127.0.0.1:1", timout=1)


class _Store(AsyncMemoryStore):
    """A subclass: it may override what the blocking view would bypass."""


def test_hit_now_is_a_bound_method_on_memory_and_the_attribute_is_none_otherwise() -> None:
    """On AsyncMemoryStore itself hit_now is a bound method; on a subclass (as on a store that
    does I/O) the attribute is None, which is what the row says."""
    assert inspect.ismethod(AsyncLimiter(AsyncMemoryStore()).hit_now)
    assert AsyncLimiter(_Store()).hit_now is None
    assert "the attribute is `None`" in _row("AsyncLimiter.hit_now")
