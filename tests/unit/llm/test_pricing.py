from decimal import Decimal

from prism.llm.pricing import PriceTable, Rates
from prism.models import Usage


def test_library_prices_with_cached_tokens():
    table = PriceTable.load()
    usage = Usage(prompt_tokens=1_000_000, cached_tokens=400_000, completion_tokens=100_000)
    # gpt-5-mini: $0.25 input, $0.025 cached input, $2 output per million tokens.
    assert table.usd("gpt-5-mini", usage) == Decimal("0.25") * Decimal("0.6") + Decimal("0.025") * Decimal(
        "0.4"
    ) + Decimal("0.2")


def test_overrides_win_and_unknown_models_are_unpriced():
    table = PriceTable(
        {
            "gpt-5-mini": Rates(input=Decimal(1), output=Decimal(10)),
            "local-ranker": Rates(input=Decimal("0.1"), output=Decimal("0.2"), cached_input=Decimal("0.01")),
        }
    )
    usage = Usage(prompt_tokens=2_000_000, cached_tokens=1_000_000, completion_tokens=1_000_000)
    assert table.usd("gpt-5-mini", usage) == Decimal(12)  # no cached rate: cached at full input rate
    assert table.usd("local-ranker", usage) == Decimal("0.1") + Decimal("0.01") + Decimal("0.2")
    assert table.usd("acme-ranker-9000", usage) is None


def test_a_price_file_is_read_on_top_of_the_bundled_table(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text('[models."acme-ranker-9000"]\ninput = 3\noutput = 4\n')
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)
    assert PriceTable.load(path).usd("acme-ranker-9000", usage) == Decimal(7)


def test_flex_is_half_of_standard_and_the_prompt_side_is_split_out():
    table = PriceTable.load()
    usage = Usage(prompt_tokens=1_000_000, cached_tokens=800_000, completion_tokens=100_000)
    prompt, completion = table.split("gpt-5-mini", usage)
    assert prompt == Decimal("0.25") * Decimal("0.2") + Decimal("0.025") * Decimal("0.8")
    assert completion == Decimal("0.2")
    assert table.usd("gpt-5-mini", usage, "flex") == (prompt + completion) / 2


def test_a_call_is_priced_with_what_each_lever_saved():
    table = PriceTable.load()
    usage = Usage(prompt_tokens=1_000_000, cached_tokens=800_000, completion_tokens=100_000)
    full = table.usd("gpt-5-mini", usage.model_copy(update={"cached_tokens": 0}))
    batch = table.priced("gpt-5-mini", usage, "batch")
    assert batch["usd"] == table.usd("gpt-5-mini", usage, "batch")
    assert batch["tier_saved_usd"] == full / 2  # standard, uncached, against batch, uncached
    assert batch["cache_saved_usd"] == (Decimal("0.25") - Decimal("0.025")) * Decimal("0.8") / 2
    assert batch["usd"] + batch["cache_saved_usd"] + batch["tier_saved_usd"] == full
    assert table.priced("acme-ranker-9000", usage)["usd"] is None
    assert table.priced("gpt-5-mini", None) == table.priced("acme-ranker-9000", usage)
