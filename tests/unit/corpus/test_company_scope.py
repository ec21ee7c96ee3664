"""A question scope's company resolved against a corpus: by CIK, ticker, name or a name's first
words, and a scope that names no company told the closest ones."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from prism.corpus.companies import cik_number, company_key
from prism.corpus.view import CorpusView
from prism.ingest.models import FilingMeta
from prism.runs.planning import NO_FILING, no_filing
from prism.runs.questions import Scope


def _filing(fid: str, company: str | None, cik: str | None = None, ticker: str | None = None) -> tuple[str, FilingMeta]:
    return fid, FilingMeta(company=company, cik=cik, ticker=ticker, form_type="10-K", source_uri=fid)


VIEW = CorpusView.of_filings(
    [
        _filing("nvda23", "NVIDIA CORP", "0001045810", "NVDA"),
        _filing("nvda22", "NVIDIA CORP", "0001045810"),  # no ticker before inline XBRL: found by its CIK
        _filing("nvda15", "Nvidia Corporation"),  # no CIK: joins the one company filing under its name
        _filing("buckle", "THE BUCKLE, INC.", "0000885245", "BKE"),
        _filing("acme", "Acme Industrial Corp"),
        _filing("lge", "LOUISVILLE GAS & ELECTRIC CO /KY/", "0000060549"),
        _filing("aapl", "Apple Inc.", "0000320193", "AAPL"),
        _filing("aple", "Apple Hospitality REIT, Inc.", "0001418121", "APLE"),
        _filing("gs", "GOLDMAN SACHS GROUP INC", "0000886982"),
        _filing("gsbd", "Goldman Sachs BDC, Inc.", "0001572694"),
        _filing("bare", None),
    ]
)


def _pool(company: str | None) -> list[str]:
    return sorted(fid for fid, _ in VIEW.pool(company))


def test_names_are_keyed_without_case_punctuation_or_legal_form():
    assert company_key("Johnson & Johnson") == company_key("JOHNSON_JOHNSON") == company_key("Johnson and Johnson")
    assert company_key("THE BUCKLE, INC.") == company_key("Buckle") == "buckle"
    assert company_key("Icahn Enterprises L.P.") == "icahnenterprises" != company_key("Icahn Enterprises Holdings")
    assert company_key("WELLS FARGO & COMPANY/MN") == company_key("Wells Fargo & Co.") == "wellsfargo"
    assert company_key("Inc.") == "inc"  # a name is never emptied
    assert cik_number("CIK0001045810") == cik_number("1045810") == 1045810 and cik_number("3M") is None


@pytest.mark.parametrize(
    ("scope", "filings"),
    [
        ("NVIDIA", ["nvda15", "nvda22", "nvda23"]),
        ("nvda", ["nvda15", "nvda22", "nvda23"]),
        ("1045810", ["nvda15", "nvda22", "nvda23"]),
        ("CIK0001045810", ["nvda15", "nvda22", "nvda23"]),
        ("Buckle", ["buckle"]),
        ("Acme", ["acme"]),
        ("Louisville Gas and Electric", ["lge"]),
        ("Apple", ["aapl"]),  # the whole name wins over the first words of another
        ("Apple Hospitality", ["aple"]),
        ("Goldman Sachs Group", ["gs"]),
        ("Goldman Sachs", []),  # fits two companies: neither is guessed
        ("Globex", []),
        (None, sorted(fid for fid, _ in VIEW.pool(None))),
    ],
)
def test_a_scope_company_matches_by_cik_ticker_name_or_first_words(scope, filings):
    assert _pool(scope) == filings


def testno_filing_names_the_closest_companies_or_the_ones_a_scope_could_mean():
    def error(company: str) -> str:
        question = SimpleNamespace(scope=Scope(company=company))
        return no_filing(question, "latest", VIEW, "mem://c")  # type: ignore[arg-type]

    assert error("Nvidea").startswith(f"{NO_FILING}: the corpus mem://c holds no filing of company 'Nvidea'")
    assert error("Nvidea").endswith("; closest companies in the corpus: NVIDIA CORP")
    assert error("Goldman Sachs").endswith("could be any of: GOLDMAN SACHS GROUP INC, Goldman Sachs BDC, Inc.")
    assert "closest" not in error("Zzyzx Widgets") and "closest" not in error("NVIDIA")  # nothing near; one found
