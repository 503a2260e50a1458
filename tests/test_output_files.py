"""Files the user names for a command's output (``agentkit export -o``, ``runs --compare
--out``, ``job show --out``): a regular file is replaced whole, a FIFO or a character
device is written in place and stays what it was, a symbolic link is followed, ``-`` is
standard output, and what cannot be written (a directory, a socket, a block device) is
refused with one message. Real commands on a real job's runs (docs/cli.md, "Output files").
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _stats_runs import make_example_job

from agentkit.training import ExportError, export_run

ROOT = Path(__file__).resolve().parents[1]

#: Each command that writes a file the user names: its arguments, the file last.
WRITERS = {
    "export": ("export", "{run}", "-o"),
    "runs --compare": ("runs", "--compare", "{run}", "{other}", "--format", "csv", "--out"),
    "job show": ("job", "show", "{job}", "--format", "csv", "--out"),
}


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real job (three cells run by ``agentkit run``), whose cells are the runs."""
    return make_example_job(tmp_path_factory.mktemp("output-files"))


def command(writer: str, job: Path, target: str | Path) -> list[str]:
    cells = job / "cells"
    given = {"run": cells / "example.chat.a", "other": cells / "example.chat.b", "job": job}
    args = [a.format(**{k: str(v) for k, v in given.items()}) for a in WRITERS[writer]]
    return [sys.executable, "-m", "agentkit", *args, str(target)]


def run(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, capture_output=True, timeout=120, cwd=ROOT, check=False)


@pytest.fixture(scope="module")
def expected(job: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """What each command writes into a new regular file."""
    out = {}
    folder = tmp_path_factory.mktemp("expected")
    for writer in WRITERS:
        target = folder / writer.replace(" ", "-")
        done = run(command(writer, job, target))
        assert done.returncode == 0, done.stderr
        out[writer] = target.read_bytes()
        assert out[writer]
    return out


@pytest.fixture
def reader() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Reader processes a test starts (``cat FIFO``), killed at its end if still there."""
    made: list[subprocess.Popen[bytes]] = []
    yield made
    for proc in made:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def device(path: Path, major: int, minor: int) -> Path:
    """A character device node at ``path`` (as root), so the real /dev is never touched."""
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root (CI runs the tests as root)")
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return path


@pytest.mark.parametrize("writer", WRITERS)
def test_a_fifo_is_written_in_place_for_its_reader(
    writer: str,
    job: Path,
    expected: dict[str, bytes],
    tmp_path: Path,
    reader: list[subprocess.Popen[bytes]],
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    cat = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    reader.append(cat)
    done = run(command(writer, job, fifo))
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode), "the FIFO was replaced"
    got, _ = cat.communicate(timeout=60)  # the writer closed it: cat has read everything
    assert got == expected[writer]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file left


@pytest.mark.parametrize("writer", WRITERS)
def test_a_character_device_stays_one(
    writer: str, job: Path, tmp_path: Path, expected: dict[str, bytes]
) -> None:
    null = device(tmp_path / "null", 1, 3)  # /dev/null's numbers
    done = run(command(writer, job, null))
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(null.lstat().st_mode), "/dev/null was replaced by a regular file"
    assert null.lstat().st_rdev == os.makedev(1, 3)
    # /dev/full: every write fails with ENOSPC; the error says so, the device stays
    full = device(tmp_path / "full", 1, 7)
    done = run(command(writer, job, full))
    assert done.returncode == 2, done.stdout
    err = done.stderr.decode()
    assert f"{full}: cannot write" in err and "No space left on device" in err, err
    assert "Traceback" not in err
    assert stat.S_ISCHR(full.lstat().st_mode) and full.lstat().st_rdev == os.makedev(1, 7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "null"]


@pytest.mark.parametrize("writer", WRITERS)
def test_a_symbolic_link_is_followed_and_stays_a_link(
    writer: str,
    job: Path,
    tmp_path: Path,
    expected: dict[str, bytes],
    reader: list[subprocess.Popen[bytes]],
) -> None:
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "board"
    target.write_bytes(b"old contents\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    done = run(command(writer, job, link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == expected[writer]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["board"]
    # a link to nothing yet: the file is made where it points
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "data" / "new")
    done = run(command(writer, job, dangling))
    assert done.returncode == 0, done.stderr
    assert dangling.is_symlink() and (tmp_path / "data" / "new").read_bytes() == expected[writer]
    # a link to a FIFO: the FIFO is written in place
    fifo = tmp_path / "data" / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "to-pipe").symlink_to(fifo)
    cat = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    reader.append(cat)
    done = run(command(writer, job, tmp_path / "to-pipe"))
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert cat.communicate(timeout=60)[0] == expected[writer]


@pytest.mark.parametrize("writer", WRITERS)
def test_a_regular_file_is_replaced_whole(
    writer: str, job: Path, tmp_path: Path, expected: dict[str, bytes]
) -> None:
    """A new file renamed over the old one: another name of the old file (a hard link)
    keeps the old contents, which a write in place would have changed."""
    target = tmp_path / "board"
    target.write_bytes(b"old contents\n")
    os.link(target, tmp_path / "old")
    done = run(command(writer, job, target))
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == expected[writer]
    assert (tmp_path / "old").read_bytes() == b"old contents\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["board", "old"]


@pytest.mark.parametrize("writer", WRITERS)
def test_dash_is_standard_output(writer: str, job: Path, expected: dict[str, bytes]) -> None:
    done = run(command(writer, job, "-"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected[writer]  # only the output: what it says goes to stderr
    assert b"standard output" in done.stderr
    assert not (ROOT / "-").exists()


@pytest.mark.parametrize("writer", WRITERS)
def test_what_cannot_be_written_is_refused_naming_it(
    writer: str, job: Path, tmp_path: Path
) -> None:
    sock_path = tmp_path / "sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    try:
        done = run(command(writer, job, sock_path))
    finally:
        listener.close()
    assert done.returncode == 2, done.stdout
    err = done.stderr.decode()
    assert f"{sock_path}: cannot write" in err and "it is a socket" in err, err
    assert stat.S_ISSOCK(sock_path.lstat().st_mode)
    if os.geteuid() == 0:
        disk = tmp_path / "disk"
        os.mknod(disk, 0o600 | stat.S_IFBLK, os.makedev(7, 200))  # a loop device's numbers
        done = run(command(writer, job, disk))
        assert done.returncode == 2, done.stdout
        assert f"{disk}: cannot write" in done.stderr.decode()
        assert "block device" in done.stderr.decode()
        assert stat.S_ISBLK(disk.lstat().st_mode)
    (tmp_path / "dir").mkdir()
    done = run(command(writer, job, tmp_path / "dir"))
    assert done.returncode == 2 and "dir" in done.stderr.decode()
    assert "Traceback" not in done.stderr.decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["sock", "dir", *(["disk"] if os.geteuid() == 0 else [])]
    )


def test_the_library_call_follows_the_same_rules(job: Path, tmp_path: Path) -> None:
    """``export_run`` (the Python API) writes through the same rules as the command."""
    sock_path = tmp_path / "sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    try:
        with pytest.raises(ExportError, match="it is a socket"):
            export_run(job / "cells" / "example.chat.a", sock_path)
    finally:
        listener.close()
    null = device(tmp_path / "null", 1, 3)
    summary = export_run(job / "cells" / "example.chat.a", null, format="parquet")
    assert summary.written == 10 and stat.S_ISCHR(null.lstat().st_mode)
