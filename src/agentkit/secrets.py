"""Secrets: what agentkit keeps out of everything it writes, and how a plugin adds to it.

One redactor covers a whole run (see docs/security.md): the run's API key,
the values of host environment variables whose names look secret
(:func:`looks_secret`), and every value registered with
:func:`register_secret` are replaced by :data:`MARKER` in every manifest,
event, log and kept file. A plugin that reads a secret the run does not know
about (a host variable a task template names, a platform key) registers it::

    from agentkit.secrets import register_secret

    register_secret(os.environ["MY_PLATFORM_KEY"])

Request headers whose names hold a credential word (:data:`SECRET_HEADER_WORDS`;
:func:`is_secret_header`) are secret too: :func:`public_headers` shows them
as ``***``. A value that looks like a key whatever its name
(:func:`looks_like_key`: a well-known key prefix, a long random-looking token,
or a known secret's value) is kept out of what a job writes. Request fields
(``-M``, ``sampling_args``) are shown and stored by :func:`public_fields`: a string
under a secret-looking name, or shaped like a key, is ``***``.
"""

from __future__ import annotations

from agentkit._context import SECRET_HEADER_WORDS, is_secret_header, public_headers
from agentkit._redact import (
    KEY_PREFIXES,
    MARKER,
    MIN_SECRET_LENGTH,
    SECRET_WORDS,
    looks_like_key,
    looks_secret,
    public_fields,
    register_secret,
    registered_secrets,
)

__all__ = [
    "KEY_PREFIXES",
    "MARKER",
    "MIN_SECRET_LENGTH",
    "SECRET_HEADER_WORDS",
    "SECRET_WORDS",
    "is_secret_header",
    "looks_like_key",
    "looks_secret",
    "public_fields",
    "public_headers",
    "register_secret",
    "registered_secrets",
]
