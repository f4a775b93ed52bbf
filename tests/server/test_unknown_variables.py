"""``RATEWARDEN_*`` variables no setting reads are found, each with the one meant; those that
ratewarden reads or documents for other purposes are not; and the TLS options that need each
other are named as the user gave them, flag or variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server.options import OPTIONS
from ratewarden.server.options_env import unknown
from ratewarden.server.settings import resolve

ROOT = Path(__file__).resolve().parents[2]
#: A whole variable name: not a prefix written as RATEWARDEN_RLQS_* or RATEWARDEN_.
NAME = re.compile(r"\bRATEWARDEN_[A-Z0-9_]*[A-Z0-9]\b")
#: Names the sources and docs write as examples of a typo: these must be warned about.
TYPOS = {"RATEWARDEN_WORKER", "RATEWARDEN_MIDDLEWARES"}


def test_misspelt_variables_are_found_with_the_one_meant() -> None:
    """The report's three typos, each with the nearest option's variable; a name like no
    option's is found without one; other variables are not looked at."""
    environ = {
        "RATEWARDEN_WORKER": "2",
        "RATEWARDEN_TLS_CERTS": "x",
        "RATEWARDEN_DRAIN_S": "1",
        "RATEWARDEN_ZZZ": "1",
        "RATEWARDEN_WORKERS": "2",
        "WORKER": "2",
    }
    assert unknown(environ) == {
        "RATEWARDEN_DRAIN_S": "RATEWARDEN_DRAIN",
        "RATEWARDEN_TLS_CERTS": "RATEWARDEN_TLS_CERT",
        "RATEWARDEN_WORKER": "RATEWARDEN_WORKERS",
        "RATEWARDEN_ZZZ": None,
    }


def test_every_variable_an_option_reads_is_known() -> None:
    """Each option's variable, set, is no unknown one."""
    assert unknown({option.env: "1" for option in OPTIONS.values()}) == {}


def test_every_variable_the_sources_and_docs_name_is_known() -> None:
    """Every ``RATEWARDEN_*`` name written in src/, docs/, scripts/ and the README (the
    pure-Python switch, the soak length, the test artifacts directory, Django settings...)
    is read by something: set in serve's environment, none is warned about, but the two
    written as typos (a Django setting's in docs/middleware.md, this one's)."""
    files = [
        path
        for folder in ("src", "docs", "scripts")
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and path.suffix in {".py", ".md", ".sh", ".c", ".pyi", ".yaml", ""}
    ]
    files.append(ROOT / "README.md")
    names = {name for path in files for name in NAME.findall(path.read_text(errors="replace"))}
    assert "RATEWARDEN_PURE" in names and "RATEWARDEN_WORKERS" in names
    assert set(unknown(dict.fromkeys(names, "1"))) == TYPOS


@pytest.mark.parametrize(
    ("flags", "environ", "message"),
    [
        (
            {},
            {"RATEWARDEN_TLS_CERT": "c.pem"},
            "RATEWARDEN_TLS_CERT is set but RATEWARDEN_TLS_KEY is not",
        ),
        (
            {},
            {"RATEWARDEN_TLS_KEY": "k.pem"},
            "RATEWARDEN_TLS_KEY is set but RATEWARDEN_TLS_CERT is not",
        ),
        (
            {},
            {"RATEWARDEN_TLS_CLIENT_CA": "ca.pem"},
            "RATEWARDEN_TLS_CLIENT_CA is set without RATEWARDEN_TLS_CERT/RATEWARDEN_TLS_KEY",
        ),
        ({"tls_cert": "c.pem"}, {}, "--tls-cert is set but --tls-key is not"),
        (
            {"tls_cert": "c.pem"},
            {"RATEWARDEN_TLS_CLIENT_SAN": "envoy"},
            "--tls-cert is set but --tls-key is not",
        ),
    ],
)
def test_tls_options_that_need_each_other_are_named_as_given(
    flags: dict[str, str], environ: dict[str, str], message: str
) -> None:
    """A variable set alone is named as the variable, and so is its missing twin; a flag
    as the flag."""
    environ = {"RATEWARDEN_CONFIG": "rules.yaml", **environ}
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        resolve(flags, environ)
