"""The scripted model server's stand-in tokenizer: deterministic and reversible.

Defined in :mod:`agentkit._scripted.tokens` (see there for the scheme).

>>> encode("hello")
[1751477356, 111]
"""

from __future__ import annotations

from agentkit._scripted.tokens import decode, encode, pieces

__all__ = ["decode", "encode", "pieces"]
