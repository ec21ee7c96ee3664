"""Batch-mode runs (``--via batch``): the store and polling side of the Batch API.

A job's chat request that the response cache cannot answer is recorded as pending in the run's
store (:class:`StoreBatchQueue`, under the request's cache key) and the job is put back on the
queue to look again later (``AwaitingBatch``). On the way, the worker that holds the run's tick
lock (:class:`TickLock`, once per poll interval across the fleet) runs the :class:`BatchDriver`: it
gathers the pending requests no batch holds into input files (one model per file, at most
``max_lines`` lines and ``max_bytes``), uploads and submits them with the 24 h window, stores
each batch's record in the run, and polls the open ones. An ended batch's answers go into the
response cache, where the jobs find them, and each answered line is accounted once, at batch
prices, in the run's spent/ records under the job that asked for it, and charged to the run's
budget (a spent budget stops new requests from joining a batch). Failed, expired and
cancelled lines wait for the next batch; after ``max_tries`` they are sent online.

Everything lives in the run's store and each tick reads it afresh, so any worker can tick: the
batches are polled, not submitted again, and a batch submitted by a worker killed before it
recorded it is adopted instead of paid for twice. No producer needs to be there.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

import redis
import structlog

from prism.llm import BatchApiError, Budget, Cache, Gateway, batch
from prism.models import CallRecord, Stage, Task, Usage
from workers.ledger import Ledger
from workers.messages import Job
from workers.runfiles import RunFiles, RunLayout
from workers.store import Store, safe_name

log = structlog.get_logger("prism")


class StoreBatchQueue:
    """One job's view of its run's pending requests (prism.llm.BatchQueue)."""

    def __init__(self, store: Store, job: Job, retry_in: float):
        self.store, self.job, self.retry_in = store, job, retry_in
        self.run_id, self.files = job.run_id, RunFiles(store, job.run_id)
        self.layout = self.files.layout

    def defer(self, key: str, stage: Stage, model: str, body: dict) -> bool:
        if self.store.exists(self.layout.batch("online", key)):
            return False
        entry: dict = {"key": key, "stage": stage, "model": model, "body": body, "task": self.job.task}
        entry |= {"query_id": self.job.query_id, "tries": 0, "errors": [], "at": time.time()}
        self.files.put_batch("pending", key, entry, if_absent=True)
        return True


def batch_summary(store: Store, run_id: str) -> str:
    """A batch-mode run's batches as stored: open and ended, their lines, requests waiting."""
    layout = RunLayout(run_id)
    records = [json.loads(store.get(k)) for k in store.keys(layout.batch("batches"))]
    open_ = [r for r in records if not r["ingested"]]
    done = sum((r.get("request_counts") or {}).get("completed") or 0 for r in open_)
    waiting = sum(1 for _ in store.keys(layout.batch("pending"))) - sum(len(r["lines"]) for r in open_)
    statuses = ", ".join(f"{r['id']} {r['status']}" for r in open_)
    return (
        f"batches: {len(open_)} open ({done}/{sum(len(r['lines']) for r in open_)} lines"
        + (f"; {statuses}" if statuses else "")
        + f"), {len(records) - len(open_)} ended; {max(0, waiting)} requests waiting for a batch"
    )


@dataclass(frozen=True)
class BatchLimits:
    max_lines: int = batch.MAX_LINES
    max_bytes: int = batch.MAX_BYTES
    max_tries: int = 3  # batches a request goes into before it is sent online
    gather_s: float = 10.0  # submit once no request has joined the waiting ones for this long


class BatchDriver:
    def __init__(
        self,
        store: Store,
        run_id: str,
        gateway: Gateway,
        limits: BatchLimits = BatchLimits(),
        budget: Budget | None = None,
    ):
        if gateway.cache is None:
            raise ValueError("a batch-mode run needs the response cache")
        self.store, self.run_id, self.gateway, self.limits = store, run_id, gateway, limits
        self.cache: Cache = gateway.cache
        self.budget = budget  # the run's cap: charged with each answered line, once
        self.files = RunFiles(store, run_id)
        self.layout = self.files.layout
        self.records: dict[str, dict] = {}
        self.pending: dict[str, dict] = {}

    # -- the poll --------------------------------------------------------------------------

    def tick(self) -> str:
        """Poll the open batches, take in the ended ones, submit what waits; a progress line."""
        if not self._load():  # submitting now could send again what an unlisted batch holds
            return "batches: waiting for the provider to list this run's batches"
        for record in [r for r in self.records.values() if not r["ingested"]]:
            try:
                view = self.gateway.get_batch(record["stage"], record["id"])
            except BatchApiError as err:
                log.warning("batch poll failed", batch_id=record["id"], error=str(err))
                continue
            record |= {"status": view["status"], "request_counts": view.get("request_counts") or {}}
            if view["status"] in batch.TERMINAL:
                self._ingest(record, view)
        self._submit()
        return self.describe()

    def describe(self) -> str:
        open_ = [r for r in self.records.values() if not r["ingested"]]
        done = sum((r.get("request_counts") or {}).get("completed") or 0 for r in open_)
        total = sum(len(r["lines"]) for r in open_)
        in_flight = {c for r in open_ for c in r["lines"]}
        waiting = sum(1 for k in self.pending if k not in in_flight)
        return f"batches: {len(open_)} open ({done}/{total} lines), {len(self.records) - len(open_)} ended; {waiting} waiting"

    @property
    def open_batches(self) -> list[dict]:
        return [r for r in self.records.values() if not r["ingested"]]

    # -- state in the store ----------------------------------------------------------------

    def _load(self) -> bool:
        """The run's batches and waiting requests as stored now, and those the provider holds
        that no record names; False when the provider could not list them."""
        for key in self.store.keys(self.layout.batch("batches")):
            record = json.loads(self.store.get(key))
            self.records[record["id"]] = record
        self._read_pending()
        return self._adopt()

    def _read_pending(self) -> None:
        listed = {k.rsplit("/", 1)[-1].removesuffix(".json"): k for k in self.store.keys(self.layout.batch("pending"))}
        for key in set(self.pending) - set(listed):
            del self.pending[key]
        for key, path in listed.items():
            if key not in self.pending:
                try:
                    self.pending[key] = json.loads(self.store.get(path))
                except KeyError:  # taken in between
                    continue

    def _adopt(self) -> bool:
        """Batches this run submitted whose record a killed producer did not get to store; False
        when the provider could not say (it is down): the next poll asks again."""
        stages = {e["stage"] for e in self.pending.values()} | {r["stage"] for r in self.records.values()}
        endpoints = {self.gateway.endpoint(s).key: s for s in sorted(stages)}
        for stage in endpoints.values():
            try:
                listed = self.gateway.list_batches(stage)
                unknown = [
                    (view, self.gateway.batch_file(stage, view["input_file_id"]))
                    for view in listed
                    if (view.get("metadata") or {}).get("prism_run") == self.run_id and view["id"] not in self.records
                ]
            except BatchApiError as err:
                log.warning("batch list failed", error=str(err))
                return False
            for view, data in unknown:
                ids = [json.loads(raw)["custom_id"] for raw in data.splitlines() if raw.strip()]
                model = json.loads(data.splitlines()[0])["body"]["model"] if ids else ""
                self._record(view, stage, model, ids)
                log.info("batch adopted", batch_id=view["id"], lines=len(ids))
        return True

    def _record(self, view: dict, stage: Stage, model: str, ids: list[str]) -> dict:
        # Who asked, for the accounting: one file may hold several stages of one model and endpoint.
        asked = {c: self.pending.get(c, {}) for c in ids}
        lines = {c: [e.get("task", "chunks"), e.get("query_id", ""), e.get("stage", stage)] for c, e in asked.items()}
        record = {
            "id": view["id"],
            "stage": stage,
            "model": model,
            "input_file_id": view["input_file_id"],
            "lines": lines,
            "status": view["status"],
            "request_counts": view.get("request_counts") or {},
            "submitted_at": time.time(),
            "ingested": False,
        }
        self._save(record)
        return record

    def _save(self, record: dict) -> None:
        self.records[record["id"]] = record
        self.files.put_batch("batches", record["id"], record)

    # -- submit ----------------------------------------------------------------------------

    def _submit(self) -> None:
        in_flight = {c for r in self.open_batches for c in r["lines"]}
        waiting = {k: e for k, e in self.pending.items() if k not in in_flight}
        full = len(waiting) >= self.limits.max_lines
        newest = max((e.get("at", 0.0) for e in waiting.values()), default=0.0)
        if not waiting or (time.time() - newest < self.limits.gather_s and not full):
            return  # requests still join: they gather until none has for gather_s
        for key in list(waiting):
            if self.cache.get(key) is not None:  # answered meanwhile (a line of another batch)
                self._drop(key)
                del waiting[key]
        groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
        for entry in waiting.values():
            groups[(self.gateway.endpoint(entry["stage"]).key, entry["model"])].append(entry)
        for (_, model), entries in sorted(groups.items()):
            stage = entries[0]["stage"]
            lines = [(e["key"], batch.line(e["key"], e["body"])) for e in entries]
            for part in batch.pack(lines, self.limits.max_lines, self.limits.max_bytes):
                data = b"".join(raw for _, raw in part)
                try:
                    file_id = self.gateway.upload_batch(stage, data, f"{self.run_id}-{len(self.records)}.jsonl")
                    view = self.gateway.create_batch(stage, file_id, {"prism_run": self.run_id})
                except BatchApiError as err:
                    log.warning("batch submit failed", error=str(err), lines=len(part))
                    return  # the next poll tries again
                self._record(view, stage, model, [key for key, _ in part])
                log.info("batch submitted", batch_id=view["id"], model=model, lines=len(part))

    # -- take in an ended batch ------------------------------------------------------------

    def _ingest(self, record: dict, view: dict) -> None:
        stage, model, status = record["stage"], record["model"], view["status"]
        results: dict[str, batch.LineResult] = {}
        for file_id in (view.get("output_file_id"), view.get("error_file_id")):
            if file_id:
                try:
                    data = self.gateway.batch_file(stage, file_id)
                except BatchApiError as err:
                    log.warning("batch file unreadable", batch_id=record["id"], error=str(err))
                    return  # the next poll tries again
                results |= {r.custom_id: r for r in batch.read_lines(data, model)}
        ended = max((view.get(f"{s}_at") or 0) for s in batch.TERMINAL)
        latency = max(0.0, float(ended - (view.get("created_at") or ended)))
        calls: dict[tuple[Task, str], list[CallRecord]] = defaultdict(list)
        answered, again = [], []
        for custom_id, (task, query_id, line_stage) in record["lines"].items():
            result = results.get(custom_id)
            if result is not None and result.text is not None:
                call = self._call(line_stage, model, result.usage, latency)
                value = {"text": result.text, "model": model, "batch_run": self.run_id, "batch_id": record["id"]}
                self.cache.put(custom_id, value | {"usage": call.usage.model_dump(mode="json")})
                calls[(task, query_id)].append(call)
                answered.append(custom_id)
                continue
            reason = (result.error if result is not None else None) or f"no answer: the batch ended {status}"
            if result is not None:  # a line the provider tried: recorded, not billed
                error = f"batch {record['id']}: {reason}"
                failed = CallRecord(
                    stage=line_stage,
                    model=model,
                    latency_s=latency,
                    attempts=1,
                    usd=Decimal(0),
                    error=error,
                    tier="batch",
                )
                calls[(task, query_id)].append(failed)
            again.append((custom_id, reason))
        ledger = Ledger(self.store, None)
        for (task, query_id), held in calls.items():
            name = f"batch-{record['id']}-{task}-{safe_name(query_id)}"
            # Written once however often the batch is taken in (a resumed producer), and charged once.
            kept = ledger.spent_by_run(self.run_id, held, f"Batch API {record['id']}", name, task, query_id, once=True)
            if kept and self.budget is not None:
                self.budget.settle(Decimal(0), sum((c.usd or Decimal(0) for c in held), Decimal(0)))
        for custom_id in answered:
            self._drop(custom_id)
        for custom_id, reason in again:
            self._retry(custom_id, reason)
        record |= {"status": status, "ingested": True, "errors": view.get("errors")}
        record |= {k: view.get(k) for k in ("output_file_id", "error_file_id", "request_counts")}
        self._save(record)
        log.info("batch taken in", batch_id=record["id"], status=status, answered=len(answered), again=len(again))

    def _call(self, stage: Stage, model: str, usage: Usage | None, latency: float) -> CallRecord:
        return CallRecord(
            stage=stage,
            model=model,
            usage=usage or Usage(),
            latency_s=latency,
            attempts=1,
            tier="batch",
            **self.gateway.prices.priced(model, usage, "batch"),  # no usage: unpriced
        )

    def _drop(self, key: str) -> None:
        self.files.delete_batch("pending", key)
        self.pending.pop(key, None)

    def _retry(self, key: str, reason: str) -> None:
        entry = self.pending.get(key)
        if entry is None:
            return
        entry = entry | {"tries": entry.get("tries", 0) + 1, "errors": [*entry.get("errors", []), reason]}
        if entry["tries"] >= self.limits.max_tries:
            note = {"tries": entry["tries"], "errors": entry["errors"]}
            self.files.put_batch("online", key, note)
            self._drop(key)
            log.warning("batch gave up on a request: sent online", key=key, errors=entry["errors"])
            return
        self.pending[key] = entry
        self.files.put_batch("pending", key, entry)


class TickLock:
    """Who ticks a run's batches: one worker at a time, fleet-wide (a Redis key), or in this
    process for an embedded run. It is taken for a lease longer than any tick (so a worker killed
    mid-tick frees it in time) and, once the tick is done, kept for the poll interval."""

    LEASE_S = 300.0

    def __init__(self, client: redis.Redis | None):
        self.client = client
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> bool:
        if self.client is not None:
            return bool(self.client.set(key, b"1", nx=True, px=int(self.LEASE_S * 1000)))
        with self._lock:
            now = time.monotonic()
            if now < self._until.get(key, 0.0):
                return False
            self._until[key] = now + self.LEASE_S
            return True

    def keep(self, key: str, hold_s: float) -> None:
        """The tick is done: no other for ``hold_s``."""
        if self.client is not None:
            self.client.pexpire(key, max(1, int(hold_s * 1000)))
            return
        with self._lock:
            self._until[key] = time.monotonic() + hold_s
