"""A loopback stand-in for the Fleet API endpoints the fleet-python SDK calls.

It implements exactly what a rollout uses, so the real SDK runs unmodified
against it (selected with ``FLEET_BASE_URL``):

- ``POST /v1/env/instances``: create an instance (a real bookings MCP server
  subprocess over streamable HTTP, on fresh databases); the response is the
  SDK's ``InstanceResponse`` with ``urls.root`` (MCP at ``root + "mcp"``) and
  ``urls.manager.api`` (the instance manager, below);
- ``GET /v1/env/instances/{id}`` and ``DELETE /v1/env/instances/{id}``;
- ``GET /v1/runner-auth/token``: 404 (no runner gate, which the SDK accepts);
- ``POST /instances/{id}/api/v1/env/execute_verifier_function``: the
  platform's verifier execution, run here in a separate process against the
  instance's seed and current databases with the Fleet SDK's own verifier
  classes (``fleet_platform_grader.py``), never with agentkit's verifier
  runner; the answer is the SDK's ``ExecuteFunctionResponse``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentkit_fleet.verification import snapshot_sqlite
from fleet_helpers import HttpBookings

GRADER = Path(__file__).with_name("fleet_platform_grader.py")


class FleetStandIn:
    """The stand-in server; ``base_url`` goes into ``FLEET_BASE_URL``."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.instances: dict[str, dict[str, Any]] = {}
        self.servers: dict[str, HttpBookings] = {}
        self.requests: list[tuple[str, str, bool]] = []  # method, path, authorized
        self.create_bodies: list[dict[str, Any]] = []
        self.verifier_calls: list[dict[str, Any]] = []
        self._dir = Path(tempfile.mkdtemp(prefix="fleet-standin-"))
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"null")

            def _authorized(self) -> bool:
                return self.headers.get("Authorization") == f"Bearer {standin.api_key}"

            def _route(self, method: str) -> None:
                path = self.path.split("?", 1)[0]
                auth = self._authorized()
                standin.requests.append((method, path, auth))
                parts = [p for p in path.split("/") if p]
                if path == "/v1/runner-auth/token":
                    return self._send(404, {"detail": "no runner gate"})
                if parts[:3] == ["v1", "env", "instances"]:
                    if not auth:
                        return self._send(401, {"detail": "invalid API key"})
                    if method == "POST" and len(parts) == 3:
                        return self._send(200, standin.create(self._body(), self.server))
                    if len(parts) == 4 and parts[3] in standin.instances:
                        if method == "GET":
                            return self._send(200, standin.instances[parts[3]])
                        if method == "DELETE":
                            return self._send(200, standin.delete(parts[3]))
                    return self._send(404, {"detail": "no such instance"})
                if (
                    len(parts) == 6
                    and parts[0] == "instances"
                    and parts[5] == ("execute_verifier_function")
                ):
                    return self._send(200, standin.verify(parts[1], self._body()))
                return self._send(404, {"detail": f"no route {method} {path}"})

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_DELETE(self) -> None:
                self._route("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def create(self, body: dict[str, Any], _server: Any) -> dict[str, Any]:
        with self._lock:
            self.create_bodies.append(body)
            instance_id = f"inst-{len(self.create_bodies)}"
        directory = self._dir / instance_id
        directory.mkdir()
        server = HttpBookings(directory)
        self.servers[instance_id] = server
        root = server.url[: -len("mcp")]
        manager = f"{self.base_url}/instances/{instance_id}/api/v1/env"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ")
        instance = {
            "instance_id": instance_id,
            "env_key": body["env_key"],
            "version": body.get("env_version") or "v1",
            "status": "running",
            "subdomain": instance_id,
            "created_at": now,
            "updated_at": now,
            "team_id": "team-test",
            "region": body.get("region") or "local",
            "env_variables": body.get("env_variables"),
            "data_key": body.get("data_key"),
            "data_version": body.get("data_version"),
            "urls": {
                "root": root,
                "app": [root],
                "manager": {
                    "api": manager,
                    "docs": f"{manager}/docs",
                    "reset": f"{manager}/reset",
                    "diff": f"{manager}/diff",
                    "snapshot": f"{manager}/snapshot",
                    "execute_verifier_function": f"{manager}/execute_verifier_function",
                    "execute_verifier_function_with_upload": f"{manager}/execute_verifier_function_with_upload",  # noqa: E501
                },
            },
        }
        self.instances[instance_id] = instance
        return instance

    def delete(self, instance_id: str) -> dict[str, Any]:
        server = self.servers.pop(instance_id, None)
        if server is not None:
            server.stop()
        instance = dict(self.instances[instance_id], status="stopped")
        self.instances[instance_id] = instance
        return instance

    def verify(self, instance_id: str, body: dict[str, Any]) -> dict[str, Any]:
        self.verifier_calls.append(body)
        server = self.servers.get(instance_id)
        if server is None:
            return {"success": False, "error": "instance is not running", "message": "stopped"}
        work = Path(tempfile.mkdtemp(prefix="verify-", dir=self._dir))
        shutil.copyfile(server.seed, work / "seed.sqlite")
        snapshot_sqlite(server.current, work / "current.sqlite")
        proc = subprocess.run(
            [sys.executable, str(GRADER), str(work / "seed.sqlite"), str(work / "current.sqlite")],
            input=json.dumps(body),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            return {"success": False, "error": proc.stderr[-2000:], "message": "grader failed"}
        answer: dict[str, Any] = json.loads(proc.stdout)
        return answer

    def stop(self) -> None:
        for instance_id in list(self.servers):
            self.servers.pop(instance_id).stop()
        self.httpd.shutdown()
        self.httpd.server_close()
        shutil.rmtree(self._dir, ignore_errors=True)
