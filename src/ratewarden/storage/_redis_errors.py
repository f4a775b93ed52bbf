"""The one boundary where a Redis client error becomes a ratewarden error.

Every Redis store method that talks to the server catches ``REDIS_ERRORS`` and
hands the exception to ``raise_storage_error``. Nothing else in ratewarden
raises from a redis-py or hiredis exception, so failure modes catch exactly
``StorageUnavailableError`` (the store could not decide now: unreachable, too
slow, failing over, loading, out of memory) or ``StorageError`` (the store
answered with an error that retrying will not fix, such as a script bug, a
server that refuses the store's password, user or database number, a TLS certificate
that does not verify, or an ACL that forbids the store's keys or commands: ``NOPERM``).
A reply of the wrong shape (a server that speaks Redis's protocol but does not run the
scripts) is a ``StorageError`` too, raised where the reply is read (``read_reply``,
``wrong_reply``).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import hiredis
from redis import exceptions as rx

from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage._decisions import REPLY_ERRORS
from ratewarden.storage._redis_server import ServerUnusable

__all__ = [
    "REDIS_ERRORS",
    "TRANSIENT_REPLIES",
    "certificate_refused",
    "connect_failure",
    "credentials_refused",
    "gave_password",
    "raise_storage_error",
    "read_reply",
    "refusal",
    "tls_refusal",
    "wrong_reply",
]

T = TypeVar("T")

#: What a call into redis-py or hiredis may raise when the store, not our code, failed.
#: ``OSError`` covers socket errors, TLS errors and ``TimeoutError``.
REDIS_ERRORS: tuple[type[BaseException], ...] = (
    rx.RedisError,
    rx.RedisClusterException,
    hiredis.HiredisError,
    OSError,
)

#: Error reply codes that say "not now" rather than "never": the server is
#: loading, busy, demoted, resharding, out of memory or cannot persist.
TRANSIENT_REPLIES = (
    "ASK",
    "BUSY",
    "CLUSTERDOWN",
    "LOADING",
    "MASTERDOWN",
    "MISCONF",
    "MOVED",
    "NOREPLICAS",
    "OOM",
    "READONLY",
    "TRYAGAIN",
)

# redis-py ResponseErrors that mean the same as a transient reply code.
_TRANSIENT_TYPES = (
    rx.AskError,
    rx.ClusterError,
    rx.OutOfMemoryError,
    rx.ReadOnlyError,
    rx.TryAgainError,
)


# redis-py's errors for a password or user the server does not take (WRONGPASS,
# NOAUTH, AUTH without a password configured) or a command the ACL forbids.
_CREDENTIALS = (
    rx.AuthenticationError,
    rx.AuthenticationWrongNumberOfArgsError,
    rx.AuthorizationError,
    rx.NoPermissionError,
)


def credentials_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a server refusing a password or user (or an ACL refusing a command)."""
    return isinstance(exc, _CREDENTIALS)


def gave_password(conn: Any) -> bool:
    """Whether redis-py's connection ``conn`` (or a client's ``connection_kwargs``) is given
    a password, or a credential provider that may hold one."""
    if isinstance(conn, dict):
        return bool(conn.get("password") or conn.get("credential_provider"))
    return bool(getattr(conn, "password", None) or getattr(conn, "credential_provider", None))


def certificate_refused(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The TLS error behind ``exc`` (redis-py raises its own ``ConnectionError`` from it)
    when the store could not verify the server's certificate (signed by another CA, for
    another name, expired); None for any other error. Waiting never fixes it: it is a
    setting, or someone in between. A client certificate the server refuses is not judged
    here: over TLS 1.3 the server may close the connection before its alert is read, so the
    same mistake could read as either."""
    seen: BaseException | None = exc
    for _ in range(8):  # a chain is short; a cycle is not followed for ever
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def refusal(
    exc: BaseException, where: str, *, password_given: bool = True
) -> ServerUnusable | None:
    """``ServerUnusable`` when ``exc``, met while a new connection to ``where`` was set up
    (TLS, AUTH, SELECT, HELLO), is the server refusing the store's credentials or database,
    a server certificate that does not verify, or a server that does not speak Redis's protocol;
    None when it is an outage (no answer, loading, failing over) or not the server's.
    ``password_given``: whether the connection had a password (``gave_password``)."""
    certificate = certificate_refused(exc)
    if certificate is not None:
        return ServerUnusable(tls_refusal(certificate, where))
    if isinstance(exc, _CREDENTIALS):
        return _bad_credentials(exc, where, password_given)
    if isinstance(exc, rx.InvalidResponse | hiredis.ProtocolError):  # the reply to HELLO
        return ServerUnusable(
            f"{where} does not speak the Redis protocol ({exc}): is it a Redis port (not a "
            "memcached's, say)? Check the store's URL: waiting will not help"
        )
    if isinstance(exc, rx.ResponseError) and not _transient(exc):
        return ServerUnusable(
            f"{where} refused the connection: {_said(exc)}; check the store's URL (a default "
            "server has databases 0 to 15): waiting will not help"
        )
    return None


def tls_refusal(certificate: ssl.SSLCertVerificationError, where: str) -> str:
    """Why the store cannot use ``where``, whose certificate it cannot verify
    (``certificate_refused``'s): never an outage, so an open failure mode never allows
    every request to a server the store could not trust."""
    return (
        f"{where} presented a TLS certificate the store cannot verify: {certificate}; "
        "check the CA the store trusts (ssl_ca_certs; REDIS_TLS_CACERT under ratewarden "
        "serve) and the names in the server's certificate (ssl_check_hostname): a "
        "certificate that does not verify is a settings mistake, or someone in between: "
        "waiting will not help"
    )


def wrong_reply(where: str, reply: object, why: object, what: str = "a ratewarden script") -> str:
    """Why a reply to ``what`` that is not what Redis sends (``why``) makes the store
    unusable (``unusable``), with the reply's first 60 characters."""
    shown = repr(reply)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return unusable(where, what, f"{shown} ({why})")


def unusable(where: str, what: str, got: str) -> str:
    """Why ``got``, ``where``'s answer to ``what``, makes the store unusable: a server that
    speaks Redis's protocol without answering as Redis does (a proxy, another RESP service,
    a wrong port) answers every call so, in a few milliseconds. Raised as ``ServerUnusable``
    by a router, ``StorageError`` by a store (a region store's too): an error the failure
    mode answers, and ``ping`` raises."""
    return (
        f"{where} answered {what} with {got}: it speaks the Redis protocol but does not "
        "answer as Redis does; is it a Redis port (not a proxy's or another service's)? "
        "Check the store's URL: waiting will not help"
    )


def read_reply(read: Callable[[Any], T], reply: Any, where: str) -> T:
    """``read(reply)``; a reply of the wrong shape (``_decisions.REPLY_ERRORS``) raised as
    the store's ``StorageError``, which says what ``where`` answered."""
    try:
        return read(reply)
    except REPLY_ERRORS as exc:
        raise StorageError(wrong_reply(where, reply, exc)) from exc


def _bad_credentials(exc: BaseException, where: str, password_given: bool = True) -> ServerUnusable:
    if _acl_denied(exc) and "client|setname" not in str(exc).lower():
        return ServerUnusable(_acl_refusal(exc, where))
    if "client|setname" in str(exc).lower():  # the user is right; client_name= is refused
        return ServerUnusable(
            f"{where} refused CLIENT SETNAME: {_said(exc)}; the ACL of the store's user does "
            "not allow it: allow it (+client|setname) or give no client_name: waiting will "
            "not help"
        )
    if not password_given and isinstance(exc, rx.AuthenticationError):
        return ServerUnusable(
            f"{where} needs a password, and the store is given none (it answered: "
            f"{_said(exc)}); give the password in the store's URL (redis://:PASSWORD@HOST, "
            "or USER:PASSWORD@ for an ACL user; REDIS_AUTH under ratewarden serve): waiting "
            "will not help"
        )
    return ServerUnusable(
        f"{where} refused the store's credentials: {_said(exc)}; check the user and password "
        "the store is given: waiting will not help"
    )


def _acl_denied(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's ACL refusing a command or a key: ``NOPERM`` (redis-py's
    ``NoPermissionError``), or, met by a command a script calls, Redis 7's words for it."""
    if isinstance(exc, rx.NoPermissionError):
        return True
    if isinstance(exc, hiredis.ReplyError | rx.ResponseError):
        said = str(exc)
        return said.startswith("NOPERM") or "can't run this command or subcommand" in said
    return False


def _acl_refusal(exc: BaseException, where: str) -> str:
    """What to say when the ACL of the store's user refuses one of its commands or keys."""
    return (
        f"{where} refused a command of the store: {_said(exc)}; the ACL of the store's user "
        "must allow the keys under the store's prefix (~PREFIX:*, or ~* on a server of its "
        "own) and the commands the store sends: EVALSHA, EVAL, TIME, PING, DEL, and those its "
        "scripts call (GET, SET, HSET, ...: +@read +@write): waiting will not help"
    )


def connect_failure(where: str, exc: BaseException) -> str:
    """Why a new connection to ``where`` failed, for an outage (``refusal`` found none): a
    server that took the connection but did not answer its setup in time (hung, paused,
    failing over) is not one that cannot be connected to."""
    if isinstance(exc, TimeoutError | rx.TimeoutError) and "connecting" not in str(exc):
        return f"{where} took the connection but did not answer its setup in time: {exc}"
    return f"cannot connect to {where}: {exc}"


def _said(exc: BaseException) -> str:
    """The server's words, without the full stop some replies end with."""
    return str(exc).rstrip(". ")


#: redis-py's repr of a sentinel's client, which "No master found" lists whole for each one
_SENTINEL_REPR = re.compile(
    r"<redis\.(?:asyncio\.)?client\.Redis\(.*?,host=([^,]+),port=(\d+),.*?\)>\)>\)>", re.DOTALL
)


def _readable(exc: BaseException) -> str:
    """The error's words, a sentinel's client repr shortened to ``sentinel HOST:PORT``."""
    # A Sentinel store's "No master found" says why itself (``_redis_sentinel._Telling``).
    return _SENTINEL_REPR.sub(r"sentinel \1:\2", str(exc)).rstrip(". ")  # "refused.;" read oddly


def _transient(exc: rx.ResponseError) -> bool:
    code = getattr(exc, "status_code", None)
    return isinstance(exc, _TRANSIENT_TYPES) or code in TRANSIENT_REPLIES


def _redirected(exc: BaseException) -> bool:
    """A MOVED or ASK reply on the store's own connections: only a Cluster node sends one,
    and those connections meet one only as a store of one server (plain or a Sentinel's
    primary) pointed at a Cluster node, since the Cluster router follows them itself.
    redis-py's ``MovedError`` is left to ``_unavailable``: a Cluster client's pipeline may
    hand one back after its own retries, during a reshard, which waiting does fix."""
    return isinstance(exc, hiredis.ReplyError) and str(exc).startswith(("MOVED ", "ASK "))


def _unavailable(exc: BaseException) -> bool:
    if isinstance(exc, hiredis.ReplyError):
        return str(exc).startswith(TRANSIENT_REPLIES)
    if isinstance(exc, rx.ResponseError):
        return isinstance(exc, _TRANSIENT_TYPES)
    # DataError is a bad argument on our side: the store is fine.
    return not isinstance(exc, rx.DataError)


def _not_a_cluster(where: str) -> str:
    """What a cluster URL at a standalone server is told, naming the URL's nodes (``where``
    is ``cluster_where``'s "Redis Cluster HOST:PORT,..."). The store may be given a client,
    not a URL, so both spellings of the scheme are named (``valkey`` may stand for ``redis``)."""
    nodes = where.removeprefix("Redis Cluster ")
    cure = (
        "use a redis:// URL (or valkey://; rediss:// or valkeys:// over TLS) for a standalone "
        "server, or point the cluster URL at a cluster's nodes"
    )
    if "," not in nodes:
        return (
            f"Redis at {nodes} is a standalone server, not a Redis Cluster node (cluster mode "
            "is not enabled on it), so a cluster URL (redis+cluster://, valkey+cluster://) "
            f"cannot use it; {cure}"
        )
    return (
        f"Redis at {nodes}: a node that answered is a standalone server, not a Redis Cluster "
        "node (cluster mode is not enabled on it), and no node answered as one, so a cluster "
        f"URL (redis+cluster://, valkey+cluster://) cannot use them; {cure}"
    )


def raise_storage_error(exc: BaseException, where: str, timeout: float) -> NoReturn:
    """Raise the ratewarden error for ``exc``, met while talking to ``where``."""
    if isinstance(exc, ServerUnusable):  # it answers, but cannot be used: not an outage
        raise StorageError(str(exc)) from exc
    certificate = certificate_refused(exc)  # met on redis-py's own connections (a Cluster's)
    if certificate is not None:
        raise StorageError(tls_refusal(certificate, where)) from exc
    if isinstance(exc, _CREDENTIALS):  # met on redis-py's own connections (a Cluster's)
        raise StorageError(str(_bad_credentials(exc, where))) from exc
    if _acl_denied(exc):  # a setting: answering it as an outage would hide it
        raise StorageError(_acl_refusal(exc, where)) from exc
    if isinstance(exc, rx.RedisClusterException) and "Cluster mode is not enabled" in str(exc):
        # The server answered: a settings mistake waiting will not fix. redis-py's own words
        # ("Redis Cluster cannot be connected. Please provide at least one reachable node")
        # are left out: the node was reached.
        raise StorageError(_not_a_cluster(where)) from exc
    if _redirected(exc):  # the Cluster router follows these itself: never raised from it
        raise StorageError(
            f"Redis at {where} answered {_said(exc)}: it is a node of a Redis Cluster, which "
            "a redis:// URL cannot use (keys of other nodes' slots are refused); use "
            "redis+cluster:// (rediss+cluster:// over TLS) with the cluster's nodes"
        ) from exc
    if isinstance(exc, TimeoutError | rx.TimeoutError):
        raise StorageUnavailableError(
            f"Redis at {where} did not answer within {timeout:g} s ({exc}); the decision "
            "may or may not have been applied: the failure mode decides what to do"
        ) from exc
    if _unavailable(exc):
        raise StorageUnavailableError(
            f"Redis at {where} is unavailable: {type(exc).__name__}: {_readable(exc)}; the failure "
            "mode decides what to do"
        ) from exc
    raise StorageError(
        f"Redis at {where} rejected a ratewarden command: {type(exc).__name__}: {exc}; "
        "this is a bug or a server misconfiguration (ACL, renamed command), not an outage"
    ) from exc
