"""The shape of ``ratewarden.server.config``: its modules import one way, its old names warn."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import ratewarden
from ratewarden.server import config
from ratewarden.server.config import reader

PACKAGE = "ratewarden.server.config"
#: Each module may import only modules of a lower layer (model is the bottom).
LAYERS = {
    "model": 0,
    "directory": 0,
    "tree": 1,
    "fields": 1,
    "limits": 2,
    "rate_limit": 3,
    "budget": 3,
    "rlqs_weights": 3,
    "metadata": 3,
    "reader": 4,
    "loading": 5,
    "__init__": 6,
}


def _imports_within_package(path: Path) -> set[str]:
    """The package's modules this file imports anywhere (deferred imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(
            name.removeprefix(PACKAGE + ".")
            for name in names
            if name.startswith(PACKAGE + ".") and name.removeprefix(PACKAGE + ".") in LAYERS
        )
    return found


def test_the_config_modules_import_one_way_without_a_cycle() -> None:
    """model <- tree/fields <- limits <- rate_limit/budget/rlqs_weights/metadata <- reader <-
    loading <- __init__: never back up."""
    folder = Path(config.__file__).parent
    assert {path.stem for path in folder.glob("*.py")} == set(LAYERS)
    upward = [
        f"{path.stem} imports {name}"
        for path in sorted(folder.glob("*.py"))
        for name in sorted(_imports_within_package(path))
        if LAYERS[name] >= LAYERS[path.stem]
    ]
    assert upward == []


@pytest.mark.parametrize(
    ("name", "value", "home"),
    [
        ("ConfigurationError", ratewarden.ConfigurationError, "from ratewarden"),
        ("MAX_ALIAS_COPIES", reader.MAX_ALIAS_COPIES, "from ratewarden.server.config.reader"),
    ],
)
def test_the_names_that_moved_still_resolve_with_a_deprecation_warning(
    name: str, value: object, home: str
) -> None:
    """config.ConfigurationError and config.MAX_ALIAS_COPIES warn, naming the new import."""
    message = re.escape(f"config.{name} is deprecated; import {name} {home}")
    with pytest.warns(DeprecationWarning, match=message):
        assert getattr(config, name) is value


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    """A name the package never had raises AttributeError, not a warning."""
    message = r"module 'ratewarden\.server\.config' has no attribute 'nope'"
    with pytest.raises(AttributeError, match=message):
        config.nope  # noqa: B018


@pytest.mark.parametrize("name", ["DomainConfig", "Level", "Match", "Node", "RateLimitConfig"])
def test_the_tree_names_still_resolve_from_model_with_a_deprecation_warning(name: str) -> None:
    """The descriptor tree moved from config.model to config.tree: the old import warns,
    naming the new one, and gives the same class."""
    from ratewarden.server.config import model, tree

    message = re.escape(f"config.model.{name} is deprecated; import {name} from {tree.__name__}")
    with pytest.warns(DeprecationWarning, match=message):
        assert getattr(model, name) is getattr(tree, name)
