"""Moving files in and out of a sandbox, and running logged commands, through the protocol only.

Everything here uses :class:`agentkit.Sandbox`'s ``exec``, ``upload`` and
``download`` with file paths, so it behaves the same on every sandbox kind
(directories are walked file by file; parents are made with ``mkdir -p``).

Both directions are guarded:

* **into** a sandbox (:func:`upload_tree`), a task's files are copied only
  from inside the task directory: a symlink that resolves outside it is an
  error naming the file, never followed; links inside it are copied as the
  files they point to;
* **out of** a sandbox, whatever a hostile agent or verifier left there is
  read within a size cap: :func:`read_capped` reads at most ``cap + 1``
  bytes (never more, whatever the file claims to be), and
  :func:`download_tree` lists sizes first, refuses sparse files (they would
  become real disk on the host), truncates a file over its cap to the cap,
  stops at a total budget, and records every such decision in
  :attr:`TreeCopy.skipped`.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import os
import shlex
import stat
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from agentkit import EventRecorder, ExecResult, Sandbox
from agentkit_harbor._errors import HarborTaskError

__all__ = [
    "ARTIFACTS_TOTAL_MAX_BYTES",
    "ARTIFACT_FILE_MAX_BYTES",
    "REWARD_FILE_MAX_BYTES",
    "SPARSE_SLACK_BYTES",
    "VERIFIER_FILE_MAX_BYTES",
    "VERIFIER_TOTAL_MAX_BYTES",
    "CappedRead",
    "TreeCopy",
    "download_tree",
    "exec_logged",
    "list_sandbox_files",
    "read_capped",
    "read_small_files",
    "rollout_dir_of",
    "tail",
    "upload_tree",
]

_MIB = 1024 * 1024

#: ``reward.json`` / ``reward.txt``: larger is a grading error (``reward_file_too_large``).
REWARD_FILE_MAX_BYTES = 1 * _MIB
#: Each other file of ``/logs/verifier``: larger is kept truncated, with a note.
VERIFIER_FILE_MAX_BYTES = 16 * _MIB
#: All of ``/logs/verifier`` for one verifier run: files past it are not copied (noted).
VERIFIER_TOTAL_MAX_BYTES = 64 * _MIB
#: Each artifact file: larger is kept truncated, with a note in ``manifest.json``.
ARTIFACT_FILE_MAX_BYTES = 64 * _MIB
#: All artifacts of one collection (a task, or one step): files past it are not copied (noted).
ARTIFACTS_TOTAL_MAX_BYTES = 256 * _MIB
#: A file whose size exceeds the disk it uses by more than this is sparse: it is refused.
SPARSE_SLACK_BYTES = 1 * _MIB

_TAIL = 4000
_KINDS = {"l": "a symlink", "p": "a FIFO", "s": "a socket", "c": "a device", "b": "a device"}
_CHUNK = 1 * _MIB  # dd block size: pieces start at multiples of it
_BATCH = 4 * _MIB  # bytes asked for in one piece (and about one exec)
_END = "#agentkit-end"


def tail(text: str, limit: int = _TAIL) -> str:
    """The last ``limit`` characters of ``text`` (marked when cut)."""
    if len(text) <= limit:
        return text
    return "[...]\n" + text[-limit:]


async def exec_logged(
    sandbox: Sandbox,
    cmd: str | list[str],
    *,
    recorder: EventRecorder | None = None,
    purpose: str,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    user: str | int | None = None,
) -> ExecResult:
    """Run ``cmd`` and emit one ``sandbox.exec`` event describing it (never the env values)."""
    start = time.monotonic()
    kwargs: dict[str, Any] = {}
    if cwd is not None:
        kwargs["cwd"] = cwd
    if env is not None:
        kwargs["env"] = dict(env)
    if timeout is not None:
        kwargs["timeout"] = timeout
    note = None
    if user is not None and str(user) not in ("root", "0"):
        kwargs["user"] = str(user)
    try:
        result = await sandbox.exec(cmd, **kwargs)
    except Exception as exc:
        # Sandboxes that run everything as one user (the local bubblewrap one
        # runs as root) refuse other users: run as the sandbox's user instead.
        if "user" not in kwargs or "user" not in str(exc):
            raise
        del kwargs["user"]
        note = f"this sandbox cannot run commands as user {user!r}; ran as its default user"
        result = await sandbox.exec(cmd, **kwargs)
    if recorder is not None:
        await recorder.emit(
            "sandbox.exec",
            purpose=purpose,
            command=cmd if isinstance(cmd, str) else shlex.join(cmd),
            cwd=cwd,
            env_keys=sorted(env) if env else [],
            user=None if user is None else str(user),
            timeout=timeout,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_sec=round(time.monotonic() - start, 3),
            stdout=tail(result.stdout, 2000),
            stderr=tail(result.stderr, 2000),
            **({"note": note} if note else {}),
        )
    return result


# ---------------------------------------------------------------------------
# Into the sandbox


def _upload_plan(src: Path, root: Path) -> list[tuple[Path, PurePosixPath]]:
    """(host file to read, path below ``src``) for each file; no link may leave ``root``."""
    root = root.resolve()
    plan: list[tuple[Path, PurePosixPath]] = []

    def visit(path: Path, rel: PurePosixPath, ancestors: frozenset[Path]) -> None:
        resolved = path.resolve()
        if not resolved.is_relative_to(root):
            raise HarborTaskError(
                f"{path} is a symlink that resolves outside the task directory {root} "
                f"(to {resolved}); it is never copied into a sandbox"
            )
        try:
            st = os.stat(resolved)
        except FileNotFoundError:
            return  # a dangling link inside the task: nothing to copy
        if stat.S_ISDIR(st.st_mode):
            if resolved in ancestors:
                raise HarborTaskError(f"{path} is a directory link that loops back on itself")
            for child in sorted(os.listdir(path)):
                visit(path / child, rel / child, ancestors | {resolved})
        elif stat.S_ISREG(st.st_mode):
            plan.append((resolved, rel))
        else:
            raise HarborTaskError(f"{path} is not a regular file or directory; cannot copy it")

    visit(src, PurePosixPath(), frozenset())
    return plan


async def upload_tree(sandbox: Sandbox, src: Path, dst: str, *, root: Path | None = None) -> int:
    """Copy the files under host directory ``src`` into ``dst`` (merging); returns the count.

    ``root`` (default ``src``) is the directory nothing may leave: a symlink
    that resolves outside it raises :class:`HarborTaskError` naming it, and
    the link is never followed. Links that stay inside are copied as the
    files they point to.
    """
    plan = _upload_plan(src, root if root is not None else src)
    base = PurePosixPath(dst)
    dirs = {str(base / rel.parent) for _, rel in plan}
    dirs.add(dst)
    mk = await sandbox.exec(["mkdir", "-p", *sorted(dirs)])
    if not mk.ok:
        raise OSError(f"mkdir -p {dst} failed in the sandbox: {mk.stderr.strip() or mk.stdout}")
    for host_file, rel in plan:
        await sandbox.upload(host_file, str(base / rel))
    return len(plan)


# ---------------------------------------------------------------------------
# Out of the sandbox
#
# Every byte comes back through ``exec`` (``dd | head -c N | base64``), never
# through an unbounded ``download``: at most the bytes asked for reach this
# process, whatever the file is, becomes while it is read, or whatever a
# replaced ``base64`` in the sandbox prints (the decoded data is cut to N).


@attrs.frozen(kw_only=True)
class CappedRead:
    """The first bytes of a sandbox file: ``data`` (at most the cap) and whether there was more."""

    data: bytes
    over_cap: bool


@attrs.frozen
class _Piece:
    path: str
    offset: int  # a multiple of _CHUNK
    nbytes: int


_READ_SCRIPT = (
    'while [ "$#" -ge 3 ]; do '
    'if [ -f "$1" ]; then dd if="$1" bs=' + str(_CHUNK) + ' skip="$(($2 / ' + str(_CHUNK) + '))" '
    '2>/dev/null | head -c "$3" | base64; echo "#agentkit-file ok"; '
    'elif [ -e "$1" ] || [ -L "$1" ]; then echo "#agentkit-file special"; '
    'else echo "#agentkit-file missing"; fi; shift 3; done; echo "' + _END + '"'
)


async def _exec_as_root(sandbox: Sandbox, cmd: list[str], timeout: float) -> ExecResult:
    """Run a read-back command as root, so files are read whoever wrote them (as ``docker cp``).

    A sandbox that runs everything as one user runs it as that user.
    """
    try:
        return await sandbox.exec(cmd, user="root", timeout=timeout)
    except Exception as exc:
        if "user" not in str(exc):
            raise
        return await sandbox.exec(cmd, timeout=timeout)


async def _read_pieces(sandbox: Sandbox, pieces: list[_Piece]) -> list[bytes | str]:
    """The bytes of each piece, or ``"missing"`` / ``"special"`` (not a regular file)."""
    args: list[str] = []
    for p in pieces:
        args += [p.path, str(p.offset), str(p.nbytes)]
    res = await _exec_as_root(sandbox, ["bash", "-c", _READ_SCRIPT, "read", *args], 300)
    lines = res.stdout.split("\n")
    while lines and not lines[-1]:
        lines.pop()
    if not res.ok or not lines or lines[-1] != _END:
        why = "timed out" if res.timed_out else (res.stderr.strip()[-300:] or "output cut short")
        raise OSError(f"could not read {pieces[0].path} from the sandbox: {why}")
    out: list[bytes | str] = []
    buf: list[str] = []
    for line in lines[:-1]:
        if not line.startswith("#agentkit-file "):
            buf.append(line)
            continue
        status = line.split(" ", 1)[1]
        if status == "ok":
            try:
                data = base64.b64decode("".join(buf), validate=False)
            except (binascii.Error, ValueError) as exc:
                raise OSError(f"could not decode a file read from the sandbox: {exc}") from None
            out.append(data[: pieces[len(out)].nbytes] if len(out) < len(pieces) else b"")
        else:
            out.append(status)
        buf = []
    if len(out) != len(pieces):
        raise OSError(f"could not read {pieces[0].path} from the sandbox: incomplete output")
    return out


async def read_small_files(
    sandbox: Sandbox, paths: list[str], cap: int
) -> list[CappedRead | str | None]:
    """:func:`read_capped` on several small files in one command (``cap`` up to 4 MiB).

    Each answer is a :class:`CappedRead`, None (no such file) or
    ``"special"`` (not a regular file).
    """
    if cap + 1 > _BATCH:
        raise ValueError(f"read_small_files reads at most {_BATCH - 1} bytes a file")
    got = await _read_pieces(sandbox, [_Piece(p, 0, cap + 1) for p in paths])
    out: list[CappedRead | str | None] = []
    for data in got:
        if isinstance(data, bytes):
            out.append(CappedRead(data=data[:cap], over_cap=len(data) > cap))
        else:
            out.append(None if data == "missing" else data)
    return out


async def read_capped(sandbox: Sandbox, path: str, cap: int) -> CappedRead | None:
    """At most ``cap`` bytes of sandbox file ``path`` (None when it does not exist).

    Reads ``cap + 1`` bytes at most, so a 2 GiB (or endless) file costs no
    more memory than the cap; ``over_cap`` says the file is larger. A path
    that exists but is not a regular file raises :class:`OSError`.
    """
    want = cap + 1
    chunks: list[bytes] = []
    got = 0
    while got < want:
        n = min(_BATCH, want - got)
        (data,) = await _read_pieces(sandbox, [_Piece(path, got, n)])
        if isinstance(data, str):
            if got == 0 and data == "missing":
                return None
            if got == 0:
                raise OSError(f"{path} is not a regular file")
            break
        chunks.append(data)
        got += len(data)
        if len(data) < n:
            break
    blob = b"".join(chunks)
    return CappedRead(data=blob[:cap], over_cap=len(blob) > cap)


@attrs.frozen(kw_only=True)
class _Listed:
    rel: str
    kind: str  # find's %y: f (regular), l (symlink), p (FIFO), s, c, b
    size: int
    disk: int


_LIST_SCRIPT = r"""
root=$1
if [ -d "$root" ]; then cd "$root" || exit 5; set -- . ; pre=1
elif [ -f "$root" ]; then set -- "$root"; pre=0
else exit 3; fi
if find "$1" -maxdepth 0 -printf '' 2>/dev/null; then
  if [ $pre = 1 ]; then find . ! -type d -printf '%y %s %b %P\0'
  else find -H "$1" -maxdepth 0 -type f -printf 'f %s %b .\0'; fi
else
  find -H "$1" ! -type d -print0 | while IFS= read -r -d '' f; do
    if [ -L "$f" ] && [ $pre = 1 ]; then t=l; elif [ -f "$f" ]; then t=f; else t=o; fi
    s=$(stat -c '%s %b' -- "$f") || continue
    if [ $pre = 1 ]; then printf '%s %s %s\0' "$t" "$s" "${f#./}"; else printf 'f %s .\0' "$s"; fi
  done
fi
"""


def _safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return rel == "." or (not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts))


async def _list_sized(sandbox: Sandbox, root: str) -> list[_Listed] | None:
    res = await _exec_as_root(sandbox, ["bash", "-c", _LIST_SCRIPT, "list", root], 120)
    if res.exit_code == 3 or not res.ok:
        return None
    out: list[_Listed] = []
    for item in res.stdout.split("\0"):
        parts = item.split(" ", 3)
        if len(parts) != 4:
            continue
        kind, size, blocks, rel = parts
        if not size.isdigit() or not blocks.isdigit() or not _safe_rel(rel):
            continue
        out.append(_Listed(rel=rel, kind=kind, size=int(size), disk=int(blocks) * 512))
    return sorted(out, key=lambda e: e.rel)


async def list_sandbox_files(sandbox: Sandbox, root: str) -> list[str] | None:
    """Regular files under ``root`` in the sandbox (relative paths; ``.`` for a file), or None."""
    listed = await _list_sized(sandbox, root)
    return None if listed is None else [e.rel for e in listed if e.kind == "f"]


def _excluded(rel: str, patterns: Iterable[str]) -> bool:
    parts = rel.split("/")
    for pat in patterns:
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(rel, pat) or any(fnmatch.fnmatch(p, pat) for p in parts):
            return True
    return False


@attrs.define(kw_only=True)
class TreeCopy:
    """What :func:`download_tree` copied: file count, bytes, and every file it cut or left out.

    Each ``skipped`` entry is ``{"path", "size", "status"}``; the status
    starts with ``truncated``, ``refused`` or ``failed`` and says why.
    ``entries`` maps every path found (relative to the source) to ``ok`` or
    that status.
    """

    files: int = 0
    bytes: int = 0
    skipped: list[dict[str, Any]] = attrs.field(factory=list)
    entries: dict[str, str] = attrs.field(factory=dict)

    @property
    def notes(self) -> list[str]:
        """One readable line per file that was cut or left out."""
        return [f"{s['path']} ({s['size']} bytes): {s['status']}" for s in self.skipped]


def _fmt_size(n: int) -> str:
    return f"{n / _MIB:g} MiB" if n >= _MIB else f"{n} bytes"


@attrs.define
class _Job:
    where: str
    target: Path
    entry: _Listed
    nbytes: int
    written: int = 0
    failed: str | None = None


async def _fetch(sandbox: Sandbox, jobs: list[_Job]) -> None:
    """Write each job's first ``nbytes`` to its target, in batches of bounded size."""
    todo = deque((job, off) for job in jobs for off in range(0, max(job.nbytes, 1), _BATCH))
    while todo:
        batch: list[tuple[_Job, int]] = []
        size = 0
        while todo and len(batch) < 64:
            job, off = todo[0]
            piece = min(_BATCH, job.nbytes - off)
            if batch and size + piece > _BATCH:
                break
            todo.popleft()
            if job.failed is None:
                batch.append((job, off))
                size += piece
        if not batch:
            continue
        pieces = [_Piece(j.where, off, min(_BATCH, j.nbytes - off)) for j, off in batch]
        try:
            results = await _read_pieces(sandbox, pieces)
        except OSError as exc:
            for j, _ in batch:
                j.failed = str(exc)
            continue
        for (job, off), data in zip(batch, results, strict=True):
            if isinstance(data, str):
                job.failed = "it vanished" if data == "missing" else "not a regular file"
                continue
            job.target.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(job.target, flags | (os.O_TRUNC if off == 0 else 0), 0o644)
            try:
                os.lseek(fd, off, os.SEEK_SET)
                os.write(fd, data)
            finally:
                os.close(fd)
            job.written += len(data)


async def download_tree(
    sandbox: Sandbox,
    src: str,
    dst: Path,
    *,
    exclude: Iterable[str] = (),
    max_file_bytes: int = ARTIFACT_FILE_MAX_BYTES,
    max_total_bytes: int = ARTIFACTS_TOTAL_MAX_BYTES,
    budget: TreeCopy | None = None,
) -> TreeCopy | None:
    """Copy ``src`` (a file or directory in the sandbox) to host path ``dst``, within caps.

    Returns what was copied, or None when ``src`` does not exist.
    ``exclude`` holds glob patterns matched against relative paths and
    names. A sparse file is refused; a file over ``max_file_bytes`` is kept
    truncated to it; once ``max_total_bytes`` have been copied (counting
    ``budget``, an earlier copy sharing the same total, which is updated)
    the rest is refused. Every such file is listed in ``skipped``.
    """
    listed = await _list_sized(sandbox, src)
    if listed is None:
        return None
    patterns = list(exclude)
    report = TreeCopy()
    spent = budget.bytes if budget is not None else 0
    single = [e.rel for e in listed] == ["."]
    if not single:
        dst.mkdir(parents=True, exist_ok=True)
    jobs: list[_Job] = []
    for entry in listed:
        if single != (entry.rel == ".") or (not single and _excluded(entry.rel, patterns)):
            continue
        where = src if single else str(PurePosixPath(src) / entry.rel)
        status = None
        if entry.kind != "f":
            what = _KINDS.get(entry.kind, "a special file")
            status = f"refused: {what}, not a regular file"
        elif entry.size - entry.disk > SPARSE_SLACK_BYTES:
            status = f"refused: sparse, {_fmt_size(entry.disk)} on disk; it would become real disk"
        elif spent + min(entry.size, max_file_bytes) > max_total_bytes:
            status = f"refused: over the total cap of {_fmt_size(max_total_bytes)}"
        if status is not None:
            report.skipped.append({"path": where, "size": entry.size, "status": status})
            report.entries[entry.rel] = status
            continue
        nbytes = min(entry.size, max_file_bytes)
        spent += nbytes
        jobs.append(_Job(where, dst if single else dst / entry.rel, entry, nbytes))
    await _fetch(sandbox, jobs)
    for job in jobs:
        if job.failed is not None:
            status = f"failed: {job.failed}"
        elif job.entry.size > max_file_bytes:
            status = f"truncated to the first {_fmt_size(max_file_bytes)} (the cap per file)"
        else:
            status = None
        if job.failed is None:
            if job.written == 0 and not job.target.exists():
                job.target.parent.mkdir(parents=True, exist_ok=True)
                job.target.touch()
            report.files += 1
            report.bytes += job.written
        if status is not None:
            report.skipped.append({"path": job.where, "size": job.entry.size, "status": status})
        report.entries[job.entry.rel] = status or "ok"
    if budget is not None:
        budget.files += report.files
        budget.bytes += report.bytes
        budget.skipped.extend(report.skipped)
    return report


def rollout_dir_of(sandbox: Sandbox | None) -> Path | None:
    """The host directory of this rollout (the sandbox's ``root``), when the sandbox says."""
    for attr in ("rollout_dir", "root"):
        value = getattr(sandbox, attr, None)
        if isinstance(value, (str, Path)) and str(value):
            return Path(value)
    return None
