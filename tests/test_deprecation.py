"""moved(): a module's moved names resolve from their new home, with a DeprecationWarning."""

from __future__ import annotations

import re
import types

import pytest

from ratewarden import errors
from ratewarden.deprecation import moved
from ratewarden.errors import ConfigurationError


def _old_module() -> types.ModuleType:
    module = types.ModuleType("old.home")
    setattr(module, "__getattr__", moved("old.home", {"StorageError": "ratewarden.errors"}))  # noqa: B010
    return module


def test_a_moved_name_warns_naming_the_new_import_and_is_the_same_object() -> None:
    """old.home.StorageError is ratewarden.errors.StorageError, with a warning saying so."""
    module = _old_module()
    with pytest.warns(DeprecationWarning) as caught:
        found = module.StorageError
    assert found is errors.StorageError
    assert str(caught[0].message) == (
        "old.home.StorageError is deprecated; import StorageError from ratewarden.errors"
    )
    assert caught[0].filename == __file__  # the line that asked, not the helper


def test_any_other_name_is_an_attribute_error() -> None:
    """A name that did not move is missing, as on a module without __getattr__."""
    with pytest.raises(
        AttributeError, match=re.escape("module 'old.home' has no attribute 'Nothing'")
    ):
        _old_module().Nothing  # noqa: B018


@pytest.mark.parametrize(
    ("module", "homes"),
    [("", {"A": "ratewarden"}), ("old", ["A"]), ("old", {"A": ""}), ("old", {"A": None})],
)
def test_bad_arguments_are_named(module: str, homes: object) -> None:
    """An empty module name or a table that is not name -> module raises ConfigurationError."""
    with pytest.raises(ConfigurationError, match="moved: "):
        moved(module, homes)  # type: ignore[arg-type]


def test_the_servers_rule_is_descriptor_rule_and_the_old_name_warns() -> None:
    """ratewarden.server.config.Rule was renamed DescriptorRule (Rule is the middleware's):
    the old name is the same class, with a warning naming the new one."""
    from ratewarden.server import config

    with pytest.warns(
        DeprecationWarning, match=r"config\.Rule is deprecated; it is .*DescriptorRule"
    ):
        old = config.Rule
    assert old is config.DescriptorRule
    assert "Rule" not in config.__all__ and "DescriptorRule" in config.__all__


def test_a_name_moved_from_the_servers_config_warns_at_the_line_that_asked() -> None:
    """ratewarden.server.config's own ``__getattr__`` hands moved names to ``moved``: the
    warning still names this file's line, not the package's."""
    from ratewarden.server import config

    with pytest.warns(DeprecationWarning, match="import MAX_ALIAS_COPIES from") as caught:
        config.MAX_ALIAS_COPIES  # noqa: B018
    assert caught[0].filename == __file__
