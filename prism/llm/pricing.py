"""Usage -> USD. Prices come from genai-prices (maintained, bundled, offline); a local table
overrides it and covers models it lacks. A model with no price is unpriced (None), never $0."""

from __future__ import annotations

import tomllib
from decimal import Decimal
from importlib.resources import files
from pathlib import Path

from pydantic import BaseModel

from prism.models import Usage

_MILLION = Decimal(1_000_000)
# The Batch API (and flex processing) bills half of standard: input, cached input and output.
TIER_FACTOR: dict[str, Decimal] = {"standard": Decimal(1), "flex": Decimal("0.5"), "batch": Decimal("0.5")}


class Rates(BaseModel):
    """USD per million tokens."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None  # None: cached tokens cost the full input rate


class PriceTable:
    def __init__(self, overrides: dict[str, Rates] | None = None, provider: str | None = "openai"):
        self.overrides = dict(overrides or {})
        self.provider = provider

    @classmethod
    def load(cls, path: str | Path | None = None, provider: str | None = "openai") -> PriceTable:
        """The bundled override table, then the file at ``path`` on top of it."""
        table = _read(files("prism.llm").joinpath("prices.toml").read_text())
        if path:
            table |= _read(Path(path).read_text())
        return cls(table, provider)

    def usd(self, model: str, usage: Usage, tier: str = "standard") -> Decimal | None:
        split = self.split(model, usage, tier)
        return None if split is None else split[0] + split[1]

    def priced(self, model: str, usage: Usage | None, tier: str = "standard") -> dict[str, Decimal | None]:
        """A call's price fields: ``usd``, ``input_usd`` (None: unpriced, or no usage reported) and
        what the levers saved, each against the call without it: ``cache_saved_usd`` (cached
        tokens at the full input rate) and ``tier_saved_usd`` (the tier against standard)."""
        split = self.split(model, usage, tier) if usage is not None else None
        if usage is None or split is None:
            return {"usd": None, "input_usd": None, "cache_saved_usd": Decimal(0), "tier_saved_usd": Decimal(0)}
        usd = split[0] + split[1]
        uncached = usage.model_copy(update={"cached_tokens": 0})
        at_tier = self.usd(model, uncached, tier) or usd
        return {
            "usd": usd,
            "input_usd": split[0],
            "cache_saved_usd": at_tier - usd,
            "tier_saved_usd": (self.usd(model, uncached) or at_tier) - at_tier,
        }

    def split(self, model: str, usage: Usage, tier: str = "standard") -> tuple[Decimal, Decimal] | None:
        """(prompt side, completion side) in USD at the tier's rates; None: no price."""
        factor = TIER_FACTOR[tier]
        if rates := self.overrides.get(model):
            cached = min(usage.cached_tokens, usage.prompt_tokens)
            cached_rate = rates.cached_input if rates.cached_input is not None else rates.input
            prompt = ((usage.prompt_tokens - cached) * rates.input + cached * cached_rate) / _MILLION
            return prompt * factor, usage.completion_tokens * rates.output / _MILLION * factor
        from genai_prices import Usage as PriceUsage  # its price data loads here, not in every command
        from genai_prices import calc_price

        # genai-prices counts cached tokens inside input_tokens, as OpenAI's prompt_tokens does.
        priced = PriceUsage(
            input_tokens=usage.prompt_tokens,
            cache_read_tokens=usage.cached_tokens,
            output_tokens=usage.completion_tokens,
        )
        try:
            price = calc_price(priced, model_ref=model, provider_id=self.provider)
        except LookupError:
            return None
        return price.input_price * factor, price.output_price * factor


def _read(text: str) -> dict[str, Rates]:
    return {model: Rates.model_validate(rates) for model, rates in tomllib.loads(text).get("models", {}).items()}
