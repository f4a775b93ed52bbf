"""The package's shape: pure algorithms, a complete table of contents."""

from __future__ import annotations

import ast
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import ratewarden
from ratewarden import algorithms

FORBIDDEN = ("time", "asyncio", "redis", "ratewarden.storage", "socket", "threading", "random")
PACKAGE = Path(ratewarden.__file__).parent


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_deprecation_shim(function: ast.FunctionDef) -> bool:
    return function.name == "__getattr__" or any(
        isinstance(node, ast.Name) and node.id == "DeprecationWarning"
        for node in ast.walk(function)
    )


def _runtime_imports(node: ast.AST) -> Iterator[str]:
    """The modules ``node`` imports when it runs, deferred imports in functions included;
    not those under ``if TYPE_CHECKING:`` (types only), nor inside a module ``__getattr__``
    or another function that warns with a DeprecationWarning (the shims that resolve a moved
    name, or wrap an argument of the old form, only when asked)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _runtime_imports(ast.Module(body=[other], type_ignores=[]))
            continue
        if isinstance(child, ast.FunctionDef) and _is_deprecation_shim(child):
            continue
        if isinstance(child, ast.Import):
            yield from (alias.name for alias in child.names)
        elif isinstance(child, ast.ImportFrom) and child.module is not None:
            yield child.module
        yield from _runtime_imports(child)


def _importers(*modules: str, outside: str) -> set[str]:
    """Files under src/ratewarden but not under ``outside`` that import one of ``modules``
    (or a submodule of one) at run time, relative to the package, as ``dir/file.py``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        if name.startswith(outside + "/"):
            continue
        for imported in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if any(imported == m or imported.startswith(m + ".") for m in modules):
                found.add(name)
    return found


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


def test_only_storage_imports_redis() -> None:
    """No module outside ratewarden/storage/ imports redis at run time (types under
    ``if TYPE_CHECKING:`` and deprecation shims aside)."""
    assert _importers("redis", outside="storage") == set()


def test_regions_talk_to_no_store() -> None:
    """regions/ takes its stores (RegionStore, or a Limiter's) from its caller: it imports
    neither ratewarden.storage nor redis at run time, but in the shim that wraps the clients
    of the deprecated form."""
    importers = _importers("ratewarden.storage", "redis", outside="storage")
    assert {name for name in importers if name.startswith("regions/")} == set()


def test_middleware_and_plan_talk_to_no_store() -> None:
    """middleware/ takes stores from its caller and plan/ gets its measurement from the
    command line: neither imports ratewarden.storage (nor redis) at run time."""
    importers = _importers("ratewarden.storage", "redis", outside="storage")
    assert {name for name in importers if name.startswith(("middleware/", "plan/"))} == set()


def _private_imports(package: str) -> set[str]:
    """``file: module[.name]`` for each private module or name that a module of ``package``
    imports from another package (its own privates are its business)."""
    found = set()
    for path in (PACKAGE / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            if node.module.startswith(f"ratewarden.{package}"):
                continue
            parts = node.module.split(".")
            names = [alias.name for alias in node.names]
            if any(part.startswith("_") for part in parts[1:]):
                found.add(f"{path.name}: {node.module}")
            found.update(f"{path.name}: {node.module}.{n}" for n in names if n.startswith("_"))
    return found


def test_hotkeys_and_budgets_decide_through_a_limiter() -> None:
    """hotkeys/ and budgets/ decide through a Limiter built over the store they are given:
    neither imports ratewarden.storage (nor redis) at run time, nor a private module or name
    of another package (the core, the algorithms and the checks export what they use)."""
    importers = _importers("ratewarden.storage", "redis", outside="storage")
    assert {name for name in importers if name.startswith(("hotkeys/", "budgets/"))} == set()
    assert _private_imports("hotkeys") | _private_imports("budgets") == set()
