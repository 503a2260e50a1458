"""The files the local sandbox generates in its ``/etc``.

On the host's userland the sandbox's ``/etc`` is a tmpfs holding only what
is generated here: the accounts (root and nobody, nothing of the host's) and
the network files. On an image root the image's own ``/etc`` is kept and only
the network files are written over it. Each file is (path, text, mode);
bubblewrap reads a file's text from a pipe (:func:`data_fds`).
"""

from __future__ import annotations

import os

from agentkit.sandbox.local._slirp import RESOLV_CONF

__all__ = ["EtcFile", "account_files", "data_fds", "hosts", "net_files"]

#: (path in the sandbox, text, mode)
EtcFile = tuple[str, str, int]

_PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
_GROUP = "root:x:0:\nnogroup:x:65534:\n"
_SHADOW = "root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n"
_GSHADOW = "root:*::\nnogroup:*::\n"


def hosts(hosts_entry: str | None) -> str:
    """``/etc/hosts``: loopback names, and the model endpoint's host name when it has one."""
    text = "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n"
    if hosts_entry:
        text += f"127.0.0.1 {hosts_entry}\n"
    return text


def net_files(hosts_entry: str | None, *, slirp: bool) -> list[EtcFile]:
    """The network files: hosts, hostname, and resolv.conf when slirp4netns serves DNS."""
    files = [("/etc/hosts", hosts(hosts_entry), 0o644), ("/etc/hostname", "sandbox\n", 0o644)]
    if slirp:
        files.append(("/etc/resolv.conf", RESOLV_CONF, 0o644))
    return files


def account_files() -> list[EtcFile]:
    """The accounts on the host's userland: root and nobody only."""
    return [
        ("/etc/passwd", _PASSWD, 0o644),
        ("/etc/group", _GROUP, 0o644),
        ("/etc/shadow", _SHADOW, 0o640),
        ("/etc/gshadow", _GSHADOW, 0o640),
    ]


def data_fds(files: list[EtcFile]) -> list[tuple[int, str, int]]:
    """A pipe per file, already holding its text (small: fits the pipe buffer)."""
    out = []
    for dest, text, mode in files:
        r, w = os.pipe()
        try:
            os.write(w, text.encode())
        finally:
            os.close(w)
        out.append((r, dest, mode))
    return out
