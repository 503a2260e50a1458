"""Costs: prices given for a local model, or looked up in genai-prices (offline data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkit import Price, SpecError, Usage
from agentkit._pricing import resolve_pricing


def test_given_prices_per_million_tokens() -> None:
    price = Price.parse("input=1.0,output=4.0,cached_input=0.5")
    usage = Usage(input_tokens=1_000_000, cached_tokens=400_000, output_tokens=250_000)
    assert price.cost(usage) == pytest.approx(0.6 + 0.2 + 1.0)
    assert Price.parse({"input": 2, "output": 3}).cost(Usage(output_tokens=10**6)) == 3.0
    with pytest.raises(SpecError, match="unknown price 'inptu'"):
        Price.parse("inptu=1")
    with pytest.raises(SpecError, match="expected a number"):
        Price.parse({"input": "cheap"})


def test_the_library_prices_hosted_models_and_not_local_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    hosted, note = resolve_pricing("gpt-4o-mini", "https://api.openai.com/v1")
    assert hosted is not None and note is None
    assert hosted.describe()["source"] == "genai-prices"
    assert hosted.cost(Usage(input_tokens=1000, output_tokens=100), "gpt-4o-mini") > 0
    gateway, _ = resolve_pricing("gpt-4o-mini", "https://gateway.example.com/v1")
    assert gateway is not None and gateway.cost(Usage(input_tokens=1000), None) > 0
    local, note = resolve_pricing("gpt-4o-mini", "http://127.0.0.1:8000/v1")
    assert local is None and note and "--price" in note
    unknown, note = resolve_pricing("my-finetune-7b", "https://api.example.com/v1")
    assert unknown is None and "no price known for model 'my-finetune-7b'" in (note or "")
    # remembered: a second look-up of an unknown model does not import the library
    assert (tmp_path / "agentkit" / "unpriced-models.json").is_file()
    scripted, _ = resolve_pricing("scripted:x.json", None)
    assert scripted is not None and scripted.cost(Usage(input_tokens=10**6), None) == 0.0
