"""In-context examples: training questions with their gold rankings, embedded into a FAISS
index (L2, as the method has it; on unit vectors it orders like cosine). At ranking time the
nearest questions become few-shot examples in the system prompt.

A query never gets itself or a duplicate as an example: neighbours with its id or its exact
question are skipped, so an evaluation cannot leak its own labels. Saved as plain files: the
FAISS index in its own binary format, the examples as JSON lines, and a JSON header with a
checksum over all of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from prism.models import FILING_TYPES, Query
from prism.ranking.embeddings import Embedder

if TYPE_CHECKING:  # faiss loads where an index is built or read: a worker that only ingests never pays it
    import faiss

INDEX, EXAMPLES, META = "icl.faiss", "examples.jsonl", "icl.json"


class ExampleStoreError(ValueError):
    pass


def gold_ranking(query: Query, limit: int = 10) -> list[int]:
    """The candidates in grade order (best first); for chunks only the relevant ones."""
    qrel = query.qrel or {}
    order = sorted(qrel, key=lambda i: (-qrel[i], i))
    return order if query.task == "documents" else [i for i in order if qrel[i] > 0][:limit]


@dataclass
class ExampleStore:
    index: faiss.Index
    examples: list[dict]  # id, task, question, answer (gold ranking)
    meta: dict

    @classmethod
    def build(cls, queries: Sequence[Query], embedder: Embedder, batch: int = 256) -> ExampleStore:
        rows = [q for q in queries if q.qrel and any(g > 0 for g in q.qrel.values())]
        if not rows:
            raise ExampleStoreError("no rows with qrels to build examples from")
        import faiss

        vectors = np.vstack(
            [embedder.embed([q.question for q in rows[i : i + batch]]) for i in range(0, len(rows), batch)]
        )
        index = faiss.IndexFlatL2(vectors.shape[1])
        index.add(vectors)
        examples = [{"id": q.id, "task": q.task, "question": q.question, "answer": gold_ranking(q)} for q in rows]
        meta = {"embedder": embedder.name, "dim": int(vectors.shape[1]), "count": len(rows)}
        return cls(index, examples, meta)

    def nearest(
        self, vector: np.ndarray, k: int, query_id: str | None, question: str, task: str | None = None
    ) -> list[dict]:
        """The k nearest examples (of this task, when given), leaving out the query itself and
        exact duplicates of it."""
        if k <= 0:
            return []

        def usable(e: dict) -> bool:
            same = e["id"] == query_id or e["question"].strip() == question.strip()
            return not same and (task is None or e["task"] == task)

        found: list[dict] = []
        want = k + 8
        while len(found) < k and want < 2 * self.index.ntotal + 16:
            _, ids = self.index.search(
                np.asarray(vector, dtype=np.float32).reshape(1, -1), min(want, self.index.ntotal)
            )
            found = [self.examples[i] for i in ids[0] if i >= 0 and usable(self.examples[i])][:k]
            want *= 4
        return found

    @staticmethod
    def format(examples: Sequence[dict]) -> str:
        """The examples as prompt text (the ``$examples`` placeholder)."""
        if not examples:
            return ""
        lines = ["", "Worked examples from similar questions (question, then the right answer):"]
        for e in examples:
            answer = e["answer"]
            if e["task"] == "documents":
                names = ", ".join(FILING_TYPES[i] for i in answer)
                lines.append(f"- {e['question']} -> {answer} ({names})")
            else:
                lines.append(f"- {e['question']} -> {answer}")
        return "\n".join(lines) + "\n"

    def to_files(self) -> dict[str, bytes]:
        import faiss

        index = faiss.serialize_index(self.index).tobytes()
        examples = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in self.examples).encode()
        meta = {k: v for k, v in self.meta.items() if k != "sha256"}
        meta["sha256"] = _checksum(index, examples, meta)
        return {INDEX: index, EXAMPLES: examples, META: json.dumps(meta, indent=1, sort_keys=True).encode()}

    @classmethod
    def from_files(cls, files: dict[str, bytes]) -> ExampleStore:
        try:
            meta = json.loads(files[META])
            index, examples = files[INDEX], files[EXAMPLES]
        except (KeyError, json.JSONDecodeError) as err:
            raise ExampleStoreError(f"not an example store: {err}") from None
        expected = meta.pop("sha256", None)
        if expected != _checksum(index, examples, meta):
            raise ExampleStoreError(
                "the example store's files do not match their checksum: they were changed; rebuild it"
            )
        meta["sha256"] = expected
        rows = [json.loads(line) for line in examples.decode().splitlines()]
        import faiss

        return cls(faiss.deserialize_index(np.frombuffer(index, dtype=np.uint8)), rows, meta)


_query_id: ContextVar[str | None] = ContextVar("prism_icl_query", default=None)


@contextmanager
def about(query_id: str) -> Iterator[None]:
    """Rank inside this block for this query id: its own row is never an example."""
    token = _query_id.set(query_id)
    try:
        yield
    finally:
        _query_id.reset(token)


def examples_for(store: ExampleStore, embedder: Embedder, k: int, task: str) -> Callable[[str], str]:
    """question -> the prompt text of its k nearest examples of this task."""
    if store.meta["embedder"] != embedder.name:
        raise ExampleStoreError(
            f"the example store was built with the {store.meta['embedder']!r} embedder, not {embedder.name!r}"
        )

    def shots(question: str) -> str:
        vector = embedder.embed([question])[0]
        return store.format(store.nearest(vector, k, _query_id.get(), question, task))

    return shots


def _checksum(index: bytes, examples: bytes, meta: dict) -> str:
    return hashlib.sha256(index + examples + json.dumps(meta, sort_keys=True).encode()).hexdigest()
