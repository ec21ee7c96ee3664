import gzip
import io
import json
from itertools import product

import pytest

from prism.datasets import RowError, iter_lines, parse_row, read_queries, split_prompt
from prism.models import FILING_TYPES, Query
from tests.conftest import DOC_DEV, PAGES, load


def test_document_rows_parse_question_candidates_and_qrel():
    queries = load(DOC_DEV)
    assert len(queries) == 296
    first = queries[0]
    assert first.id == "qe100cdf8e8f5" and first.task == "documents"
    assert first.question.startswith("How has Agilent Technologies") and first.question.endswith("changed recently?")
    assert tuple(first.candidates) == FILING_TYPES
    assert first.qrel == {4: 1, 0: 0, 1: 0, 2: 0, 3: 0}
    assert all(tuple(q.candidates) == FILING_TYPES for q in queries)


def test_page_rows_recover_every_page_exactly():
    with gzip.open(PAGES, "rt") as f:
        row = json.loads(f.readline())
    query = parse_row(json.dumps(row), 1)
    assert query.task == "chunks" and query.id == row["uuid"]
    assert query.question == row["question"]
    assert len(query.candidates) == row["n_chunks"] == len(query.qrel)
    content = row["messages"][0]["content"]
    body = content[content.index("[Chunk Index 0] ") :]
    body = body[: body.rindex("\nTask: ")]
    pages = [
        body.split(f"[Chunk Index {i}] ", 1)[1].split(f"[Chunk Index {i + 1}] ", 1)[0]
        for i in range(len(query.candidates))
    ]
    assert query.candidates == [p.strip() for p in pages]


def test_eval_rows_use_underscore_id_and_have_no_qrel():
    row = {
        "_id": "doc_q1",
        "messages": [
            {
                "role": "user",
                "content": "Question: Who?\n\nTypes:\n"
                + "\n\n".join(f"[Document Index {i}] {t}" for i, t in enumerate(FILING_TYPES)),
            }
        ],
    }
    query = parse_row(json.dumps(row), 3)
    assert (
        query.id == "doc_q1"
        and query.qrel is None
        and query.candidates == list(FILING_TYPES)
        and query.question == "Who?"
    )


def test_native_rows_infer_the_task():
    docs = parse_row(json.dumps({"id": "a", "question": "q?", "candidates": list(FILING_TYPES)}), 1)
    chunks = parse_row(json.dumps({"id": "b", "question": "q?", "candidates": ["x", "y"], "qrel": {"1": 2}}), 2)
    assert docs.task == "documents" and chunks.task == "chunks" and chunks.qrel == {1: 2}


@pytest.mark.parametrize(
    "line, field, fragment",
    [
        ('{"id": "a", "question": "q", "candidates": [', "(row)", "not valid JSON"),
        ("[1, 2]", "(row)", "JSON object"),
        ('{"question": "q", "candidates": ["x"]}', "id", "expected a non-empty string id, got nothing"),
        ('{"id": "a", "question": "q", "candidates": []}', "candidates", "non-empty list"),
        ('{"id": "a", "question": "", "candidates": ["x"]}', "question", "expected a question, got only whitespace"),
        ('{"id": "a", "question": "q", "candidates": ["x"], "qrel": {"5": 1}}', "qrel", "outside"),
        (
            '{"id": "a", "question": "q", "candidates": ["x"], "qrel": {"zero": 1}}',
            "qrel",
            "'zero' is not a candidate index",
        ),
        (
            '{"uuid": "u", "messages": [{"role": "user", "content": "no candidates here"}]}',
            "messages",
            "no message holds",
        ),
        ('{"uuid": "u", "messages": [{"role": "user"}]}', "messages[0].content", "got nothing"),
        (
            '{"uuid": "u", "messages": [{"role": "user", "content": "[Chunk Index 0] text"}]}',
            "messages[0].content",
            "Question:",
        ),
    ],
)
def test_bad_rows_name_their_line_and_field(line, field, fragment):
    with pytest.raises(RowError) as err:
        parse_row(line, 7)
    assert err.value.line == 7 and err.value.field == field and fragment in err.value.message
    assert str(err.value).startswith(f"line 7, field '{field}'")


def test_a_bad_row_does_not_stop_the_batch_and_gzip_is_detected():
    good = json.dumps({"id": "a", "question": "q?", "candidates": ["x"]})
    text = f"{good}\n\nnot json\n{good.replace('a', 'b', 1)}".encode()
    for data in (text, gzip.compress(text)):
        items = list(read_queries(io.BytesIO(data)))
        assert [type(i) for i in items] == [Query, RowError, Query]
        assert items[1].line == 3  # blank lines keep their numbers


def test_lines_split_across_read_blocks():
    data = b"".join(b'{"id": "%d", "question": "q", "candidates": ["x"]}\n' % i for i in range(50))
    assert [n for n, _ in iter_lines(io.BytesIO(data), block=7)] == list(range(1, 51))


def test_split_prompt_round_trips_our_own_prompts():
    from prism.ranking import prompts

    for task, cands in (("documents", list(FILING_TYPES)), ("chunks", ["alpha\nbeta", "gamma", "Task: not the end"])):
        for variant, layout in product(("p1", "p2", "p3", "p4"), ("question_first", "question_last")):
            shots = "\nWorked examples from similar questions (question, then the right answer):\n- Why? -> [1]\n"
            for examples in ("", shots):
                messages = prompts.load(task, variant, layout).messages("What is it?", cands, 2, examples)
                assert split_prompt(messages[1]["content"]) == (task, "What is it?", cands)
                if examples:  # a query's own examples never sit in the shared prefix of question_last
                    assert (examples in messages[0]["content"]) == (layout == "question_first")
                    assert (examples in messages[1]["content"]) == (layout == "question_last")


def test_a_documents_row_must_rank_the_five_filing_types():
    row = {"id": "d1", "question": "Who is the CFO?", "candidates": ["10-K", "S-1"], "task": "documents"}
    with pytest.raises(RowError) as caught:
        parse_row(json.dumps(row), 7)
    assert (caught.value.line, caught.value.field) == (7, "candidates") and "S-1" in str(caught.value)
    assert parse_row(json.dumps(row | {"candidates": list(FILING_TYPES)}), 7).task == "documents"
