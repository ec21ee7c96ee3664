"""What changed since the previous filing (prism/changes/paragraphs.py), on real filings with known edits.

    python bench/changes.py [--quick]

Filings: the bundled EDGAR 10-Qs (shared/data/edgar/filings, ingested by the project's own
ingest into a temporary corpus) and FinanceBench's 10-K and 10-Q pages (shared/data/financebench,
read as the project reads benchmark rows: one chunk a page). Each filing with at least
MIN_PARAGRAPHS paragraphs in Risk Factors and MD&A gets a made "next period": seeded edits,
drawn with a seed per filing, made in the raw text of its chunks (furniture and line wrapping
kept; an edited or inserted paragraph set between blank lines) in those two sections:

- modified: words changed in a sentence (3 to 5 words swapped for a donor's), a sentence added
  or one dropped, and figures changed (one number altered by 3-15%, every word the same);
- added: a paragraph from another company's filing put in; removed: a paragraph taken out;
- unchanged: paragraphs moved to a chunk at least two pages away, paragraphs reformatted (curly
  quotes made straight, thousands commas dropped), and every paragraph not touched.

Each next period's Risk Factors and MD&A paragraphs are compared with the whole original filing,
the original's paragraphs in those sections standing for what its ranking cited (their unmatched
ones are the removed rows). The two thresholds are fitted on the filings of one half (filings in
name order, every other one) for the macro F1 of the four classes, and scored on the other half;
the riskdiff.com anchor (0.45 counterpart, 0.92 unchanged) is scored on the same held-out half.

Figures of the last line (held-out half): ``change_f1`` (macro F1 of unchanged, modified,
added, removed), ``figure_change_recall`` (figure-only edits classed modified),
``moved_unchanged`` (moved paragraphs classed unchanged), ``counterpart_min`` and
``unchanged_min`` (fitted), ``anchor_change_f1``; ``compare_ms`` (median CPU milliseconds to
compare the paragraphs of five cited chunks with a whole previous filing seen for the first
time; ``compare_warm_ms`` once its vectors are kept);
``real_*``: class counts over the Risk Factors and MD&A paragraphs of consecutive FinanceBench
10-Ks of one company, a year apart.

Then runs with ``--compare previous``:

- two ``--new`` nights over the bundled EDGAR filings (prism/data/edgar) and their question set,
  with one question more that names no period (NVIDIA's latest quarter), embedded, documents and
  chunks ranked by the LLM path on the oracle simulator, with NVIDIA's quarter before the bundled
  one added (its 10-Q copied and relabelled as the first quarter; the bundled filings are one a
  company): ``first_night_previous_calls`` (calls on earlier filings on the first night; the other
  companies' pairs say "no previous filing", ``first_night_no_previous`` of them), and
  ``second_night_extra_calls``, after NVIDIA's next quarter is ingested (its 10-Q copied and
  relabelled by a metadata file as the third quarter): calls on earlier filings the first night
  had ranked already, which must be 0 (the new quarter's own ranking is not extra;
  ``second_night_previous_reused`` counts the earlier filings reused at $0);
- ``compare_overhead``: CPU seconds of `prism run` at $0 (embedded, the default $0 rankers) over
  the shared EDGAR filings and their questions plus the FinanceBench filings and their questions,
  with ``--compare previous`` over without, each run on a copy of its corpus into a results store
  of its own (at most 2.2); ``compare_earlier_pairs`` and ``compare_changed_rows`` say how much
  was compared. ``--quick`` takes 12 EDGAR and 20 FinanceBench questions (and their companies'
  filings).

Measured (full run of the method's figures, 2 shared cores, 123 s): 49 filings, 25 fitting and 24
held out; fitted counterpart_min=0.54 and unchanged_min=1.0; held out change_f1=0.9731,
figure_change_recall=1, moved_unchanged=1, against the anchor's change_f1=0.9351 (it calls 62
of 96 reworded paragraphs unchanged); compare_ms=43.9 (14.7 once the filing is indexed); 12 real
pairs: 743 unchanged, 2,021 modified, 1,231 added, 1,461 removed. With the runs (325 s in all,
--quick 75 s): first_night_previous_calls=5 (of 53; 18 pairs with no previous filing),
second_night_extra_calls=0 (1 call, the new quarter's; 5 earlier filings reused),
compare_overhead=1.028 (24 earlier filings ranked). See docs/changes.md.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import random
import re
import statistics
import tempfile
import textwrap
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from _common import ROOT, SHARED, ended, parser, report

from prism.changes import paragraphs as changes
from prism.changes.paragraphs import (
    COUNTERPART_MIN,
    UNCHANGED_MIN,
    Paragraph,
    compare,
    in_chunks,
    paragraphs,
    section_key,
)
from prism.ingest.filings import filings_from_rows
from prism.ingest.models import Chunk
from producer.ingest import ingest_source
from workers.corpus import Corpus
from workers.store import LocalStore

EDGAR = SHARED / "edgar" / "filings"
EDGAR_FILINGS = ("nvda-10q-2025-08-27.html", "orcl-10q-2024-09-10.html", "tsla-10q-2025-07-24.html")
FINANCEBENCH = SHARED / "financebench" / "financebench_page_ranking.jsonl.gz"
QUICK_FINANCEBENCH = ("VERIZON_2021_10K", "VERIZON_2022_10K", "NIKE_2019_10K", "CORNING_2021_10K", "BOEING_2022_10K")
SECTIONS = ("risk factors", "mdna")
MIN_PARAGRAPHS = 30
MIN_WORDS = 25  # an edited paragraph has at least this many words
SEED = 20240611
ANCHOR = (0.45, 0.92)  # riskdiff.com's TF-IDF cosine thresholds
LOW_GRID = [round(0.20 + 0.02 * i, 2) for i in range(31)]  # 0.20 .. 0.80
HIGH_GRID = [round(0.80 + 0.005 * i, 3) for i in range(41)]  # 0.80 .. 1.00
CLASSES = ("unchanged", "modified", "added", "removed")
# seeded edits per filing, by kind; the class each one should get
EDITS = {
    "reworded": 4,
    "appended": 2,
    "dropped": 2,
    "figure": 4,
    "added": 4,
    "removed": 4,
    "moved": 4,
    "reformatted": 2,
}
TRUTH = {"reworded": "modified", "appended": "modified", "dropped": "modified", "figure": "modified"}
TRUTH |= {"added": "added", "removed": "removed", "moved": "unchanged", "reformatted": "unchanged"}
KEYS = (
    "change_f1",
    "figure_change_recall",
    "moved_unchanged",
    "counterpart_min",
    "unchanged_min",
    "anchor_change_f1",
    "compare_ms",
    "first_night_previous_calls",
    "second_night_extra_calls",
    "compare_overhead",
)


# -- filings -------------------------------------------------------------------------------------


def edgar_filings(work: Path) -> dict[str, list[Chunk]]:
    """The bundled EDGAR 10-Qs through the project's ingest, into a corpus in ``work``."""
    store = LocalStore(work / "corpus")
    summary = ingest_source([EDGAR / name for name in EDGAR_FILINGS], store)
    corpus = Corpus(store)
    return {fid: corpus.get_filing(fid).chunks for fid in summary.filings}


def financebench_filings(names: Sequence[str] | None) -> dict[str, list[Chunk]]:
    """FinanceBench 10-K and 10-Q page rows (one row a document), read as the ingest reads rows."""
    lines, seen = [], set()
    with gzip.open(FINANCEBENCH, "rb") as stream:
        for line in stream:
            row = json.loads(line)
            name = row["doc_name"]
            if name in seen or row.get("doc_type") not in ("10k", "10q") or (names and name not in names):
                continue
            seen.add(name)
            lines.append(line)
    found = filings_from_rows(io.BytesIO(b"".join(lines)), FINANCEBENCH.name)
    return {f.id: f.chunks for f in found.filings}


# -- seeded edits ----------------------------------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.;])\s+(?=[A-Z\u201c\"(])")
_NUMBER = re.compile(r"(?<![\w.,-])(?:\d{1,3}(?:,\d{3})+|\d{2,})(?:\.\d+)?(?![\w,-])")


@dataclasses.dataclass
class NextPeriod:
    chunks: list[Chunk]
    truth: dict[str, str]  # edited or inserted paragraph text -> edit kind
    removed: list[Paragraph]  # previous paragraphs taken out


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE.split(text) if s.strip()]


def reworded(text: str, donor: str, rng: random.Random) -> str | None:
    parts = sentences(text)
    long = [i for i, s in enumerate(parts) if len(s.split()) >= 10]
    words = [w for w in donor.split() if w.isalpha()]
    if not long or len(words) < 5:
        return None
    i = rng.choice(long)
    tokens = parts[i].split()
    span = rng.randint(3, 5)
    start = rng.randrange(1, len(tokens) - span)
    at = rng.randrange(0, len(words) - span + 1)
    tokens[start : start + span] = words[at : at + span]
    parts[i] = " ".join(tokens)
    changed = " ".join(parts)
    return changed if changed.split() != text.split() else None


def appended(text: str, donor: str, rng: random.Random) -> str | None:
    extra = [s for s in sentences(donor) if len(s.split()) >= 8]
    return f"{text} {rng.choice(extra)}" if extra else None


def dropped(text: str, donor: str, rng: random.Random) -> str | None:
    parts = sentences(text)
    if len(parts) < 3:
        return None
    del parts[rng.randrange(1, len(parts))]
    return " ".join(parts)


def figure_changed(text: str, donor: str, rng: random.Random) -> str | None:
    """One number altered by 3-15%, its format kept; every word the same."""
    found = list(_NUMBER.finditer(text))
    if not found:
        return None
    match = rng.choice(found)
    old = match.group(0)
    value = float(old.replace(",", ""))
    decimals = len(old.split(".")[1]) if "." in old else 0
    factor = rng.choice((-1, 1)) * rng.uniform(0.03, 0.15)
    new = f"{value * (1 + factor):,.{decimals}f}" if "," in old else f"{value * (1 + factor):.{decimals}f}"
    if new.replace(",", "") == old.replace(",", ""):
        new = f"{value + 1:,.{decimals}f}" if "," in old else f"{value + 1:.{decimals}f}"
    return text[: match.start()] + new + text[match.end() :]


def reformatted(text: str, donor: str, rng: random.Random) -> str | None:
    plain = text.translate(str.maketrans({"\u2019": "'", "\u201c": '"', "\u201d": '"'}))
    plain = re.sub(r"(?<=\d),(?=\d{3})", "", plain)
    return plain if plain != text else None


CHANGES = {"reworded": reworded, "appended": appended, "dropped": dropped, "figure": figure_changed}
CHANGES["reformatted"] = reformatted


def in_sections(found: Sequence[Paragraph]) -> list[Paragraph]:
    return [p for p in found if section_key(p.heading) in SECTIONS]


def editable(p: Paragraph) -> bool:
    return len(p.text.split()) >= MIN_WORDS and "\n" not in p.text.strip()


def same_text(text: str) -> str:
    return " ".join(text.split())


def span_of(text: str, raw: str) -> tuple[int, int] | None:
    """Where a paragraph's words lie in its chunk's raw text, whatever whitespace or line breaks
    (a hyphen may end a line) part them."""
    pattern = r"\s+".join(re.escape(word).replace(r"\-", r"-\s*") for word in text.split())
    found = re.search(pattern, raw)
    return found.span() if found else None


def line_width(chunks: list[Chunk]) -> int:
    """The width a filing's PDF pages are wrapped at: the 90th percentile of its long lines."""
    lengths = sorted(len(s) for c in chunks for line in c.text.split("\n") if len(s := line.strip()) >= 50)
    return lengths[int(0.9 * (len(lengths) - 1))] if lengths else 100


def laid_out(text: str, raw: str, width: int) -> str:
    """A paragraph as its chunk writes one: wrapped at the filing's line width on a PDF page (text
    with no blank lines), else one line; between blank lines, so that where a wrapped paragraph
    ends (a guess on a PDF page) is not what an edit changes."""
    if "\n\n" in raw or not raw.strip():
        return f"\n\n{text}\n\n"
    return "\n\n" + "\n".join(textwrap.wrap(text, width=width)) + "\n\n"


class Editor:
    """Seeded edits made in a filing's raw chunk texts; what each edit should be classed."""

    def __init__(self, chunks: list[Chunk], found: list[Paragraph], donors: list[str], rng: random.Random):
        self.chunks, self.found, self.donors, self.rng = chunks, found, donors, rng
        self.texts = {c.id: c.text for c in chunks}
        self.pages = {c.id: c.page or c.index for c in chunks}
        self.width = line_width(chunks)
        self.truth: dict[str, str] = {}  # edited or inserted paragraph text -> edit kind
        self.removed: list[Paragraph] = []

    def put(self, chunk_id: str, start: int, end: int, text: str | None) -> None:
        """The raw text from ``start`` to ``end`` replaced by a paragraph (or by nothing)."""
        raw = self.texts[chunk_id]
        self.texts[chunk_id] = raw[:start] + (laid_out(text, raw, self.width) if text else "") + raw[end:]

    def edit(self, kind: str, p: Paragraph) -> bool:
        """One edit of ``kind`` at paragraph ``p``; False when it cannot be made there."""
        span = span_of(p.text, self.texts[p.chunk_id])
        if span is None:
            return False
        if kind == "removed":
            self.put(p.chunk_id, *span, None)
            self.removed.append(p)
            return True
        if kind == "moved":
            away = [q for q in in_sections(self.found) if abs(self.pages[q.chunk_id] - self.pages[p.chunk_id]) >= 2]
            there = self.rng.choice(away) if away else None
            at = span_of(there.text, self.texts[there.chunk_id]) if there else None
            if there is None or at is None:
                return False
            self.put(p.chunk_id, *span, None)
            self.put(there.chunk_id, at[1], at[1], p.text)
            self.truth[same_text(p.text)] = kind
            return True
        donor = self.rng.choice(self.donors)
        changed = donor if kind == "added" else CHANGES[kind](p.text, donor, self.rng)
        if changed is None or same_text(changed) in self.truth:
            return False
        self.put(p.chunk_id, span[1] if kind == "added" else span[0], span[1], changed)
        self.truth[same_text(changed)] = kind
        return True


def next_period(chunks: list[Chunk], found: list[Paragraph], donors: list[str], rng: random.Random) -> NextPeriod:
    """The filing's chunks with the seeded edits made in their raw text (furniture and layout
    kept), each at a paragraph of Risk Factors or MD&A drawn without replacement."""
    editor = Editor(chunks, found, donors, rng)
    targets = [p for p in in_sections(found) if editable(p) and span_of(p.text, editor.texts[p.chunk_id])]
    rng.shuffle(targets)
    for kind, n in EDITS.items():
        done = 0
        while done < n and targets:
            done += editor.edit(kind, targets.pop())
    edited = [c.model_copy(update={"text": editor.texts[c.id]}) for c in chunks]
    return NextPeriod(edited, editor.truth, editor.removed)


# -- scoring ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """A filing's paragraphs (previous), its next period's in Risk Factors and MD&A (current),
    the previous ones there (cited), and the truth: each edited paragraph's kind, the removed."""

    name: str
    current: list[Paragraph]
    previous: list[Paragraph]
    cited: list[Paragraph]
    truth: dict[str, str]
    removed: set[Paragraph]


def company(name: str) -> str:
    """The company a filing's name starts with: NVIDIA's "nvda-10q-2025-08-27", "VERIZON_2022_10K"."""
    return re.split(r"[-_]", name, maxsplit=1)[0].lower()


def make_case(name: str, chunks: list[Chunk], previous: list[Paragraph], donors: dict[str, list[str]]) -> Case | None:
    cited = in_sections(previous)
    if len(cited) < MIN_PARAGRAPHS:
        return None
    others = [text for owner, texts in sorted(donors.items()) if owner != company(name) for text in texts]
    made = next_period(chunks, previous, others, rng_for(name))
    current = in_sections(paragraphs(made.chunks))
    return Case(name, current, previous, cited, made.truth, set(made.removed))


def rng_for(name: str) -> random.Random:
    return random.Random(SEED ^ zlib.crc32(name.encode()))


@dataclasses.dataclass
class Rows:
    """The rows of some cases compared with one counterpart threshold, as arrays; the unchanged
    threshold is applied afterwards. A row is a current paragraph (true class unchanged,
    modified or added) or a removed row (a cited paragraph nothing took: truly removed or kept)."""

    truth: np.ndarray
    kind: np.ndarray  # the edit made ("untouched" for none); "cited" for a removed row
    matched: np.ndarray
    similarity: np.ndarray
    same_figures: np.ndarray
    seeded_removals: int

    def predicted(self, high: float) -> np.ndarray:
        unchanged = self.matched & (self.similarity >= high) & self.same_figures
        current = np.where(self.matched, np.where(unchanged, "unchanged", "modified"), "added")
        return np.where(self.kind == "cited", "removed", current)

    def f1(self, high: float) -> float:
        """Macro F1 of the four classes; a removed paragraph that a current one took is a miss."""
        predicted, scores = self.predicted(high), []
        for label in CLASSES:
            tp = int(np.sum((self.truth == label) & (predicted == label)))
            fp = int(np.sum((self.truth != label) & (predicted == label)))
            fn = (self.seeded_removals if label == "removed" else int(np.sum(self.truth == label))) - tp
            scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0)
        return sum(scores) / len(scores)

    def share(self, high: float, kind: str, label: str) -> float:
        of_kind = self.kind == kind
        return float(np.sum(of_kind & (self.predicted(high) == label)) / max(1, np.sum(of_kind)))

    def counts(self, high: float, kind: str) -> dict[str, int]:
        return dict(Counter(str(p) for p in self.predicted(high)[self.kind == kind]))


def joined(parts: list[Rows]) -> Rows:
    arrays = [
        np.concatenate([getattr(p, f) for p in parts])
        for f in ("truth", "kind", "matched", "similarity", "same_figures")
    ]
    return Rows(*arrays, sum(p.seeded_removals for p in parts))


def compared(cases: list[Case], low: float) -> Rows:
    truth, kind, matched, similarity, same_figures = [], [], [], [], []
    for case in cases:
        for c in compare(case.current, case.previous, case.cited, counterpart_min=low, unchanged_min=2.0):
            if c.current is None:
                truth.append("removed" if c.previous in case.removed else "kept")
                kind.append("cited")
            else:
                edit = case.truth.get(same_text(c.current.text), "untouched")
                truth.append(TRUTH.get(edit, "unchanged"))
                kind.append(edit)
            matched.append(c.current is not None and c.previous is not None)
            similarity.append(c.similarity)
            same_figures.append(bool(c.current and c.previous and c.current.figures == c.previous.figures))
    removals = sum(len(case.removed) for case in cases)
    return Rows(*map(np.array, (truth, kind, matched, similarity, same_figures)), removals)


def fit(cases: list[Case]) -> tuple[float, float, float]:
    """The thresholds with the best macro F1 over ``cases``; among ties the one nearest their middle."""
    grid: dict[tuple[float, float], float] = {}
    by_low: dict[float, list[Rows]] = {low: [] for low in LOW_GRID}
    for case in cases:  # each case's previous filing is indexed once for every threshold
        for low in LOW_GRID:
            by_low[low].append(compared([case], low))
    for low, parts in by_low.items():
        found = joined(parts)
        for high in HIGH_GRID:
            grid[(low, high)] = found.f1(high)
    best = max(grid.values())
    for low in sorted({k[0] for k, v in grid.items() if v >= best - 1e-9}):
        profile = " ".join(f"{h}:{grid[(low, h)]:.4f}" for h in HIGH_GRID[-12:])
        print(f"fit: counterpart_min={low}, f1 by unchanged_min: {profile}", flush=True)
    ties = [k for k, v in grid.items() if v >= best - 1e-9]
    high = max(k[1] for k in ties)
    print("fit: f1 by counterpart_min: " + " ".join(f"{lo}:{grid[(lo, high)]:.4f}" for lo in LOW_GRID), flush=True)
    middle = (statistics.median(k[0] for k in ties), statistics.median(k[1] for k in ties))
    low, high = min(ties, key=lambda k: (abs(k[0] - middle[0]) + abs(k[1] - middle[1]), k))
    return low, high, best


def compare_ms(cases: list[Case]) -> tuple[float, float]:
    """Median CPU milliseconds (one core; the machine may be shared) to compare five cited chunks'
    paragraphs with a whole previous filing: the first time that filing is compared (its vectors
    built), and again (kept)."""
    cold, warm = [], []
    for case in cases:
        chunk_ids = sorted({p.chunk_id for p in case.current})
        cited = set(rng_for(case.name).sample(chunk_ids, min(5, len(chunk_ids))))
        previous = [dataclasses.replace(p) for p in case.previous]
        changes._index.cache_clear()  # as a process that has not seen this filing yet
        for times in (cold, warm):
            current = [dataclasses.replace(p) for p in in_chunks(case.current, cited)]
            started = time.process_time()
            compare(current, previous)
            times.append(1000 * (time.process_time() - started))
    return statistics.median(cold), statistics.median(warm)


# -- consecutive real filings ----------------------------------------------------------------------

_YEAR = re.compile(r"^(?P<company>.+)_(?P<year>\d{4})_10K$")


def consecutive(names: Sequence[str]) -> list[tuple[str, str]]:
    """(previous, next) FinanceBench 10-Ks of one company a year apart."""
    years = {m["company"] + m["year"]: n for n in names if (m := _YEAR.match(n))}
    pairs = []
    for name in sorted(names):
        if (m := _YEAR.match(name)) and (before := years.get(m["company"] + str(int(m["year"]) - 1))):
            pairs.append((before, name))
    return pairs


def real_counts(read: dict[str, list[Paragraph]], pairs: list[tuple[str, str]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for before, after in pairs:
        previous = read[before]
        changes = compare(in_sections(read[after]), previous, in_sections(previous))
        counts = Counter(c.change for c in changes)
        print(f"real {before} -> {after}: {dict(counts)}", flush=True)
        total += counts
    return total


# -- the figures -----------------------------------------------------------------------------------


def figures(quick: bool = False) -> dict[str, float | int | str]:
    """Seeded edits fitted on one half and scored on the other, the anchor, and real pairs."""
    with tempfile.TemporaryDirectory() as tmp:
        filings = edgar_filings(Path(tmp))
    filings |= financebench_filings(QUICK_FINANCEBENCH if quick else None)
    read = {name: paragraphs(chunks) for name, chunks in sorted(filings.items())}
    donors: dict[str, list[str]] = {}
    for name, found in read.items():
        donors.setdefault(company(name), []).extend(p.text for p in in_sections(found) if editable(p))
    cases = [case for name in read if (case := make_case(name, filings[name], read[name], donors))]
    halves = [cases[0::2], cases[1::2]]
    print(f"{len(cases)} filings with edits: fit on {len(halves[0])}, scored on {len(halves[1])}", flush=True)
    low, high, fitted_f1 = fit(halves[0])
    print(f"fitted on half 0: counterpart_min={low} unchanged_min={high} f1={fitted_f1:.4f}", flush=True)
    held = compared(halves[1], low)
    anchor = compared(halves[1], ANCHOR[0])
    shipped = compared(halves[1], COUNTERPART_MIN)
    for kind in (*EDITS, "untouched", "cited"):
        print(f"held-out {kind}: {held.counts(high, kind)} (anchor: {anchor.counts(ANCHOR[1], kind)})", flush=True)
    real = real_counts(read, consecutive(list(filings)))
    cold_ms, warm_ms = compare_ms(halves[1])
    return {
        "change_f1": round(held.f1(high), 4),
        "figure_change_recall": round(held.share(high, "figure", "modified"), 4),
        "moved_unchanged": round(held.share(high, "moved", "unchanged"), 4),
        "counterpart_min": low,
        "unchanged_min": high,
        "anchor_change_f1": round(anchor.f1(ANCHOR[1]), 4),
        "anchor_figure_change_recall": round(anchor.share(ANCHOR[1], "figure", "modified"), 4),
        "anchor_moved_unchanged": round(anchor.share(ANCHOR[1], "moved", "unchanged"), 4),
        "shipped_change_f1": round(shipped.f1(UNCHANGED_MIN), 4),
        "compare_ms": round(cold_ms, 1),
        "compare_warm_ms": round(warm_ms, 1),
        "filings": len(cases),
        **{f"real_{k}": real.get(k, 0) for k in CLASSES},
    }


# -- runs with --compare previous ------------------------------------------------------------------

BUNDLED = ROOT / "prism" / "data" / "edgar"
# NVIDIA's next quarter: its 10-Q copied and relabelled by a metadata file (which wins over the
# filing's own dei facts) as the third quarter of fiscal 2026, filed in November.
NEXT_QUARTER = ("nvda-10q-2025-08-27.html", "nvda-10q-2025-11-19")
NEXT_QUARTER_META = {"fiscal_quarter": 3, "period_end": "2025-10-26", "filed": "2025-11-19"}
# And the quarter before the bundled one, ingested before the first night, so that night has an
# earlier filing to rank for NVIDIA's questions (the bundled filings are one a company).
EARLIER_QUARTER = ("nvda-10q-2025-08-27.html", "nvda-10q-2025-05-28")
EARLIER_QUARTER_META = {"fiscal_quarter": 1, "period_end": "2025-04-27", "filed": "2025-05-28"}
# Every bundled question names its period; this one asks for the latest, so the new quarter is
# chosen for it on the second night and the quarter before becomes its earlier filing.
LATEST = {
    "id": "nvda-latest",
    "question": "What does NVIDIA say about export controls on H20?",
    "scope": {"company": "NVIDIA"},
}
QUICK_EDGAR_QUESTIONS = 12  # as bench/edgar.py --quick
QUICK_FINANCEBENCH_QUESTIONS = 20  # as bench/corpus.py --quick


def run_files(results: Path, run_id: str) -> tuple[list[dict], dict[str, int]]:
    """A run's chunk plan rows and its calls by query id."""
    folder = results / "runs" / run_id
    rows = [json.loads(line) for line in (folder / "plan.jsonl").read_text().splitlines() if line.strip()]
    cost = json.loads((folder / "cost.json").read_text())
    return [r for r in rows if r.get("task") == "chunks" and r.get("filing")], {
        j["query_id"]: j["calls"] for j in cost["jobs"]
    }


def nights(work: Path, quick: bool) -> dict[str, int]:
    """Two `--new --compare previous` nights over the bundled filings on the oracle simulator,
    chunks by the LLM: the calls the first spends on earlier filings, and the calls the second
    (NVIDIA's next quarter ingested) spends on earlier filings the first had ranked already."""
    from edgar import oracle_queries, question_set, read_jsonl

    from prism.testing.simulator import Simulator, SimulatorConfig
    from workers.testing import fleet_env, prism_cli

    store = LocalStore(work / "corpus")
    ingest_source(BUNDLED / "filings", store)
    relabelled(work / "earlier", EARLIER_QUARTER, EARLIER_QUARTER_META, store)
    questions = read_jsonl(BUNDLED / "questions.jsonl")[: QUICK_EDGAR_QUESTIONS if quick else None] + [LATEST]
    question_set(work / "questions.jsonl", questions)
    corpus, results = Corpus(store), work / "results"
    filings = {fid: corpus.get_filing(fid) for fid in corpus.catalog.all_filings()}
    queries, _ = oracle_queries(questions, filings, read_jsonl(SHARED / "edgar" / "truth.jsonl"))
    with Simulator(SimulatorConfig(mode="oracle", noise=0.2, seed=7)) as sim:
        sim.add_queries(queries)
        env = fleet_env(None, None, sim.url, PRISM_RESULTS=str(results), PRISM_CHUNK_RANKER="llm")
        night = ["run", "--questions", "questions.jsonl", "--corpus", str(work / "corpus"), "--new"]
        night += ["--compare", "previous", "--run-id"]
        ended(prism_cli([*night, "night-1"], env, work))
        first, first_calls = run_files(results, "night-1")
        relabelled(work / "next", NEXT_QUARTER, NEXT_QUARTER_META, store)
        ended(prism_cli([*night, "night-2"], env, work))
        second, second_calls = run_files(results, "night-2")
    ranked = {(r["question_id"], r["filing"], r["version"]) for r in first}
    earlier = [r for r in second if r.get("previous_of")]
    extra = [r for r in earlier if (r["question_id"], r["filing"], r["version"]) in ranked]
    print(f"night 2 earlier filings: {[(r['query_id'], r['state']) for r in earlier]}", flush=True)
    return {
        "first_night_calls": sum(first_calls.values()),
        "first_night_previous_calls": sum(first_calls.get(r["query_id"], 0) for r in first if r.get("previous_of")),
        "first_night_no_previous": sum(1 for r in first if r.get("previous") is None and not r.get("previous_of")),
        "second_night_calls": sum(second_calls.values()),
        "second_night_previous_reused": sum(1 for r in extra if r["state"] == "reused"),
        "second_night_extra_calls": sum(second_calls.get(r["query_id"], 0) for r in extra),
    }


def relabelled(folder: Path, copy: tuple[str, str], meta: dict, store: LocalStore) -> None:
    """A bundled filing copied under another name, its period set by a metadata file, ingested."""
    folder.mkdir()
    source, name = copy
    (folder / f"{name}.html").write_bytes((BUNDLED / "filings" / source).read_bytes())
    (folder / f"{name}.meta.json").write_text(json.dumps(meta))
    ingest_source(folder, store)


def question_sets(work: Path, quick: bool) -> list[tuple[Path, Path]]:
    """(corpus, questions) of the shared EDGAR filings and of the FinanceBench filings, ingested."""
    import corpus as financebench
    from edgar import FILINGS, QUESTIONS, question_set, read_jsonl

    edgar = work / "edgar"
    ingest_source(FILINGS, LocalStore(edgar / "corpus"))
    question_set(edgar / "questions.jsonl", read_jsonl(QUESTIONS)[: QUICK_EDGAR_QUESTIONS if quick else None])
    bench = work / "financebench"
    bench.mkdir()
    rows = financebench.question_rows(QUICK_FINANCEBENCH_QUESTIONS if quick else None)
    pages = financebench.PAGES
    if quick:  # the filings of the questions' companies, so that their earlier ones are there
        from ingest import by_filing

        wanted = {company_of_doc(q["doc_name"]) for q in rows}
        kept = [line for doc, lines in by_filing(None).items() if company_of_doc(doc) in wanted for line in lines]
        pages = bench / "pages.jsonl.gz"
        pages.write_bytes(gzip.compress("".join(kept).encode()))
    ingest_source(pages, LocalStore(bench / "corpus"), meta=financebench.DOC_INFO)
    financebench.question_set(bench / "questions.jsonl", rows)
    return [(edgar / "corpus", edgar / "questions.jsonl"), (bench / "corpus", bench / "questions.jsonl")]


def company_of_doc(name: str) -> str:
    """FinanceBench's company part of a document name ("AMERICANWATERWORKS_2021_10K")."""
    return name.rsplit("_", 2)[0]


def children_cpu() -> float:
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def compare_overhead(work: Path, quick: bool) -> dict[str, float]:
    """The CPU seconds of the two question sets' runs at $0 (`prism run`, embedded, each on a
    copy of its corpus and into a results store of its own, so neither reuses the other's
    inputs or results), with `--compare previous` over without."""
    import shutil

    from workers.testing import fleet_env, prism_cli

    cpu, earlier, rows = {"without": 0.0, "with": 0.0}, 0, Counter[str]()
    for corpus, questions in question_sets(work, quick):
        for kind, extra in (("without", []), ("with", ["--compare", "previous"])):
            home = corpus.parent / kind
            shutil.copytree(corpus, home / "corpus")
            env = fleet_env(None, None, None, PRISM_RESULTS=str(home / "results"))
            args = ["run", "--questions", str(questions), "--corpus", str(home / "corpus"), "--run-id", kind, *extra]
            before = children_cpu()
            ended(prism_cli(args, env, home))
            spent = children_cpu() - before
            print(f"{corpus.parent.name} {kind} --compare previous: {spent:.1f} CPU s", flush=True)
            cpu[kind] += spent
        plan, _ = run_files(home / "results", "with")
        earlier += sum(1 for r in plan if r.get("previous_of"))
        with (home / "results" / "runs" / "with" / "evidence.csv").open() as table:
            rows += Counter(r["change"] for r in csv.DictReader(table))
    print(f"compared at $0: {earlier} earlier filings ranked; evidence rows by change {dict(rows)}", flush=True)
    return {
        "compare_overhead": round(cpu["with"] / cpu["without"], 3),
        "compare_cpu_s": round(cpu["with"], 1),
        "compare_earlier_pairs": earlier,
        "compare_changed_rows": rows["modified"] + rows["added"] + rows["removed"],
    }


def main() -> None:
    args = parser(__doc__).parse_args()
    started = time.perf_counter()
    found = figures(args.quick)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "nights").mkdir()
        found |= nights(Path(tmp) / "nights", args.quick)
        found |= compare_overhead(Path(tmp), args.quick)
    found["wall_s"] = round(time.perf_counter() - started, 1)
    report(**found)


if __name__ == "__main__":
    main()
