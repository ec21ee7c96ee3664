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

The lock keeps ticks apart only for its lease; a tick that outlives it (a slow upload, a large
batch taken in, a stalled machine) runs beside the next. So a request goes into a batch only
through its claim (:class:`BatchClaims`), taken in one atomic step, held until its batch is
taken in: two ticks that read the same waiting requests put each into one batch. A claim whose
batch was never made (its tick died first) is let go after ``claim_lease_s``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

import redis
import structlog

from prism.llm import BatchApiError, Budget, Cache, Gateway, batch
from prism.llm.pricing import PriceTable
from prism.models import CallRecord, Stage, Task, Usage
from workers import keys
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
    # A claim no batch holds is let go this long after it was taken or renewed: far past one
    # create request, so a slow tick never loses the requests it is submitting.
    claim_lease_s: float = 3600.0


class BatchDriver:
    def __init__(
        self,
        store: Store,
        run_id: str,
        gateway: Gateway,
        limits: BatchLimits = BatchLimits(),
        budget: Budget | None = None,
        claims: BatchClaims | None = None,
    ):
        if gateway.cache is None:
            raise ValueError("a batch-mode run needs the response cache")
        self.store, self.run_id, self.gateway, self.limits = store, run_id, gateway, limits
        self.claims = claims or BatchClaims(None)  # in this process, for an embedded run
        self.claimed = keys.batch_claims(store.uri, run_id)
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
        open_ = self.open_batches
        done = sum((r.get("request_counts") or {}).get("completed") or 0 for r in open_)
        in_flight = {c for r in open_ for c in r["lines"]}
        waiting = sum(1 for k in self.pending if k not in in_flight)
        total = len(in_flight)
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
                self._record(view, stage, model, ids, (view.get("metadata") or {}).get("prism_claim"))
                log.info("batch adopted", batch_id=view["id"], lines=len(ids))
        return True

    def _record(self, view: dict, stage: Stage, model: str, ids: list[str], claim: str | None) -> dict:
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
            "claim": claim,  # the claim its lines are held by until it is taken in
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
        token = uuid.uuid4().hex
        held = self._claim(token, waiting)
        groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
        for entry in held.values():
            groups[(self.gateway.endpoint(entry["stage"]).key, entry["model"])].append(entry)
        for (_, model), entries in sorted(groups.items()):
            stage = entries[0]["stage"]
            lines = [(e["key"], batch.line(e["key"], e["body"])) for e in entries]
            for part in batch.pack(lines, self.limits.max_lines, self.limits.max_bytes):
                if not self._send(stage, model, token, part):
                    return  # the next poll tries again

    def _claim(self, token: str, waiting: dict[str, dict]) -> dict[str, dict]:
        """The waiting requests this tick's batches take: claimed in one step, so a tick beside
        this one that read the same requests leaves them; answered ones are let go."""
        self._sweep()
        held = {k: waiting[k] for k in self.claims.claim(self.claimed, token, list(waiting))}
        for key in list(held):
            if self.cache.get(key) is not None:  # answered meanwhile (a line of another batch)
                self._drop(key)
                self.claims.release(self.claimed, [(key, token)])
                del held[key]
        return held

    def _sweep(self) -> None:
        """Let go the claims of ticks that died before making their batch: not renewed for the lease
        and in no batch listed now, stored or at the provider (a batch is made within one create
        request of its claims' renewal, so is listed by then); one renewed since is kept."""
        lapsed = self.claims.lapsed(self.claimed, self.limits.claim_lease_s)
        if not lapsed:
            return
        for key in self.store.keys(self.layout.batch("batches")):  # recorded since this tick read them
            record = json.loads(self.store.get(key))
            self.records.setdefault(record["id"], record)
        if not self._adopt():
            return  # the provider cannot say what it holds: the claims wait
        made = {(line, r.get("claim")) for r in self.records.values() for line in r["lines"]}
        self.claims.release(self.claimed, [(r, c) for r, c in lapsed if (r, c.split(" ")[0]) not in made])

    def _send(self, stage: Stage, model: str, token: str, part: list[tuple[str, bytes]]) -> bool:
        """One input file uploaded and its batch made; False when the provider could not take it."""
        ids = [key for key, _ in part]
        held = [(key, token) for key in ids]
        try:
            file_id = self.gateway.upload_batch(
                stage, b"".join(raw for _, raw in part), f"{self.run_id}-{len(self.records)}.jsonl"
            )
        except BatchApiError as err:
            self.claims.release(self.claimed, held)  # no batch is made without its file
            log.warning("batch upload failed", error=str(err), lines=len(part))
            return False
        if not self.claims.renew(self.claimed, token, ids):  # stalled past the lease: another tick may have them
            self.claims.release(self.claimed, held)
            log.warning("batch claim lapsed: not submitted", lines=len(part))
            return True
        try:
            view = self.gateway.create_batch(stage, file_id, {"prism_run": self.run_id, "prism_claim": token})
        except BatchApiError as err:
            # A create that got no answer may have made the batch: its claims stay, so the next
            # tick adopts it from the provider's list, or they lapse and the lines go again.
            if err.refused:
                self.claims.release(self.claimed, held)
            log.warning("batch submit failed", error=str(err), lines=len(part))
            return False
        self._record(view, stage, model, ids, token)
        log.info("batch submitted", batch_id=view["id"], model=model, lines=len(part))
        return True

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
        calls, answers, again = _lines(record, results, self.gateway.prices, latency, status)
        for custom_id, value in answers.items():
            self.cache.put(custom_id, value | {"batch_run": self.run_id})
        ledger = Ledger(self.store, None)
        for (task, query_id), held in calls.items():
            name = f"batch-{record['id']}-{task}-{safe_name(query_id)}"
            # Written once however often the batch is taken in (a resumed producer), and charged once.
            kept = ledger.spent_by_run(self.run_id, held, f"Batch API {record['id']}", name, task, query_id, once=True)
            if kept and self.budget is not None:
                self.budget.settle(Decimal(0), sum((c.usd or Decimal(0) for c in held), Decimal(0)))
        for custom_id in answers:
            self._drop(custom_id)
        for custom_id, reason in again:
            self._retry(custom_id, reason)
        if record.get("claim"):  # its lines are free for later batches
            self.claims.release(self.claimed, [(c, record["claim"]) for c in record["lines"]])
        record |= {"status": status, "ingested": True, "errors": view.get("errors")}
        record |= {k: view.get(k) for k in ("output_file_id", "error_file_id", "request_counts")}
        self._save(record)
        log.info("batch taken in", batch_id=record["id"], status=status, answered=len(answers), again=len(again))

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


def _lines(
    record: dict, results: dict[str, batch.LineResult], prices: PriceTable, latency: float, status: str
) -> tuple[dict[tuple[Task, str], list[CallRecord]], dict[str, dict], list[tuple[str, str]]]:
    """An ended batch's lines: the calls of each job that asked (answered ones at batch prices,
    failed ones recorded, not billed), the answers for the cache, and the lines to send again
    with why."""
    model = record["model"]
    calls: dict[tuple[Task, str], list[CallRecord]] = defaultdict(list)
    answers: dict[str, dict] = {}
    again: list[tuple[str, str]] = []
    for custom_id, (task, query_id, stage) in record["lines"].items():
        result = results.get(custom_id)
        if result is not None and result.text is not None:
            priced = prices.priced(model, result.usage, "batch")  # no usage: unpriced
            call = CallRecord(
                stage=stage,
                model=model,
                usage=result.usage or Usage(),
                latency_s=latency,
                attempts=1,
                tier="batch",
                **priced,
            )
            usage = call.usage.model_dump(mode="json")
            answers[custom_id] = {"text": result.text, "model": model, "batch_id": record["id"], "usage": usage}
            calls[(task, query_id)].append(call)
            continue
        reason = (result.error if result is not None else None) or f"no answer: the batch ended {status}"
        if result is not None:  # a line the provider tried: recorded, not billed
            error = f"batch {record['id']}: {reason}"
            calls[(task, query_id)].append(
                CallRecord(
                    stage=stage, model=model, latency_s=latency, attempts=1, usd=Decimal(0), error=error, tier="batch"
                )
            )
        again.append((custom_id, reason))
    return calls, answers, again


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


# A claim is "<token> <ms>": the submission that holds a request and when it took or renewed it,
# by the Redis server's clock. KEYS: a run's claims; ARGV: the token, the hash's lifetime (s),
# then the requests. Each request no claim holds is taken; returns those taken.
_CLAIM = """
local t = redis.call('TIME')
local held = ARGV[1] .. ' ' .. t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
local taken = {}
for i = 3, #ARGV do
  if redis.call('HSETNX', KEYS[1], ARGV[i], held) == 1 then taken[#taken + 1] = ARGV[i] end
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return taken
"""

# KEYS, ARGV as _CLAIM's. 1, with each claim's time renewed, when the token holds every request;
# else 0 and nothing changed.
_RENEW = """
local t = redis.call('TIME')
local held = ARGV[1] .. ' ' .. t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
for i = 3, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if not v or string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then return 0 end
end
for i = 3, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], held) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: a run's claims; ARGV: pairs of a request and a token or a whole claim. Each request is let
# go where that token, or exactly that claim (not renewed since), still holds it.
_RELEASE = """
for i = 1, #ARGV, 2 do
  local v, c = redis.call('HGET', KEYS[1], ARGV[i]), ARGV[i + 1]
  if v and (v == c or string.sub(v, 1, #c + 1) == c .. ' ') then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return 1
"""


class BatchClaims:
    """Which submission holds each request of a run on its way into a batch: taking it is the one
    step that puts a request into a batch, atomic per request, so however ticks overlap no
    request is in two. Fleet-wide in a Redis hash (keys.batch_claims, a script for each step),
    else in this process, shared by its drivers (an embedded run)."""

    _local: dict[str, dict[str, str]] = {}
    _lock = threading.Lock()

    def __init__(self, client: redis.Redis | None):
        self.client = client
        if client is not None:
            self._claim, self._renew = client.register_script(_CLAIM), client.register_script(_RENEW)
            self._release = client.register_script(_RELEASE)

    def claim(self, name: str, token: str, requests: list[str]) -> set[str]:
        """The requests that no claim held, now held by ``token``."""
        if not requests:
            return set()
        if self.client is not None:
            return {_text(r) for r in self._claim(keys=[name], args=[token, keys.BATCH_CLAIMS_TTL_S, *requests])}
        with self._lock:
            held = self._local.setdefault(name, {})
            taken = {r for r in requests if r not in held}
            held.update((r, f"{token} {_ms()}") for r in taken)
            return taken

    def renew(self, name: str, token: str, requests: list[str]) -> bool:
        """True, with their time renewed, when ``token`` still holds every one of ``requests``."""
        if self.client is not None:
            return bool(self._renew(keys=[name], args=[token, keys.BATCH_CLAIMS_TTL_S, *requests]))
        with self._lock:
            held = self._local.setdefault(name, {})
            if any(held.get(r, "").split(" ")[0] != token for r in requests):
                return False
            held.update((r, f"{token} {_ms()}") for r in requests)
            return True

    def release(self, name: str, claims: list[tuple[str, str]]) -> None:
        """Each (request, token or whole claim): let go where that one still holds it."""
        if not claims:
            return
        if self.client is not None:
            self._release(keys=[name], args=[x for pair in claims for x in pair])
            return
        with self._lock:
            held = self._local.setdefault(name, {})
            for request, claim in claims:
                if held.get(request) == claim or held.get(request, "").split(" ")[0] == claim:
                    del held[request]

    def lapsed(self, name: str, lease_s: float) -> list[tuple[str, str]]:
        """(request, whole claim) of the claims taken or renewed more than ``lease_s`` ago."""
        if self.client is not None:
            seconds, micros = self.client.time()  # the clock the scripts stamp claims by
            now, found = seconds * 1000 + micros // 1000, self.client.hgetall(name)
            held = {_text(k): _text(v) for k, v in found.items()}
        else:
            with self._lock:
                now, held = _ms(), dict(self._local.get(name, {}))
        return [(r, c) for r, c in held.items() if now - int(c.split(" ")[1]) > lease_s * 1000]


def _ms() -> int:
    return time.time_ns() // 1_000_000


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
