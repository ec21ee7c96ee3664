"""What changed in a filing's cited passages since the company's previous comparable filing.

The unit is a paragraph of a cited chunk, page furniture left out (running heads and feet,
printed page numbers, "Table of Contents"). Each current paragraph is matched to its best
counterpart in the previous filing, within its own section first (sections matched by name, so
a 10-Q's "Part II, Item 1A. Risk Factors" meets a 10-K's "Item 1A. Risk Factors", and MD&A is
Item 2 in one and Item 7 in the other), then anywhere; each previous paragraph serves one
current paragraph at most. Similarity is the cosine of TF-IDF vectors over word and number
unigrams, the IDF fitted on the previous filing's paragraphs. A pair whose figures differ is
never unchanged. See docs/changes.md.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from functools import cached_property, lru_cache
from itertools import chain, count
from typing import Literal

import numpy as np
from scipy.sparse import csr_matrix

from prism.ingest.chunking import is_heading
from prism.ingest.models import Chunk

# Below this similarity a paragraph has no counterpart (added). Fitted by bench/changes.py on
# seeded edits of real filings (best F1 from 0.52 to 0.58); riskdiff.com's anchor is 0.45.
COUNTERPART_MIN = 0.54
# At or above it, with the same figures, a paragraph is unchanged: fitted by bench/changes.py at
# the top of the scale (any changed word is a modification); riskdiff.com's anchor is 0.92.
UNCHANGED_MIN = 1.0

ChangeKind = Literal["unchanged", "modified", "added", "removed"]


@dataclass(frozen=True)
class Paragraph:
    text: str
    heading: str | None  # the section heading it falls under ("Item 1A. Risk Factors")
    page: int | None
    chunk_id: str  # the chunk it starts in
    position: int  # its place among the filing's paragraphs, from 0
    continued_in: tuple[str, ...] = ()  # the chunks it runs on into (a paragraph cut by a page break)
    # its words and numbers, lowercased, punctuation aside ("40,609" is "40609"): what is compared
    terms: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", _terms(self.text))

    @cached_property
    def figures(self) -> tuple[str, ...]:
        """Its numbers, percentages and dates, in order, normalised."""
        return _figures(self.text)

    @property
    def squashed(self) -> str:
        """Its terms run together: the same for texts that differ only in spacing inside words."""
        return "".join(self.terms)

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        return (self.chunk_id, *self.continued_in)


@dataclass(frozen=True)
class Change:
    change: ChangeKind
    # TF-IDF cosine in [0, 1] with the counterpart; for an added or removed paragraph, with the
    # nearest paragraph on the other side (below the counterpart threshold, or taken by another)
    similarity: float
    current: Paragraph | None  # None for a removed paragraph
    previous: Paragraph | None  # None for an added one

    @cached_property
    def redline(self) -> str:
        """The current text with ``[-removed-]{+added+}`` marks (made when first read); an
        unchanged paragraph's text has none."""
        if self.change == "unchanged" and self.current is not None:
            return self.current.text
        if self.previous is None:
            return f"{{+{self.current.text}+}}" if self.current else ""
        if self.current is None:
            return f"[-{self.previous.text}-]"
        return redline(self.previous.text, self.current.text)


# -- paragraphs ------------------------------------------------------------------------------------

_PAGE_NUMBER = re.compile(
    r"^(?:page\s+)?[-\u2013\u2014]?\s*(?:\d{1,4}|[a-z]{1,2}-\d{1,3}|c{0,3}(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3}))"
    r"\s*[-\u2013\u2014]?(?:\s+of\s+\d{1,4})?$",
    re.IGNORECASE,
)
_CONTENTS = re.compile(r"^(?:return\s+to\s+|back\s+to\s+)?(?:table\s+of\s+contents|index)\.?$", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_LETTER = re.compile(r"[a-z]", re.IGNORECASE)
_BULLET = re.compile(r"^(?:[\u2022\u25cf\u25aa\u25e6\u25a0\u2023*\-\u2013\u2014]|\(?[a-z0-9]{1,3}\)|\d{1,2}\.)\s")
# "Item" on a line of its own, broken from the "1A. Risk Factors" under it
_LONE_ITEM = re.compile(r"^(?:part\s+[ivx]{1,4}[,.]?\s*)?items?$", re.IGNORECASE)
# "ITEM 7 Management's Discussion and Analysis": an item heading with no stop after its number,
# as some PDFs print them (the chunker asks for one, so "Item 7 of this report" is prose)
_BARE_ITEM = re.compile(r"^item\s+\d{1,2}[a-z]?\s+[A-Z][^.,;:]*$", re.IGNORECASE)
_TOC_PAGE = re.compile(r"\s\d{1,3}$")
_ENDS_SENTENCE = re.compile(r"[.;:?!][)\"'\u201d\u2019]*$")
_NUMBER_END = re.compile(r"[\d)%]$")
_FIGURE_WORD = re.compile(r"^[$(]*\d[\d,.]*[)%]*$")
EDGE_LINES = 3  # how close to a page's top or bottom a running line sits
RUNNING_MAX_CHARS = 80  # a running head or foot is short
RUNNING_SHARE = 0.2  # of the pages, at whose edges a line must repeat to be furniture (and on 3 at least)
WRAP_MIN_CHARS = 50  # a line this long in wrapped text is a full one or a paragraph's last
# the share of a filing's long lines broken mid-sentence that makes it wrapped text: 0.4 to 0.8
# on FinanceBench's PDFs, 0.10 to 0.15 on the bundled EDGAR HTML
WRAP_OPEN_SHARE = 0.3
FULL_LINE = 0.85  # of a wrapped page's line width: a line this long runs on into the next
PROSE_WORDS = 8  # fewer words: a heading, a label or a table row, not a paragraph of its own
HEADING_MAX_CHARS = 100  # an item heading with no stop after its number is short
HEADING_LINES = 2  # short lines kept with the paragraph under them


def paragraphs(chunks: Sequence[Chunk]) -> list[Paragraph]:
    """The chunks' paragraphs in order, page furniture left out. Blank lines part paragraphs; in
    text wrapped at a fixed width (PDF pages) a line that fills the width runs on into the next;
    a line or two of heading stays with the paragraph under it; a run of short lines (a table) is
    one paragraph; a paragraph cut by a page break is joined again. Pass a whole filing, so that
    running heads are seen repeating, and keep the cited ones with ``in_chunks``."""
    running, width = _running_lines(chunks), _line_width(chunks)
    out: list[Paragraph] = []
    heading: str | None = None
    last: Chunk | None = None
    for chunk in chunks:
        heading = chunk.heading or heading
        lines = _body_lines(chunk.text, running)
        pieces = list(_pieces(lines, width))
        if pieces and pieces[0][0] is None and out and last and _runs_on(out[-1], last, chunk, pieces[0][1]):
            before = out[-1]
            text, continued = _joined(before.text, pieces.pop(0)[1]), (*before.continued_in, chunk.id)
            out[-1] = replace(before, text=text, continued_in=continued)
        for found_heading, text in pieces:
            if found_heading is not None:
                heading = found_heading
                continue
            out.append(Paragraph(text, heading, chunk.page, chunk.id, len(out)))
        last = chunk
    return out


def in_chunks(found: Iterable[Paragraph], chunk_ids: Collection[str]) -> list[Paragraph]:
    """The paragraphs that lie, in part or whole, in the given chunks (the cited ones)."""
    return [p for p in found if any(c in chunk_ids for c in p.chunk_ids)]


def _runs_on(before: Paragraph, last: Chunk, chunk: Chunk, first: str) -> bool:
    """A paragraph left open at a chunk's end (no closing stop) whose next chunk starts in lowercase."""
    return (
        (before.chunk_id == last.id or last.id in before.continued_in)
        and chunk.index == last.index + 1
        and first[:1].islower()
        and not _ENDS_SENTENCE.search(before.text)
    )


def _joined(head: str, tail: str) -> str:
    return head + tail if head.endswith("-") and head[-2:-1].isalpha() else f"{head} {tail}"


def _key(line: str) -> str:
    """A line as it repeats from page to page, its page number and other digits aside."""
    return " ".join(_DIGITS.sub(" ", line).split()).lower()


def _page_lines(chunks: Sequence[Chunk]) -> dict[int, list[str]]:
    pages: dict[int, list[str]] = {}
    for chunk in chunks:
        page = chunk.page if chunk.page is not None else chunk.index
        pages.setdefault(page, []).extend(line.strip() for line in chunk.text.split("\n") if line.strip())
    return pages


def _running_lines(chunks: Sequence[Chunk]) -> frozenset[str]:
    """Short lines (digits aside) that top or end at least 3 pages and a fifth of them, found
    from the edge in: a line counts once the furniture outside it is set aside."""
    pages = [lines for lines in _page_lines(chunks).values() if lines]
    need = max(3, math.ceil(RUNNING_SHARE * len(pages)))
    running: set[str] = set()
    spans = [[0, len(lines)] for lines in pages]
    for _ in range(EDGE_LINES):
        seen: Counter[str] = Counter()
        for lines, (top, end) in zip(pages, spans):
            edges = {lines[top], lines[end - 1]} if top < end else set()
            seen.update({_key(line) for line in edges if len(line) <= RUNNING_MAX_CHARS and _LETTER.search(line)})
        running |= {key for key, n in seen.items() if n >= need}
        for lines, span in zip(pages, spans):
            while span[0] < span[1] and _furniture(lines[span[0]], True, running):
                span[0] += 1
            while span[0] < span[1] and _furniture(lines[span[1] - 1], True, running):
                span[1] -= 1
    return frozenset(running)


def _furniture(line: str, at_edge: bool, running: Collection[str]) -> bool:
    if _CONTENTS.match(line):
        return True
    return at_edge and (bool(_PAGE_NUMBER.match(line)) or (len(line) <= RUNNING_MAX_CHARS and _key(line) in running))


def _body_lines(text: str, running: frozenset[str]) -> list[str]:
    """The chunk's lines, stripped, furniture left out; blank lines kept as ''."""
    lines = [line.strip() for line in text.split("\n")]
    filled = [i for i, line in enumerate(lines) if line]
    edges = {*filled[:EDGE_LINES], *filled[-EDGE_LINES:]}
    return [line for i, line in enumerate(lines) if not (line and _furniture(line, i in edges, running))]


def _line_width(chunks: Sequence[Chunk]) -> int:
    """The width the filing's text is wrapped at, or 0 when it is not wrapped (HTML gives a
    paragraph a line; PDF pages are wrapped at one width, and many of their long lines break
    mid-sentence): the 90th percentile of its long lines' lengths."""
    long = [s for c in chunks for line in c.text.split("\n") if len(s := line.strip()) >= WRAP_MIN_CHARS]
    broken = sum(1 for line in long if line[-1].islower() or line[-1] in ",-")
    if len(long) < 3 or broken < WRAP_OPEN_SHARE * len(long):
        return 0
    return sorted(map(len, long))[int(0.9 * (len(long) - 1))]


def _logical_lines(lines: list[str], width: int) -> list[str]:
    """Lines as written: wrapped lines joined again (in wrapped text a line that fills the width
    runs on; anywhere, a line with no closing stop before a lowercase word does); a blank line,
    a bullet or a heading after a full stop starts a new one. A lone "Item" takes the line after
    it ("1A. Risk Factors")."""
    out: list[str] = []
    previous = ""
    for line in lines:
        if line and out and _LONE_ITEM.match(out[-1]):
            out[-1] = f"{out[-1]} {line}"
        elif line and previous and _runs_on_line(previous, line, width):
            out[-1] = _joined(out[-1], line)
        elif line:
            out.append(line)
        previous = line
    return out


def _runs_on_line(previous: str, line: str, width: int) -> bool:
    """Whether a line continues the one before it."""
    if _BULLET.match(line) or (
        (_LONE_ITEM.match(line) or _is_section_heading(line)) and _ENDS_SENTENCE.search(previous)
    ):
        return False
    broken = not _ENDS_SENTENCE.search(previous) and line[0].islower()
    return broken or (width > 0 and len(previous) >= FULL_LINE * width)


def _is_section_heading(line: str) -> bool:
    if is_heading(line):
        return True
    bare = _BARE_ITEM.match(line)
    return bool(bare) and len(line) <= HEADING_MAX_CHARS and line.split()[2][0].isupper() and not _TOC_PAGE.search(line)


def _is_prose(line: str) -> bool:
    words = line.split()
    if _BULLET.match(line) and _ENDS_SENTENCE.search(line):
        return True
    if len(words) < PROSE_WORDS or _is_row(line):
        return False
    return len(line) >= 100 or bool(_ENDS_SENTENCE.search(line))


def _is_row(line: str) -> bool:
    """A table row: its last two values are figures ("$", "%" and brackets standing alone aside)."""
    values = [w for w in line.split() if w.strip("$%()\u2014-")]
    return len(values) >= 2 and all(_FIGURE_WORD.match(w) for w in values[-2:])


def _is_label(line: str) -> bool:
    """A heading or label line that introduces the paragraph under it."""
    return len(line) <= RUNNING_MAX_CHARS and not _NUMBER_END.search(line) and not _BULLET.match(line)


def _pieces(lines: list[str], width: int) -> Iterable[tuple[str | None, str]]:
    """The paragraphs of a chunk's lines as (None, text), and its section heading lines as
    (heading, "")."""
    run: list[str] = []
    for line in _logical_lines(lines, width):
        if _is_section_heading(line):
            if run:
                yield None, "\n".join(run)
                run = []
            yield line.lstrip("#").strip(), ""
        elif _is_prose(line):
            labels = 0
            while labels < min(HEADING_LINES, len(run)) and _is_label(run[-1 - labels]):
                labels += 1
            if len(run) > labels:
                yield None, "\n".join(run[: len(run) - labels])
            yield None, "\n".join([*run[len(run) - labels :], line])
            run = []
        elif _terms(line):
            run.append(line)
    if run:
        yield None, "\n".join(run)


# -- sections --------------------------------------------------------------------------------------

_ITEM_PREFIX = re.compile(
    r"^\s*(?:part\s+(?P<part>[ivx]{1,4})\b[\s.,:;\-\u2013\u2014]*)?"
    r"(?:items?\s+(?P<item>\d{1,2}[a-z]?)(?:\.\d{1,2})?\b[\s.,:;\-\u2013\u2014]*)?(?P<title>.*)$",
    re.IGNORECASE | re.DOTALL,
)
# Title words, run together (some filings break words: "Ri sk Factors"), to a section's name; the
# first that the title holds wins. 10-Q and 10-K number these items differently.
_SECTIONS = (
    (("riskfactors",), "risk factors"),
    (("discussionandanalysis", "md&a"), "mdna"),
    (("quantitativeandqualitative", "marketrisk"), "quantitative qualitative market risk"),
    (("controlsandprocedures",), "controls procedures"),
    (("legalproceedings",), "legal proceedings"),
    (("exhibit",), "exhibits"),
    (("financialstatements",), "financial statements"),
    (("unregisteredsales", "issuerpurchases", "useofproceeds"), "equity securities"),
    (("otherinformation",), "other information"),
)
# Whole titles, run together: a title cut short (a PDF line that ends "Item 7. Management") that
# begins one of them, and no other, is that section.
_FULL_TITLES = {
    "riskfactors": "risk factors",
    "managementdiscussionandanalysisoffinancialconditionandresultsofoperations": "mdna",
    "quantitativeandqualitativedisclosuresaboutmarketrisk": "quantitative qualitative market risk",
    "controlsandprocedures": "controls procedures",
    "legalproceedings": "legal proceedings",
    "financialstatementsandsupplementarydata": "financial statements",
}
MIN_CUT_TITLE = 6  # letters a cut title needs to be read as one
_TITLE_NOISE = re.compile(r"\b(?:condensed|consolidated|unaudited)\b|[^a-z&]", re.IGNORECASE)


@lru_cache(maxsize=4096)
def section_key(heading: str | None) -> str | None:
    """A section's name as filings of either form share it: "Part II, Item 1A. Risk Factors" and
    "Item 1A. Risk Factors" are "risk factors"; MD&A (Item 2 of a 10-Q, Item 7 of a 10-K) is
    "mdna". Other titles are their letters run together; a heading with no title is its item
    number ("part ii item 1a"); None for no heading."""
    if not heading or not heading.strip():
        return None
    match = _ITEM_PREFIX.match(heading.replace("\u2019", "'"))
    assert match is not None  # the pattern matches any text
    squashed = _TITLE_NOISE.sub("", match["title"].lower().replace("'s", ""))
    if squashed:
        for marks, name in _SECTIONS:
            if any(mark in squashed for mark in marks):
                return name
        begun = {name for title, name in _FULL_TITLES.items() if title.startswith(squashed)}
        return begun.pop() if len(begun) == 1 and len(squashed) >= MIN_CUT_TITLE else squashed
    parts = [f"part {match['part'].lower()}"] if match["part"] else []
    parts += [f"item {match['item'].lower()}"] if match["item"] else []
    return " ".join(parts) or None


# -- terms and figures -----------------------------------------------------------------------------

_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_FIGURE = re.compile(rf"(\(\s*\$?\s*)?({_NUMBER})(\s*\))?|\b({_MONTHS})\b", re.IGNORECASE)
_TYPOGRAPHY: tuple[tuple[str, str], ...] = (
    ("\u2018", "'"),
    ("\u2019", "'"),
    ("\u201c", '"'),
    ("\u201d", '"'),
    ("\u2013", "-"),
    ("\u2014", "-"),
    ("\u00a0", " "),
    ("\u2022", " "),
)
# Terms are runs of ASCII letters and digits: punctuation parts them, thousands commas go (so
# "40,609" is "40609"), other characters are dropped. Bytes: translate and split run in C.
_PUNCTUATION = bytes(range(128)).translate(None, b"abcdefghijklmnopqrstuvwxyz0123456789,")
_SPACES = bytes.maketrans(_PUNCTUATION, b" " * len(_PUNCTUATION))


def _plain(text: str) -> str:
    """Curly quotes straight, dashes plain, bullets and no-break spaces as spaces."""
    for fancy, plain in _TYPOGRAPHY:
        text = text.replace(fancy, plain)
    return text


def _terms(text: str) -> tuple[str, ...]:
    data = _plain(text.lower()).encode("ascii", "ignore").translate(_SPACES, b",")
    return tuple(data.decode("ascii").split())


def _number(text: str) -> str:
    """A number as compared: no thousands commas, no trailing zeros after the point."""
    digits = text.replace(",", "")
    if "." not in digits:
        return digits.lstrip("0") or "0"
    try:
        return format(Decimal(digits).normalize(), "f")
    except InvalidOperation:
        return digits


def _figures(text: str) -> tuple[str, ...]:
    """Numbers (a parenthesised one is negative), percentages and month names, in order."""
    found = []
    for match in _FIGURE.finditer(_plain(text)):
        if match[4]:
            found.append(match[4].lower())
        else:
            sign = "-" if match[1] and match[3] else ""
            found.append(sign + _number(match[2]))
    return tuple(found)


# -- similarity ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Index:
    """The previous filing's paragraphs as TF-IDF vectors, built once and reused across calls."""

    vocabulary: dict[str, int]
    idf: np.ndarray  # by term id
    unseen_idf: float  # of a term the previous filing never uses
    matrix: csr_matrix  # a unit-length row per paragraph


@lru_cache(maxsize=8)
def _index(previous: tuple[Paragraph, ...]) -> _Index:
    tallies = [Counter(p.terms) for p in previous]
    vocabulary = dict(zip(dict.fromkeys(chain.from_iterable(tallies)), count()))
    indices = np.fromiter(map(vocabulary.__getitem__, chain.from_iterable(tallies)), dtype=np.int64)
    counts = np.fromiter(chain.from_iterable(t.values() for t in tallies), dtype=float, count=len(indices))
    indptr = np.cumsum([0, *map(len, tallies)])
    frequency = np.bincount(indices, minlength=len(vocabulary))
    idf = np.log((1 + len(previous)) / (1 + frequency)) + 1
    weights = (1 + np.log(counts)) * idf[indices]
    matrix = _unit_rows(csr_matrix((weights, indices, indptr), shape=(len(previous), len(vocabulary))))
    return _Index(vocabulary, idf, float(np.log(1 + len(previous)) + 1), matrix)


def _unit_rows(matrix: csr_matrix) -> csr_matrix:
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    norms[norms == 0] = 1
    return csr_matrix(matrix.multiply(1 / norms[:, None]))


def similarities(current: Sequence[Paragraph], previous: Sequence[Paragraph]) -> np.ndarray:
    """TF-IDF cosine of every current paragraph with every previous one (rows: current): log-scaled
    term counts, IDF fitted on the previous filing's paragraphs (a term it never uses weighs the
    most), unit length. The previous filing's vectors are kept for the next call on it."""
    index = _index(tuple(previous))
    if not index.vocabulary:
        return np.zeros((len(current), len(previous)))
    return np.clip((_vectors(current, index) @ index.matrix.T).toarray(), 0.0, 1.0)


def _vectors(current: Sequence[Paragraph], index: _Index) -> csr_matrix:
    """The paragraphs' unit TF-IDF vectors in the previous filing's terms (a term it never uses
    counts in the length, at the highest IDF)."""
    rows = []
    for paragraph in current:
        tally = Counter(paragraph.terms)
        weights = {
            t: (1 + math.log(n)) * (index.idf[j] if (j := index.vocabulary.get(t)) is not None else index.unseen_idf)
            for t, n in tally.items()
        }
        norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
        rows.append({index.vocabulary[t]: w / norm for t, w in weights.items() if t in index.vocabulary})
    indices = np.fromiter((j for row in rows for j in row), dtype=np.int64)
    values = np.fromiter((w for row in rows for w in row.values()), dtype=float, count=len(indices))
    indptr = np.cumsum([0, *map(len, rows)])
    return csr_matrix((values, indices, indptr), shape=(len(current), len(index.vocabulary)))


@lru_cache(maxsize=8)
def _whole_vectors(whole: tuple[Paragraph, ...], previous: tuple[Paragraph, ...]) -> csr_matrix:
    """A whole current filing's vectors against a previous filing, kept for its next question."""
    return _vectors(whole, _index(previous))


# -- matching --------------------------------------------------------------------------------------

TIE_BREAK = 1e-9  # a similarity tie goes to the paragraph nearest in position


def compare(
    current: Sequence[Paragraph],
    previous: Sequence[Paragraph],
    previous_cited: Iterable[Paragraph] = (),
    *,
    whole: Sequence[Paragraph] | None = None,
    counterpart_min: float = COUNTERPART_MIN,
    unchanged_min: float = UNCHANGED_MIN,
) -> list[Change]:
    """Each current paragraph against the previous filing's paragraphs, then a ``removed`` row for
    each of ``previous_cited`` (what the previous filing's ranking cited) that no current paragraph
    took and, given ``whole`` (the current filing's paragraphs, the cited ones among them), that
    the current filing no longer holds: one still there outside the cited chunks (a chunk's edge
    moved, the evidence cites elsewhere) is no change of the filing and gets no row. A counterpart is looked for within the paragraph's own section first (by ``section_key``),
    then anywhere; word-for-word copies are paired first. Similarity at or above ``unchanged_min``
    with the same figures is unchanged; below ``counterpart_min`` there is no counterpart (added).
    ``similarity`` is with the nearest paragraph on the other side, the counterpart when there is one."""
    pool, cited = _pooled(previous, previous_cited)
    # rounded as shown, so that the thresholds judge the similarity a reader sees
    scores = np.round(similarities(current, pool), 4) if current and pool else np.zeros((len(current), len(pool)))
    taken = _match(current, pool, scores, counterpart_min)
    changes = []
    for i, paragraph in enumerate(current):
        nearest = float(scores[i].max()) if pool else 0.0
        j = taken[i]
        if j is None:
            changes.append(Change("added", nearest, paragraph, None))
            continue
        counterpart = pool[j]
        # the same words but for spacing inside them (a PDF's "be low" for "below") score 1
        score = 1.0 if counterpart.squashed == paragraph.squashed else float(scores[i, j])
        same = score >= unchanged_min and counterpart.figures == paragraph.figures
        kind: ChangeKind = "unchanged" if same else "modified"
        changes.append(Change(kind, score, paragraph, counterpart))
    used = {j for j in taken if j is not None}
    left = [j for j in cited if j not in used]
    if whole is not None and left:
        matched = [p for p, j in zip(current, taken, strict=True) if j is not None]
        left = _gone(left, pool, matched, whole, counterpart_min)
    for j in left:
        nearest = float(scores[:, j].max()) if current else 0.0
        changes.append(Change("removed", nearest, None, pool[j]))
    return changes


def _gone(
    left: list[int], pool: Sequence[Paragraph], took: Sequence[Paragraph], whole: Sequence[Paragraph], floor: float
) -> list[int]:
    """Of the cited previous paragraphs in ``pool`` that no cited current paragraph took (``left``),
    those the current filing no longer holds: not word for word, nor as the best counterpart (at
    ``floor`` or above) of one of its paragraphs that took none (``took``: those that did)."""
    taken = set(took)
    rest = [i for i, p in enumerate(whole) if p not in taken]
    copies = {whole[i].squashed for i in rest if whole[i].terms}
    left = [j for j in left if pool[j].squashed not in copies]
    index = _index(tuple(pool))
    if not left or not rest or not index.vocabulary:
        return left
    vectors = _whole_vectors(tuple(whole), tuple(pool))[rest]
    near = np.round((vectors @ index.matrix[left].T).toarray(), 4)  # the rest against the paragraphs left
    candidates = np.flatnonzero(near.max(axis=1) >= floor)
    if not len(candidates):
        return left
    best = np.round((vectors[candidates] @ index.matrix.T).toarray(), 4).max(axis=1)
    there = (near[candidates] >= floor) & (near[candidates] >= best[:, None])
    return [j for k, j in enumerate(left) if not there[:, k].any()]


def _pooled(previous: Sequence[Paragraph], cited: Iterable[Paragraph]) -> tuple[list[Paragraph], list[int]]:
    """The previous paragraphs with any cited one not among them added, and the cited ones'
    places in that list (found by identity, else by value)."""
    pool = list(previous)
    place = {id(p): j for j, p in enumerate(pool)}
    by_value: dict[Paragraph, int] | None = None
    found = set()
    for paragraph in cited:
        j = place.get(id(paragraph))
        if j is None:
            by_value = by_value if by_value is not None else {p: k for k, p in enumerate(pool)}
            j = by_value.get(paragraph)
            if j is None:
                pool.append(paragraph)
                j = by_value[paragraph] = len(pool) - 1
        found.add(j)
    return pool, sorted(found)


def _match(
    current: Sequence[Paragraph], pool: Sequence[Paragraph], scores: np.ndarray, floor: float
) -> list[int | None]:
    """Each current paragraph's counterpart in ``pool`` (an index), or None; one each at most.
    Word-for-word copies in the own section first; then by similarity, best first: within the
    own section when a paragraph there reaches ``floor``, else anywhere (a paragraph with no
    named section, or whose section the previous filing lacks, looks anywhere from the start)."""
    taken: list[int | None] = [None] * len(current)
    if not len(pool):
        return taken
    used = np.zeros(len(pool), dtype=bool)
    same = _same_section(current, pool)
    copies: dict[str, list[int]] = {}
    for j, p in enumerate(pool):
        if p.terms:
            copies.setdefault(p.squashed, []).append(j)
    for i, paragraph in enumerate(current):
        found = [j for j in copies.get(paragraph.squashed, ()) if not used[j] and (same[i, j] or not same[i].any())]
        if found:
            j = min(found, key=lambda j: abs(pool[j].position - paragraph.position))
            taken[i], used[j] = j, True
    distance = np.abs(np.array([p.position for p in current])[:, None] - np.array([p.position for p in pool])[None, :])
    for i in np.argsort(-scores.max(axis=1), kind="stable"):
        if taken[i] is not None:
            continue
        row = np.where(used, -1.0, scores[i] - TIE_BREAK * distance[i])
        j = int(np.argmax(np.where(same[i], row, -1.0)))
        if used[j] or not same[i, j] or scores[i, j] < floor:
            j = int(np.argmax(row))
        if not used[j] and scores[i, j] >= floor:
            taken[i], used[j] = j, True
    return taken


def _same_section(current: Sequence[Paragraph], pool: Sequence[Paragraph]) -> np.ndarray:
    """Whether each current paragraph shares a named section with each pool paragraph."""
    ids: dict[str, int] = {}
    keys = [[section_key(p.heading) for p in side] for side in (current, pool)]
    codes = [np.array([ids.setdefault(k, len(ids)) if k else -1 for k in side], dtype=np.int64) for side in keys]
    return (codes[0][:, None] == codes[1][None, :]) & (codes[0][:, None] >= 0)


# -- redline ---------------------------------------------------------------------------------------

_WORD = re.compile(r"(\S+)(\s*)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3})")


def _word_key(word: str) -> str:
    """A word as compared: case, curly quotes and thousands commas aside."""
    key = word.casefold() if word.isascii() else _plain(word).casefold()
    return _THOUSANDS.sub("", key) if "," in key else key


def redline(old: str, new: str) -> str:
    """The new text with word-level marks, as ``git diff --word-diff`` shows them: ``[-old words-]``
    where words went, ``{+new words+}`` where words came. Identical texts give the text unmarked."""
    if old == new:
        return new
    before = [(m[1], m[2]) for m in _WORD.finditer(old)]
    after = [(m[1], m[2]) for m in _WORD.finditer(new)]
    matcher = difflib.SequenceMatcher(
        None, [_word_key(w) for w, _ in before], [_word_key(w) for w, _ in after], autojunk=False
    )
    out: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(word + space for word, space in after[j1:j2])
            continue
        gone = f"[-{' '.join(word for word, _ in before[i1:i2])}-]" if i2 > i1 else ""
        came = "".join(word + space for word, space in after[j1:j2]).rstrip()
        out.append(gone + (f"{{+{came}+}}" if came else "") + (after[j2 - 1][1] if j2 > j1 else " "))
    return "".join(out).rstrip()
