"""agentkit-codex: the ``codex`` harness, which drives the real Codex CLI (``@openai/codex``).

>>> from agentkit_codex import Codex
>>> result = await Codex(model="my-model").run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentkit_codex._binary import BINARY_ENV, CODEX_VERSION, NPM_PACKAGE, find_codex
    from agentkit_codex.harness import Codex

#: Public names and the private module each one lives in, imported on first use.
_LAZY: dict[str, str] = {
    "BINARY_ENV": "agentkit_codex._binary",
    "CODEX_VERSION": "agentkit_codex._binary",
    "NPM_PACKAGE": "agentkit_codex._binary",
    "find_codex": "agentkit_codex._binary",
    "Codex": "agentkit_codex.harness",
}

__all__ = ["BINARY_ENV", "CODEX_VERSION", "NPM_PACKAGE", "Codex", "find_codex"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
