"""agentkit-opencode: the ``opencode`` harness, which drives the real opencode CLI.

>>> from agentkit_opencode import OpenCode
>>> result = await OpenCode(model="my-model").run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentkit_opencode._binary import (
        BINARY_ENV,
        OPENCODE_VERSION,
        OpenCodeBinary,
        find_opencode,
    )
    from agentkit_opencode.harness import OpenCode, prompt_of

#: Public names and the private module each one lives in, imported on first use.
_LAZY: dict[str, str] = {
    "BINARY_ENV": "agentkit_opencode._binary",
    "OPENCODE_VERSION": "agentkit_opencode._binary",
    "OpenCodeBinary": "agentkit_opencode._binary",
    "find_opencode": "agentkit_opencode._binary",
    "OpenCode": "agentkit_opencode.harness",
    "prompt_of": "agentkit_opencode.harness",
}

__all__ = [
    "BINARY_ENV",
    "OPENCODE_VERSION",
    "OpenCode",
    "OpenCodeBinary",
    "find_opencode",
    "prompt_of",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
