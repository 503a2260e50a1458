"""The local sandbox on a task's image root: real bubblewrap, real images, no engine at run time.

Images are built from Dockerfiles (``examples/harbor-docker`` and
``tests/fixtures/harbor-image``, on the offline stand-in base images) by the
tool the sandbox finds, exported once into a cache shared by the session's
workers, and every rollout runs on its own overlay of that root.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.images._imageroot import prune_image_roots
from agentkit.sandbox import SandboxError
from agentkit.sandbox.local import LocalSandbox
from agentkit.testing.sandbox_fixtures import (
    host_pids_with_arg,
    need_slirp4netns,
    outward_address,
    requires_image_tool,
    unique_sleep_arg,
    wait_gone,
)

pytestmark = [pytest.mark.anyio, requires_image_tool, pytest.mark.xdist_group("image-roots")]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "harbor-docker"
FIXTURES = Path(__file__).parent / "fixtures" / "harbor-image"


def dockerfile_image(task_dir: Path) -> TaskImage:
    env = task_dir / "environment"
    return TaskImage(dockerfile=str(env / "Dockerfile"), context=str(env))


TOOLS = dockerfile_image(EXAMPLES / "tools-in-image")
SERVICE = dockerfile_image(EXAMPLES / "service-at-start")
APT = dockerfile_image(FIXTURES / "apt-private")
PYTHON = TaskImage(image="python:3.11-slim")
#: Uids other than root exist inside only when agentkit runs as root (a range is mapped).
as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="as an ordinary user an image sandbox maps one uid (root)"
)


@pytest.fixture
def on_image(sandbox_factory, image_cache: Path):
    """Start a local sandbox on ``image`` (hints and options as keywords)."""

    async def make(image: TaskImage, **kwargs: object) -> LocalSandbox:
        hint_keys = {"workdir", "env", "network", "paths", "ro_binds"}
        hints = ExecutionHints(image=image, **{k: v for k, v in kwargs.items() if k in hint_keys})
        options = {k: v for k, v in kwargs.items() if k not in hint_keys}
        box: LocalSandbox = await sandbox_factory(
            "local", hints=hints, image_cache=str(image_cache), **options
        )
        return box

    return make


def _entry(box: LocalSandbox) -> Path:
    assert box.image_root is not None
    return box.image_root.rootfs.parent


async def test_runs_on_the_images_root_with_its_env_and_workdir(on_image) -> None:
    box = await on_image(TOOLS, workdir="/srv/work")
    r = await box.exec(
        "pwd; id -u; echo $CURRENCY; jq -r '.items[0].name' /srv/data/prices.json; "
        "python3 -c 'import six; print(six.__version__)'; . /etc/os-release; echo $VERSION_CODENAME"
    )
    assert r.ok, r.stderr
    assert r.stdout.splitlines() == ["/srv/work", "0", "EUR", "tea", "1.16.0", "bookworm"]
    # The host's own files are not there: nothing of the host's userland but the
    # helper programs at /.agentkit.
    r = await box.exec(["sh", "-c", f"test -e {ROOT} || echo absent; ls /.agentkit"])
    assert r.stdout.split() == ["absent", "bin", "lib"]
    assert box.image_root is not None and box.image_root.config.workdir == "/srv/work"


async def test_writes_are_private_to_each_rollout_and_gone_at_close(on_image) -> None:
    first = await on_image(TOOLS)
    second = await on_image(TOOLS)
    rootfs = first.image_root.rootfs if first.image_root else Path("/")
    before = (rootfs / "etc" / "os-release").read_bytes()
    r = await first.exec(
        "echo mine > /usr/local/bin/marker && rm /etc/os-release && "
        "echo changed >> /srv/data/prices.json && mkdir -p /var/lib/mine"
    )
    assert r.ok, r.stderr
    r = await second.exec(
        "test -e /usr/local/bin/marker && echo leaked; cat /etc/os-release | head -1; "
        "tail -c 8 /srv/data/prices.json; test -d /var/lib/mine && echo leaked"
    )
    assert "leaked" not in r.stdout and "changed" not in r.stdout
    assert r.stdout.startswith('PRETTY_NAME="Debian')
    # The shared root is untouched; the first rollout's writes are in its own layer.
    assert (rootfs / "etc" / "os-release").read_bytes() == before
    assert not (rootfs / "usr" / "local" / "bin" / "marker").exists()
    assert (first.fs_root / "usr" / "local" / "bin" / "marker").read_text() == "mine\n"
    await first.close(remove=True)
    assert not first.root.exists()
    assert (await second.exec(["true"])).ok


async def test_apt_get_installs_privately_as_root_inside(on_image) -> None:
    first = await on_image(APT)
    second = await on_image(APT)
    r = await first.exec(
        "apt-get install -y --no-install-recommends /opt/pkgs/hello-agentkit_1.0_all.deb "
        ">/tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }; hello-agentkit"
    )
    assert r.ok, r.stdout + r.stderr
    assert r.stdout == "hello from a package\n"
    r = await second.exec("command -v hello-agentkit || echo missing")
    assert r.stdout == "missing\n"


@as_root
async def test_users_ownership_and_switching_users_work_as_in_a_container(on_image) -> None:
    first = await on_image(APT)
    second = await on_image(APT)
    r = await first.exec(
        "useradd -m -u 1234 agent && su agent -c 'id -u; touch ~/f' && "
        "stat -c '%U %u' /home/agent/f && chown agent:agent /opt/pkgs && stat -c %U /opt/pkgs"
    )
    assert r.ok, r.stderr
    assert r.stdout.split() == ["1234", "agent", "1234", "agent"]
    r = await second.exec("id agent || echo missing")
    assert r.stdout == "missing\n"


@as_root
async def test_commands_run_as_a_user_of_the_image(on_image) -> None:
    box = await on_image(PYTHON)
    r = await box.exec("id -un; echo $HOME $USER; touch /tmp/x && stat -c %U /tmp/x", user="nobody")
    assert r.ok, r.stderr
    assert r.stdout.split() == ["nobody", "/nonexistent", "nobody", "nobody"]
    r = await box.exec(["id", "-u"], user="4321")
    assert r.stdout == "4321\n"
    r = await box.exec("grep -E '^Cap(Eff|Prm)' /proc/self/status", user="nobody")
    assert all(line.endswith("0000000000000000") for line in r.stdout.splitlines())
    with pytest.raises(SandboxError, match="no user 'ghost'"):
        await box.exec(["true"], user="ghost")


async def test_the_images_entrypoint_starts_its_service(on_image) -> None:
    box = await on_image(SERVICE)
    fetch = (
        "import time, urllib.request\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        print(urllib.request.urlopen('http://127.0.0.1:8080/secret.txt').read()"
        ".decode().strip()); break\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
    )
    r = await box.exec(["python3", "-c", fetch])
    assert r.stdout == "open sesame\n", r.stderr


class _Server:
    """An HTTP server on the host's loopback (or ``address``) answering 'model'; closed
    (its thread ended, its listening socket closed) when its ``with`` block ends."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"model")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> _Server:
        return self

    def __exit__(self, *exc: object) -> None:
        # shutdown() only ends serve_forever: the listening socket stays open until
        # server_close() (a ResourceWarning when it is collected)
        self.httpd.shutdown()
        self._thread.join()
        self.httpd.server_close()


@pytest.fixture
def host_server() -> Iterator[_Server]:
    with _Server() as server:
        yield server


async def test_model_endpoint_reaches_inside_and_nothing_else(
    on_image, host_server: _Server, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "tool.txt").write_text("from the host\n")
    url = f"http://127.0.0.1:{host_server.port}/v1"
    box = await on_image(PYTHON, model_endpoint=url, ro_binds=[str(shared)])
    with _Server() as other:
        code = (
            "import sys, urllib.request\n"
            "for url in sys.argv[1:]:\n"
            "    try:\n"
            "        print(urllib.request.urlopen(url, timeout=5).read().decode())\n"
            "    except OSError as e:\n"
            "        print('error')\n"
        )
        r = await box.exec(["python3", "-c", code, url, f"http://127.0.0.1:{other.port}/"])
        assert r.stdout.split() == ["model", "error"], r.stderr
    r = await box.exec(f"cat {shared}/tool.txt; touch {shared}/new 2>/dev/null || echo read-only")
    assert r.stdout == "from the host\nread-only\n"


async def test_allowed_network_is_the_rollouts_own(on_image, host_server: _Server) -> None:
    """Network allowed: its own namespace through slirp4netns (as a container has):
    a service on port 80, outbound traffic, the model endpoint, not the host's loopback."""
    need_slirp4netns()
    address = outward_address()
    url = f"http://127.0.0.1:{host_server.port}/v1"
    box = await on_image(PYTHON, network=True, allow_network=True, model_endpoint=url)
    with _Server("0.0.0.0") as outward:
        await box.start("cd /srv && echo own > index.html && exec python3 -m http.server 80")
        code = (
            "import sys, time, urllib.request\n"
            "for url in sys.argv[1:]:\n"
            "    for _ in range(100):\n"
            "        try:\n"
            "            print(urllib.request.urlopen(url, timeout=5).read().decode().strip())\n"
            "            break\n"
            "        except OSError:\n"
            "            time.sleep(0.1)\n"
            "    else:\n"
            "        print('error')\n"
        )
        urls = ["http://127.0.0.1/", url, f"http://{address}:{outward.port}/"]
        r = await box.exec(["python3", "-c", code, *urls], timeout=60)
        assert r.stdout.split() == ["own", "model", "model"], r.stderr
        assert (await box.exec("cat /etc/resolv.conf")).stdout == "nameserver 10.0.2.3\n"


async def test_prune_removes_image_roots_no_sandbox_runs_on(
    sandbox_factory, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    hints = ExecutionHints(image=PYTHON)
    box = await sandbox_factory("local", hints=hints, image_cache=str(cache))
    entry = box.image_root.entry
    killed_export = cache / f".tmp-{entry.name}-0123abcd"
    (killed_export / "rootfs").mkdir(parents=True)
    report = prune_image_roots(cache)
    assert report.in_use == [(entry.name, box.image_root.reference)]
    assert report.removed == []
    assert entry.exists() and killed_export.exists()
    await box.close()
    # Used a moment ago: kept by an age limit (the killed export's leftover goes).
    report = prune_image_roots(cache, unused_for_sec=3600)
    assert [name for name, _, _ in report.removed] == [killed_export.name]
    assert entry.exists()
    report = prune_image_roots(cache)
    assert [(name, ref) for name, ref, _ in report.removed] == [(entry.name, "python:3.11-slim")]
    assert report.removed[0][2] > 1_000_000
    assert not entry.exists()
    # Exported again when a task needs it.
    again = await sandbox_factory("local", hints=hints, image_cache=str(cache))
    assert (await again.exec(["python3", "-c", "print(6 * 7)"])).stdout == "42\n"
    await again.close()
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "sandbox", "prune", "--image-roots",
         "--image-cache", str(cache)],
        capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "removed image root python:3.11-slim (" in proc.stdout
    assert f"MB freed in {cache}" in proc.stdout
    assert not entry.exists()


async def test_the_images_healthcheck_is_waited_for(on_image) -> None:
    box = await on_image(dockerfile_image(FIXTURES / "healthcheck"))
    assert box.image_root.config.healthcheck is not None
    # Setup returned once the check passed: the entrypoint's work is done.
    assert (await box.exec("test -f /tmp/ready && echo ready")).stdout == "ready\n"


async def test_an_image_that_never_turns_healthy_does_not_start(on_image) -> None:
    with pytest.raises(SandboxError, match=r"HEALTHCHECK failed \(2 time\(s\).*service down"):
        await on_image(dockerfile_image(FIXTURES / "unhealthy"))


async def test_uploads_and_downloads_see_the_image_and_the_rollouts_files(
    on_image, tmp_path: Path
) -> None:
    src = tmp_path / "tests"
    src.mkdir()
    (src / "test.sh").write_text("echo from-upload\n")
    box = await on_image(TOOLS, paths={"/srv/work": str(src)}, workdir="/srv/work")
    assert (await box.exec("bash test.sh")).stdout == "from-upload\n"
    await box.download("/srv/data/prices.json", tmp_path / "prices.json")
    assert json.loads((tmp_path / "prices.json").read_text())["items"]
    assert (await box.exec("echo 1 > /logs/verifier/reward.txt")).ok
    await box.download("/logs/verifier/reward.txt", tmp_path / "reward.txt")
    assert (tmp_path / "reward.txt").read_text() == "1\n"
    r = await box.exec("stat -c '%U %a' test.sh")
    assert r.stdout == "root 644\n"


async def test_the_root_is_exported_once_and_reused(on_image, image_cache: Path) -> None:
    first = await on_image(PYTHON)
    entry = _entry(first)
    # The exported root itself (image.json's time only says when it was last used).
    stamp = (entry / "rootfs").stat().st_ino, (entry / "rootfs").stat().st_ctime_ns
    await on_image(PYTHON)
    # Another process (a later run) finds it too.
    code = (
        "import asyncio, sys\n"
        "from agentkit._sandbox import ExecutionHints, TaskImage\n"
        "from agentkit.sandbox import open_sandbox\n"
        "async def main():\n"
        "    hints = ExecutionHints(image=TaskImage(image='python:3.11-slim'))\n"
        "    async with open_sandbox('local', hints=hints, image_cache=sys.argv[1]) as sb:\n"
        "        print((await sb.exec(['python3', '-c', 'print(6*7)'])).stdout.strip())\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(image_cache)], capture_output=True, text=True, timeout=300
    )
    assert done.stdout.strip() == "42", done.stderr
    assert ((entry / "rootfs").stat().st_ino, (entry / "rootfs").stat().st_ctime_ns) == stamp
    assert not list(image_cache.glob(f".tmp-{entry.name}-*"))  # others may be exporting


def test_concurrent_first_exports_make_one_root(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code = (
        "import asyncio, sys\n"
        "from agentkit._sandbox import ExecutionHints, TaskImage\n"
        "from agentkit.sandbox import open_sandbox\n"
        "async def main():\n"
        "    hints = ExecutionHints(image=TaskImage(image='python:3.11-slim'))\n"
        "    cache = sys.argv[1]\n"
        "    boxes = [open_sandbox('local', hints=hints, image_cache=cache) for _ in range(2)]\n"
        "    async def one(cm):\n"
        "        async with cm as sb:\n"
        "            return (await sb.exec(['python3', '-c', 'print(6*7)'])).stdout.strip()\n"
        "    print(*await asyncio.gather(*(one(b) for b in boxes)))\n"
        "asyncio.run(main())\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert out.split() == ["42", "42"], err
    entries = [p.name for p in cache.iterdir() if not p.name.endswith(".lock")]
    assert len(entries) == 1 and not entries[0].startswith(".tmp-"), entries


async def test_image_host_keeps_the_host_userland(sandbox_factory) -> None:
    hints = ExecutionHints(image=TOOLS, workdir="/srv/work")
    box = await sandbox_factory("local", hints=hints, image="host")
    r = await box.exec("test -e /srv/data/prices.json && echo image || echo host; pwd")
    assert r.stdout == "host\n/srv/work\n"
    assert box.image_root is None


async def test_what_a_compose_project_needs_a_daemon_for_is_refused_clearly(
    sandbox_factory, tmp_path: Path
) -> None:
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "docker-compose.yaml").write_text(
        "services:\n  main:\n    image: python:3.11-slim\n    privileged: true\n"
        "  side:\n    image: python:3.11-slim\n    network_mode: host\n"
    )
    image = TaskImage(compose_file=str(env / "docker-compose.yaml"))
    with pytest.raises(SandboxError) as caught:
        await sandbox_factory("local", hints=ExecutionHints(image=image))
    message = str(caught.value)
    assert "the local sandbox cannot run this compose file (use --sandbox docker" in message
    assert "service 'main': privileged: needs root on the host" in message
    assert "service 'side': network_mode: the host's network is not supported" in message


def _agentkit_run(
    *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, object]]]:
    out = Path(args[args.index("--out") + 1])
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", *args, "--json", "--max-retries", "0"],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        check=False,
    )
    records = {}
    if (out / "rollouts.jsonl").exists():
        for line in (out / "rollouts.jsonl").read_text().splitlines():
            r = json.loads(line)
            records[r["task_id"].split(":", 1)[1] + "#" + str(r["rollout_index"])] = r
    return proc, records


@pytest.fixture
def harbor() -> None:
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")


@pytest.mark.slow
@pytest.mark.usefixtures("harbor")
def test_oracle_and_nop_score_harbor_tasks_on_their_image_roots(
    tmp_path: Path, image_cache: Path
) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for src in [*(EXAMPLES / t for t in ("tools-in-image", "service-at-start", "two-steps"))]:
        (tasks / src.name).symlink_to(src)
    (tasks / "apt-private").symlink_to(FIXTURES / "apt-private")
    (tasks / "sidecar-api").symlink_to(EXAMPLES / "sidecar-api")
    cache = ["-S", f"image_cache={image_cache}"]
    proc, oracle = _agentkit_run(
        f"harbor:{tasks}", "oracle", "-n", "2", "--out", str(tmp_path / "oracle"), *cache
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rewards = {k: r["reward"] for k, r in oracle.items()}
    # (sidecar-api: a compose task, its sidecar a sandbox of its own)
    for task in ("tools-in-image", "service-at-start", "two-steps", "apt-private", "sidecar-api"):
        assert rewards[f"{task}#0"] == rewards[f"{task}#1"] == 1.0, oracle[f"{task}#0"]["error"]
    proc, nop = _agentkit_run(f"harbor:{tasks}", "nop", "--out", str(tmp_path / "nop"), *cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for task in ("tools-in-image", "service-at-start", "two-steps", "apt-private", "sidecar-api"):
        assert nop[f"{task}#0"]["reward"] == 0.0, nop[f"{task}#0"]


async def test_rollouts_wait_for_one_export(on_image) -> None:
    boxes = await asyncio.gather(*(on_image(PYTHON) for _ in range(3)))
    assert len({_entry(b) for b in boxes}) == 1
    results = await asyncio.gather(*(b.exec(["python3", "-c", "print(1)"]) for b in boxes))
    assert [r.stdout for r in results] == ["1\n"] * 3


def test_an_image_sandbox_dies_with_its_orchestrator(tmp_path: Path, image_cache: Path) -> None:
    arg = unique_sleep_arg()
    code = (
        "import asyncio, sys\n"
        "from agentkit._sandbox import ExecutionHints, TaskImage\n"
        "from agentkit.sandbox import open_sandbox\n"
        "async def main():\n"
        "    hints = ExecutionHints(image=TaskImage(image='python:3.11-slim'))\n"
        "    async with open_sandbox('local', hints=hints, image_cache=sys.argv[1],\n"
        "                            root=sys.argv[3]) as sb:\n"
        "        await sb.start(['sleep', sys.argv[2]])\n"
        "        print('ready', flush=True)\n"
        "        await asyncio.sleep(600)\n"
        "asyncio.run(main())\n"
    )
    # the with block closes the stdout pipe (wait() leaves it open: a ResourceWarning)
    with subprocess.Popen(
        [sys.executable, "-c", code, str(image_cache), arg, str(tmp_path / "rollout")],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            assert host_pids_with_arg(arg)
        finally:
            proc.kill()
    assert asyncio.run(wait_gone(arg, 30)) == []


@as_root
async def test_commands_cannot_switch_to_the_id_that_is_host_root_outside(on_image) -> None:
    """Host root is mapped (as 65536) only in the outer user namespace, for
    bubblewrap's own setup; commands, with CAP_SETUID, cannot reach it."""
    box = await on_image(PYTHON)
    code = (
        "import os\n"
        "print(open('/proc/self/uid_map').read().split())\n"
        "for uid in (65536, 65535):\n"
        "    try:\n"
        "        os.setresuid(uid, uid, uid)\n"
        "        print('switched', uid)\n"
        "        break\n"
        "    except OSError as e:\n"
        "        print('refused', uid, e.errno)\n"
    )
    r = await box.exec(["python3", "-c", code])
    assert r.ok, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "['0', '0', '65536']"
    assert lines[1] == "refused 65536 22"  # EINVAL: not mapped in the commands' namespace
    assert lines[2] == "switched 65535"  # an ordinary id of the range
