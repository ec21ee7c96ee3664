"""Does each endpoint's model read the system prompt? Checked when a run starts: some chat formats
(a base model behind llama.cpp's server, for one) drop it without a word, and then every ranking
follows the user message alone. Per-call token gaps hide this where the server's tokenizer counts
filing text higher than ours; two requests that differ only by the system prompt, compared by
the server's own counts, do not. A check is kept in the results store and stands for a day for
the same endpoint, model and system prompt, so a night of reruns asks once."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from prism.llm import PROMPT_GAP_SHARE, Deferred, Gateway, LlmError, recording
from prism.models import CallRecord, PromptCheck, RunConfig, Stage
from prism.ranking import prompts
from workers.store import Store, get_model, prompt_check_key, put_model

# Where the check's calls are kept in the run (as spent, outside any job), and under what query id.
CHECK_NAME = "system-prompt-check"
# The probe's user message, with the run's id: no response cache answers it.
PROBE_USER = "Run {run_id}: this request checks that the instructions above are read. Reply with OK."
KEPT = timedelta(days=1)  # a server's chat format changes with a deploy, not between a night's runs


def _system_prompt(config: RunConfig, stage: Stage) -> str:
    """The system prompt the stage sends (documents, or chunks for every other stage)."""
    template = (
        prompts.load("documents", config.doc_prompt)
        if stage == "documents"
        else prompts.load("chunks", config.chunk_prompt, config.prompt_layout)
    )
    return template.messages("", ["", ""], 1)[0]["content"]


def _probe(gateway: Gateway, check: PromptCheck, system: str, run_id: str) -> PromptCheck:
    try:
        user = PROBE_USER.format(run_id=run_id)
        with_system, without = gateway.prompt_counts(check.stages[0], check.model, system, user)
    except (LlmError, Deferred) as err:  # the run goes on; the check says why it was not made
        return check.model_copy(update={"error": str(err)})
    if with_system is None or without is None:
        return check.model_copy(update={"error": "the server reported no prompt-token usage"})
    dropped = with_system - without < PROMPT_GAP_SHARE * check.system_tokens
    return check.model_copy(update={"counted_with": with_system, "counted_without": without, "dropped": dropped})


def check_prompts(
    gateway: Gateway, config: RunConfig, run_id: str, store: Store
) -> tuple[list[PromptCheck], list[CallRecord]]:
    """One check per (endpoint, model) the run's chat stages call (one kept from the last day
    where there is one), and the calls made."""
    groups: dict[tuple[str, str], list[Stage]] = {}
    for stage in sorted(config.paid_stages() - {"embeddings"}):
        groups.setdefault((gateway.endpoint(stage).key, config.models[stage]), []).append(stage)
    checks = []
    with recording() as calls:
        for (endpoint, model), stages in groups.items():
            system = _system_prompt(config, stages[0])
            digest = hashlib.sha256(f"{endpoint}\n{model}\n{system}".encode()).hexdigest()[:24]
            key = prompt_check_key(digest)
            try:
                kept = get_model(store, key, PromptCheck)
                if kept.dropped is not None and kept.checked_at and datetime.now(UTC) - kept.checked_at < KEPT:
                    checks.append(kept.model_copy(update={"stages": stages}))
                    continue
            except KeyError:
                pass
            check = PromptCheck(
                endpoint=endpoint,
                model=model,
                stages=stages,
                system_tokens=gateway.counter.count(system),
                checked_at=datetime.now(UTC),
            )
            check = _probe(gateway, check, system, run_id)
            if check.dropped is not None:
                put_model(store, key, check)
            checks.append(check)
    return checks, calls
