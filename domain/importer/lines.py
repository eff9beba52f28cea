"""Reading an uploaded file line by line in bounded memory, hashing it on the way.

The file is never read whole: each line is read with a size cap, so memory stays near
the longest line allowed (a line over the cap is skipped in pieces and reported), and
the SHA-256 of the exact bytes is computed as they stream past, for duplicate detection.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

# One bench_serving record with --output-details for thousands of long requests is tens of
# megabytes.  A line above this is refused (reported as too_long, never held whole); a line
# above domain.importer.slim.SLIM_ABOVE_BYTES is read without building its per-request
# arrays, so memory stays about twice the longest line (the line, and its copy without the
# newline while it is cut), never the ~10x a full json.loads of it costs.
MAX_LINE_BYTES = 256 * 1024 * 1024
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, as editors show it
    data: bytes  # without the trailing newline; empty when too_long
    ends_with_newline: bool
    too_long: bool = False
    size: int = 0


class HashingReader:
    """Yields the lines of a binary stream; ``sha256``/``size`` are final once exhausted."""

    def __init__(self, stream: BinaryIO, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._stream = stream
        self._max = max_line_bytes
        self._digest = hashlib.sha256()
        self.size = 0

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    def _read(self, limit: int) -> bytes:
        chunk = self._stream.readline(limit)
        self._digest.update(chunk)
        self.size += len(chunk)
        return chunk

    def _skip_rest_of_line(self) -> tuple[int, bool]:
        """Consume (and hash) the remainder of an over-long line; its size and newline."""
        skipped = 0
        while True:
            piece = self._read(_CHUNK)
            skipped += len(piece)
            if not piece or piece.endswith(b"\n"):
                return skipped, piece.endswith(b"\n")

    def __iter__(self) -> Iterator[Line]:
        number = 0
        while True:
            chunk = self._read(self._max + 1)  # +1: room for the newline of a line exactly at the cap
            if not chunk:
                return
            number += 1
            ended = chunk.endswith(b"\n")
            if not ended and len(chunk) > self._max:
                rest, ended = self._skip_rest_of_line()
                yield Line(number, b"", ended, too_long=True, size=len(chunk) + rest)
                continue
            size = len(chunk)
            data = chunk[:-1] if ended else chunk
            del chunk  # the copy without the newline replaces it: one long line held once, not twice
            yield Line(number, data.rstrip(b"\r"), ended, size=size)


def sha256_of(stream: BinaryIO) -> tuple[str, int]:
    """Hash and size of a whole stream, read in chunks (for whole-file formats)."""
    digest = hashlib.sha256()
    size = 0
    for chunk in iter(lambda: stream.read(_CHUNK), b""):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size
