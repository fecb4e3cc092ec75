"""A request body's Content-Encoding undone as it arrives, piece by piece (the HTTP port's
`http_server`): gzip (and its members one after another), deflate with its zlib header or
without, and br where `brotli` is installed (tritonclient installs it). No piece is larger than
about INFLATE_PIECE bytes, so that a body is refused at its limit with no more than a piece
past it ever held: a compression bomb of 1 GiB costs the door a piece, not a gigabyte."""

from __future__ import annotations

import zlib
from typing import Any, Iterator

#: What is read of one piece of a compressed body at a time.
INFLATE_PIECE = 1 << 16
try:  # br is read where brotli 1.2 or later is installed (its output limit; tritonclient brings it)
    import brotli

    if not hasattr(brotli.Decompressor(), "can_accept_more_data"):  # pragma: no cover - brotli < 1.2
        brotli = None
except ImportError:  # pragma: no cover
    brotli = None
#: What a body that does not inflate raises.
INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,) + ((brotli.error,) if brotli is not None else ())
#: Content-Encodings inflated.
ENCODINGS = ("gzip", "x-gzip", "deflate") + (("br",) if brotli is not None else ())


class Inflater:
    """One body's Content-Encoding undone: `pieces(data)` yields what `data` inflates to, in
    pieces of about INFLATE_PIECE bytes (brotli's: up to 1.5 times that); `finished()` says
    whether the compressed stream has ended."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        self._zlib: Any = None  # a zlib decompressobj
        self._first = b""  # a deflate body's first byte, until its second says how it is wrapped
        self.fed = False  # a byte of the body came
        self._brotli = brotli.Decompressor() if encoding == "br" and brotli is not None else None

    def _start(self, data: bytes):
        if self.encoding == "deflate":  # with its zlib header (RFC 9110) or without (what some clients send)
            wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            return zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        return zlib.decompressobj(16 + zlib.MAX_WBITS)

    def pieces(self, data: bytes) -> Iterator[bytes]:
        self.fed = self.fed or bool(data)
        if self._brotli is not None:
            piece = self._brotli.process(data, output_buffer_limit=INFLATE_PIECE)
            yield piece
            # output may be held back after a piece even where it says it takes more input
            while piece or not self._brotli.can_accept_more_data():
                piece = self._brotli.process(b"", output_buffer_limit=INFLATE_PIECE)
                yield piece
            return
        if self._zlib is None and self.encoding == "deflate" and len(self._first) + len(data) < 2:
            self._first += data
            return
        data, self._first = self._first + data, b""
        while data:
            if self._zlib is not None and self._zlib.eof and data[:1] != b"\x1f":
                return  # what follows the last gzip member (padding) is not read
            if self._zlib is None or self._zlib.eof:
                self._zlib = self._start(data)  # the first member, or the next of a gzip body's members
            yield self._zlib.decompress(data, INFLATE_PIECE)
            data = self._zlib.unconsumed_tail or self._zlib.unused_data
            if self._zlib.eof and self.encoding == "deflate":
                return  # what follows a deflate stream's end is not read

    def finished(self) -> bool:
        if self._brotli is not None:
            return self._brotli.is_finished()
        return self._zlib is not None and self._zlib.eof
