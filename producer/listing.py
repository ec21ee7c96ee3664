"""`prism corpus ls`: a corpus's filings as tab-separated lines, streamed from the catalogue: a
company's filings read alone, or every filing partition by partition."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date
from itertools import islice

from prism.corpus.view import CorpusView
from prism.ingest.models import FilingEntry
from producer.spec import open_corpus
from workers.settings import Settings

COLUMNS = ("filing", "company", "cik", "form", "period", "filed", "accession", "pages", "guessed")


def list_filings(
    uri: str,
    settings: Settings,
    scope: str | None,
    forms: frozenset[str],
    since: date | None,
    limit: int | None,
    echo: Callable[[str], None],
) -> int:
    """Echo the header and one line a filing taken; the number of filings listed."""
    corpus = open_corpus(uri, settings)

    def wanted(head: FilingEntry) -> bool:
        meta = head.meta
        return (not forms or (meta.form_type or "") in forms) and (since is None or (meta.filed or date.min) >= since)

    heads: Iterable[FilingEntry]
    if scope:
        values = CorpusView(corpus.catalog.companies(), lambda _: []).catalogued(scope)
        heads = (h for h in corpus.catalog.filings_of(values).values() if wanted(h)) if values else ()
    else:
        heads = corpus.catalog.filings(wanted)
    shown = 0
    for head in islice(heads, limit):
        if not shown:
            echo("\t".join(COLUMNS))
        echo(line(head))
        shown += 1
    return shown


def line(head: FilingEntry) -> str:
    meta = head.meta
    latest = next(v for v in head.versions if v.version == head.latest)
    period = str(meta.period_end) if meta.period_end else (f"FY{meta.fiscal_year}" if meta.fiscal_year else "")
    row = (head.id, meta.company or "", meta.cik or "", meta.form_type or "", period, str(meta.filed or ""))
    return "\t".join((*row, meta.accession or "", str(latest.pages), ",".join(meta.guessed)))
