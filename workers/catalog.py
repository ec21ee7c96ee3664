"""The corpus catalogue: what a corpus holds, as three Delta Lake tables under ``<corpus>/catalog/``,
appended by what an ingest changed and read by what the work needs (a company's filings, the
sources an ingest lists), never whole. docs/corpus.md says why Delta Lake and how to query it.

catalog/filings     a row each time an ingest stored a filing's head: its latest version, identity
                    and every version (``head``, a FilingEntry), when the head was written (``at``:
                    the newest wins) and when its row was committed (``committed``: what a night
                    counts as new), partitioned by its company's bucket
catalog/sources     a row each time a source file was ingested, failed, or its failure cleared,
                    partitioned by the bucket of its file (an archive's members with their archive,
                    a metadata file's lines with their file)
catalog/companies   a row per company name and ticker first seen: the company index, read whole

The tables are append-only: the newest row of a filing id (or a source) is its state. Appends
from concurrent ingests are transactions of their own (optimistic, on a folder or on S3 with
conditional puts), so none loses another's rows.
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from prism.corpus.companies import COLUMNS, CompanyIndex, company_of, index_row
from prism.ingest.models import FilingEntry, SourceEntry

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    from workers.store import Store

BUCKETS = 64  # partitions of the filings and sources tables: a company's or a file's rows in one
TABLES = ("filings", "sources", "companies")
PLANNED = ("filings", "companies")  # the tables planning reads: a run pins each at its version
Pinned = int | Mapping[str, int] | None  # the filings table's version alone (runs before), each table's, or none
SCAN_BATCH = 8_192  # rows a streamed read holds at once
COMMIT_TRIES = 8
LOOKED_UP_BY = {"filings": "company", "sources": "source"}  # the column a partition's rows are sorted by
ROW_GROUP = 1_024  # rows of a compacted file's row group: what a lookup of one key decodes
SourceState = Literal["done", "failed", "cleared"]
_GROUPED = re.compile(r"(#.*| line \d+)$")  # an archive member, a metadata file's line: with its file


def bucket_of(text: str) -> int:
    return zlib.crc32(text.encode()) % BUCKETS


def source_bucket(source: str) -> int:
    return bucket_of(_GROUPED.sub("", source))


def _utcnow() -> datetime:
    return datetime.now(UTC)


def pinned_text(versions: Mapping[str, int]) -> str:
    """Each table's version as a message carries it: ``filings=12,companies=3``."""
    return ",".join(f"{name}={version}" for name, version in sorted(versions.items()))


def pinned_of(text: str) -> Pinned:
    """A message's versions: ``filings=12,companies=3``; a bare number (the filings table's, as
    runs before named it); anything else, none (the newest)."""
    if text.isdigit():
        return int(text)
    parts = [part.partition("=") for part in text.split(",") if part]
    if not parts or any(not sep or not version.isdigit() for _, sep, version in parts):
        return None
    return {name: int(version) for name, _, version in parts}


class VersionGone(LookupError):
    """A pinned version of a table is no longer kept (vacuumed after compaction, or its log
    entries past their retention)."""


@dataclass(frozen=True)
class SourceRow:
    """A source file's last state: ingested (its entry), failed (why), or its failure cleared."""

    source: str
    state: SourceState
    entry: SourceEntry | None = None
    reason: str | None = None  # why it failed
    at: datetime | None = None
    fingerprint: str | None = None  # of the file as it was ingested, or as it failed (when read)


@dataclass
class Reads:
    """What this catalogue object has read: tables opened, partitions and rows; the tests assert
    on it that planning reads a company's rows, not the corpus."""

    rows: int = 0
    buckets: set[tuple[str, int]] = field(default_factory=set)
    whole: list[str] = field(default_factory=list)  # tables read whole (the company index)


class Catalog:
    """The catalogue of one corpus Store, at its newest state or as a run pinned it: each table
    planning reads at the version ``versions()`` gave (one it lacks did not exist then; a bare
    number pins the filings table alone, as runs before did)."""

    def __init__(self, store: Store, version: Pinned = None) -> None:
        self.store = store
        self.pinned: dict[str, int | None] = {}  # a table read at a version (None: absent then)
        if isinstance(version, int):
            self.pinned = {"filings": version}
        elif version is not None:
            self.pinned = {name: version.get(name) for name in PLANNED}
        self.reads = Reads()
        self._tables: dict[str, Any] = {}

    # -- where it lives ----------------------------------------------------------------------

    def location(self, table: str) -> tuple[str, dict[str, str]]:
        return self.store.table_location(f"catalog/{table}")

    def exists(self) -> bool:
        return self._table("filings") is not None

    def versions(self) -> dict[str, int]:
        """The version of each table planning reads, of those there: what a run plans at, and
        its resume and every planning task read. The filings table first: an ingest commits a
        head's company before the head, so every company of the filings pinned is in the index."""
        found = {name: self._table(name) for name in PLANNED}
        return {name: int(table.version()) for name, table in found.items() if table is not None}

    def _table(self, name: str):  # noqa: ANN202 - a DeltaTable, loaded once per Catalog
        """A table at the version pinned, or brought up to its newest (what other ingests
        committed since it was loaded: a listing of its log's new entries)."""
        if name in self._tables and name not in self.pinned:
            self._tables[name].update_incremental()
        if name not in self._tables:
            from deltalake import DeltaTable

            if name in self.pinned and self.pinned[name] is None:
                return None  # the run planned before the table was made
            uri, options = self.location(name)
            if not DeltaTable.is_deltatable(uri, storage_options=options):
                return None
            self._tables[name] = _load(name, uri, options, self.pinned.get(name))
        return self._tables[name]

    # -- writes ------------------------------------------------------------------------------

    def append(
        self,
        heads: Mapping[str, FilingEntry] = {},
        done: Mapping[str, SourceEntry] = {},
        failed: Mapping[str, str] = {},
        cleared: Collection[str] = (),
        failed_as: Mapping[str, str] = {},
    ) -> None:
        """One ingest's changes, each table's rows in one transaction: the filings' heads (and
        companies not yet in the index), the sources done, failed (with the fingerprint of the
        file as it failed, in ``failed_as``, where it was read) and cleared."""
        at = _utcnow()
        if heads:  # companies first: a run pins the filings table, then the index, and finds each head's
            if fresh := self._new_companies(heads.values(), at):
                self._write("companies", fresh, None)
            self._write("filings", _filing_rows(heads.values(), at), ["bucket"])
        sources = [_source_row(s, "done", entry=e, at=at) for s, e in done.items()]
        sources += [
            _source_row(s, "failed", reason=why, at=at, fingerprint=failed_as.get(s)) for s, why in failed.items()
        ]
        sources += [_source_row(s, "cleared", at=at) for s in cleared if s not in done and s not in failed]
        if sources:
            self._write("sources", sources, ["bucket"])
        self._tables.clear()  # read again at their new versions

    def _write(self, table: str, rows: list[dict[str, Any]], partition_by: list[str] | None) -> None:
        """Append, retrying a commit that lost a race with another ingest's (delta-rs retries a
        concurrent append itself; a table created by two writers at once is retried here)."""
        from deltalake import WriterProperties, write_deltalake
        from deltalake.exceptions import CommitFailedError, DeltaError

        uri, options = self.location(table)
        data = _arrow(table, rows)
        properties = WriterProperties(compression="ZSTD")
        for attempt in range(COMMIT_TRIES):
            try:
                write_deltalake(
                    uri,
                    data,
                    mode="append",
                    partition_by=partition_by,
                    storage_options=options,
                    writer_properties=properties,
                    configuration={"delta.checkpointInterval": "50"},
                )
                return
            except (CommitFailedError, DeltaError):
                if attempt == COMMIT_TRIES - 1:
                    raise
                time.sleep(0.05 * 2**attempt)

    def _new_companies(self, heads: Iterable[FilingEntry], at: datetime) -> list[dict[str, Any]]:
        index = self.companies().table
        known = set(zip(*(index[c].to_pylist() for c in ("company", "name", "ticker")), strict=True))
        fresh: dict[tuple[str, str, str], dict[str, Any]] = {}
        for row in map(index_row, (head.meta for head in heads)):
            if row.company and (key := (row.company, row.name, row.ticker)) not in known:
                fresh[key] = row._asdict() | {"at": at}
        return list(fresh.values())

    # -- reads -------------------------------------------------------------------------------

    def companies(self) -> CompanyIndex:
        """The company index, whole: one row per name and ticker a company filed under."""
        table = self._table("companies")
        if table is None:
            return CompanyIndex.of_rows(())
        self.reads.whole.append("companies")
        return CompanyIndex(self._files("companies").to_table(columns=list(COLUMNS)))

    def filings_of(self, companies: Collection[str]) -> dict[str, FilingEntry]:
        """The heads of the given companies' filings (company values as company_of gives them)."""
        import pyarrow.compute as pc

        buckets = {bucket_of(c) for c in companies}
        heads: dict[str, tuple[datetime, FilingEntry]] = {}
        for batch in self._scan("filings", buckets, pc.field("company").isin(list(companies)), ["id", "head", "at"]):
            _newest(heads, batch)
        return {fid: head for fid, (_, head) in sorted(heads.items())}

    def filings(self, where: Callable[[FilingEntry], bool] = lambda _: True) -> Iterator[FilingEntry]:
        """Every filing's head, streamed partition by partition (bounded memory: a partition's rows)."""
        for bucket in range(BUCKETS):
            heads: dict[str, tuple[datetime, FilingEntry]] = {}
            for batch in self._scan("filings", {bucket}, None, ["id", "head", "at"], fresh=bucket == 0):
                _newest(heads, batch)
            yield from (head for _, (_, head) in sorted(heads.items()) if where(head))

    def all_filings(self) -> dict[str, FilingEntry]:
        """Every filing's head, in memory: for tests and tools, never for a night's work."""
        return {head.id: head for head in self.filings()}

    def sources(self, uris: Collection[str] | None = None) -> dict[str, SourceRow]:
        """The last state of each of the given sources that the catalogue holds (every source's
        when none are given: tools and tests)."""
        import pyarrow.compute as pc

        found: dict[str, SourceRow] = {}
        buckets = set(range(BUCKETS)) if uris is None else {source_bucket(uri) for uri in uris}
        where = pc.field("source").isin(list(uris)) if uris is not None else None
        for batch in self._scan("sources", buckets, where, None):
            for row in batch.to_pylist():
                _newer_source(found, row)
        return found

    def failures(self, under: str | None = None) -> dict[str, SourceRow]:
        """The sources whose last state is a failure: every one, or those of one file (an
        archive's members, a metadata file's lines)."""
        import pyarrow.compute as pc

        buckets = {source_bucket(under)} if under is not None else set(range(BUCKETS))
        found: dict[str, SourceRow] = {}
        where = pc.starts_with(pc.field("source"), under) if under is not None else None
        for batch in self._scan("sources", buckets, where, None):
            for row in batch.to_pylist():
                _newer_source(found, row)
        return {s: row for s, row in sorted(found.items()) if row.state == "failed"}

    def _scan(
        self, name: str, buckets: set[int], where: Any, columns: list[str] | None, fresh: bool = True
    ) -> Iterator[pa.RecordBatch]:
        """A table's rows in some partitions, as one read (``fresh``: the table brought up to its
        newest first, as every read does once)."""
        if not buckets or (self._table(name) if fresh else self._tables.get(name)) is None:
            return
        self.reads.buckets |= {(name, bucket) for bucket in buckets}
        dataset = self._files(name, [("bucket", "in", [str(b) for b in sorted(buckets)])])
        for batch in dataset.to_batches(columns=columns, filter=where, batch_size=SCAN_BATCH):
            self.reads.rows += batch.num_rows
            yield batch

    def _files(self, name: str, partition: list[tuple[str, str, Any]] | None = None) -> ds.Dataset:
        """A table's files at its version (of one partition), as a dataset pyarrow reads on its own
        filesystem: delta-rs names the files, no read goes through it (its filesystem handler
        may abort the process at exit while pyarrow's threads wind down, delta-rs#2184)."""
        import pyarrow.dataset as ds

        uris = self._tables[name].file_uris(file_pruning_predicate=partition)  # loaded by the caller
        filesystem, paths = _arrow_files(uris, *self.location(name))
        return ds.dataset(paths, schema=_stored(name), format="parquet", filesystem=filesystem)

    def since(self, at: datetime) -> Iterator[FilingEntry]:
        """The heads committed after ``at``: each file's row groups whose statistics say none is
        newer are skipped, so a night reads what it added, not the corpus. (Committed, not
        written: a head a worker wrote before a run planned may be committed after it.)"""
        import pyarrow.dataset as ds

        table = self._table("filings")
        if table is None:
            return
        for batch in self._files("filings").to_batches(columns=["head"], filter=ds.field("committed") > at):
            self.reads.rows += batch.num_rows
            yield from (FilingEntry.model_validate_json(h) for h in batch.column(0).to_pylist())

    def newest_at(self) -> datetime | None:
        """When the filings table's newest row was committed, from its files' statistics (which
        keep milliseconds: the true time is within the millisecond after)."""
        table = self._table("filings")
        if table is None:
            return None
        import pyarrow as pa
        import pyarrow.compute as pc

        actions = pa.table(table.get_add_actions(flatten=True))  # delta-rs answers in arro3; read as pyarrow
        if "max.committed" not in actions.column_names:
            return None
        newest = pc.max(actions.column("max.committed")).as_py()
        return newest + timedelta(milliseconds=1) if newest is not None else None

    # -- upkeep ------------------------------------------------------------------------------

    def compact(self, vacuum_hours: int = 168) -> dict[str, dict[str, Any]]:
        """Each table's small files merged (no row is changed or dropped), its log checkpointed,
        and files no version of the last ``vacuum_hours`` needs deleted (never under 168 hours:
        a run in flight plans against the version it named). A partitioned table's rows are
        sorted by what it is looked up by, in small row groups, so a lookup reads the row groups
        whose statistics hold its keys, not its whole partition."""
        from deltalake import WriterProperties

        done: dict[str, dict[str, Any]] = {}
        for name in TABLES:
            table = self._table(name)
            if table is None:
                continue
            if by := LOOKED_UP_BY.get(name):
                properties = WriterProperties(compression="ZSTD", max_row_group_size=ROW_GROUP)
                metrics = table.optimize.z_order([by], writer_properties=properties)
            else:
                metrics = table.optimize.compact()
            table.create_checkpoint()
            table.cleanup_metadata()  # log files older than the table's log retention (30 days): the log stays bounded
            removed = table.vacuum(retention_hours=vacuum_hours, dry_run=False, enforce_retention_duration=True)
            done[name] = {"added": metrics.get("numFilesAdded", 0), "removed": metrics.get("numFilesRemoved", 0)}
            done[name]["deleted"] = len(removed)
        self._tables.clear()
        return done


def _load(name: str, uri: str, options: dict[str, str], version: int | None):  # noqa: ANN202 - a DeltaTable
    """A table at a pinned version, or its newest; a pinned version no longer kept says so."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        return DeltaTable(uri, version=version, storage_options=options)
    except DeltaError as err:
        if version is None:
            raise
        raise VersionGone(f"the catalogue's {name} table at version {version} can no longer be read ({err})") from None


def _newest(heads: dict[str, tuple[datetime, FilingEntry]], batch: pa.RecordBatch) -> None:
    for fid, head, at in zip(*(batch.column(i).to_pylist() for i in range(3))):
        if fid not in heads or heads[fid][0] <= at:
            heads[fid] = (at, FilingEntry.model_validate_json(head))


def _newer_source(found: dict[str, SourceRow], row: dict[str, Any]) -> None:
    held = found.get(row["source"])
    if held is not None and held.at is not None and held.at > row["at"]:
        return
    entry = SourceEntry.model_validate_json(row["entry"]) if row["entry"] else None
    found[row["source"]] = SourceRow(row["source"], row["state"], entry, row["reason"], row["at"], row["fingerprint"])


def _filing_rows(heads: Iterable[FilingEntry], at: datetime) -> list[dict[str, Any]]:
    rows = []
    for head in heads:
        meta, company = head.meta, company_of(head.meta)
        latest = next((v for v in head.versions if v.version == head.latest), None)
        rows.append(
            {
                "bucket": bucket_of(company),
                "company": company,
                "id": head.id,
                "latest": head.latest,
                "name": meta.company,
                "cik": meta.cik,
                "ticker": meta.ticker,
                "form": meta.form_type,
                "period_end": meta.period_end,
                "fiscal_year": meta.fiscal_year,
                "filed": meta.filed,
                "accession": meta.accession,
                "pages": latest.pages if latest else 0,
                "tokens": latest.tokens if latest else 0,
                "head": head.model_dump_json(),
                "at": head.updated_at or at,
                "committed": at,
            }
        )
    return rows


def _source_row(
    source: str,
    state: SourceState,
    entry: SourceEntry | None = None,
    reason: str | None = None,
    *,
    at: datetime,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    return {
        "bucket": source_bucket(source),
        "source": source,
        "state": state,
        "fingerprint": entry.fingerprint if entry else fingerprint or None,
        "entry": entry.model_dump_json() if entry else None,
        "reason": reason,
        "at": at,
    }


def _arrow_files(uris: list[str], uri: str, options: dict[str, str]) -> tuple[pafs.FileSystem, list[str]]:
    """A table's files as pyarrow opens them: on the local disk, or on S3 with the table's own
    endpoint, region and credentials."""
    import pyarrow.fs as pafs

    if not uri.startswith("s3://"):
        return pafs.LocalFileSystem(), uris
    filesystem = pafs.S3FileSystem(
        access_key=options.get("AWS_ACCESS_KEY_ID"),
        secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
        session_token=options.get("AWS_SESSION_TOKEN"),
        region=options.get("AWS_REGION"),
        endpoint_override=options.get("AWS_ENDPOINT_URL"),
        scheme="http" if options.get("AWS_ALLOW_HTTP") else "https",
    )
    return filesystem, [u.removeprefix("s3://") for u in uris]


def _stored(table: str) -> pa.Schema:
    """A table's columns as its files hold them: a partition's value is in the file's path."""
    schema = SCHEMAS[table]()
    return schema.remove(schema.get_field_index("bucket")) if "bucket" in schema.names else schema


def _arrow(table: str, rows: list[dict[str, Any]]) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=SCHEMAS[table]())


def _schemas() -> dict[str, Callable[[], pa.Schema]]:
    def filings() -> pa.Schema:
        import pyarrow as pa

        text, when = pa.string(), pa.timestamp("us", tz="UTC")
        return pa.schema(
            [
                ("bucket", pa.int32()),
                ("company", text),
                ("id", text),
                ("latest", text),
                ("name", text),
                ("cik", text),
                ("ticker", text),
                ("form", text),
                ("period_end", pa.date32()),
                ("fiscal_year", pa.int32()),
                ("filed", pa.date32()),
                ("accession", text),
                ("pages", pa.int32()),
                ("tokens", pa.int64()),
                ("head", text),
                ("at", when),
                ("committed", when),
            ]
        )

    def sources() -> pa.Schema:
        import pyarrow as pa

        text = pa.string()
        return pa.schema(
            [
                ("bucket", pa.int32()),
                ("source", text),
                ("state", text),
                ("fingerprint", text),
                ("entry", text),
                ("reason", text),
                ("at", pa.timestamp("us", tz="UTC")),
            ]
        )

    def companies() -> pa.Schema:
        import pyarrow as pa

        text = pa.string()
        fields = [("company", text), ("name", text), ("ticker", text), ("cik", text), ("words", text)]
        return pa.schema([*fields, ("at", pa.timestamp("us", tz="UTC"))])

    return {"filings": filings, "sources": sources, "companies": companies}


SCHEMAS = _schemas()
