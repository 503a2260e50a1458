"""agentkit's pytest plugin, loaded through the ``pytest11`` entry point.

Fixtures:

- ``model_server``: a fresh :class:`~agentkit.testing.model_server.ScriptedModelServer`
  per test, serving from a background thread (so sync and async tests can
  use it). Its script comes from the ``@pytest.mark.model_script(...)``
  marker, or is set in the test with ``model_server.set_script(...)``; it
  answers any key until ``model_server.set_api_key(key)`` names the one key
  it accepts.
- ``model_server_factory``: ``model_server_factory(script, api_key=...)``
  starts another server; all are stopped at the end of the test.
- the sandbox fixtures of :mod:`agentkit.testing.sandbox_fixtures`, when that
  module is present.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    # deferred: aiohttp loads in the tests that use the server, not in every pytest run
    from agentkit.testing.model_server import ScriptedModelServer

__all__ = ["model_server", "model_server_factory"]


def pytest_configure(config: pytest.Config) -> None:
    """Declare the marker and register the sandbox fixtures when they exist."""
    config.addinivalue_line(
        "markers",
        "model_script(script): the script the model_server fixture starts with "
        "(a mapping in the documented format, a path to a JSON file, or reply text)",
    )
    import importlib

    try:
        sandbox_fixtures = importlib.import_module("agentkit.testing.sandbox_fixtures")
    except ImportError:
        return
    if not config.pluginmanager.is_registered(sandbox_fixtures):
        config.pluginmanager.register(sandbox_fixtures, "agentkit-sandbox-fixtures")


@pytest.fixture
def model_server(request: pytest.FixtureRequest) -> Iterator[ScriptedModelServer]:
    """A scripted model server on 127.0.0.1 (OpenAI, Anthropic), fresh for each test."""
    # deferred: aiohttp loads in the tests that use the server, not in every pytest run
    from agentkit.testing.model_server import ScriptedModelServer

    marker = request.node.get_closest_marker("model_script")
    script = marker.args[0] if marker is not None and marker.args else None
    with ScriptedModelServer(script) as server:
        yield server


@pytest.fixture
def model_server_factory() -> Iterator[Callable[..., ScriptedModelServer]]:
    """Start extra scripted servers: ``model_server_factory(script, port=0)``."""
    # deferred: aiohttp loads in the tests that use the server, not in every pytest run
    from agentkit.testing.model_server import ScriptedModelServer

    servers: list[ScriptedModelServer] = []

    def make(script: Any = None, **kwargs: Any) -> ScriptedModelServer:
        server = ScriptedModelServer(script, **kwargs).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()
