"""The scripted model: a JSON script of replies, served as an OpenAI- and Anthropic-compatible
HTTP server on loopback.

It sits low, below ``agentkit.env``, because it serves two layers: ``--model
scripted:FILE`` (``agentkit.env`` serves the script for the length of a run)
and the test kit. Its public names are :mod:`agentkit.testing.model_server`,
:mod:`agentkit.testing.script` and :mod:`agentkit.testing.tokens`.
"""
