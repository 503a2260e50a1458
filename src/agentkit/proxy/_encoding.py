"""A body's ``Content-Encoding`` undone as it arrives, in pieces of bounded size.

The proxy reads an agent's request body and a server's answer decoded
(``gzip``, ``x-gzip``, ``deflate``), and counts its caps on the decoded bytes.
:class:`Decoder` hands the decoded bytes out at most :data:`PIECE` bytes at a
time, so a few hundred bytes that expand to gigabytes are never inflated past
what the caller takes before it stops reading. Any other encoding (or none) is
read as it came: :func:`decoder_for` returns None.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

__all__ = ["PIECE", "Decoder", "DecodingError", "decoder_for"]

#: The most decoded bytes :meth:`Decoder.feed` hands out at once.
PIECE = 256 * 1024

_ENCODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}


class DecodingError(ValueError):
    """A body's bytes are not in the encoding its ``Content-Encoding`` names."""


class Decoder:
    """Undoes one ``Content-Encoding`` (``gzip`` or ``deflate``) chunk by chunk.

    A ``deflate`` body is read as zlib's format, or as a raw deflate stream when it
    does not start with zlib's header (servers send both). Bytes after the end of the
    compressed stream are ignored.
    """

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._inflate: zlib._Decompress | None = None
        if encoding == "gzip":
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of ``data``, in pieces of at most :data:`PIECE` bytes;
        raises :class:`DecodingError`."""
        if not data:
            return
        inflate = self._inflate
        if inflate is None:  # deflate: zlib's header (CM = 8), or a raw stream
            wbits = zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS
            inflate = self._inflate = zlib.decompressobj(wbits)
        pending = data
        while not inflate.eof:
            try:
                out = inflate.decompress(pending, PIECE)
            except zlib.error as exc:
                raise DecodingError(f"the body is not valid {self.encoding} ({exc})") from None
            if out:
                yield out
            pending = inflate.unconsumed_tail
            if not pending and len(out) < PIECE:
                return

    def flush(self) -> bytes:
        """What is left once the body has ended (usually nothing)."""
        if self._inflate is None or self._inflate.eof:
            return b""
        try:
            return self._inflate.flush()
        except zlib.error as exc:
            raise DecodingError(f"the body is not valid {self.encoding} ({exc})") from None


def decoder_for(content_encoding: str | None) -> Decoder | None:
    """A decoder for ``content_encoding`` (a header's value), or None when the body is
    read as it came (no encoding, ``identity``, or one the proxy does not decode)."""
    if not content_encoding:
        return None
    encoding = _ENCODINGS.get(content_encoding.strip().lower())
    return None if encoding is None else Decoder(encoding)
