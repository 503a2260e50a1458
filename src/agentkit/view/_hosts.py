"""Addresses the viewer listens on: loopback or not, and how they go in a URL."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback", "url_host"]


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (only this machine can connect)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """``host`` as it goes in a URL (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
