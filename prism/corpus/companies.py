"""A corpus's company index and how a question's scope names a company in it.

A company is a CIK: its filings under every name it filed as (a name filed without a CIK joins the
one CIK filing under that name). A scope matches by CIK, then whole name, then ticker; failing
those, by a name's first words, and only when they fit one company (an exact name is never lost
to a longer one: "Apple" is not "Apple Hospitality").

The index is held as columns (pyarrow) and each scope is looked up by vectorised comparisons, so
an index of a hundred thousand companies costs a planning process milliseconds a question, not
seconds to build dictionaries of every name.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from prism.ingest.models import FilingMeta

if TYPE_CHECKING:
    import pyarrow as pa

CompanyId = int | str  # a CIK, or the name key of filings that carry none
COLUMNS = ("company", "name", "ticker", "cik", "words")

# Legal-form words a name may end in, any number of them ("Acme Co., Inc."). "Holdings" and "Group"
# stay: a parent and its subsidiary can both file ("Icahn Enterprises Holdings L.P." beside "Icahn
# Enterprises L.P."), and a scope without them still reaches such a name by its first words.
LEGAL_FORMS = frozenset("inc incorporated corp corporation co company ltd limited llc lp plc nv sa ag se".split())
_CIK = re.compile(r"(?:cik)?\s*(\d{1,10})", re.IGNORECASE)


def company_words(name: str) -> tuple[str, ...]:
    """A company name's words, lower case, without a leading "The", its legal form, "&" or "and",
    or an EDGAR state tag ("LOUISVILLE GAS & ELECTRIC CO /KY/": louisville gas electric)."""
    text = re.sub(r"(\s*[/\\][a-z]+[/\\]?)+\s*$", "", name.lower())
    text = re.sub(r"(?<=\b[a-z])\.(?=[a-z]\b)|['\u2019]", "", text)  # "L.P.": lp, "Macy's": macys
    words = [w for w in re.split(r"[^a-z0-9]+", text) if w and w != "and"]
    while len(words) > 1 and words[-1] in LEGAL_FORMS:
        words.pop()
    return tuple(words[1:] if len(words) > 1 and words[0] == "the" else words)


def company_key(name: str) -> str:
    """Companies match whatever their case, spacing, punctuation and legal form ("Johnson & Johnson",
    "JOHNSON_JOHNSON"; "THE BUCKLE, INC.", "Buckle")."""
    return "".join(company_words(name))


def cik_number(text: str | None) -> int | None:
    """A CIK as a number, however written ("1045810", "0001045810", "CIK0001045810"); None if not one."""
    found = _CIK.fullmatch(text.strip()) if text else None
    return int(found[1]) if found else None


class CompanyRow(NamedTuple):
    """One entry of a corpus's company index: a name and ticker a company filed under."""

    company: str  # company_of's value: the CIK as a number, else the name's key
    name: str
    ticker: str
    cik: str
    words: str  # the name's company_words, a space apart: what a scope's name is matched against


def company_of(meta: FilingMeta) -> str:
    """The company a filing is catalogued under: its CIK as a number, else its name's key ("" for
    neither, reached only by an unscoped question)."""
    cik = cik_number(meta.cik)
    if cik is not None:
        return str(cik)
    return company_key(meta.company) if meta.company else ""


def index_row(meta: FilingMeta) -> CompanyRow:
    """The index entry a filing's identity gives."""
    name = meta.company or ""
    return CompanyRow(company_of(meta), name, meta.ticker or "", meta.cik or "", " ".join(company_words(name)))


class CompanyIndex:
    """The company index as columns: catalogue value, name, ticker, CIK and the name's words."""

    def __init__(self, table: pa.Table) -> None:
        import pyarrow.compute as pc

        table = table.sort_by([(c, "ascending") for c in COLUMNS[:4]])
        has_cik = pc.and_(pc.utf8_is_digit(table["company"]), pc.not_equal(table["cik"], ""))
        self.table = table
        self.key = pc.replace_substring(table["words"], " ", "")
        self.cik = pc.if_else(has_cik, pc.cast(pc.if_else(has_cik, table["company"], "0"), "int64"), None)
        self.ticker = pc.utf8_upper(pc.utf8_trim_whitespace(table["ticker"]))

    @classmethod
    def of_rows(cls, rows: Iterable[CompanyRow]) -> CompanyIndex:
        import pyarrow as pa

        unique = set(rows)
        return cls(pa.table({c: [getattr(r, c) for r in unique] for c in COLUMNS}, schema=schema()))

    # -- a scope's companies ------------------------------------------------------------------

    def match(self, company: str) -> tuple[set[CompanyId], bool]:
        """The companies a scope names, and whether it names them outright (not by first words)."""
        import pyarrow.compute as pc

        cik = cik_number(company)
        if cik is not None and pc.any(pc.equal(self.cik, cik)).as_py():
            return {cik}, True
        key, ticker = company_key(company), company.strip().upper()
        for given, column in ((key, self.key), (ticker, self.ticker)):
            if given and pc.any(found := pc.equal(column, given)).as_py():
                return self._ids(found), True
        if not key:
            return set(), False
        longer = pc.and_(pc.starts_with(self.key, key), pc.not_equal(self.key, key))
        rows = self._rows(longer, "words")
        keys = {"".join(w) for w in (tuple(text.split()) for text in rows["words"]) if _begins(w, key)}
        return (self._ids(pc.is_in(self.key, value_set=_strings(keys))) if keys else set()), False

    def values(self, companies: Iterable[CompanyId]) -> tuple[str, ...]:
        """The catalogue's company values of these companies: a CIK's own, and those of names
        filed without one that join it."""
        rows, ids = self._rows_of(set(companies), "company")
        return tuple(sorted({v for v, i in zip(rows["company"], ids, strict=True) if i is not None}))

    def named(self, companies: Iterable[CompanyId]) -> list[str]:
        """A name each of these companies filed under (the first in the index's order)."""
        rows, ids = self._rows_of(set(companies), "name")
        first: dict[CompanyId, str] = {}
        for key, company, name in zip(rows["key"], ids, rows["name"], strict=True):
            if company is not None and key:
                first.setdefault(company, name)
        return sorted(first.values())

    def closest(self, company: str, n: int = 3) -> list[str]:
        """The names closest to a scope that names no company (for its error)."""
        close = difflib.get_close_matches(company_key(company), list(self._first_names), n=n, cutoff=0.5)
        return [self._first_names[k] for k in close]

    # -- internals ----------------------------------------------------------------------------

    def _rows(self, where: pa.Array, *columns: str) -> dict[str, list]:
        """Some columns of the rows where ``where`` holds, as lists ("key" and "cik" derived)."""
        import pyarrow.compute as pc

        derived = {"key": self.key, "cik": self.cik}
        return {c: pc.filter(derived[c] if c in derived else self.table[c], where).to_pylist() for c in columns}

    def _ids(self, where: pa.Array) -> set[CompanyId]:
        return {i for i in self._id_of(self._rows(where, "key", "cik")) if i != ""}

    def _id_of(self, rows: dict[str, list]) -> list[CompanyId]:
        """Each row's company: its CIK; without one, the one CIK filing under its name, if just
        one does; else its name's key."""
        import pyarrow.compute as pc

        alone = {k for k, c in zip(rows["key"], rows["cik"], strict=True) if c is None and k}
        joins: dict[str, set[int]] = {}
        if alone:
            same = pc.and_(pc.is_in(self.key, value_set=_strings(alone)), pc.is_valid(self.cik))
            for k, c in zip(*self._rows(same, "key", "cik").values(), strict=True):
                joins.setdefault(k, set()).add(c)
        ids: list[CompanyId] = []
        for k, c in zip(rows["key"], rows["cik"], strict=True):
            shared = joins.get(k, set())
            ids.append(c if c is not None else next(iter(shared)) if len(shared) == 1 else k)
        return ids

    def _rows_of(self, companies: set[CompanyId], *columns: str) -> tuple[dict[str, list], list[CompanyId | None]]:
        """The index's rows that may be these companies' (a CIK's own, names under its name's key,
        the names given), in its order, and each one's company (None: another's)."""
        import pyarrow.compute as pc

        ciks = _ints(c for c in companies if isinstance(c, int))
        theirs = pc.is_in(self.cik, value_set=ciks)
        keys = {c for c in companies if isinstance(c, str)} | (set(self._rows(theirs, "key")["key"]) - {""})
        rows = self._rows(pc.or_(theirs, pc.is_in(self.key, value_set=_strings(keys))), "key", "cik", *columns)
        return rows, [i if i in companies else None for i in self._id_of(rows)]

    @cached_property
    def _first_names(self) -> dict[str, str]:
        names: dict[str, str] = {}
        for key, name in zip(self.key.to_pylist(), self.table["name"].to_pylist(), strict=True):
            if key:
                names.setdefault(key, name)
        return names


def _begins(words: tuple[str, ...], key: str) -> bool:
    """Whether a scope's key is a name's first words (fewer than all of them)."""
    return any("".join(words[:n]) == key for n in range(1, len(words)))


def _strings(values: Iterable[str]) -> pa.Array:
    import pyarrow as pa

    return pa.array(sorted(values), pa.string())


def _ints(values: Iterable[int]) -> pa.Array:
    import pyarrow as pa

    return pa.array(sorted(values), pa.int64())


def schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(c, pa.string()) for c in COLUMNS])
