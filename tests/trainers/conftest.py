"""tests/trainers: the trainers' own packages load agentkit's exports.

Collected only by the ``trainers`` nox session (``AGENTKIT_TRAINERS=1``), which
installs the pinned skyrl, skyrl-gym, tinker, tinker-cookbook, verifiers and
renderers (see ``TRAINER_PINS`` in noxfile.py).
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path

import typing_extensions

# the helpers of tests/ (the calls records, a real run that carries them)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# skyrl 0.3.0 says it runs on Python 3.11, but skyrl/tinker/types.py (imported by
# every skyrl.train module through skyrl.backends) puts a typing.TypedDict in a
# pydantic model, which pydantic refuses before Python 3.12 (on 3.12 the two are the
# same class). This machine has 3.11 only: give skyrl typing_extensions' TypedDict.
if sys.version_info < (3, 12):
    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]
