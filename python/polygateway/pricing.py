"""The pricing table (the original library's ``PricingTable`` / ``ModelPrice``): prices per
million tokens by model, in the original's JSON file format, so price files carry over::

    {"MiniMax-M3": {"input_per_1m": 2.1, "output_per_1m": 8.4, "cached_input_per_1m": 0.42}}

The runtime reads the table from ``PGW_PRICING_PATH``; ``PricingTable.save`` writes one there and
``GatewaySettings(pricing=…)`` does it for you. Costs land in telemetry and on the answers.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Dict, Mapping, Optional, Union

__all__ = ["ModelPrice", "PricingTable"]


def _price(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise ValueError(f"ModelPrice.{name} must be a finite number >= 0, got {value!r}")
    return float(value)


_OPTIONAL = ("cached_input_per_1m", "cache_write_5m_per_1m", "cache_write_1h_per_1m")


@dataclass(frozen=True)
class ModelPrice:
    """Prices of one model per million tokens; ``cached_input_per_1m`` prices prompt tokens the
    provider served from its prompt cache, ``cache_write_5m_per_1m`` / ``cache_write_1h_per_1m``
    prompt tokens written to it by lifetime (Anthropic); each unset one costs ``input_per_1m``."""

    input_per_1m: float
    output_per_1m: float
    cached_input_per_1m: Optional[float] = None
    cache_write_5m_per_1m: Optional[float] = None
    cache_write_1h_per_1m: Optional[float] = None

    def __post_init__(self) -> None:
        for name in ("input_per_1m", "output_per_1m"):
            object.__setattr__(self, name, _price(name, getattr(self, name)))
        for name in _OPTIONAL:
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _price(name, getattr(self, name)))

    def cost(self, prompt_tokens: int, completion_tokens: int,
             cached_prompt_tokens: int = 0, cache_write_5m_tokens: int = 0,
             cache_write_1h_tokens: int = 0) -> float:
        """The runtime's formula, per million tokens: ``uncached·input + cached·cached_input +
        write_5m·cache_write_5m + write_1h·cache_write_1h + completion·output``, where
        ``prompt_tokens`` counts every prompt token (cached and written included) and the cache
        counts are clamped, in that order, to what is left of it."""
        left = max(prompt_tokens, 0)
        total = 0.0
        for tokens, price in ((cached_prompt_tokens, self.cached_input_per_1m),
                              (cache_write_5m_tokens, self.cache_write_5m_per_1m),
                              (cache_write_1h_tokens, self.cache_write_1h_per_1m)):
            taken = min(max(tokens or 0, 0), left)
            left -= taken
            total += taken * (self.input_per_1m if price is None else price)
        return (left * self.input_per_1m + total
                + completion_tokens * self.output_per_1m) / 1e6


@dataclass(frozen=True)
class PricingTable:
    """Prices by model name (exact match, as configured in a source's ``MODEL``)."""

    prices: Mapping[str, ModelPrice]

    def __post_init__(self) -> None:
        prices = {}
        for model, price in dict(self.prices).items():
            if isinstance(price, Mapping):
                try:
                    price = ModelPrice(**price)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"price of model {model!r}: {exc}") from None
            if not isinstance(price, ModelPrice):
                raise TypeError(f"price of model {model!r} must be a ModelPrice")
            prices[str(model)] = price
        object.__setattr__(self, "prices", MappingProxyType(prices))

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"]) -> "PricingTable":
        """Read a pricing file (the format above)."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError(f"{os.fspath(path)}: a pricing file is a JSON object of models")
        return cls(data)

    def to_json(self) -> str:
        """The table in the file format."""
        out: Dict[str, Dict[str, float]] = {}
        for model, p in self.prices.items():
            entry = {"input_per_1m": p.input_per_1m, "output_per_1m": p.output_per_1m}
            for name in _OPTIONAL:
                if getattr(p, name) is not None:
                    entry[name] = getattr(p, name)
            out[model] = entry
        return json.dumps(out, ensure_ascii=False, indent=2)

    def save(self, path: Union[str, "os.PathLike[str]"]) -> str:
        """Write the table to ``path`` (for ``PGW_PRICING_PATH``); returns the path."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())
        return os.fspath(path)

    def price(self, model: str) -> Optional[ModelPrice]:
        """The model's prices, ``None`` when the table has none."""
        return self.prices.get(model)

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int,
             cached_prompt_tokens: int = 0, cache_write_5m_tokens: int = 0,
             cache_write_1h_tokens: int = 0) -> Optional[float]:
        """What a call cost, ``None`` for a model without prices."""
        price = self.price(model)
        if price is None:
            return None
        return price.cost(prompt_tokens, completion_tokens, cached_prompt_tokens,
                          cache_write_5m_tokens, cache_write_1h_tokens)
