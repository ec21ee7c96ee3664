"""A run's folder: its layout, described here once, and the one class that writes it (the ledger
writes the jobs' outcomes and the calls no outcome holds, through the same layout).

    runs/<run_id>/manifest.json                    the run: options, status, counts, timings (RunManifest)
    runs/<run_id>/plan.jsonl                       a row per query (rows), or per question's job (a question set)
    runs/<run_id>/qrels.jsonl                      the rows' qrels, for the metrics
    runs/<run_id>/warnings.jsonl                   lines that ran with something said about them
    runs/<run_id>/questions-enqueued.jsonl         the questions the producer enqueued, in input order
    runs/<run_id>/questions.jsonl                  each question's plan, gathered once the run ends
    runs/<run_id>/cost.json, summary.json, metrics.json, evidence_metrics.json, estimate.json,
        failures.jsonl, pending.jsonl, report.md and its plots, evidence.csv, evidence.parquet
                                                   what the run came to (producer/report.py)
    runs/<run_id>/jobs.txt                         the job id of every result it holds, one a line: the
                                                   shared results (index/results/) a prune keeps for it
    runs/<run_id>/inputs/<name>.json               a chunk query's candidates, and their prepared inputs
    runs/<run_id>/batch/{pending,online,batches}/  a batch-mode run's requests and batches (workers/batches.py)
    -- written by the ledger (workers/ledger.py) --
    runs/<run_id>/questions/<name>.json            a question's plan, where no Redis (or memory) keeps it
    runs/<run_id>/results/<task>/<name>.json       a result                    (Outcome.DONE)
    runs/<run_id>/failures/<task>/<name>.json      a failure and its reason    (Outcome.FAILED)
    runs/<run_id>/skipped/<task>/<name>.json       stopped by the run's budget (Outcome.SKIPPED)
    runs/<run_id>/reused/<task>/<name>.json        an earlier run's result, by reference (Outcome.REUSED), in
                                                   runs made before a question's plan named its reused pairs
    runs/<run_id>/failures/input/<name>.json       a bad input row or file     (Outcome.INVALID)
    runs/<run_id>/spent/<id>.json                  calls no outcome holds (a second delivery, a batch's lines)

``<name>`` is :func:`safe_name` of the query id: any length, any characters; the id itself is
inside the record. Keys outside a run's folder are named in workers/store.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel

from prism.models import RunManifest, Task
from prism.runs.lifecycle import MOVES
from workers.store import Store, get_model, put_model, safe_name


class Outcome(StrEnum):
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"  # the run's budget stopped it: pending, not failed
    REUSED = "reused"  # done, by an earlier run's result (a Reference)
    INVALID = "invalid"  # a bad input row: never became a job
    PENDING = "pending"


class RunLayout:
    """The keys of one run's records."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.base = f"runs/{run_id}"

    def file(self, name: str) -> str:
        return f"{self.base}/{name}"

    def folder(self, outcome: Outcome) -> str:
        return f"{self.base}/{FOLDERS[outcome]}/"

    def outcome(self, outcome: Outcome, task: Task, query_id: str) -> str:
        return f"{self.folder(outcome)}{task}/{safe_name(query_id)}.json"

    def result(self, task: Task, query_id: str) -> str:
        return self.outcome(Outcome.DONE, task, query_id)

    def invalid(self, source: str, line: int) -> str:
        return f"{self.folder(Outcome.FAILED)}input/{safe_name(source)}-{line}.json"

    def question(self, question_id: str) -> str:
        return f"{self.base}/questions/{safe_name(question_id)}.json"

    def input(self, query_id: str) -> str:
        return f"{self.base}/inputs/{safe_name(query_id)}.json"

    def spent(self, name: str) -> str:
        return f"{self.base}/spent/{name}.json"

    def batch(self, kind: str, name: str = "") -> str:
        """A batch-mode run's records: pending/<key>, online/<key>, batches/<batch id>."""
        return f"{self.base}/batch/{kind}/" + (f"{name}.json" if name else "")

    @staticmethod
    def run_of(key: str) -> str:
        """The run a record's key belongs to."""
        return key.split("/")[1]


FOLDERS = {Outcome.DONE: "results", Outcome.FAILED: "failures", Outcome.SKIPPED: "skipped", Outcome.REUSED: "reused"}
ENDED = (Outcome.DONE, Outcome.FAILED, Outcome.REUSED)  # a job with one of these has its outcome


@dataclass(frozen=True)
class ReportFiles:
    """What a run came to, as the files of its report (made by producer/report.py)."""

    cost: dict
    summary: dict
    metrics: dict
    failures: list[str]  # failures.jsonl's lines
    pending: list[dict]
    text: str  # report.md
    images: dict[str, bytes]  # its plots, by file name
    estimate: dict | None = None
    evidence: tuple[bytes, bytes] | None = None  # evidence.csv, evidence.parquet
    evidence_metrics: dict | None = None
    jobs: list[str] = field(default_factory=list)  # the job ids of its results (jobs.txt)


class RunFiles:
    """One run's files in its store."""

    def __init__(self, store: Store, run_id: str):
        self.store, self.layout = store, RunLayout(run_id)
        self._status: str | None = None  # the manifest's, as last read or written here

    # -- the run --------------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether the run's folder still holds its manifest (a run's last file to go)."""
        return self.store.exists(self.layout.file("manifest.json"))

    def remove(self) -> int:
        """Remove the run's folder, its manifest last (a removal that dies midway leaves a folder
        the next prune finds and finishes); returns how many objects went."""
        keys = [k for k in self.store.keys(f"{self.layout.base}/") if k != self.layout.file("manifest.json")]
        self.store.delete_many(keys)
        self.store.delete_many([self.layout.file("manifest.json")])
        return len(keys) + 1

    def manifest(self) -> RunManifest:
        """KeyError when the run has none."""
        return get_model(self.store, self.layout.file("manifest.json"), RunManifest)

    def put_manifest(self, manifest: RunManifest) -> None:
        """The one way a run's manifest, and so its status, changes: a move MOVES does not allow
        is a bug, and raises."""
        if self._status is None:
            try:
                self._status = self.manifest().status
            except KeyError:
                self._status = manifest.status  # a new run starts where its writer says (a finished import too)
        if manifest.status not in MOVES[self._status]:
            raise ValueError(f"run {manifest.run_id}: its status cannot move from {self._status} to {manifest.status}")
        put_model(self.store, self.layout.file("manifest.json"), manifest)
        self._status = manifest.status

    # -- what was planned -----------------------------------------------------------------------

    def put_plan(self, rows: Iterable[dict]) -> None:
        self._put_lines("plan.jsonl", rows)

    def plan(self) -> Iterator[dict]:
        return self._lines("plan.jsonl")

    def put_qrels(self, rows: Iterable[dict]) -> None:
        self._put_lines("qrels.jsonl", rows)

    def qrels(self) -> Iterator[dict]:
        return self._lines("qrels.jsonl")

    def put_warnings(self, rows: Iterable[dict]) -> None:
        self._put_lines("warnings.jsonl", rows)

    def warnings(self) -> Iterator[dict]:
        return self._lines("warnings.jsonl")

    def put_enqueued(self, rows: Iterable[dict]) -> None:
        self._put_lines("questions-enqueued.jsonl", rows)

    def enqueued(self) -> Iterator[dict]:
        return self._lines("questions-enqueued.jsonl")

    def has_enqueued(self) -> bool:
        return self.store.exists(self.layout.file("questions-enqueued.jsonl"))

    def put_questions(self, rows: Iterable[dict]) -> None:
        self._put_lines("questions.jsonl", rows)

    def questions(self) -> Iterator[dict]:
        return self._lines("questions.jsonl")

    def put_candidates(self, query_id: str, texts: list[str]) -> str:
        """A chunk query's candidates (a claim check: its jobs carry the key); returns the key."""
        key = self.layout.input(query_id)
        self.store.put(key, json.dumps(texts, ensure_ascii=False).encode())
        return key

    def put_input(self, key: str, data: BaseModel, if_absent: bool = False) -> bool:
        """A chunk query's prepared input, under ``self.layout.input`` of its query (and budget)."""
        assert key.startswith(self.layout.file("inputs/")), key
        return put_model(self.store, key, data, if_absent=if_absent)

    # -- a batch-mode run's requests and batches ----------------------------------------------

    def put_batch(self, kind: str, name: str, entry: dict, if_absent: bool = False) -> bool:
        indent = 1 if kind == "batches" else None
        return self.store.put(self.layout.batch(kind, name), json.dumps(entry, indent=indent).encode(), if_absent)

    def delete_batch(self, kind: str, name: str) -> None:
        self.store.delete(self.layout.batch(kind, name))

    # -- what it came to ------------------------------------------------------------------------

    def put_report(self, report: ReportFiles) -> None:
        """Every file of the run's report (the manifest, which says it ended, is put after them)."""
        for name, value in (
            ("cost.json", report.cost),
            ("summary.json", report.summary),
            ("metrics.json", report.metrics),
            ("estimate.json", report.estimate),
            ("evidence_metrics.json", report.evidence_metrics),
        ):
            if value is not None:
                self.store.put(self.layout.file(name), json.dumps(value, indent=1).encode())
        self.store.put(self.layout.file("failures.jsonl"), "".join(line + "\n" for line in report.failures).encode())
        self._put_lines("pending.jsonl", report.pending)
        if report.evidence is not None:
            self.store.put(self.layout.file("evidence.csv"), report.evidence[0])
            self.store.put(self.layout.file("evidence.parquet"), report.evidence[1])
        for name, image in report.images.items():
            self.store.put(self.layout.file(name), image)
        self.store.put(self.layout.file("jobs.txt"), "".join(f"{job}\n" for job in report.jobs).encode())
        self.store.put(self.layout.file("report.md"), report.text.encode())

    def jobs(self) -> set[str] | None:
        """The job ids of the results it holds, as its last report wrote them; None before one."""
        try:
            return set(self.store.get(self.layout.file("jobs.txt")).decode().split())
        except KeyError:
            return None

    def json(self, name: str) -> dict:
        return json.loads(self.store.get(self.layout.file(name)))

    def get(self, name: str) -> bytes:
        """Any of them as stored (KeyError when absent), for readers of the finished run."""
        return self.store.get(self.layout.file(name))

    # -- lines ----------------------------------------------------------------------------------

    def _put_lines(self, name: str, rows: Iterable[dict]) -> None:
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        self.store.put(self.layout.file(name), text.encode())

    def _lines(self, name: str) -> Iterator[dict]:
        try:
            data = self.store.get(self.layout.file(name))
        except KeyError:
            return
        for line in data.splitlines():
            if line.strip():
                yield json.loads(line)
