"""The attack and fault cases: agentkit used by an attacker or an unlucky operator.

Each test here plays one hostile or broken part and checks that agentkit
contains it and says so clearly:

- a hostile agent inside the sandbox (escapes, kernel knobs, huge outputs);
- hostile task files (symlinks out of the task, deep nesting, duplicate
  keys, values that are not what they claim to be);
- a hostile verifier (huge or sparse reward files, secrets echoed back);
- faults of the machine and the network (a model server that is down, slow
  or rate-limiting; a full disk; signals at any moment).

CI runs this directory twice: as root (the usual CI user) and as an
unprivileged user with a HOME of its own (``python3 -m nox -s security``),
because what is contained differs between the two. Tests that need root or
a tool that is missing skip with the reason, except under ``CI=true``, where
they fail (the repository's conftest.py): CI installs everything they need.
A test that needs root is marked ``needs_root``; it may skip in the
unprivileged run. See docs/security.md.
"""
