"""A corpus as planning reads it: its company index whole, and the filings of the companies a
question's scope names, loaded when asked; an unscoped question's pool streams every filing.
`prism ingest`'s archive filter and `prism fetch` match scopes through it too
(prism.corpus.filters)."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

from prism.corpus.companies import CompanyIndex, company_of, index_row
from prism.ingest.models import FilingMeta

Filings = list[tuple[str, FilingMeta]]
# The filings of some catalogue companies (company_of values), each with its latest version.
Versioned = tuple[str, FilingMeta, str]
Loader = Callable[[Sequence[str]], list[Versioned]]
KEPT_SCOPES = 256  # the companies' filings a view keeps: the last scopes it planned


class Everything:
    """An unscoped question's pool: every filing of the corpus, read anew each time it is
    iterated (a partition at a time, from the catalogue) and never held whole."""

    def __init__(self, stream: Callable[[], Iterable[Versioned]]) -> None:
        self.stream = stream

    def __iter__(self) -> Iterator[tuple[str, FilingMeta]]:
        return ((fid, meta) for fid, meta, _ in self.stream())

    def __bool__(self) -> bool:
        return any(True for _ in self.stream())

    def versions(self, ids: Collection[str] | None = None) -> Iterator[tuple[str, str]]:
        """(filing id, latest version) of every filing, or of those given."""
        return ((fid, v) for fid, _, v in self.stream() if ids is None or fid in ids)


Pool = Filings | Everything  # a question's filings in scope


class CorpusView:
    """What planning reads of a corpus: its company index, whole (one entry per company name and
    ticker), and the filings of the companies a scope resolves to, loaded when asked (the last
    KEPT_SCOPES kept). An unscoped question reads every filing through ``everything``."""

    def __init__(
        self, index: CompanyIndex, load: Loader, everything: Callable[[], Iterable[Versioned]] = lambda: ()
    ) -> None:
        self.index, self.load, self.all = index, load, everything
        self.versions: dict[str, str] = {}
        self.kept: OrderedDict[tuple[str, ...], Filings] = OrderedDict()

    @classmethod
    def of_filings(cls, everything: Filings, versions: Mapping[str, str] | None = None) -> CorpusView:
        """A view of filings held in memory (an archive's listing, tests)."""
        versions = dict(versions or {})
        index = CompanyIndex.of_rows(index_row(m) for _, m in everything)
        by_company: dict[str, Filings] = {}
        for fid, meta in everything:
            by_company.setdefault(company_of(meta), []).append((fid, meta))

        def load(companies: Sequence[str]) -> list[Versioned]:
            return [(f, m, versions.get(f, "")) for c in companies for f, m in by_company.get(c, [])]

        return cls(index, load, lambda: [(f, m, versions.get(f, "")) for f, m in everything])

    def pool(self, company: str | None) -> Pool:
        if not company:
            return Everything(self.all)
        return self.scope(company)

    def scope(self, company: str) -> Filings:
        """The filings of the companies a scope names (kept for the next question about them)."""
        values = self.catalogued(company)
        if not values:
            return []
        if values not in self.kept:
            loaded = self.load(values)
            self.versions.update((fid, version) for fid, _, version in loaded)
            self.kept[values] = sorted(((fid, meta) for fid, meta, _ in loaded), key=lambda f: f[0])
            while len(self.kept) > KEPT_SCOPES:
                self.kept.popitem(last=False)
        self.kept.move_to_end(values)
        return self.kept[values]

    def catalogued(self, company: str) -> tuple[str, ...]:
        """The catalogue's company values a scope's company resolves to (none for first words
        that fit several companies: none is guessed)."""
        found, outright = self.index.match(company)
        if len(found) > 1 and not outright:
            return ()
        return self.index.values(found)

    def hint(self, company: str) -> str:
        """What a no-filing error adds about a scope's company: the companies its words fit when
        they fit several, the closest names when it names none; nothing when it names one."""
        found, outright = self.index.match(company)
        if len(found) > 1 and not outright:
            return f"; {company!r} could be any of: {', '.join(self.index.named(found))}"
        if found:
            return ""
        close = self.index.closest(company)
        return f"; closest companies in the corpus: {', '.join(close)}" if close else ""

    def pool_digest(self, pool: Pool) -> str:
        """The filings of a scope at their versions: unchanged while none is added, changed or
        removed (every filing's, streamed, for an unscoped question)."""
        if isinstance(pool, Everything):
            hashed = hashlib.sha256()
            for fid, version in pool.versions():  # in the catalogue's order, the same each time
                hashed.update(f"{fid}\t{version}\n".encode())
            return hashed.hexdigest()[:24]
        return digest(sorted((fid, self.versions[fid]) for fid, _ in pool))

    def versions_of(self, pool: Pool, ids: Collection[str]) -> dict[str, str]:
        """The latest versions of some filings of a pool."""
        if isinstance(pool, Everything):
            return dict(pool.versions(set(ids)))
        return {fid: self.versions[fid] for fid in ids}


def digest(value: object) -> str:
    """A short content hash of a JSON value."""
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode()).hexdigest()[:24]
