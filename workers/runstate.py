"""The read model of a run: its stored outcomes (prism/runs/outcomes.py), read incrementally.
Report and analysis build on it; nothing here writes."""

from __future__ import annotations

import json
from collections.abc import Iterable

import structlog
from pydantic import BaseModel

from prism.ingest.models import Filing
from prism.models import Failure, JobResult, Reference, Spent
from prism.runs.evidence import CorpusPart
from prism.runs.outcomes import RunOutcomes
from workers.corpus import Corpus
from workers.runfiles import Outcome, RunFiles, RunLayout
from workers.store import Store, get_model

log = structlog.get_logger("prism")


class RunState(RunOutcomes):
    """The stored results and failures of a run, read incrementally: each file once."""

    def __init__(self, store: Store, run_id: str):
        super().__init__(run_id)
        self.store, self.layout = store, RunLayout(run_id)
        self.files = RunFiles(store, run_id)
        self.qrels_read = False
        self.referenced: set[str] = set()  # the reference records and question plans read

    def poll(self) -> RunState:
        layout = self.layout
        folders: tuple[tuple[str, dict, type[BaseModel]], ...] = (
            (layout.folder(Outcome.DONE), self.results, JobResult),
            (layout.folder(Outcome.FAILED), self.failures, Failure),
            (layout.folder(Outcome.SKIPPED), self.failures, Failure),
            (layout.file("spent/"), self.spent, Spent),
        )
        listed: set[str] = set()
        for folder, seen, cls in folders:
            for key in self.store.keys(folder):
                listed.add(key)
                if key not in seen:
                    seen[key] = get_model(self.store, key, cls)
        # A skip marker goes once the query is enqueued again (resume) and gets its outcome.
        for key in [k for k, f in self.failures.items() if f.kind == "skipped" and k not in listed]:
            del self.failures[key]
        self._references()
        if not self.qrels_read:  # written before any job
            self.qrels, self.qrels_read = list(self.files.qrels()), True
        return self

    def _references(self) -> None:
        """Results this run reuses from earlier runs (a question set's unchanged pairs), read from
        the run that stored them, as this run's, with no calls (nothing was spent on them here).
        A reused pair's outcome is its question's plan (state "reused", naming the result); runs
        before plans carried it kept a Reference record per pair."""
        reused = [
            (pair["query_id"], pair["reused"])
            for plan in self._plans()
            for pair in plan.get("pairs", [])
            if pair.get("state") == "reused" and pair.get("reused")
        ]
        for key in self.store.keys(self.layout.folder(Outcome.REUSED)):
            if key not in self.referenced:
                found = get_model(self.store, key, Reference)
                reused.append((found.query_id, found.result))
                self.referenced.add(key)
        for query_id, result in reused:
            mine = self.layout.result("chunks", query_id)
            if mine in self.results:
                continue
            try:
                earlier = get_model(self.store, result, JobResult)
            except KeyError:  # removed since it was planned: the pair stays pending, not an error
                log.warning("a reused result is gone", query_id=query_id, key=result)
                continue
            # Under this run's query id: the same question may have had another id there.
            update = {
                "run_id": self.layout.run_id,
                "query_id": query_id,
                "reused_from": earlier.reused_from or earlier.run_id,
            }
            self.results[mine] = earlier.model_copy(update=update | {"calls": []})

    def _plans(self) -> Iterable[dict]:
        """The questions' plans as the store holds them: gathered into questions.jsonl once the
        run is finalized, or one a question where nothing beside the store keeps them (each read
        once: a question's plan is written when its planning ends)."""
        yield from self.files.questions()
        for key in self.store.keys(self.layout.file("questions/")):
            if key not in self.referenced:
                self.referenced.add(key)
                yield json.loads(self.store.get(key))


def read_evidence(state: RunState, corpus: Corpus, compared: bool = True) -> tuple[list[dict], list[dict], CorpusPart]:
    """What the evidence is made from: the run's questions and plan rows, and what they need of
    the corpus: the heads of the filings its plan and qrels name; whole, the filings of results
    from before results carried their citations and, where compared, every filing of a compared
    question (its earlier ones too). Each read once."""
    questions, plan = list(state.files.questions()), list(state.files.plan())
    legacy = {r.query_id for r in state.results.values() if r.task == "chunks" and r.uncited}
    named = {row["filing"] for row in plan if row.get("filing")} | {r["filing"] for q in questions for r in q["qrels"]}
    asked = {q["question_id"] for q in questions if compared and q.get("compare")}
    whole = {
        (row["filing"], row["version"])
        for row in plan
        if row.get("filing") and (row["question_id"] in asked or row["query_id"] in legacy)
    }
    heads = {fid: corpus.head(fid) for fid in sorted(named)}
    return questions, plan, CorpusPart(heads, {key: _filing(corpus, key) for key in sorted(whole)})


def _filing(corpus: Corpus, key: tuple[str, str]) -> Filing | None:
    try:
        return corpus.get_filing(*key)
    except KeyError:
        return None
