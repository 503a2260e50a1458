"""agentkit's rollout service for Tinker and tinker-cookbook.

- :func:`trajectory_group`: a :class:`~agentkit.service.ServiceGroup` as
  tinker-cookbook's ``TrajectoryGroup``, which the cookbook's own
  ``compute_advantages`` and ``assemble_training_data`` turn into the ``Datum``s
  its RL step sends ``forward_backward``.
- :class:`SamplerFront`: an OpenAI-compatible chat-completions server over a
  token-in/token-out :class:`Sampler` (:class:`TinkerSampler`: Tinker's sampling
  client), for agents to call when the trainer samples tokens itself: the
  conversation rendered with the model's chat template, tool calls parsed back,
  the exact ids in the answer.

tinker and tinker-cookbook are imported where they are used.
"""

from __future__ import annotations

from agentkit_tinker._chat import assistant_message, render
from agentkit_tinker._cookbook import trajectory_group
from agentkit_tinker._front import SamplerFront
from agentkit_tinker._sampler import Sampled, Sampler, SamplingRequest, TinkerSampler

__all__ = [
    "Sampled",
    "Sampler",
    "SamplerFront",
    "SamplingRequest",
    "TinkerSampler",
    "assistant_message",
    "render",
    "trajectory_group",
]
