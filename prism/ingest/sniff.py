"""What a file's bytes are, by their first bytes, and whether that is what its name says: a gzip
download named .html or an error page named .pdf is a failure naming what it is, not a filing
of garbage text."""

from __future__ import annotations

import codecs
import re
from pathlib import PurePosixPath

from prism.ingest.extract import IngestError
from prism.ingest.models import SourceKind

HEAD = 8192
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"PK\x03\x04", "zip"),
    (b"PK\x05\x06", "zip"),  # an empty archive
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
)
_HTML = re.compile(r"<(?:!doctype\s+html|html|head|body)[\s>]", re.IGNORECASE)
_AS_TEXT = {"HTML", "text"}  # what .htm, .html and .txt may hold: EDGAR serves SGML and text as .htm
_SAID = {
    "gzip": "gzip data",
    "zip": "a zip archive",
    "PDF": "a PDF",
    "PNG": "a PNG image",
    "JPEG": "a JPEG image",
    "GIF": "a GIF image",
    "binary": "binary data (NUL bytes)",
    "HTML": "HTML",
    "text": "text",
}


def sniff(data: bytes) -> str | None:
    """What the bytes are: gzip, zip, PDF, PNG, JPEG, GIF, binary (NUL bytes in the first 8 KiB),
    HTML or text; None when there are none."""
    head = data[:HEAD]
    if not head:
        return None
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head.lstrip().startswith(b"%PDF"):
        return "PDF"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):  # NUL bytes, yet text
        text = head.decode("utf-16", errors="ignore")
    elif b"\x00" in head:
        return "binary"
    else:
        text = head.decode("latin-1")  # only tags are looked for: any 8-bit text reads
    return "HTML" if _HTML.search(text) else "text"


def check_format(data: bytes, kind: SourceKind, source: str) -> None:
    """Raise IngestError when the content is not what the name says: a .pdf must start (after
    whitespace) with %PDF; .htm, .html and .txt must be HTML or text. Rows are not checked
    (.jsonl.gz is gzip by name); empty content is left to the parser, which says so."""
    if kind == "rows":
        return
    found = sniff(data)
    fits = found == "PDF" if kind == "pdf" else found in _AS_TEXT
    if found is not None and not fits:
        suffix = PurePosixPath(source).suffix.lower()
        raise IngestError(source, f"named {suffix} but the content is {_SAID[found]}")
