"""``prism``: the commands (producer/commands/), put together, and the one place that turns what
they raise into one line and an exit status. The run lifecycle is producer/runs.py; options and
their flags are declared once (prism/options.py, producer/flags.py)."""

from __future__ import annotations

import gc
import os
import sys

import typer

from producer.commands import corpus, estimate, fetch, models, report, run, runs, view
from producer.commands.common import console
from producer.spec import RunError
from workers import logs
from workers.settings import SettingsProblem, load_settings, named

app = typer.Typer(
    help="Rank financial filings for questions with an LLM fleet (the PRISM method).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: docstrings rewrapped, brackets shown as written
)
app.command()(run.run)
app.command()(run.enqueue)
app.command()(run.resume)
app.command()(estimate.estimate)
app.command()(fetch.fetch)
app.command()(corpus.ingest)
app.command()(corpus.sample)
app.command()(report.status)
app.command()(report.report)
app.command(name="eval")(report.evaluate)
app.command()(view.view)
app.command()(models.exporter)
app.add_typer(runs.runs_app, name="runs")
app.add_typer(corpus.corpus_app, name="corpus")
app.add_typer(models.prior_app, name="prior")
app.add_typer(models.icl_app, name="icl")


def main() -> None:
    """Every error a user can cause ends in one line and exit status 2 (1 for a failed run);
    anything else in one line too, with the traceback only at PRISM_LOG_LEVEL=DEBUG."""
    try:
        _main()
    finally:
        # The process is ending: CPython's teardown would walk every object it holds for cycles,
        # several times over (~0.2 s of each command); their memory goes back with the process.
        gc.freeze()


def _main() -> None:
    _configure_logs()
    try:
        code = app(standalone_mode=False)  # returns the exit status of typer.Exit and --help
    except _user_errors() as err:
        _fail(str(err), 2)
    except _raised_by("botocore.exceptions", "NoCredentialsError"):
        _fail("no AWS credentials for the S3 store: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)", 2)
    except _raised_by("botocore.exceptions", "ClientError", "BotoCoreError") as err:
        _fail(f"the S3 store refused: {err} ({named('results')}, {named('s3_endpoint_url')})", 2)
    except _raised_by("redis", "RedisError") as err:
        _fail(f"Redis is not reachable: {err} ({named('broker_url')}, {named('redis_url')})", 2)
    except typer.Abort:
        _fail("aborted", 130)
    except typer.TyperException as err:  # a bad flag or argument: typer's own message
        show = getattr(err, "show", None)
        if callable(show):
            show()
            raise SystemExit(getattr(err, "exit_code", 2)) from None
        _fail(str(err), 2)
    except KeyboardInterrupt:
        _fail("interrupted; `prism resume RUN_ID` goes on where the run stopped", 130)
    except Exception as err:  # noqa: BLE001 - no traceback reaches a user unless asked for
        if os.environ.get(named("log_level"), "").upper() == "DEBUG":
            raise
        _fail(f"{type(err).__name__}: {err} (set {named('log_level', 'DEBUG')} for the traceback)", 1)
    sys.exit(code if isinstance(code, int) else 0)


def _configure_logs() -> None:
    """Every command logs the same way (workers/logs.py), at the level its settings give; with a bad
    setting, at WARNING until the command names it."""
    try:
        level = load_settings().command_log_level
    except SettingsProblem:
        level = "WARNING"
    logs.configure(level)


def _user_errors() -> tuple[type[Exception], ...]:
    """The errors a user's input or settings cause; imported only once something is raised, since
    two live beside heavy modules (the example index, the prior) that most commands never load."""
    from prism.datasets import InputFileError, RowError
    from prism.ranking.icl import ExampleStoreError
    from prism.ranking.prior import PriorModelError

    return (SettingsProblem, RunError, ExampleStoreError, PriorModelError, RowError, InputFileError)


def _raised_by(module: str, *names: str) -> tuple[type[BaseException], ...]:
    """Those error classes of ``module`` where it was loaded: a command that never loaded it (a
    local run has no S3 client; an embedded one no Redis) cannot have raised them."""
    loaded = sys.modules.get(module)
    return tuple(getattr(loaded, name) for name in names) if loaded else ()


def _fail(message: str, status: int) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False)
    sys.exit(status)
