"""A feed day made of real filings, for tests and benchmarks: each real submission (an SGML
``.txt``, a feed ``.nc``) or primary document (``.htm``) copied under a new accession number and
filing date, its header written in the feed's ``<SUBMISSION>`` form (``.nc``) or the SEC header
form (``.txt``), its documents kept byte for byte; and the archive EDGAR ships a day in
(``YYYYMMDD.nc.tar.gz``), a ``.tar`` or a ``.zip`` of them, with the day's form index."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from prism.ingest.sgml import head_fields

_FIELDS = {  # a header's fields, as head_fields names them
    "form": "CONFORMED SUBMISSION TYPE",
    "company": "COMPANY CONFORMED NAME",
    "cik": "CENTRAL INDEX KEY",
    "period": "CONFORMED PERIOD OF REPORT",
}


@dataclass(frozen=True)
class Base:
    """A real filing to copy: its documents (SGML ``<DOCUMENT>`` blocks) and who filed what."""

    name: str
    documents: bytes
    form: str
    company: str
    cik: str
    period: str | None = None


@dataclass(frozen=True)
class Copy:
    """One filing of the day: its member name and bytes, and what its header says."""

    name: str
    data: bytes
    accession: str
    form: str
    company: str
    cik: str
    filed: date


def base_of(path: Path, truth: dict | None = None) -> Base:
    """A real filing as a base: a submission's own header and documents, or an HTML primary
    document wrapped as one document whose form and company ``truth`` gives."""
    data = path.read_bytes()
    start = data.find(b"<DOCUMENT>")
    if start >= 0:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = data.find(b"<DOCUMENT>")
        end = data.rfind(b"</DOCUMENT>") + len(b"</DOCUMENT>")
        fields = head_fields(data[:start])
        values = {key: fields.get(field) for key, field in _FIELDS.items()}
        return Base(path.name, data[start:end] + b"\n", **_required(values, path))  # type: ignore[arg-type]
    if truth is None or not all(truth.get(k) for k in ("form", "company", "cik")):
        raise ValueError(f"{path}: not a submission, and no truth gives its form, company and CIK")
    document = (
        f"<DOCUMENT>\n<TYPE>{truth['form']}\n<SEQUENCE>1\n<FILENAME>{path.name}\n<TEXT>\n".encode()
        + data
        + b"\n</TEXT>\n</DOCUMENT>\n"
    )
    period = (truth.get("period_end") or "").replace("-", "") or None
    return Base(path.name, document, truth["form"], truth["company"], truth["cik"], period)


def _required(values: dict[str, str | None], path: Path) -> dict[str, str | None]:
    missing = [k for k in ("form", "company", "cik") if not values.get(k)]
    if missing:
        raise ValueError(f"{path}: its header gives no {', '.join(missing)}")
    return values


def bases_in(*folders: Path) -> list[Base]:
    """Every filing of the folders that can be a base (a ``truth.jsonl`` beside them gives an
    HTML document's form and company), in name order."""
    out = []
    for folder in folders:
        truth_file = next((p for p in (folder / "truth.jsonl", folder.parent / "truth.jsonl") if p.is_file()), None)
        lines = truth_file.read_text().splitlines() if truth_file else []
        truth = {row["file"]: row for row in map(json.loads, filter(str.strip, lines))}
        for path in sorted(folder.iterdir()):
            if path.suffix.lower() in (".txt", ".nc", ".htm", ".html"):
                try:
                    out.append(base_of(path, truth.get(path.name)))
                except ValueError:
                    continue  # no header or truth says what it is
    return out


def copies(
    bases: list[Base], n: int, day: date, ten_k_every: int = 0, nc_every: int = 2, label: str = "10-K", start: int = 0
) -> Iterator[Copy]:
    """``n`` filings of one day, the bases in turn: each under its own accession number (the
    ``start``-th on), every ``nc_every``-th in the feed's header form (the others in the SEC
    header form), every ``ten_k_every``-th labelled ``label`` in its header (0: none)."""
    for i in range(start, start + n):
        base = bases[i % len(bases)]
        accession = f"{9_000_000_000 + i % 1_000_000_000:010d}-{day.year % 100:02d}-{i + 1:06d}"
        form = label if ten_k_every and i % ten_k_every == 0 else base.form
        feed = nc_every and i % nc_every == 0
        header = _nc_header if feed else _txt_header
        end = b"</SUBMISSION>\n" if feed else b"</SEC-DOCUMENT>\n"
        yield Copy(
            f"{accession}.{'nc' if feed else 'txt'}",
            header(accession, form, base, day) + base.documents + end,
            accession,
            form,
            base.company,
            base.cik,
            day,
        )


def _nc_header(accession: str, form: str, base: Base, day: date) -> bytes:
    period = f"<PERIOD>{base.period}\n" if base.period else ""
    return (
        f"<SUBMISSION>\n<ACCESSION-NUMBER>{accession}\n<TYPE>{form}\n<PUBLIC-DOCUMENT-COUNT>1\n{period}"
        f"<FILING-DATE>{day:%Y%m%d}\n<FILER>\n<COMPANY-DATA>\n<CONFORMED-NAME>{base.company}\n"
        f"<CIK>{base.cik}\n</COMPANY-DATA>\n</FILER>\n"
    ).encode("latin-1", "replace")


def _txt_header(accession: str, form: str, base: Base, day: date) -> bytes:
    period = f"CONFORMED PERIOD OF REPORT:\t{base.period}\n" if base.period else ""
    return (
        f"<SEC-DOCUMENT>{accession}.txt : {day:%Y%m%d}\n<SEC-HEADER>{accession}.hdr.sgml : {day:%Y%m%d}\n"
        f"ACCESSION NUMBER:\t\t{accession}\nCONFORMED SUBMISSION TYPE:\t{form}\nPUBLIC DOCUMENT COUNT:\t\t1\n"
        f"{period}FILED AS OF DATE:\t\t{day:%Y%m%d}\n\nFILER:\n\n\tCOMPANY DATA:\t\n"
        f"\t\tCOMPANY CONFORMED NAME:\t\t\t{base.company}\n\t\tCENTRAL INDEX KEY:\t\t\t{base.cik}\n</SEC-HEADER>\n"
    ).encode("latin-1", "replace")


def write_archive(path: Path, members: Iterable[tuple[str, bytes]], level: int = 6) -> Path:
    """The members as a ``.tar.gz``/``.tgz``, ``.tar`` or ``.zip``, by the path's suffix."""
    name = path.name.lower()
    if name.endswith(".zip"):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as zf:
            for member, data in members:
                zf.writestr(member, data)
        return path
    mode = "w:gz" if name.endswith((".tar.gz", ".tgz")) else "w"
    options = {"compresslevel": level} if mode == "w:gz" else {}
    with tarfile.open(path, mode, **options) as tar:  # type: ignore[call-overload]
        for member, data in members:
            info = tarfile.TarInfo(member)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return path


def form_index(filings: Iterable[Copy]) -> str:
    """The day's form index (``form.YYYYMMDD.idx``) listing the filings."""
    lines = [
        "Description:           Daily Index of EDGAR Dissemination Feed by Form Type",
        "",
        f"{'Form Type':<12}{'Company Name':<62}{'CIK':<12}{'Date Filed':<12}File Name",
        "-" * 140,
    ]
    for f in sorted(filings, key=lambda f: (f.form, f.company)):
        cik = str(int(f.cik))
        lines.append(f"{f.form:<12}{f.company[:60]:<62}{cik:<12}{f.filed:%Y%m%d}    edgar/data/{cik}/{f.accession}.txt")
    return "\n".join(lines) + "\n"
