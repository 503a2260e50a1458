"""Names a package loads on first use: a module ``__getattr__`` for its lazy names."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["lazy_attribute"]


def lazy_attribute(
    package: str, names: Mapping[str, str], namespace: dict[str, Any], name: str
) -> Any:
    """The value of ``package``'s lazy attribute ``name``, imported from the module
    ``names`` gives for it and kept in the package's ``namespace`` (its ``globals()``),
    so the next look-up finds it there; an unknown name is an :class:`AttributeError`."""
    module = names.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
