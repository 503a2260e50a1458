"""The docker sandbox: a container per rollout, from the task's image.

:class:`DockerSandbox` is the sandbox, :class:`DockerOptions` its options;
the modules beside them are its private parts: the container, its commands
and files (``_core``), the engine check and the leftovers' prune
(``_engine``), the container's description (``_container``), compose
projects (``_compose``), a command's process (``_process``), files through
the engine's archives (``_files``), what the host sees in the container's
cgroup (``_cgroup``) and the model endpoint's listener in the container's
network (``_netns``). See ``docs/sandboxes.md``.
"""

from __future__ import annotations

from agentkit.sandbox.docker._core import HOST_DIRS, LOG_DIRS
from agentkit.sandbox.docker._options import DEFAULT_IMAGE, DockerKeywords, DockerOptions
from agentkit.sandbox.docker._sandbox import DockerSandbox

__all__ = [
    "DEFAULT_IMAGE",
    "HOST_DIRS",
    "LOG_DIRS",
    "DockerKeywords",
    "DockerOptions",
    "DockerSandbox",
]
