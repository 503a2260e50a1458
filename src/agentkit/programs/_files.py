"""Files an agent program needs in its sandbox: its executable, its configuration."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from agentkit._errors import HarnessError

if TYPE_CHECKING:
    from agentkit._events import EventRecorder
    from agentkit._sandbox import Sandbox
    from agentkit.programs._binary import ProgramBinary

__all__ = ["executable_in", "process_path", "read_text", "remove_staged", "write_text"]


async def executable_in(
    sandbox: Sandbox, binary: ProgramBinary, staged_path: str, recorder: EventRecorder
) -> tuple[str, bool]:
    """The path to run ``binary`` at inside ``sandbox``, and whether it was copied.

    A sandbox that shows ``binary.mount_dirs`` read-only (its ``ro_binds``)
    runs it in place; otherwise the executable is copied to ``staged_path``
    (a ``log`` event says so) and :func:`remove_staged` deletes it afterwards.
    """
    exe = str(binary.path)
    check = await sandbox.exec(["test", "-x", exe], timeout=60)
    if check.ok:
        return exe, False
    await recorder.emit(
        "log",
        level="info",
        message=f"{exe} is not visible in the sandbox; copying it to {staged_path} "
        f"(a sandbox with ro_binds={list(binary.mount_dirs)} avoids the copy)",
    )
    await sandbox.upload(binary.path, staged_path)
    check = await sandbox.exec(["chmod", "0755", staged_path], timeout=60)
    if not check.ok:
        raise HarnessError(
            f"cannot copy {exe} into the sandbox: {(check.stderr or check.stdout).strip()[-500:]}"
        )
    return staged_path, True


def process_path(sandbox: Sandbox, path: str) -> str:
    """``path`` inside ``sandbox`` as the program's process sees it: the same path,
    but the host sandbox, whose processes run on the host, maps it to the host
    directory that stands for it (its ``translate``). For paths given to the
    program (its options, its environment), not for :meth:`Sandbox.upload`."""
    translate = getattr(sandbox, "translate", None)
    return str(translate(path)) if callable(translate) else path


async def remove_staged(sandbox: Sandbox, staged_path: str) -> None:
    """Delete a copy made by :func:`executable_in` (even while being cancelled)."""
    import anyio

    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        await sandbox.exec(["rm", "-f", staged_path], timeout=30)


async def write_text(sandbox: Sandbox, path: str, text: str) -> None:
    """Write ``text`` to ``path`` inside ``sandbox`` (parents are made)."""
    with tempfile.TemporaryDirectory(prefix="agentkit-program-") as tmp:
        local = Path(tmp) / Path(path).name
        local.write_text(text, encoding="utf-8")
        await sandbox.upload(local, path)


async def read_text(sandbox: Sandbox, path: str, *, limit: int = 64 << 20) -> str | None:
    """The text of the file ``path`` inside ``sandbox``, or None when it cannot be read
    (missing, or larger than ``limit`` bytes)."""
    with tempfile.TemporaryDirectory(prefix="agentkit-program-") as tmp:
        local = Path(tmp) / "file"
        try:
            await sandbox.download(path, local)
        except Exception:
            return None
        if not local.is_file() or local.stat().st_size > limit:
            return None
        return local.read_text(encoding="utf-8", errors="replace")
