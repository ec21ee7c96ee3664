"""The earlier filing a chosen filing is compared with (prism/corpus/comparable.py): by form and fiscal
period, else by date; a company with none gets none and a reason, never another company's; and
the option and a question line's field that ask for it."""

from __future__ import annotations

import io
import json
from datetime import date

import pytest

from prism.corpus.comparable import comparable
from prism.corpus.view import CorpusView
from prism.datasets import RowError
from prism.ingest.models import FilingMeta
from prism.models import RunConfig
from prism.runs.planning import compare_mode, in_scope, previous_filings
from prism.runs.questions import Question, Scope, read_questions


def meta(form: str, year: int | None = None, quarter: int | None = None, **fields) -> FilingMeta:
    base = {"company": "Acme Corp", "cik": "0000001234", "source_uri": "x"}
    return FilingMeta(form_type=form, fiscal_year=year, fiscal_quarter=quarter, **(base | fields))


ACME = [
    ("k2023", meta("10-K", 2023, period_end=date(2023, 12, 31))),
    ("k2024", meta("10-K", 2024, period_end=date(2024, 12, 31))),
    ("q2024-1", meta("10-Q", 2024, 1, period_end=date(2024, 3, 31))),
    ("q2024-2", meta("10-Q", 2024, 2, period_end=date(2024, 6, 30))),
    ("q2025-1", meta("10-Q", 2025, 1, period_end=date(2025, 3, 31))),
    ("q2025-2", meta("10-Q", 2025, 2, period_end=date(2025, 6, 30))),
    ("8k-jan", meta("8-K", period_end=date(2025, 1, 10))),
    ("8k-may", meta("8-K", period_end=date(2025, 5, 2))),
    ("proxy2024", meta("DEF 14A", filed=date(2024, 4, 1))),
    ("proxy2025", meta("DEF 14A", filed=date(2025, 4, 3))),
    # another company's filing of every period: never taken for Acme's
    ("globex-k2024", meta("10-K", 2024, company="Globex Inc", cik="0000009999")),
    ("globex-q2025-1", meta("10-Q", 2025, 1, company="Globex Inc", cik="0000009999")),
]
BY_ID = dict(ACME)


def chosen(mode, fid: str, filings=ACME) -> str | None:
    return comparable(mode, fid, BY_ID[fid], filings).filing_id


@pytest.mark.parametrize(
    ("current", "previous", "year_ago"),
    [
        ("q2025-2", "q2025-1", "q2024-2"),  # a 10-Q: the quarter before; the same quarter a year before
        ("q2025-1", "k2024", "q2024-1"),  # a first quarter's previous is the annual report of the year before
        ("k2024", "k2023", "k2023"),  # an annual report: the year before either way
        ("8k-may", "8k-jan", None),  # another form: the same form dated just before; none near a year before
        ("proxy2025", "proxy2024", "proxy2024"),  # by the day it was filed where it gives no period
    ],
)
def test_each_form_is_compared_with_its_earlier_filing(current, previous, year_ago):
    assert chosen("previous", current) == previous
    assert chosen("year_ago", current) == year_ago


def test_a_company_with_no_earlier_filing_gets_none_and_a_reason_not_another_companys():
    found = comparable("year_ago", "globex-q2025-1", BY_ID["globex-q2025-1"], ACME)
    assert found.filing_id is None  # Acme's 10-Q of 2024Q1 is not Globex's
    assert found.reason == "no previous filing: no 10-Q of 2024Q1 of the company in the corpus"
    assert chosen("previous", "globex-q2025-1") == "globex-k2024"
    # the earliest of Acme's has none either
    assert comparable("previous", "k2023", BY_ID["k2023"], ACME).filing_id is None
    first_8k = comparable("previous", "8k-jan", BY_ID["8k-jan"], ACME)
    assert first_8k.filing_id is None and first_8k.reason.startswith("no previous filing: no 8-K dated before")


def test_a_quarter_without_its_fiscal_period_is_compared_by_date_and_an_amendment_wins_by_filing_date():
    undated = [(fid, m) for fid, m in ACME if fid != "q2025-2"]
    undated.append(("q-late", meta("10-Q", period_end=date(2025, 6, 30))))
    late = comparable("previous", "q-late", undated[-1][1], undated)
    assert late.filing_id == "q2025-1" and late.reason == "the 10-Q before, of 2025-03-31"
    amended = [*ACME, ("k2023-a", meta("10-K", 2023, period_end=date(2023, 12, 31), filed=date(2024, 5, 1)))]
    assert comparable("previous", "k2024", BY_ID["k2024"], amended).filing_id == "k2023-a"


def test_the_earlier_filing_of_each_chosen_one_is_read_from_its_company_scoped_or_not():
    versions = {fid: f"v-{fid}" for fid, _ in ACME}
    view = CorpusView.of_filings(ACME, versions)
    scoped = in_scope(Question(id="q", question="Revenue?", scope=Scope(company="Acme")), view)
    found = previous_filings("previous", view, scoped.pool, ["q2025-2", "k2023"])
    assert [(p.filing, p.previous, p.version) for p in found] == [
        ("q2025-2", "q2025-1", "v-q2025-1"),
        ("k2023", None, ""),
    ]
    assert found[1].reason.startswith("no previous filing")
    anywhere = in_scope(Question(id="q", question="Revenue?"), view)  # unscoped: every company's filings
    found = previous_filings("year_ago", view, anywhere.pool, ["q2025-1", "globex-q2025-1"])
    assert [(p.previous, p.version) for p in found] == [("q2024-1", "v-q2024-1"), (None, "")]


def test_a_questions_own_compare_wins_over_the_runs():
    run = RunConfig(compare="previous")
    assert compare_mode(Question(id="q", question="x"), run) == "previous"
    assert compare_mode(Question(id="q", question="x", compare="year_ago"), run) == "year_ago"
    assert compare_mode(Question(id="q", question="x", compare="none"), run) is None
    assert compare_mode(Question(id="q", question="x", compare="previous"), RunConfig()) == "previous"


def test_compare_changes_the_plan_and_no_job_id():
    base = RunConfig()
    for mode in ("previous", "year_ago"):
        compared = base.model_copy(update={"compare": mode})
        assert compared.fingerprint() == base.fingerprint()  # every pair's job id stays
        assert compared.plan_fingerprint() != base.plan_fingerprint()  # a --new night plans again


def test_a_bad_compare_on_a_question_line_names_its_line_and_field():
    lines = [{"id": "ok", "question": "x", "compare": "year_ago"}, {"id": "bad", "question": "x", "compare": "last"}]
    good, bad = read_questions(io.BytesIO("\n".join(json.dumps(r) for r in lines).encode()), "q.jsonl")
    assert isinstance(good, Question) and good.compare == "year_ago"
    assert isinstance(bad, RowError) and (bad.line, bad.field) == (2, "compare")
    assert "expected one of 'previous', 'year_ago', 'none', got 'last'" in str(bad)
