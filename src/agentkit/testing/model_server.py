"""The scripted model server on loopback, for tests and manual runs (see docs/testing.md).

Defined in :mod:`agentkit._scripted.server` (below ``agentkit.env``, which
serves ``--model scripted:FILE`` with it).

From the command line: ``python -m agentkit.testing.model_server --script FILE --port N``.
"""

from __future__ import annotations

from agentkit._scripted.server import RecordedRequest, ScriptedModelServer, main

__all__ = ["RecordedRequest", "ScriptedModelServer", "main"]

if __name__ == "__main__":
    main()
