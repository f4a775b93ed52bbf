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
for a Unix tool killed by SIGPIPE.
Errors are one line each, never a traceback.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ratewarden.argparsing import CommandParser
from ratewarden.errors import ConfigurationError

if TYPE_CHECKING:
    from ratewarden.rate import Rate
    from ratewarden.server.settings import Settings
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
        "max_values_per_rule legacy_header_names breaker_failures breaker_window "
        "rlqs_demand_reports rlqs_bucket_metrics over_limit_cache",
        "S": "xds_retry_interval xds_retry_max store_timeout grpc_max_connection_age "
        "grpc_max_connection_age_grace reload_interval health_interval grace breaker_cooldown "
        "rlqs_interval rlqs_ttl rlqs_idle statsd_interval",
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
    }.items()
    for name in names.split()
}


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
            serve.add_argument(option.flag, dest=name, metavar=METAVARS[name], help=help_text)


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


def _errors(exc: BaseException) -> list[str]:
    errors = getattr(exc, "errors", None)
    return [str(error) for error in errors] if errors else [str(exc)]


class _ServeWarnings(logging.Handler):
    """Within ``with``, the warnings serve logs while it loads rule files (``server/reload.py``:
    ``config_files_skipped``, ``config_directory_empty``), printed on stderr as it leaves,
    one line each: ``config check`` says what serve would, from serve's own code."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.logger = logging.getLogger("ratewarden.server")

    def emit(self, record: logging.LogRecord) -> None:
        skipped = getattr(record, "skipped", None)
        if isinstance(skipped, list):  # one line per entry not read, rather than one long
            self.lines.extend(f"not read as rules: {entry}" for entry in skipped)
        else:
            self.lines.append(record.getMessage())

    def __enter__(self) -> None:
        self.logger.addHandler(self)

    def __exit__(self, *exc_info: object) -> None:
        self.logger.removeHandler(self)
        for line in self.lines:
            print(f"warning: {line}", file=sys.stderr)


def _config_check(args: argparse.Namespace) -> int:
    from ratewarden.server import rules_source, settings
    from ratewarden.server.reload import ConfigWatcher

    flags = {
        "config_paths": args.paths or None,
        "config_files": args.config_files,
        "failure_mode": args.failure_mode,
        "merge_domains": args.merge_domains,
    }
    try:
        chosen = settings.resolve(flags, rules_source.file_variables(flags, os.environ))
        rules_source.check_files_given(chosen)
    except ConfigurationError as exc:
        print(f"ratewarden config check: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # serve's own first load (app.py): the watcher names what it will not read, then loads
    # (nothing to apply the rules to: a first load only returns them).
    load, apply = rules_source.file_loader(chosen), lambda _rules: None
    watcher = ConfigWatcher(chosen.config_paths, load, apply, files=chosen.config_files)
    try:
        with _ServeWarnings():
            loaded = watcher.load_initial()
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
        _config_paths_exist(chosen.config_paths, args.config_paths is not None, os.environ)
        _hosts_resolve(chosen, vars(args), os.environ)
    except ConfigurationError as exc:
        print(f"ratewarden serve: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from ratewarden.server import app, config, process, upstream_env, upstream_settings

    app.configure_logging(chosen.log_level, chosen.log_format)
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
    try:
        return process.run(chosen)
    except config.ConfigError as exc:  # rules that do not load: refused, as a bad flag is
        for line in _errors(exc):
            print(f"ratewarden serve: {line}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigurationError as exc:  # a store URL that cannot be used, say
        print(f"ratewarden serve: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"ratewarden serve: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED


def _config_paths_exist(paths: Sequence[str], flagged: bool, environ: Mapping[str, str]) -> None:
    """A rule path that does not exist, refused naming where it was given: ``--config``, its
    variable, or the upstream RUNTIME_* variables the path was made of."""
    from ratewarden.server.options import OPTIONS

    if flagged:
        source = OPTIONS["config_paths"].flag
    elif OPTIONS["config_paths"].env in environ:
        source = OPTIONS["config_paths"].env
    else:
        source = "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"
    for path in paths:
        if not os.path.exists(path):
            raise ConfigurationError(f"{source} {path!r}: does not exist")


#: Each listening address, and the upstream variable it can also come from.
_HOSTS = {
    "host": "HOST",
    "grpc_host": "GRPC_HOST",
    "debug_host": "DEBUG_HOST",
    "metrics_host": "PROMETHEUS_ADDR",
}


def _hosts_resolve(
    chosen: Settings, flags: Mapping[str, object], environ: Mapping[str, str]
) -> None:
    """An address to listen on that is neither an IP address nor a name this host resolves,
    refused naming where it was given, as a bad value (exit 2): binding it could only fail.
    An address that resolves but is not this host's is the bind's to refuse (exit 1)."""
    from ratewarden.server.options import OPTIONS

    for name, upstream in _HOSTS.items():
        host = getattr(chosen, name)
        if host is None:
            continue
        problem = _host_problem(host)
        if problem is None:
            continue
        if flags.get(name) is not None:
            given = f"{OPTIONS[name].flag} {host!r}"
        elif OPTIONS[name].env in environ:
            given = f"{OPTIONS[name].env} {host!r}"
        else:
            given = f"{upstream}={environ.get(upstream, host)!r}"
        raise ConfigurationError(f"{given}: {problem}")


def _host_problem(host: str) -> str | None:
    """Why ``host`` cannot be an address to listen on, or None. Numbers and dots only are
    an IPv4 address or nothing: no name is looked up for them (999.1.1.1 is no name)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return None
    if all(part.isascii() and part.isdigit() for part in host.split(".")):
        return "not an IP address (IPv4 is four numbers from 0 to 255, as 127.0.0.1)"
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else exc
        return f"not an IP address or a name this host can resolve ({why})"
    return None


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
    """Run the command in ``argv`` (``sys.argv[1:]`` by default) and return its exit code.

    A reader that closes the output early (``ratewarden config check FILE | head -1``) ends
    the command quietly with ``EXIT_BROKEN_PIPE``: stdout and stderr are pointed at devnull,
    so that nothing more is written and the flush at exit has nothing to fail on.
    """
    try:
        try:
            return _command(argv)
        finally:  # a reader gone while the output sat in the buffer shows here, not at exit
            sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C in a long simulate or plan (serve stops on its own)
        print("ratewarden: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            os.dup2(devnull, stream.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


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
