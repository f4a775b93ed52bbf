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


# --- the whole chain ---------------------------------------------------------------------------

#: Each part of the package and its rank in the chain (DESIGN section 3): a module imports only
#: modules of its own rank or below. ``algorithms <- storage <- limiter <- {tiers, budgets,
#: hotkeys, regions} <- {middleware, server, simulate, plan} <- cli``, over the leaves.
RANKS = {
    # leaves: values, the exception tree, hooks, pure helpers anyone may import
    "rate": 0, "decision": 0, "clock": 0, "errors": 0, "checks": 0, "labels": 0,
    "deprecation": 0, "topk": 0, "histograms": 0, "argparsing": 0, "redaction": 0,
    "metrics": 0, "headers": 0, "idempotency": 0, "testing": 0, "client": 0,
    "algorithms": 1,
    "storage": 2,
    "limiter": 3,
    "tiers": 4, "budgets": 4, "hotkeys": 4, "regions": 4,
    "middleware": 5, "server": 5, "simulate": 5, "plan": 5,
    "cli": 6, "cli_output": 6, "__main__": 6, "": 6,
}  # fmt: skip
#: Modules that may construct stores (and so import ratewarden.storage): the composition
#: roots, and the core, which makes its own in-process store. The multi-region simulation
#: is a whole fleet in one process: it makes each region's in-process store.
COMPOSITION_ROOTS = {"server/app.py", "cli.py", "__init__.py", "simulate/regions.py"}


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _extensions() -> set[str]:
    """Compiled modules of the package, known by their type stubs (``x.pyi`` with no ``x.py``)."""
    return {
        ".".join(stub.relative_to(PACKAGE.parent).with_suffix("").parts)
        for stub in PACKAGE.rglob("*.pyi")
        if not stub.with_suffix(".py").exists()
    }


def _part(module: str) -> str:
    """The part of the package a module belongs to: ``ratewarden.server.app`` -> ``server``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports at run time (a parent package a dotted import
    runs first is not counted: it is not what the module asked for)."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        known = {**modules, **dict.fromkeys(_extensions(), path)}
        for imported in _runtime_imports_named(tree, name, path.name == "__init__.py", known):
            if imported in modules:
                targets.add(imported)
        edges[name] = targets - {name}
    return edges


def _runtime_imports_named(
    tree: ast.AST, module: str, is_package: bool, known: dict[str, Path]
) -> Iterator[str]:
    """Like ``_runtime_imports``, with ``from x import y`` as ``x.y`` when ``y`` is a module."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _runtime_imports_named(
                    ast.Module(body=[other], type_ignores=[]), module, is_package, known
                )
            continue
        if isinstance(child, ast.FunctionDef) and _is_deprecation_shim(child):
            continue
        if isinstance(child, ast.Import):
            yield from (alias.name for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - (child.level - 1)]
                base = ".".join(here + ([base] if base else []))
            # ``from x import y``: the module ``x.y`` when there is one (its parent ``x`` runs
            # first, but that is not what was asked for), else a name of ``x``.
            for alias in child.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
        yield from _runtime_imports_named(child, module, is_package, known)


def test_imports_point_down_the_chain() -> None:
    """No module imports a part of the package above its own in the chain."""
    modules = _modules()
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in _edges(modules).items()
        for target in targets
        if RANKS[_part(target)] > RANKS[_part(name)]
    )
    assert upward == []
    assert {_part(name) for name in modules} <= set(RANKS), "a new part needs its rank here"


def test_no_import_cycle_anywhere() -> None:
    """The modules import each other without a cycle (types only, and the deprecation shims
    that resolve a moved name when asked, aside)."""
    edges = _edges(_modules())
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_no_module_imports_a_private_of_another_part() -> None:
    """Across parts of the package, only public modules and names are imported (each part's
    ``__init__`` exports what others use)."""
    found = set()
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                "ratewarden"
            ):
                continue
            assert node.module is not None
            if _part(node.module) == _part(name) and _part(name):
                continue
            parts = node.module.split(".")
            if any(part.startswith("_") and part != "__main__" for part in parts[1:]):
                found.add(f"{name}: {node.module}")
            found.update(
                f"{name}: {node.module}.{alias.name}"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            )
    assert found == set()


def test_only_the_core_and_the_composition_roots_import_storage() -> None:
    """Stores are made by the composition roots (the server's app, the command line, user code)
    and by the core for its own in-process store; no adapter imports ratewarden.storage."""
    importers = _importers("ratewarden.storage", outside="storage")
    assert {n for n in importers if not n.startswith("limiter/")} - COMPOSITION_ROOTS == set()
