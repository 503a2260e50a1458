"""agentkit-codex: the ``codex`` harness, which drives the real Codex CLI (``@openai/codex``).

>>> from agentkit_codex import Codex
>>> result = await Codex(model="my-model").run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

from agentkit_codex._binary import BINARY_ENV, CODEX_VERSION, NPM_PACKAGE, find_codex
from agentkit_codex.harness import Codex

__all__ = ["BINARY_ENV", "CODEX_VERSION", "NPM_PACKAGE", "Codex", "find_codex"]
