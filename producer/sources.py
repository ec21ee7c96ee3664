"""What an ingest reads, found by the producer before any task is sent: the filing files of a
folder, a list of files or a store's keys, each with its metadata record, and the files of one
EDGAR accession gathered into one source. Nothing here parses a filing: that is the workers'.

Metadata: ``x.meta.json`` beside ``x.pdf``, else the folder's ``metadata.jsonl``, else the
``--meta`` JSONL, else guessed by the worker. Named, never dropped: a link to nothing, a metadata
line or file that cannot apply or has a misspelled key; files that are neither filings nor
metadata are listed in the summary's ``unsupported``; hidden ones are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, NamedTuple, cast

from prism.ingest.accession import accession_of, index_types, is_index, primary_first
from prism.ingest.archives import Member, archive_kind, shown_name
from prism.ingest.extract import IngestError
from prism.ingest.filings import FOLDER_META, META_SUFFIXES, source_kind, stem
from prism.ingest.meta import parse_meta_json, parse_meta_jsonl, unknown_keys
from workers.corpus import Corpus, IngestSummary, failed_source, record_failure
from workers.store import Store, file_stamp


@dataclass(frozen=True)
class Source:
    """One file to ingest: its name (a path or key), where it is read from, its metadata record."""

    name: str
    uri: str
    read: Callable[[], bytes]
    record: dict[str, Any]
    stamp: Callable[[], str]  # its size and modification time or ETag, without reading it
    fingerprint: str = ""  # the stamp with its record, the chunking and the metadata file
    exhibits: tuple[Exhibit, ...] = ()  # further files of its EDGAR accession, read after it
    open: Callable[[], BinaryIO] | None = None  # an archive: its bytes, read where they lie
    member: Member | None = None  # a member of an archive: where it lies in it


@dataclass(frozen=True)
class Exhibit:
    """A file of the same accession as a filing's main file: its pages follow the filing's."""

    name: str
    uri: str
    read: Callable[[], bytes]
    stamp: Callable[[], str]
    type: str | None = None  # its document type, when an EDGAR index page gives it


class Keys(NamedTuple):
    """A store's object ``key`` (an archive) or the keys under it (a folder)."""

    store: Store
    key: str


@dataclass
class Files:
    """The files under a source, by name in name order, and how each is read and stamped."""

    names: list[str]
    read: Callable[[str], Callable[[], bytes]]
    stamp: Callable[[str], Callable[[], str]]
    uri: Callable[[str], str]
    open: Callable[[str], Callable[[], BinaryIO]]
    dangling: list[Path] = field(default_factory=list)  # links to nothing
    misnamed: list[str] = field(default_factory=list)  # names that are not UTF-8, escaped to be shown
    folder: bool = True  # a folder (or a store) was given: --meta records name its files

    @classmethod
    def of(cls, source: str | Path | Sequence[str | Path] | Store | Keys) -> Files:
        if isinstance(source, str | Path | list | tuple) and not isinstance(source, Keys):
            return cls._paths([Path(source)] if isinstance(source, str | Path) else [Path(p) for p in source])
        store, key = source if isinstance(source, Keys) else (cast(Store, source), "")
        under = key.rstrip("/") + "/" if key else ""
        names = sorted(k for k in store.keys(key) if (k == key or k.startswith(under)) and not _hidden(k))
        return cls(
            names,
            read=lambda name: lambda: store.get(name),
            stamp=lambda name: lambda: store.stamp(name),
            uri=lambda name: f"{store.uri.rstrip('/')}/{name}",
            open=lambda name: lambda: store.open(name),
        )

    @classmethod
    def _paths(cls, paths: list[Path]) -> Files:
        files: dict[str, Path] = {}
        dangling, misnamed, folder = [], [], False
        for path in paths:
            if path.is_dir():
                folder = True
                for p in sorted(path.rglob("*")):
                    if _hidden(p.relative_to(path).as_posix()):
                        continue
                    if shown_name(str(p)) != str(p):  # its name cannot be stored or shown as it is
                        misnamed.append(shown_name(str(p.parent.resolve() / p.name)))
                    elif p.is_file():
                        files[p.resolve().as_posix()] = p
                    elif p.is_symlink() and not p.exists():
                        dangling.append(p)
            elif path.is_symlink() and not path.exists():
                dangling.append(path)
            else:
                files[path.resolve().as_posix()] = path  # a missing file fails when it is read
        return cls(
            sorted(files),
            read=lambda name: files[name].read_bytes,
            stamp=lambda name: lambda: file_stamp(files[name]),
            uri=lambda name: name,
            open=lambda name: lambda: open(files[name], "rb"),
            dangling=dangling,
            misnamed=misnamed,
            folder=folder,
        )


class Walk:
    """The filing files of a source with their metadata records. ``index`` gets the --meta
    records; ``read_meta`` the metadata files read; failures go in the summary and the corpus."""

    def __init__(self, corpus: Corpus, summary: IngestSummary, meta: tuple[str, bytes] | None = None):
        self.corpus, self.summary, self.meta = corpus, summary, meta
        self.index: dict[str, dict[str, Any]] = {}
        self.read_meta: set[str] = set()

    def sources(self, source: str | Path | Sequence[str | Path] | Store | Keys) -> Iterator[Source]:
        files = Files.of(source)
        for link in files.dangling:
            self._dangling(link)
        for name in files.misnamed:
            reason = "its name is not valid UTF-8 (shown with its bytes escaped): rename it to ingest it"
            self.summary.merge(failed_source(name, reason))
        filings: dict[str, set[str]] = {}  # a folder -> the names of its filing files
        for name in files.names:
            if source_kind(name) is not None:
                filings.setdefault(_folder(name), set()).add(PurePosixPath(name).name)
        self._given_meta(filings, files.folder)
        folder_indexes = self._folder_meta(files, filings)
        present = set(files.names)
        for name in files.names:
            if archive_kind(name) is not None:
                yield Source(name, files.uri(name), files.read(name), {}, files.stamp(name), open=files.open(name))
                continue
            if source_kind(name) is None:
                self._not_a_filing(files, name, filings)
                continue
            try:
                record = self._record(files, name, present, folder_indexes)
            except IngestError as err:
                self.summary.sources += 1
                record_failure(self.summary, IngestError(files.uri(name), str(err)))
                continue
            yield Source(name, files.uri(name), files.read(name), dict(record or {}), files.stamp(name))

    def _given_meta(self, filings: dict[str, set[str]], folder: bool) -> None:
        """The --meta records (a record naming a file is checked only against a folder's files)."""
        if self.meta is None:
            return
        self.read_meta.add(self.meta[0])
        everywhere = {n for f in filings.values() for n in f} if folder else None
        found, errors = parse_meta_jsonl(self.meta[1], self.meta[0], everywhere)
        self.index.update(found)
        for err in errors:
            record_failure(self.summary, err)

    def _folder_meta(self, files: Files, filings: dict[str, set[str]]) -> dict[str, dict[str, dict[str, Any]]]:
        """Each folder's metadata.jsonl, read whole: a line for no file there is named too."""
        found_by_folder = {}
        for name in files.names:
            if PurePosixPath(name).name == FOLDER_META:
                self.read_meta.add(files.uri(name))
                found, errors = parse_meta_jsonl(files.read(name)(), files.uri(name), filings.get(_folder(name), set()))
                found_by_folder[_folder(name)] = found
                for err in errors:
                    record_failure(self.summary, err)
        return found_by_folder

    def _not_a_filing(self, files: Files, name: str, filings: dict[str, set[str]]) -> None:
        """A metadata file beside no filing of its stem is a failure; other files are listed."""
        base = PurePosixPath(name).name
        if base.lower().endswith(".meta.json"):  # read for the filing of its stem, if there is one
            stems = {stem(n) for n in filings.get(_folder(name), ())}
            if not base.endswith(".meta.json") or base.removesuffix(".meta.json") not in stems:
                self.read_meta.add(files.uri(name))
                reason = "no .pdf, .htm, .html, .txt or .jsonl of that name beside it; not used"
                record_failure(self.summary, IngestError(files.uri(name), reason))
        elif base.lower() != FOLDER_META and not base.lower().endswith(META_SUFFIXES):
            self.summary.unsupported.append(files.uri(name))

    def _record(
        self, files: Files, name: str, present: set[str], folder_indexes: dict[str, dict[str, dict[str, Any]]]
    ) -> dict[str, Any] | None:
        """A filing's metadata record: beside it, in its folder's metadata.jsonl, or in --meta."""
        folder, base = _folder(name), PurePosixPath(name).name
        beside = f"{folder}/{stem(name)}.meta.json" if folder != "." else f"{stem(name)}.meta.json"
        if beside in present:
            record = parse_meta_json(files.read(beside)(), files.uri(beside))
            self.read_meta.add(files.uri(beside))
            if unknown := unknown_keys(record):
                record_failure(self.summary, IngestError(files.uri(beside), unknown))
            return record
        listing = folder_indexes.get(folder, {})
        return listing.get(base) or listing.get(stem(name)) or self.index.get(base) or self.index.get(stem(name))

    def _dangling(self, link: Path) -> None:
        """A link whose target is missing: named, not skipped (is_file() says False for it)."""
        uri = (link.parent.resolve() / link.name).as_posix()
        self.summary.merge(failed_source(uri, f"a link to {link.resolve()}, which does not exist"))


def accessions(items: list[Source]) -> list[Source]:
    """Files of one EDGAR accession as one source: the form first, its exhibits after it. An
    accession's ``-index.htm`` page is not a filing; it gives the documents' types."""
    groups: dict[str, list[Source]] = {}
    for item in items:
        number = accession_of(item.name) if source_kind(item.name) in ("html", "text", "pdf") else None
        groups.setdefault(number or f"\0{item.name}", []).append(item)
    out: list[Source] = []
    for group in groups.values():
        pages = [i for i in group if is_index(i.name)]
        files = [i for i in group if not is_index(i.name)]
        if len(group) == 1 or not files:
            out.extend(group)
            continue
        types: dict[str, str] = {}
        for page in pages:
            types.update(index_types(page.read()))
        first, *rest = [next(i for i in files if i.name == n) for n in primary_first([i.name for i in files], types)]
        exhibits = tuple(
            Exhibit(i.name, i.uri, i.read, i.stamp, types.get(PurePosixPath(i.name).name.lower())) for i in rest
        )
        stamps = [first.stamp, *(e.stamp for e in exhibits), *(p.stamp for p in pages)]
        out.append(replace(first, exhibits=exhibits, stamp=_joined(stamps)))
    return sorted(out, key=lambda i: i.name)


def _joined(stamps: list[Callable[[], str]]) -> Callable[[], str]:
    """One stamp for an accession's files: any of them changed, it changes."""
    return lambda: "+".join(stamp() for stamp in stamps)


def _folder(name: str) -> str:
    return str(PurePosixPath(name).parent)


def _hidden(name: str) -> bool:
    return any(part.startswith(".") for part in PurePosixPath(name).parts)
