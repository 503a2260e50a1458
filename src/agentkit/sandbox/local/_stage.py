"""Starting a local sandbox on an image's root: bubblewrap builds a stage, the holder the rest.

bubblewrap 0.8 (Debian 12) cannot mount an overlay, so it only builds a
*stage*: the host's ``/usr`` (for the orchestrator's Python), the image root
(read-only), the rollout's directory, the host helper programs, the
sandbox's own ``/proc`` and ``/dev``. The *holder* then runs
:data:`STAGE_SCRIPT` there, with capabilities in the sandbox's user
namespace only:

1. as root, it makes the nested user namespace commands will run in: it maps
   uids/gids 0..65535 and nothing else, so host root (which the outer
   namespace maps for bubblewrap's own setup) is out of their reach even with
   ``CAP_SETUID``, and the namespaces they use (mount, network...) belong to
   the outer namespace, where they hold no capability;
2. it forbids creating user namespaces (``user.max_user_namespaces`` = 0),
   lets unprivileged ports and ping work in a private network namespace,
   makes ``/proc/sys`` read-only, and binds the model endpoint's listening
   socket inside (when asked);
3. it mounts an overlay: the image root below, the rollout's ``fs`` above
   (every write lands there, private to the rollout);
4. it moves into it (``pivot_root``; the stage is detached, never reachable
   again), grafts ``/proc``, ``/dev``, the helper programs and the read-only
   binds, and writes ``/etc/hosts``, ``/etc/hostname`` and the directories
   rollouts expect;
5. it drops every capability, says ``ready`` and waits on its lifeline (its
   standard input; see ``_bwrap.LIFELINE``): at EOF it kills everything.
"""

from __future__ import annotations

import marshal
import os
from collections.abc import Sequence
from pathlib import Path

import attrs

from agentkit.sandbox._reaper import OWNER_ENV
from agentkit.sandbox.local._bwrap import Tools, bwrap_start, host_usr_args

__all__ = ["DOCKER_CAPS", "STAGE", "STAGE_SCRIPT", "StagePlan", "stage_argv"]

#: Where the stage keeps its pieces (gone from view once the holder has moved).
STAGE = "/.agentkit-stage"
#: Docker's default capability set: what commands keep inside an image sandbox
#: (in its user namespace only; the namespaces they see are not theirs to change).
DOCKER_CAPS = (
    "audit_write",
    "chown",
    "dac_override",
    "fowner",
    "fsetid",
    "kill",
    "mknod",
    "net_bind_service",
    "net_raw",
    "setfcap",
    "setgid",
    "setpcap",
    "setuid",
    "sys_chroot",
)

STAGE_SCRIPT = r"""
# _signal and _socket, not signal and socket: those import enum, which takes
# milliseconds of every sandbox start.
import ctypes, marshal, os, _signal as signal, sys

cfg = marshal.loads(bytes.fromhex(sys.argv[1]))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH, O_CLOEXEC = 1, 0x8000, 0x1000, 0o2000000
MOVE_MOUNT_F_EMPTY_PATH, MOUNT_ATTR_RDONLY, MNT_DETACH, AT_FDCWD = 4, 1, 2, -100
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41,
                  "ppc64le": 203, "ppc64": 203, "s390x": 217, "i686": 217, "armv7l": 218}


def fail(what):
    err = ctypes.get_errno()
    raise OSError(err, what + ": " + os.strerror(err))


def b(s):
    return None if s is None else s.encode()


def mount(src, target, fstype, flags, data=None):
    if libc.mount(b(src), b(target), b(fstype), ctypes.c_ulong(flags), b(data)) != 0:
        fail("mount " + target)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


class MountAttr(ctypes.Structure):
    _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns", ctypes.c_uint64)]


def clone_tree(path, readonly):
    fd = libc.syscall(SYS_OPEN_TREE, AT_FDCWD, b(path), OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC)
    if fd < 0:
        fail("open_tree " + path)
    if readonly:
        attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
        if libc.syscall(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH | AT_RECURSIVE,
                        ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
            fail("mount_setattr " + path)
    return fd


def graft(fd, target, is_dir):
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    if libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, b(target), MOVE_MOUNT_F_EMPTY_PATH) != 0:
        fail("move_mount " + target)
    os.close(fd)


def drop_caps(last):
    for cap in range(last + 1):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
        fail("capset")
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        fail("no_new_privs")


stage = cfg["stage"]
last_cap = int(open("/proc/sys/kernel/cap_last_cap").read())
if os.getuid() or os.getgid():
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)

if cfg["nested"]:
    go_r, go_w = os.pipe()
    up_r, up_w = os.pipe()
    keeper = os.fork()
    if keeper == 0:
        try:
            os.close(go_w)
            os.close(up_r)
            if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
                fail("unshare")
            os.write(up_w, b"1")
            os.read(go_r, 1)
            drop_caps(last_cap)
            os.closerange(0, 1 << 16)
            while True:
                signal.pause()
        finally:
            os._exit(1)
    os.close(go_r)
    os.close(up_w)
    if os.read(up_r, 1) != b"1":
        raise OSError("the nested user namespace could not be made")
    for name in ("uid_map", "gid_map"):
        write("/proc/%d/%s" % (keeper, name), "0 0 %d\n" % cfg["id_count"])
    os.write(go_w, b"1")

if cfg["private_net"]:
    write("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0")
    write("/proc/sys/net/ipv4/ping_group_range", "0 %d" % (max(cfg["id_count"], 1) - 1))
write("/proc/sys/user/max_user_namespaces", "0")
keep = os.statvfs("/proc/sys").f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
mount("/proc/sys", "/proc/sys", None, MS_BIND | MS_REC)
mount(None, "/proc/sys", None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)

relay = cfg["relay"]
if relay:
    import array, _socket as socket

    family = socket.AF_INET6 if ":" in relay["host"] else socket.AF_INET
    lo = socket.socket(family, socket.SOCK_STREAM)
    lo.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lo.bind((relay["host"], relay["port"]))
    lo.listen(256)
    chan = socket.socket(fileno=relay["fd"])
    chan.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [lo.fileno()]))])
    chan.close()
    lo.close()

merged = stage + "/merged"
layers = "lowerdir=%s/lower,upperdir=%s/rw/fs,workdir=%s/rw/work,userxattr" % (stage, stage, stage)
try:
    mount("overlay", merged, "overlay", 0, layers + ",volatile")
except OSError:
    mount("overlay", merged, "overlay", 0, layers)

resolv = None
if os.path.exists(stage + "/resolv.conf"):
    resolv = open(stage + "/resolv.conf").read()
grafts = [(clone_tree("/proc", False), "/proc", True), (clone_tree("/dev", False), "/dev", True)]
for source, target in cfg["binds"]:
    grafts.append((clone_tree(source, True), target, os.path.isdir(source)))
for source, target, readonly in cfg["volumes"]:
    grafts.append((clone_tree(source, readonly), target, os.path.isdir(source)))

os.chdir(merged)
if libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], b".", b".") != 0:
    fail("pivot_root")
if libc.umount2(b".", MNT_DETACH) != 0:
    fail("umount the stage")
os.chdir("/")
for fd, target, is_dir in grafts:
    graft(fd, target, is_dir)
for target in cfg["tmpfs"]:
    os.makedirs(target, exist_ok=True)
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")

for path, mode in cfg["dirs"]:
    if not os.path.isdir(path):
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
files = cfg["files"] + ([["/etc/resolv.conf", resolv, 0o644]] if resolv is not None else [])
if not cfg["nested"] and os.path.isdir("/etc/apt/apt.conf.d"):
    # One uid only: apt cannot switch to _apt to download; it stays root.
    files.append(["/etc/apt/apt.conf.d/00agentkit-one-uid", 'APT::Sandbox::User "root";\n', 0o644])
for path, text, mode in files:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.islink(path):
        os.unlink(path)
    write(path, text)
    os.chmod(path, mode)

os.chdir(cfg["workdir"])
drop_caps(last_cap)
os.closerange(3, 1 << 16)
os.write(1, b"ready\n")
# The lifeline: standard input is a pipe whose only write end the orchestrator
# holds; at EOF (closed, or the orchestrator died) everything inside goes.
while os.read(0, 4096):
    pass
os.kill(-1, signal.SIGKILL)
"""


@attrs.frozen(kw_only=True)
class StagePlan:
    """What the holder does on the stage (see :data:`STAGE_SCRIPT`)."""

    #: uids/gids the nested user namespace maps (0: no nested namespace).
    nested_ids: int
    private_net: bool
    workdir: str
    #: (stage path, in-sandbox path) to graft read-only after the move.
    binds: Sequence[tuple[str, str]]
    #: directories to make when missing, with their mode.
    dirs: Sequence[tuple[str, int]]
    #: files to write: (path, text, mode).
    files: Sequence[tuple[str, str, int]]
    relay: dict[str, object] | None = None
    #: (stage path, in-sandbox path, read-only) to graft after the move: a compose
    #: service's volumes and bind mounts.
    volumes: Sequence[tuple[str, str, bool]] = ()
    #: in-sandbox paths to mount a tmpfs on (a compose service's ``tmpfs``).
    tmpfs: Sequence[str] = ()

    def encode(self) -> str:
        """The plan as the holder reads it (``marshal``, hex: no module to import there)."""
        return marshal.dumps(
            {
                "stage": STAGE,
                "nested": self.nested_ids > 0,
                "id_count": self.nested_ids,
                "private_net": self.private_net,
                "workdir": self.workdir,
                "binds": [list(b) for b in self.binds],
                "dirs": [list(d) for d in self.dirs],
                "files": [list(f) for f in self.files],
                "relay": self.relay,
                "volumes": [list(v) for v in self.volumes],
                "tmpfs": list(self.tmpfs),
            }
        ).hex()


def stage_argv(
    tools: Tools,
    *,
    python: str,
    python_prefix: str,
    rootfs: Path,
    rollout_dir: Path,
    share_net: bool,
    host_resolv: bool,
    host_files: Sequence[tuple[str, str]],
    ro_binds: Sequence[str],
    info_fd: int,
    userns_block_fd: int,
    plan: StagePlan,
    volumes: Sequence[str] = (),
    hostname: str = "sandbox",
) -> list[str]:
    """The bwrap command that builds the stage and runs the holder on it.

    ``share_net`` keeps the caller's network namespace (the host's, or a
    compose rollout's network holder's); ``host_resolv`` binds the host's
    ``/etc/resolv.conf`` for the holder to copy in (host network only).
    ``host_files`` are (host file, in-sandbox path) of the helper programs;
    ``ro_binds`` host paths seen read-only at the same path inside;
    ``volumes`` host paths put on the stage at ``STAGE/volumes/<i>`` (the
    plan's ``volumes`` graft them). The holder gets every capability, in the
    sandbox's user namespace only, and drops them all before it says ``ready``.
    """
    argv = [
        *bwrap_start(tools),
        "--cap-add", "ALL",
        "--unsetenv", OWNER_ENV,
        "--userns-block-fd", str(userns_block_fd),
    ]  # fmt: skip
    if share_net:
        argv.append("--share-net")
    argv += host_usr_args()
    if python_prefix:
        argv += ["--ro-bind", python_prefix, python_prefix]
    argv += [
        "--ro-bind", str(rootfs), f"{STAGE}/lower",
        "--bind", str(rollout_dir), f"{STAGE}/rw",
        "--dir", f"{STAGE}/merged",
    ]  # fmt: skip
    # Directories bubblewrap would make 0700 as host root, out of the sandbox's reach.
    for parent in sorted({os.path.dirname(inside) for _, inside in host_files}):
        argv += ["--perms", "0755", "--dir", f"{STAGE}/tools{parent}"]
    for source, inside in host_files:
        argv += ["--ro-bind", source, f"{STAGE}/tools{inside}"]
    for i, path in enumerate(ro_binds):
        argv += ["--ro-bind", path, f"{STAGE}/binds/{i}"]
    for i, path in enumerate(volumes):
        argv += ["--bind", path, f"{STAGE}/volumes/{i}"]
    if host_resolv and os.path.exists("/etc/resolv.conf"):
        argv += ["--ro-bind", "/etc/resolv.conf", f"{STAGE}/resolv.conf"]
    argv += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--perms", "1777",
        "--tmpfs", "/dev/shm",
        "--hostname", hostname,
        "--chdir", "/",
        "--info-fd", str(info_fd),
        "--",
        python, "-I", "-S", "-c", STAGE_SCRIPT, plan.encode(),
    ]  # fmt: skip
    return argv
