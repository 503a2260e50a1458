"""The stand-in platform's verifier execution, on Fleet's own terms.

    python fleet_platform_grader.py SEED CURRENT < request.json

``request.json`` is the body the fleet-python SDK posts to an instance's
``execute_verifier_function`` (``function_code``, ``function_name``). The code
is what the SDK sends: the verifier converted to Fleet's ``(before, after,
transcript)`` form. It runs with the Fleet SDK's own verifier classes and
helpers (``fleet.verifiers``) against the two SQLite files, never with
agentkit's verifier runner, and the answer is printed as the SDK's
``ExecuteFunctionResponse`` JSON: ``success``, ``result``, ``error``,
``message``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any


def grade(request: dict[str, Any], seed: str, current: str) -> dict[str, Any]:
    from fleet.verifiers import local_executor
    from fleet.verifiers.db import DatabaseSnapshot, IgnoreConfig, SnapshotDiff

    namespace: dict[str, Any] = {
        "TASK_SUCCESSFUL_SCORE": local_executor.TASK_SUCCESSFUL_SCORE,
        "TASK_FAILED_SCORE": local_executor.TASK_FAILED_SCORE,
        "normalized_contains": local_executor.normalized_contains,
        "normalized_string_comparison": local_executor.normalized_string_comparison,
        "extract_numbers": local_executor.extract_numbers,
        "contains_number": local_executor.contains_number,
        "DatabaseSnapshot": DatabaseSnapshot,
        "IgnoreConfig": IgnoreConfig,
        "SnapshotDiff": SnapshotDiff,
    }
    out = io.StringIO()
    try:
        exec("from typing import *\nimport json, re, string\n", namespace)
        with contextlib.redirect_stdout(out):
            exec(request["function_code"], namespace)
            function = namespace[request["function_name"]]
            result = function(DatabaseSnapshot(seed), DatabaseSnapshot(current), None)
    except Exception as exc:
        return {
            "success": False,
            "result": None,
            "error": f"{type(exc).__name__}: {exc}",
            "message": "Verifier execution failed",
        }
    return {
        "success": True,
        "result": result,
        "error": None,
        "message": "Verifier executed successfully",
    }


if __name__ == "__main__":
    print(json.dumps(grade(json.load(sys.stdin), sys.argv[1], sys.argv[2]), default=str))
