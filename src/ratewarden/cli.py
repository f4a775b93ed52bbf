"""The ``ratewarden`` command.

::

    ratewarden serve --config PATH... [--store URL] [--host H] [--grpc-port N] [--http-port N]
                     [--workers N] [...]            the Envoy rate limit service
    ratewarden config check [--merge-domains] [--config-files yaml|all]
                            [--failure-mode M] [PATH...]  validate rules as serve loads them
    ratewarden simulate [--bursts | --accuracy] [...]  traffic through algorithms, in simulated time
    ratewarden plan --rps N [...]                    capacity planning: memory, calls/s, bounds

Exit codes: 0 success; 1 ``config check`` found the rule files invalid, the server
could not start (a busy port, an address that is not this host's), a worker died, or
``serve`` / ``config`` ran without the ``server`` extra installed; 2
``serve`` refused to start on bad input (a flag or environment variable with a wrong
value, a listening address that is neither an IP address nor a name that resolves, a
store URL that cannot be used, rule files that do not load), or any command's bad
command-line input (an unknown flag, named with the nearest known one); 130 Ctrl-C
(one line, no traceback); 141 the reader of the output went away (``| head``), as
for a Unix tool killed by SIGPIPE; 1 the output cannot be written otherwise (a full disk:
``> /dev/full``), said in one line.
Errors are one line each, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO, cast

from ratewarden.argparsing import CommandParser
from ratewarden.cli_output import Output, OutputError, quiet
from ratewarden.errors import ConfigurationError

if TYPE_CHECKING:
    from ratewarden.rate import Rate
    from ratewarden.storage.measure import Measured

__all__ = ["METAVARS", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: A closed output: 128 + SIGPIPE, what a shell reports for a tool its reader left.
EXIT_BROKEN_PIPE = 141
#: Ctrl-C: 128 + SIGINT, what a shell reports for a tool interrupted.
EXIT_INTERRUPTED = 130


#: The placeholder of each serve flag's value in ``serve --help``: the one the flag tables of
#: docs/envoy.md and docs/xds.md write (a test holds them equal). On/off switches have none.
METAVARS: dict[str, str] = {
    name: metavar
    for metavar, names in {
        "PATH": "config_paths xds_tls_ca xds_tls_cert xds_tls_key grpc_uds tls_cert tls_key "
        "tls_client_ca",
        "HOST:PORT": "config_xds",
        "ID": "xds_node_id",
        "NAME": "xds_tls_server_name",
        "HOST": "tls_client_san",
        "K=V,...": "xds_node_metadata xds_headers tracing_resource",
        "URL": "store_url store_per_second statsd dogstatsd",
        "FILE": "metrics_mapping dogstatsd_mogrifiers",
        "H": "host grpc_host debug_host metrics_host",
        "N": "grpc_port http_port debug_port metrics_port workers xds_max_message_bytes "
        "max_values_per_rule breaker_failures breaker_window "
        "rlqs_demand_reports rlqs_bucket_metrics over_limit_cache",
        "S": "xds_retry_interval xds_retry_max store_timeout grpc_max_connection_age "
        "grpc_max_connection_age_grace reload_interval health_interval grace drain "
        "breaker_cooldown rlqs_interval rlqs_ttl rlqs_idle statsd_interval",
        "K": "rlqs_change_rounds",
        "R": "near_limit_ratio breaker_failure_ratio tracing_sampling_rate",
        "P": "key_prefix metrics_path tracing",
        "L": "log_level loop",
        "F": "log_format",
        "W": "dashboard",
        "M": "response_headers response_metadata",
        "T": "transport statsd_tags",
        "open|closed": "on_error",
        "yaml|all": "config_files",
        "open|closed|local": "failure_mode",
        "NAMES": "legacy_header_names",
    }.items()
    for name in names.split()
}


def _serve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ratewarden.server.command import add_serve_parser

    add_serve_parser(commands, METAVARS)


#: The optional dependencies ``serve`` and ``config check`` need (``ratewarden[server]``).
SERVER_EXTRA = "ratewarden[server]"


def _without_extra(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    missing: ModuleNotFoundError,
) -> None:
    """A stand-in for the ``name`` command when its extra is not installed: it takes any
    arguments, and running it says what to install (the other commands still work)."""
    stand_in = commands.add_parser(
        name, help=f"{help_text} (needs {SERVER_EXTRA}, not installed)", add_help=False
    )
    stand_in.add_argument("given", nargs="*")
    stand_in.set_defaults(missing_module=missing.name or str(missing))


def _third_party(exc: ModuleNotFoundError) -> bool:
    """A missing module of a dependency, not one of ratewarden's own (a bug, raised)."""
    return bool(exc.name) and not (exc.name or "").startswith("ratewarden")


def _parser() -> argparse.ArgumentParser:
    # Typed as the base class, so the subcommands' modules take its subparsers as theirs.
    parser: argparse.ArgumentParser = CommandParser(
        prog="ratewarden",
        description="Exact, atomic rate limiting: the Envoy rate limit service and its tools.",
    )
    from ratewarden import __version__

    parser.add_argument("--version", action="version", version=f"ratewarden {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    try:
        _serve_parser(commands)
    except ModuleNotFoundError as exc:
        if not _third_party(exc):
            raise
        _without_extra(commands, "serve", "run the Envoy rate limit service", exc)
        server_missing: ModuleNotFoundError | None = exc
    else:
        server_missing = None
    from ratewarden.simulate import command as simulate

    simulate.add_parser(commands)
    from ratewarden.plan import command as plan

    plan.add_parser(commands)
    if server_missing is not None:  # config check loads rules with the server's reader
        _without_extra(commands, "config", "work with rule files", server_missing)
        return parser
    config = commands.add_parser(
        "config",
        help="work with rule files",
        description="Work with rule files (envoyproxy/ratelimit YAML and ratewarden's "
        "extensions, docs/config.md) without serving them.",
    )
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    check = config_commands.add_parser(
        "check",
        help="validate rule files; exit 1 listing every error (file:line: key: reason)",
        description="Load rule files or directories the way `serve` does, with the same flags "
        "and variables, and report every error, and what serve would warn of (entries of a "
        "directory not read, a directory with no rule file). Exit 0 when they load, 1 listing "
        "every error, 2 on a bad flag or variable.",
    )
    check.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="rule files or directories, as serve --config; none: those serve would read "
        "(RATEWARDEN_CONFIG, or envoyproxy/ratelimit's RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/"
        "RUNTIME_APPDIRECTORY, which choose --config-files all)",
    )
    check.add_argument(
        "--merge-domains",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a domain several files name is one domain with all their descriptors, as "
        "`serve --merge-domains` loads them (otherwise an error) "
        "[env RATEWARDEN_MERGE_DOMAINS, then MERGE_DOMAIN_CONFIG, as serve reads them]",
    )
    from ratewarden.server.options import OPTIONS

    for name in ("config_files", "failure_mode"):  # serve's flags, read as serve reads them
        option = OPTIONS[name]
        check.add_argument(
            option.flag, metavar=METAVARS[name], help=f"{option.help} [env {option.env}]"
        )
    return parser


def _config_check(args: argparse.Namespace) -> int:
    from ratewarden.server import config_check

    flags = {
        "config_paths": args.paths or None,
        "config_files": args.config_files,
        "failure_mode": args.failure_mode,
        "merge_domains": args.merge_domains,
    }
    try:
        chosen = config_check.settings_for(flags, os.environ)
    except ConfigurationError as exc:
        print(f"ratewarden config check: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    warnings = config_check.ServeWarnings()
    try:
        loaded = config_check.load(chosen, warnings)
    except ConfigurationError as exc:
        lines = config_check.problems(exc)
        for line in [f"warning: {w}" for w in warnings.lines] + lines:
            print(line, file=sys.stderr)
        print(f"ratewarden config check: {_count(len(lines), 'error')}", file=sys.stderr)
        return EXIT_FAILED
    for line in warnings.lines:
        print(f"warning: {line}", file=sys.stderr)
    print(
        f"ok: {_count(len(loaded.files), 'file')}, {_count(len(loaded.domains), 'domain')}, "
        f"{_count(len(loaded.rules), 'rule')}"
    )
    print(loaded.describe(), end="")
    return EXIT_OK


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _serve(args: argparse.Namespace) -> int:
    from ratewarden.server import settings, start_checks
    from ratewarden.server.logs import quiet_grpc_core

    quiet_grpc_core(os.environ)  # before anything imports grpc, which reads it then

    try:
        chosen = settings.resolve(vars(args), os.environ)
        start_checks.check_start(chosen, vars(args), os.environ)
    except ConfigurationError as exc:
        print(f"ratewarden serve: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from ratewarden.server import (
        app,
        config,
        config_check,
        options_env,
        process,
        upstream_backend,
        upstream_env,
        upstream_settings,
    )

    app.configure_logging(chosen.log_level, chosen.log_format)
    unknown = options_env.unknown(os.environ)
    if unknown:  # a misspelt variable would leave its setting at the default without a word
        logging.getLogger("ratewarden.server").warning(
            "RATEWARDEN_* variables no setting reads, ignored: %s",
            ", ".join(
                f"{name} (did you mean {near}?)" if near else name for name, near in unknown.items()
            ),
            extra={"event": "unknown_variables", "variables": unknown},
        )
    xds = chosen.config_xds is not None
    used = upstream_settings.applied(os.environ, xds=xds)
    if used:
        logging.getLogger("ratewarden.server").info(
            "envoyproxy/ratelimit settings in use (a flag or RATEWARDEN_* variable wins)",
            extra={"event": "upstream_settings_applied", "settings": list(used)},
        )
    unused = upstream_env.no_effect(os.environ, xds=xds)
    if unused:
        logging.getLogger("ratewarden.server").info(
            "envoyproxy/ratelimit settings that change nothing here (docs/envoy.md says why)",
            extra={"event": "upstream_settings_without_effect", "settings": list(unused)},
        )
    note = upstream_backend.timeout_note(chosen.store_timeout, vars(args), os.environ)
    if note is not None:  # a Redis slower than 20 ms would be a silent store failure
        logging.getLogger("ratewarden.server").warning(
            note, extra={"event": "upstream_store_timeout", "store_timeout": chosen.store_timeout}
        )
    try:
        return process.run(chosen)
    except config.ConfigError as exc:  # rules that do not load: refused, as a bad flag is
        for line in config_check.problems(exc):
            print(f"ratewarden serve: {line}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigurationError as exc:  # a store URL that cannot be used, say
        print(f"ratewarden serve: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # a port in use names the flag that gives another
        from ratewarden.server.command import refusal

        print(f"ratewarden serve: {refusal(exc)}", file=sys.stderr)
        return EXIT_FAILED


def _measure(url: str, algorithm: str, limit: Rate, key_length: int) -> tuple[str, Measured]:
    """``ratewarden plan --measure URL``: this is the composition root that opens the store the
    measurement runs on (and closes it); the plan command only asks for the numbers."""
    from ratewarden.server.store_url import redacted, store_scheme

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
            "measure needs redis-py, which is not installed: pip install 'ratewarden[redis]' "
            "(in a clone: pip install -e '.[redis]')"
        ) from exc
    from ratewarden.storage.measure import measure

    # A measurement is not a hot path: a slow answer is still an answer.
    store = RedisStore.from_url(url, timeout=2.0)
    try:
        return redacted(url), measure(store, algorithm, limit, key_length=key_length)
    finally:
        store.close()


def _prog(argv: Sequence[str]) -> str:
    """The command as its messages name it: ``ratewarden plan``, ``ratewarden config check``."""
    named = list(argv[:2] if argv[:1] == ["config"] else argv[:1])
    return " ".join(["ratewarden", *(word for word in named if not word.startswith("-"))])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in ``argv`` (``sys.argv[1:]`` by default) and return its exit code.

    A reader that closes the output early (``ratewarden config check FILE | head -1``) ends
    the command quietly with ``EXIT_BROKEN_PIPE``: stdout and stderr are pointed at devnull,
    so that nothing more is written and the flush at exit has nothing to fail on. An output
    that cannot be written otherwise (``> /dev/full``) is one line on stderr and
    ``EXIT_FAILED``.
    """
    output = Output(sys.stdout)
    sys.stdout = watched = cast("TextIO", output)
    try:
        try:
            return _command(argv)
        finally:  # a reader gone while the output sat in the buffer shows here, not at exit
            sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C in a long simulate or plan (serve stops on its own)
        print("ratewarden: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        quiet(output.stream, sys.stderr)
        return EXIT_BROKEN_PIPE
    except OutputError as exc:
        prog = _prog(sys.argv[1:] if argv is None else argv)
        print(f"{prog}: error: cannot write the output: {exc}", file=sys.stderr)
        quiet(output.stream)
        return EXIT_FAILED
    finally:
        if sys.stdout is watched:
            sys.stdout = output.stream


def _command(argv: Sequence[str] | None) -> int:
    # Known flags or not, a command whose extra is missing answers what to install (every
    # other command's unknown flags are refused by the parser).
    args, _ = _parser().parse_known_args(argv)
    missing = getattr(args, "missing_module", None)
    if missing is not None:
        print(
            f"ratewarden {args.command}: error: needs {SERVER_EXTRA}, which is not installed "
            f"(no module named {missing!r}): install it, e.g. pip install -e '.[server]' in "
            "a clone",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if args.command == "serve":
        return _serve(args)
    if args.command == "simulate":
        from ratewarden.simulate import command as simulate

        return simulate.main(args)
    if args.command == "plan":
        from ratewarden.plan import command as plan

        return plan.main(args, _measure)
    return _config_check(args)


if __name__ == "__main__":
    sys.exit(main())
