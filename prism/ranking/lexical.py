"""BM25 ranking: free, deterministic, offline. The embedded default, the baseline, and the
fallback when an LLM reply cannot be used."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from prism.models import Cited, Ranking

if TYPE_CHECKING:  # bm25s brings numba (a quarter of a second): imported where an index is built
    import Stemmer

    from prism.ingest.models import Chunk


@cache
def _stemmer() -> Stemmer.Stemmer:
    import Stemmer

    return Stemmer.Stemmer("english")


def _tokens(texts: Sequence[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(list(texts), stopwords="en", stemmer=_stemmer(), return_ids=False, show_progress=False)


def bm25_scores(query: str, docs: Sequence[str]) -> np.ndarray:
    """Okapi BM25 score of every doc for the query; the docs are the whole collection."""
    doc_tokens = _tokens(docs)
    query_tokens = _tokens([query])[0]
    if not query_tokens or not any(doc_tokens):
        return np.zeros(len(docs))
    import bm25s

    index = bm25s.BM25()
    index.index(doc_tokens, show_progress=False)
    return np.asarray(index.get_scores(query_tokens), dtype=float)


_FILLER = frozenset(
    "a an and as at by did do does for from how in is it its of on or the to was were what which who".split()
)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


EXCERPT_CHARS = 300  # an evidence row's passage


def cite(question: str, chunk: Chunk, offset: int = 0) -> Cited:
    """A ranked chunk's place in its filing and its passage that answers the question best, with
    where that passage is: its offsets in the page's text (the chunk starts at ``offset`` there),
    or in the chunk's own text for a chunk without a page."""
    fields = chunk.model_dump(include={"page", "printed_page", "document", "section", "heading"})
    found = passage_span(question, chunk.text, EXCERPT_CHARS)
    return Cited(chunk_id=chunk.id, excerpt=found.text, start=offset + found.start, end=offset + found.end, **fields)


class Passage(NamedTuple):
    text: str  # whitespace collapsed, at most the limit
    start: int  # where it is in the text it was taken from
    end: int


_PIECE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def passage(question: str, text: str, limit: int) -> str:
    return passage_span(question, text, limit).text


def passage_span(question: str, text: str, limit: int) -> Passage:
    """The part of a chunk that answers the question best, in at most ``limit`` characters: the
    sentence or line sharing the question's words (the rarer in the chunk, the more), with its
    neighbours while they fit (the whole text when it fits), and where it lies in ``text``. What an
    analyst reads first, instead of a page's header; cheap enough for every row of a large table."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        stripped = len(text) - len(text.lstrip())
        return Passage(flat, stripped, len(text.rstrip()))
    spans = _pieces(text)
    pieces = [" ".join(text[a:b].split()) for a, b in spans]
    asked = _words(question) - _FILLER
    held = [_words(p) & asked for p in pieces]
    rarity = Counter(w for words in held for w in words)  # a word in every piece says little
    scores = [sum(1 / rarity[w] for w in words) for words in held]
    lo = hi = max(range(len(pieces)), key=lambda i: (scores[i], -i))
    size = len(pieces[lo])
    while True:  # grow by the neighbour after, then the one before, while the window fits
        if hi + 1 < len(pieces) and size + 1 + len(pieces[hi + 1]) <= limit:
            hi += 1
            size += 1 + len(pieces[hi])
        elif lo > 0 and size + 1 + len(pieces[lo - 1]) <= limit:
            lo -= 1
            size += 1 + len(pieces[lo])
        else:
            break
    found = " ".join(pieces[lo : hi + 1])[:limit].rstrip()  # a cut after a space ends at the word before it
    return Passage(found, spans[lo][0], _raw_end(text, spans[lo][0], spans[hi][1], len(found)))


def _pieces(text: str) -> list[tuple[int, int]]:
    """The sentences and lines of a text, as (start, end) offsets, without their whitespace."""
    spans, at = [], 0
    for cut in [*_PIECE_END.finditer(text), None]:
        end = cut.start() if cut else len(text)
        piece = text[at:end]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            spans.append((at + lead, at + len(piece.rstrip())))
        at = cut.end() if cut else len(text)
    return spans


def _raw_end(text: str, start: int, end: int, length: int) -> int:
    """Where, in ``text`` from ``start``, the first ``length`` characters of its whitespace-collapsed
    form end (at most ``end``): a passage cut at the limit is marked as far as it reads."""
    count, gap = 0, False
    for i in range(start, end):
        if text[i].isspace():
            gap = True
            continue
        count += 1 if not gap else 2
        gap = False
        if count >= length:
            return i + 1
    return end


class LexicalRanker:
    """BM25 over the candidates. ``expand`` swaps a candidate's text for a longer description
    (a filing type's name for what it holds); ties keep ``tie_order``, then index order."""

    name = "lexical"

    def __init__(self, expand: Mapping[str, str] | None = None, tie_order: Sequence[str] = ()):
        self.expand = dict(expand or {})
        self.tie_rank = {text: i for i, text in enumerate(tie_order)}

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        scores = bm25_scores(question, [self.expand.get(c, c) for c in candidates])
        last = len(self.tie_rank)
        order = sorted(range(len(candidates)), key=lambda i: (-scores[i], self.tie_rank.get(candidates[i], last), i))
        top = order[:top_k]
        return Ranking(indices=top, scores=[round(float(scores[i]), 6) for i in top])
