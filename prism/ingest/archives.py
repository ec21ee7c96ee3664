"""Archives of filings read where they lie: ``.tar``, ``.tar.gz``/``.tgz`` (EDGAR's daily feed,
``YYYYMMDD.nc.tar.gz``) and ``.zip``, over any seekable byte stream (a local file, an S3 object
read by ranged GETs). Nothing is unpacked to disk.

Listing reads the archive's table once, with each member's first bytes (its header, for a
filter): a tar's headers in one pass; a gzip stream in one streaming pass that records seek points
(indexed_gzip's index: every SPACING bytes, the 32 KiB window needed to start there), so a worker
reads its member from the nearest point instead of from the start; a zip's central directory.
Reading a member takes its bytes by offset. Named failures, never a crash: a member whose name
escapes its folder or is not UTF-8, one that expands past MAX_RATIO (a zip bomb) or past
MAX_MEMBER, a corrupt member, a truncated archive (the members before the cut are kept)."""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import BinaryIO, Literal

from pydantic import BaseModel

ArchiveKind = Literal["tar", "tar.gz", "zip"]
SPACING = 4 * 1024 * 1024  # a seek point every 4 MiB of a gzip stream: a 32 KiB window each (0.8%)
HEAD = 16 * 1024  # a member's first bytes, read when listing: its SEC or feed header
MAX_RATIO = 200  # a compressed member expanding past this (and past 1 MiB) is refused
MAX_MEMBER = 1024 * 1024 * 1024  # no filing is 1 GiB
READ_BUFFER = 256 * 1024  # compressed bytes a gzip stream is read in


class ArchiveError(ValueError):
    """What is wrong with an archive or one of its members, said in a line."""


class Member(BaseModel):
    """Where a member lies in its archive: what a worker needs to read it by offset."""

    archive: str  # the archive's URI (a path or s3://bucket/key)
    kind: ArchiveKind
    name: str  # its path inside the archive
    offset: int  # of its data: uncompressed, in the stream a tar holds; a zip member's local header
    size: int  # its data's bytes (uncompressed)
    index: str | None = None  # the key of the gzip stream's seek points in the corpus store

    @property
    def uri(self) -> str:
        return f"{self.archive}#{self.name}"


@dataclass
class Listing:
    members: list[tuple[Member, bytes]] = field(default_factory=list)  # each with its first HEAD bytes
    failures: list[tuple[str, str]] = field(default_factory=list)  # (member name, why)
    others: list[str] = field(default_factory=list)  # entries that are no file (folders, links)
    error: str | None = None  # the archive itself: truncated, corrupt, not what its name says
    index: bytes | None = None  # a gzip stream's seek points, to store for the workers


_MEMBER = re.compile(r"^(.*?\.(?:tar\.gz|tgz|tar|zip))#(.+)$", re.IGNORECASE)


def member_name(uri: str) -> str:
    """The name inside its archive of a member's URI (``day.nc.tar.gz#x.nc``: ``x.nc``); any
    other URI as it is."""
    match = _MEMBER.match(uri)
    return match.group(2) if match else uri


def archive_kind(name: str) -> ArchiveKind | None:
    lowered = PurePosixPath(name).name.lower()
    if lowered.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    if lowered.endswith(".tar"):
        return "tar"
    if lowered.endswith(".zip"):
        return "zip"
    return None


def list_archive(raw: BinaryIO, kind: ArchiveKind, archive: str, heads: bool = True) -> Listing:
    """Every member of the archive (with its first bytes, unless ``heads`` is False: an index
    says what each one is), and what failed, in one read."""
    listing = Listing()
    try:
        if kind == "zip":
            _list_zip(raw, archive, listing, heads)
        else:
            _list_tar(raw, kind, archive, listing, heads)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, zlib.error, ValueError) as err:
        listing.error = f"{'truncated or corrupt' if listing.members else 'not a readable'} {kind} archive after {len(listing.members)} member(s): {_said(err)}"
    return listing


def _list_tar(raw: BinaryIO, kind: ArchiveKind, archive: str, listing: Listing, heads: bool) -> None:
    stream: BinaryIO = raw
    gz = None
    if kind == "tar.gz":
        import indexed_gzip

        gz = stream = indexed_gzip.IndexedGzipFile(
            fileobj=raw, spacing=SPACING, auto_build=True, readbuf_size=READ_BUFFER
        )
    last: tuple[int, int] | None = (
        None  # the last member's place in listing.members, and the compressed bytes read before it
    )
    try:
        with tarfile.open(fileobj=stream, mode="r:", encoding="utf-8", errors="surrogateescape") as tar:
            for info in tar:
                if gz is not None and last is not None:
                    _expanded(listing, *last, raw.tell())
                    last = None
                if not info.isreg():
                    listing.others.append(shown_name(info.name))
                elif (why := checked_name(info.name) or _too_big(info.size)) is not None:
                    listing.failures.append((shown_name(info.name), why))
                else:
                    head = tar.extractfile(info).read(HEAD) if heads else b""  # type: ignore[union-attr]
                    member = Member(archive=archive, kind=kind, name=info.name, offset=info.offset_data, size=info.size)
                    listing.members.append((member, head))
                    last = (len(listing.members) - 1, raw.tell())
        if gz is not None and last is not None:
            _expanded(listing, *last, raw.tell())
    finally:
        if gz is not None:
            listing.index = _index(gz)


def _expanded(listing: Listing, place: int, before: int, after: int) -> None:
    """A gzip stream's member that expanded past MAX_RATIO of the compressed bytes read over it
    (give or take a read buffer, so only a true bomb is caught): refused."""
    member = listing.members[place][0]
    compressed = after - before + READ_BUFFER
    if member.size > 1024 * 1024 and member.size / compressed > MAX_RATIO:
        del listing.members[place]
        ratio = f"over {member.size / compressed:,.0f} times ({member.size:,} bytes from under {compressed:,})"
        listing.failures.append((member.name, f"it expands {ratio}: past {MAX_RATIO}, refused"))


def _list_zip(raw: BinaryIO, archive: str, listing: Listing, heads: bool) -> None:
    with zipfile.ZipFile(raw) as zf:
        for info in zf.infolist():
            if info.is_dir():
                listing.others.append(info.filename)
                continue
            why = checked_name(info.filename) or _too_big(info.file_size) or _bomb(info)
            if why is not None:
                listing.failures.append((info.filename, why))
                continue
            try:
                with zf.open(info) as member:
                    head = member.read(HEAD) if heads else b""
            except (zipfile.BadZipFile, zlib.error, NotImplementedError) as err:
                listing.failures.append((info.filename, f"a corrupt member: {_said(err)}"))
                continue
            entry = Member(
                archive=archive, kind="zip", name=info.filename, offset=info.header_offset, size=info.file_size
            )
            listing.members.append((entry, head))


def read_member(raw: BinaryIO, member: Member, index: bytes | None = None) -> bytes:
    """A member's bytes, read by offset; ArchiveError when they cannot be had whole."""
    try:
        if member.kind == "zip":
            return _read_zip(raw, member)
        stream: BinaryIO = raw
        if member.kind == "tar.gz":
            import indexed_gzip

            gz = indexed_gzip.IndexedGzipFile(fileobj=raw, auto_build=True, skip_crc_check=True)
            if index is not None:  # none recorded (a stream too short for a point): read from its start
                gz.import_index(fileobj=io.BytesIO(zlib.decompress(index)))
            stream = gz
        stream.seek(member.offset)
        data = stream.read(member.size)
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, ValueError) as err:
        raise ArchiveError(f"member {member.name!r} is corrupt or cut short: {_said(err)}") from None
    if len(data) != member.size:
        raise ArchiveError(f"member {member.name!r} is cut short: {len(data)} of {member.size} bytes")
    return data


def _read_zip(raw: BinaryIO, member: Member) -> bytes:
    with zipfile.ZipFile(raw) as zf:
        info = zf.getinfo(member.name)
        if info.header_offset != member.offset:
            raise ArchiveError(f"member {member.name!r} is not where the archive was listed: it changed")
        if why := _bomb(info):
            raise ArchiveError(why)
        with zf.open(info) as stream:
            data = stream.read(member.size + 1)  # the CRC is checked as the stream ends
    if len(data) > member.size:
        raise ArchiveError(f"member {member.name!r} expands past the size it declares")
    return data


def checked_name(name: str) -> str | None:
    """Why a member's name cannot be a filing's (not UTF-8, or out of its folder); None if fine."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"its name is not valid UTF-8 ({shown_name(name)})"
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if name.startswith(("/", "\\")) or (parts and parts[0].endswith(":")) or ".." in parts:
        return "its name escapes the archive's folder"
    return None


def _too_big(size: int) -> str | None:
    return f"{size:,} bytes: past the largest a filing is ({MAX_MEMBER:,})" if size > MAX_MEMBER else None


def _bomb(info: zipfile.ZipInfo) -> str | None:
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > 1024 * 1024 and ratio > MAX_RATIO:
        return f"it expands {ratio:,.0f} times ({info.compress_size:,} to {info.file_size:,} bytes): past {MAX_RATIO}, refused"
    return None


def _index(gz) -> bytes | None:
    """The gzip stream's seek points as built so far, compressed for storing."""
    out = io.BytesIO()
    try:
        gz.export_index(fileobj=out)
    except Exception:  # noqa: BLE001 - no point recorded (an empty or broken stream): members read from the start
        return None
    return zlib.compress(out.getvalue(), 6)


def shown_name(name: str) -> str:
    """A name as it can be shown: bytes that are not UTF-8 escaped."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _said(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
