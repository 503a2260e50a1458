"""The scripted model server's stand-in tokenizer: deterministic and reversible.

Defined in :mod:`agentkit._scripted.tokens` (see there for the scheme).
:data:`END_OF_TURN` is the stand-in chat template's end-of-turn marker: the
last token of a completion whose turn ended (finish ``stop`` or
``tool_calls``), as a real template's (ChatML's ``<|im_end|>``) is in vLLM's ids.

>>> encode("hello")
[1751477356, 111]
"""

from __future__ import annotations

from agentkit._scripted.answer import END_OF_TURN
from agentkit._scripted.tokens import decode, encode, pieces

__all__ = ["END_OF_TURN", "decode", "encode", "pieces"]
