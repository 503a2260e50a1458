"""What a rollout's tokens cost: prices given by the user, or from ``genai-prices``.

The library finds the provider by the endpoint's URL (api.openai.com,
openrouter.ai...); behind a gateway it does not know, by the model's name.
A model served on this machine or a private network (a loopback or private
address) is not priced from the library: give ``--price`` for it.

``genai-prices`` (Pydantic's maintained price library) is imported only when a
model may have a price there; a model it does not know is remembered in a
small cache file (per genai-prices version and day), so runs against local
models never pay for importing it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs

from agentkit._errors import SpecError
from agentkit._usage import Usage

__all__ = ["Price", "Pricing", "resolve_pricing"]

_KINDS = ("input", "output", "cached_input")


class Pricing(Protocol):
    """Prices a model's tokens: ``cost(usage, model)`` in USD."""

    def cost(self, usage: Usage, model: str | None) -> float:
        """The cost of ``usage`` in USD."""
        ...

    def describe(self) -> dict[str, Any]:
        """Where the prices come from, as JSON (for the manifest)."""
        ...


@attrs.frozen(kw_only=True)
class Price:
    """Prices in USD per million tokens: for a local model, or to override the library's.

    ``cached_input`` (cache reads) defaults to ``input``. Reasoning tokens are
    billed as output tokens (servers count them in ``output_tokens``).
    """

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None

    def __attrs_post_init__(self) -> None:
        for kind in _KINDS:
            value = getattr(self, kind)
            if value is not None and (
                not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
            ):
                raise SpecError(
                    f"price {kind}: expected USD per million tokens >= 0, got {value!r}"
                )

    def cost(self, usage: Usage, model: str | None = None) -> float:
        """The cost of ``usage`` in USD."""
        cached = min(usage.cached_tokens, usage.input_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return (
            (usage.input_tokens - cached) * self.input
            + cached * cached_rate
            + usage.output_tokens * self.output
        ) / 1e6

    def describe(self) -> dict[str, Any]:
        """The prices as JSON."""
        return {
            "source": "given",
            "input": self.input,
            "output": self.output,
            "cached_input": self.cached_input,
        }

    @classmethod
    def parse(cls, value: Mapping[str, Any] | str, *, where: str = "price") -> Price:
        """A price from ``{"input": 0.15, "output": 0.6}`` or ``"input=0.15,output=0.6"``."""
        items: dict[str, Any]
        if isinstance(value, str):
            items = {}
            for part in value.split(","):
                name, sep, text = part.partition("=")
                if not sep:
                    raise SpecError(
                        f"{where} {value!r}: expected input=USD,output=USD[,cached_input=USD] "
                        "(USD per million tokens)"
                    )
                try:
                    items[name.strip().replace("-", "_")] = float(text)
                except ValueError:
                    raise SpecError(f"{where} {name.strip()}={text!r}: expected a number") from None
        elif isinstance(value, Mapping):
            items = {str(k).replace("-", "_"): v for k, v in value.items()}
        else:
            raise SpecError(f"{where}: expected a table of prices, got {type(value).__name__}")
        unknown = sorted(set(items) - set(_KINDS))
        if unknown:
            raise SpecError(
                f"{where}: unknown price {unknown[0]!r}; known: {', '.join(_KINDS)} "
                "(USD per million tokens)"
            )
        for name, number in items.items():
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise SpecError(f"{where} {name}: expected a number, got {number!r}")
        return cls(**{k: float(v) for k, v in items.items()})


class _Free(Price):
    """The built-in scripted model: every token is free."""

    def describe(self) -> dict[str, Any]:
        return {"source": "scripted", "input": 0.0, "output": 0.0, "cached_input": None}


class _LibraryPricing:
    """Prices from ``genai-prices`` for one model (and provider, by the endpoint's URL)."""

    def __init__(self, model: str, base_url: str | None, version: str) -> None:
        self.model = model
        self.base_url = base_url
        self.version = version

    def cost(self, usage: Usage, model: str | None = None) -> float:
        import genai_prices

        tokens = genai_prices.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=min(usage.cached_tokens, usage.input_tokens) or None,
        )
        ref = model or self.model
        try:
            result = genai_prices.calc_price(tokens, model_ref=ref, provider_api_url=self.base_url)
        except LookupError:
            if self.base_url is None or _served_nearby(self.base_url):
                raise  # a model served on this machine or network is not a provider's
            # a gateway or proxy the library does not know: the model's own name
            result = genai_prices.calc_price(tokens, model_ref=ref)
        return float(result.total_price)

    def describe(self) -> dict[str, Any]:
        return {"source": "genai-prices", "version": self.version, "model": self.model}


def _served_nearby(base_url: str) -> bool:
    """True when the endpoint is on this machine or a private network (by its address)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(base_url).hostname or ""
    if host == "localhost" or host.endswith(".localhost") or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "agentkit" / "unpriced-models.json"


def _library_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("genai-prices")
    except metadata.PackageNotFoundError:
        return None


def resolve_pricing(
    model: str | None, base_url: str | None, price: Price | None = None
) -> tuple[Pricing | None, str | None]:
    """The pricing of a run and, when there is none, a note saying how to give one."""
    if price is not None:
        return price, None
    if not model:
        return None, None
    if model.startswith("scripted:"):
        return _Free(), None  # the built-in scripted model costs nothing
    hint = f"no price known for model {model!r}; give one with --price input=USD,output=USD"
    version = _library_version()
    if version is None:
        return None, f"{hint} (or pip install genai-prices)"
    key = f"{version}|{time.strftime('%Y-%m-%d')}|{model}|{base_url or ''}"
    cache = _cache_file()
    try:
        known = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if key in known:
        return None, hint
    pricing = _LibraryPricing(model, base_url, version)
    try:
        pricing.cost(Usage(input_tokens=1, output_tokens=1))
    except LookupError:
        known = {k: v for k, v in known.items() if k.split("|", 2)[:2] == key.split("|", 2)[:2]}
        known[key] = True
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
            tmp.write_text(json.dumps(known), encoding="utf-8")
            os.replace(tmp, cache)
        except OSError:
            pass  # the cache only saves time
        return None, hint
    return pricing, None
