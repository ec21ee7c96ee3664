"""A run's outcomes as plain data (its results, failures, budget skips and the calls they paid
for, with the qrels it is judged against) and what they add up to: cost per run, task, stage,
model, tier and job; quality, latency and tokens per task. workers/runstate.py reads them from a
run's store; nothing here reads or writes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal

from pydantic import BaseModel

from prism.models import CallRecord, Failure, JobResult, Spent
from prism.ranking.metrics import evaluate, evidence_precision_recall, exact_match, five_numbers, token_f1


class RunOutcomes:
    """A run's outcomes, by store key; ``qrels`` are its benchmark rows' judgements (none for a
    question set, whose are in its questions)."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.results: dict[str, JobResult] = {}
        self.failures: dict[str, Failure] = {}  # input errors, failed jobs and budget skips
        self.spent: dict[str, Spent] = {}
        self.qrels: list[dict] = []

    def _without_result(self, kind: str) -> list[Failure]:
        done = {(r.task, r.query_id) for r in self.results.values()}
        return [f for f in self.failures.values() if f.kind == kind and (f.task, f.query_id) not in done]

    @property
    def job_failures(self) -> list[Failure]:
        """Failed jobs; a job that failed once and then succeeded on redelivery counts as done."""
        return self._without_result("job")

    @property
    def skipped(self) -> list[Failure]:
        """Jobs the run's budget stopped: pending, not failed."""
        return self._without_result("skipped")

    @property
    def input_failures(self) -> list[Failure]:
        return [f for f in self.failures.values() if f.kind == "input"]

    @property
    def finished(self) -> int:
        """Jobs with an outcome for now: done, failed, or stopped by the budget."""
        return len(self.results) + len(self.job_failures) + len(self.skipped)

    def calls(self) -> Iterable[tuple[str, str, CallRecord]]:
        """Every paid call of the run, once: in results, failures, skips and duplicate runs; the
        run's own (its system-prompt check) under the task "run"."""
        holders: list[JobResult | Spent | Failure] = [
            *self.results.values(),
            *self.spent.values(),
            *self.job_failures,
            *self.skipped,
        ]
        for h in holders:
            for c in h.calls:
                yield h.query_id or "", h.task or "run", c


class CostSummary(BaseModel):
    calls: int = 0
    attempts: int = 0
    failed_calls: int = 0
    cached_calls: int = 0  # answered from the response cache, at $0
    throttled: int = 0  # attempts refused with 429
    timeouts: int = 0  # attempts that timed out (the provider may have billed them)
    timed_out_prompt_tokens: int = 0  # what those attempts sent: possibly billed, in no usage reported
    unpriced_calls: int = 0  # cost unknown, not zero: no price, no usage, or a timed-out attempt
    prompt_token_gaps: int = 0  # calls whose server counted far fewer prompt tokens than were sent
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # part of completion_tokens
    usd: Decimal = Decimal(0)  # priced calls only: with any unpriced call the total is unknown
    input_usd: Decimal = Decimal(0)  # the prompt side of usd
    cache_saved_usd: Decimal = Decimal(0)  # cached tokens against the full input rate
    tier_saved_usd: Decimal = Decimal(0)  # flex or batch against standard prices
    response_cache_saved_usd: Decimal = Decimal(0)  # answers reused, at what their first calls cost
    usd_known: bool = True
    llm_seconds: float = 0.0

    def add(self, call: CallRecord) -> None:
        self.calls += 1
        self.attempts += call.attempts
        self.throttled += call.throttled
        self.timeouts += call.timeouts
        self.timed_out_prompt_tokens += call.timed_out_prompt_tokens
        self.failed_calls += call.error is not None
        self.cached_calls += call.cached
        unknown = call.usd is None or call.timeouts > 0
        self.unpriced_calls += unknown
        self.usd_known = self.usd_known and not unknown
        self.prompt_token_gaps += call.prompt_token_gap is not None
        self.prompt_tokens += call.usage.prompt_tokens
        self.cached_tokens += call.usage.cached_tokens
        self.completion_tokens += call.usage.completion_tokens
        self.reasoning_tokens += call.usage.reasoning_tokens
        self.usd += call.usd or 0
        self.input_usd += call.input_usd or 0
        self.cache_saved_usd += call.cache_saved_usd
        self.tier_saved_usd += call.tier_saved_usd
        self.response_cache_saved_usd += call.response_cache_saved_usd
        self.llm_seconds += call.latency_s

    def usd_text(self) -> str:
        return usd_text(self.model_dump(mode="json"))


def usd_text(summary: dict) -> str:
    """A cost as a person should read it: never $0 when some of it is unknown."""
    if summary.get("usd_known", True):
        return f"${Decimal(summary['usd']):.4f}"
    priced = Decimal(summary["usd"])
    known = f"; ${priced:.4f} for the priced calls" if priced else ""
    return f"unknown ({summary['unpriced_calls']} unpriced call(s){known})"


def cost_report(outcomes: RunOutcomes) -> dict:
    """Per run, per task type, per stage, per model and per job; the totals are the sums of the
    per-call records in the result and failure files."""
    total = CostSummary()
    by_task: dict[str, CostSummary] = {}
    by_stage: dict[str, CostSummary] = {}
    by_model: dict[str, CostSummary] = {}
    by_tier: dict[str, CostSummary] = {}
    by_job: dict[tuple[str, str], CostSummary] = {}
    for query_id, task, call in outcomes.calls():
        for summary in (
            total,
            by_task.setdefault(task, CostSummary()),
            by_stage.setdefault(call.stage, CostSummary()),
            by_model.setdefault(call.model, CostSummary()),
            by_tier.setdefault(call.tier, CostSummary()),
            by_job.setdefault((task, query_id), CostSummary()),
        ):
            summary.add(call)

    def dump(groups: dict) -> dict:
        return {k: v.model_dump(mode="json") for k, v in sorted(groups.items())}

    cascade = _cascade_savings(outcomes, by_stage.get("documents"))
    return {
        "run_id": outcomes.run_id,
        "savings": cascade,
        # From the recorded usage: the calls made at list price (standard tier, nothing cached),
        # and what each lever took off it: the provider's prompt cache against the full input
        # rate, the service tier against standard prices, the response cache (answers reused)
        # at what their first calls' usage costs now, the document prior at the mean LLM query.
        "savings_by_lever": {
            "list_usd": str(total.usd + total.cache_saved_usd + total.tier_saved_usd),
            "provider_cache_usd": str(total.cache_saved_usd),
            "service_tier_usd": str(total.tier_saved_usd),
            "response_cache_usd": str(total.response_cache_saved_usd),
            "document_prior_usd": cascade["usd_saved_estimate"] if cascade else None,
        },
        "total": total.model_dump(mode="json"),
        "by_task": dump(by_task),
        "by_stage": dump(by_stage),
        "by_model": dump(by_model),
        "by_tier": dump(by_tier),
        "jobs": [{"task": t, "query_id": q, **s.model_dump(mode="json")} for (t, q), s in sorted(by_job.items())],
    }


def _cascade_savings(outcomes: RunOutcomes, document_calls: CostSummary | None) -> dict | None:
    """Document queries the prior answered instead of the LLM, and what LLM-only would have
    paid for them (at this run's mean paid cost per LLM document query)."""
    routed = [
        r.ranking.answered_by for r in outcomes.results.values() if r.task == "documents" and r.ranking.answered_by
    ]
    if not routed:
        return None
    avoided, asked = routed.count("prior"), routed.count("llm") + routed.count("fuse")
    mean = document_calls.usd / asked if document_calls and asked and document_calls.usd_known else None
    return {
        "llm_calls_avoided": avoided,
        "llm_calls_made": asked,
        "usd_saved_estimate": str(mean * avoided) if mean is not None else None,
    }


def run_metrics(outcomes: RunOutcomes, k: int = 5) -> dict[str, dict[str, float]]:
    """NDCG@k, MRR@k, MAP@k per task and over all queries, where the run has qrels."""
    qrels = {row["query_id"]: {int(i): g for i, g in row["qrel"].items()} for row in outcomes.qrels}
    if not qrels:
        return {}
    rankings = {(r.task, r.query_id): r.ranking.indices for r in outcomes.results.values()}
    tasks = {q: t for t, q in rankings}
    tasks |= {f.query_id: f.task for f in outcomes.job_failures if f.query_id and f.task}
    out = {}
    for task in ("documents", "chunks"):
        judged = {q: rel for q, rel in qrels.items() if tasks.get(q) == task}
        if judged:
            out[task] = evaluate({q: rankings[(task, q)] for q in judged if (task, q) in rankings}, judged, k)
    if len(out) > 1:
        out["all"] = evaluate({q: rankings[(tasks[q], q)] for q in qrels if (tasks.get(q), q) in rankings}, qrels, k)
    return out


TASKS = ("documents", "chunks")


def summarize(outcomes: RunOutcomes) -> dict:
    """Quality, latency (per job, first call to stored result), tokens and USD of one run."""
    metrics = run_metrics(outcomes)
    if evidence := evidence_metrics(outcomes):
        metrics["evidence"] = evidence
    cost = cost_report(outcomes)
    latency, tokens, usd = {}, {}, {}
    for task in TASKS:
        results = [r for r in outcomes.results.values() if r.task == task and not r.reused_from]
        if not results:
            continue
        latency[task] = five_numbers([(r.finished_at - r.started_at).total_seconds() for r in results])
        latency[task]["jobs"] = len(results)
        group = cost["by_task"].get(task, {})
        prompt, completion = group.get("prompt_tokens", 0), group.get("completion_tokens", 0)
        tokens[task] = {
            "prompt": prompt,
            "completion": completion,
            "prompt_mean": prompt / len(results),
            "completion_mean": completion / len(results),
        }
        spent = Decimal(group.get("usd", "0"))
        usd[task] = {
            "usd": float(spent),
            "usd_per_1000_queries": float(spent * 1000 / len(results)),
            "unpriced_calls": group.get("unpriced_calls", 0),
        }
    return {"metrics": metrics, "latency_s": latency, "tokens": tokens, "cost": usd}


def evidence_metrics(outcomes: RunOutcomes) -> dict | None:
    """Evidence precision and recall against the qrels, answer EM and token F1 against the
    reference answers, over the chunk results that carry evidence."""
    truth = {row["query_id"]: row for row in outcomes.qrels}
    if not truth:
        return None
    scores = defaultdict(list)
    for r in outcomes.results.values():
        details = r.ranking.details
        if r.task != "chunks" or "evidence" not in details or r.query_id not in truth:
            continue
        qrel = {int(i): g for i, g in truth[r.query_id]["qrel"].items()}
        precision, recall = evidence_precision_recall(details["evidence"], qrel)
        scores["precision"].append(precision)
        scores["recall"].append(recall)
        if reference := truth[r.query_id].get("answer"):
            scores["exact_match"].append(exact_match(details.get("answer"), reference))
            scores["token_f1"].append(token_f1(details.get("answer"), reference))
    if not scores:
        return None
    return {"queries": len(scores["precision"])} | {k: sum(v) / len(v) for k, v in scores.items()}
