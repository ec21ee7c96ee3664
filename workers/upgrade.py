"""Corpora written before the catalogue: their manifest.json (and the checkpoints of an ingest it
never folded in) converted into the catalogue's tables, once. Nothing is re-ingested: the filings,
their versions and their chunk inputs stay where they are, so runs keep their job ids."""

from __future__ import annotations

import json

from prism.ingest.models import CorpusManifest, SourceEntry
from workers.corpus import Corpus
from workers.store import get_model

MANIFEST = "manifest.json"
OLD_KEYS = ("journal/", "versions/", "failures/")  # what only the manifest's readers read


def needs_upgrade(corpus: Corpus) -> bool:
    return corpus.store.exists(MANIFEST)


def upgrade(corpus: Corpus) -> int | None:
    """Append an old corpus's catalogue to the tables and retire its manifest (kept as
    manifest.upgraded.json); the number of filings it held, None when there was nothing to do.
    Two ingests upgrading at once append the same rows twice, which readers take once (the
    newest row of a filing or source wins, and both are the same)."""
    if not needs_upgrade(corpus):
        return None
    try:
        manifest = get_model(corpus.store, MANIFEST, CorpusManifest)
    except KeyError:  # another ingest upgraded it meanwhile
        return None
    done, failed = dict(manifest.sources), {s: f.reason for s, f in manifest.failures.items()}
    heads = dict(manifest.filings)
    for key in sorted(corpus.store.keys("journal/")):  # an ingest cut short: its done sources
        part = json.loads(corpus.store.get(key))
        for source, entry in part.get("done_sources", {}).items():
            done[source] = SourceEntry.model_validate(entry)
            failed.pop(source, None)
            heads |= {fid: head for fid in done[source].filings if (head := corpus.head(fid)) is not None}
        for source, reason in part.get("failed_sources", {}).items():
            failed[source] = reason
            done.pop(source, None)
    corpus.catalog.append(heads, done, failed)
    corpus.store.put("manifest.upgraded.json", corpus.store.get(MANIFEST))
    corpus.store.delete(MANIFEST)
    for prefix in OLD_KEYS:
        for key in list(corpus.store.keys(prefix)):
            corpus.store.delete(key)
    return len(heads)
