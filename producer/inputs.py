"""Reading a run's input line by line: a question set's lines as Questions or what is wrong
with each, and a bad line or file as the Failure the run records."""

from __future__ import annotations

from collections.abc import Iterator

from prism.datasets import InputFileError, RowError
from prism.models import Failure
from prism.runs.questions import Question, read_questions
from workers.settings import Settings
from workers.store import open_input


def question_items(uri: str, settings: Settings) -> Iterator[Question | RowError | InputFileError]:
    """Each line of a question set as a Question or what is wrong with it (a file that cannot be
    read: once, after the lines read before the failure)."""
    try:
        with open_input(uri, settings) as stream:
            yield from read_questions(stream, uri)
    except InputFileError as err:
        yield err
    except OSError as err:
        yield InputFileError(uri, 0, err.strerror or str(err))


def invalid_failure(run_id: str, source: str, item: RowError | InputFileError) -> Failure:
    if isinstance(item, InputFileError):
        line = item.last_good_line or None
        return Failure(run_id=run_id, kind="input", error=str(item), line=line, source=source, field="(file)")
    return Failure(
        run_id=run_id,
        kind="input",
        error=f"{source}: {item}",
        query_id=item.query_id,
        line=item.line,
        source=source,
        field=item.field,
    )
