"""The period resolver on FinanceBench questions, the filing choice it drives, and the strict
question-set reader."""

from __future__ import annotations

import io
import json
from datetime import date

import pytest

from prism.corpus.periods import PeriodError, choose_filings, parse_period, period_fit, resolve_period
from prism.datasets import RowError
from prism.ingest.models import FilingMeta
from prism.ranking.prior import event_forms
from prism.runs.questions import Question, read_questions


@pytest.mark.parametrize(
    ("question", "label"),
    [
        ("What is the FY2018 capital expenditure amount (in USD millions) for 3M?", "FY2018"),
        ("What is the nature & purpose of AMCOR's restructuring liability as oF Q2 of FY2023 close?", "2023Q2"),
        ("Was there any change in the number of Best Buy stores between Q2 of FY2024 and FY2023?", "2024Q2"),
        ("For Pfizer, which geographic region had the biggest drop in Q22023 year over year revenues?", "2023Q2"),
        ("As of FY2023Q1, by how many percentage points did Pepsico raise full year guidance?", "2023Q1"),
        ("As of FY 2021, how much did Verizon expect to pay for its retirees in 2024?", "FY2021"),
        ("How much was the Real change in Sales for AMCOR in FY 2023 vs FY 2022?", "FY2023"),
        ("What was the revenue of the second quarter of fiscal 2023?", "2023Q2"),
        ("Does 3M maintain a stable trend of dividend distribution?", "latest"),
    ],
)
def test_periods_read_from_financebench_questions(question, label):
    assert resolve_period(question).label() == label


def test_a_scope_period_wins_and_bad_ones_are_named():
    assert resolve_period("revenue in 2017", "latest").latest
    assert parse_period("Q2 2023").label() == "2023Q2" and parse_period("FY2018").label() == "FY2018"
    with pytest.raises(PeriodError, match="'last year'"):
        parse_period("last year")


def _meta(name: str, form: str, year: int, quarter: int | None = None) -> tuple[str, FilingMeta]:
    meta = FilingMeta(
        company="Acme", form_type=form, fiscal_year=year, fiscal_quarter=quarter, source_uri=name, name=name
    )
    return name, meta


FILINGS = [
    _meta("ACME_2022_10K", "10-K", 2022),
    _meta("ACME_2023_10K", "10-K", 2023),
    _meta("ACME_2023Q2_10Q", "10-Q", 2023, 2),
    _meta("ACME_2023_8K_dated-2023-05-30", "8-K", 2023),
]
FORMS = {"DEF14A": 0.0, "10-K": 1.0, "10-Q": 0.6, "8-K": 0.3, "Earnings": 0.2}


def test_the_period_picks_the_year_and_quarter_and_a_date_the_current_report():
    choose = lambda q: choose_filings(resolve_period(q), FORMS, FILINGS)[0].filing_id  # noqa: E731
    assert choose("What was FY2022 revenue?") == "ACME_2022_10K"
    assert choose("What was revenue in Q2 2023?") == "ACME_2023Q2_10Q"
    assert choose("What did the board approve on May 26, 2023?") == "ACME_2023_8K_dated-2023-05-30"
    assert choose("Is the dividend stable?") == "ACME_2023_10K"  # latest, and the form the prior prefers
    assert resolve_period("as of May 26, 2023").date == date(2023, 5, 26)


def test_a_period_no_filing_reports_leaves_nothing_in_scope():
    assert choose_filings(resolve_period("What was FY2015 revenue?"), FORMS, FILINGS) == []
    assert len(choose_filings(resolve_period("revenue?"), FORMS, FILINGS, top_f=2)) == 2
    assert choose_filings(resolve_period("revenue?"), FORMS, FILINGS, form_types=["DEF14A"]) == []


def test_an_event_question_reaches_the_current_report_and_auto_searches_beside_it():
    appointed = "Who did Acme appoint as chief financial officer in 2023?"
    raised = event_forms(appointed, FORMS)
    assert raised["8-K"] == raised["10-K"] == 1.0 and raised["10-Q"] == 0.6
    assert event_forms("What was FY2023 revenue?", FORMS) == FORMS
    assert event_forms("What was FY2023 adjusted EBITDA?", FORMS)["Earnings"] == 1.0  # a non-GAAP measure
    period = resolve_period(appointed)
    assert choose_filings(period, FORMS, FILINGS)[0].filing_id == "ACME_2023_10K"  # the prior alone: never the 8-K
    chosen = {c.filing_id for c in choose_filings(period, raised, FILINGS, "auto")}
    assert chosen == {"ACME_2023_10K", "ACME_2023_8K_dated-2023-05-30"}  # level: both searched, the 10-Q not
    assert [c.filing_id for c in choose_filings(resolve_period("FY2022 revenue?"), FORMS, FILINGS, "auto")] == [
        "ACME_2022_10K"  # nothing else comes close
    ]


def test_a_forecast_for_a_year_is_looked_for_in_the_year_befores_filings():
    period = resolve_period("What production rate changes is Acme forecasting for FY2024?")
    assert period.outlook and period.label() == "FY2024"
    assert [c.filing_id for c in choose_filings(period, FORMS, FILINGS)] == ["ACME_2023_10K"]
    assert not resolve_period("What was revenue in FY2024?").outlook


def _read(*rows) -> list:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    return list(read_questions(io.BytesIO("\n".join(lines).encode()), "q.jsonl"))


def test_a_question_set_is_read_with_scope_and_qrels():
    (q,) = _read(
        {
            "id": "q1",
            "question": "FY2018 capex?",
            "scope": {"company": "3M", "form_types": ["10k"], "period": "FY2018"},
            "qrels": [{"filing": "3M_2018_10K", "page": 60, "grade": 2}],
            "answer": "$1577.00",
        }
    )
    assert isinstance(q, Question) and q.scope.form_types == ("10-K",) and q.qrels[0].page == 60


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ('{"id": "a", "question": "x"', "(row)"),
        ({"id": "", "question": "x"}, "id"),
        ({"id": "a", "question": " "}, "question"),
        ({"id": "a", "question": "x", "extra": 1}, "extra"),
        ({"id": "a", "question": "x", "scope": {"company": 3}}, "scope.company"),
        ({"id": "a", "question": "x", "scope": {"period": "soon"}}, "scope.period"),
        ({"id": "a", "question": "x", "scope": {"form_types": ["10-X"]}}, "scope.form_types[0]"),
        ({"id": "a", "question": "x", "qrels": [{"filing": "f", "page": 0, "grade": 1}]}, "qrels[0].page"),
        ({"id": "a", "question": "x", "qrels": [{"filing": "f", "grade": 1}]}, "qrels[0]"),
        ({"id": "a", "question": "x", "qrels": [{"filing": "f", "page": 2, "grade": 1.5}]}, "qrels[0].grade"),
    ],
)
def test_each_bad_line_names_its_line_and_field(row, field):
    good, bad = _read({"id": "ok", "question": "fine"}, row)
    assert isinstance(good, Question)
    assert isinstance(bad, RowError) and bad.line == 2 and bad.field == field


def test_a_duplicate_id_is_an_error_naming_the_first_line():
    _, dup = _read({"id": "a", "question": "x"}, {"id": "a", "question": "y"})
    assert isinstance(dup, RowError) and "first on line 1" in str(dup)


def test_a_date_just_after_a_quarter_points_to_that_quarters_report():
    quarterly = FilingMeta(source_uri="q", form_type="10-Q", period_end=date(2024, 8, 31), fiscal_year=2025)
    current = FilingMeta(source_uri="c", form_type="8-K", period_end=date(2024, 11, 14), fiscal_year=2024)
    for question in (
        "How many shares were outstanding as of September 6, 2024?",
        "What dividend was declared in September 2024?",
    ):
        period = resolve_period(question)
        assert period.date is not None and period.date.month == 9
        assert period_fit(period, quarterly) > period_fit(period, current)
    # the 8-K of an event weeks after the date is still the one for it
    assert period_fit(resolve_period("Who was elected on November 1, 2024?"), current) > 1.0


def test_qrels_that_cannot_be_judged_are_named_on_their_line():
    from datetime import UTC, datetime

    from prism.ingest.models import FilingEntry, VersionEntry
    from producer.questions import qrel_warnings

    def entry(fid: str, pages: int) -> FilingEntry:
        version = VersionEntry(
            version="v1", content_sha256="x", key="k", ingested_at=datetime.now(UTC), chunks=1, tokens=1, pages=pages
        )
        return FilingEntry(id=fid, meta=FilingMeta(source_uri=fid), latest="v1", versions=[version])

    filings = {"acme-10k-2023": entry("acme-10k-2023", 40), "notes": entry("notes", 0)}
    line = (
        '{"id": "q", "question": "Revenue?", "qrels": [{"filing": "acme-10k-2023.html", "page": 3, "grade": 2}, '
        '{"filing": "acme-10k-2023", "page": 41, "grade": 1}, {"filing": "acme-10k-2023", "page": 40, "grade": 1}, '
        '{"filing": "notes", "page": 1, "grade": 1}]}\n'
    )
    (q,) = read_questions(io.BytesIO(line.encode()))
    found = dict(qrel_warnings(q, filings))
    assert found["qrels[0].filing"].startswith(
        "'acme-10k-2023.html' is no filing id of the corpus (did you mean 'acme-10k-2023'?)"
    )
    assert found["qrels[1].page"] == "page 41 is past the last of 'acme-10k-2023' (40): not judged"
    assert found["qrels[3].page"] == "'notes' has no pages: this page qrel is not judged"
    assert "qrels[2].page" not in found  # the last page is a page


def test_an_unscoped_pool_is_streamed_twice_and_chosen_as_a_list_would_be():
    """An unscoped question's pool is the whole catalogue: read as a stream (twice: recency, then
    scores), never held, and it chooses and digests what the same filings as a list would."""
    from datetime import date, timedelta

    from prism.corpus.view import CorpusView, Everything
    from prism.models import RunConfig
    from prism.runs.planning import InScope, choose, in_scope
    from prism.runs.questions import Question

    def meta(i: int) -> FilingMeta:
        filed = date(2015, 1, 1) + timedelta(days=i % 3000)
        form = ("10-K", "10-Q", "8-K")[i % 3]
        return FilingMeta(company=f"Co {i % 97}", form_type=form, filed=filed, period_end=filed, source_uri=str(i))

    versioned = [(f"f{i:05d}", meta(i), f"v{i}") for i in range(5000)]
    streams: list[int] = []

    def everything():
        streams.append(1)
        yield from versioned

    streamed = CorpusView([], lambda _: [], everything)
    held = CorpusView.of_filings([(f, m) for f, m, _ in versioned], {f: v for f, _, v in versioned})
    as_list = [(f, m) for f, m, _ in versioned]
    question = Question(id="q", question="What was revenue in FY2019?")
    for top in (1, 3, "auto"):
        config = RunConfig(filings_per_question=top)
        pool = in_scope(question, streamed)
        assert isinstance(pool.pool, Everything)
        streams.clear()
        got = choose(question, pool, FORMS, config, streamed, "c")
        assert len(streams) == 2  # recency counted, then scored: never a list of the corpus
        want = choose(question, InScope(as_list, pool.period), FORMS, config, held, "c")
        assert got == want and got.choices
    ids = [c.filing_id for c in got.choices]
    assert streamed.versions_of(pool.pool, ids) == {f: f"v{int(f[1:])}" for f in ids}
    before = streamed.pool_digest(pool.pool)
    versioned[17] = (versioned[17][0], versioned[17][1], "changed")
    assert streamed.pool_digest(pool.pool) != before
