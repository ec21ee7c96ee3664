"""A $0 page retriever for financial filings, built once per filing and asked per question.

Financial questions name a metric, a period and often the statement that holds it ("FY2018
capital expenditure ... in the cash flow statement"). Plain BM25 treats those as noise: every
page of a 10-K says "2018", and the statement pages are mostly figures. So besides BM25 the
retriever scores each page on signals of its own:

- ``bm25``: Okapi BM25 over stemmed words, the question expanded with the line items its
  metric goes by in filings ("capex" -> "purchases of property, plant and equipment");
- ``bigram``: BM25 over adjacent stemmed word pairs (line items are phrases);
- ``lsa``: cosine in the filing's own latent semantic space (TF-IDF + SVD, fitted per filing);
- ``period``: the share of the question's fiscal years that the page mentions;
- ``statement``: the page is a primary statement the question asks for, by name or by the
  statement its metric lives in;
- ``figures``: the share of the page's tokens that are numbers (tables), for metric questions;
- ``minilm`` (only with an embedder, the ``[minilm]`` extra): cosine of the question to the page's
  first 256 word pieces in all-MiniLM-L6-v2's space. On FinanceBench it keeps recall at 30% of
  the tokens at 0.953 (out-of-half, as without it) and lifts NDCG@5 by 0.011 at about 40 times
  the CPU, so it is never the default. Any embedder adds its signal under its own name:
  WordLlama's static vectors (the ``[wordllama]`` extra) cost little but lower that recall to
  0.938 (NDCG@5 0.641 to 0.667), so no weights ship for them.

Each filing version is indexed once (``filing_index``): the ranker and the pre-filter share a
bounded cache addressed by a digest of the pages' texts; page embeddings are also kept in a
``VectorStore`` when the process has one (the fleet's results store), so they outlive it. Building a
148-page index takes about 530 ms of CPU, a question against it about 11 ms.

Each signal is standardised within the filing, and the fused score is their weighted sum. The
weights were fitted (logistic regression) on FinanceBench page questions by halves of the
filings; ``bench/retrieval.py`` reports each half scored with the weights of the other.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from prism.models import Ranking
from prism.ranking.embeddings import Embedder, normalize
from prism.ranking.lexical import _tokens

if TYPE_CHECKING:
    import bm25s

SIGNALS = ("bm25", "bigram", "lsa", "period", "statement", "figures")

# Fitted on all 129 FinanceBench page questions (`bench/retrieval.py` prints the fit); the
# figures it reports as the default's come from weights fitted on the other half of the filings.
WEIGHTS: dict[str, float] = {
    "bm25": 0.79,
    "bigram": 0.05,
    "lsa": 0.57,
    "period": -0.02,
    "statement": 0.48,
    "figures": 0.64,
}
# The same fit with the minilm signal (`bench/retrieval.py --minilm`).
WEIGHTS_MINILM: dict[str, float] = {
    "bm25": 0.74,
    "bigram": -0.02,
    "lsa": 0.49,
    "period": -0.11,
    "statement": 0.47,
    "figures": 0.51,
    "minilm": 0.57,
}

# The fitted weights by the embedder that adds its signal.
DENSE_WEIGHTS: dict[str, dict[str, float]] = {"minilm": WEIGHTS_MINILM}


def weights_for(embedder: Embedder | None) -> dict[str, float]:
    return WEIGHTS if embedder is None else DENSE_WEIGHTS.get(embedder.name, WEIGHTS)


HEADING_CHARS = 300
_YEAR = re.compile(r"(?<!\d)((?:19|20)\d{2})(?!\d)")
_SHORT_FY = re.compile(r"\bfy\s?'?(\d{2})\b", re.IGNORECASE)
_NUMBER = re.compile(r"^\(?\$?[\d,.]+\)?%?$")

# How each primary statement is asked for, and how its page names itself.
STATEMENTS: dict[str, tuple[str, str]] = {
    "cash_flow": (
        r"cash ?flows? statement|statements? of cash ?flows?",
        r"statements? of (consolidated )?cash ?flows?|cash ?flows? statements?",
    ),
    "balance": (
        r"balance sheets?|statements? of financial (position|condition)",
        r"balance sheets?|statements? of (consolidated )?financial (position|condition)",
    ),
    "income": (
        r"income statements?|statements? of (income|operations|earnings)|p&l|profit and loss",
        r"statements? of (consolidated )?(comprehensive )?(income|operations|earnings)|income statements?",
    ),
}

# Metrics by the statement that reports them, and the words filings use for them.
METRICS: list[tuple[str, str, str]] = [
    (r"cap(ital )?ex(penditures?)?", "cash_flow", "purchases of property plant and equipment capital expenditures"),
    (
        r"cash (flow )?from operations|operating cash ?flow|cash from operating",
        "cash_flow",
        "net cash provided by operating activities",
    ),
    (r"free cash ?flow", "cash_flow", "net cash provided by operating activities purchases of property plant"),
    (r"dividends?", "cash_flow", "dividends paid"),
    (r"depreciation|amortization|d&a\b", "cash_flow", "depreciation and amortization"),
    (r"repurchases?|buybacks?", "cash_flow", "repurchase of common stock treasury"),
    (r"capital[- ]intensive", "cash_flow", "purchases of property plant and equipment"),
    (r"capital[- ]intensive", "balance", "property plant and equipment net total assets"),
    (r"pp&?e|ppne|fixed assets?", "balance", "property plant and equipment net"),
    (r"total assets|return on assets|roa\b", "balance", "total assets"),
    (r"current liabilities|current ratio|quick ratio|working capital", "balance", "total current liabilities"),
    (r"current assets", "balance", "total current assets"),
    (r"inventor(y|ies)", "balance", "inventories"),
    (r"receivables?", "balance", "accounts receivable"),
    (r"payables?", "balance", "accounts payable"),
    (r"(total )?debt|leverage", "balance", "long-term debt borrowings"),
    (r"(shareholders'?|stockholders'?) equity|return on equity|roe\b", "balance", "total equity"),
    (r"revenues?|sales|top ?line", "income", "total revenues net sales"),
    (r"cogs|cost of (goods|sales|revenue)|gross (margin|profit)", "income", "cost of sales gross profit"),
    (r"operating (income|margin|profit)|ebit\b", "income", "operating income"),
    (r"ebitda", "income", "operating income depreciation and amortization"),
    (r"net (income|earnings|profit)|net margin", "income", "net income"),
    (r"eps|earnings per share", "income", "earnings per share diluted"),
    (r"interest expense|interest coverage", "income", "interest expense"),
    (r"effective tax rate|income tax", "income", "provision for income taxes"),
]
_METRICS = [(re.compile(rf"\b(?:{pattern})", re.IGNORECASE), statement, words) for pattern, statement, words in METRICS]
_ASKED = {name: re.compile(asked, re.IGNORECASE) for name, (asked, _) in STATEMENTS.items()}
_TITLED = {name: re.compile(titled, re.IGNORECASE) for name, (_, titled) in STATEMENTS.items()}


@dataclass(frozen=True)
class QuestionCues:
    """What a financial question asks for, read from its words alone."""

    years: frozenset[str]
    statements: frozenset[str]
    expansion: str
    is_metric: bool


def read_question(question: str) -> QuestionCues:
    years = set(_YEAR.findall(question)) | {f"20{y}" for y in _SHORT_FY.findall(question)}
    statements = {name for name, pattern in _ASKED.items() if pattern.search(question)}
    matched = [(statement, words) for pattern, statement, words in _METRICS if pattern.search(question)]
    statements |= {statement for statement, _ in matched}
    return QuestionCues(
        years=frozenset(years),
        statements=frozenset(statements),
        expansion=" ".join(words for _, words in matched),
        is_metric=bool(matched),
    )


def _bigrams(tokens: list[list[str]]) -> list[list[str]]:
    return [[f"{a}_{b}" for a, b in zip(doc, doc[1:])] for doc in tokens]


def _index(tokens: list[list[str]]) -> bm25s.BM25 | None:
    if not any(tokens):
        return None
    import bm25s

    index = bm25s.BM25()
    index.index([doc or ["\x00"] for doc in tokens], show_progress=False)
    return index


def _bm25(index: bm25s.BM25 | None, query: list[str], n: int) -> np.ndarray:
    if index is None or not query:
        return np.zeros(n)
    return np.asarray(index.get_scores(query), dtype=float)


def _title(text: str) -> str:
    """A page's first lines, its line breaks both as spaces and as nothing (PDF text breaks
    words: "Cash Flow\\ns")."""
    head = text[:HEADING_CHARS]
    return f"{' '.join(head.split())} {''.join(head.split(chr(10)))}"


class FilingIndex:
    """Everything the retriever needs about one filing's pages, computed once; ``signals`` and
    ``scores`` answer each question against it."""

    def __init__(
        self,
        texts: Sequence[str],
        lsa_dims: int = 100,
        embedder: Embedder | None = None,
        vectors: np.ndarray | None = None,
    ):
        self.n = len(texts)
        self.embedder = embedder
        if vectors is None and embedder is not None and texts:
            vectors = embedder.embed(texts)
        self.vectors = vectors
        words = _tokens(texts)
        self.unigrams = _index(words)
        self.pairs = _index(_bigrams(words))
        self.years = [frozenset(_YEAR.findall(t)) for t in texts]
        titles = [_title(t) for t in texts]
        self.statement = [frozenset(k for k, p in _TITLED.items() if p.search(title)) for title in titles]
        self.figures = np.array([_figure_share(t) for t in texts])
        self.lsa = _Lsa(texts, lsa_dims)

    def signals(self, question: str) -> dict[str, np.ndarray]:
        """Every signal's raw score for every page."""
        cues = read_question(question)
        query = _tokens([f"{question} {cues.expansion}"])[0]
        asked = cues.statements
        period = np.array([len(cues.years & ys) / len(cues.years) if cues.years else 0.0 for ys in self.years])
        out = {
            "bm25": _bm25(self.unigrams, query, self.n),
            "bigram": _bm25(self.pairs, _bigrams([query])[0], self.n),
            "lsa": self.lsa.scores(f"{question} {cues.expansion}"),
            "period": period,
            "statement": np.array([float(bool(asked & kinds)) for kinds in self.statement]),
            "figures": self.figures.copy() if cues.is_metric else np.zeros(self.n),
        }
        if self.embedder is not None:  # the signal takes the embedder's name
            vectors = self.vectors if self.vectors is not None else np.zeros((0, 1))
            out[self.embedder.name] = (vectors @ self.embedder.embed([question])[0]).astype(float)
        return out

    def scores(self, question: str, weights: Mapping[str, float] | None = None) -> np.ndarray:
        return fuse(self.signals(question), weights or weights_for(self.embedder))


def digest(texts: Sequence[str]) -> str:
    """A filing version's address: its pages' texts, each length-prefixed so no two lists collide."""
    hasher = hashlib.blake2b(digest_size=20)
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)
    return hasher.hexdigest()


class VectorStore(Protocol):
    """Where page vectors outlive the process: by embedder and the pages' digest."""

    def get(self, embedder: str, digest: str) -> np.ndarray | None: ...

    def put(self, embedder: str, digest: str, vectors: np.ndarray) -> None: ...


class IndexCache:
    """The most recently asked filings' indexes and page vectors, addressed by their texts'
    digest (and the embedder), so every question about a filing version reuses one index and a
    changed filing gets a new one. Bounded: the least recently used entry goes first. Page
    vectors, the costly part with a dense embedder, are also kept in ``store`` when one is set,
    so a filing version is embedded once, not once per process or per run."""

    def __init__(self, size: int = 16, store: VectorStore | None = None):
        self.size = size
        self.store = store
        self.builds = 0
        self.embedded = 0  # filings embedded here, not found in memory or the store
        self._entries: OrderedDict[tuple[str, str | None], FilingIndex] = OrderedDict()
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, texts: Sequence[str], embedder: Embedder | None = None) -> FilingIndex:
        key = (digest(texts), embedder.name if embedder is not None else None)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        vectors = self.page_vectors(texts, embedder) if embedder is not None and texts else None
        index = FilingIndex(texts, embedder=embedder, vectors=vectors)  # built outside the lock
        with self._lock:
            self.builds += 1
            self._remember(self._entries, key, index)
        return index

    def page_vectors(self, texts: Sequence[str], embedder: Embedder) -> np.ndarray:
        """The pages' vectors by this embedder: from memory, the store, or embedded (and kept)."""
        address = digest(texts)
        key = (address, embedder.name)
        with self._lock:
            if key in self._vectors:
                self._vectors.move_to_end(key)
                return self._vectors[key]
        vectors = self.store.get(embedder.name, address) if self.store is not None else None
        if vectors is None or vectors.shape[0] != len(texts):
            vectors = embedder.embed(texts)
            with self._lock:
                self.embedded += 1
            if self.store is not None:
                self.store.put(embedder.name, address, vectors)
        with self._lock:
            self._remember(self._vectors, key, vectors)
        return vectors

    def _remember(self, entries: OrderedDict, key, value) -> None:
        entries[key] = value
        entries.move_to_end(key)
        while len(entries) > self.size:
            entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._vectors.clear()


# The one cache of filing indexes, shared by the ranker and the pre-filter.
INDEXES = IndexCache()


def filing_index(texts: Sequence[str], embedder: Embedder | None = None) -> FilingIndex:
    """The filing's index, built on its first question and reused by the rest."""
    return INDEXES.get(texts, embedder)


def page_vectors(texts: Sequence[str], embedder: Embedder) -> np.ndarray:
    """The filing's page vectors, embedded on its first question and reused by the rest."""
    return INDEXES.page_vectors(texts, embedder)


def fuse(signals: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """Weighted sum of the signals, each standardised within the filing (a constant signal
    adds nothing)."""
    total = np.zeros(len(next(iter(signals.values()))))
    for name, weight in weights.items():
        total += weight * standardise(signals[name])
    return total


def standardise(values: np.ndarray) -> np.ndarray:
    spread = values.std()
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values, dtype=float)


def _figure_share(text: str) -> float:
    tokens = text.split()
    return sum(1 for t in tokens if _NUMBER.match(t)) / len(tokens) if tokens else 0.0


class _Lsa:
    """Latent semantic analysis of the filing's pages: TF-IDF reduced to its top singular
    directions. The SVD comes from the pages' Gram matrix (pages x pages), cheap for a filing's
    hundreds of pages whatever its vocabulary; questions are folded into the same space."""

    def __init__(self, texts: Sequence[str], dims: int):
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.n = len(texts)
        try:
            self.tfidf: TfidfVectorizer | None = TfidfVectorizer(sublinear_tf=True, stop_words="english").fit(texts)
        except ValueError:  # nothing but stop words
            self.tfidf = None
            return
        self.matrix = self.tfidf.transform(texts)
        values, vectors = np.linalg.eigh((self.matrix @ self.matrix.T).toarray())
        top = np.argsort(values)[::-1][: min(dims, self.n)]
        top = top[values[top] > 1e-9]
        singular = np.sqrt(values[top])
        self.fold = vectors[:, top] / singular  # query . pages^T -> its coordinates
        self.pages = normalize(vectors[:, top] * singular)

    def scores(self, question: str) -> np.ndarray:
        if self.tfidf is None or not self.fold.shape[1]:
            return np.zeros(self.n)
        overlap = np.asarray((self.matrix @ self.tfidf.transform([question]).T).todense()).ravel()
        return (self.pages @ normalize((overlap @ self.fold)[None, :])[0]).astype(float)


class FinancialRanker:
    """The fused retriever as a $0 chunk ranker; each filing version is indexed once."""

    name = "financial"

    def __init__(self, weights: Mapping[str, float] | None = None, embedder: Embedder | None = None):
        self.embedder = embedder
        self.weights = dict(weights or weights_for(embedder))

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        scores = filing_index(candidates, self.embedder).scores(question, self.weights)
        order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))[:top_k]
        return Ranking(indices=order, scores=[round(float(scores[i]), 6) for i in order])
