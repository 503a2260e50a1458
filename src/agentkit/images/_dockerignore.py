"""``.dockerignore`` patterns, matched as Docker matches them.

Each non-comment line is a pattern; ``!`` makes it an exception. Patterns
are cleaned (``./a/`` is ``a``) and rooted at the context (a leading ``/`` is
dropped). ``*`` matches within one path element, ``?`` one character,
``[...]`` a class, ``**`` any number of elements. A path is excluded when the
last pattern that matches it, or one of its parent directories, is not an
exception. The Dockerfile and ``.dockerignore`` are always sent (as the
Docker CLI does).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import attrs

__all__ = ["IgnoreRules", "parse_dockerignore", "read_dockerignore"]


def _to_regex(pattern: str) -> re.Pattern[str]:
    out = ["^"]
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    out.append("(?:.*/)?")
                    i += 1
                else:
                    out.append(".*")
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                if body.startswith("^"):
                    body = "!" + body[1:]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    out.append("$")
    return re.compile("".join(out))


@attrs.frozen
class _Rule:
    regex: re.Pattern[str]
    exception: bool


@attrs.frozen
class IgnoreRules:
    """Parsed ``.dockerignore`` rules; :meth:`excluded` says whether a path stays out."""

    rules: tuple[_Rule, ...] = ()
    always: frozenset[str] = frozenset()

    @property
    def has_exceptions(self) -> bool:
        """True when some rule re-includes paths (``!pattern``)."""
        return any(r.exception for r in self.rules)

    def excluded(self, rel: str) -> bool:
        """Whether context-relative ``rel`` (``/``-separated) is left out of the context."""
        if rel in self.always:
            return False
        parts = rel.split("/")
        result = False
        for rule in self.rules:
            matched = bool(rule.regex.match(rel))
            if not matched:
                # A pattern naming a parent directory excludes everything below it.
                for k in range(1, len(parts)):
                    if rule.regex.match("/".join(parts[:k])):
                        matched = True
                        break
            if matched:
                result = not rule.exception
        return result


def _clean(pattern: str) -> str:
    cleaned = posixpath.normpath(pattern).lstrip("/")
    return "" if cleaned == "." else cleaned


def parse_dockerignore(text: str, always: tuple[str, ...] = ()) -> IgnoreRules:
    """Rules from the text of a ``.dockerignore``; ``always`` are paths never excluded."""
    rules: list[_Rule] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        if exception:
            line = line[1:].strip()
        pattern = _clean(line)
        if not pattern:
            continue
        rules.append(_Rule(_to_regex(pattern), exception))
    return IgnoreRules(tuple(rules), frozenset(always))


def read_dockerignore(context: Path, always: tuple[str, ...] = ()) -> IgnoreRules:
    """The rules of ``context/.dockerignore`` (none when it does not exist)."""
    path = context / ".dockerignore"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return IgnoreRules(always=frozenset(always))
    return parse_dockerignore(text, (*always, ".dockerignore"))
