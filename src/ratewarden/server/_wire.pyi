"""Types of the optional C extension built from _wire.c (loaded by server/wire.py)."""

def encode_response(overall: int, statuses: list[tuple[bytes, int, int]], tail: bytes) -> bytes:
    """A RateLimitResponse's wire bytes: see server/wire.py."""
