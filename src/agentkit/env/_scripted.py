"""``--model scripted:FILE``: the built-in scripted model, served in-process.

The scripted OpenAI-compatible server from :mod:`agentkit.testing` answers
from a JSON script (see docs/testing.md) on a loopback port for the length of
the run, so the examples run offline in one terminal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from agentkit._errors import SpecError

__all__ = ["SCRIPTED_PREFIX", "scripted_endpoint"]

#: ``--model scripted:FILE`` selects the built-in scripted model.
SCRIPTED_PREFIX = "scripted:"


def script_path(model: str) -> Path:
    """The script file of ``scripted:FILE``, checked to exist."""
    path = Path(model[len(SCRIPTED_PREFIX) :])
    if not path.is_file():
        raise SpecError(
            f"--model {model}: no script file {str(path)!r}; expected scripted:FILE with a "
            "JSON model script (see docs/testing.md)"
        )
    return path


@contextlib.contextmanager
def scripted_endpoint(model: str) -> Iterator[tuple[str, str]]:
    """Serve ``scripted:FILE``; yields the model name to send and the base URL."""
    # deferred: aiohttp (the scripted server) loads only for --model scripted:FILE
    from agentkit._scripted.server import ScriptedModelServer

    server = ScriptedModelServer(script_path(model))
    server.start()
    try:
        models = list(server.script.models or ())
        yield (models[0] if models else "scripted"), server.base_url
    finally:
        server.stop()
