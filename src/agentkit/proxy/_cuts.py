"""A recorded answer's long texts, cut to what agentkit's own harnesses keep of a reply.

agentkit's chat client cuts a reply's texts to ``MAX_REPLY_CHARS`` (1,000,000
characters) before a harness sees them; the proxy records an answer's texts
no longer than that either (a calls file does not keep 64 MiB of one reply), and
says where it cut (``ModelCall.cuts``). The token ids are kept whole: they are
what the server sampled.
"""

from __future__ import annotations

from typing import Any

__all__ = ["cut_texts"]


def cut_texts(value: Any, limit: int) -> tuple[Any, list[dict[str, Any]]]:
    """``value`` (JSON data) with every string longer than ``limit`` characters cut to
    it (new containers only where something was cut), and the cuts made:
    ``{"field": "choices[0].message.content", "chars": <length before>}``."""
    cuts: list[dict[str, Any]] = []
    return _cut(value, limit, "", cuts), cuts


def _cut(value: Any, limit: int, where: str, cuts: list[dict[str, Any]]) -> Any:
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        cuts.append({"field": where or "(the answer)", "chars": len(value)})
        return value[:limit]
    if isinstance(value, dict):
        out = {
            k: _cut(v, limit, f"{where}.{k}" if where else str(k), cuts) for k, v in value.items()
        }
        same = all(out[k] is v for k, v in value.items())
        return value if same else out
    if isinstance(value, list):
        items = [_cut(v, limit, f"{where}[{i}]", cuts) for i, v in enumerate(value)]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value
