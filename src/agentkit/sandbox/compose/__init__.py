"""A task's compose file as both sandboxes read it first: the files it makes compose
read (``include``, ``extends``, ``label_file``, ``.env``), checked to stay inside the
task's folder, and its YAML, refused when its anchors expand past any sane size.

The docker sandbox checks it before any ``docker compose`` command; the local
sandbox reads its services from the documents found here.
"""

from agentkit.sandbox.compose._refs import (
    ComposeSources,
    ComposeTooLarge,
    load_yaml,
    read_compose_sources,
)

__all__ = ["ComposeSources", "ComposeTooLarge", "load_yaml", "read_compose_sources"]
