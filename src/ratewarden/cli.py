"""The ``ratewarden`` command.

::

    ratewarden serve --config PATH... [--store URL] [--host H] [--grpc-port N] [--http-port N]
                     [--workers N] [...]            the Envoy rate limit service
    ratewarden config check PATH...                  validate rule files, print every error
    ratewarden simulate [--bursts | --accuracy] [...]  traffic through algorithms, in simulated time
    ratewarden plan --rps N [...]                    capacity planning: memory, calls/s, bounds

Exit codes: 0 success; 1 the rule files are invalid, the server could not start
(a busy port) or a worker died; 2 bad command-line input (a flag or environment
variable with a wrong value, a store URL that cannot be used). Errors are one
line each, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ratewarden.argparsing import CommandParser
from ratewarden.errors import ConfigurationError

if TYPE_CHECKING:
    from ratewarden.rate import Rate
    from ratewarden.storage.measure import Measured

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _serve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ratewarden.server.parsers import boolean
    from ratewarden.server.settings import OPTIONS

    serve = commands.add_parser(
        "serve",
        help="run the Envoy rate limit service (gRPC and HTTP)",
        description="Run the Envoy global rate limit service. Every flag can also be set by the "
        "environment variable shown; a flag wins over its variable.",
    )
    for name, option in OPTIONS.items():
        help_text = f"{option.help} [env {option.env}]"
        if name == "config_paths":
            serve.add_argument(
                option.flag, dest=name, nargs="+", action="extend", metavar="PATH", help=help_text
            )
        elif option.parse is boolean:  # an on/off switch: --x and --no-x
            serve.add_argument(
                option.flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        else:
            metavar = option.flag.removeprefix("--").replace("-", "_").upper()
            serve.add_argument(option.flag, dest=name, metavar=metavar, help=help_text)


def _parser() -> argparse.ArgumentParser:
    # Typed as the base class, so the subcommands' modules take its subparsers as theirs.
    parser: argparse.ArgumentParser = CommandParser(
        prog="ratewarden",
        description="Exact, atomic rate limiting: the Envoy rate limit service and its tools.",
    )
    from ratewarden import __version__

    parser.add_argument("--version", action="version", version=f"ratewarden {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_parser(commands)
    from ratewarden.simulate import command as simulate

    simulate.add_parser(commands)
    from ratewarden.plan import command as plan

    plan.add_parser(commands)
    config = commands.add_parser("config", help="work with rule files")
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    check = config_commands.add_parser(
        "check",
        help="validate rule files; exit 1 listing every error (file:line: key: reason)",
        description="Load rule files or directories the way `serve` does and report every error.",
    )
    check.add_argument("paths", nargs="+", metavar="PATH", help="rule files or directories")
    return parser


def _errors(exc: BaseException) -> list[str]:
    errors = getattr(exc, "errors", None)
    return [str(error) for error in errors] if errors else [str(exc)]


def _config_check(paths: Sequence[str]) -> int:
    from ratewarden.server import config as rules

    try:
        loaded = rules.load(paths)
    except ConfigurationError as exc:
        for line in _errors(exc):
            print(line, file=sys.stderr)
        print(f"ratewarden config check: {_count(len(_errors(exc)), 'error')}", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"ok: {_count(len(loaded.files), 'file')}, {_count(len(loaded.domains), 'domain')}, "
        f"{_count(len(loaded.rules), 'rule')}"
    )
    print(loaded.describe(), end="")
    return EXIT_OK


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _serve(args: argparse.Namespace) -> int:
    from ratewarden.server import settings

    try:
        chosen = settings.resolve(vars(args), os.environ)
    except ConfigurationError as exc:
        print(f"ratewarden serve: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from ratewarden.server import app, config, process, upstream_env, upstream_settings

    app.configure_logging(chosen.log_level, chosen.log_format)
    used = upstream_settings.applied(os.environ)
    if used:
        logging.getLogger("ratewarden.server").info(
            "envoyproxy/ratelimit settings in use (a flag or RATEWARDEN_* variable wins)",
            extra={"event": "upstream_settings_applied", "settings": list(used)},
        )
    unused = upstream_env.no_effect(os.environ)
    if unused:
        logging.getLogger("ratewarden.server").info(
            "envoyproxy/ratelimit settings that change nothing here (docs/envoy.md says why)",
            extra={"event": "upstream_settings_without_effect", "settings": list(unused)},
        )
    try:
        return process.run(chosen)
    except config.ConfigError as exc:
        for line in _errors(exc):
            print(f"ratewarden serve: {line}", file=sys.stderr)
        return EXIT_FAILED
    except ConfigurationError as exc:  # a store URL that cannot be used, say
        print(f"ratewarden serve: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"ratewarden serve: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED


def _measure(url: str, algorithm: str, limit: Rate, key_length: int) -> tuple[str, Measured]:
    """``ratewarden plan --measure URL``: this is the composition root that opens the store the
    measurement runs on (and closes it); the plan command only asks for the numbers."""
    from ratewarden.server.settings import redacted, store_scheme

    if store_scheme(url) in ("memory", "memcache"):  # no MEMORY USAGE, no script to time
        raise ConfigurationError(
            f"--measure {redacted(url)!r}: only a Redis can be measured (its memory per key "
            "and time per script call); for a memory or memcached store give --key-bytes"
        )
    # Imported here: `ratewarden plan` without --measure (and every other command) must work
    # without the redis extra installed.
    try:
        from ratewarden.storage.redis import RedisStore
    except ImportError as exc:
        raise ConfigurationError(
            "measure needs redis-py, which is not installed: pip install 'ratewarden[redis]'"
        ) from exc
    from ratewarden.storage.measure import measure

    # A measurement is not a hot path: a slow answer is still an answer.
    store = RedisStore.from_url(url, timeout=2.0)
    try:
        return redacted(url), measure(store, algorithm, limit, key_length=key_length)
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in ``argv`` (``sys.argv[1:]`` by default) and return its exit code."""
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "simulate":
        from ratewarden.simulate import command as simulate

        return simulate.main(args)
    if args.command == "plan":
        from ratewarden.plan import command as plan

        return plan.main(args, _measure)
    return _config_check(args.paths)


if __name__ == "__main__":
    sys.exit(main())
