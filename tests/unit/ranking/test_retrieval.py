import numpy as np
import pytest

from prism.models import RunConfig
from prism.ranking.hybrid import prefilter
from prism.ranking.lexical import bm25_scores
from prism.ranking.rankers import build_ranker
from prism.ranking.retrieval import (
    INDEXES,
    SIGNALS,
    WEIGHTS,
    FilingIndex,
    FinancialRanker,
    IndexCache,
    digest,
    fuse,
    read_question,
    standardise,
)

# A small filing: narrative pages that talk about capital spending, a balance sheet, and the
# cash flow statement that holds the FY2018 figure.
NARRATIVE = (
    "Our capital expenditure plans: we expect capital expenditure to grow, and capital expenditure "
    "discipline remains a priority for the capital expenditure committee in 2019 and beyond. This statement "
    "on our cash flow outlook covers capital expenditure, cash flow and the amount we may spend."
)
CASH_FLOW = (
    "Consolidated Statement of Cash Flow\ns\nYears ended December 31 (Millions) 2018 2017 2016\n"
    "Net cash provided by operating activities 6,439 6,240 6,662\n"
    "Purchases of property, plant and equipment (PP&E) (1,577) (1,373) (1,420)\n"
    "Net cash used in investing activities 222 (3,086) (1,403)"
)
BALANCE = (
    "Consolidated Balance Sheet\nAt December 31 (Millions) 2018 2017\n"
    "Property, plant and equipment - net 8,738 8,866\nTotal assets 36,500 37,987\n"
    "Total current liabilities 7,244 7,687"
)
OTHER = [
    "Risk factors: competition, regulation and the weather may affect results.",
    "Legal proceedings: the company is party to claims arising in the ordinary course.",
    "Employees: about 93,000 people work for the company worldwide.",
]
FILING = [NARRATIVE, *OTHER, BALANCE, CASH_FLOW]
CASH_FLOW_PAGE, BALANCE_PAGE, NARRATIVE_PAGE = len(FILING) - 1, len(FILING) - 2, 0
CAPEX = "What is the FY2018 capital expenditure amount (in USD millions)? Use the cash flow statement."


def test_the_question_cues_name_the_period_the_statement_and_the_line_item():
    cues = read_question(CAPEX)
    assert cues.years == {"2018"} and cues.statements == {"cash_flow"} and cues.is_metric
    assert "purchases of property plant and equipment" in cues.expansion
    assert read_question("What is the FY22 net PPNE? Answer from the balance sheet.").years == {"2022"}
    assert read_question("year end net PPNE").statements == {"balance"}  # by the metric alone
    plain = read_question("Who is the new chief executive?")
    assert not plain.years and not plain.statements and not plain.is_metric and plain.expansion == ""


def test_the_statement_page_wins_where_plain_bm25_prefers_the_narrative():
    assert int(np.argmax(bm25_scores(CAPEX, FILING))) == NARRATIVE_PAGE
    index = FilingIndex(FILING)
    signals = index.signals(CAPEX)
    assert set(signals) == set(SIGNALS)
    assert signals["statement"][CASH_FLOW_PAGE] == 1 and signals["statement"][BALANCE_PAGE] == 0
    assert signals["period"][CASH_FLOW_PAGE] == 1 and signals["period"][1] == 0
    assert int(np.argmax(index.scores(CAPEX))) == CASH_FLOW_PAGE
    balance = "What is the year end FY2018 net PPNE? Use the balance sheet."
    assert int(np.argmax(index.scores(balance))) == BALANCE_PAGE  # the same index, another question


def test_the_index_is_built_once_and_answers_every_question_as_a_fresh_one_would():
    index = FilingIndex(FILING)
    for question in (CAPEX, "total current liabilities 2018", "Who works for the company?"):
        assert np.allclose(index.scores(question), FilingIndex(FILING).scores(question))


def test_every_question_about_a_filing_reuses_its_index_and_a_changed_filing_rebuilds():
    cache = IndexCache(size=2)
    first = cache.get(FILING)
    assert cache.get(list(FILING)) is first and cache.builds == 1  # by content, not by the list
    changed = [*FILING[:-1], CASH_FLOW.replace("1,577", "1,578")]
    assert cache.get(changed) is not first and cache.builds == 2
    assert cache.get(FILING) is first and cache.builds == 2
    cache.get(OTHER)  # a third filing pushes out the least recently used, the changed one
    assert cache.get(FILING) is first and cache.builds == 3
    cache.get(changed)
    assert cache.builds == 4
    assert digest(["ab", "c"]) != digest(["a", "bc"])


def test_the_ranker_and_the_pre_filter_share_one_index_per_filing():
    INDEXES.clear()
    before = INDEXES.builds
    ranker = FinancialRanker()
    ranker.rank(CAPEX, FILING, 2)
    ranker.rank("What is the year end FY2018 net PPNE? Use the balance sheet.", FILING, 2)
    prefilter(CAPEX, FILING, 2)
    assert INDEXES.builds == before + 1
    ranker.rank(CAPEX, FILING[:-1], 2)
    assert INDEXES.builds == before + 2


def test_fusion_standardises_each_signal_and_a_constant_signal_adds_nothing():
    signals = {"a": np.array([1.0, 2.0, 3.0]), "b": np.array([5.0, 5.0, 5.0])}
    assert np.allclose(fuse(signals, {"a": 1.0, "b": 9.0}), standardise(signals["a"]))
    assert np.allclose(standardise(np.array([2.0, 4.0])), [-1.0, 1.0])
    assert set(WEIGHTS) == set(SIGNALS)


def test_degenerate_filings_score_without_errors():
    assert FilingIndex(["the and of", "a an the"]).scores(CAPEX).shape == (2,)
    assert FilingIndex(["only page"]).scores("only page").shape == (1,)
    assert FilingIndex(FILING).scores("").shape == (len(FILING),)


def test_the_financial_ranker_and_pre_filter_are_the_zero_cost_defaults():
    from workers.settings import Settings

    config = Settings(llm_base_url=None, llm_api_key=None, llm_endpoints={}).run_config()
    assert config.chunk_ranker == "financial" and config.dense == "financial"
    assert not config.uses_llm("chunks") and "embeddings" not in config.paid_stages()
    ranker = build_ranker(RunConfig(chunk_ranker="financial"), "segments", None)
    ranking = ranker.rank(CAPEX, FILING, 2)
    assert ranking.indices[0] == CASH_FLOW_PAGE and len(ranking.indices) == 2
    kept = prefilter(CAPEX, FILING, 2)
    assert CASH_FLOW_PAGE in kept and kept == sorted(kept)
    with pytest.raises(ValueError):
        build_ranker(RunConfig(chunk_ranker="llm"), "segments", None)


class CountingEmbedder:
    """The hashed embedder, keeping how many texts each call embedded."""

    name = "hashed"

    def __init__(self):
        from prism.ranking.embeddings import HashedEmbedder

        self.inner, self.calls = HashedEmbedder(), []

    def embed(self, texts):
        self.calls.append(len(texts))
        return self.inner.embed(texts)

    @property
    def filings(self) -> int:  # calls that embedded pages, not a question
        return sum(n > 1 for n in self.calls)


class DictVectors:
    """A VectorStore in memory, standing for the results store across processes."""

    def __init__(self):
        self.saved: dict[tuple[str, str], np.ndarray] = {}

    def get(self, embedder, digest):
        assert embedder == "hashed"
        return self.saved.get((embedder, digest))

    def put(self, embedder, digest, vectors):
        assert embedder == "hashed"
        self.saved[(embedder, digest)] = vectors


def test_a_filing_is_embedded_once_across_questions_processes_and_scorers():
    from prism.ranking.hybrid import dense_scores

    store, embedder = DictVectors(), CountingEmbedder()
    first = IndexCache(store=store)
    scores = first.get(FILING, embedder).scores(CAPEX)
    first.get(FILING, embedder).scores("What is the year end FY2018 net PPNE?")
    assert embedder.filings == 1 and first.embedded == 1 and len(store.saved) == 1
    # Another process with the same store: the index is built again, the pages are not embedded.
    later = IndexCache(store=store)
    assert np.allclose(later.get(FILING, embedder).scores(CAPEX), scores)
    assert embedder.filings == 1 and later.embedded == 0 and later.builds == 1
    # BM25 fused with the embedder reads the same page vectors; only each question is embedded.
    INDEXES.clear()
    INDEXES.store, kept = store, INDEXES.store
    try:
        dense_scores(CAPEX, FILING, embedder)
        dense_scores("What were total assets?", FILING, embedder)
    finally:
        INDEXES.store = kept
    assert embedder.filings == 1 and embedder.calls[-2:] == [1, 1]
    # A changed filing is a new version: embedded again.
    later.get(FILING[:-1], embedder)
    assert later.embedded == 1 and len(store.saved) == 2 and embedder.filings == 2


def test_the_excerpt_is_the_passage_that_answers_not_the_page_header():
    from prism.ranking.lexical import passage

    header = "ACME CORP | 2023 Form 10-K | Table of Contents\n" + "Forward-looking statements apply. " * 8
    page = header + "\nWidget revenue was 55 million dollars in fiscal 2023, up 12 percent.\nOther items follow."
    excerpt = passage("What was widget revenue in fiscal 2023?", page, 120)
    assert "Widget revenue was 55 million dollars" in excerpt and len(excerpt) <= 120
    assert passage("anything", "A short page.", 120) == "A short page."  # one that fits is whole


def test_a_cited_passage_is_where_its_offsets_say_in_its_page():
    """The worker keeps where it found a row's passage: its offsets in the page's text hold the
    excerpt (whitespace as the page has it), so a viewer marks it there without searching."""
    from pathlib import Path

    from prism.ingest.filings import parse_filing
    from prism.ranking.lexical import cite
    from prism.segmenting import TokenCounter

    shared = Path(__file__).resolve().parents[4] / "shared" / "data" / "edgar" / "filings"
    filing = parse_filing((shared / "nvda-10q-2025-08-27.html").read_bytes(), "nvda-10q.html", counter=TokenCounter())
    pages, offsets = filing.page_texts(), filing.page_offsets()
    questions = ("What were total liabilities?", "How did Data Center revenue change?", "gross margin", "risk")
    checked = 0
    for question in questions:
        for chunk in filing.chunks[::7]:
            cited = cite(question, chunk, offsets[chunk.index])
            assert cited.start is not None and cited.end is not None and cited.start < cited.end
            marked = " ".join(pages[chunk.page][cited.start : cited.end].split())
            assert marked == cited.excerpt, (question, chunk.id)
            checked += 1
    assert checked > 40


def test_a_passage_cut_just_after_a_space_ends_at_the_word_before_it():
    """An excerpt cut at its limit where the limit falls on a space: its offsets end at the last
    word it shows, not one character into the next word."""
    from prism.ranking.lexical import passage_span

    text = "Alpha beta gamma.\n  " + "word " * 30 + "tail end here."
    for limit in range(20, 60):
        found = passage_span("word", text, limit)
        assert found.text == found.text.rstrip() and len(found.text) <= limit
        assert " ".join(text[found.start : found.end].split()) == found.text, limit
