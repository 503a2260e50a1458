"""The local sandbox: bubblewrap namespaces around a per-rollout root.

:class:`LocalSandbox` is the sandbox, :class:`LocalOptions` its options; the
modules beside them are its private parts: its state and commands
(``_core``), its start (``_lifecycle``), the bubblewrap command lines
(``_bwrap``, ``_stage``), the network (``_slirp``), the files it writes in
``/etc`` (``_etcfiles``), users and host ids (``_users``, ``_hostid``), the
host's tools (``_hosttools``), pausing for a fork (``_freeze``), the task
images it runs on (``_image``; :func:`import_image` imports an image archive for
them, with no engine), and a compose task's services: its file read
(``_composefile``), the rollout's network holder (``_netholder``) and its
services up and down (``_composeup``), and the Buildah working containers its
image exports leave behind (``_leftovers``: :func:`prune_image_exports`, which
``agentkit sandbox prune`` runs). See ``docs/sandboxes.md``.
"""

from __future__ import annotations

from agentkit.sandbox.local._image import import_image
from agentkit.sandbox.local._leftovers import ImageExportPrune, prune_image_exports
from agentkit.sandbox.local._options import LocalKeywords, LocalOptions
from agentkit.sandbox.local._sandbox import LocalSandbox

__all__ = [
    "ImageExportPrune",
    "LocalKeywords",
    "LocalOptions",
    "LocalSandbox",
    "import_image",
    "prune_image_exports",
]
