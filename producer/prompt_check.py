"""Does each endpoint's model read the system prompt? Checked once when a run starts: some chat
formats (a base model behind llama.cpp's server, for one) drop it without a word, and then every
ranking follows the user message alone. Per-call token gaps hide this where the server's
tokenizer counts filing text higher than ours; two requests that differ only by the system
prompt, compared by the server's own counts, do not."""

from __future__ import annotations

from prism import prompts
from prism.llm import PROMPT_GAP_SHARE, Deferred, Gateway, LlmError
from prism.models import CallRecord, PromptCheck, RunConfig, Stage

# Where the check's calls are kept in the run (as spent, outside any job), and under what query id.
CHECK_NAME = "system-prompt-check"
# The probe's user message: one per run, so no response cache answers it.
PROBE_USER = "Run {run_id}: this request checks that the instructions above are read. Reply with OK."


def _system_prompt(config: RunConfig, stage: Stage) -> str:
    """The system prompt the stage sends (documents, or chunks for every other stage)."""
    template = (
        prompts.load("documents", config.doc_prompt)
        if stage == "documents"
        else prompts.load("chunks", config.chunk_prompt, config.prompt_layout)
    )
    return template.messages("", ["", ""], 1)[0]["content"]


def check_prompts(gateway: Gateway, config: RunConfig, run_id: str) -> tuple[list[PromptCheck], list[CallRecord]]:
    """One check per (endpoint, model) the run's chat stages call, and the calls it made."""
    from prism.llm import recording

    groups: dict[tuple[str, str], list[Stage]] = {}
    for stage in sorted(config.paid_stages() - {"embeddings"}):
        groups.setdefault((gateway.endpoint(stage).key, config.models[stage]), []).append(stage)
    checks = []
    with recording() as calls:
        for (endpoint, model), stages in groups.items():
            system = _system_prompt(config, stages[0])
            check = PromptCheck(
                endpoint=endpoint, model=model, stages=stages, system_tokens=gateway.counter.count(system)
            )
            try:
                with_system, without = gateway.prompt_counts(stages[0], model, system, PROBE_USER.format(run_id=run_id))
            except (LlmError, Deferred) as err:  # the run goes on; the check says why it was not made
                checks.append(check.model_copy(update={"error": str(err)}))
                continue
            if with_system is None or without is None:
                checks.append(check.model_copy(update={"error": "the server reported no prompt-token usage"}))
                continue
            dropped = with_system - without < PROMPT_GAP_SHARE * check.system_tokens
            checks.append(
                check.model_copy(update={"counted_with": with_system, "counted_without": without, "dropped": dropped})
            )
    return checks, calls
