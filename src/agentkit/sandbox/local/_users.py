"""Who ``user=`` names inside an image: its ``/etc/passwd`` and ``/etc/group``.

``docker exec -u`` takes ``name``, ``uid``, ``name:group`` or ``uid:gid``;
names are looked up in the image's own files (as the command would see
them), never the host's.
"""

from __future__ import annotations

import attrs

from agentkit._errors import SandboxError

__all__ = ["User", "resolve_user"]


@attrs.frozen
class User:
    """A user inside the sandbox: ids, supplementary groups, name and home."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str
    home: str


def _table(text: str) -> list[list[str]]:
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def resolve_user(spec: str, passwd: str, group: str, *, max_id: int) -> User:
    """The user ``spec`` names, from the image's passwd and group texts.

    Raises :class:`SandboxError` for a name the image does not know, or an id
    above ``max_id`` (the sandbox maps ids 0..``max_id`` only).
    """
    name_part, _, group_part = spec.partition(":")
    users = _table(passwd)
    groups = _table(group)
    entry = next((u for u in users if len(u) >= 7 and u[0] == name_part), None)
    if entry is None and name_part.isdigit():
        entry = next((u for u in users if len(u) >= 7 and u[2] == name_part), None)
    if entry is not None:
        name, uid, gid, home = entry[0], int(entry[2]), int(entry[3]), entry[5] or "/"
    elif name_part.isdigit():
        name, uid, gid, home = name_part, int(name_part), 0, "/"
    else:
        raise SandboxError(f"user {spec!r}: no user {name_part!r} in the image's /etc/passwd")
    if group_part:
        found = next((g for g in groups if len(g) >= 3 and g[0] == group_part), None)
        if found is not None:
            gid = int(found[2])
        elif group_part.isdigit():
            gid = int(group_part)
        else:
            raise SandboxError(f"user {spec!r}: no group {group_part!r} in the image's /etc/group")
    extra = {gid}
    if not group_part:
        for g in groups:
            if len(g) >= 4 and name in g[3].split(","):
                extra.add(int(g[2]))
    ids = [uid, gid, *extra]
    if max(ids) > max_id:
        raise SandboxError(
            f"user {spec!r}: id {max(ids)} is beyond what this sandbox maps (0..{max_id})"
        )
    return User(uid=uid, gid=gid, groups=tuple(sorted(extra)), name=name, home=home)
