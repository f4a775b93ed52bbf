"""The package's shape: pure algorithms, a complete table of contents."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import ratewarden
from ratewarden import algorithms

FORBIDDEN = ("time", "asyncio", "redis", "ratewarden.storage", "socket", "threading", "random")


def test_algorithms_import_no_clock_io_or_storage() -> None:
    """No module under ratewarden.algorithms imports time, asyncio, redis or the storage layer."""
    folder = Path(algorithms.__file__).parent
    offenders = []
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN):
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_every_algorithm_module_is_registered_with_its_file_name() -> None:
    """Each algorithms/<name>.py is ALGORITHMS[<name>] (or concurrency, which has its own API)."""
    modules = {
        info.name
        for info in pkgutil.iter_modules(algorithms.__path__)
        if not info.name.startswith("_")
    }
    assert modules - {"concurrency"} == set(algorithms.ALGORITHMS)
    for name, module in algorithms.ALGORITHMS.items():
        assert name == module.NAME
        assert (
            Path(algorithms.__file__).parent.parent / "storage" / "lua" / f"{name}.lua"
        ).exists()


def test_all_is_sorted_and_complete() -> None:
    """ratewarden.__all__ is sorted and every name in it is importable."""
    assert list(ratewarden.__all__) == sorted(ratewarden.__all__)
    for name in ratewarden.__all__:
        assert getattr(ratewarden, name) is not None
