"""``${VAR}`` and ``${VAR:-default}`` in task.toml env tables, as Harbor resolves them.

Only a value that is *entirely* one template is resolved (Harbor's rule);
anything else is a literal. Resolution happens when a command runs, from the
host environment at that moment, never when the task is loaded. A value taken
from the host is registered as a secret: it is redacted from everything
agentkit writes (run directory, events, artifacts), whatever the variable's name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from agentkit.secrets import register_secret
from agentkit_harbor._errors import HarborTaskError

__all__ = ["is_template", "resolve_env", "template_variables"]

_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")


def is_template(value: str) -> bool:
    """True when ``value`` is exactly ``${VAR}`` or ``${VAR:-default}``."""
    return _TEMPLATE.fullmatch(value) is not None


def template_variables(env: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The host variables ``env`` reads: ``(name, default or None)`` for each template."""
    out = []
    for value in env.values():
        m = _TEMPLATE.fullmatch(value)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def resolve_env(
    env: Mapping[str, str],
    *,
    source: str = "task.toml",
    field: str = "env",
    host: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Resolve templates against ``host`` (``os.environ`` by default).

    A ``${VAR}`` whose variable is unset and has no default is an error that
    names the file, the field and the variable.
    """
    host_env = os.environ if host is None else host
    out: dict[str, str] = {}
    for key, value in env.items():
        m = _TEMPLATE.fullmatch(value)
        if m is None:
            out[key] = value
            continue
        name, default = m.group(1), m.group(2)
        if name in host_env:
            out[key] = host_env[name]
            register_secret(host_env[name])
        elif default is not None:
            out[key] = default
        else:
            raise HarborTaskError(
                f"{source}: {field}.{key}: environment variable {name!r} is not set on the "
                f"host and has no default (write ${{{name}:-default}} to give one)"
            )
    return out
