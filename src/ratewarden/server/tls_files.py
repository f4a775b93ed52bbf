"""TLS files checked before anything uses them, for the gRPC port (``GrpcTls.load``) and
the xDS client (``xds.source_of``) alike.

``check_files`` refuses what cannot work: a file that cannot be read (which, and for a
permission refused, whose it is), a key protected by a pass phrase (``check_key``), a
certificate chain and key that do not load together, CA certificates that do not parse.
Each is a ``ConfigurationError`` naming the setting as the caller gives it (a flag, or the
variable it came by), so that bad files stop the start rather than fail every handshake
later (for the xDS client: a connection retried for ever with grpc-core's own lines).
"""

from __future__ import annotations

import contextlib
import os
import ssl

from ratewarden.errors import ConfigurationError

__all__ = ["check_files", "check_key", "check_readable"]


def check_files(
    cert: str | None,
    key: str | None,
    ca: str | None,
    names: tuple[str, str, str],
) -> None:
    """Refuse ``cert`` and ``key`` (both, or neither: the caller has seen to that) and
    ``ca`` (each None when not given) unless each can be read, the key is not encrypted,
    the two load together as a PEM chain and its key, and the CA file holds PEM CA
    certificates. ``names`` name the settings of the certificate, key and CA."""
    cert_name, key_name, ca_name = names
    if key is not None:
        check_key(key, key_name)
    for name, path in ((cert_name, cert), (key_name, key), (ca_name, ca)):
        if path is not None:
            check_readable(name, path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if cert is not None and key is not None:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"{cert_name} {cert!r} / {key_name} {key!r}: cannot use them as a PEM "
                f"certificate chain and its private key ({exc})"
            ) from None
    if ca is not None:
        try:
            context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"{ca_name} {ca!r}: cannot use it as PEM CA certificates ({exc})"
            ) from None


def check_readable(name: str, path: str) -> None:
    """``ConfigurationError`` naming the file ``name`` gives when it cannot be read: which
    file, and for a permission refused, whose it is and its mode (a Kubernetes secret
    mounted 0600 for root, read by a server that runs as another user)."""
    try:
        with open(path, "rb"):
            return
    except PermissionError as exc:
        why = f"{exc.strerror}: uid {os.geteuid()} may not read it"
        with contextlib.suppress(OSError):
            found = os.stat(path)
            mode = found.st_mode & 0o7777
            why += f"; it is owned by uid {found.st_uid}, gid {found.st_gid}, mode {mode:04o}"
        raise ConfigurationError(f"{name} {path!r}: cannot read it ({why})") from None
    except OSError as exc:
        raise ConfigurationError(f"{name} {path!r}: cannot read it ({exc.strerror})") from None


#: What a PEM private key protected by a pass phrase has: PKCS#8's header, or OpenSSL's
#: traditional format's ``Proc-Type`` line.
_ENCRYPTED = (b"-----BEGIN ENCRYPTED PRIVATE KEY-----", b"Proc-Type: 4,ENCRYPTED")


def check_key(key: str, name: str) -> None:
    """Refuse an encrypted key: serve has no pass phrase to give, and OpenSSL would ask for
    one on the terminal (waiting for ever under ``docker run -t``). A file that cannot be
    read is left to ``check_readable``, which says why."""
    try:
        with open(key, "rb") as file:
            head = file.read(1 << 16)
    except OSError:
        return
    if any(marker in head for marker in _ENCRYPTED):
        raise ConfigurationError(
            f"{name} {key!r} is encrypted (protected by a pass phrase), which serve cannot "
            f"give; decrypt it into a file only serve can read (openssl pkey -in {key} "
            "-out server.key) and give that"
        )
