"""agentkit's test kit: a scripted model server (OpenAI, Anthropic), pytest fixtures
and conformance checks that taskset and harness plugins run against themselves.

Nothing here is imported by ``import agentkit``; pytest loads
:mod:`agentkit.testing.pytest_plugin` through the ``pytest11`` entry point.
"""
