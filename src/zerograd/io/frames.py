"""JSON-RPC frames read from a byte stream, robustly (the language server's input, issue 42)."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable
from typing import Callable, Optional

# The header pygls reads; no valid JSON body holds it (the raw CR LF cannot be inside a string),
# so met inside a body it starts the next frame. Digits bounded: a match fits in HEADER_MARGIN.
HEADER = re.compile(rb"Content-Length: (\d{1,18})\r\n")
HEADER_MARGIN = 64
HEADER_START = re.compile(rb"Content-Length: \d{0,18}\r?")
OTHER_HEADERS = re.compile(rb"(?:[^\r\n:]+:[^\r\n]*\r\n)*")  # a Content-Type before the length, say
log = logging.getLogger("zerograd.server")


class Frames:
    """The bodies of JSON-RPC frames read from a byte stream. pygls reads Content-Length bytes
    blindly, so a frame claiming more than it holds swallowed the frames after it (the server
    answered nothing again, not even `exit`), and one claiming less lost the next header. Here a
    header found inside a body ends that body, and bytes before a header are skipped. A frame
    claiming more than it holds is handled only when the next frame (or the end of input) comes."""

    def __init__(self, read: Callable[[], Awaitable[bytes]]) -> None:
        self.read = read  # returns what has arrived (b"" at the end), not a fixed count
        self.buffer = bytearray()

    async def more(self) -> bool:
        chunk = await self.read()
        self.buffer += chunk
        return bool(chunk)

    async def next(self) -> Optional[bytes]:
        """The next body, cut short at the next header or at the end of input; None at the end."""
        while (found := self._header()) is None:
            if not await self.more():
                return None
        length, start = found
        end, scanned = start + length, start
        while True:
            # a header starting inside the claimed body may end past it
            cut = HEADER.search(self.buffer, max(start, scanned - HEADER_MARGIN), end + HEADER_MARGIN)
            if cut is not None and cut.start() < end:
                log.warning("zerograd: a frame claimed %d bytes but held %d; reading on at the next header",
                            length, cut.start() - start)
                return self._take(start, cut.start())
            if len(self.buffer) >= end and not self._header_arriving(start, end):
                return self._take(start, end)
            scanned = len(self.buffer)
            if not await self.more():
                return self._take(start, min(end, len(self.buffer)))

    def _header(self) -> Optional[tuple[int, int]]:
        """The first header's length and where its body starts, once the headers have arrived."""
        match = HEADER.search(self.buffer)
        if match is None:  # what cannot hold the start of a header goes, so junk does not pile up
            self._skip(len(self.buffer) - HEADER_MARGIN)
            return None
        end = self.buffer.find(b"\r\n\r\n", match.end() - 2)
        if end < 0:
            return None
        length, start = int(match.group(1)), end + 4 - match.start()
        self._skip(match.start())  # after reading the match: it reads the buffer this changes
        return length, start

    def _header_arriving(self, start: int, end: int) -> bool:
        """Whether the buffer ends in the first part of a header that starts in the body. Never so
        for a valid body (JSON cannot end in "C" nor hold "Content-Length: " outside a string), so
        a valid frame never waits on it; the header's "C" is its only one."""
        at = self.buffer.rfind(b"C", max(start, end - HEADER_MARGIN), end)
        return at >= 0 and len(self.buffer) - at < HEADER_MARGIN and _header_start(bytes(self.buffer[at:]))

    def _skip(self, count: int) -> None:
        if count > 0 and not OTHER_HEADERS.fullmatch(self.buffer, 0, count):
            log.warning("zerograd: skipped %d bytes that were no frame", count)
        del self.buffer[:max(count, 0)]

    def _take(self, start: int, end: int) -> bytes:
        body = bytes(self.buffer[start:end])
        del self.buffer[:end]
        return body


def _header_start(tail: bytes) -> bool:
    """Whether `tail` is a header cut short: "Cont", "Content-Length: 12"."""
    return b"Content-Length: ".startswith(tail) or HEADER_START.fullmatch(tail) is not None
