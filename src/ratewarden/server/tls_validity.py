"""When a PEM certificate is valid: ``certificate_validity`` reads its notBefore and notAfter.

The ssl module says when a certificate expires only for a peer it has verified (and
grpcio not at all), so the first certificate of the file, the one a handshake presents,
is read from its DER: RFC 5280's Certificate, its tbsCertificate, and there, after the
optional version, the serialNumber, signature and issuer, the validity. ``GrpcTls``
refuses a certificate outside it; ``utc`` writes such an instant for a message.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import re
import time

__all__ = ["certificate_validity", "utc"]

#: The first certificate of a PEM file: the one served, as OpenSSL reads the chain.
_FIRST_CERTIFICATE = re.compile(
    rb"-----BEGIN (?:TRUSTED |X509 )?CERTIFICATE-----(.*?)-----END", re.DOTALL
)


def certificate_validity(chain: bytes) -> tuple[float, float]:
    """The notBefore and notAfter (Unix seconds) of the first certificate of the PEM
    ``chain``, the one a handshake presents. ``ValueError`` when there is none to read."""
    found = _FIRST_CERTIFICATE.search(chain)
    if found is None:
        raise ValueError("no PEM certificate in it")
    try:
        der = base64.b64decode(found.group(1))
        _, body, _ = _element(der, 0)  # Certificate: its value starts with tbsCertificate
        _, field_at, _ = _element(der, body)  # tbsCertificate: its fields
        tag, _, end = _element(der, field_at)
        skipped = 3 if tag == 0xA0 else 2  # [0] version is optional
        field_at = end
        for _ in range(skipped):
            field_at = _element(der, field_at)[2]
        _, at, _ = _element(der, field_at)  # validity: notBefore, notAfter
        tag, start, end = _element(der, at)
        not_before = _asn1_time(tag, der[start:end])
        tag, start, end = _element(der, end)
        return not_before, _asn1_time(tag, der[start:end])
    except (binascii.Error, IndexError, ValueError) as exc:
        raise ValueError(f"cannot read the certificate's validity ({exc})") from None


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at ``at``: its tag, where its value starts and where it ends."""
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        length, at = int.from_bytes(der[at : at + count], "big"), at + count
    if at + length > len(der):
        raise ValueError("truncated")
    return tag, at, at + length


def _asn1_time(tag: int, value: bytes) -> float:
    """UTCTime (tag 23: two-digit years, 50 to 99 being 19xx) or GeneralizedTime (24), UTC."""
    text = value.decode("ascii")
    if tag == 23:
        text = ("19" if int(text[:2]) >= 50 else "20") + text
    elif tag != 24:
        raise ValueError(f"tag {tag} is no time")
    return float(calendar.timegm(time.strptime(text, "%Y%m%d%H%M%SZ")))


def utc(seconds: float) -> str:
    """``seconds`` since the epoch as ``2026-01-31 12:00:00 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
