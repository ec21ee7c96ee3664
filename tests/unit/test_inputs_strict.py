"""Every class of bad input ends as one error at its line and field, or one error for its file,
and the good lines around it still come through."""

import gzip
import json
from pathlib import Path

import pytest

from prism.datasets import MAX_DEPTH, InputFileError, Item, RowError, RowWarning, load_queries, read_input
from prism.models import FILING_TYPES, Query
from producer.plan import input_files
from workers.settings import Settings


def good(query_id: str) -> bytes:
    return json.dumps({"id": query_id, "question": "What?", "candidates": ["x", "y"], "qrel": {"1": 2}}).encode()


def native(**fields) -> bytes:
    row = {"id": "bad", "question": "What?", "candidates": ["x", "y"]} | fields
    return json.dumps({k: v for k, v in row.items() if v is not ...}).encode()


def prompt_row(content: str, **fields) -> bytes:
    return json.dumps({"uuid": "bad", "messages": [{"role": "user", "content": content}]} | fields).encode()


def read(tmp_path: Path, *lines: bytes, name: str = "in.jsonl") -> list[Item]:
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return list(read_input(str(path), lambda: open(path, "rb")))


def the_error_between_good_lines(tmp_path: Path, bad: bytes) -> RowError:
    """Line 2 is bad: lines 1 and 3 still load, and line 2 is one error."""
    items = read(tmp_path, good("first"), bad, good("last"))
    assert [type(i) for i in items] == [Query, RowError, Query], items
    assert [items[0].id, items[2].id] == ["first", "last"]  # type: ignore[union-attr]
    error = items[1]
    assert isinstance(error, RowError) and error.line == 2
    return error


# --- lines that cannot be decoded or parsed -----------------------------------------------------


def test_bad_utf8_names_the_byte_and_its_offset(tmp_path):
    bad = b'{"id": "a", "question": "caf\xe9?", "candidates": ["x"]}'
    error = the_error_between_good_lines(tmp_path, bad)
    assert error.field == "(row)" and error.message == "not valid UTF-8: byte 0xe9 at byte offset 28"


@pytest.mark.parametrize(
    "bad, fragment",
    [
        (b'{"id": "a", "question": "q", "candidates": [', "not valid JSON: Expecting value (column 45)"),
        (b'{"id": "a", "question": "q", "candidates": ["x"],}', "Expecting property name"),
        (b"{'id': 'a'}", "Expecting property name"),
        (b'{"id": "a", "question": "q", "candidates": ["x"]} trailing', "Extra data"),
        (b'{"id": "a", "question": "q", "candidates": ["x"], "n": ' + b"1" * 5000 + b"}", "digits"),
    ],
)
def test_invalid_json_of_any_kind_is_that_lines_error(tmp_path, bad, fragment):
    error = the_error_between_good_lines(tmp_path, bad)
    assert error.field == "(row)" and fragment in error.message


@pytest.mark.parametrize("value", [b'"text"', b"[1, 2]", b"null", b"7"])
def test_a_line_that_is_not_an_object(tmp_path, value):
    error = the_error_between_good_lines(tmp_path, value)
    assert error.field == "(row)" and error.message.startswith("expected a JSON object, got")


def test_nesting_is_bounded(tmp_path):
    def nested(depth: int) -> bytes:  # the row itself is the first level
        return native(extra=json.loads("[" * (depth - 1) + "]" * (depth - 1)))

    (item,) = read(tmp_path, nested(MAX_DEPTH))
    assert isinstance(item, RowError) and item.field == "extra"  # read at that depth; its key is unknown
    error = the_error_between_good_lines(tmp_path, nested(MAX_DEPTH + 1))
    assert error.field == "(row)" and error.message == f"nested {MAX_DEPTH + 1} levels deep; at most 64 are allowed"
    huge = b'{"id": "a", "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    error = the_error_between_good_lines(tmp_path, huge)
    assert error.field == "(row)" and "nested more than 64 levels" in error.message


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_name_their_field(tmp_path, number):
    bad = b'{"id": "a", "question": "q", "candidates": ["x", "y"], "qrel": {"0": 1, "1": %s}}' % number.encode()
    error = the_error_between_good_lines(tmp_path, bad)
    assert error.field == "qrel.1" and number in error.message
    bad = b'{"id": "a", "question": "q", "candidates": ["x", %s]}' % number.encode()
    assert the_error_between_good_lines(tmp_path, bad).field == "candidates[1]"


def test_a_repeated_key_is_refused_not_overwritten(tmp_path):
    error = the_error_between_good_lines(tmp_path, b'{"id": "a", "id": "b", "question": "q", "candidates": ["x"]}')
    assert error.field == "id" and "appears more than once" in error.message
    bad = b'{"id": "a", "question": "q", "candidates": ["x", "y"], "qrel": {"0": 1, "0": 2}}'
    assert the_error_between_good_lines(tmp_path, bad).field == "qrel.0"


def test_long_lines_a_utf8_signature_and_crlf_are_read(tmp_path):
    long = native(id="long", candidates=["word " * 1_000_000, "y"])
    items = read(tmp_path, b"\xef\xbb\xbf" + good("first") + b"\r", long, b"  \r", good("last"))
    assert [i.id for i in items if isinstance(i, Query)] == ["first", "long", "last"]
    assert [i.line for i in items] == [1, 2, 4]


# --- fields ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, field, message",
    [
        (native(id=...), "id", "expected a non-empty string id, got nothing (missing or null)"),
        (native(id=""), "id", "expected a non-empty string id, got an empty string"),
        (native(id=17), "id", "expected a non-empty string id, got an integer"),
        (native(id=" a"), "id", "the id ' a' has leading or trailing whitespace (ids are used as given)"),
        (native(question="  \n"), "question", "expected a question, got only whitespace"),
        (native(question=["q"]), "question", "expected a question, got a list"),
        (native(question=...), "question", "expected a question, got nothing (missing or null)"),
        (native(candidates=[]), "candidates", "expected a non-empty list of strings, got an empty list"),
        (native(candidates="x"), "candidates", "expected a non-empty list of strings, got a string"),
        (native(candidates=["x", 2]), "candidates[1]", "expected a string, got an integer"),
        (native(task="Documents"), "task", "expected one of documents, chunks, got 'Documents'"),
        (native(task=""), "task", "expected one of documents, chunks, got ''"),
        (native(answer=3), "answer", "expected a string, got an integer"),
        (native(n_chunks=3), "n_chunks", "is 3 but the row holds 2 candidates"),
    ],
)
def test_fields_are_checked_not_coerced(tmp_path, bad, field, message):
    error = the_error_between_good_lines(tmp_path, bad)
    assert (error.field, error.message) == (field, message)
    assert str(error) == f"line 2, field '{field}': {message}"


@pytest.mark.parametrize(
    "qrel, field, fragment",
    [
        ([2, 0], "qrel", "got a list"),
        ({"0": True}, "qrel.0", "got True (a boolean)"),
        ({"0": 1.0}, "qrel.0", "got 1.0 (a number)"),
        ({"0": -1}, "qrel.0", "got -1"),
        ({"0": "1"}, "qrel.0", "got '1' (a string)"),
        ({"0": "one"}, "qrel.0", "got 'one' (a string)"),
        ({"-1": 1}, "qrel", "the key '-1' is not a candidate index"),
        ({" 1": 1}, "qrel", "the key ' 1' is not a candidate index"),
        ({"1.0": 1}, "qrel", "the key '1.0' is not a candidate index"),
        ({"2": 1}, "qrel", "the key '2' is outside the candidates 0..1"),
        ({"1": 1, "01": 2}, "qrel", "the keys '1' and '01' both name candidate 1"),
    ],
)
def test_grades_are_non_negative_integers_at_candidate_indices(tmp_path, qrel, field, fragment):
    error = the_error_between_good_lines(tmp_path, native(qrel=qrel))
    assert error.field == field and fragment in error.message


def test_optional_fields_may_be_null_and_a_task_may_be_given(tmp_path):
    (query,) = read(tmp_path, native(qrel=None, task="documents", answer=None, candidates=list(FILING_TYPES)))
    assert isinstance(query, Query) and query.qrel is None and query.task == "documents" and query.answer is None
    (query,) = read(tmp_path, native(qrel={}, question=" What? "))
    assert isinstance(query, Query) and query.qrel == {} and query.question == " What? "


def test_an_unknown_key_fails_its_line_naming_the_likely_key_and_the_rest_runs(tmp_path):
    items = read(tmp_path, native(qrels={"1": 1}), native(Qrel={"0": 1}), native(colour="blue"), good("last"))
    assert [type(i) for i in items] == [RowError, RowError, RowError, Query]
    assert [(e.line, e.field, e.query_id) for e in items[:3]] == [
        (1, "qrels", "bad"),
        (2, "Qrel", "bad"),
        (3, "colour", "bad"),
    ]
    assert str(items[0]) == "line 1, field 'qrels': unknown key (did you mean 'qrel'?)"
    assert items[1].message == "unknown key (did you mean 'qrel'?)"
    assert items[2].message.startswith("unknown key (expected one of ") and "'" not in items[2].message


def test_a_misspelled_key_is_the_lines_error_before_the_missing_field_it_stood_for(tmp_path):
    items = read(tmp_path, native(candidate=["x"], candidates=...))
    assert [(type(i), i.field) for i in items] == [(RowError, "candidate")]
    assert "did you mean 'candidates'?" in items[0].message


def test_empty_candidates_and_answers_are_kept_and_reported(tmp_path):
    items = read(tmp_path, native(candidates=["x", " ", "", "y"], answer=" "))
    assert [(type(i), i.field) for i in items[:2]] == [(RowWarning, "candidates"), (RowWarning, "answer")]
    assert items[0].message == "2 candidate(s) hold no text (index 1, 2); they are ranked as they are"
    query = items[2]
    assert isinstance(query, Query) and query.candidates == ["x", " ", "", "y"] and query.answer is None


# --- FinAgentBench prompts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, message",
    [
        (
            "Question: q?\nText chunks:\n[Chunk Index 0] a\n\n[Chunk Index 1] b\n\n[Chunk Index 3] d",
            "the marker '[Chunk Index 2]' is missing (before index 3)",
        ),
        (
            "Question: q?\nText chunks:\n[Chunk Index 0] a\n\n[Chunk Index 1] b\n\n[Chunk Index 1] c",
            "the marker '[Chunk Index 1]' appears twice (after index 1)",
        ),
        (
            "Question: q?\nTypes:\n[Document Index 0] DEF14A\n\n[Document Index 2] 10-Q",
            "the marker '[Document Index 1]' is missing (before index 2)",
        ),
        ("Question:\nText chunks:\n[Chunk Index 0] a", "the 'Question:' before the candidates is empty"),
        ("Question:  \n\n[Chunk Index 0] a", "the 'Question:' before the candidates is empty"),
    ],
)
def test_prompt_markers_must_count_up_and_the_question_be_there(tmp_path, content, message):
    error = the_error_between_good_lines(tmp_path, prompt_row(content))
    assert (error.field, error.message) == ("messages[0].content", message)


def test_prompt_rows_check_their_ids_task_and_chunk_count(tmp_path):
    content = "Question: q?\nText chunks:\n[Chunk Index 0] a\n\n[Chunk Index 1] b"
    cases = [
        (prompt_row(content, _id="other"), "_id", "differs from 'uuid' ('bad'); give the row one id"),
        (prompt_row(content, task="documents"), "task", "is 'documents' but the prompt lists chunks"),
        (prompt_row(content, n_chunks=3), "n_chunks", "is 3 but the row holds 2 candidates"),
        (
            prompt_row(content, uuid=" u"),
            "uuid",
            "the id ' u' has leading or trailing whitespace (ids are used as given)",
        ),
    ]
    for bad, field, message in cases:
        error = the_error_between_good_lines(tmp_path, bad)
        assert (error.field, error.message) == (field, message)
    items = read(tmp_path, prompt_row(content, question="another question", n_chunks=2))
    assert [(type(i), i.field) for i in items[:1]] == [(RowWarning, "question")]
    assert isinstance(items[1], Query) and items[1].question == "q?" and items[1].candidates == ["a", "b"]


# --- files ---------------------------------------------------------------------------------------


def rows_text(n: int) -> bytes:
    return b"".join(good(f"q{i}") + b"\n" for i in range(n))


def read_until_error(path: Path) -> tuple[list[Item], InputFileError]:
    items: list[Item] = []
    with pytest.raises(InputFileError) as err:
        for item in read_input(str(path), lambda: open(path, "rb")):
            items.append(item)
    assert "\n" not in str(err.value)
    return items, err.value


def test_a_missing_file_or_a_folder_is_one_error_naming_it(tmp_path):
    items, error = read_until_error(tmp_path / "nope.jsonl")
    assert items == [] and error.last_good_line == 0 and error.source == str(tmp_path / "nope.jsonl")
    assert str(error) == (
        f"Input file '{tmp_path / 'nope.jsonl'}' cannot be read: No such file or directory. No line of it was read."
    )
    _, error = read_until_error(tmp_path)
    assert error.reason == "Is a directory"


def test_a_truncated_gzip_keeps_the_lines_before_the_cut(tmp_path):
    whole = gzip.compress(rows_text(20_000))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    items, error = read_until_error(path)
    assert "the gzip archive is truncated" in error.reason
    assert len(items) == error.last_good_line > 1000  # every complete line before the cut, nothing after
    assert [i.id for i in items] == [f"q{i}" for i in range(len(items))]  # type: ignore[union-attr]
    assert f"Lines 1 to {error.last_good_line} were read; nothing after line {error.last_good_line} is." in str(error)


def test_a_corrupt_gzip_is_one_error_naming_the_file(tmp_path):
    whole = bytearray(gzip.compress(rows_text(20_000)))
    middle = len(whole) // 2
    whole[middle : middle + 64] = bytes(64)
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(bytes(whole))
    items, error = read_until_error(path)
    assert error.reason.startswith("the gzip archive is corrupt") and str(path) in str(error)
    # Damage inside a compressed block shows only at the archive's checksum: the lines before the
    # damage are whole, garbled ones after it are line errors, and the file still ends as an error.
    assert [i.id for i in items[:5000]] == [f"q{i}" for i in range(5000)]  # type: ignore[union-attr]
    assert 5000 < error.last_good_line <= 20_000
    path.write_bytes(b"\x1f\x8b" + b"not gzip at all")
    items, error = read_until_error(path)
    assert items == [] and error.reason.startswith("the gzip archive is corrupt")


def test_a_stream_that_breaks_mid_read_is_the_files_error(tmp_path):
    class Dropping:  # an object store body whose connection is reset after some bytes
        def __init__(self, data: bytes):
            self.data = data

        def read(self, size: int = -1) -> bytes:
            if not self.data:
                raise ConnectionResetError(104, "Connection reset by peer")
            chunk, self.data = self.data[:size], self.data[size:]
            return chunk

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    data = rows_text(3) + b'{"id": "partial'
    items: list[Item] = []
    with pytest.raises(InputFileError) as err:
        items.extend(read_input("s3://bucket/in.jsonl", lambda: Dropping(data)))  # type: ignore[arg-type,return-value]
    assert [i.line for i in items] == [1, 2, 3] and err.value.last_good_line == 3
    assert err.value.reason == "Connection reset by peer"


def test_load_queries_keeps_the_good_rows(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(good("a") + b"\nnot json\n" + good("b") + b"\n")
    assert [q.id for q in load_queries(path)] == ["a", "b"]
    assert [q.id for q in load_queries(path, limit=1)] == ["a"]


def test_input_file_names_match_case_insensitively(tmp_path):
    for name in ("a.JSONL", "b.jsonl.GZ", "c.NdJson", "d.txt", "e.jsonl.bak"):
        (tmp_path / name).write_bytes(good(name))
    (tmp_path / "folder.jsonl").mkdir()
    listed = input_files(str(tmp_path), Settings())
    assert [Path(p).name for p in listed] == ["a.JSONL", "b.jsonl.GZ", "c.NdJson"]
