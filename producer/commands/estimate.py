"""`prism estimate`: what a run would cost, before any call."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from producer.commands.common import SAID_LINES, CorpusOpt, QuestionsOpt, console, count
from producer.flags import flags, settings_with
from producer.spec import RunError
from workers.settings import Settings

if TYPE_CHECKING:
    from prism.models import RunConfig
    from prism.runs.estimate import Estimate


@flags("estimate")
def estimate(
    input: Annotated[
        str | None, typer.Argument(help="A local JSONL rows file (plain or gzipped); or --questions Q --corpus C.")
    ] = None,
    questions: QuestionsOpt = None,
    corpus: CorpusOpt = None,
    reasoning_share: Annotated[
        float,
        typer.Option(
            min=0, help="Reasoning tokens expected per prompt token on top of that (PRISM's runs: about 0.18)."
        ),
    ] = 0.0,
    **options: Any,
) -> None:
    """USD of a run over INPUT, or of a question set over a corpus, before any call: per tier,
    with and without the provider's cache. Nothing is written and no LLM is called."""
    if (questions is None) != (corpus is None):
        raise RunError("--questions and --corpus go together: a question set is priced over a corpus")
    if questions is not None and input is not None:
        raise RunError(f"{input}: give INPUT or --questions, not both")
    if questions is None and input is None:
        raise RunError("give a rows file (INPUT), or a question set over a corpus (--questions Q --corpus C)")
    from producer.config import resolved_config

    settings = settings_with(options)
    config = resolved_config(settings, console.print)
    out = Console(soft_wrap=True)
    if questions is not None and corpus is not None:
        result = _question_set(out, questions, corpus, settings, config, reasoning_share)
    else:
        assert input is not None
        result = _rows(out, input, settings, config, reasoning_share)
    _print_usd(out, result)


def _question_set(
    out: Console, questions: str, corpus: str, settings: Settings, config: RunConfig, reasoning_share: float
) -> Estimate:
    from producer.estimate import estimate_questions

    outputs = config.expected_outputs(settings.llm_expected_output_tokens)
    found = estimate_questions(questions, corpus, settings, config, outputs, reasoning_share)
    result = found.estimate
    bad = f" ({count(len(found.bad_lines), 'bad line')}, not priced)" if found.bad_lines else ""
    earlier = f", {found.earlier_pairs} of them earlier filings to compare with" if found.earlier_pairs else ""
    out.print(
        f"{count(found.questions, 'question')} read from {questions}{bad}, {len(found.no_filing)} with no filing "
        f"in scope; {count(found.pairs, 'filing')} chosen (pairs, --filings {config.filings_per_question}{earlier}), "
        f"{count(result.segments, 'segment')}; {count(found.document_calls, 'document ranking call')} "
        f"({config.doc_ranker})",
        highlight=False,
    )
    for line in found.bad_lines[:SAID_LINES] + found.no_filing[:SAID_LINES]:
        out.print(f"  {line}", highlight=False)
    if max(len(found.bad_lines), len(found.no_filing)) > SAID_LINES:
        out.print(f"  (the first {SAID_LINES} of each)", highlight=False)
    if config.doc_ranker != "prior":
        out.print(
            f"filings chosen by the document prior's form scores: where the period does not settle the "
            f"choice, the {config.doc_ranker} ranking of the run may choose others",
            highlight=False,
        )
    out.print(f"layout {result.layout}, {settings.llm_expected_output_tokens} output tokens expected per request")
    return result


def _rows(out: Console, input: str, settings: Settings, config: RunConfig, reasoning_share: float) -> Estimate:
    from prism.llm.pricing import PriceTable
    from prism.runs.estimate import estimate as run_estimate
    from producer.estimate import read_rows

    if not Path(input).is_file():
        raise RunError(f"{input}: no such local file")
    queries, bad_rows = read_rows(input, config.limit)
    outputs = config.expected_outputs(settings.llm_expected_output_tokens)
    prices = PriceTable.load(settings.prices_file)
    result = run_estimate(queries, config, prices, outputs, settings.prompt_cache_key, reasoning_share=reasoning_share)
    expected = settings.llm_expected_output_tokens
    out.print(f"{result.queries} queries, layout {result.layout}, {expected} output tokens expected per request")
    if bad_rows:
        out.print(f"[yellow]{len(bad_rows)} bad lines, not priced; the first: {bad_rows[0]}[/yellow]", highlight=False)
    return result


def _print_usd(out: Console, result: Estimate) -> None:
    for stage, s in result.stages.items():
        out.print(
            f"{stage}: {s.calls} calls, {s.prompt_tokens} prompt tokens ({s.cached_tokens} cacheable), "
            f"{s.completion_tokens} output"
        )
    u = result.usd
    out.print(
        f"USD standard {float(u['standard']):.4f} (with the provider cache {float(u['standard_cached']):.4f}); "
        f"flex {float(u['flex']):.4f} (with the cache {float(u['flex_cached']):.4f}); "
        f"batch {float(u['batch']):.4f} (with the cache {float(u['batch_cached']):.4f})"
    )
    if result.unpriced_models:
        out.print(f"[yellow]no price for {', '.join(result.unpriced_models)}: left out of the USD figures[/yellow]")
