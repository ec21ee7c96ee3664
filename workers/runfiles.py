"""The files of a run's folder, each written here and nowhere else (the ledger writes the jobs'
outcomes beside them): what the producer planned, what the run is, and what it came to.

    manifest.json               the run: options, status, counts, timings (RunManifest)
    plan.jsonl                  a row per query (rows), or per question's job (a question set)
    qrels.jsonl                 the rows' qrels, for the metrics
    warnings.jsonl              lines that ran with something said about them
    questions-enqueued.jsonl    the questions the producer enqueued, in input order
    questions.jsonl             each question's plan, gathered once the run ends
    cost.json, summary.json, metrics.json, evidence_metrics.json, failures.jsonl, pending.jsonl
    estimate.json               what `prism estimate` says of the run's plans (or why it cannot)
    report.md and its plots, evidence.csv and evidence.parquet
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from prism.models import RunManifest
from workers.ledger import RunLayout
from workers.store import Store, get_model, put_model


class RunFiles:
    """One run's files in its store."""

    def __init__(self, store: Store, run_id: str):
        self.store, self.layout = store, RunLayout(run_id)

    # -- the run --------------------------------------------------------------------------------

    def manifest(self) -> RunManifest:
        """KeyError when the run has none."""
        return get_model(self.store, self.layout.file("manifest.json"), RunManifest)

    def put_manifest(self, manifest: RunManifest) -> None:
        put_model(self.store, self.layout.file("manifest.json"), manifest)

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

    # -- what it came to ------------------------------------------------------------------------

    def put_json(self, name: str, value: dict) -> None:
        """cost.json, summary.json, metrics.json, evidence_metrics.json or estimate.json."""
        assert name in ("cost.json", "summary.json", "metrics.json", "evidence_metrics.json", "estimate.json"), name
        self.store.put(self.layout.file(name), json.dumps(value, indent=1).encode())

    def json(self, name: str) -> dict:
        return json.loads(self.store.get(self.layout.file(name)))

    def put_failures(self, lines: Iterable[str]) -> None:
        text = "".join(line + "\n" for line in lines)
        self.store.put(self.layout.file("failures.jsonl"), text.encode())

    def put_pending(self, rows: Iterable[dict]) -> None:
        self._put_lines("pending.jsonl", rows)

    def put_report(self, text: str, images: dict[str, bytes]) -> None:
        for name, image in images.items():
            self.store.put(self.layout.file(name), image)
        self.store.put(self.layout.file("report.md"), text.encode())

    def put_evidence(self, csv: bytes, parquet: bytes) -> None:
        self.store.put(self.layout.file("evidence.csv"), csv)
        self.store.put(self.layout.file("evidence.parquet"), parquet)

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
