"""The trainer's side of the rollout service's HTTP front, for a script run in another
process: :func:`client` is the source of ``call(method, path, body=None, key=None)``,
which sends ``body`` as JSON to ``url + path`` with ``token`` (globals the script sets
before it calls) and returns the status and the JSON answer; no answer at all is status
0 with the error, so that the test says what went wrong."""

from __future__ import annotations


def client(timeout: int) -> str:
    """``call``'s source, each request waiting at most ``timeout`` seconds (a hang guard)."""
    return rf"""
import json, sys, urllib.request, urllib.error

def call(method, path, body=None, key=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {{token if key is None else key}}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout={timeout}) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError as exc:  # no answer
        return 0, {{"error": repr(exc)}}
"""
