"""`prism run`, `prism enqueue` and `prism resume`: a run planned, enqueued and (unless told not
to) watched to its end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from producer.commands.common import (
    CorpusOpt,
    InputArg,
    QuestionsOpt,
    RunIdOpt,
    TimeoutOpt,
    WaitOpt,
    console,
    finish,
)
from producer.flags import flags, settings_with
from producer.spec import RunError, RunSpec
from producer.summary import print_start
from workers import logs
from workers.settings import Settings

if TYPE_CHECKING:
    from producer.runs import Runs

FreshOpt = Annotated[
    bool, typer.Option("--fresh", help="Rank every query, even those an earlier run ranked with the same job id.")
]
NewOpt = Annotated[
    bool,
    typer.Option(
        "--new",
        help="Nightly: start from the last run over --corpus; questions with nothing new in scope are reused at $0.",
    ),
]


@flags("run")
def run(
    input: InputArg = None,
    run_id: RunIdOpt = None,
    questions: QuestionsOpt = None,
    corpus: CorpusOpt = None,
    new: NewOpt = False,
    fresh: FreshOpt = False,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = None,
    **options: Any,
) -> None:
    """Plan, enqueue, wait with a progress bar, write the report and print a summary.

    A question set over a corpus: --questions Q --corpus C (the main job: its evidence table).
    Or INPUT: benchmark rows, a JSONL file or a folder or s3:// prefix (ending in '/') of them.
    With neither, the bundled EDGAR filings and their questions. A run id that already has
    results ranks only what it is missing. Exits 0 complete, 3 complete with failures, 1 failed,
    4 budget spent, 5 incomplete, 6 interrupted.
    """
    settings = settings_with(options)
    runs = open_runs(settings)
    spec = run_spec(settings, input, questions, corpus, run_id, fresh, new)
    print_start(console, settings, spec, questions or input or spec.input)
    finish(runs.start(spec, wait, timeout), wait)


@flags("enqueue")
def enqueue(
    input: InputArg = None,
    run_id: RunIdOpt = None,
    questions: QuestionsOpt = None,
    corpus: CorpusOpt = None,
    new: NewOpt = False,
    fresh: FreshOpt = False,
    **options: Any,
) -> None:
    """Plan and enqueue a run on the fleet; print its run id and return (`prism status` follows it)."""
    run(input, run_id, questions, corpus, new, fresh, wait=False, **options)


@flags("resume")
def resume(
    run_id: str,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = None,
    failed: Annotated[
        bool,
        typer.Option("--failed", help="Also run the run's failed jobs again; their new outcomes replace the failures."),
    ] = False,
    **options: Any,
) -> None:
    """Enqueue what a run is missing (lost jobs, or those its budget stopped; with --failed, its
    failed ones too) and wait for it. The input and the config are the run's own; --budget-usd
    raises its cap. Exits as `prism run` does."""
    settings = settings_with(options)
    given = options.get("budget_usd")
    finish(
        open_runs(settings).resume(
            run_id, settings.results, settings.budget_usd if given else None, wait, timeout, failed
        ),
        wait,
    )


def run_spec(
    settings: Settings,
    input: str | None,
    questions: str | None,
    corpus: str | None,
    run_id: str | None,
    fresh: bool,
    new: bool,
) -> RunSpec:
    """What the run is asked to do, checked: its input, its config with the models it pins, and
    for `--new` the run it starts from."""
    from producer.config import resolved_config
    from producer.reader import check_run_id, new_run_id

    if (questions is None) != (corpus is None):
        raise RunError("--questions and --corpus go together: a question set runs over a corpus")
    if questions is not None and input is not None:
        raise RunError(f"{input}: give INPUT or --questions, not both")
    if new and corpus is None:
        raise RunError("--new goes with --questions and --corpus: it starts from the last run over a corpus")
    if input is None and questions is None:
        from producer.sample import ingest_sample

        questions, corpus = ingest_sample(settings, console)
    config = resolved_config(settings, console.print)
    spec = RunSpec(
        run_id=check_run_id(run_id) if run_id else new_run_id(),
        input=questions or input or "",
        results=settings.results,
        config=config,
        reuse=not fresh,
        corpus=corpus,
    )
    return _since(spec, settings) if new else spec


def _since(spec: RunSpec, settings: Settings) -> RunSpec:
    """The run `--new` starts from: the last complete run over the corpus; where its folder is
    gone (pruned, a lifecycle rule, by hand), the newest complete one that is still there."""
    from dataclasses import replace

    from prism.runs.retention import newest_complete
    from workers.ledger import last_over
    from workers.retention import run_entries
    from workers.runfiles import RunFiles
    from workers.store import open_store

    assert spec.corpus is not None
    store = open_store(settings.results, settings)
    last = last_over(store, spec.corpus)
    if last is not None and RunFiles(store, last).exists():
        console.print(f"--new: starting from run {last}, the last complete run over {spec.corpus}")
        return replace(spec, since=last)
    found = newest_complete(r for r in run_entries(store) if r.corpus == spec.corpus).get(spec.corpus)
    gone = f"the last complete run over {spec.corpus}, {last}, is gone" if last else ""
    if found is None:
        said = f"{gone} and no earlier complete run is left" if gone else f"no complete earlier run over {spec.corpus}"
        console.print(f"--new: {said} in {settings.results}; every question is planned")
        return replace(spec, since=None)
    console.print(
        f"--new: {gone or 'the last run over ' + spec.corpus + ' is not recorded'}; starting from run {found.run_id}"
    )
    return replace(spec, since=found.run_id)


def open_runs(settings: Settings) -> Runs:
    """The run lifecycle on a fleet (embedded: in this process)."""
    from producer.runs import Runs

    logs.configure(settings.command_log_level)  # its flags may set another broker than the environment
    return Runs(settings, console)
