"""Physical pages out of HTML and plain text, as a printer would have cut them.

Markers, per document; the first rule that finds one wins:
1. HTML: CSS ``page-break-before/after`` (``always``, ``left``, ``right``) or ``break-before/after:
   page`` on any element (the break falls before the element, or after it ends), and
   ``<!-- PAGEBREAK -->`` comments;
2. text: ``<PAGE>`` lines (a new page starts at the line) and form feeds;
3. neither: printed page-number lines. A centred ``-12-`` line starts a page; a lone ``12`` or
   ``Page 12`` line ends one. They count only as a rising run of at least three numbers, so a
   stray number in a table is not taken for a page;
4. none: one page.

Pages with no visible text are not counted. Hidden HTML is dropped (``<head>``, scripts, styles,
the inline-XBRL header, ``display:none``); inline-XBRL ``dei:`` facts are read before it goes.
A line repeated at the top or bottom of most pages (a running header or footer, digits aside) is
kept out of the text and read for the page's printed number.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from prism.ingest.extract import IngestError, normalize

_BREAK = re.compile(r"(?:page-)?break-(before|after)\s*:\s*(?:always|page|left|right|recto|verso)\b", re.IGNORECASE)
_HIDDEN = re.compile(r"display\s*:\s*none", re.IGNORECASE)
_HIDDEN_TAGS = frozenset({"head", "script", "style", "title", "ix:header", "noscript"})
_MARK = "\ue000"  # a private-use character: stands for a page break in the rendered text
_BLOCKS = re.compile(rb"<(?:p|br|tr|td|div|li|h[1-6]|table)[\s>/]", re.IGNORECASE)
_PAGE_LINE = re.compile(r"^[ \t]*<PAGE>[ \t]*(\S*)[ \t]*$", re.IGNORECASE | re.MULTILINE)
_DASHED = re.compile(r"^\s*-\s*(\d{1,4})\s*-\s*$")
_FOLIO = re.compile(r"^\s*(?:page\s+)?(\d{1,4})(?:\s+of\s+\d{1,4})?\s*$", re.IGNORECASE)
# a printed page number alone on a line: 12, -12-, F-3, xii, Page 12, Page 12 of 40
_PRINTED = re.compile(
    r"^\s*(?:page\s+)?-?\s*(\d{1,4}|[A-Z]{1,2}-\d{1,3}|[ivxlc]{1,7})\s*-?(?:\s+of\s+\d{1,4})?\s*$", re.IGNORECASE
)
_EDGE_NUMBER = re.compile(r"(?:^|[\s|])(\d{1,4}|[A-Z]{1,2}-\d{1,3})\s*$|^\s*(\d{1,4})(?:[\s|]|$)")
_DIGITS = re.compile(r"\d+")
_CLOSE_HTML = re.compile(rb"</html\s*>", re.IGNORECASE)
_TEXT_TAGS = re.compile(r"</?(?:TABLE|CAPTION|S|C|FN)>", re.IGNORECASE)
EDGE_LINES = 3  # how far from a page's top or bottom a running line or printed number sits
MIN_RUN = 3  # printed numbers that make a run; pages that make "most pages"


@dataclass(frozen=True)
class Page:
    text: str  # what rankers read: running headers and footers left out
    printed: str | None = None  # the page number printed on it
    number: int = 0  # its 1-based physical page in the filing, once placed
    document: str | None = None  # the type of the submission document it belongs to


@dataclass(frozen=True)
class HtmlDocument:
    pages: list[Page]
    facts: dict[str, str]  # inline-XBRL dei facts by local name ("DocumentType": "10-Q")


def html_pages(data: bytes, source: str) -> HtmlDocument:
    import lxml.etree
    import lxml.html

    try:
        # some SEC renderings put the whole form after </html>: a browser shows it, so must this
        tree = lxml.html.document_fromstring(_CLOSE_HTML.sub(b"", data), parser=_parser(data))
    except (lxml.etree.ParserError, ValueError) as err:
        raise IngestError(source, f"not readable HTML ({err})") from None
    facts = dei_facts(tree)
    for element in [e for e in tree.iter() if _hidden(e)]:
        _drop(element)
    if _text_like(data):  # 1990s text in <html><body><div>: its lines and columns are its layout
        pieces, printed = text_split(tree.text_content())
        pages = finish(pieces, printed, keep_spacing=True)
    else:
        marked = _mark_breaks(tree)
        text = _render(tree)
        pieces, printed = (text.split(_MARK), None) if marked else printed_split(text)
        pages = finish(pieces, printed, keep_spacing=False)
    if not pages:
        raise IngestError(source, "the HTML holds no text")
    return HtmlDocument(pages, facts)


def text_pages(text: str) -> list[Page]:
    pieces, printed = text_split(text)
    return finish(pieces, printed, keep_spacing=True)


def text_split(text: str) -> tuple[list[str], list[str | None] | None]:
    """Pieces at ``<PAGE>`` lines and form feeds, else at printed page numbers."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if _PAGE_LINE.search(text) or "\f" in text:
        pieces: list[str] = []
        printed: list[str | None] = []
        for part in text.split("\f"):
            bits = _PAGE_LINE.split(part)  # text, number, text, number, ...
            pieces.append(bits[0])
            printed.append(None)
            for i in range(1, len(bits), 2):
                pieces.append(bits[i + 1])
                printed.append(bits[i] or None)
        return pieces, printed
    return printed_split(text)


def printed_split(text: str) -> tuple[list[str], list[str | None] | None]:
    """Pieces at printed page-number lines (rule 3 above), or the whole text when there are none."""
    lines = text.split("\n")
    dashed = [(i, int(m.group(1))) for i, line in enumerate(lines) if (m := _DASHED.match(line))]
    starts = _rising(dashed)
    if len(starts) >= MIN_RUN:  # "-12-" heads its page
        cuts = [i for i, _ in starts]
        bounds = [0, *cuts, len(lines)]
        pieces = ["\n".join(lines[a:b]) for a, b in zip(bounds, bounds[1:])]
        return pieces, [None, *(str(n) for _, n in starts)]
    folios = _rising([(i, int(m.group(1))) for i, line in enumerate(lines) if (m := _FOLIO.match(line))])
    if len(folios) >= MIN_RUN:  # "12" or "Page 12" ends its page
        ends = [i + 1 for i, _ in folios]
        bounds = [0, *ends, len(lines)]
        pieces = ["\n".join(lines[a:b]) for a, b in zip(bounds, bounds[1:])]
        return pieces, [*(str(n) for _, n in folios), None]
    return [text], None


def _rising(found: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest run of page numbers that rise by one to five at each step, in line order."""
    best: list[tuple[int, int]] = []
    run: list[tuple[int, int]] = []
    for item in found:
        if run and 1 <= item[1] - run[-1][1] <= 5:
            run.append(item)
        elif not run or item[1] != run[-1][1]:
            run = [item]
        if len(run) > len(best):
            best = list(run)
    return best


def finish(pieces: list[str], printed: list[str | None] | None, keep_spacing: bool) -> list[Page]:
    """Pages from raw pieces: text tidied, pages without text dropped, running lines taken out
    and read for printed page numbers."""
    if keep_spacing:  # EDGAR's text-table tags mark columns for a typesetter, not words
        pieces = [_TEXT_TAGS.sub("", p) for p in pieces]
    texts = [_tidy(p, keep_spacing) for p in pieces]
    numbers = printed or [None] * len(texts)
    kept = [(t, n) for t, n in zip(texts, numbers) if t.strip()]
    running = _running([t for t, _ in kept])
    pages: list[Page] = []
    for text, number in kept:
        lines = text.split("\n")
        edges = _edges(lines)
        body = [line for i, line in enumerate(lines) if not (i in edges and _key(line) in running)]
        found = number or _printed(lines, running)
        if not "\n".join(body).strip():
            body = lines  # a page that is nothing but its running lines keeps them
        pages.append(Page("\n".join(body).strip("\n"), found))
    return pages


def _tidy(text: str, keep_spacing: bool) -> str:
    if not keep_spacing:
        return normalize(text)
    lines = [line.rstrip() for line in text.expandtabs().split("\n")]
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    out: list[str] = []
    for line in lines:
        line = line[indent:].replace("\u00a0", " ")
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip("\n")


def _edges(lines: list[str]) -> set[int]:
    """The positions of a page's first and last few lines with text."""
    filled = [j for j, line in enumerate(lines) if line.strip()]
    return {*filled[:EDGE_LINES], *filled[-EDGE_LINES:]}


def _key(line: str) -> str:
    """A line as it repeats from page to page: its page number and any other digits left out, so
    mirrored footers ("4  CABOT CORPORATION", "CABOT CORPORATION  5") are one line."""
    return " ".join(_DIGITS.sub(" ", line).split()).lower() or "#"


def _running(texts: list[str]) -> set[str]:
    """Lines (digits aside) at the top or bottom of at least half the pages, and of three or more."""
    if len(texts) < MIN_RUN:
        return set()
    seen: Counter[str] = Counter()
    for text in texts:
        filled = [line for line in text.split("\n") if line.strip()]
        seen.update({_key(line) for line in filled[:EDGE_LINES] + filled[-EDGE_LINES:]})
    need = max(MIN_RUN, (len(texts) + 1) // 2)
    return {key for key, n in seen.items() if n >= need and len(key) <= 160}


def _printed(lines: list[str], running: set[str]) -> str | None:
    """The page number a page prints: a number alone on its last or first lines, or the number
    that ends or starts a running footer or header ("Apple Inc. | 2024 Form 10-K | 31")."""
    filled = [line.strip() for line in lines if line.strip()]
    edges = list(reversed(filled[-EDGE_LINES:])) + filled[:EDGE_LINES]
    for line in edges:
        if match := _PRINTED.match(line):
            return match.group(1)
    for line in edges:
        if _key(line) in running and (match := _EDGE_NUMBER.search(line)):
            return match.group(1) or match.group(2)
    return None


# -- HTML -----------------------------------------------------------------------------------------


def _parser(data: bytes):  # noqa: ANN202 - an lxml HTMLParser
    """UTF-8 for bytes that are UTF-8 (libxml2 would read undeclared ones as Latin-1), else the
    document's declared charset."""
    import lxml.html

    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return lxml.html.HTMLParser(encoding="utf-8")


def _text_like(data: bytes) -> bool:
    """Plain text wrapped in a few tags: many more lines than block elements, no CSS page breaks."""
    head = data[:400_000]
    return head.count(b"\n") > 20 * (len(_BLOCKS.findall(head)) + 5) and not _BREAK.search(head.decode("latin-1"))


def _hidden(element) -> bool:  # noqa: ANN001 - an lxml element
    tag = element.tag
    if not isinstance(tag, str):
        return False
    return tag.lower() in _HIDDEN_TAGS or bool(_HIDDEN.search(element.get("style") or ""))


def _drop(element) -> None:  # noqa: ANN001
    """Remove an element and what it holds, keeping the text that follows it."""
    parent = element.getparent()
    if parent is None:
        return
    tail = element.tail
    previous = element.getprevious()
    if tail:
        if previous is not None:
            previous.tail = (previous.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail
    parent.remove(element)


def _mark_breaks(tree) -> int:  # noqa: ANN001
    """A marker element where each page break falls; how many were placed."""
    import lxml.etree
    import lxml.html

    placed = 0
    for comment in list(tree.iter(lxml.etree.Comment)):
        if (comment.text or "").strip().upper() == "PAGEBREAK" and comment.getparent() is not None:
            comment.addnext(_marker(lxml.html))
            placed += 1
    for element in list(tree.iter()):
        if not isinstance(element.tag, str):
            continue
        if "valign" in element.attrib:  # a bottom-aligned cell would put a row's values a line below its label
            del element.attrib["valign"]
        style = element.get("style")
        if not style or "break" not in style.lower():
            continue
        for side in {m.group(1).lower() for m in _BREAK.finditer(style)}:
            marker = _marker(lxml.html)
            if side == "before":
                element.addprevious(marker)
            else:
                marker.tail, element.tail = element.tail, None  # what follows the element is on the next page
                element.addnext(marker)
            placed += 1
    return placed


def _marker(html):  # noqa: ANN001, ANN202
    marker = html.Element("div")
    marker.text = _MARK
    return marker


def _render(tree) -> str:  # noqa: ANN001
    from inscriptis import Inscriptis
    from inscriptis.model.config import ParserConfig

    return Inscriptis(tree, ParserConfig(display_images=False, display_links=False)).get_text()


def dei_facts(tree) -> dict[str, str]:  # noqa: ANN001
    """Inline-XBRL ``dei:`` facts (first of each name), read from anywhere, the hidden header included."""
    facts: dict[str, str] = {}
    for element in tree.iter():
        if not isinstance(element.tag, str) or not element.tag.lower().startswith("ix:non"):
            continue
        name = element.get("name") or ""
        if name.lower().startswith("dei:"):
            value = " ".join(element.text_content().split())
            if value:
                facts.setdefault(name.split(":", 1)[1], value)
    return facts
