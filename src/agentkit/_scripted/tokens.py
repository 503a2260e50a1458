"""The scripted model server's stand-in tokenizer: deterministic and reversible.

A token is up to 4 bytes of UTF-8 cut at character boundaries (a NUL
character is a token of its own); its id is those bytes read as a big-endian
integer, so ``decode(encode(text)) == text`` for any text, and ASCII text of
``n`` characters has ``ceil(n / 4)`` tokens, as the server's usage estimate.
It is for tests of token-level plumbing (token ids, logprobs, loss masks);
it is not a real model's vocabulary.

>>> encode("hello")
[1751477356, 111]
>>> decode(encode("héllo wörld"))
'héllo wörld'
"""

from __future__ import annotations

__all__ = ["decode", "encode", "pieces"]

_WIDTH = 4


def pieces(text: str) -> list[str]:
    """The token strings of ``text``, in order; they join back to ``text``."""
    out: list[str] = []
    current = ""
    size = 0
    for char in text:
        width = len(char.encode("utf-8"))
        if current and (size + width > _WIDTH or char == "\0" or current == "\0"):
            out.append(current)
            current, size = "", 0
        current += char
        size += width
    if current:
        out.append(current)
    return out


def encode(text: str) -> list[int]:
    """The token ids of ``text``."""
    return [int.from_bytes(piece.encode("utf-8"), "big") for piece in pieces(text)]


def decode(ids: list[int]) -> str:
    """The text of token ids made by :func:`encode`."""
    return b"".join(i.to_bytes(max(1, (i.bit_length() + 7) // 8), "big") for i in ids).decode(
        "utf-8", errors="replace"
    )
