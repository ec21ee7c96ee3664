"""`prism estimate` for a question set over a corpus: each question planned through the planner
the planning task uses (company, period, the prior's form scores, top-F filings), each pair
priced from the token counts the corpus stores, no filing read and nothing written; and an input
that holds no rows is an error, not USD 0."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prism.corpus.view import CorpusView
from prism.ingest.models import FilingMeta
from prism.llm.pricing import PriceTable
from prism.models import Query, RunConfig
from prism.ranking.rankers import asks_llm
from prism.ranking.strategies.chunks import prepare
from prism.runs.estimate import Priced, estimate
from prism.runs.questions import Question, Scope
from prism.segmenting import TokenCounter
from producer.estimate import estimate_questions, planned_by_prior, read_rows
from producer.ingest import ingest_source
from producer.spec import RunError
from workers.corpus import Corpus
from workers.priors import PACKAGED, read_prior
from workers.settings import load_settings
from workers.store import LocalStore

PAGES = [f"Page {i}. Revenue, cash, debt and margins of business line {i} over the year. " * 40 for i in range(30)]
OUTPUTS = {"documents": 100, "segments": 100, "rerank": 100}


def _config(**fields) -> RunConfig:
    return RunConfig(**({"doc_ranker": "llm", "chunk_ranker": "llm", "segment_tokens": 8000} | fields))


def test_chunks_priced_from_their_token_counts_cost_what_their_texts_cost():
    config, counter = _config(), TokenCounter()
    query = Query(id="q", task="chunks", question="What was revenue?", candidates=PAGES)
    data = prepare(query.question, PAGES, counter, config.segment_tokens)
    from_query = estimate([query], config, PriceTable.load(), OUTPUTS, counter=counter)
    from_counts = estimate(
        [Priced(query.question, data.costs, "f@v1")], config, PriceTable.load(), OUTPUTS, counter=counter
    )
    assert from_counts.stages == from_query.stages and from_counts.usd == from_query.usd
    assert from_counts.segments == from_query.segments > 1 and "rerank" in from_counts.stages
    # A $0 chunk ranker reads a filing in one segment and costs nothing.
    priced = Priced(query.question, data.costs, "f@v1")
    free = estimate([priced, priced], _config(chunk_ranker="financial"), PriceTable.load(), OUTPUTS, counter=counter)
    assert free.segments == 2 and "segments" not in free.stages


def _meta(company: str, form: str, year: int, quarter: int | None = None) -> FilingMeta:
    return FilingMeta(company=company, form_type=form, fiscal_year=year, fiscal_quarter=quarter, source_uri=company)


VIEW = CorpusView.of_filings(
    [
        ("acme22", _meta("Acme Corp", "10-K", 2022)),
        ("acme23", _meta("Acme Corp", "10-K", 2023)),
        ("acme23q2", _meta("Acme Corp", "10-Q", 2023, 2)),
        ("globex23", _meta("Globex Inc", "10-K", 2023)),
    ],
    {"acme22": "v1", "acme23": "v1", "acme23q2": "v1", "globex23": "v1"},
)


def _plan(question: str, config: RunConfig, prior, filings: int = 1, **scope):
    config = config.model_copy(update={"filings_per_question": filings})
    return planned_by_prior(
        Question(id="q1", question=question, scope=Scope(**scope), line=3), VIEW, prior, config, "c"
    )


@pytest.fixture(scope="module")
def prior():
    return read_prior(PACKAGED, load_settings())


def test_questions_are_planned_as_the_planning_task_plans_them(prior):
    config = _config()
    fy22 = _plan("What was revenue in FY2022?", config, prior, company="ACME")
    assert [c.filing_id for c in fy22.filings] == ["acme22"] and fy22.period == "FY2022" and fy22.documents_by_llm
    latest = _plan("What was revenue?", config, prior, 2, company="Acme")
    # No period named: the latest filings, the prior's first form (10-K, for revenue) ahead of the 10-Q.
    assert [c.filing_id for c in latest.filings] == ["acme23", "acme22"] and latest.period == "latest"
    quarter = _plan("Revenue?", config, prior, company="Acme", form_types=("10-Q",))
    assert [c.filing_id for c in quarter.filings] == ["acme23q2"]
    # A period no filing reports: no filing, but its filing types were ranked (as the task does).
    old = _plan("What was revenue in FY2015?", config, prior, company="Acme")
    assert old.filings == [] and old.documents_by_llm and old.error and old.error.startswith("no filing in scope")
    # A company the corpus does not hold: no document ranking is paid for; the error names the closest.
    none = _plan("What was revenue?", config, prior, company="Globe")
    assert none.filings == [] and not none.documents_by_llm and "closest companies" in (none.error or "")


def test_only_a_document_ranker_that_asks_the_llm_is_priced(prior):
    question = "What was revenue in FY2022?"
    assert asks_llm(_config(doc_ranker="llm"), prior, question)
    assert not asks_llm(_config(doc_ranker="prior"), prior, question)
    assert not asks_llm(_config(doc_ranker="lexical"), prior, question)
    # The cascade asks the LLM only under its threshold.
    assert not asks_llm(_config(doc_ranker="cascade", cascade_threshold=0.0), prior, question)
    assert asks_llm(_config(doc_ranker="cascade", cascade_threshold=1.01), prior, question)


def _corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "filings"
    folder.mkdir()
    for name, company, year in (("acme_2023_10k", "Acme Corp", 2023), ("globex_2023_10k", "Globex Inc", 2023)):
        (folder / f"{name}.txt").write_text("\f".join(PAGES))
        (folder / f"{name}.meta.json").write_text(json.dumps({"company": company, "form_type": "10-K", "year": year}))
    ingest_source(folder, LocalStore(tmp_path / "corpus"))
    return tmp_path / "corpus"


def test_a_question_set_is_priced_per_pair_and_nothing_is_written(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path)
    questions = tmp_path / "q.jsonl"
    rows = [
        {"id": "a1", "question": "What was revenue in FY2023?", "scope": {"company": "Acme"}},
        {"id": "a2", "question": "What was debt in FY2023?", "scope": {"company": "Acme"}},
        {"id": "g1", "question": "What was cash?", "scope": {"company": "Globex"}},
        {"id": "x1", "question": "What was cash?", "scope": {"company": "Initech"}},
    ]
    lines = [json.dumps(r) for r in rows] + ['{"id": "bad", "question": ""}', "not json"]
    questions.write_text("\n".join(lines) + "\n")
    for name in [k for k in os.environ if k.startswith("PRISM_")]:
        monkeypatch.delenv(name)
    settings = load_settings(results=str(tmp_path / "results"), segment_tokens=8000)  # no input kept for this budget
    stored = list((corpus / "filings").rglob("*.json.gz"))
    for filing in stored:  # no filing is read: the token counts the corpus keeps are enough
        filing.rename(filing.with_suffix(".away"))
    before = sorted(p for p in corpus.rglob("*"))
    found = estimate_questions(str(questions), str(corpus), settings, _config(), OUTPUTS)
    assert sorted(p for p in corpus.rglob("*")) == before and not (tmp_path / "results").exists()
    assert found.questions == 4 and found.pairs == 3 and found.document_calls == 3
    # Named as a run names them in failures.jsonl.
    assert found.bad_lines == [
        f"{questions}: line 5, field 'question': expected a non-empty string, got a string",
        f"{questions}: line 6, field '(row)': not valid JSON: Expecting value (column 1)",
    ]
    assert len(found.no_filing) == 1 and found.no_filing[0].startswith("x1 (line 4): no filing in scope")
    for filing in stored:
        filing.with_suffix(".away").rename(filing)
    e = found.estimate
    assert e.stages["documents"].calls == 3 and e.segments == 12  # four first-level segments a pair
    # Both Acme questions read the same filing: the second one's segments come from the cache.
    assert e.stages["segments"].cached_tokens > 0 and e.stages["rerank"].calls == 3
    # The same three pairs priced one by one from the filings give the same figures.
    store = Corpus(LocalStore(corpus))
    acme = store.get_filing("acme_2023_10k")
    pairs = [
        Query(id="p", task="chunks", question=r["question"], candidates=[c.text for c in acme.chunks]) for r in rows[:3]
    ]
    direct = estimate(pairs, _config(), PriceTable.load(), OUTPUTS, counter=TokenCounter())
    counted, read = e.stages["segments"], direct.stages["segments"]
    assert direct.segments == e.segments and (counted.calls, counted.prompt_tokens) == (read.calls, read.prompt_tokens)
    # Read from their texts, the three share one prefix (the filings' texts are alike here); priced
    # per filing version, the two Acme questions do: half as many tokens come from the cache.
    assert counted.cached_tokens * 2 == read.cached_tokens


def test_an_input_of_no_rows_is_an_error_not_usd_0(tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "a", "question": "What was revenue?", "scope": {"company": "Acme"}}) + "\n")
    with pytest.raises(RunError, match=r"is a question set \(1 questions.*--questions .*q.jsonl --corpus"):
        read_rows(str(questions))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(RunError, match="no line to read"):
        read_rows(str(empty))
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"a": 1}\n[1]\n')
    with pytest.raises(RunError, match=r"no line could be read \(2 bad lines; the first: line 1, field 'id'"):
        read_rows(str(junk))
    mixed = tmp_path / "rows.jsonl"
    row = {"id": "r1", "question": "What was revenue?", "candidates": ["a", "b"], "task": "chunks"}
    mixed.write_text(json.dumps(row) + "\n{\n")
    queries, bad = read_rows(str(mixed))
    assert [q.id for q in queries] == ["r1"] and len(bad) == 1 and bad[0].startswith(f"{mixed}: line 2, field")


def test_compare_prices_the_earlier_filing_of_each_chosen_one_too(tmp_path, monkeypatch, prior):
    compared = _config(compare="previous")
    fy23 = _plan("What was revenue in FY2023?", compared, prior, company="Acme")
    assert [c.filing_id for c in fy23.filings] == ["acme23"] and fy23.earlier == {"acme22": "v1"}
    assert _plan("What was revenue in FY2023?", _config(), prior, company="Acme").earlier == {}
    globex = _plan("What was revenue?", compared, prior, company="Globex")
    assert [c.filing_id for c in globex.filings] == ["globex23"] and globex.earlier == {}  # it has none
    folder = tmp_path / "filings"
    folder.mkdir()
    for year in (2022, 2023):
        (folder / f"acme_{year}_10k.txt").write_text("\f".join(PAGES))
        (folder / f"acme_{year}_10k.meta.json").write_text(
            json.dumps({"company": "Acme Corp", "form_type": "10-K", "year": year})
        )
    ingest_source(folder, LocalStore(tmp_path / "corpus"))
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        json.dumps({"id": "a1", "question": "What was revenue in FY2023?", "scope": {"company": "Acme"}})
    )
    for name in [k for k in os.environ if k.startswith("PRISM_")]:
        monkeypatch.delenv(name)
    settings = load_settings(results=str(tmp_path / "results"), segment_tokens=8000)
    alone = estimate_questions(str(questions), str(tmp_path / "corpus"), settings, _config(), OUTPUTS)
    both = estimate_questions(str(questions), str(tmp_path / "corpus"), settings, compared, OUTPUTS)
    assert (alone.pairs, alone.earlier_pairs, both.pairs, both.earlier_pairs) == (1, 0, 2, 1)
    assert both.estimate.segments == 2 * alone.estimate.segments == 8
    assert both.estimate.stages["rerank"].calls == 2 * alone.estimate.stages["rerank"].calls
