"""A task's compose file as both sandboxes read it first: the files it makes compose
read (``include``, ``extends``, ``label_file``, ``.env``), checked to stay inside the
task's folder, and its YAML, refused when its anchors expand past any sane size;
then those files merged into one project as compose merges them.

The docker sandbox checks it before any ``docker compose`` command; the local
sandbox runs its services from the merged project, and the Harbor plugin reads
the main service's working directory from it.
"""

from agentkit.sandbox.compose._merge import merge_sources
from agentkit.sandbox.compose._refs import (
    ComposeSources,
    ComposeTooLarge,
    load_yaml,
    read_compose_sources,
)

__all__ = [
    "ComposeSources",
    "ComposeTooLarge",
    "load_yaml",
    "merge_sources",
    "read_compose_sources",
]
