"""The simulator's Files and Batch APIs: ``/v1/files`` (multipart upload, purpose=batch; content)
and ``/v1/batches`` (create, retrieve, cancel, list), as the provider serves them.

A batch is validated (at most ``max_lines`` lines and ``max_bytes``, one model, one url), then
its lines are answered one by one over ``process_s`` by the simulator's own chat endpoint
(``Simulator.answer``), so a batch line ranks and counts tokens exactly as a chat request
does; prompt caching is reported for the gpt-5 family only. Lines fail at ``fail_rate``
(error file, ``server_error``) and run out of the window at ``expire_rate`` (the batch ends
``expired``, those lines ``batch_expired``), or, before any draw, as ``line_faults`` scripts the
next lines answered (one code each, in order); ``fail_batches`` makes the next batches fail every
line (``completed`` with no output file). A cancelled batch keeps the lines answered so far.
Statuses move with time: validating, in_progress, finalizing, completed (or failed, expired,
cancelling, cancelled); output lines come in any order.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP

# The chat endpoint: a request body -> (status, JSON body, headers, seconds to wait).
Answer = Callable[[dict], tuple[int, dict, dict[str, str], float]]

CACHING_MODELS = re.compile(r"^gpt-5")  # caching applies inside batches for the gpt-5 family only
TERMINAL = ("failed", "completed", "expired", "cancelled")
LINE_FAULTS = {  # error code -> message, as the error file gives them
    "server_error": "simulated failure of a batch line",
    "batch_expired": "This request could not be executed before the completion window expired.",
}


@dataclass
class BatchConfig:
    validate_s: float = 0.2
    process_s: float = 1.0  # the lines are answered evenly over this time
    finalize_s: float = 0.2
    cancel_s: float = 0.2  # cancelling -> cancelled
    fail_rate: float = 0.0
    expire_rate: float = 0.0
    line_faults: list[str] = field(default_factory=list)  # the next lines' codes (LINE_FAULTS), in order
    fail_batches: int = 0  # the next this many batches fail every line
    max_lines: int = 50_000
    max_bytes: int = 200 * 1024 * 1024
    seed: int = 0


@dataclass
class _Batch:
    id: str
    input_file_id: str
    endpoint: str
    window: str
    metadata: dict
    lines: list[dict]
    created: float
    fail_all: bool
    errors: list[dict] = field(default_factory=list)
    status: str = "validating"
    done: dict[str, dict] = field(default_factory=dict)  # custom_id -> output line
    failed: dict[str, dict] = field(default_factory=dict)  # custom_id -> error line
    answered: int = 0  # lines processed (answered or failed)
    times: dict[str, float] = field(default_factory=dict)
    output_file_id: str | None = None
    error_file_id: str | None = None


class BatchApi:
    def __init__(self, answer: Answer, config: BatchConfig | None = None):
        self.answer, self.config = answer, config or BatchConfig()
        self.files: dict[str, tuple[dict, bytes]] = {}
        self.batches: dict[str, _Batch] = {}
        self._lock = threading.RLock()
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-sim-{self._n}"

    # -- routes ------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers, body: bytes) -> tuple[int, dict | bytes]:
        """(status, JSON body or raw bytes) for a /v1/files or /v1/batches request."""
        parts = path.split("?", 1)[0].rstrip("/").split("/")
        at = max(i for i, p in enumerate(parts) if p in ("files", "batches"))
        kind, rest = parts[at], parts[at + 1 :]
        with self._lock:
            if kind == "files":
                if method == "POST" and not rest:
                    return self._upload(headers.get("content-type", ""), body)
                if method == "GET" and rest and rest[0] in self.files:
                    meta, data = self.files[rest[0]]
                    return (200, data) if rest[1:] == ["content"] else (200, meta)
                return 404, _error(f"no file {'/'.join(rest)}")
            if method == "POST" and not rest:
                return self._create(json.loads(body or b"{}"))
            if method == "GET" and not rest:
                return 200, self._list(path)
            if not rest or rest[0] not in self.batches:
                return 404, _error(f"no batch {'/'.join(rest)}")
            batch = self.batches[rest[0]]
            if method == "POST" and rest[1:] == ["cancel"]:
                self._advance(batch)
                if batch.status in ("validating", "in_progress", "finalizing"):
                    batch.status, batch.times["cancelling_at"] = "cancelling", time.time()
                return 200, self._view(batch)
            if method == "GET" and not rest[1:]:
                self._advance(batch)
                return 200, self._view(batch)
            return 404, _error(f"no route {path}")

    def _upload(self, content_type: str, body: bytes) -> tuple[int, dict]:
        message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
        fields: dict[str, tuple[str | None, bytes]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            fields[str(name)] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
        if "file" not in fields or fields.get("purpose", (None, b""))[1].decode() != "batch":
            return 400, _error("a file upload needs a file and purpose=batch")
        filename, data = fields["file"]
        return 200, self._store(data, filename or "upload.jsonl", "batch")

    def _store(self, data: bytes, filename: str, purpose: str) -> dict:
        file_id = self._id("file")
        meta: dict = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        self.files[file_id] = (meta, data)
        return meta

    def _create(self, body: dict) -> tuple[int, dict]:
        file_id = str(body.get("input_file_id"))
        if file_id not in self.files:
            return 400, _error(f"no file {file_id}")
        if body.get("completion_window") != "24h":
            return 400, _error("completion_window must be 24h")
        data = self.files[file_id][1]
        lines, errors = [], []
        for number, raw in enumerate(data.splitlines(), 1):
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:
                errors.append({"code": "invalid_json_line", "message": "not JSON", "line": number})
        models = {line.get("body", {}).get("model") for line in lines}
        ids = [line.get("custom_id") for line in lines]
        if len(lines) > self.config.max_lines:
            errors.append({"code": "too_many_requests", "message": f"over {self.config.max_lines} requests"})
        if len(data) > self.config.max_bytes:
            errors.append({"code": "file_too_large", "message": f"over {self.config.max_bytes} bytes"})
        if len(models) > 1:
            errors.append(
                {"code": "mismatched_model", "message": f"one model per file, found {sorted(map(str, models))}"}
            )
        if len(set(ids)) != len(ids) or None in ids:
            errors.append({"code": "duplicate_custom_id", "message": "every line needs its own custom_id"})
        if any(line.get("url") != body.get("endpoint") for line in lines):
            errors.append({"code": "invalid_url", "message": f"every line's url must be {body.get('endpoint')}"})
        fail_all = self.config.fail_batches > 0
        self.config.fail_batches -= fail_all
        batch = _Batch(
            id=self._id("batch"),
            input_file_id=file_id,
            endpoint=body.get("endpoint", ""),
            window="24h",
            metadata=body.get("metadata") or {},
            lines=lines,
            created=time.monotonic(),
            fail_all=fail_all,
            errors=errors,
            times={"created_at": time.time()},
        )
        self.batches[batch.id] = batch
        return 200, self._view(batch)

    def _list(self, path: str) -> dict:
        query = dict(p.split("=", 1) for p in path.partition("?")[2].split("&") if "=" in p)
        limit, after = int(query.get("limit", 20)), query.get("after")
        ordered = sorted(self.batches.values(), key=lambda b: b.created, reverse=True)
        if after in self.batches:
            ordered = ordered[[b.id for b in ordered].index(after) + 1 :]
        page = ordered[:limit]
        for batch in page:
            self._advance(batch)
        data = [self._view(b) for b in page]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(ordered) > limit,
        }

    # -- progress ----------------------------------------------------------------------------

    def _advance(self, batch: _Batch) -> None:
        """Move the batch on to where the clock says it is, answering the lines now due."""
        cfg, now = self.config, time.monotonic()
        age = now - batch.created
        if batch.status == "validating" and age >= cfg.validate_s:
            if batch.errors:
                batch.status, batch.times["failed_at"] = "failed", time.time()
                return
            batch.status, batch.times["in_progress_at"] = "in_progress", time.time()
        if batch.status == "cancelling":
            if now - _mono(batch.times["cancelling_at"]) >= cfg.cancel_s:
                self._finish(batch, "cancelled")
            return
        if batch.status == "in_progress":
            share = min(1.0, (age - cfg.validate_s) / cfg.process_s) if cfg.process_s else 1.0
            while batch.answered < round(share * len(batch.lines)):
                self._answer(batch, batch.lines[batch.answered])
                batch.answered += 1
            if batch.answered == len(batch.lines):
                batch.status, batch.times["finalizing_at"] = "finalizing", time.time()
        if batch.status == "finalizing" and age >= cfg.validate_s + cfg.process_s + cfg.finalize_s:
            self._finish(batch, "expired" if any(_expired(e) for e in batch.failed.values()) else "completed")

    def _line_fault(self, batch: _Batch, custom_id: str) -> str | None:
        """The error code this line gets, if any: its batch failing whole, then the script,
        then the rates."""
        if batch.fail_all:
            return "server_error"
        if self.config.line_faults:
            return self.config.line_faults.pop(0)
        rng = random.Random(f"{self.config.seed}:{batch.id}:{custom_id}")
        if rng.random() < self.config.fail_rate:
            return "server_error"
        if rng.random() < self.config.expire_rate:
            return "batch_expired"
        return None

    def _answer(self, batch: _Batch, line: dict) -> None:
        custom_id, body = line["custom_id"], line.get("body") or {}
        code = self._line_fault(batch, custom_id)
        if code:
            batch.failed[custom_id] = _error_line(custom_id, code, LINE_FAULTS[code])
            return
        status, payload, _, _ = self.answer(body)
        usage = payload.get("usage") if status == 200 else None
        if usage and not CACHING_MODELS.match(str(body.get("model"))):
            usage["prompt_tokens_details"] = {**(usage.get("prompt_tokens_details") or {}), "cached_tokens": 0}
        response = {"status_code": status, "request_id": f"req-{custom_id[:12]}", "body": payload}
        entry = {"id": f"batch_req-{len(batch.done) + len(batch.failed)}", "custom_id": custom_id, "error": None}
        if status == 200:
            batch.done[custom_id] = entry | {"response": response}
        else:
            batch.failed[custom_id] = entry | {"response": response}

    def _finish(self, batch: _Batch, status: str) -> None:
        if batch.done:
            batch.output_file_id = self._output(batch, batch.done.values(), "output")
        if batch.failed:
            batch.error_file_id = self._output(batch, batch.failed.values(), "errors")
        batch.status, batch.times[f"{status}_at"] = status, time.time()

    def _output(self, batch: _Batch, lines, name: str) -> str:
        rows = list(lines)
        random.Random(f"{self.config.seed}:{batch.id}:{name}").shuffle(rows)  # in any order
        data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
        return self._store(data, f"{batch.id}_{name}.jsonl", "batch_output")["id"]

    def _view(self, batch: _Batch) -> dict:
        times = {k: int(v) for k, v in batch.times.items()}
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "errors": {"object": "list", "data": batch.errors} if batch.status == "failed" else None,
            "input_file_id": batch.input_file_id,
            "completion_window": batch.window,
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": times["created_at"],
            "expires_at": times["created_at"] + 24 * 3600,
            **{k: times.get(k) for k in _TIMES},
            "request_counts": {
                "total": len(batch.lines),
                "completed": len(batch.done),
                "failed": len(batch.failed),
            },
            "metadata": batch.metadata,
        }


_TIMES = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at")


def _mono(wall: float) -> float:
    return time.monotonic() - (time.time() - wall)


def _expired(line: dict) -> bool:
    return (line.get("error") or {}).get("code") == "batch_expired"


def _error_line(custom_id: str, code: str, message: str) -> dict:
    return {
        "id": f"batch_req-{custom_id[:12]}",
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }


def _error(message: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "code": None, "param": None}}
