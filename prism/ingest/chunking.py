"""Chunks with stable ids: one per page for PDFs; for HTML and text, each physical page packed
into chunks of at most ``chunk_tokens`` tokens at paragraph, then line, then token boundaries, so
a chunk never spans two pages. A table (a paragraph of rows) stays whole where it fits; one cut
into pieces repeats its column header at the top of each. Chunks carry the "Item" heading they
fall under (EDGAR "PART II" / "Item 1A. Risk Factors", Markdown "#")."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from prism.ingest.models import Chunk, Chunking
from prism.ingest.pages import Page
from prism.segmenting import TokenCounter

# A separator after the item number is required unless the number ends the line, so prose such
# as "Item 7 of this report" is not taken for a heading.
_ITEM = re.compile(r"^item\s+\d{1,2}[a-z]?\s*(?:[.:\-\u2013\u2014]\s*\S.*|[.:]?)$", re.IGNORECASE)
_PART = re.compile(r"^part\s+[ivx]{1,4}\b\s*(?:[.:\-\u2013\u2014]\s*\S.*)?$", re.IGNORECASE)
_MARKDOWN = re.compile(r"^#{1,6}\s+\S")
_TOC_PAGE = re.compile(r"\s\d{1,3}$")  # "Item 1A. Risk Factors 12": a table-of-contents entry
MAX_HEADING_CHARS = 160
MIN_ROWS = 3
_FIGURE = re.compile(r"\d[\d,.]*\s*%?\)?\s*$|\(\d[\d,.]*\)|\$\s*\d")  # a line that ends in, or holds, a figure
_YEARS = re.compile(r"\b(?:19|20)\d{2}\b")
_DATES = re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2}\b,?", re.IGNORECASE)
# an amount: $5, 1,234, (12), 4.5, or a small number ending the row
_AMOUNT = re.compile(r"\$\s*\(?\s*\d|\d{1,3}(?:,\d{3})+|\(\s*\d[\d,.]*\s*\)|\d\.\d|(?<![\w.,])\d{1,3}\s*%?\s*$")
_HEADING_WORDS = re.compile(r"\d|million|thousand|billion|percent|%", re.IGNORECASE)  # what a column header says


def is_heading(line: str) -> bool:
    if not line or len(line) > MAX_HEADING_CHARS or _TOC_PAGE.search(line):
        return False
    return bool(_ITEM.match(line) or _PART.match(line) or _MARKDOWN.match(line))


@dataclass(frozen=True)
class Section:
    heading: str | None
    text: str  # the heading line first, when there is one


def sections(text: str) -> list[Section]:
    """The text cut before each heading line; sections with nothing but a heading are merged
    into the next one (a "PART I" line directly above "Item 1. Business")."""
    found: list[Section] = []
    heading: str | None = None
    lines: list[str] = []
    has_body = False

    for line in text.split("\n"):
        stripped = line.strip()
        if is_heading(stripped):
            if has_body:
                found.append(Section(heading, "\n".join(lines).strip()))
                lines, has_body = [], False
            heading = stripped.lstrip("#").strip() if _MARKDOWN.match(stripped) else stripped
        elif stripped:
            has_body = True
        lines.append(line)
    if has_body or lines:
        found.append(Section(heading, "\n".join(lines).strip()))
    return [s for s in found if s.text]


def page_chunks(filing_id: str, pages: Sequence[str], counter: TokenCounter) -> list[Chunk]:
    tokens = counter.count_many(pages)
    return [
        Chunk(
            id=f"{filing_id}:p{i + 1}",
            index=i,
            page=i + 1,
            text=text,
            tokens=n,
            flags=[] if text.strip() else ["empty"],
        )
        for i, (text, n) in enumerate(zip(pages, tokens))
    ]


def paged_chunks(filing_id: str, pages: Sequence[Page], chunking: Chunking, counter: TokenCounter) -> list[Chunk]:
    """Each page cut at its headings and packed into chunks; ids ``<filing>:p<page>.<part>``.
    A page that starts mid-section carries the heading of the page before."""
    out: list[Chunk] = []
    heading: str | None = None
    section = 0
    for page in pages:
        part = 0
        for piece in sections(page.text):
            if piece.heading is not None or section == 0:  # text before the first heading is section 1
                heading, section = piece.heading or heading, section + 1
            for body, split in _pack(piece.text, chunking.chunk_tokens, counter):
                part += 1
                out.append(
                    Chunk(
                        id=f"{filing_id}:p{page.number}.{part}",
                        index=len(out),
                        page=page.number,
                        printed_page=page.printed,
                        document=page.document,
                        section=section,
                        heading=heading,
                        text=body,
                        tokens=0,
                        flags=["split"] if split else [],
                    )
                )
    for chunk, n in zip(out, counter.count_many([c.text for c in out])):
        chunk.tokens = n
    return out


def _pack(text: str, limit: int, counter: TokenCounter) -> list[tuple[str, bool]]:
    """Paragraphs joined greedily up to ``limit`` tokens; a paragraph over it is cut by lines,
    a line over it by tokens (those pieces are flagged as split)."""
    pieces: list[tuple[str, bool]] = []
    for paragraph in _paragraphs(text):
        if counter.count(paragraph) <= limit:
            pieces.append((paragraph, False))
            continue
        pieces.extend(_cut(paragraph, limit, counter))
    chunks: list[tuple[str, bool]] = []
    current: list[str] = []
    current_tokens, current_split = 0, False
    for piece, split in pieces:
        n = counter.count(piece) + 1  # the separator
        if current and (current_tokens + n > limit or split or current_split):
            chunks.append(("\n\n".join(current), current_split))
            current, current_tokens = [], 0
        current.append(piece)
        current_tokens += n
        current_split = split
    if current:
        chunks.append(("\n\n".join(current), current_split))
    return chunks


def _paragraphs(text: str) -> list[str]:
    """The text's paragraphs; a run of three or more one-line rows (HTML that sets each table row
    apart) is one block, so the table is packed, and cut with its header, as a whole."""
    out: list[str] = []
    rows: list[str] = []
    for paragraph in (p.strip() for p in text.split("\n\n")):
        if paragraph and "\n" not in paragraph and _row_like(paragraph):
            rows.append(paragraph)
            continue
        _close(out, rows)
        rows = []
        if paragraph:
            out.append(paragraph)
    _close(out, rows)
    return out


def _close(out: list[str], rows: list[str]) -> None:
    """A run of rows ends: one block when it is a table, with the column header above it (a
    paragraph of up to four short lines naming years, dates or units) taken in."""
    if len(rows) < MIN_ROWS:
        out.extend(rows)
        return
    above = out[-1].split("\n") if out else []
    if above and len(above) <= 4 and len(out[-1]) <= 300 and not any(_is_row(x) for x in above):
        if _HEADING_WORDS.search(out[-1]):
            rows = [*above, *rows]
            out.pop()
    out.append("\n".join(rows))


def _row_like(line: str) -> bool:
    """A table row or a row label: short, ending in a figure or a colon, or a few words."""
    return len(line) <= 200 and (bool(_FIGURE.search(line)) or line.endswith(":") or len(line) <= 60)


def _column_header(lines: list[str]) -> list[str]:
    """A table's column header: the lines above its first row of amounts (dates, years and units
    are no amounts), less the row labels under it ("ASSETS", "Current assets:")."""
    first_row = next((i for i, line in enumerate(lines) if _is_row(line)), None)
    if not first_row or first_row > 4 or len(lines) - first_row < 3:
        return []
    header = lines[:first_row]
    while header and not _HEADING_WORDS.search(header[-1]):
        header.pop()
    return header


def _is_row(line: str) -> bool:
    return bool(_AMOUNT.search(_DATES.sub(" ", _YEARS.sub(" ", line))))


def _cut(paragraph: str, limit: int, counter: TokenCounter) -> list[tuple[str, bool]]:
    """A paragraph over the limit in pieces of whole lines; a table's pieces each start with its
    column header."""
    lines = paragraph.split("\n")
    header = _column_header(lines)
    header_tokens = counter.count("\n".join(header)) + 1 if header else 0
    if header_tokens > limit // 2:
        header, header_tokens = [], 0
    pieces: list[tuple[str, bool]] = []
    current: list[str] = []
    used = 0
    for line in lines[len(header) :]:
        n = counter.count(line) + 1
        if n > limit - header_tokens:  # a line too long for any chunk: cut at token boundaries
            if current:
                pieces.append(("\n".join(header + current), False))
                current, used = [], 0
            pieces.extend((window, True) for window in _token_windows(line, limit, counter))
            continue
        if current and used + n > limit - header_tokens:
            pieces.append(("\n".join(header + current), False))
            current, used = [], 0
        current.append(line)
        used += n
    if current:
        pieces.append(("\n".join(header + current), False))
    return pieces


def _token_windows(text: str, limit: int, counter: TokenCounter) -> list[str]:
    if counter.encoding is None:
        step = limit * 3  # the estimate's own rate: three characters a token
        return [text[i : i + step] for i in range(0, len(text), step)]
    ids = counter.encoding.encode_ordinary(text)
    return [counter.encoding.decode(ids[i : i + limit]) for i in range(0, len(ids), limit)]
