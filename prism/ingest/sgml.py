"""EDGAR submissions: the full-submission files of the archives (``<SEC-DOCUMENT>`` .txt, a
``KEY: value`` SEC header) and the feed's dissemination files (``<SUBMISSION>`` .nc, a header of
one tag a line, sections closed by ``</...>``): the header and the documents, in file order.
Which documents can be read is decided here; reading them is for prism.ingest.pages."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from prism.ingest.models import DocumentKind

_DOCUMENT = re.compile(rb"<DOCUMENT>(.*?)(?:</DOCUMENT>|\Z)", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(rb"^<(TYPE|SEQUENCE|FILENAME|DESCRIPTION)>[ \t]*(.*?)[ \t]*$", re.MULTILINE | re.IGNORECASE)
_TEXT = re.compile(rb"<TEXT>\r?\n?(.*?)(?:</TEXT>|\Z)", re.DOTALL | re.IGNORECASE)
_HEADER_START = re.compile(rb"<(?:SEC|IMS)-HEADER>", re.IGNORECASE)
_WRAPPER = re.compile(rb"^\s*<(XBRL|XML|PDF|JSON)>\s*", re.IGNORECASE)
_UUENCODED = re.compile(rb"^\s*begin [0-7]{3} \S", re.IGNORECASE)
_HTML = re.compile(rb"<(?:html|body)[\s>]", re.IGNORECASE)
_HEADER_LINE = re.compile(r"^(\s*)([A-Z][A-Z0-9 .\-/]*?):[ \t]*(.*?)\s*$")
# Types and file names whose content is data, not prose: XBRL, the viewer's files, spreadsheets, images.
_DATA_TYPES = re.compile(r"^(?:EX-101\b|XML$|JSON$|ZIP$|EXCEL$|GRAPHIC$|XBRL\b)", re.IGNORECASE)
_DATA_SUFFIXES = frozenset({".xml", ".xsd", ".json", ".js", ".css", ".jpg", ".jpeg", ".gif", ".png", ".xlsx", ".zip"})


def is_submission(data: bytes) -> bool:
    """An EDGAR submission: an SEC header, a feed header, or a ``<DOCUMENT>`` with its ``<TYPE>``
    near the top."""
    head = data[:8192].upper()
    markers = (b"<SEC-DOCUMENT>", b"<SEC-HEADER>", b"<SUBMISSION>")
    return any(m in head for m in markers) or (b"<DOCUMENT>" in head and b"<TYPE>" in head)


def head_fields(data: bytes) -> dict[str, str]:
    """The header's fields (see header_fields) of a submission, or of its first bytes alone: a
    filter decides on them without reading the documents."""
    first = _DOCUMENT.search(data)
    head = data[: first.start() if first else len(data)]
    if b"\r" in head:
        head = head.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if match := _HEADER_START.search(head):
        return header_fields(
            head[match.end() :].split(b"</SEC-HEADER>")[0].split(b"</IMS-HEADER>")[0].decode("latin-1")
        )
    if head.lstrip()[:12].upper() == b"<SUBMISSION>":
        return feed_header_fields(head.decode("latin-1"))
    return {}


@dataclass
class SgmlDocument:
    type: str
    sequence: int | None
    filename: str | None
    description: str | None
    body: bytes  # the content between <TEXT> and </TEXT>, wrapper tags taken off
    kind: DocumentKind
    skipped: str | None = None  # why it gives no pages


@dataclass
class Submission:
    header: dict[str, str] = field(default_factory=dict)  # the header's fields (see header_fields)
    documents: list[SgmlDocument] = field(default_factory=list)


def parse_submission(data: bytes) -> Submission:
    out = Submission()
    if b"\r" in data[:65536]:  # feed files end their lines in CRLF or a bare CR
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    out.header = head_fields(data)
    for block in _DOCUMENT.finditer(data):
        tags = {
            m.group(1).upper().decode(): m.group(2).decode("latin-1").strip()
            for m in _TAG.finditer(block.group(1)[:2000])
        }
        text = _TEXT.search(block.group(1))
        body = text.group(1) if text else b""
        sequence = tags.get("SEQUENCE", "")
        doc_type = tags.get("TYPE", "") or "UNKNOWN"
        filename = tags.get("FILENAME") or None
        kind, skipped = _kind(doc_type, filename, body)
        out.documents.append(
            SgmlDocument(
                type=doc_type,
                sequence=int(sequence) if sequence.isdigit() else None,
                filename=filename,
                description=tags.get("DESCRIPTION") or None,
                body=_WRAPPER.sub(b"", body, count=1),
                kind=kind,
                skipped=skipped,
            )
        )
    return out


def _kind(doc_type: str, filename: str | None, body: bytes) -> tuple[DocumentKind, str | None]:
    suffix = PurePosixPath(filename.lower()).suffix if filename else ""
    if _UUENCODED.match(_WRAPPER.sub(b"", body[:200], count=1)):
        return ("pdf", None) if suffix == ".pdf" else ("binary", "uuencoded binary")
    if _DATA_TYPES.match(doc_type) or suffix in _DATA_SUFFIXES:
        return "xbrl-xml", "XBRL, XML or other data"
    if suffix == ".pdf":
        return "other", "a PDF not uuencoded"
    if not body.strip():
        return "other", "no content"
    # 1990s text carries <TABLE>, <S> and <C> tags of its own: only an html or body tag makes HTML
    return ("html", None) if suffix in (".htm", ".html") or _HTML.search(body[:4000]) else ("text", None)


def header_fields(text: str) -> dict[str, str]:
    """Flat fields of the SEC header. Of the company sections, the SUBJECT COMPANY's or the
    ISSUER's are kept when there is one (a tender offer or an ownership report is about it, not
    its filer), else the first FILER's; keys are the header's own ("COMPANY CONFORMED NAME", "FILED AS OF DATE")."""
    top: dict[str, str] = {}
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        match = _HEADER_LINE.match(line)
        if not match:
            continue
        indent, key, value = match.groups()
        if not indent and not value:  # "FILER:", "SUBJECT COMPANY:", "FILED BY:"
            current = sections.setdefault(key, {}) if key not in sections else None
            continue
        if indent and current is not None:
            current.setdefault(key, value)
        elif not indent:
            top.setdefault(key, value)
            current = None
    company = sections.get("SUBJECT COMPANY") or sections.get("ISSUER") or sections.get("FILER") or {}
    return {**top, **{k: v for k, v in company.items() if v}}


# The feed header's sections that hold the company (the subject of a tender offer or an ownership
# report first, then the issuer, then the first filer); REPORTING-OWNER and FILED-BY never do.
_COMPANY_SECTIONS = ("SUBJECT-COMPANY", "ISSUER", "FILER")
_FEED_TAG = re.compile(r"^<(/?)([A-Z0-9][A-Z0-9\-]*)>(.*)$")
_FEED_KEYS = {
    "ACCESSION-NUMBER": "ACCESSION NUMBER",
    "TYPE": "CONFORMED SUBMISSION TYPE",
    "PERIOD": "CONFORMED PERIOD OF REPORT",
    "FILING-DATE": "FILED AS OF DATE",
}
_FEED_COMPANY = {
    "CONFORMED-NAME": "COMPANY CONFORMED NAME",
    "CIK": "CENTRAL INDEX KEY",
    "FISCAL-YEAR-END": "FISCAL YEAR END",
}


def feed_header_fields(text: str) -> dict[str, str]:
    """A feed file's ``<SUBMISSION>`` header as the SEC header's keys: the accession number, the
    form (TYPE, else FORM-TYPE), the period, the filing date, and the company of its first
    SUBJECT-COMPANY, else ISSUER, else first FILER section."""
    closed = set(re.findall(r"</([A-Z0-9][A-Z0-9\-]*)>", text))  # the tags that open a section
    top: dict[str, str] = {}
    sections: dict[str, dict[str, str]] = {}
    stack: list[str] = []
    for line in text.splitlines():
        match = _FEED_TAG.match(line.strip())
        if not match:
            continue
        closing, tag, value = match.group(1), match.group(2), match.group(3).strip()
        if closing:
            if tag in stack:
                del stack[stack.index(tag) :]
        elif not value and tag in closed:
            if not stack and tag in sections:
                tag = f"{tag}#{len(sections)}"  # a second FILER: the first one is the company's
            stack.append(tag)
        elif value:
            (sections.setdefault(stack[0], {}) if stack else top).setdefault(tag, value)
    fields = {key: top[tag] for tag, key in _FEED_KEYS.items() if tag in top}
    if "CONFORMED SUBMISSION TYPE" not in fields and (form := sections.get("FILER", {}).get("FORM-TYPE")):
        fields["CONFORMED SUBMISSION TYPE"] = form
    company = next((sections[s] for s in _COMPANY_SECTIONS if s in sections), {})
    return fields | {key: company[tag] for tag, key in _FEED_COMPANY.items() if company.get(tag)}


class BrokenUuencode(ValueError):
    """A uuencoded block that does not decode: a line past repair, or no ``end``."""


def uudecode(body: bytes) -> bytes:
    """The bytes of a uuencoded document (``begin 644 name`` ... ``end``); BrokenUuencode naming
    the line where it breaks."""
    import binascii

    out = bytearray()
    lines = body.splitlines()
    for number, line in enumerate(lines[1:], start=2):
        if line.strip() in (b"end", b"`", b""):
            if line.strip() == b"end":
                return bytes(out)
            continue
        try:
            out += binascii.a2b_uu(line)
        except binascii.Error:
            # some encoders pad short lines without the trailing spaces a2b_uu wants
            length = (((line[0] - 32) & 63) * 4 + 5) // 3
            try:
                out += binascii.a2b_uu(line[:length])
            except binascii.Error as err:
                raise BrokenUuencode(f"its uuencoded block breaks at line {number} ({err})") from None
    raise BrokenUuencode("its uuencoded block has no end line")
