"""Keeping secrets out of everything agentkit writes: one redactor for the whole run.

What counts as a secret (each at least :data:`MIN_SECRET_LENGTH` characters;
shorter values are placeholders such as ``EMPTY`` that local servers accept,
and replacing them would rewrite ordinary words):

- the run's API key (the value of ``--api-key-env``);
- the value of every host environment variable whose name looks secret
  (:func:`looks_secret`: it contains ``key``, ``token``, ``secret``,
  ``password``, ``passwd`` or ``credential``);
- every value a plugin registers with :func:`register_secret`, such as the
  host values a Harbor task's ``${VAR}`` templates resolve to.

Each occurrence is replaced by :data:`MARKER`: in JSON values (keys too, so
the JSON stays valid), in free text, and in the files of a directory tree
(artifacts, kept sandbox files). See docs/security.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from agentkit._limits import dumps_finite

__all__ = [
    "KEY_PREFIXES",
    "MARKER",
    "MIN_SECRET_LENGTH",
    "SECRET_WORDS",
    "Redactor",
    "environment_secrets",
    "looks_like_key",
    "looks_secret",
    "public_fields",
    "public_url",
    "register_secret",
    "registered_secrets",
    "secret_values",
]

#: What a secret is replaced with.
MARKER = "***"

#: Values shorter than this are placeholders (``EMPTY``, ``dummy``, ``x``), not secrets.
MIN_SECRET_LENGTH = 8

#: A name containing one of these (any case) names a secret.
SECRET_WORDS: tuple[str, ...] = (
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "auth",
)

_CHUNK = 1 << 20
_log = logging.getLogger("agentkit")
_lock = threading.Lock()
_registered: set[str] = set()
_version = 0


def looks_secret(name: str) -> bool:
    """True when a variable or option name says it holds a secret (``*_env`` names a variable)."""
    lower = name.lower()
    return any(w in lower for w in SECRET_WORDS) and not lower.endswith("_env")


#: Prefixes of well-known API keys and tokens (OpenAI and Anthropic ``sk-``, Stripe,
#: GitHub, GitLab, Slack, Hugging Face, Google), compared as written.
KEY_PREFIXES: tuple[str, ...] = (
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxa-",
    "xoxb-",
    "xoxp-",
    "xoxr-",
    "xoxs-",
    "hf_",
    "AIza",
)

_TOKEN_RUN = re.compile(r"[A-Za-z0-9]{24,}")
_AWS_KEY_ID = re.compile(r"(?:AKIA|ASIA)[A-Z0-9]{16}")


def public_url(url: str | None) -> str | None:
    """``url`` without credentials: a password in it, and secret-looking query values, hidden."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}:***@{host}" if sep else f"***@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        hidden = [(k, MARKER if looks_secret(k) else v) for k, v in pairs]
        if hidden != pairs:
            query = urlencode(hidden, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def looks_like_key(value: str) -> bool:
    """True when a value looks like a key or token, whatever its name: the value of
    one of the host's secret-looking variables or a registered secret; a well-known
    key prefix (:data:`KEY_PREFIXES`) followed by at least 8 more characters, or an
    AWS access key id; or a run of 24 or more letters and digits mixing upper case,
    lower case and digits (what random keys look like, and hex digests, UUIDs, model
    names and words do not).

    A heuristic for values a user writes where a secret should not be (a job's
    matrix): a value shorter than :data:`MIN_SECRET_LENGTH` is never a key.
    """
    text = value.strip()
    if len(text) < MIN_SECRET_LENGTH:
        return False
    if any(text.startswith(p) and len(text) >= len(p) + 8 for p in KEY_PREFIXES):
        return True
    if _AWS_KEY_ID.search(text):
        return True
    for run in _TOKEN_RUN.findall(text):
        if (
            any(c.isupper() for c in run)
            and any(c.islower() for c in run)
            and any(c.isdigit() for c in run)
        ):
            return True
    return text in registered_secrets() or text in environment_secrets()


def public_fields(value: Any, name: str | None = None) -> Any:
    """Request fields (``-M KEY=VALUE``, a job's ``sampling_args``) as they are shown
    and stored: at any depth, a string under a secret-looking name (:func:`looks_secret`)
    and a string that looks like a key (:func:`looks_like_key`) are :data:`MARKER`;
    numbers, booleans and the other strings stay as they are (``max_tokens`` is a
    count, not a secret)."""
    if isinstance(value, Mapping):
        return {k: public_fields(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [public_fields(v, name) for v in value]
    if isinstance(value, str) and _hidden(name, value):
        return MARKER
    return value


def secret_values(value: Any, name: str | None = None) -> list[str]:
    """The strings :func:`public_fields` hides in ``value``: what a run's redactor keeps
    out of everything the run writes (the request bodies its model calls record)."""
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in secret_values(v, str(k))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in secret_values(v, name)]
    if isinstance(value, str) and _hidden(name, value):
        return [value]
    return []


def _hidden(name: str | None, value: str) -> bool:
    return (name is not None and looks_secret(name)) or looks_like_key(value)


def register_secret(value: str | None) -> None:
    """Add ``value`` to the secrets redacted from everything this process writes from now on."""
    global _version
    if value and len(value) >= MIN_SECRET_LENGTH and value not in _registered:
        with _lock:
            _registered.add(value)
            _version += 1


def registered_secrets() -> frozenset[str]:
    """The values registered with :func:`register_secret` so far."""
    with _lock:
        return frozenset(_registered)


def environment_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Values of the environment variables whose names look secret (long enough to be one)."""
    env = os.environ if environ is None else environ
    return {v for k, v in env.items() if looks_secret(k) and len(v) >= MIN_SECRET_LENGTH}


class Redactor:
    """Replaces secrets with :data:`MARKER` in text, JSON data and files.

    ``secrets`` are fixed at construction; with ``registered=True`` the values
    registered later with :func:`register_secret` count too.
    """

    def __init__(self, secrets: Iterable[str | None] = (), *, registered: bool = True) -> None:
        self._fixed = {s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}
        self._registered = registered
        self._seen_version = -1
        self._secrets: tuple[str, ...] = ()
        self._needles: tuple[str, ...] = ()
        self._refresh()

    @classmethod
    def for_run(
        cls,
        api_key: str | None,
        environ: Mapping[str, str] | None = None,
        *,
        extra: Iterable[str | None] = (),
    ) -> Redactor:
        """The run's redactor: its API key, secret-looking host variables, ``extra``
        (values of secret-looking request headers, say) and registered values."""
        return cls([api_key, *environment_secrets(environ), *extra])

    def _refresh(self) -> None:
        if self._seen_version == (_version if self._registered else 0):
            return
        found = set(self._fixed)
        version = 0
        if self._registered:
            with _lock:
                found |= _registered
                version = _version
        self._seen_version = version
        # longest first: a secret that contains another is replaced whole
        self._secrets = tuple(sorted(found, key=lambda s: (-len(s), s)))
        escaped = {json.dumps(s, ensure_ascii=False)[1:-1] for s in found}
        self._needles = tuple(sorted(found | escaped, key=lambda s: (-len(s), s)))

    @property
    def secrets(self) -> tuple[str, ...]:
        """The secrets now redacted, longest first."""
        self._refresh()
        return self._secrets

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MARKER)
        return text

    def json(self, data: Any) -> Any:
        """A copy of JSON data with every secret replaced in every string (keys too)."""
        if not self.secrets:
            return data
        return self._json(data)

    def _json(self, data: Any) -> Any:
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {self._json(k): self._json(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return [self._json(v) for v in data]
        return data

    def dumps(self, data: Any) -> str:
        """One compact JSON text of ``data``, redacted (fast when no secret occurs in it)."""
        text = _dumps(data)
        self._refresh()
        if any(needle in text for needle in self._needles):
            text = _dumps(self._json(json.loads(text)))
        return text

    def file(self, path: Path) -> bool:
        """Redact one regular file in place (never through a symlink); True if it changed.

        The file is read in chunks, so its size does not matter; a changed file
        is written beside it and renamed over it.
        """
        needles = [s.encode("utf-8") for s in self.secrets]
        if not needles:
            return False
        try:
            info = os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISREG(info.st_mode) or not _contains(path, needles):
            return False
        tmp = path.with_name(f".{path.name}.redacting")
        try:
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                _copy_replacing(src, dst, needles)
            os.chmod(tmp, stat.S_IMODE(info.st_mode))
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            _log.warning("agentkit: could not redact secrets from %s: %s", path, exc)
            return False
        return True

    def tree(self, root: Path) -> int:
        """Redact every regular file under ``root``, not following symlinks; how many changed."""
        if not self.secrets or not os.path.isdir(root):
            return 0
        changed = 0
        for directory, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
            for name in files:
                if self.file(Path(directory, name)):
                    changed += 1
        return changed


def _dumps(data: Any) -> str:
    return dumps_finite(data)  # strict JSON: never NaN or Infinity


def _contains(path: Path, needles: list[bytes]) -> bool:
    overlap = max(len(n) for n in needles) - 1
    tail = b""
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                buf = tail + chunk
                if any(n in buf for n in needles):
                    return True
                tail = buf[-overlap:] if overlap else b""
    except OSError:
        return False
    return False


def _copy_replacing(src: Any, dst: Any, needles: list[bytes]) -> None:
    """Copy ``src`` to ``dst`` with every needle replaced, holding back a chunk's tail
    that could be the start of a needle completed by the next chunk."""
    marker = MARKER.encode()
    overlap = max(len(n) for n in needles) - 1
    buf = b""
    while True:
        chunk = src.read(_CHUNK)
        buf += chunk
        if not chunk:
            dst.write(_replace_all(buf, needles, marker))
            return
        cut = max(0, len(buf) - overlap)
        for needle in needles:  # a needle that straddles the cut is kept whole
            start = buf.find(needle, max(0, cut - len(needle) + 1))
            if start != -1 and start < cut < start + len(needle):
                cut = start + len(needle)
        dst.write(_replace_all(buf[:cut], needles, marker))
        buf = buf[cut:]


def _replace_all(data: bytes, needles: list[bytes], marker: bytes) -> bytes:
    for needle in needles:
        data = data.replace(needle, marker)
    return data
