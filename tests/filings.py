"""Small filings made by the tests: PDFs written with fpdf2 (and pypdf for encryption), an
EDGAR-like 10-K in HTML."""

from __future__ import annotations

import io

import pypdf
from fpdf import FPDF
from PIL import Image


def pdf(pages: list[str | None], image_pages: frozenset[int] = frozenset()) -> bytes:
    """One page per entry: its text, or None for a page with no text (an image where asked)."""
    doc = FPDF()
    doc.set_font("helvetica", size=11)
    for number, text in enumerate(pages):
        doc.add_page()
        if text:
            doc.multi_cell(0, 6, text)
        if number in image_pages:
            doc.image(Image.new("RGB", (40, 40), "gray"), x=20, y=60, w=60)
    return bytes(doc.output())


def encrypted(data: bytes, user_password: str) -> bytes:
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(data))
    writer.encrypt(user_password, owner_password="owner-secret", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def edgar_html(risk_paragraphs: int = 3, company: str = "ACME WIDGETS, INC.") -> bytes:
    risks = "".join(
        f"<p>Risk {i}: supply of widget parts may be interrupted by events in region {i}, "
        "which could reduce our revenue and margins in the affected quarters.</p>"
        for i in range(1, risk_paragraphs + 1)
    )
    return f"""<html><head><meta charset="windows-1252"><title>acme-10k</title></head><body>
<p style="text-align:center"><b>UNITED STATES<br>SECURITIES AND EXCHANGE COMMISSION</b></p>
<p>FORM 10-K</p>
<p>ANNUAL REPORT PURSUANT TO SECTION 13 OR 15(d)</p>
<p>For the fiscal year ended December 31, 2023</p>
<p>{company}</p>
<p>(Exact name of registrant as specified in its charter)</p>
<table><tr><td>Item 1.</td><td>Business</td><td>3</td></tr>
<tr><td>Item 1A.</td><td>Risk Factors</td><td>9</td></tr>
<tr><td>Item 7.</td><td>Management\u2019s Discussion and Analysis</td><td>20</td></tr></table>
<p><b>PART I</b></p>
<p><b>Item&#160;1.&nbsp;Business</b></p>
<p>We make widgets \u2013 many of them \u2013 and sell them in <span>forty</span> countries.</p>
<p><b>ITEM 1A. RISK FACTORS</b></p>{risks}
<p><b>PART II</b></p>
<p><b>Item 7. Management\u2019s Discussion and Analysis of Financial Condition</b></p>
<p>Revenue grew 12% to $4.2 billion, as described in Item 1A of this report.</p>
</body></html>""".encode("cp1252")


def annual_report(folder, name: str, company: str, year: int, paragraphs: list[str], cik: str | None = None) -> None:
    """A company's 10-K for a fiscal year as HTML (a paragraph a <p>, under an MD&A heading,
    written as given: markup in a paragraph stays markup) with its metadata file beside it."""
    import json

    head = [company.upper(), "FORM 10-K", f"Annual report for fiscal {year}"]
    mdna = "Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations"
    body = "".join(f"<p>{p}</p>" for p in [*head, mdna, *paragraphs])
    (folder / f"{name}.html").write_text(f"<html><body>{body}</body></html>")
    meta = {"company": company, "form_type": "10-K", "fiscal_year": year} | ({"cik": cik} if cik else {})
    (folder / f"{name}.meta.json").write_text(json.dumps(meta))
