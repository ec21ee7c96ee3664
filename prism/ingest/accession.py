"""Files of one EDGAR accession (an 8-K and its EX-99.1 press release, saved side by side) are one
filing. They are known as one by the accession number in their path (``0001104659-25-002604``)
or by an EDGAR ``-index.htm`` page beside them, which also gives each document's type."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePosixPath

ACCESSION = re.compile(r"(?<!\d)(\d{10}-\d{2}-\d{6})(?!\d)")
_INDEX = re.compile(r"-index(?:-headers)?\.html?$", re.IGNORECASE)
# "ex99-1.htm", "ex991.htm", "dex991.htm", "exhibit99_1.htm", "_ex99.htm": an exhibit's number in its name
_EXHIBIT = re.compile(r"(?:^|[_\-.])d?ex(?:hibit)?[-_]?(\d{1,3})(?:[-_.]?(\d{1,2}))?(?=[._\-]|$)", re.IGNORECASE)


def accession_of(name: str) -> str | None:
    """The accession number in a file's path (its name or a folder's), if any."""
    found = ACCESSION.findall(name)
    return found[-1] if found else None


def is_index(name: str) -> bool:
    return bool(_INDEX.search(name))


def exhibit_type(name: str) -> str | None:
    """ "EX-99.1" for ``acme_ex99-1.htm``; None for a name that says no exhibit."""
    stem = PurePosixPath(name).stem
    match = _EXHIBIT.search(stem)
    if not match:
        return None
    number, part = match.groups()
    return f"EX-{number}.{part}" if part else f"EX-{number}"


def index_types(data: bytes) -> dict[str, str]:
    """File name -> document type from an EDGAR filing index page (its "Document Format Files"
    table: Seq, Description, Document, Type, Size)."""
    import lxml.html

    types: dict[str, str] = {}
    try:
        tree = lxml.html.document_fromstring(data)
    except Exception:  # noqa: BLE001 - an index page that cannot be read gives no types
        return types
    for row in tree.iter("tr"):
        cells = [" ".join(c.text_content().split()) for c in row.iter("td")]
        for i, cell in enumerate(cells[:-1]):
            name = cell.split()[0] if cell else ""
            if "." in name and cells[i + 1] and not cells[i + 1][0].isdigit():
                types.setdefault(PurePosixPath(name).name.lower(), cells[i + 1])
                break
    return types


def primary_first(names: Iterable[str], types: dict[str, str]) -> list[str]:
    """The accession's files with the form itself first, then its exhibits by number, then others."""

    def key(name: str) -> tuple[int, tuple[int, ...], str]:
        kind = types.get(PurePosixPath(name).name.lower()) or exhibit_type(name) or ""
        if not kind.upper().startswith("EX-"):
            return (0, (), name)
        numbers = tuple(int(n) for n in re.findall(r"\d+", kind))
        return (1, numbers, name)

    return sorted(names, key=key)
