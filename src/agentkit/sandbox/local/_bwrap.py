"""The bubblewrap command lines: one long-lived holder per sandbox, and the
prefix that runs each command inside the holder's namespaces.

The holder owns the namespaces (user, mount, pid, network, ipc, uts, cgroup)
for the sandbox's whole life; every command enters them with ``nsenter`` and
drops every capability with ``setpriv`` before it runs. The parts of the argv
that depend only on the host (which /etc pieces exist, where /bin points) are
computed once per process.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from agentkit._errors import SandboxUnavailableError

__all__ = [
    "INSTALL_HINT",
    "LIFELINE",
    "Limits",
    "Tools",
    "bwrap_start",
    "exec_prefix",
    "find_tools",
    "holder_argv",
    "host_etc_args",
    "host_symlinks",
    "host_usr_args",
    "ro_bind_sources",
]

INSTALL_HINT = (
    "the local sandbox needs bubblewrap (bwrap): install it with "
    "`apt-get install bubblewrap` (Debian/Ubuntu), `dnf install bubblewrap` (Fedora) "
    "or `pacman -S bubblewrap` (Arch); or choose the unisolated host mode explicitly "
    "with `--sandbox host`"
)

#: What the holder runs once the sandbox is up: wait until its standard input,
#: a pipe whose only write end the orchestrator holds, reaches EOF, then kill
#: every process inside. The kernel closes that end when the orchestrator dies,
#: even by SIGKILL; once nothing else is left, bubblewrap (the pid namespace's
#: init) exits too. No parent-death signal race can leave a sandbox behind.
#: (``kill -1`` reaches every process the holder may signal: all of them, while
#: every process inside runs as the sandbox's one uid.)
LIFELINE = "while read -r _; do :; done; kill -KILL -1"

#: Host /etc entries shared read-only when they exist: TLS roots, the
#: alternatives symlinks that /usr/bin points through, the dynamic linker
#: cache, and what useradd and groupadd read. (Each is a mount on every
#: sandbox start: keep the list short.)
_ETC_RO = (
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/crypto-policies",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/mime.types",
    "/etc/gai.conf",
    "/etc/login.defs",
    "/etc/skel",
)
#: What the holder needs, briefly and inside the sandbox's user namespace only,
#: to become the sandbox's root before it drops them (see :func:`holder_argv`).
_BECOME_ROOT_CAPS = ("CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID")
#: Top-level directories that usrmerged hosts turn into symlinks into /usr.
_TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@attrs.frozen
class Tools:
    """Absolute paths of the host binaries the local sandbox runs."""

    bwrap: str
    nsenter: str
    setpriv: str
    prlimit: str | None


def find_tools(bwrap: str | None = None) -> Tools:
    """Locate bubblewrap and util-linux's nsenter/setpriv, or say how to install them."""
    return _find_tools(bwrap, os.environ.get("PATH", os.defpath))


@functools.lru_cache(maxsize=8)
def _find_tools(bwrap: str | None, path: str) -> Tools:
    """:func:`find_tools` once per PATH (every sandbox start would look them up)."""
    found = bwrap or shutil.which("bwrap", path=path)
    if not found or not os.access(found, os.X_OK):
        raise SandboxUnavailableError(INSTALL_HINT)
    nsenter, setpriv = shutil.which("nsenter", path=path), shutil.which("setpriv", path=path)
    if not nsenter or not setpriv:
        raise SandboxUnavailableError(
            "the local sandbox needs nsenter and setpriv from util-linux: "
            "install them with `apt-get install util-linux`"
        )
    prlimit = shutil.which("prlimit", path=path)
    # setpriv also runs inside, where the host's /usr is: name it by its real path.
    return Tools(
        found,
        nsenter,
        os.path.realpath(setpriv),
        os.path.realpath(prlimit) if prlimit else None,
    )


@functools.cache
def _host_static_args() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(/usr and the top-level links, the /etc pieces) as bwrap arguments."""
    base: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in _TOP_LEVEL:
        if os.path.islink(top):
            base += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            base += ["--ro-bind", top, top]
    etc: list[str] = []
    for path in _ETC_RO:
        if os.path.exists(path):
            etc += ["--ro-bind", path, path]
    for entry in sorted(Path("/etc").glob("python3*")):
        etc += ["--ro-bind", str(entry), str(entry)]
    return tuple(base), tuple(etc)


def host_usr_args() -> list[str]:
    """The host's ``/usr`` (and the top-level links into it) as bwrap arguments."""
    return list(_host_static_args()[0])


def host_etc_args() -> list[str]:
    """The host's ``/etc`` pieces every sandbox sees (TLS roots, the loader's cache...)
    as bwrap arguments, bound read-only at the same place."""
    return list(_host_static_args()[1])


def host_symlinks() -> list[str]:
    """The top-level links into ``/usr`` (``/bin``...) bubblewrap makes in the sandbox's root
    on the host's userland (it refuses to start where one is there already)."""
    args = _host_static_args()[0]
    return [args[i + 2] for i, a in enumerate(args) if a == "--symlink"]


def ro_bind_sources() -> list[str]:
    """Host paths every local sandbox sees read-only at the same place."""
    args = [a for part in _host_static_args() for a in part]
    return [args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"]


@attrs.frozen
class Limits:
    """Resource limits (setrlimit) applied to every command: None means unlimited."""

    max_processes: int | None = None
    max_memory_mb: int | None = None
    max_file_size_mb: int | None = None
    max_cpu_seconds: int | None = None
    max_open_files: int | None = None

    def prlimit_args(self) -> list[str]:
        mb = 1024 * 1024
        pairs = [
            ("--nproc", self.max_processes),
            ("--as", None if self.max_memory_mb is None else self.max_memory_mb * mb),
            ("--fsize", None if self.max_file_size_mb is None else self.max_file_size_mb * mb),
            ("--cpu", self.max_cpu_seconds),
            ("--nofile", self.max_open_files),
        ]
        return [f"{flag}={value}" for flag, value in pairs if value is not None]


def bwrap_start(tools: Tools) -> list[str]:
    """The start of each bwrap command of the local sandbox (the holder's, the image
    stage's): every namespace unshared, root inside its own user namespace, a new
    session.

    Not ``--die-with-parent``: its parent-death signal can kill bubblewrap's outer
    process while its child still waits to be released, which then waits forever.
    The holder's lifeline ends the sandbox instead.
    """
    return [
        tools.bwrap,
        "--unshare-all",
        "--unshare-user",
        "--uid", "0",
        "--gid", "0",
        "--new-session",
    ]  # fmt: skip


def holder_argv(
    tools: Tools,
    *,
    fs_root: Path,
    network: bool,
    ro_binds: Sequence[str],
    info_fd: int,
    holder: Sequence[str],
    etc_files: Sequence[tuple[int, str, int]] = (),
    cap_add: Sequence[str] = (),
    userns_block_fd: int | None = None,
    from_nobody: bool = False,
    chdir: str = "/",
) -> list[str]:
    """The bwrap command that creates the sandbox and keeps it alive with ``holder``.

    ``/etc`` is a tmpfs (its mount points cost no disk work): ``etc_files``
    are (fd to read, path, mode) written there, writable; the host's /etc pieces
    are bound read-only over it. With ``userns_block_fd`` bubblewrap waits
    (after reporting the pid on ``info_fd``) until the caller has written the
    user namespace's uid/gid maps itself and then written to that fd;
    ``from_nobody`` says those maps send host root (bubblewrap's setup) to
    nobody, which the holder leaves for the namespace's uid/gid 0. The
    holder starts in ``chdir``.

    ``holder`` runs as the sandbox's uid/gid 0 with no capabilities (but
    ``CAP_NET_BIND_SERVICE`` when ``cap_add`` asks for it). ``/proc/sys`` is
    read-only and ``/sys`` absent. The caller forbids user namespaces inside
    before it runs anything there (``LocalSandbox._forbid_user_namespaces``).
    """
    if from_nobody:
        # The caller maps host root to nobody, so bubblewrap's setup runs as
        # nobody inside: the holder leaves it for the sandbox's uid/gid 0
        # and drops every capability it may (bar CAP_NET_BIND_SERVICE if asked).
        caps = "-all,+net_bind_service" if "CAP_NET_BIND_SERVICE" in cap_add else "-all"
        cap_add = sorted({*cap_add, *_BECOME_ROOT_CAPS})
        holder = [
            tools.setpriv, "--reuid=0", "--regid=0", "--clear-groups",
            f"--inh-caps={caps}", f"--ambient-caps={caps}", f"--bounding-set={caps}",
            "--no-new-privs", "--",
            *holder,
        ]  # fmt: skip
    argv = [
        *bwrap_start(tools),
        "--cap-drop", "ALL",
        "--unsetenv", "AGENTKIT_SANDBOX_OWNER",
    ]  # fmt: skip
    if userns_block_fd is not None:
        argv += ["--userns-block-fd", str(userns_block_fd)]
    for cap in cap_add:
        argv += ["--cap-add", cap]
    if network:
        argv.append("--share-net")
    base, etc = _host_static_args()
    argv += ["--bind", str(fs_root), "/", *base, "--tmpfs", "/etc"]
    for fd, dest, mode in etc_files:
        argv += ["--perms", f"{mode:04o}", "--file", str(fd), dest]
    argv += etc
    if network and os.path.exists("/etc/resolv.conf"):
        argv += ["--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"]
    for path in ro_binds:
        argv += ["--ro-bind", path, path]
    argv += [
        "--proc", "/proc",
        # Read-only: the values stay the sandbox's own (sysctls are looked up
        # in the reader's namespaces), none can be written.
        "--ro-bind", "/proc/sys", "/proc/sys",
        "--dev", "/dev",
        "--perms", "1777",
        "--tmpfs", "/dev/shm",
        "--hostname", "sandbox",
        "--chdir", chdir,
        "--info-fd", str(info_fd),
        "--",
        *holder,
    ]  # fmt: skip
    return argv


def exec_prefix(
    tools: Tools,
    holder_pid: int,
    cwd: str,
    limits: Limits,
    *,
    become_root: bool = False,
    in_holder_cwd: bool = False,
    userns: str | None = None,
    helpers: Mapping[str, Sequence[str]] | None = None,
    keep_caps: Sequence[str] = (),
    user: tuple[int, int, Sequence[int]] | None = None,
) -> list[str]:
    """Run a command inside the holder's namespaces, in ``cwd``, with no capabilities.

    By default the command keeps the caller's credentials (the namespace maps
    them to uid 0). ``become_root`` makes nsenter switch to the namespace's
    uid/gid 0 (whatever host ids the map gives them) and drop supplementary
    groups, for a namespace whose map does not send uid 0 to the caller.
    ``in_holder_cwd`` says ``cwd`` is the holder's working directory: nsenter
    starts the command there itself (through ``/proc/PID/cwd``).

    For image sandboxes: ``userns`` is the user namespace to enter instead of
    the holder's (a path nsenter opens); ``helpers`` says how ``setpriv`` and
    ``env`` run inside (the host's copies, through their loader);
    ``keep_caps`` are the capabilities commands keep (in their user namespace
    only); ``user`` is (uid, gid, groups) to run as instead of root.
    """
    helpers = helpers or {"setpriv": [tools.setpriv], "env": ["/usr/bin/env"]}
    argv: list[str] = []
    rl = limits.prlimit_args()
    if rl:
        if tools.prlimit is None:
            raise SandboxUnavailableError(
                "resource limits need prlimit from util-linux: `apt-get install util-linux`"
            )
        argv += [tools.prlimit, *rl, "--"]
    caps = ",".join(["-all", *(f"+{c}" for c in keep_caps)])
    argv += [
        tools.nsenter,
        "-t", str(holder_pid),
        f"--user={userns}" if userns else "-U",
        "-m", "-n", "-p", "-i", "-u", "-C",
        *(() if become_root else ("--preserve-credentials",)),
        "--root",
        *(("--wd",) if in_holder_cwd else ()),
        "--",
        *helpers["setpriv"],
        "--inh-caps=-all",
        "--ambient-caps=-all",
        f"--bounding-set={caps}",
        "--no-new-privs",
    ]  # fmt: skip
    if user is not None:
        uid, gid, groups = user
        argv += [f"--reuid={uid}", f"--regid={gid}"]
        argv += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    argv.append("--")
    if not in_holder_cwd:
        # nsenter's --wd=DIR opens DIR on the host side: change it inside instead.
        argv += [*helpers["env"], "-C", cwd, "--"]
    return argv
